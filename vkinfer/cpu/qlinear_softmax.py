"""com.microsoft QLinearSoftmax in the native CPU graph (cpu_fallback/src/ops/qlinear_softmax.c) with ONNX
Runtime's bits: the reference's table (vkinfer/reference/qlinear_softmax.py) and its per-row float32 arithmetic.

The C operator reads the tensor in its CPU form as (outer, len, inner), a row being `len` bytes `inner` apart, so
a softmax over any one axis runs where the tensor lies (4-D NHWC included: the DFL softmax over channels has
contiguous rows, an attention softmax over W rows C apart). Opset < 13 rows (the flattened trailing axes) run
when they are one axis in disguise or the form keeps the host order; otherwise the node stays on the host.
"""

from __future__ import annotations

import math

import numpy as np

from ..layout import form_perm, same_bytes
from ..model.lowering import Layer, lower, static_params
from ..reference import _qcheck as qc
from ..reference.qlinear_softmax import normalized_axis, overflows, row_multiplier, softmax_table


def softmax_view(shape: tuple[int, ...], axis: int, opset: int) -> tuple[int, int, int] | None:
    """(outer, len, inner) of the node's rows in the devices' storage order (vkinfer/layout.py's form_perm):
    element a of row (o, i) at (o * len + a) * inner + i; None where the rows are not such a view."""
    r = len(shape)
    axis = normalized_axis(r, axis)
    if opset < 13:
        moved = [a for a in range(axis, r) if shape[a] != 1]
        if len(moved) > 1:  # several axes flattened into one row: only when the bytes keep the host order
            if not same_bytes(shape):
                return None
            return math.prod(shape[:axis]), math.prod(shape[axis:]), 1
        axis = moved[0] if moved else r - 1
    perm = form_perm(shape)
    dims = [int(shape[p]) for p in perm]
    p = perm.index(axis)
    return math.prod(dims[:p]), dims[p], math.prod(dims[p + 1:])


def softmax_params(ctx, node) -> tuple[np.ndarray, np.float32, int, tuple[int, int, int]] | None:
    """(table, y_mult, y_zero_point, view) of a QLinearSoftmax node a device can run, else None (the host runs it
    and reports what is wrong: a dynamic scale, an overflow ORT leaves undefined, ...)."""
    ins = node.inputs
    x, y = ins[0], node.outputs[0]
    shape = ctx.shape(x)
    opset = node.attrs.get("opset")
    if not (ctx.quantized(x, y) and static_params(ctx, node, (1, 2, 3, 4))) or not shape:
        return None
    if not isinstance(opset, int | np.integer) or opset < 1 or any(int(s) == 0 for s in shape):
        return None
    view = softmax_view(tuple(int(s) for s in shape), node.attrs.get("axis", -1), int(opset))
    if view is None:
        return None
    c = ctx.g.consts
    xs, ys = qc.scale("x_scale", c[ins[1]]), qc.scale("y_scale", c[ins[3]])
    yz = qc.zero_point("y_zero_point", c[ins[4]], ctx.dtype(y)) if len(ins) > 4 and ins[4] else 0
    table = softmax_table(xs, view[1])  # the row length D, for every opset (a legacy row is one view row)
    y_mult = row_multiplier(ys)
    if overflows(table, y_mult):
        return None
    return np.ascontiguousarray(table), y_mult, yz, view


@lower("cpu", "com.microsoft:QLinearSoftmax")
def lower_qlinear_softmax(ctx, node, backend):
    if (p := softmax_params(ctx, node)) is None:
        return None
    table, y_mult, yz, (outer, n, inner) = p
    x, y = node.inputs[0], node.outputs[0]
    signed = int(ctx.dtype(y) == np.int8)

    def emit(g, refs, out, scratch):
        g.add("qlinear_softmax", outer, n, inner, table, float(y_mult), int(yz), signed, refs[0], out)
    return Layer(node, [x], y, emit)
