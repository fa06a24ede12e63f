"""com.microsoft QLinearGlobalAveragePool (NCHW, 4-D) in the native CPU graph: ORT's integer sum and one float32
multiply (vkinfer/reference/qlinear_global_average_pool.py)."""

from __future__ import annotations

import numpy as np

from ..model.lowering import Layer, lower, static_params
from ..reference import _qcheck as qc
from ..reference.qlinear_global_average_pool import global_pool_multiplier


@lower("cpu", "com.microsoft:QLinearGlobalAveragePool")
def lower_gap(ctx, node, backend):
    ins = node.inputs
    x = ins[0]
    if not (ctx.quantized(x) and len(ctx.shape(x)) == 4 and not node.attrs.get("channels_last", 0)
            and static_params(ctx, node, (1, 2, 3, 4))):
        return None
    c, dt = ctx.g.consts, ctx.dtype(x)
    xs, ys = qc.scale("x_scale", c[ins[1]]), qc.scale("y_scale", c[ins[3]])
    xz = qc.zero_point("x_zero_point", c[ins[2]] if ins[2:3] and ins[2] else None, dt)
    yz = qc.zero_point("y_zero_point", c[ins[4]] if ins[4:5] and ins[4] else None, dt)
    n, ch, h, w = ctx.shape(x)
    global_pool_multiplier(xs, ys, h * w)  # ORT's range check, with its message
    signed = int(np.dtype(dt) == np.int8)

    def emit(g, refs, out, scratch):
        g.add("qgap", n, h * w, ch, signed, float(xs), int(xz), float(ys), int(yz), refs[0], out)
    return Layer(node, [x], node.outputs[0], emit)
