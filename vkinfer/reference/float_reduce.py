"""float32 ReduceSum, ReduceMean, ReduceMax and ReduceMin with ONNX Runtime 1.31's CPU bits (one intra-op thread),
in numpy: the reference device's kernels and the specification cpu_fallback/src/ops/float_reduce.c follows.

ORT (reduction_ops.cc) merges neighbouring axes of one kind (reduced or kept) into its "fast shape" (size-1 axes
kept) and names it K, R, KR, RK, KRK, RKR or none (`fast_shape`); then (`ort_order`):

- order 1, its RK path (more than 16 rows and more than 256 rows or columns): the first row copied, each further
  row added in turn (Max/Min: taken in turn);
- order 0, its generic loop (RK otherwise, KRK with one outer block, RKR with one kept element, 4+ merged axes):
  each output from 0.0f (sums: so a column of -0 sums to +0) or its first element (Max/Min), its reduced elements
  in row-major order; ReduceMean divides once by (float)count;
- order 2, every axis reduced (R) for Max/Min: Eigen's `maxCoeff()`/`minCoeff()` over the whole buffer (ORT's
  `aggall`), which is 4-lane SSE: two packet accumulators (packets 0, 2, 4, ... and 1, 3, 5, ...), merged, then
  one more packet if one is left, the 4 lanes folded as f(f(l0, l2), f(l1, l3)), then the remaining size % 4
  elements one by one; every f is std::max(a, b) = a < b ? b : a (std::min: b < a ? b : a), so on +0/-0 and on a
  NaN second operand the first operand stays. Measured against ORT with ORT's own (64-byte aligned) buffers:
  tables of +-0 and NaN at every position, sizes 1..40, 63..65, 127..129, 255..257 (tests/ops/test_float_reduce.py);
  ORT's input must be 16-byte aligned for this order (its allocator's are; a user's misaligned graph input shifts
  Eigen's packets).
- None: KR, R for sums, KRK with several outer blocks, RKR with several kept elements: Eigen's vectorised sums or
  MLAS, not reproduced: the reference runs the generic loop's order there (bits may differ from ORT by the
  rounding of the sum; Max/Min differ at most in the sign of a zero or which NaN).

Max keeps the running value unless the next one is greater (Min: smaller), in every order: the first of +0/-0 wins,
a NaN met first stays and one met later is skipped.
"""

from __future__ import annotations

import warnings

import numpy as np

F32 = np.float32
OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")


def fast_shape(shape: tuple[int, ...], axes: list[int]) -> tuple[list[int], list[bool]]:
    """ORT's OptimizeShapeForFastReduce: neighbouring axes of one kind (reduced or kept) merged, size-1 axes kept;
    (merged sizes, reduced flag per merged axis)."""
    sizes: list[int] = []
    red: list[bool] = []
    for i, n in enumerate(shape):
        r = i in axes
        if red and red[-1] == r:
            sizes[-1] *= n
        else:
            sizes.append(n)
            red.append(r)
    return sizes, red


def ort_loop(sizes: list[int], red: list[bool], threads: int = 1) -> int | None:
    """Which plain loop ORT 1.31 runs for a merged shape with `threads` intra-op threads: 1 for the RK path (first
    row copied), 0 for the generic loop, None for an Eigen/MLAS path."""
    p = max(1, threads)
    kind = "".join("R" if r else "K" for r in red)
    if kind in ("R", "KR"):
        return None
    if kind == "RK":
        return 1 if sizes[0] > 16 * p and max(sizes) > 256 * p else 0
    if kind == "KRK":
        return None if sizes[0] >= max(2, p) else 0
    if kind == "RKR":
        return None if sizes[1] >= max(2, p) else 0
    return 0  # four or more merged axes: the generic loop


def ort_order(op: str, sizes: list[int], red: list[bool]) -> int | None:
    """`ort_loop`, plus 2 for a Max/Min over every element (Eigen's 4-lane redux, module docstring)."""
    if op in ("ReduceMax", "ReduceMin") and red == [True]:
        return 2
    return ort_loop(sizes, red)


def fold_first(a: np.ndarray, op: str) -> np.ndarray:
    """The running fold acc = (v > acc ? v : acc) (Min: v < acc) over axis 0 of `a`, from a[0]: the first element
    if it is NaN, else the first occurrence of the largest (smallest) non-NaN value."""
    first = a[0]
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: their first element is NaN anyway
        m = np.nanmax(a, axis=0) if op == "ReduceMax" else np.nanmin(a, axis=0)
    idx = np.argmax(a == m, axis=0)
    r = np.take_along_axis(a, idx[None], axis=0)[0]
    return np.where(np.isnan(first), first, r).astype(F32)


def _f(op: str, a, b):
    """std::max(a, b) (std::min): the first operand on ties and on a NaN second operand."""
    return np.where(a < b, b, a) if op == "ReduceMax" else np.where(b < a, b, a)


def eigen_redux(v: np.ndarray, op: str) -> np.float32:
    """Eigen's maxCoeff()/minCoeff() of a 16-byte aligned float32 vector with 4-lane packets (module docstring)."""
    v = np.asarray(v, F32).reshape(-1)
    n, p = v.size, 4
    full = n // p * p
    if not full:
        return fold_first(v, op)[()] if n else F32(np.nan)
    packets = v[:full].reshape(-1, p)
    if len(packets) == 1:
        r0 = packets[0]
    else:
        pairs = len(packets) // 2 * 2
        r0 = fold_first(packets[0:pairs:2], op)
        r1 = fold_first(packets[1:pairs:2], op)
        r0 = _f(op, r0, r1)
        if len(packets) > pairs:
            r0 = _f(op, r0, packets[pairs])
    res = _f(op, _f(op, r0[0], r0[2]), _f(op, r0[1], r0[3]))
    for x in v[full:]:
        res = _f(op, res, x)
    return F32(res)


def reduce_float(op: str, x: np.ndarray, axes: list[int] | None, keepdims: bool = True,
                 noop_with_empty_axes: bool = False) -> np.ndarray:
    """ORT's float32 reduction `op` of x over `axes` (normalised or negative; None or [] = every axis unless
    noop_with_empty_axes), in ORT's order (module docstring)."""
    if op not in OPS:
        raise ValueError(f"unknown reduction {op!r}")
    x = np.asarray(x)
    if x.dtype != F32:
        raise TypeError(f"{op}: the float kernel takes float32, got {x.dtype}")
    rank = x.ndim
    if not axes:
        if noop_with_empty_axes:
            return x.copy()
        axes = list(range(rank))
    norm = set()
    for a in axes:
        if not -rank <= int(a) < max(rank, 1):
            raise ValueError(f"{op}: axis {a} is out of range for rank {rank}")
        norm.add(int(a) % max(rank, 1))
    axes = sorted(norm) if rank else []
    kept = [i for i in range(rank) if i not in axes]
    out_shape = tuple(1 if i in axes else x.shape[i] for i in range(rank)) if keepdims else \
        tuple(x.shape[i] for i in kept)
    n_red = int(np.prod([x.shape[i] for i in axes], dtype=np.int64))
    n_out = int(np.prod([x.shape[i] for i in kept], dtype=np.int64))
    if n_red == 0:  # ORT: sums of nothing are 0, Max/Min of nothing the lowest/highest float... as numpy's identity
        fill = {"ReduceSum": 0.0, "ReduceMean": np.nan, "ReduceMax": -np.inf, "ReduceMin": np.inf}[op]
        return np.full(out_shape, fill, F32)
    cols = np.ascontiguousarray(np.transpose(x, axes + kept)).reshape(n_red, n_out)
    sizes, red = fast_shape(x.shape, axes)
    order = ort_order(op, sizes, red)
    if op in ("ReduceMax", "ReduceMin"):
        y = np.array([eigen_redux(cols[:, 0], op)], F32) if order == 2 else fold_first(cols, op)
    else:
        acc = cols[0].copy() if order == 1 else F32(0) + cols[0]
        for r in range(1, n_red):
            acc = acc + cols[r]
        y = acc / F32(n_red) if op == "ReduceMean" else acc
    return np.asarray(y, F32).reshape(out_shape)


def node_axes(node, x: list) -> list[int] | None:
    """The node's axes: input 1 (opset 18, ReduceSum 13) or the `axes` attribute; None when absent."""
    if len(x) > 1 and x[1] is not None:
        return [int(a) for a in np.asarray(x[1]).reshape(-1)]
    a = node.attrs.get("axes")
    return [int(v) for v in a] if a is not None and len(a) else None


def kernel(node, x: list, memo: dict) -> list:
    """A float32 reduction node (the interpreter's kernel)."""
    return [reduce_float(node.op, x[0], node_axes(node, x), bool(int(node.attrs.get("keepdims", 1))),
                         bool(int(node.attrs.get("noop_with_empty_axes", 0))))]
