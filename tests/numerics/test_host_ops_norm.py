"""vkinfer/model/host_norm.py against ONNX Runtime 1.31 (CPU EP, one thread), each op alone on the host and the
one-node model on every device (numerics/test_host_float.py's _both), on random shapes of six seeds: bit-equal
(InstanceNormalization, GroupNormalization, MeanVarianceNormalization: Eigen's SSE sums; the reductions: ORT's
loops, or Eigen's redux over every element, expf / logf; GlobalMaxPool: MLAS's global kernel on -0 and +-inf;
Hardmax, LpNormalization, integer reductions); LRN within its pinned bound (Eigen's vectorised pow)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from .test_host_float import _bits_equal, _both, _float_model, _host, _ort, _ulps

F32 = np.float32
I64 = np.int64
SEEDS = range(6)


def _x(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A random (N, 2C, H, W) tensor, per-channel scale and bias."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 9, 4))
    shape = (shape[0], 2 * shape[1], *shape[2:])
    x = (rng.standard_normal(shape) * 3).astype(F32)
    return x, rng.uniform(0.5, 2, shape[1]).astype(F32), rng.standard_normal(shape[1]).astype(F32)


@pytest.mark.parametrize("seed", SEEDS)
def test_instance_normalization_exact(seed):
    """ORT's instance_norm.cc: Eigen's mean (4-lane packets from the row's first 16-byte-aligned element, two
    accumulators, the head and tail added after) and squared norm (packets from the first element)."""
    x, s, b = _x(seed)
    got, want = _both(helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"], epsilon=1e-3), [x, s, b], 13)
    _bits_equal(got[0], want[0])


@pytest.mark.parametrize("seed", SEEDS)
def test_partial_reductions_and_normalizations_exact(seed):
    """Reductions over part of the axes run ORT's loop order; LpNormalization, Hardmax, GlobalMaxPool (-0, +-inf)
    exact."""
    x, _, _ = _x(seed)
    cases = []
    for op in ("ReduceL1", "ReduceL2", "ReduceProd", "ReduceSumSquare"):
        v = x / F32(3) if op == "ReduceProd" else x
        for axes in ([1], [2, 3], [-1], [0, 2]):
            cases.append((helper.make_node(op, ["x", "a"], ["y"], keepdims=int(seed % 2)), [v, np.array(axes)], 18))
        cases.append((helper.make_node(op, ["x"], ["y"], axes=[1]), [v], 13))
        cases.append((helper.make_node(op, ["x", "a"], ["y"], noop_with_empty_axes=1), [v, np.zeros(0, int)], 18))
    for p in (1, 2):
        for axis in (1, -1, 0):
            cases.append((helper.make_node("LpNormalization", ["x"], ["y"], p=p, axis=axis), [x], 1))
    cases.append((helper.make_node("LpNormalization", ["x"], ["y"]), [np.zeros((2, 3), F32)], 1))  # zero norm: 0
    for axis, opset in ((1, 11), (-1, 13), (2, 13), (0, 11)):
        cases.append((helper.make_node("Hardmax", ["x"], ["y"], axis=axis), [np.round(x)], opset))  # ties: first
    # (NaN inside the image: tests/ops/test_float_max_pool.py, MLAS's global kernel at every rank.)
    negzero = np.where(np.abs(x) < 0.3, -0.0, np.where(x > 4, np.inf, x)).astype(F32)
    cases.append((helper.make_node("GlobalMaxPool", ["x"], ["y"]), [negzero], 1))
    cases.append((helper.make_node("GlobalMaxPool", ["x"], ["y"]), [-np.abs(negzero)], 1))
    cases.append((helper.make_node("GlobalMaxPool", ["x"], ["y"]), [np.full((1, 2, 3, 5), -np.inf, F32)], 1))
    cases.append((helper.make_node("GlobalMaxPool", ["x"], ["y"]), [x[:, :, 0]], 1))  # 1-D
    for node, inputs, opset in cases:
        inputs = [np.asarray(v, np.int64) if np.asarray(v).dtype.kind == "i" else v for v in inputs]
        got, want = _both(node, inputs, opset)
        _bits_equal(got[0], want[0])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_reductions_exact(dtype):
    """Shape subgraphs' integer reductions: exact, ReduceMean truncating; Max/Min of integers."""
    rng = np.random.default_rng(7)
    x = rng.integers(-50, 50, (3, 4, 5)).astype(dtype)
    for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceSumSquare"):
        for axes in ([1], [0, 2], []):
            if op == "ReduceProd":
                xs = (x % 3).astype(dtype)
            else:
                xs = x
            got, want = _both(helper.make_node(op, ["x", "a"], ["y"]), [xs, np.array(axes, np.int64)], 18)
            _bits_equal(got[0], want[0])
    for op in ("Max", "Min"):
        got, want = _both(helper.make_node(op, ["a", "b", "c"], ["y"]), [x, x[:1] * dtype(2), np.array(3, dtype)], 13)
        _bits_equal(got[0], want[0])


@pytest.mark.parametrize("seed", SEEDS)
def test_whole_tensor_and_log_reductions_exact(seed):
    """Over every element ORT's aggregators run Eigen's redux (sum, squaredNorm, prod: eigen_sum's packet order);
    LogSum / LogSumExp take the C library's expf / logf as ORT's std::exp / std::log."""
    x, _, _ = _x(seed)
    pos = np.abs(x) + F32(0.1)
    for op, v in (("ReduceL1", x), ("ReduceSumSquare", x), ("ReduceL2", x), ("ReduceProd", x / F32(3)),
                  ("ReduceLogSum", pos), ("ReduceLogSumExp", x)):
        cases = [(helper.make_node(op, ["x"], ["y"], keepdims=0), [v])]
        cases += [(helper.make_node(op, ["x", "a"], ["y"]), [v, np.array(axes, I64)]) for axes in ([1], [2, 3], [-1])]
        for node, inputs in cases:
            got, want = _both(node, inputs, 18)
            _bits_equal(got[0], want[0])


@pytest.mark.parametrize("seed", SEEDS)
def test_group_and_mean_variance_normalization_exact(seed):
    """GroupNormalization: ONNX's function body as ORT runs it (ReduceMean over the contiguous last axis is an Eigen
    sum per row); MeanVarianceNormalization: ORT's kernel (Eigen means of the rows in place and of an expression).
    onnx's shape inference leaves these function ops' outputs untyped, so the one-node model is ORT's only: the
    host kernel against it."""
    x, s, b = _x(seed)
    g = 2
    cases = [(helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=g), [x, s, b], 21),
             (helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=g, epsilon=0.1),
              [x, s[:g], b[:g]], 18)]
    cases += [(helper.make_node("MeanVarianceNormalization", ["x"], ["y"], **kw), [x], 13)
              for kw in ({}, {"axes": [1, 3]}, {"axes": [2, 3]}, {"axes": [0]})]
    for node, inputs, opset in cases:
        feed = dict(zip(node.input, inputs, strict=True))
        _bits_equal(_host(node, inputs, opset)[0], _ort(_float_model(node, inputs, opset), feed)[0])


@pytest.mark.parametrize("seed", SEEDS)
def test_lrn_bounded(seed):
    """LRN: ORT's running channel sums exactly; its pow is Eigen's vectorised one, the C library's powf here:
    2 ulps (measured 2)."""
    x, _, _ = _x(seed)
    for attrs in ({"size": 3, "alpha": 0.01, "bias": 1.5}, {"size": 5}, {"size": 1, "beta": 0.5}):
        got, want = _both(helper.make_node("LRN", ["x"], ["y"], **attrs), [x], 13)
        assert _ulps(got[0], want[0]).max() <= 2, attrs


def test_refusals_name_the_problem():
    x = np.ones((1, 4, 2, 2), F32)
    with pytest.raises(ValueError, match="num_groups 3 does not divide"):
        _host(helper.make_node("GroupNormalization", ["x", "s", "b"], ["y"], num_groups=3),
              [x, np.ones(4, F32), np.ones(4, F32)], 21)
    with pytest.raises(ValueError, match="p must be 1 or 2"):
        _host(helper.make_node("LpNormalization", ["x"], ["y"], p=3), [x], 1)
    with pytest.raises(TypeError, match="ReduceL2 takes float32 tensors"):
        _host(helper.make_node("ReduceL2", ["x"], ["y"]), [np.ones(3, np.int32)], 13)
    with pytest.raises(ValueError, match="axis 5 is out of range"):
        _host(helper.make_node("ReduceL1", ["x"], ["y"], axes=[5]), [x], 13)
    with pytest.raises(ValueError, match="InstanceNormalization shapes"):
        _host(helper.make_node("InstanceNormalization", ["x", "s", "b"], ["y"]),
              [x, np.ones(3, F32), np.ones(4, F32)], 13)
