"""Where in the native CPU graph (cpu_fallback/src/ops/where.c): a bool condition and uint8/int8 or float32 branches,
numpy broadcasting of the three (the definition: vkinfer/reference/where.py). A selection copies bits, but for
float32 -0 taken from the branch ORT's merge tests against 0 (reference/where.py zero_side), written as +0, as ORT
does. In a QDQ model DQ -> Where -> Q (ORT: QLinearWhere) stays a float Where between the DQs and the Q, the same
values (tests/importers/test_qdq_rules.py): all three run here, in one native call. 8-bit branches are in their
storage form (4-D NHWC) and the output in its own; the operator reads each operand at its strides along the output's
storage order. Refused (the host runs them): other dtypes, empty outputs, more than 6 axes after merging."""

from __future__ import annotations

import numpy as np

from ..layout import form_perm, is_8bit, u32
from ..model.lowering import EIGHT_BIT, Layer, lower
from ..reference.where import zero_side
from ._axes import MAX_RANK, broadcast_strides, merge, u64

__all__ = ["lower_where"]

_F32 = np.dtype(np.float32)


@lower("cpu", "Where")
def lower_where(ctx, node, backend):
    """A Where of bool, and 8-bit or float32 branches of one dtype, as one where operator (module docstring)."""
    if len(node.inputs) != 3 or not all(node.inputs):
        return None
    c, a, b = node.inputs
    y = node.outputs[0]
    if not all(t in ctx.info for t in (c, a, b, y)):
        return None
    dt = np.dtype(ctx.dtype(a))
    if np.dtype(ctx.dtype(c)) != np.bool_ or np.dtype(ctx.dtype(b)) != dt or np.dtype(ctx.dtype(y)) != dt:
        return None
    if dt not in EIGHT_BIT and dt != _F32:
        return None
    out = tuple(int(s) for s in ctx.shape(y))
    if 0 in out:
        return None
    if not out:
        out_s, st = [1], [[0], [0], [0]]
    else:
        perm = form_perm(out) if is_8bit(dt) else tuple(range(len(out)))
        full = [broadcast_strides(out, ctx.shape(t), ctx.dtype(t)) for t in (c, a, b)]
        out_s, st, _, _ = merge([out[p] for p in perm], [[s[p] for p in perm] for s in full])
        if not out_s:
            out_s, st = [1], [[0], [0], [0]]
    if len(out_s) > MAX_RANK:
        raise ValueError(f"Where: {len(out_s)} axes after merging, past the native graph's 6 (the host runs it)")
    elem, rank, shp = dt.itemsize, len(out_s), u32(out_s)
    zero = zero_side(ctx.shape(c), ctx.shape(a), ctx.shape(b)) if dt == _F32 else 0
    cs, xs, ys = (u64(s) for s in st)

    def emit(g, refs, out_ref, scratch):
        g.add("where", elem, zero, rank, shp, cs, xs, ys, refs[0], refs[1], refs[2], out_ref)
    return Layer(node, [c, a, b], y, emit)
