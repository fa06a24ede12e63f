"""Axis-by-axis strides of tensors in the CPU graph's storage forms, for the operators that read each operand at its
own strides (ops/byte_reduce.c, ops/argmax.c, ops/where.c): 8-bit tensors in vkinfer/layout.py's form (4-D NHWC,
5-D (N, H, W, A, B)), every other dtype in the host layout. Axes of size 1 are dropped and neighbours that every
operand walks alike are merged, which is the merged-broadcast idea of vkinfer/reference/float_minmax.py with
strides, so the native loops see few, long axes."""

from __future__ import annotations

import numpy as np

from ..layout import form_perm, is_8bit

MAX_RANK = 6  # VKI_GRAPH_MAX_RANK


def storage_strides(shape: tuple[int, ...], dtype) -> list[int]:
    """The element stride of each logical axis of a tensor of `shape` and `dtype` in its CPU storage form."""
    perm = form_perm(shape) if is_8bit(dtype) else tuple(range(len(shape)))
    out = [0] * len(shape)
    step = 1
    for p in reversed(perm):
        out[p] = step
        step *= int(shape[p])
    return out


def broadcast_strides(out_shape: tuple[int, ...], shape: tuple[int, ...], dtype) -> list[int]:
    """Strides of an operand of `shape` read along every axis of `out_shape` (numpy broadcasting: 0 where the
    operand has size 1 or lacks the axis)."""
    r = len(out_shape)
    full = (1,) * (r - len(shape)) + tuple(int(s) for s in shape)
    st = [0] * (r - len(shape)) + storage_strides(tuple(shape), dtype)
    return [0 if full[i] == 1 else st[i] for i in range(r)]


def merge(shape: list[int], strides: list[list[int]], kind: list[int] | None = None, keep: int | None = None
          ) -> tuple[list[int], list[list[int]], list[int], int | None]:
    """Drop size-1 axes (but axis `keep`) and merge neighbours a, a+1 of one `kind` where every operand's stride of a
    is its stride of a+1 times the size of a+1. Returns (shape, strides per operand, kinds, the new index of `keep`)."""
    kind = kind if kind is not None else [0] * len(shape)
    sh: list[int] = []
    st: list[list[int]] = [[] for _ in strides]
    kd: list[int] = []
    at = None
    for a, n in enumerate(shape):
        if n == 1 and a != keep:
            continue
        if (sh and a != keep and at != len(sh) - 1 and kd[-1] == kind[a]
                and all(s[-1] == o[a] * n for s, o in zip(st, strides, strict=True))):
            sh[-1] *= n
            for s, o in zip(st, strides, strict=True):
                s[-1] = o[a]
            continue
        if a == keep:
            at = len(sh)
        sh.append(int(n))
        for s, o in zip(st, strides, strict=True):
            s.append(int(o[a]))
        kd.append(kind[a])
    return sh, st, kd, at


def order_by(strides: list[int], *lists: list) -> list[list]:
    """Every list permuted so that `strides` descends (a stable sort: the contiguous axis last where there is one)."""
    idx = sorted(range(len(strides)), key=lambda i: -strides[i])
    return [[v[i] for i in idx] for v in lists]


def u64(seq) -> np.ndarray:
    """Strides for the C library as uint64."""
    return np.ascontiguousarray(np.asarray(seq, dtype=np.int64).astype(np.uint64))
