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
- order 3, the reduced axes innermost (KR, and R for sums): Eigen's redux of each row as ORT maps it in place
  (reduction_ops.h FastReduceKR: `ConstEigenVectorArrayMap(data + d * W, W).sum()`, colwise().maxCoeff() /
  minCoeff() for Max/Min; ORT's aggall `Map(...).sum()` / `mean()` over every element): `eigen_rows`. Row d begins
  d * W floats past ORT's 16-byte aligned buffer, so its first (-d * W) % 4 elements are Eigen's unaligned head;
  the aligned 4-lane packets go to two accumulators (even and odd packets), merged, plus a last odd packet; the
  lanes folded as f(f(l0, l2), f(l1, l3)); then the head and the tail element by element; a row with no whole
  aligned packet folds in order from its first element. ReduceMean then divides once by (float)W (Eigen's mean():
  the same). f is + for sums and std::max / std::min as in order 2. Measured bit-equal to ORT on random shapes and
  tables of ties, +-0 and NaN (tests/ops/test_float_reduce.py).
- order 4, KRK with several outer blocks (FastReduceKRK). Sums: per outer block, ORT's math::MatMul(1, N, K, ones,
  block) is MLAS's M = 1 SGEMM kernel (MlasSgemmKernelM1Avx, vkinfer/reference/float_matmul.py `_m1`): the K rows in
  groups of 4 (then one of 2, then 1), t = ((r0 + r1) + r2) + r3 (each 1 * x exact), y = t + y from y = +0;
  ReduceMean divides once by (float)K. Max/Min: Eigen's rowwise maxCoeff() assigned to the block's output row
  (`eigen_krk`): the output's 16-byte aligned whole packets take Eigen's packetwise redux over the K rows (p = row
  0, then p = f(p, f(f(r[i], r[i+1]), f(r[i+2], r[i+3]))) for i = 1, 5, ... below (K - 1) & ~3, then the rest one
  by one), the unaligned head and the tail of the output row a plain fold from row 0.
- order 5, RKR with several kept elements (FastReduceRKR): per kept index d, each of the d0 contiguous runs of d2
  elements (start i * K * d2 + d * d2) reduced by Eigen as in order 3 (its head by that start); sums add them in
  turn from 0.0f (ReduceMean divides once by (float)(d0 * d2)), Max/Min start from the first run's first element
  and take a run's result when it is greater (smaller).
Every merged shape has one of these orders (measured bit-equal to ORT on random shapes and axes with +-0, NaN and
infinities: tests/ops/test_float_reduce.py).

In the plain loops (orders 0, 1) Max keeps the running value unless the next one is greater (Min: smaller): the
first of +0/-0 wins, a NaN met first stays and one met later is skipped; Eigen's orders follow std::max's operand
order (the first kept on ties and on a NaN second operand) in their own association.
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
    """Which loop ORT 1.31 runs for a merged shape with `threads` intra-op threads: 1 for the RK path (first row
    copied), 0 for the generic loop, 3 for Eigen's redux of each contiguous row (KR, R), 4 for KRK with several
    outer blocks (MLAS's M = 1 SGEMM for sums, Eigen's rowwise redux for Max/Min), 5 for RKR with several kept
    elements (Eigen's redux of each contiguous run)."""
    p = max(1, threads)
    kind = "".join("R" if r else "K" for r in red)
    if kind in ("R", "KR"):
        return 3
    if kind == "RK":
        return 1 if sizes[0] > 16 * p and max(sizes) > 256 * p else 0
    if kind == "KRK":
        return 4 if sizes[0] >= max(2, p) else 0
    if kind == "RKR":
        return 5 if sizes[1] >= max(2, p) else 0
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


def eigen_rows(rows: np.ndarray, starts: np.ndarray, op: str) -> np.ndarray:
    """Eigen's 4-lane redux (sum, or maxCoeff/minCoeff) of each row of a (R, W) float32 array, row r beginning
    starts[r] floats past a 16-byte boundary (module docstring, order 3): (R,) float32."""
    def f(a, b):
        return a + b if op in ("ReduceSum", "ReduceMean") else _f(op, a, b)

    return eigen_fold(rows, starts, f)


def eigen_fold(rows: np.ndarray, starts: np.ndarray, f) -> np.ndarray:
    """Eigen's vectorised redux by `f` (SSE, 4-lane packets) of each row of (R, W) float32 as ORT's Eigen maps see
    it: the row begins `starts[r]` floats past a 16-byte boundary, so its first (-start) % 4 elements are the
    unaligned head; the aligned packets go into two accumulators (even and odd packets), folded, plus a last odd
    packet; the packet's lanes folded as f(f(l0, l2), f(l1, l3)); then the head and the tail elements one by one. A
    row with no whole aligned packet is folded in order."""
    rows = np.asarray(rows, F32)
    n_rows, w = rows.shape
    out = np.empty(n_rows, F32)
    heads = (-np.asarray(starts, np.int64)) % 4
    with np.errstate(all="ignore"):
        for head in np.unique(heads):
            sel = np.nonzero(heads == head)[0]
            v = rows[sel]
            h = int(min(head, w))
            n_al = (w - h) // 4 * 4
            if n_al == 0:
                acc = v[:, 0].copy()
                for i in range(1, w):
                    acc = f(acc, v[:, i])
                out[sel] = acc
                continue
            packets = v[:, h:h + n_al].reshape(len(sel), -1, 4)
            p0 = packets[:, 0]
            if packets.shape[1] > 1:
                p1 = packets[:, 1]
                pairs = packets.shape[1] // 2 * 2
                for k in range(2, pairs, 2):
                    p0 = f(p0, packets[:, k])
                    p1 = f(p1, packets[:, k + 1])
                p0 = f(p0, p1)
                if packets.shape[1] > pairs:
                    p0 = f(p0, packets[:, pairs])
            acc = f(f(p0[:, 0], p0[:, 2]), f(p0[:, 1], p0[:, 3]))
            for i in [*range(h), *range(h + n_al, w)]:
                acc = f(acc, v[:, i])
            out[sel] = acc
    return out


def mlas_m1_sum(blocks: np.ndarray) -> np.ndarray:
    """Sums over axis 1 of (B, K, N) float32 in MLAS's M = 1 SGEMM order with a vector of ones (module docstring,
    order 4): (B, N)."""
    k = blocks.shape[1]
    groups = [(i, 4) for i in range(0, k - k % 4, 4)]
    rest = k - k % 4
    if k % 4 >= 2:
        groups.append((rest, 2))
        rest += 2
    if k % 2:
        groups.append((rest, 1))
    y = None
    with np.errstate(all="ignore"):
        for k0, g in groups:
            t = blocks[:, k0].copy()
            for i in range(k0 + 1, k0 + g):
                t = t + blocks[:, i]
            y = t + F32(0) if y is None else t + y
    return y


def eigen_krk(blocks: np.ndarray, op: str) -> np.ndarray:
    """Max/Min over axis 1 of (B, K, N) float32 as Eigen's rowwise maxCoeff()/minCoeff() of each (N x K column-major)
    block assigned to its output row (module docstring, order 4): (B, N)."""
    b, k, n = blocks.shape
    out = np.empty((b, n), F32)

    def f(a, c):
        return _f(op, a, c)

    with np.errstate(invalid="ignore"):
        for d in range(b):
            blk = blocks[d]
            h = min((-(d * n)) % 4, n)  # the output row's unaligned head
            npk = (n - h) // 4 * 4
            if npk:
                cols = blk[:, h:h + npk]
                p = cols[0].copy()
                i = 1
                while i < ((k - 1) & ~3):
                    p = f(p, f(f(cols[i], cols[i + 1]), f(cols[i + 2], cols[i + 3])))
                    i += 4
                for j in range(i, k):
                    p = f(p, cols[j])
                out[d, h:h + npk] = p
            rest = [*range(h), *range(h + npk, n)]
            if rest:
                acc = blk[0, rest].copy()
                for i in range(1, k):
                    acc = f(acc, blk[i, rest])
                out[d, rest] = acc
    return out


def reduce_ort(op: str, x: np.ndarray, axes: list[int] | None, keepdims: bool = True,
               noop_with_empty_axes: bool = False) -> np.ndarray:
    """ORT's float32 Reduce`op` kernel on x over `axes` (normalised or negative; None or [] = every axis unless
    noop_with_empty_axes), in the order ORT takes for the shape (module docstring: orders 0 to 5)."""
    return _reduce(op, x, axes, keepdims, noop_with_empty_axes, eigen=True)


def reduce_float(op: str, x: np.ndarray, axes: list[int] | None, keepdims: bool = True,
                 noop_with_empty_axes: bool = False) -> np.ndarray:
    """`op` over `axes` in ORT's plain loops only (orders 0 and 1, and 2 for a Max/Min over every element): the
    order of ORT's aggregators that have no vectorised paths for partial axes (ReduceL1/L2/SumSquare/LogSum/
    LogSumExp through vkinfer/model/host_norm.py). The Reduce* ops themselves are `reduce_ort`."""
    return _reduce(op, x, axes, keepdims, noop_with_empty_axes, eigen=False)


def _reduce(op: str, x: np.ndarray, axes: list[int] | None, keepdims: bool, noop_with_empty_axes: bool,
            eigen: bool) -> np.ndarray:
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
    sizes, red = fast_shape(x.shape, axes)
    order = ort_order(op, sizes, red)
    if not eigen and order not in (1, 2):
        order = 0
    cols = None if order in (3, 4, 5) else np.ascontiguousarray(np.transpose(x, axes + kept)).reshape(n_red, n_out)
    if order == 5:  # R K R: per kept index, Eigen's redux of its contiguous runs, folded in turn
        d0, k, d2 = sizes
        v = np.ascontiguousarray(x).reshape(d0, k, d2)
        starts = (np.arange(d0)[:, None] * (k * d2) + np.arange(k)[None, :] * d2).reshape(-1)
        runs = eigen_rows(v.reshape(d0 * k, d2), starts, op).reshape(d0, k)
        y = np.zeros(k, F32) if op in ("ReduceSum", "ReduceMean") else v[0, :, 0].copy()
        with np.errstate(invalid="ignore"):
            for i in range(d0):
                if op == "ReduceMax":
                    y = np.where(runs[i] > y, runs[i], y)
                elif op == "ReduceMin":
                    y = np.where(runs[i] < y, runs[i], y)
                else:
                    y = y + runs[i]
        if op == "ReduceMean":
            y = y / F32(n_red)
    elif order == 4:  # K R K: per outer block, MLAS's M = 1 SGEMM of ones (sums) or Eigen's rowwise redux
        blocks = np.ascontiguousarray(x).reshape(sizes[0], sizes[1], sizes[2])
        y = eigen_krk(blocks, op) if op in ("ReduceMax", "ReduceMin") else mlas_m1_sum(blocks)
        if op == "ReduceMean":
            y = y / F32(n_red)
    elif order == 3:  # the reduced axes are the innermost: each output a contiguous row of x
        y = eigen_rows(np.ascontiguousarray(x).reshape(n_out, n_red), np.arange(n_out, dtype=np.int64) * n_red, op)
        if op == "ReduceMean":
            y = y / F32(n_red)
    elif op in ("ReduceMax", "ReduceMin"):
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
    return [reduce_ort(node.op, x[0], node_axes(node, x), bool(int(node.attrs.get("keepdims", 1))),
                       bool(int(node.attrs.get("noop_with_empty_axes", 0))))]
