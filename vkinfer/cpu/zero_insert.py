"""vkinfer:ZeroInsert (the zero insertion of a transposed convolution, vkinfer/model/conv_transpose.py) in the
native CPU graph: one `pad` operator over a 6-D view of the NHWC form.

The form of x (N, C, H, W) is NHWC bytes; read as (N, H, 1, W, 1, C) and padded at the end of the two size-1
axes by s_h - 1 and s_w - 1 fill bytes it becomes (N, H, s_h, W, s_w, C): the NHWC form of the (N, C, H * s_h,
W * s_w) output, with x[n, c, i, j] at (i * s_h, j * s_w). No new C code; the bytes are the kernel's."""

from __future__ import annotations

import numpy as np

from ..layout import flip, u32
from ..model.lowering import Layer, lower


@lower("cpu", "vkinfer:ZeroInsert")
def lower_zero_insert(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    fill = node.inputs[1] if len(node.inputs) > 1 else ""
    if not ctx.quantized(x, y) or len(ctx.shape(x)) != 4 or not ctx.const(fill):
        return None
    strides = node.attrs.get("strides")
    if strides is None or len(strides) != 2 or min(int(s) for s in strides) < 1:
        return None  # the interpreter's kernel reports it
    dt = ctx.dtype(x)
    v = np.asarray(0 if not fill else ctx.g.consts[fill]).reshape(-1)
    if v.size != 1 or (fill and v.dtype != dt):
        return None
    byte = int(np.asarray(v[0]).astype(dt).view(np.uint8)) ^ flip(dt)
    n, c, h, w = ctx.shape(x)
    sh, sw = (int(s) for s in strides)
    shape = u32([n, h, 1, w, 1, c])
    pre, post = u32([0] * 6), u32([0, 0, sh - 1, 0, sw - 1, 0])

    def emit(g, refs, out, scratch):
        g.add("pad", 6, shape, pre, post, byte, refs[0], out)
    return Layer(node, [x], y, emit)
