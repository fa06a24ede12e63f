"""Shape, index and selection host kernels of vkinfer's own (issue 25: ONNX's evaluator is an oracle in tests only):
the ops of shape subgraphs (Shape, Size, ConstantOfShape, Range, EyeLike, CastLike) and the index and selection
ops detectors and OCR models carry (ArgMax/ArgMin, TopK, NonZero, OneHot, Trilu, CumSum, GatherElements,
GatherND, ScatterElements, ScatterND, Compress, ReverseSequence, NonMaxSuppression, CenterCropPad, Upsample).

Everything here moves or selects values, or counts (exact on any type), except CumSum and Range on floats: CumSum
adds in index order as ORT's loop does (np.cumsum: sequential), Range accumulates start + delta + delta ... in
the input type as ORT's loop does. Out-of-range indices are a ValueError naming the op (ORT's checks).
"""

from __future__ import annotations

import math

import numpy as np
from onnx import helper, numpy_helper

from .attrs import _axis, _ints1, _text
from .graph import Node
from .host_elementwise import own_op as _op
from .op_table import OPS, REQUIRED_INPUTS


def _opt(x: list, i: int):
    return x[i] if len(x) > i and x[i] is not None else None


def _scalar(v, what: str):
    a = np.asarray(v)
    if a.size != 1:
        raise ValueError(f"{what} must be a scalar, got shape {list(a.shape)}")
    return a.reshape(())[()]


@_op("Shape")
def _shape(node, x, memo):
    """The input's shape as int64; start / end (opset 15) clamped to [0, rank] as ONNX says."""
    s = np.asarray(np.shape(x[0]), np.int64)
    r = len(s)

    def clamp(v, default):
        v = default if v is None else int(v)
        v += r if v < 0 else 0
        return min(max(v, 0), r)
    return [s[clamp(node.attrs.get("start"), 0):clamp(node.attrs.get("end"), r)].copy()]


@_op("Size")
def _size(node, x, memo):
    return [np.asarray(np.size(x[0]), np.int64)]


@_op("ConstantOfShape")
def _constant_of_shape(node, x, memo):
    """A tensor of `shape` (int64 input) filled with the one-element `value` attribute (default float32 0)."""
    shape = _ints1(x[0], "ConstantOfShape shape")
    if any(d < 0 for d in shape):
        raise ValueError(f"ConstantOfShape shape {shape} has a negative dimension")
    v = node.attrs.get("value")
    val = np.zeros(1, np.float32) if v is None else numpy_helper.to_array(v).reshape(-1)
    if val.size != 1:
        raise ValueError(f"ConstantOfShape value must have one element, has {val.size}")
    return [np.full(shape, val[0], val.dtype)]


@_op("Range")
def _range(node, x, memo):
    """ceil((limit - start) / delta) elements (computed in double, as ORT), value i = start + delta + ... +
    delta accumulated in the input type (ORT's loop)."""
    start, limit, delta = (np.asarray(v) for v in x[:3])
    if len({start.dtype, limit.dtype, delta.dtype}) != 1 or start.dtype.kind not in "fi":
        raise TypeError(f"Range inputs must be of one numeric type, got {[str(v.dtype) for v in x[:3]]}")
    s, lim, d = (_scalar(v, f"Range {w}") for v, w in ((start, "start"), (limit, "limit"), (delta, "delta")))
    if d == 0:
        raise ValueError("Range delta must not be zero")
    n = max(int(math.ceil((float(lim) - float(s)) / float(d))), 0)
    if n > 2 ** 31:
        raise ValueError(f"Range of {n} elements is too large")
    t = start.dtype.type
    if start.dtype.kind in "iu":
        return [(s + np.arange(n, dtype=np.int64) * int(d)).astype(start.dtype)]
    out = np.empty(n, start.dtype)
    v = t(s)
    with np.errstate(all="ignore"):
        for i in range(n):
            out[i] = v
            v = t(v + d)
    return [out]


_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


@_op("EyeLike")
def _eye_like(node, x, memo):
    """A 2-D identity with ones on diagonal k, of the input's shape and `dtype` (default the input's)."""
    v = np.asarray(x[0])
    if v.ndim != 2:
        raise ValueError(f"EyeLike needs a 2-D input, got shape {list(v.shape)}")
    dt = node.attrs.get("dtype")
    if dt is not None and int(dt) not in _DTYPES:
        raise ValueError(f"EyeLike dtype {dt} is not supported")
    return [np.eye(*v.shape, k=int(node.attrs.get("k", 0)), dtype=v.dtype if dt is None else _DTYPES[int(dt)])]


@_op("CastLike")
def _cast_like(node, x, memo):
    """Cast to the second input's type (Cast's rules)."""
    to = helper.np_dtype_to_tensor_dtype(np.asarray(x[1]).dtype)
    return OPS["Cast"](Node("Cast", node.name, node.inputs[:1], node.outputs, {"to": to}), [x[0]], {})


@_op("CumSum")
def _cumsum(node, x, memo):
    """Running sum along the axis input, in index order (exclusive / reverse attributes)."""
    v = np.asarray(x[0])
    if v.dtype.kind not in "fiu":
        raise TypeError(f"CumSum does not take {v.dtype} inputs")
    ax = _axis(int(_scalar(x[1], "CumSum axis")), v.ndim)
    rev, exc = int(node.attrs.get("reverse", 0)), int(node.attrs.get("exclusive", 0))
    a = np.flip(v, ax) if rev else v
    with np.errstate(all="ignore"):
        c = np.cumsum(a, axis=ax, dtype=v.dtype)
    if exc:
        c = np.concatenate([np.zeros_like(np.take(c, [0], axis=ax)), np.take(c, range(c.shape[ax] - 1), axis=ax)],
                           axis=ax) if c.shape[ax] else c
    return [np.ascontiguousarray(np.flip(c, ax) if rev else c)]


@_op("TopK")
def _topk(node, x, memo):
    """The k largest (or smallest) values along `axis` and their int64 indices; equal values in index order
    (ORT's comparator). k: input 1 (opset 10+) or attribute."""
    v = np.asarray(x[0])
    if v.dtype.kind not in "fiu":
        raise TypeError(f"TopK does not take {v.dtype} inputs")
    k = int(_scalar(x[1], "TopK k")) if _opt(x, 1) is not None else int(node.attrs.get("k", -1))
    ax = _axis(int(node.attrs.get("axis", -1)), v.ndim)
    if not 0 <= k <= v.shape[ax]:
        raise ValueError(f"TopK k={k} is outside [0, {v.shape[ax]}]")
    largest = int(node.attrs.get("largest", 1))
    if not int(node.attrs.get("sorted", 1)):
        raise ValueError("TopK with sorted=0 is not supported (ORT's output order is its selection algorithm's)")
    if v.dtype.kind == "f" and np.isnan(v).any():
        raise ValueError("TopK of a tensor with NaN is not supported (its order is unspecified)")
    # A stable sort of a key that orders as wanted: equal values keep index order (-0 equals 0, as in ORT).
    key = v if not largest else (-v if v.dtype.kind == "f" else ~v)
    order = np.argsort(key, axis=ax, kind="stable")
    idx = np.take(order, range(k), axis=ax).astype(np.int64)
    return [np.take_along_axis(v, idx, axis=ax), idx]


@_op("NonZero")
def _nonzero(node, x, memo):
    """int64 (rank, count) indices of the non-zero elements in row-major order (a scalar reads as rank 1)."""
    v = np.asarray(x[0])
    return [np.asarray(np.nonzero(v.reshape(1) if v.ndim == 0 else v), np.int64).reshape(max(v.ndim, 1), -1)]


@_op("OneHot")
def _onehot(node, x, memo):
    """values[1] where index == i along the new `axis`, values[0] elsewhere; negative indices count from depth,
    out-of-range ones give an all-off row (ORT)."""
    ind = np.asarray(x[0])
    if ind.dtype.kind not in "fiu":
        raise TypeError(f"OneHot indices must be numeric, got {ind.dtype}")
    depth = int(_scalar(x[1], "OneHot depth"))
    if depth <= 0:
        raise ValueError(f"OneHot depth must be positive, got {depth}")
    vals = np.asarray(x[2]).reshape(-1)
    if vals.size != 2:
        raise ValueError(f"OneHot values must have 2 elements, has {vals.size}")
    ax = _axis(int(node.attrs.get("axis", -1)), ind.ndim + 1)
    i = ind.astype(np.int64)
    i = np.where(i < 0, i + depth, i)
    hot = np.expand_dims(i, ax) == np.arange(depth).reshape([-1 if d == ax else 1 for d in range(ind.ndim + 1)])
    return [np.where(hot, vals[1], vals[0]).astype(vals.dtype)]


@_op("Trilu")
def _trilu(node, x, memo):
    """Upper (default) or lower triangle of the last two axes, diagonal offset k (input 1)."""
    v = np.asarray(x[0])
    if v.ndim < 2:
        raise ValueError(f"Trilu needs rank >= 2, got shape {list(v.shape)}")
    k = int(_scalar(x[1], "Trilu k")) if _opt(x, 1) is not None else 0
    return [np.triu(v, k) if int(node.attrs.get("upper", 1)) else np.tril(v, k)]


def _indices(ind, dim: int, op: str) -> np.ndarray:
    i = np.asarray(ind)
    if i.dtype.kind not in "iu":
        raise TypeError(f"{op} indices must be integers, got {i.dtype}")
    i = i.astype(np.int64)
    if i.size and (i.min() < -dim or i.max() >= dim):
        raise ValueError(f"{op} index out of range [-{dim}, {dim - 1}]: {int(i.min())}..{int(i.max())}")
    return np.where(i < 0, i + dim, i)


@_op("GatherElements")
def _gather_elements(node, x, memo):
    v = np.asarray(x[0])
    ax = _axis(int(node.attrs.get("axis", 0)), v.ndim)
    i = _indices(x[1], v.shape[ax], "GatherElements")
    if i.ndim != v.ndim or any(d != ax and i.shape[d] > v.shape[d] for d in range(v.ndim)):
        raise ValueError(f"GatherElements indices shape {list(i.shape)} does not fit data shape {list(v.shape)}")
    # Indices may be smaller than the data off the axis: the output has their shape (ONNX).
    v = v[tuple(slice(None) if d == ax else slice(0, i.shape[d]) for d in range(v.ndim))]
    return [np.take_along_axis(v, i, axis=ax)]


def _nd_index(v_shape, i: np.ndarray, b: int, op: str) -> tuple[np.ndarray, tuple]:
    """GatherND / ScatterND: indices made non-negative and checked, and the leading index tuple."""
    m = i.shape[-1]
    if m > len(v_shape) - b:
        raise ValueError(f"{op} index tuples of {m} exceed the data's rank {len(v_shape)} less batch_dims {b}")
    dims = np.asarray(v_shape[b:b + m], np.int64)
    if i.size and (np.any(i < -dims) or np.any(i >= dims)):
        raise ValueError(f"{op} index out of range for data shape {list(v_shape)}")
    return np.where(i < 0, i + dims, i), dims


@_op("GatherND")
def _gather_nd(node, x, memo):
    """Slices of data at the index tuples of the last indices axis, over batch_dims leading batch axes."""
    v, i = np.asarray(x[0]), np.asarray(x[1])
    if i.dtype.kind not in "iu":
        raise TypeError(f"GatherND indices must be integers, got {i.dtype}")
    b = int(node.attrs.get("batch_dims", 0))
    if b < 0 or b >= min(v.ndim, i.ndim) or v.shape[:b] != i.shape[:b]:
        raise ValueError(f"GatherND batch_dims {b} does not fit shapes {list(v.shape)} and {list(i.shape)}")
    i, _ = _nd_index(v.shape, i.astype(np.int64), b, "GatherND")
    nb = math.prod(v.shape[:b])
    vb = v.reshape(nb, *v.shape[b:])
    ib = i.reshape(nb, -1, i.shape[-1])
    out = np.stack([vb[n][tuple(ib[n].T)] for n in range(nb)]) if nb else np.empty((0,) + vb.shape[1:], v.dtype)
    m = i.shape[-1]
    return [out.reshape(*i.shape[:-1], *v.shape[b + m:])]


_REDUCE = {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(node: Node) -> str:
    r = _text(node.attrs.get("reduction"), "none")
    if r not in _REDUCE:
        raise ValueError(f"{node.op} reduction must be one of {sorted(_REDUCE)}, got {r!r}")
    return r


@_op("ScatterElements")
def _scatter_elements(node, x, memo):
    """data with updates written at the indices along `axis`, in index order (the last duplicate wins, or
    reduced into the data: reduction add / mul / max / min)."""
    v, u = np.asarray(x[0]), np.asarray(x[2])
    ax = _axis(int(node.attrs.get("axis", 0)), v.ndim)
    i = _indices(x[1], v.shape[ax], "ScatterElements")
    if i.shape != u.shape or i.ndim != v.ndim:
        raise ValueError(f"ScatterElements indices {list(i.shape)} and updates {list(u.shape)} must match in shape "
                         f"and the data's rank {v.ndim}")
    red = _REDUCE[_reduction(node)]
    out = v.copy()
    pos = list(np.indices(i.shape, sparse=False))
    pos[ax] = i
    flat = np.ravel_multi_index(tuple(pos), v.shape) if v.size else np.zeros(0, np.int64)
    o = out.reshape(-1)
    if red is None:
        o[flat.reshape(-1)] = u.reshape(-1)
    else:
        with np.errstate(all="ignore"):
            red.at(o, flat.reshape(-1), u.reshape(-1).astype(v.dtype))
    return [out]


@_op("ScatterND")
def _scatter_nd(node, x, memo):
    """data with the update slices written at the index tuples, in order (reduction as ScatterElements)."""
    v, i, u = np.asarray(x[0]), np.asarray(x[1]), np.asarray(x[2])
    if i.dtype.kind not in "iu":
        raise TypeError(f"ScatterND indices must be integers, got {i.dtype}")
    i, _ = _nd_index(v.shape, i.astype(np.int64), 0, "ScatterND")
    m = i.shape[-1]
    if u.shape != i.shape[:-1] + v.shape[m:]:
        raise ValueError(f"ScatterND updates shape {list(u.shape)} must be {list(i.shape[:-1] + v.shape[m:])}")
    red = _REDUCE[_reduction(node)]
    out = v.copy()
    tuples = i.reshape(-1, m)
    slices = u.reshape(len(tuples), *v.shape[m:])
    with np.errstate(all="ignore"):
        for t, s in zip(tuples, slices, strict=True):
            k = tuple(int(j) for j in t)
            out[k] = s if red is None else red(out[k], s)
    return [out]


@_op("Compress")
def _compress(node, x, memo):
    """The slices along `axis` (the flattened input without one) where the bool condition is true; a condition
    shorter than the axis selects from its first elements (ONNX)."""
    v, c = np.asarray(x[0]), np.asarray(x[1])
    if c.dtype != np.bool_ or c.ndim != 1:
        raise TypeError(f"Compress condition must be a 1-D bool tensor, got {c.dtype} of shape {list(c.shape)}")
    ax = node.attrs.get("axis")
    if ax is None:
        v = v.reshape(-1)
        ax = 0
    ax = _axis(int(ax), v.ndim)
    if c.size > v.shape[ax]:
        raise ValueError(f"Compress condition of {c.size} is longer than axis {ax} ({v.shape[ax]})")
    return [np.compress(c, v, axis=ax)]


@_op("ReverseSequence")
def _reverse_sequence(node, x, memo):
    """Each batch entry's first seq_len[b] steps reversed (batch_axis / time_axis attributes, 0 and 1)."""
    v, lens = np.asarray(x[0]), _ints1(x[1], "ReverseSequence sequence_lens")
    ba, ta = int(node.attrs.get("batch_axis", 1)), int(node.attrs.get("time_axis", 0))
    if {ba, ta} != {0, 1} or v.ndim < 2:
        raise ValueError(f"ReverseSequence needs batch_axis and time_axis 0 and 1, got {ba}, {ta}")
    if len(lens) != v.shape[ba] or any(not 0 <= n <= v.shape[ta] for n in lens):
        raise ValueError(f"ReverseSequence sequence_lens {lens} do not fit shape {list(v.shape)}")
    out = v.copy()
    for b, n in enumerate(lens):
        sel = [slice(None)] * v.ndim
        sel[ba], sel[ta] = b, slice(0, n)
        out[tuple(sel)] = np.flip(v[tuple(sel)], 0)
    return [out]


for _name, _req in (("Shape", (1, (0,))), ("Size", (1, (0,))), ("ConstantOfShape", (1, (0,))),
                    ("Range", (3, (0, 1, 2))), ("EyeLike", (1, (0,))), ("CastLike", (2, (0, 1))),
                    ("CumSum", (2, (0, 1))), ("ArgMax", (1, (0,))), ("ArgMin", (1, (0,))), ("TopK", (1, (0,))),
                    ("NonZero", (1, (0,))), ("OneHot", (3, (0, 1, 2))), ("Trilu", (1, (0,))),
                    ("GatherElements", (2, (0, 1))), ("GatherND", (2, (0, 1))), ("ScatterElements", (3, (0, 1, 2))),
                    ("ScatterND", (3, (0, 1, 2))), ("Compress", (2, (0, 1))), ("ReverseSequence", (2, (0, 1)))):
    REQUIRED_INPUTS.setdefault(_name, _req)
