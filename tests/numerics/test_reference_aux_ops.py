"""The auxiliary QOperator reference ops (vkinfer/reference) against ONNX Runtime, bit for bit."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from vkinfer.reference.dequantize_linear import dequantize_linear
from vkinfer.reference.max_pool import max_pool
from vkinfer.reference.qlinear_add import qlinear_add
from vkinfer.reference.qlinear_average_pool import qlinear_average_pool
from vkinfer.reference.qlinear_concat import qlinear_concat
from vkinfer.reference.qlinear_global_average_pool import qlinear_global_average_pool
from vkinfer.reference.qlinear_leaky_relu import qlinear_leaky_relu
from vkinfer.reference.qlinear_mul import qlinear_mul
from vkinfer.reference.qlinear_sigmoid import qlinear_sigmoid
from vkinfer.reference.quantize_linear import quantize_linear

_T = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
      np.dtype(np.float32): TensorProto.FLOAT}
SETTINGS = settings(max_examples=40, deadline=None)


def run_node(op, inputs: list[tuple[str, np.ndarray, bool]], out_dtype, ms=True, **attrs) -> np.ndarray:
    """One-node model; inputs are (name, value, is_graph_input) (others become initializers)."""
    node = helper.make_node(op, [n for n, _, _ in inputs], ["y"], domain="com.microsoft" if ms else "", **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, _T[v.dtype], v.shape) for n, v, fed in inputs if fed],
        [helper.make_tensor_value_info("y", _T[np.dtype(out_dtype)], None)],
        initializer=[numpy_helper.from_array(v, n) for n, v, fed in inputs if not fed])
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: v for n, v, fed in inputs if fed})[0]


def run_binary(op, a, sa, za, b, sb, zb, sc, zc) -> np.ndarray:
    names = ["a", "as", "az", "b", "bs", "bz", "cs", "cz"]
    vals = [a, sa, za, b, sb, zb, sc, zc]
    return run_node(op, [(n, np.asarray(v), n in ("a", "b")) for n, v in zip(names, vals, strict=True)], a.dtype)


def assert_same(ref, got):
    assert ref.dtype == got.dtype and ref.shape == got.shape, (ref.dtype, ref.shape, got.dtype, got.shape)
    np.testing.assert_array_equal(ref, got)


dtypes = st.sampled_from([np.uint8, np.int8])
# Scales: random, powers of two (ties after division), and extreme ratios.
scales = st.one_of(st.floats(0.001, 1.0), st.integers(-10, 2).map(lambda e: 2.0**e),
                   st.floats(1e-6, 1e3)).map(lambda v: float(np.float32(v)))


def qarray(data, dt, shape):
    info = np.iinfo(dt)
    seed = data.draw(st.integers(0, 2**32 - 1))
    return np.random.default_rng(seed).integers(info.min, info.max + 1, size=shape, endpoint=False).astype(dt)


def zp(data, dt):
    info = np.iinfo(dt)
    return dt(data.draw(st.one_of(st.integers(info.min, info.max), st.sampled_from([info.min, info.max, 0]))))


def bshapes(data):
    """Two broadcast-compatible shapes (rank 0..4), including scalars and all-ones."""
    rank = data.draw(st.integers(0, 4))
    full = [data.draw(st.integers(1, 5)) for _ in range(rank)]
    full[-1:] = [data.draw(st.sampled_from([1, 3, 31, 33, 70]))] if rank else []

    def part():
        r = data.draw(st.integers(0, rank))
        return tuple(d if data.draw(st.booleans()) else 1 for d in full[rank - r:])
    return part(), part()


# --- QLinearAdd / QLinearMul ---------------------------------------------------------------------

@pytest.mark.parametrize("op,fn", [("QLinearAdd", qlinear_add), ("QLinearMul", qlinear_mul)])
@SETTINGS
@given(data=st.data())
def test_qlinear_binary(op, fn, data):
    dt = data.draw(dtypes)
    sa_shape, sb_shape = bshapes(data)
    a, b = qarray(data, dt, sa_shape), qarray(data, dt, sb_shape)
    sa, sb, sc = (np.float32(data.draw(scales)) for _ in range(3))
    za, zb, zc = zp(data, dt), zp(data, dt), zp(data, dt)
    got = run_binary(op, a, sa, za, b, sb, zb, sc, zc)
    assert_same(fn(a, sa, za, b, sb, zb, sc, zc), got)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qlinear_add_exhaustive_ties(dt):
    """All 65536 (a, b) pairs with power-of-two scales (many exact .5 ties), plus a scalar b both ways."""
    g = np.arange(256, dtype=np.uint8).view(dt)
    a, b = np.repeat(g, 256), np.tile(g, 256)
    params = [(0.5, 0.25, 1.0, 3, 5, 7), (0.0625, 0.5, 0.125, 1, 0, 2), (0.013, 0.021, 0.017, 9, 1, 4)]
    for sa, sb, sc, za, zb, zc in params:
        p = [np.float32(sa), dt(za), np.float32(sb), dt(zb), np.float32(sc), dt(zc)]
        for x, y in [(a, b), (g, g[77:78]), (g[77:78], g)]:
            for op, fn in [("QLinearAdd", qlinear_add), ("QLinearMul", qlinear_mul)]:
                assert_same(fn(x, p[0], p[1], y, *p[2:]), run_binary(op, x, p[0], p[1], y, *p[2:]))


def test_qlinear_add_role_swap():
    """ORT swaps the kernel's operands when input A is broadcast innermost: one quantum apart here."""
    sa, sb, sc = np.float32(0.001526002655737102), np.float32(0.06956934183835983), np.float32(0.0801771953701973)
    for n, want in [(1, 235), (2, 234)]:  # (1,) + (1,): "input0 is scalar" -> swapped; (2,) + (2,): general
        a, b = np.full(n, 33, np.uint8), np.full(n, 208, np.uint8)
        p = (sa, np.uint8(111), b, sb, np.uint8(223), sc, np.uint8(249))
        ref = qlinear_add(a, *p)
        assert_same(ref, run_binary("QLinearAdd", a, *p))
        assert ref.tolist() == [want] * n


# --- Lookup-table ops ----------------------------------------------------------------------------

def _unary(op, data, **attrs):
    dt = data.draw(dtypes)
    x = np.arange(256, dtype=np.uint8).view(dt).reshape(4, 64)  # every input value
    xs, ys = np.float32(data.draw(scales)), np.float32(data.draw(scales))
    xz, yz = zp(data, dt), zp(data, dt)
    got = run_node(op, [("x", x, True), ("xs", np.array(xs), False), ("xz", np.array(xz), False),
                        ("ys", np.array(ys), False), ("yz", np.array(yz), False)], dt, **attrs)
    return x, xs, xz, ys, yz, got


@SETTINGS
@given(data=st.data(), alpha=st.one_of(st.floats(-2, 2, width=32), st.sampled_from([0.01, 0.1, 0.2, 0.5, 1.0, 0.0])))
def test_qlinear_leaky_relu(data, alpha):
    x, xs, xz, ys, yz, got = _unary("QLinearLeakyRelu", data, alpha=alpha)
    assert_same(qlinear_leaky_relu(x, xs, xz, ys, yz, alpha=alpha), got)


@SETTINGS
@given(data=st.data())
def test_qlinear_sigmoid(data):
    x, xs, xz, ys, yz, got = _unary("QLinearSigmoid", data)
    assert_same(qlinear_sigmoid(x, xs, xz, ys, yz), got)


@SETTINGS
@given(data=st.data())
def test_qlinear_concat(data):
    dt = data.draw(dtypes)
    rank = data.draw(st.integers(1, 4))
    shape = [data.draw(st.integers(1, 4)) for _ in range(rank)]
    axis = data.draw(st.integers(-rank, rank - 1))
    ys, yz = np.float32(data.draw(scales)), zp(data, dt)
    triples, feeds = [], [("ys", np.array(ys), False), ("yz", np.array(yz), False)]
    for j in range(data.draw(st.integers(1, 4))):
        sh = list(shape)
        sh[axis] = data.draw(st.integers(1, 3))
        x = qarray(data, dt, tuple(sh))
        same = data.draw(st.booleans())
        xs, xz = (ys, yz) if same else (np.float32(data.draw(scales)), zp(data, dt))
        triples.append((x, xs, xz))
        feeds += [(f"x{j}", x, True), (f"s{j}", np.array(xs), False), (f"z{j}", np.array(xz), False)]
    got = run_node("QLinearConcat", feeds, dt, axis=axis)
    assert_same(qlinear_concat(ys, np.array(yz), triples, axis), got)


# --- Pools ---------------------------------------------------------------------------------------

@SETTINGS
@given(data=st.data())
def test_qlinear_global_average_pool(data):
    dt = data.draw(dtypes)
    cl = data.draw(st.sampled_from([0, 1]))
    sp = [data.draw(st.integers(1, 9)) for _ in range(data.draw(st.integers(1, 3)))]
    n, c = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 20))
    x = qarray(data, dt, (n, *sp, c) if cl else (n, c, *sp))
    xs, ys = np.float32(data.draw(scales)), np.float32(data.draw(scales))
    xz, yz = zp(data, dt), zp(data, dt)
    feeds = [("x", x, True), ("xs", np.array(xs), False), ("xz", np.array(xz), False),
             ("ys", np.array(ys), False), ("yz", np.array(yz), False)]
    try:
        ref = qlinear_global_average_pool(x, xs, xz, ys, yz, channels_last=cl)
    except ValueError:
        with pytest.raises(Exception, match="out of computation range"):
            run_node("QLinearGlobalAveragePool", feeds, dt, channels_last=cl)
        return
    assert_same(ref, run_node("QLinearGlobalAveragePool", feeds, dt, channels_last=cl))


def _pool_args(data, nd_max=3, dil=False):
    nd = data.draw(st.integers(1, nd_max))
    sp = [data.draw(st.integers(1, 8)) for _ in range(nd)]
    k = [data.draw(st.integers(1, s)) for s in sp]
    if data.draw(st.booleans()):
        k = list(sp)  # whole-image kernel (ORT's global-pool fallback when pads are 0)
    s = [data.draw(st.integers(1, 3)) for _ in range(nd)]
    p = [data.draw(st.integers(0, kk - 1)) for kk in k] + [data.draw(st.integers(0, kk - 1)) for kk in k]
    if data.draw(st.booleans()):
        p = [0] * (2 * nd)
    d = [data.draw(st.integers(1, 2)) if dil else 1 for _ in range(nd)]
    for i in range(nd):  # keep the dilated kernel inside the padded input
        while d[i] * (k[i] - 1) + 1 > sp[i] + p[i] + p[i + nd]:
            d[i] = 1
            k[i] -= 1
            p[i], p[i + nd] = min(p[i], k[i] - 1), min(p[i + nd], k[i] - 1)
    return sp, k, s, p, d, data.draw(st.sampled_from([0, 1]))


@SETTINGS
@given(data=st.data())
def test_qlinear_average_pool(data):
    dt = data.draw(dtypes)
    sp, k, s, p, _, ceil = _pool_args(data)
    cip = data.draw(st.sampled_from([0, 1]))
    x = qarray(data, dt, (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), *sp))
    xs, ys = np.float32(data.draw(scales)), np.float32(data.draw(scales))
    xz, yz = zp(data, dt), zp(data, dt)
    feeds = [("x", x, True), ("xs", np.array(xs), False), ("xz", np.array(xz), False),
             ("ys", np.array(ys), False), ("yz", np.array(yz), False)]
    attrs = dict(kernel_shape=k, strides=s, pads=p, count_include_pad=cip, ceil_mode=ceil)
    try:
        ref = qlinear_average_pool(x, xs, xz, ys, yz, **attrs)
    except ValueError:
        with pytest.raises(Exception, match="out of computation range"):
            run_node("QLinearAveragePool", feeds, dt, **attrs)
        return
    assert_same(ref, run_node("QLinearAveragePool", feeds, dt, **attrs))


@SETTINGS
@given(data=st.data())
def test_max_pool(data):
    dt = data.draw(dtypes)
    sp, k, s, p, d, ceil = _pool_args(data, nd_max=2, dil=True)
    x = qarray(data, dt, (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), *sp))
    attrs = dict(kernel_shape=k, strides=s, pads=p, dilations=d, ceil_mode=ceil)
    got = run_node("MaxPool", [("x", x, True)], dt, ms=False, **attrs)
    assert_same(max_pool(x, **attrs), got)


# --- QuantizeLinear / DequantizeLinear -----------------------------------------------------------

@SETTINGS
@given(data=st.data())
def test_quantize_dequantize(data):
    dt = data.draw(dtypes)
    rank = data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.integers(1, 6)) for _ in range(rank))
    per_axis = data.draw(st.booleans())
    axis = data.draw(st.integers(-rank, rank - 1))
    n = shape[axis] if per_axis else 1
    sc = np.array([data.draw(scales) for _ in range(n)], np.float32)
    z = np.array([zp(data, dt) for _ in range(n)], dt)
    if not per_axis:
        sc, z = sc.reshape(()), z.reshape(())
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    # Values on and next to exact ties k/2 * scale, plus large values that saturate, plus +-inf.
    base = (rng.integers(-600, 600, size=shape) / 2).astype(np.float32)
    s_b = np.broadcast_to(sc.reshape([-1 if i == axis % rank else 1 for i in range(rank)]) if per_axis else sc, shape)
    x = (base * s_b).astype(np.float32)
    x = np.where(rng.random(shape) < 0.2, np.nextafter(x, np.float32(np.inf)), x)
    x = np.where(rng.random(shape) < 0.2, rng.normal(0, 50, shape).astype(np.float32), x)
    # copysign, not inf * sign(x): that is NaN for exact zeros (which the reference rightly refuses)
    x = np.where(rng.random(shape) < 0.05, np.copysign(np.float32(np.inf), x), x).astype(np.float32)
    ax = {"axis": axis} if per_axis else {}
    got = run_node("QuantizeLinear", [("x", x, True), ("s", sc, False), ("z", z, False)], dt, ms=False, **ax)
    q = quantize_linear(x, sc, z, axis=axis)
    assert_same(q, got)
    got = run_node("DequantizeLinear", [("q", q, True), ("s", sc, False), ("z", z, False)], np.float32, ms=False, **ax)
    ref = dequantize_linear(q, sc, z, axis=axis)
    assert ref.dtype == got.dtype and ref.shape == got.shape
    np.testing.assert_array_equal(ref.view(np.uint32), got.view(np.uint32))


# --- Argument checks -----------------------------------------------------------------------------

def test_argument_errors():
    a = np.zeros((2, 3), np.uint8)
    with pytest.raises(TypeError, match="b must have the dtype"):
        qlinear_add(a, 0.1, 0, a.astype(np.int8), 0.1, 0, 0.1, 0)
    with pytest.raises(ValueError, match="not broadcastable"):
        qlinear_mul(a, 0.1, 0, np.zeros((4,), np.uint8), 0.1, 0, 0.1, 0)
    with pytest.raises(ValueError, match="c_scale"):
        qlinear_add(a, 0.1, 0, a, 0.1, 0, -1.0, 0)
    with pytest.raises(ValueError, match="a_zero_point"):
        qlinear_add(a, 0.1, 300, a, 0.1, 0, 0.1, 0)
    with pytest.raises(TypeError, match="x must be uint8 or int8"):
        qlinear_sigmoid(a.astype(np.int32), 0.1, 0, 0.1, 0)
    with pytest.raises(TypeError, match="alpha"):
        qlinear_leaky_relu(a, 0.1, 0, 0.1, 0, alpha="x")
    with pytest.raises(ValueError, match="kernel_shape"):
        qlinear_average_pool(np.zeros((1, 1, 4, 4), np.uint8), 0.1, 0, 0.1, 0, kernel_shape=[2])
    with pytest.raises(ValueError, match="pads"):
        max_pool(np.zeros((1, 1, 4, 4), np.uint8), kernel_shape=[2, 2], pads=[2, 0, 0, 0])
    with pytest.raises(ValueError, match="channels_last"):
        qlinear_global_average_pool(np.zeros((1, 1, 4), np.uint8), 0.1, 0, 0.1, 0, channels_last=2)
    with pytest.raises(ValueError, match="axis"):
        qlinear_concat(0.1, np.uint8(0), [(a, 0.1, 0)], axis=2)
    with pytest.raises(ValueError, match="NaN"):
        quantize_linear(np.array([np.nan], np.float32), np.float32(0.1), np.uint8(0))
    with pytest.raises(ValueError, match="y_scale has 2 entries"):
        quantize_linear(np.zeros((2, 3), np.float32), np.ones(2, np.float32), np.zeros(2, np.uint8), axis=1)
    with pytest.raises(TypeError, match="x must be uint8 or int8"):
        dequantize_linear(np.zeros(3, np.float32), np.float32(0.1), None)
