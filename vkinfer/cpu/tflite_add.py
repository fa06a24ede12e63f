"""TFLite's 8-bit ADD (XNNPACK's fixed point) in the native CPU graph, on equal shapes or a broadcast row: integer
arithmetic, so the canonical domain only moves the zero points. Other broadcasts take the table
(qlinear_lut.py)."""

from __future__ import annotations

import numpy as np

from ..layout import flip
from ..model.lowering import Layer, binary_mode, lower
from ..reference import _qcheck as qc
from ..reference.tflite_add import tflite_add_params


@lower("cpu", "vkinfer:TFLiteAdd")
def lower_tflite_add(ctx, node, backend):
    ins, a = node.inputs, node.attrs
    mode = binary_mode(ctx, node)
    if not mode or (mode == "row" and len(ctx.shape(ins[0])) == 5) or ctx.dtype(node.outputs[0]) != ctx.dtype(ins[0]):
        return None
    c, dt = ctx.g.consts, ctx.dtype(ins[0])
    za, zb, zy = (qc.zero_point("zero_point", c[n], dt) for n in (ins[2], ins[5], ins[7]))
    ma, mb, shift = tflite_add_params(c[ins[1]], c[ins[4]], c[ins[6]])
    qmin, qmax = qc.QRANGE[dt]
    lo = qmin if a.get("activation_min") is None else int(a["activation_min"])
    hi = qmax if a.get("activation_max") is None else int(a["activation_max"])
    if not qmin <= lo <= hi <= qmax:
        return None  # the interpreter's kernel reports it
    k = flip(dt)  # canonical = value + 128 for int8
    n = int(np.prod(ctx.shape(ins[0])))
    period = 0 if mode == "equal" else int(np.prod(ctx.shape(ins[3])))

    def emit(g, refs, out, scratch):
        g.add("tflite_add", n, period, za + k, zb + k, ma, mb, shift, zy + k, lo + k, hi + k, refs[0], refs[1], out)
    return Layer(node, [ins[0], ins[3]], node.outputs[0], emit)
