"""com.microsoft QLinearGlobalAveragePool (NCHW, 4-D) in the native CPU graph: ORT's integer sum and one float32
multiply (vkinfer/reference/qlinear_global_average_pool.py)."""

from __future__ import annotations

import numpy as np

from ..model.lowering import Layer, lower, pool_qparams, static_params
from ..reference.qlinear_global_average_pool import global_pool_multiplier


@lower("cpu", "com.microsoft:QLinearGlobalAveragePool")
def lower_gap(ctx, node, backend):
    ins = node.inputs
    x = ins[0]
    if not (ctx.quantized(x) and len(ctx.shape(x)) == 4 and not node.attrs.get("channels_last", 0)
            and static_params(ctx, node, (1, 2, 3, 4))):
        return None
    dt = ctx.dtype(x)
    xs, xz, ys, yz = pool_qparams(ctx, node)
    n, ch, h, w = ctx.shape(x)
    global_pool_multiplier(xs, ys, h * w)  # ORT's range check, with its message
    signed = int(np.dtype(dt) == np.int8)

    def emit(g, refs, out, scratch):
        g.add("qgap", n, h * w, ch, signed, float(xs), int(xz), float(ys), int(yz), refs[0], out)
    return Layer(node, [x], node.outputs[0], emit)
