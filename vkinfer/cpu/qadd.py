"""com.microsoft QLinearAdd on equal shapes with ONNX Runtime's float arithmetic in the native CPU graph (other
broadcasts and QLinearMul run as tables: qlinear_lut.py)."""

from __future__ import annotations

import numpy as np

from ..model.lowering import Layer, binary_mode, lower
from ..reference import _qcheck as qc
from ..reference.requant import QRANGE
from . import qadd_constants


@lower("cpu", "com.microsoft:QLinearAdd")
def lower_qadd(ctx, node, backend):
    ins = node.inputs
    if binary_mode(ctx, node) != "equal":
        return None
    c, dt = ctx.g.consts, ctx.dtype(ins[0])
    za, zb, zc = (qc.zero_point("zero_point", c[n], dt) if n else 0 for n in (ins[2], ins[5], ins[7]))
    sa, sb, sc = (qc.scale("scale", c[n]) for n in (ins[1], ins[4], ins[6]))
    ra, rb, fixed = qadd_constants(sa, za, sb, zb, sc, zc)
    lo, hi = QRANGE[np.dtype(dt)]
    n = int(np.prod(ctx.shape(ins[0])))
    signed = int(np.dtype(dt) == np.int8)

    def emit(g, refs, out, scratch):
        g.add("qadd", n, signed, ra, rb, fixed, lo, hi, refs[0], refs[1], out)
    return Layer(node, [ins[0], ins[3]], node.outputs[0], emit)
