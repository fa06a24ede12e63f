"""ArgMax and ArgMin of uint8/int8 and float32 tensors in the native CPU graph (cpu_fallback/src/ops/argmax.c), with
ONNX Runtime 1.31's order: ties to the first index (the last with select_last_index), a NaN met first kept and one
met later skipped (the definition: vkinfer/reference/argmax.py). In a QDQ model the ArgMax reads the 8-bit tensor
of its DQ (ORT's dropDQ rule, vkinfer/model/qdq_rules.py drop_argmax_dq). The int64 output is in the host layout;
an 8-bit input may be in the 4-D NHWC form (the operator reads each axis at its own stride). Refused (the host
runs them): other dtypes, empty tensors, more than 6 axes after merging."""

from __future__ import annotations

import numpy as np

from ..layout import u32
from ..model.lowering import EIGHT_BIT, Layer, lower
from ..reference.argmax import OPS
from ._axes import MAX_RANK, merge, order_by, storage_strides, u64

__all__ = ["lower_argmax"]

_F32 = np.dtype(np.float32)


@lower("cpu", *OPS)
def lower_argmax(ctx, node, backend):
    """An ArgMax/ArgMin of an 8-bit or float32 tensor as one argmax operator (module docstring)."""
    x, y = node.inputs[0], node.outputs[0]
    if not (x in ctx.info and y in ctx.info and np.dtype(ctx.dtype(y)) == np.int64):
        return None
    dt = np.dtype(ctx.dtype(x))
    if dt not in EIGHT_BIT and dt != _F32:
        return None
    shape = tuple(int(s) for s in ctx.shape(x))
    if not shape or 0 in shape:
        return None
    rank = len(shape)
    axis = int(node.attrs.get("axis", 0))
    if not -rank <= axis < rank:
        raise ValueError(f"{node.op}: axis {axis} is out of range for rank {rank}")
    axis %= rank
    keep = bool(int(node.attrs.get("keepdims", 1)))
    out_shape = tuple(int(s) for s in ctx.shape(y))
    ys = storage_strides(out_shape, np.int64)
    y_st = [0 if a == axis else ys[a if keep or a < axis else a - 1] for a in range(rank)]
    xs = storage_strides(shape, dt)
    kinds = [int(a == axis) for a in range(rank)]
    sh, x_st, y_st, kinds = order_by(xs, list(shape), xs, y_st, kinds)
    sh, (x_st, y_st), kinds, at = merge(sh, [x_st, y_st], kinds, keep=kinds.index(1))
    if len(sh) > MAX_RANK:
        raise ValueError(f"{node.op}: {len(sh)} axes after merging, past the native graph's 6 (the host runs it)")
    # mode (ops/argmax.c): 0 first index, 1 last, 2 first with NaN winning (a rank-1 input: ORT's Eigen path)
    op, mode = OPS.index(node.op), 1 if int(node.attrs.get("select_last_index", 0)) else 2 if rank == 1 else 0
    is_f32, n, shp, xs_, ys_ = int(dt == _F32), len(sh), u32(sh), u64(x_st), u64(y_st)

    def emit(g, refs, out, scratch):
        g.add("argmax", op, mode, is_f32, n, shp, xs_, ys_, at, refs[0], out)
    return Layer(node, [x], y, emit)
