"""ONNX Pad (mode constant, non-negative constant pads) of 8-bit tensors in the native CPU graph."""

from __future__ import annotations

import numpy as np

from ..layout import flip, form_perm, u32
from ..model.lowering import Layer, lower


@lower("cpu", "Pad")
def lower_pad(ctx, node, backend):
    ins, a = node.inputs, node.attrs
    x, y = ins[0], node.outputs[0]
    mode = a.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if not ctx.quantized(x, y) or mode != "constant" or len(ctx.shape(x)) == 5:
        return None
    if len(ins) > 1:
        if not all(ctx.const(n) for n in ins[1:]) or (len(ins) > 3 and ins[3]):
            return None  # runtime pads, or axes: the host
        pads = np.asarray(ctx.g.consts[ins[1]]).reshape(-1)
        value = ctx.g.consts[ins[2]] if len(ins) > 2 and ins[2] else None
    else:
        pads, value = np.asarray(a["pads"]).reshape(-1), a.get("value", 0.0)
    shape, r = ctx.shape(x), len(ctx.shape(x))
    if pads.size != 2 * r or np.any(pads < 0) or r == 0:
        return None
    v = 0 if value is None else np.asarray(value).reshape(-1)[0]
    dt = ctx.dtype(x)
    if np.asarray(v).astype(dt) != v:
        return None  # not representable: the interpreter's kernel reports it
    byte = int(np.asarray(v).astype(dt).view(np.uint8)) ^ flip(dt)
    perm = form_perm(shape)
    fshape = u32([shape[p] for p in perm])
    pre, post = u32([pads[p] for p in perm]), u32([pads[r + p] for p in perm])

    def emit(g, refs, out, scratch):
        g.add("pad", r, fshape, pre, post, byte, refs[0], out)
    return Layer(node, [x], y, emit)
