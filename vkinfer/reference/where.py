"""Where: the reference device's kernel and the specification cpu_fallback/src/ops/where.c follows (8-bit bytes and
float32 in the native graph).

y = condition ? x : y element by element with numpy broadcasting of the three inputs; the condition is bool. A
selection copies its element's bits (a NaN's payload), with one exception that is ONNX Runtime 1.31's: its Where
kernel (where_op.cc) builds x_sel = c ? x : 0 and y_sel = c ? 0 : y, then merges them as `x_sel != 0 ? x_sel :
y_sel`, or, where its broadcaster sees y_sel as the scalar of the innermost axis (`zero_side`), as `y_sel != 0 ?
y_sel : x_sel`. So a floating-point -0 taken from x becomes +0 (in the second case: one taken from y); measured
against ORT on 4374 cases, every broadcast pattern of ranks 0-3 (tests/ops/test_where.py). Integers are unaffected
(0 is 0). In a QDQ model ORT 1.31 makes DQ(x), DQ(y) -> Where -> Q a com.microsoft QLinearWhere, which maps each
branch through a 256-entry table q_out(dq_in(v)) and selects: the same value as vkinfer's float Where between the
same DQs and Q (tests/importers/test_qdq_rules.py), whose three nodes all run natively."""

from __future__ import annotations

import numpy as np

from ._opdef import OpDef


def zero_side(c_shape, x_shape, y_shape) -> int:
    """Which branch ORT's merge turns -0 into +0 (module docstring): 1 for x, 2 for y. ORT's broadcaster decides by
    the innermost axis of x_sel = c ? x : 0 and y_sel = c ? 0 : y (a rank-0 one counts as size 1, an axis of size 1
    is a broadcast one): x_sel's of size 1 -> x (input 0 is tested first), else y_sel's of size 1 -> y, else x."""
    xs = np.broadcast_shapes(tuple(c_shape), tuple(x_shape))
    ys = np.broadcast_shapes(tuple(c_shape), tuple(y_shape))
    x_last, y_last = (xs[-1] if xs else 1), (ys[-1] if ys else 1)
    return 2 if x_last != 1 and y_last == 1 else 1


def where(cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """condition ? x : y with numpy broadcasting; TypeError for a condition that is not bool or branches of two
    types."""
    cond, x, y = np.asarray(cond), np.asarray(x), np.asarray(y)
    if cond.dtype != np.bool_:
        raise TypeError(f"Where: the condition must be bool, got {cond.dtype}")
    if x.dtype != y.dtype:
        raise TypeError(f"Where: x and y must have one type, got {x.dtype} and {y.dtype}")
    try:
        shape = np.broadcast_shapes(cond.shape, x.shape, y.shape)
    except ValueError:
        raise ValueError(f"Where: shapes {list(cond.shape)}, {list(x.shape)}, {list(y.shape)} do not "
                         "broadcast") from None
    out = np.where(np.broadcast_to(cond, shape), x, y).astype(x.dtype, copy=False)
    if x.dtype.kind in "fc":
        side = zero_side(cond.shape, x.shape, y.shape)
        picked = np.broadcast_to(cond if side == 1 else ~cond, shape)
        out = np.where(picked & (out == 0), x.dtype.type(0), out)
    return out


def kernel(node, x: list, memo: dict) -> list:
    """A Where node (the interpreter's kernel)."""
    return [where(x[0], x[1], x[2])]


DEFINITIONS = (OpDef("Where", kernel, "elementwise", (3, (0, 1, 2))),)
