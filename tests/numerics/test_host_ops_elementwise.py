"""vkinfer/model/host_elementwise.py against ONNX Runtime 1.31 (CPU EP, one thread), each op alone on the host and
the one-node model on every device (numerics/test_host_float.py's _both): bit-equal where one IEEE operation per
element is ORT's arithmetic or ORT's function is reproduced (MLAS's exp, Eigen's SSE exp / log / log1p / sin / cos /
asin / acos with the C library's on the len % 4 tail in
vkinfer/model/host_eigen.py, the C library's tanf ... atanhf), within the pinned ulp bound where ORT evaluates
Eigen's packet atan (numpy's here) or Softsign with Eigen's reciprocal estimate. Edge
tables: NaN, +-inf, +-0, denormals, rounding ties, integer extremes, empty tensors; random values and broadcast
shapes."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from vkinfer.model.graph import Node
from vkinfer.model.op_table import OPS

from .test_host_float import EDGE, _bits_equal, _both, _float_model, _host, _ort, _random_values, _ulps

F32 = np.float32
TIES = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 4.5, 1e7 + 0.5, 8388607.5, -8388609.0], F32)
VALUES = np.concatenate([_random_values(21), TIES, np.array([np.nan, -np.nan, 0.0, -0.0], F32)])
UNIT = np.concatenate([np.linspace(-1, 1, 4001, dtype=F32), np.array([0.0, -0.0, 1e-30, -1e-30, np.nan], F32)])

EXACT_UNARY = [
    ("Abs", {}, 13), ("Neg", {}, 13), ("Floor", {}, 13), ("Ceil", {}, 13), ("Round", {}, 13),
    ("Reciprocal", {}, 13), ("Sqrt", {}, 13), ("Sign", {}, 13), ("IsNaN", {}, 20), ("IsInf", {}, 20),
    ("IsInf", {"detect_negative": 0}, 20), ("IsInf", {"detect_positive": 0}, 20),
    ("ThresholdedRelu", {"alpha": 0.7}, 22), ("Shrink", {}, 13), ("Shrink", {"lambd": 1.5, "bias": 0.25}, 13),
    ("Gelu", {}, 20), ("Gelu", {"approximate": "tanh"}, 20), ("Swish", {"alpha": 1.5}, 24), ("Swish", {}, 24),
    ("Exp", {}, 13), ("Log", {}, 13), ("Sin", {}, 13), ("Cos", {}, 13), ("Asin", {}, 13), ("Acos", {}, 13),
    ("Tan", {}, 13), ("Sinh", {}, 13), ("Cosh", {}, 13), ("Asinh", {}, 13),
    ("Acosh", {}, 13), ("Atanh", {}, 13), ("Softplus", {}, 13), ("Mish", {}, 22), ("Elu", {}, 22),
    ("Elu", {"alpha": 0.3}, 22), ("Celu", {"alpha": 2.0}, 22), ("Selu", {}, 22),
]
# (op, attrs, inputs, measured max ulps on these inputs, pinned bound): numpy's libm against ORT's Eigen.
BOUNDED_UNARY = [("Atan", {}, "values", 3), ("Softsign", {}, "values", 1)]


def _inputs(kind: str) -> np.ndarray:
    v = VALUES[np.abs(VALUES) < 80] if kind == "values" else VALUES
    return {"values": v, "unit": UNIT, "positive": np.abs(VALUES[np.isfinite(VALUES)]) + F32(1e-3),
            "acosh": np.abs(VALUES[np.isfinite(VALUES)]) + F32(1)}[kind]


@pytest.mark.parametrize("op,attrs,opset", EXACT_UNARY, ids=[f"{o}{a or ''}" for o, a, _ in EXACT_UNARY])
def test_unary_exact(op, attrs, opset):
    """Every value of the edge table and random values (Atanh: also [-1, 1]; Acosh: also [1, ...); 40,000 random
    values more for the functions ORT evaluates by polynomial)."""
    x = VALUES
    if op in ("Atanh", "Exp", "Log", "Softplus", "Mish", "Elu", "Celu", "Selu", "Sin", "Cos", "Asin", "Acos"):
        rng = np.random.default_rng(len(op))
        x = np.concatenate([x, UNIT, rng.uniform(-110, 100, 20000).astype(F32),
                            np.exp(rng.uniform(-90, 90, 20000)).astype(F32)])
    elif op == "Acosh":
        x = np.concatenate([x, np.abs(x) + F32(1)])
    got, want = _both(helper.make_node(op, ["x"], ["y"], **attrs), [x], opset)
    _bits_equal(got[0], want[0])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 6, 7, 1003])
def test_eigen_tails_exact(n):
    """ORT's Eigen functors take the scalar path (the C library's expf, logf, sinf, ...) on the last len % 4
    elements: every tail length, for every op evaluated by Eigen's packet functions."""
    rng = np.random.default_rng(n)
    for op, lo, hi, attrs, opset in (("Log", 1e-3, 100, {}, 13), ("Sin", -50, 50, {}, 13), ("Cos", -50, 50, {}, 13),
                                     ("Asin", -1, 1, {}, 13), ("Acos", -1, 1, {}, 13), ("Elu", -20, 5, {}, 22),
                                     ("Selu", -20, 5, {}, 22), ("Celu", -20, 5, {"alpha": 1.5}, 22),
                                     ("Softplus", -30, 30, {}, 22), ("Mish", -30, 30, {}, 22),
                                     ("Exp", -100, 88, {}, 13)):
        x = rng.uniform(lo, hi, n).astype(F32)
        got, want = _both(helper.make_node(op, ["x"], ["y"], **attrs), [x], opset)
        _bits_equal(got[0], want[0])


@pytest.mark.parametrize("op,attrs,kind,bound", BOUNDED_UNARY, ids=[c[0] for c in BOUNDED_UNARY])
def test_unary_bounded(op, attrs, kind, bound):
    """Finite results within `bound` ulps of ORT's; NaN, infinities and signed zeros where ORT has them."""
    x = _inputs(kind)
    got, want = _both(helper.make_node(op, ["x"], ["y"], **attrs), [x], 22 if op == "Mish" else 13)
    g, w = got[0], want[0]
    fin = np.isfinite(w)
    np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
    np.testing.assert_array_equal(g[~fin & ~np.isnan(w)], w[~fin & ~np.isnan(w)])
    assert _ulps(g[fin], w[fin]).max() <= bound, op


INT_TYPES = [np.int8, np.uint8, np.int32, np.int64]


def _ints(dtype, seed: int, n: int = 400) -> np.ndarray:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    v = rng.integers(max(info.min, -10**6), min(info.max, 10**6), n, endpoint=True).astype(dtype)
    return np.concatenate([np.array([info.min, info.max, 0, 1, info.max - 1], dtype), v])


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
@pytest.mark.parametrize("op", ["Abs", "Neg", "Sign"])
def test_integer_unary_exact(op, dtype):
    """Integer Abs / Neg wrap at the minimum as C++ does; Sign."""
    got, want = _both(helper.make_node(op, ["x"], ["y"]), [_ints(dtype, 3)], 13)
    _bits_equal(got[0], want[0])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
@pytest.mark.parametrize("op,attrs", [("Div", {}), ("Mod", {}), ("Mod", {"fmod": 1}), ("Sub", {}),
                                      ("Equal", {}), ("Less", {}), ("GreaterOrEqual", {})])
def test_integer_binary_exact(op, attrs, dtype):
    """Integer Div truncates toward zero, Mod takes the divisor's sign (fmod=1: C's fmod on doubles, as ORT; int64
    extremes included), Sub wraps."""
    a, b = _ints(dtype, 5), np.roll(_ints(dtype, 6), 7)
    if op in ("Div", "Mod"):
        b = np.where(b == 0, dtype(3), b).astype(dtype)
        if np.iinfo(dtype).min < 0:  # INT_MIN / -1 overflows (ORT: a signal)
            b = np.where((a == np.iinfo(dtype).min) & (b == -1), dtype(2), b).astype(dtype)
        b = np.where(np.arange(len(b)) % 3 == 0, b % dtype(20) + dtype(1), b).astype(dtype)  # small divisors too
    got, want = _both(helper.make_node(op, ["a", "b"], ["y"], **attrs), [a, b], 13)
    _bits_equal(got[0], want[0])


@pytest.mark.parametrize("op,attrs", [("Sub", {}), ("Div", {}), ("Mod", {"fmod": 1}), ("Equal", {}), ("Greater", {}),
                                      ("GreaterOrEqual", {}), ("Less", {}), ("LessOrEqual", {})])
@pytest.mark.parametrize("seed", [0, 1])
def test_float_binary_exact_broadcast(op, attrs, seed):
    """Random broadcast shapes filled with edge and random values (NaN, +-inf, +-0 against each other)."""
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 6, 3))
    other = tuple(1 if rng.random() < 0.4 else d for d in shape)
    a = rng.choice(VALUES, shape).astype(F32)
    b = rng.choice(np.concatenate([VALUES, EDGE]), other).astype(F32)
    got, want = _both(helper.make_node(op, ["a", "b"], ["y"], **attrs), [a, b], 13)
    _bits_equal(got[0], want[0])


@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("op", ["Sum", "Mean"])
def test_variadic_exact(op, n):
    """Sum adds left to right; Mean multiplies that sum by 1 / n rounded to float32 (ORT: measured, a divide
    differs on a third of the elements for n = 3)."""
    rng = np.random.default_rng(n)
    shapes = [(2, 3, 4), (3, 1), (4,), (1, 1, 1)][:n]
    xs = [rng.choice(VALUES, s).astype(F32) for s in shapes]
    got, want = _both(helper.make_node(op, [f"x{i}" for i in range(n)], ["y"]), xs, 13)
    _bits_equal(got[0], want[0])


def test_logic_bitwise_and_where_exact():
    rng = np.random.default_rng(9)
    p, q = rng.random((3, 5)) < 0.5, rng.random((5,)) < 0.5
    u8, s8 = _ints(np.uint8, 1, 40), np.roll(_ints(np.uint8, 2, 40), 3) % np.uint8(8)
    i32 = _ints(np.int32, 4, 45)
    cases = [(helper.make_node(o, ["a", "b"], ["y"]), [p, q], 13) for o in ("And", "Or", "Xor")]
    cases += [(helper.make_node("Not", ["a"], ["y"]), [p], 13)]
    cases += [(helper.make_node(o, ["a", "b"], ["y"]), [i32, np.roll(i32, 5)], 18)
              for o in ("BitwiseAnd", "BitwiseOr", "BitwiseXor")]
    cases += [(helper.make_node("BitwiseNot", ["a"], ["y"]), [i32], 18)]
    cases += [(helper.make_node("BitShift", ["a", "b"], ["y"], direction=d), [u8, s8], 11) for d in ("LEFT", "RIGHT")]
    cases += [(helper.make_node("Where", ["c", "a", "b"], ["y"]), [p, rng.choice(VALUES, (3, 5)).astype(F32),
                                                                   np.array(-0.0, F32)], 16)]
    cases += [(helper.make_node("Where", ["c", "a", "b"], ["y"]), [q, i32[:5].astype(np.int64), np.int64(-1)], 16)]
    for node, inputs, opset in cases:
        got, want = _both(node, [np.asarray(v) for v in inputs], opset)
        _bits_equal(got[0], want[0])
    # uint64 (no vkinfer graph input takes it: host kernel against ORT only): shifts up to 63 bits.
    node = helper.make_node("BitShift", ["a", "b"], ["y"], direction="LEFT")
    inputs = [_ints(np.int64, 3, 40).view(np.uint64), np.arange(45, dtype=np.uint64) % np.uint64(64)]
    _bits_equal(_host(node, inputs, 11)[0], _ort(_float_model(node, inputs, 11), {"a": inputs[0], "b": inputs[1]})[0])


@pytest.mark.parametrize("opset", [7, 10, 12, 13])
def test_dropout_inference_identity(opset):
    """The input, and ORT's mask: zeros before opset 12 (the input's type before 10), ones (bool) from 12."""
    x = VALUES[:50].reshape(5, 10)
    ins = ["x", "r"] if opset >= 12 else ["x"]
    node = helper.make_node("Dropout", ins, ["y", "m"])
    inputs = [x, np.array(0.3, F32)][:len(ins)]
    if opset < 10:  # onnx's shape inference leaves the mask untyped, so no model: ORT's result on the kernel's
        got = _host(node, inputs, opset)
        want = _ort(_float_model(helper.make_node("Dropout", ins, ["y"]), inputs, opset), {"x": x})
        _bits_equal(got[0], want[0])
        _bits_equal(got[1], np.zeros(x.shape, F32))
        return
    got, want = _both(node, inputs, opset)
    _bits_equal(got[0], want[0])
    _bits_equal(got[1], want[1])


def test_empty_tensors():
    """Empty inputs give empty outputs of the right shape and type (ORT's)."""
    e = np.zeros((2, 0, 3), F32)
    for node, inputs in ((helper.make_node("Exp", ["x"], ["y"]), [e]), (helper.make_node("Sub", ["a", "b"], ["y"]),
                         [e, np.ones(3, F32)]), (helper.make_node("Less", ["a", "b"], ["y"]), [e, e]),
                         (helper.make_node("Sum", ["a", "b"], ["y"]), [e, np.ones((1, 1, 3), F32)])):
        got, want = _both(node, inputs, 13)
        _bits_equal(got[0], want[0])


def _run(op: str, inputs: list, **attrs) -> list:
    attrs["_opset"] = 18
    return OPS[op](Node(op, "n", [f"i{k}" for k in range(len(inputs))], ["y"], attrs), inputs, {})


def test_refusals_name_the_problem():
    """Inputs ORT refuses (or where its result is undefined) are a ValueError / TypeError naming the op."""
    with pytest.raises(ValueError, match="Div: integer division by zero"):
        _run("Div", [np.array([1, 2], np.int32), np.array([1, 0], np.int32)])
    with pytest.raises(ValueError, match="Mod: integer division by zero"):
        _run("Mod", [np.array([1], np.int64), np.array([0], np.int64)])
    with pytest.raises(ValueError, match="fmod=1"):
        _run("Mod", [np.ones(2, F32), np.ones(2, F32)])
    with pytest.raises(TypeError, match="one type"):
        _run("Sub", [np.ones(2, F32), np.ones(2, np.int32)])
    with pytest.raises(TypeError, match="Sin input must be a float"):
        _run("Sin", [np.ones(2, np.int32)])
    with pytest.raises(ValueError, match="BitShift by 8 bits"):
        _run("BitShift", [np.ones(2, np.uint8), np.array([1, 8], np.uint8)], direction="LEFT")
    with pytest.raises(TypeError, match="unsigned"):
        _run("BitShift", [np.ones(2, np.int8), np.ones(2, np.int8)], direction="LEFT")
    with pytest.raises(ValueError, match="approximate"):
        _run("Gelu", [np.ones(2, F32)], approximate="erf")
    with pytest.raises(ValueError, match="training mode"):
        _run("Dropout", [np.ones(2, F32), np.array(0.5, F32), np.array(True)])
    with pytest.raises(TypeError, match="bool"):
        _run("Where", [np.ones(2, F32), np.ones(2, F32), np.ones(2, F32)])
    with pytest.raises(TypeError, match="PRelu input must be float32"):
        _host(helper.make_node("PRelu", ["x", "s"], ["y"]), [np.ones(2, np.int32), np.ones(2, np.int32)], 16)
