"""8-bit ReduceMax and ReduceMin in the native CPU graph (cpu_fallback/src/ops/byte_reduce.c): what ONNX Runtime
1.31's drop-QDQ rule leaves of DQ -> ReduceMax/ReduceMin -> Q with one positive scale (vkinfer/model/qdq_rules.py
fold_rule), and 8-bit reductions of a model. A maximum of bytes is exact in any order, so any axes and either
keepdims give ORT's bytes (the definition: vkinfer/reference/byte_reduce.py). The input may be in the 4-D NHWC
form and the output in another storage order: the operator reads and writes at each axis' own stride. Refused
(the host runs them): axes that are not constant, empty tensors, more than 6 axes after merging."""

from __future__ import annotations

import numpy as np

from ..layout import u32
from ..model.lowering import EIGHT_BIT, Layer, lower
from ..reference.byte_reduce import OPS
from ._axes import MAX_RANK, merge, order_by, storage_strides, u64
from .float_reduce import reduce_axes

__all__ = ["lower_byte_reduce"]


@lower("cpu", *OPS)
def lower_byte_reduce(ctx, node, backend):
    """An 8-bit ReduceMax/ReduceMin as one byte_reduce (module docstring)."""
    x, y = node.inputs[0], node.outputs[0]
    if not (x in ctx.info and y in ctx.info and ctx.dtype(x) in EIGHT_BIT and ctx.dtype(y) == ctx.dtype(x)):
        return None
    shape = tuple(int(s) for s in ctx.shape(x))
    axes = reduce_axes(ctx, node)
    if axes is None:
        raise ValueError(f"{node.op} with axes that are not constant (the host runs it)")
    if not shape or 0 in shape:
        return None  # a scalar or an empty tensor: the host
    if not axes:
        if int(node.attrs.get("noop_with_empty_axes", 0)):
            n = int(np.prod(shape))

            def copy(g, refs, out, scratch):  # the same shape and form: a byte copy
                g.add("transpose", 1, u32([n]), u32([0]), 1, 0, refs[0], out)
            return Layer(node, [x], y, copy)
        axes = list(range(len(shape)))
    dt = ctx.dtype(x)
    out_shape = tuple(int(s) for s in ctx.shape(y))
    ys = storage_strides(out_shape, dt)
    keep = bool(int(node.attrs.get("keepdims", 1)))
    kept = [a for a in range(len(shape)) if a not in axes]
    y_st = [0 if a in axes else ys[a if keep else kept.index(a)] for a in range(len(shape))]
    kinds = [int(a in axes) for a in range(len(shape))]
    xs = storage_strides(shape, dt)
    sh, x_st, y_st, kinds = order_by(xs, list(shape), xs, y_st, kinds)
    sh, (x_st, y_st), kinds, _ = merge(sh, [x_st, y_st], kinds)
    if 1 not in kinds:  # every reduced axis had size 1: reduce over one of size 1
        sh, x_st, y_st, kinds = [1, *sh], [0, *x_st], [0, *y_st], [1, *kinds]
    if len(sh) > MAX_RANK:
        raise ValueError(f"{node.op}: {len(sh)} axes after merging, past the native graph's 6 (the host runs it)")
    mask = sum(1 << i for i, k in enumerate(kinds) if k)
    op, rank, shp, xs_, ys_ = 0 if node.op == "ReduceMax" else 1, len(sh), u32(sh), u64(x_st), u64(y_st)

    def emit(g, refs, out, scratch):
        g.add("byte_reduce", op, rank, shp, xs_, ys_, mask, refs[0], out)
    return Layer(node, [x], y, emit)
