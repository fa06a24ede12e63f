"""ReduceMax and ReduceMin of integer tensors (uint8/int8 above all), the reference device's kernels and the
specification cpu_fallback/src/ops/byte_reduce.c follows; float32 goes to vkinfer/reference/float_reduce.py (ORT's
loop orders).

In a QDQ model they are what ONNX Runtime 1.31's "drop_no_int16_support_and_positive_scale" rule leaves between a DQ
and a Q of the same positive scalar parameters (vkinfer/model/qdq_rules.py fold_rule): ORT then runs its uint8/int8
reduce kernel on the 8-bit tensor. A maximum or minimum of integers is exact in any order, so the result is the
element numpy's max/min picks: ties cannot differ. Axes: input 1 (opset 18) or the `axes` attribute, negative ones
counted from the end; none reduces every axis unless `noop_with_empty_axes` (then a copy). An empty reduction fills
with the type's lowest (Max) or highest (Min) value, as ORT's reduce aggregators (measured:
tests/ops/test_byte_reduce.py). Other dtypes than integers and float32 (float16, float64) take numpy's max/min
(which propagates NaN), as ONNX's evaluator did for them before.
"""

from __future__ import annotations

import numpy as np

from . import float_reduce
from ._opdef import OpDef

OPS = ("ReduceMax", "ReduceMin")


def norm_axes(op: str, rank: int, axes: list[int] | None, noop_with_empty_axes: bool) -> list[int] | None:
    """Sorted normalised axes; None for a no-op (empty axes with noop_with_empty_axes); ValueError out of range."""
    if not axes:
        return None if noop_with_empty_axes else list(range(rank))
    out = set()
    for a in axes:
        if not -rank <= int(a) < max(rank, 1):
            raise ValueError(f"{op}: axis {a} is out of range for rank {rank}")
        out.add(int(a) % max(rank, 1))
    return sorted(out) if rank else []


def byte_reduce(op: str, x: np.ndarray, axes: list[int] | None, keepdims: bool = True,
                noop_with_empty_axes: bool = False) -> np.ndarray:
    """ReduceMax/ReduceMin (`op`) of a non-float32 tensor x over `axes` (module docstring)."""
    if op not in OPS:
        raise ValueError(f"unknown reduction {op!r}")
    x = np.asarray(x)
    ax = norm_axes(op, x.ndim, axes, noop_with_empty_axes)
    if ax is None:
        return x.copy()
    out_shape = tuple(1 if i in ax else x.shape[i] for i in range(x.ndim)) if keepdims else \
        tuple(n for i, n in enumerate(x.shape) if i not in ax)
    if any(x.shape[i] == 0 for i in ax):
        if np.issubdtype(x.dtype, np.integer):
            info = np.iinfo(x.dtype)
            fill = info.min if op == "ReduceMax" else info.max
        else:
            fill = -np.inf if op == "ReduceMax" else np.inf
        return np.full(out_shape, fill, x.dtype)
    f = np.max if op == "ReduceMax" else np.min
    return np.asarray(f(x, axis=tuple(ax), keepdims=True)).reshape(out_shape).astype(x.dtype, copy=False)


def kernel(node, x: list, memo: dict) -> list:
    """A ReduceMax/ReduceMin node: float32 through float_reduce (ORT's loops), other types through byte_reduce."""
    v = np.asarray(x[0])
    if v.dtype == np.float32:
        return float_reduce.kernel(node, x, memo)
    return [byte_reduce(node.op, v, float_reduce.node_axes(node, x), bool(int(node.attrs.get("keepdims", 1))),
                        bool(int(node.attrs.get("noop_with_empty_axes", 0))))]


DEFINITIONS = tuple(OpDef(op, kernel, "reduce", (1, (0,))) for op in OPS)
