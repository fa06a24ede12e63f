"""ArgMax and ArgMin with ONNX Runtime 1.31's CPU semantics: the reference device's kernels and the specification
cpu_fallback/src/ops/argmax.c follows (uint8/int8 on canonical bytes, float32).

ORT's ArgMax/ArgMin aggregators walk the axis in order from its first element: the running value is replaced when
the next one is greater (ArgMin: smaller), or greater-or-equal (smaller-or-equal) with `select_last_index`. So ties
give the first index (the last one with select_last_index), a NaN first element stays (no comparison with it is
true) and a NaN met later is skipped; of +0/-0 the first wins (the last with select_last_index). Measured against
ORT with NaN and +-0 at every position (tests/ops/test_argmax.py). numpy's argmax differs on NaN (it returns the
first NaN), so the reference runs the walk itself. Except for a rank-1 input without select_last_index: ORT hands
that one to Eigen's maxCoeff/minCoeff(&index), whose result is numpy's argmax/argmin (the first NaN, else the first
extreme; measured on lengths 1-69, 127-129, 255-257, 1000 and 4099). The output is int64, `keepdims` (default 1)
keeping the axis as size 1. In a QDQ model ArgMax reads the 8-bit tensor of the DQ (ORT's dropDQ rule,
qdq_rules.drop_argmax_dq): DequantizeLinear at a positive scale keeps the order, and ORT's 8-bit kernel sees the
bytes whatever the scale."""

from __future__ import annotations

import numpy as np

from ._opdef import OpDef

OPS = ("ArgMax", "ArgMin")


def arg_reduce(op: str, x: np.ndarray, axis: int = 0, keepdims: bool = True,
               select_last_index: bool = False) -> np.ndarray:
    """ORT's ArgMax/ArgMin (`op`) of x along `axis` (module docstring), int64."""
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}")
    x = np.asarray(x)
    if x.ndim == 0:
        raise ValueError(f"{op}: the input must have at least one axis")
    if not -x.ndim <= int(axis) < x.ndim:
        raise ValueError(f"{op}: axis {axis} is out of range for rank {x.ndim}")
    axis = int(axis) % x.ndim
    n = x.shape[axis]
    if n == 0:
        raise ValueError(f"{op}: axis {axis} is empty")
    out_shape = tuple(1 if i == axis else s for i, s in enumerate(x.shape)) if keepdims else \
        tuple(s for i, s in enumerate(x.shape) if i != axis)
    if x.ndim == 1 and not select_last_index:  # ORT: Eigen's maxCoeff/minCoeff(&index)
        return np.asarray((np.argmax if op == "ArgMax" else np.argmin)(x), np.int64).reshape(out_shape)
    v = np.moveaxis(x, axis, 0)
    if v.dtype == np.bool_:
        v = v.astype(np.uint8)
    acc = v[0].copy()
    idx = np.zeros(acc.shape, np.int64)
    with np.errstate(invalid="ignore"):
        for i in range(1, n):
            w = v[i]
            if op == "ArgMax":
                take = w >= acc if select_last_index else w > acc
            else:
                take = w <= acc if select_last_index else w < acc
            acc = np.where(take, w, acc)
            idx = np.where(take, np.int64(i), idx)
    return idx.reshape(out_shape)


def kernel(node, x: list, memo: dict) -> list:
    """An ArgMax/ArgMin node (the interpreter's kernel)."""
    return [arg_reduce(node.op, x[0], int(node.attrs.get("axis", 0)), bool(int(node.attrs.get("keepdims", 1))),
                       bool(int(node.attrs.get("select_last_index", 0))))]


DEFINITIONS = tuple(OpDef(op, kernel, "reduce", (1, (0,))) for op in OPS)
