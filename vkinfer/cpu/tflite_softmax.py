"""TFLite's 8-bit SOFTMAX over the last axis in the native CPU graph, with the reference's float32 table."""

from __future__ import annotations

import numpy as np

from ..layout import same_bytes
from ..model.lowering import Layer, lower, static_params
from ..reference import _qcheck as qc
from ..reference.tflite_softmax import softmax_table


@lower("cpu", "vkinfer:TFLiteSoftmax")
def lower_tflite_softmax(ctx, node, backend):
    ins = node.inputs
    x, y = ins[0], node.outputs[0]
    shape = ctx.shape(x)
    if not (ctx.quantized(x, y) and static_params(ctx, node, (1, 2, 3))) or not shape or not same_bytes(shape):
        return None
    c = ctx.g.consts
    xs, ys = qc.scale("x_scale", c[ins[1]]), qc.scale("y_scale", c[ins[2]])
    yz = qc.zero_point("y_zero_point", c[ins[3]], ctx.dtype(y))
    beta = np.float32(node.attrs.get("beta", 1.0))
    if not np.isfinite(beta):
        return None
    table = np.ascontiguousarray(softmax_table(float(xs), float(beta)))
    cols = int(shape[-1])
    rows = int(np.prod(shape)) // cols

    def emit(g, refs, out, scratch):
        g.add("tflite_softmax", rows, cols, table, int(ctx.dtype(x) == np.int8), float(ys), int(yz),
              int(ctx.dtype(y) == np.int8), refs[0], out)
    return Layer(node, [x], y, emit)
