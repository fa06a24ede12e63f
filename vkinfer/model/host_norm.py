"""Reduction and normalization host kernels of vkinfer's own (issue 25: ONNX's evaluator is an oracle in tests only):
ReduceL1/L2/LogSum/LogSumExp/Prod/SumSquare, the integer reductions of shape subgraphs, GlobalMaxPool, Hardmax,
LpNormalization, InstanceNormalization, GroupNormalization, LRN and MeanVarianceNormalization.

Numerics (measured bit-equal to ORT on random shapes, tests/numerics/test_host_ops_norm.py): the reductions run
ORT's generic loop order (index order) or, where ORT reduces every element (`aggall`) or sums a contiguous row
with Eigen, Eigen's 4-lane SSE packet order (eigen_sum); exp and log are the C library's expf / logf as ORT's
std::exp / std::log; InstanceNormalization, GroupNormalization (its ONNX function body, which ORT runs node by
node) and MeanVarianceNormalization sum with eigen_sum as ORT's kernels do. LRN's pow is bounded (2 ulps).
GlobalMaxPool is MLAS's global max kernel for every rank (float_max_pool: exact on -0, infinities and NaN at any
position). Hardmax selects the first maximum as ORT does. Integer reductions wrap as C++'s do.
Eigen's order assumes 16-byte aligned buffers (ORT's allocator's and numpy's are): a misaligned user input shifts
Eigen's packets in ORT.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math

import numpy as np

from ..reference import float_reduce
from ..reference._libm import logf
from ..reference.float_max_pool import max_pool_float
from ..reference.float_reduce import eigen_fold
from .attrs import _axis
from .graph import Node
from .host_elementwise import own_op as _op
from .op_table import OPS, REQUIRED_INPUTS

F32 = np.float32


def _reduce_args(node: Node, x: list) -> tuple[list[int] | None, bool, bool]:
    return (float_reduce.node_axes(node, x), bool(int(node.attrs.get("keepdims", 1))),
            bool(int(node.attrs.get("noop_with_empty_axes", 0))))


def _norm_axes(axes: list[int] | None, rank: int, noop: bool, op: str) -> tuple[int, ...] | None:
    """Normalised reduced axes; None: nothing reduced (noop_with_empty_axes with no axes)."""
    if not axes:
        return None if noop else tuple(range(rank))
    return tuple(sorted({_axis(int(a), max(rank, 1), f"{op} axis") for a in axes}))


def _sum32(v: np.ndarray, axes, keepdims: bool, noop: bool) -> np.ndarray:
    return float_reduce.reduce_float("ReduceSum", v, axes, keepdims, noop)


def _seq_reduce(v: np.ndarray, axes: tuple[int, ...], keepdims: bool, fn) -> np.ndarray:
    """fn folded over the reduced axes in index order (acc = fn(acc, next)), any dtype."""
    kept = [i for i in range(v.ndim) if i not in axes]
    n_red = math.prod(v.shape[i] for i in axes)
    cols = np.ascontiguousarray(np.transpose(v, list(axes) + kept)).reshape(n_red, -1)
    out_shape = tuple(1 if i in axes else v.shape[i] for i in range(v.ndim)) if keepdims else \
        tuple(v.shape[i] for i in kept)
    if n_red == 0:
        raise ValueError("reduction over an empty axis is not supported for this op")
    acc = cols[0].copy()
    with np.errstate(all="ignore"):
        for r in range(1, n_red):
            acc = np.asarray(fn(acc, cols[r]), v.dtype)
    return acc.reshape(out_shape)


def int_reduce(node: Node, x: list, memo: dict) -> list:
    """ReduceSum/Mean/Max/Min/Prod of integer tensors (shape subgraphs): exact, wrapping; Mean truncates."""
    v = np.asarray(x[0])
    if v.dtype.kind not in "iu":
        raise TypeError(f"{node.op} does not take {v.dtype} inputs")
    axes, keep, noop = _reduce_args(node, x)
    ax = _norm_axes(axes, v.ndim, noop, node.op)
    if ax is None:
        return [v.copy()]
    fn = {"ReduceSum": np.add, "ReduceMean": np.add, "ReduceMax": np.maximum, "ReduceMin": np.minimum,
          "ReduceProd": np.multiply}[node.op]
    out = _seq_reduce(v, ax, keep, fn)
    if node.op == "ReduceMean":
        from .host_elementwise import trunc_div

        out = trunc_div(out, np.asarray(math.prod(v.shape[i] for i in ax), v.dtype))
    return [out]


def _float_reduce(name: str):
    def register(fn):
        def kernel(node, x, memo):
            v = np.asarray(x[0])
            if v.dtype.kind in "iu" and name in ("ReduceProd", "ReduceSumSquare", "ReduceL1"):
                return _int_extra(node, x, name)
            if v.dtype != F32:
                ints = " (or integer)" if name in ("ReduceProd", "ReduceSumSquare", "ReduceL1") else ""
                raise TypeError(f"{node.op} takes float32{ints} tensors, got {v.dtype}")
            axes, keep, noop = _reduce_args(node, x)
            if _norm_axes(axes, v.ndim, noop, node.op) is None:
                return [fn(v, None, keep, True, identity=True)]
            with np.errstate(all="ignore"):
                return [np.asarray(fn(v, axes, keep, noop, identity=False), F32)]
        kernel.__name__ = f"_{name.lower()}"
        kernel.__doc__ = fn.__doc__
        OPS.setdefault(name, kernel)
        REQUIRED_INPUTS.setdefault(name, (1, (0,)))
        return fn
    return register


def _int_extra(node: Node, x: list, name: str) -> list:
    v = np.asarray(x[0])
    axes, keep, noop = _reduce_args(node, x)
    ax = _norm_axes(axes, v.ndim, noop, node.op)
    w = v if name == "ReduceProd" else (v * v if name == "ReduceSumSquare" else np.abs(v))
    if ax is None:
        return [np.asarray(w, v.dtype)]
    return [_seq_reduce(np.asarray(w, v.dtype), ax, keep, np.multiply if name == "ReduceProd" else np.add)]


def _agg(w: np.ndarray, axes, keep: bool, noop: bool, fn=np.add) -> np.ndarray:
    """The sum (fn=np.multiply: product) of w over `axes` as ORT's SumSquare/L1/L2/LogSum/Prod aggregators run it:
    over every element (ORT's `aggall`) Eigen's redux of the whole buffer (eigen_sum: exact, measured); otherwise
    ORT's generic loop (index order)."""
    ax = _norm_axes(axes, w.ndim, noop, "reduction")
    if w.size and float_reduce.fast_shape(w.shape, list(ax))[1] == [True]:
        out = eigen_sum(w.reshape(1, -1), np.zeros(1, np.int64), fn)
        return out.reshape((1,) * w.ndim if keep else ())
    if fn is np.add:
        return _sum32(w, axes, keep, noop)
    return _seq_reduce(w, ax, keep, fn)


@_float_reduce("ReduceSumSquare")
def _rss(v, axes, keep, noop, identity):
    """sum(x * x) (_agg); with no axes and noop_with_empty_axes: x * x (ORT's identity case)."""
    return v * v if identity else _agg(v * v, axes, keep, noop)


@_float_reduce("ReduceL1")
def _rl1(v, axes, keep, noop, identity):
    """sum(|x|) (_agg)."""
    return np.abs(v) if identity else _agg(np.abs(v), axes, keep, noop)


@_float_reduce("ReduceL2")
def _rl2(v, axes, keep, noop, identity):
    """sqrt(sum(x * x)) (_agg)."""
    return np.abs(v) if identity else np.sqrt(_agg(v * v, axes, keep, noop))


@_float_reduce("ReduceLogSum")
def _rls(v, axes, keep, noop, identity):
    """logf(sum(x)) (_agg; the C library's logf, as ORT's std::log)."""
    return logf(v) if identity else logf(_agg(v, axes, keep, noop))


@functools.cache
def _expf():
    """The C library's expf (ORT's std::exp on float), called element by element."""
    for name in (ctypes.util.find_library("m"), "libm.so.6"):
        try:
            f = ctypes.CDLL(name).expf
        except (OSError, AttributeError, TypeError):
            continue
        f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
        return f
    raise OSError("no C math library with expf")


def expf(x: np.ndarray) -> np.ndarray:
    """The C library's expf over a float32 array."""
    x = np.asarray(x, F32)
    with np.errstate(all="ignore"):
        out = np.frompyfunc(_expf(), 1, 1)(x.astype(np.float64))
    return np.asarray(out, np.float64).astype(F32).reshape(x.shape)


@_float_reduce("ReduceLogSumExp")
def _rlse(v, axes, keep, noop, identity):
    """ORT's aggregator: m = the maximum, s = sum of expf(x - m) in index order, logf(s) + m (C library's expf and
    logf, as ORT's std::exp / std::log)."""
    if identity:
        return v.copy()
    m = float_reduce.reduce_float("ReduceMax", v, axes, True, noop)
    s = _sum32(expf(v - m), axes, True, noop)
    out = logf(s) + m
    return out if keep else np.squeeze(out, tuple(_norm_axes(axes, v.ndim, noop, "ReduceLogSumExp")))


@_float_reduce("ReduceProd")
def _rprod(v, axes, keep, noop, identity):
    """The product (_agg: Eigen's prod() over every element, else ORT's loop in index order)."""
    return v.copy() if identity else _agg(v, axes, keep, noop, np.multiply)


@_op("GlobalMaxPool")
def _global_max_pool(node, x, memo):
    """MLAS's global max over the spatial axes (float_max_pool's kernel for a whole-image window: exact)."""
    v = np.asarray(x[0])
    if v.dtype != F32:
        raise TypeError(f"GlobalMaxPool takes float32 tensors, got {v.dtype}")
    if v.ndim < 3:
        raise ValueError(f"GlobalMaxPool needs an (N, C, ...) input, got shape {list(v.shape)}")
    if 0 in v.shape[2:]:
        raise ValueError(f"GlobalMaxPool of an empty image {list(v.shape)}")
    return [max_pool_float(v, list(v.shape[2:]))]


@_op("Hardmax")
def _hardmax(node, x, memo):
    """1 at the first maximum along `axis` (opset 13: that axis, default -1; before: the input read as 2-D at
    `axis`, default 1), 0 elsewhere."""
    v = np.asarray(x[0])
    if v.dtype.kind != "f":
        raise TypeError(f"Hardmax takes float tensors, got {v.dtype}")
    legacy = int(node.attrs.get("_opset") or 13) < 13
    ax = int(node.attrs.get("axis", 1 if legacy else -1))
    if legacy:
        r = v.ndim
        if not -r <= ax <= r:
            raise ValueError(f"Hardmax axis {ax} is out of range for rank {r}")
        ax += r if ax < 0 else 0
        w = v.reshape(math.prod(v.shape[:ax]), math.prod(v.shape[ax:]))
        a = 1
    else:
        w, a = v, _axis(ax, v.ndim)
    if w.shape[a] == 0:
        return [np.zeros_like(v)]
    m = float_reduce.fold_first(np.moveaxis(w, a, 0), "ReduceMax") if w.dtype == F32 else np.max(w, axis=a)
    idx = np.argmax(np.moveaxis(w, a, 0) == m, axis=0)
    out = np.zeros_like(w)
    np.put_along_axis(out, np.expand_dims(idx, a), 1, axis=a)
    return [out.reshape(v.shape)]


@_op("LpNormalization")
def _lp_normalization(node, x, memo):
    """x / ||x||_p along `axis` (p 1 or 2), the norm summed in index order; a zero norm gives 0 (ORT)."""
    v = np.asarray(x[0])
    if v.dtype != F32:
        raise TypeError(f"LpNormalization takes float32 tensors, got {v.dtype}")
    p = int(node.attrs.get("p", 2))
    if p not in (1, 2):
        raise ValueError(f"LpNormalization p must be 1 or 2, got {p}")
    ax = _axis(int(node.attrs.get("axis", -1)), v.ndim)
    with np.errstate(all="ignore"):
        n = _sum32(np.abs(v), [ax], True, False) if p == 1 else np.sqrt(_sum32(v * v, [ax], True, False))
        return [np.where(n == 0, F32(0), v / n).astype(F32)]


def eigen_sum(rows: np.ndarray, starts: np.ndarray, fn=np.add) -> np.ndarray:
    """Per row of (R, W) float32, Eigen's vectorised sum (`fn`: another fold) as ORT's Eigen maps see it, row r
    beginning `starts[r]` floats past a 16-byte boundary (ORT's and numpy's buffers are 16-byte aligned):
    reference/float_reduce.eigen_fold."""
    return eigen_fold(rows, starts, fn)


def _instance_norm(rows: np.ndarray, eps: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """ORT's per-row statistics (instance_norm.cc): mean = Eigen sum / W (the row mapped in place: its head by the
    row's address), squared norm of x - mean (an Eigen expression: packets from its first element, no head),
    inv_std = 1 / sqrt(squared_norm / W + eps): (mean, inv_std), each (R, 1). Measured: every row of random
    shapes bit-equal to ORT."""
    n_rows, w = rows.shape
    starts = np.arange(n_rows, dtype=np.int64) * w
    mean = (eigen_sum(rows, starts) / F32(w))[:, None]
    d = rows - mean
    sq = eigen_sum(d * d, np.zeros(n_rows, np.int64))[:, None]  # an expression: no direct access, no head
    return mean, F32(1) / np.sqrt(sq / F32(w) + eps)


def _instance_apply(rows: np.ndarray, mean: np.ndarray, inv: np.ndarray, scale: np.ndarray,
                    bias: np.ndarray) -> np.ndarray:
    """y = x * (inv_std * scale) + (B - mean * (inv_std * scale)), ORT's folded form, per row."""
    cs = inv * scale[:, None]
    return rows * cs + (bias[:, None] - mean * cs)


@_op("InstanceNormalization")
def _instance_normalization(node, x, memo):
    """Per (n, c): ORT's instance_norm.cc (_instance_norm, _instance_apply); the sums in Eigen's SSE order
    (eigen_sum)."""
    v, s, b = (np.asarray(t) for t in x[:3])
    if v.dtype != F32 or s.dtype != F32 or b.dtype != F32:
        raise TypeError("InstanceNormalization takes float32 tensors")
    if v.ndim < 3 or s.shape != (v.shape[1],) or b.shape != (v.shape[1],):
        raise ValueError(f"InstanceNormalization shapes: input {list(v.shape)}, scale {list(s.shape)}, "
                         f"B {list(b.shape)}")
    n, c = v.shape[:2]
    eps = F32(float(node.attrs.get("epsilon", 1e-5)))
    rows = v.reshape(n * c, -1)
    if rows.shape[1] == 0:
        return [v.copy()]
    with np.errstate(all="ignore"):
        mean, inv = _instance_norm(rows, eps)
        return [_instance_apply(rows, mean, inv, np.tile(s, n), np.tile(b, n)).astype(F32).reshape(v.shape)]


@_op("GroupNormalization")
def _group_normalization(node, x, memo):
    """ONNX's function body, which ORT runs node by node: x as (N, G, -1); mean = ReduceMean(x), var =
    ReduceMean(x * x) - mean * mean, y = (x - mean) / sqrt(var + eps); then scale * y + bias per channel (opset 21,
    y as (N, C, -1)) or per group (opset 18). ORT's ReduceMean over the contiguous last axis is an Eigen sum per row
    (eigen_sum) divided by the row's length: bit-equal (measured on random shapes)."""
    v, s, b = (np.asarray(t) for t in x[:3])
    if v.dtype != F32 or s.dtype != F32 or b.dtype != F32:
        raise TypeError("GroupNormalization takes float32 tensors")
    g = int(node.attrs.get("num_groups", 0))
    if v.ndim < 2 or g <= 0 or v.shape[1] % g:
        raise ValueError(f"GroupNormalization num_groups {g} does not divide the channels of {list(v.shape)}")
    n, c = v.shape[:2]
    per = s.shape == (c,) and b.shape == (c,)
    if not per and not (s.shape == (g,) and b.shape == (g,)):
        raise ValueError(f"GroupNormalization scale {list(s.shape)} / bias {list(b.shape)} must be ({c},) or ({g},)")
    eps = F32(float(node.attrs.get("epsilon", 1e-5)))
    rows = v.reshape(n * g, -1)
    w = rows.shape[1]
    if w == 0 or rows.shape[0] == 0:
        return [v.copy()]
    starts = np.arange(n * g, dtype=np.int64) * w  # x and x * x: each its own 16-byte aligned buffer
    with np.errstate(all="ignore"):
        mean = (eigen_sum(rows, starts) / F32(w))[:, None]
        msq = (eigen_sum(rows * rows, starts) / F32(w))[:, None]
        y = (rows - mean) / np.sqrt((msq - mean * mean) + eps)
        if per:
            y = s[None, :, None] * y.reshape(n, c, -1) + b[None, :, None]
        else:
            y = s[None, :, None] * y.reshape(n, g, -1) + b[None, :, None]
    return [y.astype(F32).reshape(v.shape)]


@_op("LRN")
def _lrn(node, x, memo):
    """ORT's LRN (Caffe2's): squares zero-padded over channels ((size - 1) // 2 before); channel 0's scale = bias +
    a * sq[p] for the first `size` padded channels in turn (a = alpha / size), each next channel's = the previous
    + a * (the entering square) + (-a) * (the leaving one); y = pow(scale, -beta) * x. ORT's pow is Eigen's
    vectorised one, the C library's powf here: 2 ulps apart at most (measured; pinned in test_host_ops_norm.py)."""
    from ..reference._libm import powf

    v = np.asarray(x[0])
    if v.dtype != F32 or v.ndim < 3:
        raise TypeError(f"LRN takes a float32 (N, C, ...) tensor, got {v.dtype} of shape {list(v.shape)}")
    size = int(node.attrs.get("size", 0))
    if size <= 0 or size % 2 == 0:
        raise ValueError(f"LRN size must be a positive odd number (ORT's), got {size}")
    beta = F32(float(node.attrs.get("beta", 0.75)))
    a = F32(F32(float(node.attrs.get("alpha", 1e-4))) / F32(size))
    c = v.shape[1]
    pre = (size - 1) // 2
    sq = v * v
    padded = np.zeros((v.shape[0], c + size - 1, *v.shape[2:]), F32)
    padded[:, pre:pre + c] = sq
    scale = np.empty_like(v)
    with np.errstate(all="ignore"):
        s0 = np.full(v.shape[:1] + v.shape[2:], F32(float(node.attrs.get("bias", 1.0))), F32)
        for k in range(size):
            s0 = s0 + a * padded[:, k]
        scale[:, 0] = s0
        for ch in range(1, c):
            scale[:, ch] = (scale[:, ch - 1] + a * padded[:, ch + size - 1]) + (-a) * padded[:, ch - 1]
        return [(powf(scale, -beta) * v).astype(F32)]


@_op("MeanVarianceNormalization")
def _mvn(node, x, memo):
    """ORT's kernel: x transposed to (kept axes, `axes`) (default 0, 2, 3), each row of the normalised elements:
    y = x - mean, then y / sqrt(mean(y * y)) (no epsilon). The first mean is an Eigen sum of the row in place
    (eigen_sum, its head by the row's address), the second of an expression (packets from the first element):
    bit-equal (measured on random shapes and axes)."""
    v = np.asarray(x[0])
    if v.dtype != F32:
        raise TypeError(f"MeanVarianceNormalization takes float32 tensors, got {v.dtype}")
    axes = [int(a) for a in node.attrs.get("axes", [0, 2, 3])]
    ax = list(_norm_axes(axes, v.ndim, False, "MeanVarianceNormalization"))
    kept = [i for i in range(v.ndim) if i not in ax]
    t = np.ascontiguousarray(np.transpose(v, kept + ax))
    r = math.prod(v.shape[i] for i in kept)
    if t.size == 0:
        return [v.copy()]
    rows = t.reshape(r, -1)
    w = rows.shape[1]
    with np.errstate(all="ignore"):
        y = rows - (eigen_sum(rows, np.arange(r, dtype=np.int64) * w) / F32(w))[:, None]
        var = (eigen_sum(y * y, np.zeros(r, np.int64)) / F32(w))[:, None]
        out = (y / np.sqrt(var)).astype(F32).reshape(t.shape)
    return [np.ascontiguousarray(np.transpose(out, np.argsort(kept + ax)))]


for _name, _req in (("GlobalMaxPool", (1, (0,))), ("Hardmax", (1, (0,))), ("LpNormalization", (1, (0,))),
                    ("InstanceNormalization", (3, (0, 1, 2))), ("GroupNormalization", (3, (0, 1, 2))),
                    ("LRN", (1, (0,))), ("MeanVarianceNormalization", (1, (0,)))):
    REQUIRED_INPUTS.setdefault(_name, _req)
