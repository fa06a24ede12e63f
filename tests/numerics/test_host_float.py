"""Float ops on the host (vkinfer/model/host_float.py) against ONNX Runtime 1.31 (CPU EP, one thread).

Exact (bit-equal, -0 and NaN included) where host_float claims ORT's numerics: the MLAS kernels (Sigmoid,
Tanh, Erf), HardSigmoid/HardSwish as ORT rounds them, the one-rounding elementwise ops, BatchNormalization,
Pow by 2 and 3, and data movement; on the 256 dequantized values of a random (scale, zero point) in uint8
and int8 (the inputs a 256-entry table is built from) and on edge values. Bounded elsewhere, each test
stating the bound and its mechanism."""

from __future__ import annotations

import functools
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.agree import outcome_devices, run_devices

from vkinfer.model.graph import Node
from vkinfer.model.onnx_import import UnsupportedModelError
from vkinfer.model.op_table import OPS
from vkinfer.testing import zoo

F32 = np.float32
EDGE = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-38, -1e-38, 1e-8, -1e-8, 0.5, -0.5, 1, -1, 2.5, -2.5, 8.99, -9.01,
                 3.9, -3.93, 20, -20, 88.7, -104, 1e30, -1e30, 3.4e38, -3.4e38, np.inf, -np.inf], F32)


def _random_values(seed: int, n: int = 4000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([EDGE, (rng.standard_normal(n) * 4).astype(F32), rng.uniform(-12, 12, n).astype(F32)])


def _ort(model: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None, feed)


def _float_model(node: onnx.NodeProto, inputs: list[np.ndarray], opset: int) -> onnx.ModelProto:
    vis = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
           for n, v in zip(node.input, inputs, strict=False) if n and v is not None]
    outs = [onnx.ValueInfoProto(name=o) for o in node.output]
    m = helper.make_model(helper.make_graph([node], "g", vis, outs), opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    # Typed outputs (ORT does without them, vkinfer's importer does not).
    typed = onnx.shape_inference.infer_shapes(m).graph.output
    del m.graph.output[:]
    m.graph.output.extend(typed)
    return m


def _host(node: onnx.NodeProto, inputs: list[np.ndarray], opset: int) -> list[np.ndarray]:
    """The host kernel of `node` as the importer hands it over (decoded attributes, opset, the NodeProto)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    attrs.update(_opset=opset, _proto=node)
    if node.op_type == "Softmax" and opset < 13:
        attrs["_coerce_2d"] = True  # as the importer marks it
    n = Node(node.op_type, node.name or node.op_type, list(node.input), list(node.output), attrs)
    return OPS[n.op](n, list(inputs), {})


def _both(node: onnx.NodeProto, inputs: list[np.ndarray], opset: int = 13) -> tuple[list, list]:
    """The host kernel's outputs and ORT's on the one-node model. The model on every device too: it runs with the
    host kernel's bits, or every device refuses it alike, as vkinfer refuses models without 8-bit tensors or
    quantization ops (nearly all of these: the kernel is then checked through _host alone)."""
    feed = {n: v for n, v in zip(node.input, inputs, strict=False) if n}
    model = _float_model(node, inputs, opset)
    got = _host(node, inputs, opset)
    outcome = outcome_devices(model, feed)
    if isinstance(outcome, Exception):  # float tensors only, or a bool one: refused at import, for that reason
        assert isinstance(outcome, UnsupportedModelError), outcome
        # (or an empty input, which vkinfer refuses: the kernel is then checked through _host alone too)
        assert re.search("no quantized tensors or ops|unsupported element type 9$|a 0-sized tensor", str(outcome)), \
            outcome
    else:
        for g, w in zip(outcome, got, strict=True):
            _bits_equal(g, w)
    return got, _ort(model, feed)


def _bits_equal(got: np.ndarray, want: np.ndarray) -> None:
    """Bit equality of float arrays (NaN equals NaN of any payload; -0 is not 0)."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
    if got.dtype.kind == "f":
        same = (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
        bad = np.nonzero(~same.reshape(-1))[0]
        assert not bad.size, f"{bad.size} differ, first at {bad[:5]}: {got.reshape(-1)[bad[:5]]} vs " \
                             f"{want.reshape(-1)[bad[:5]]}"
    else:
        np.testing.assert_array_equal(got, want)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    def ordered(v):
        i = np.asarray(v, F32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


def _dequantized(dtype: type, seed: int) -> tuple[np.ndarray, np.float32, int]:
    """All 256 values of `dtype` and a random (scale, zero point)."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    scale = F32(rng.uniform(0.005, 0.2))
    zp = int(rng.integers(info.min, info.max + 1))
    return np.arange(info.min, info.max + 1).astype(dtype), scale, zp


UNARY_EXACT = [
    ("Sigmoid", {}), ("Tanh", {}), ("Erf", {}), ("HardSigmoid", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("HardSwish", {}), ("Relu", {}), ("LeakyRelu", {"alpha": 0.1}), ("Neg", {}), ("Abs", {}), ("Round", {}),
    ("Sqrt", {}), ("Floor", {}), ("Ceil", {}), ("Reciprocal", {}), ("Sign", {}),
]


@functools.cache
def _dq_unary_model(dtype_name: str, seed: int) -> tuple[bytes, np.ndarray]:
    """x (8-bit, 256 values) -> DequantizeLinear -> every op of UNARY_EXACT and the constant binary ops, each a
    float output."""
    dtype = np.dtype(dtype_name).type
    x, scale, zp = _dequantized(dtype, seed)
    inits = [numpy_helper.from_array(np.array(scale, F32), "s"), numpy_helper.from_array(np.array(zp, dtype), "z")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"])]
    outs = []
    for i, (op, attrs) in enumerate(UNARY_EXACT):
        nodes.append(helper.make_node(op, ["xf"], [f"u{i}"], name=f"u{i}", **attrs))
        outs.append(f"u{i}")
    rng = np.random.default_rng(seed + 1)
    x = x.reshape(1, 4, 8, 8)
    for i, op in enumerate(["Div", "Mul", "Add", "Sub", "Max", "Min", "Pow", "Pow", "Div"]):
        if op == "Pow":
            c = np.array(2.0 if i == 6 else 3.0, F32)
        elif i == 8:
            c = np.array(6.0, F32)  # HardSwish written out: x * relu6(x + 3) / 6 ends in a Div by 6
        else:
            c = rng.uniform(-3, 3, (1, 4, 1, 1)).astype(F32)
        inits.append(numpy_helper.from_array(c, f"c{i}"))
        nodes.append(helper.make_node(op, ["xf", f"c{i}"], [f"b{i}"], name=f"b{i}"))
        outs.append(f"b{i}")
    nodes.append(helper.make_node("Clip", ["xf", "lo", "hi"], ["clip"], name="clip"))
    inits += [numpy_helper.from_array(np.array(-0.7, F32), "lo"), numpy_helper.from_array(np.array(1.3, F32), "hi")]
    outs.append("clip")
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(
        np.dtype(dtype)), x.shape)], [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    return m.SerializeToString(), x


@pytest.mark.parametrize("dtype,seed", [("uint8", 1), ("int8", 2), ("uint8", 3)])
def test_elementwise_on_all_dequantized_bytes_exact(dtype, seed):
    """Every elementwise op a 256-entry table is built from, on the 256 dequantized values of a random
    (scale, zero point), through vkinfer.InferenceSession on every device: bit-equal to ORT."""
    blob, x = _dq_unary_model(dtype, seed)
    want = _ort(onnx.load_model_from_string(blob), {"x": x})
    got = run_devices(blob, {"x": x}, want=want)
    for g, w in zip(got, want, strict=True):  # run_devices compares values: -0 and 0 are told apart here
        _bits_equal(g, w)


@pytest.mark.parametrize("op,attrs", UNARY_EXACT, ids=[f"{o}{'-' + str(a) if a else ''}" for o, a in UNARY_EXACT])
def test_elementwise_edge_and_random_values_exact(op, attrs):
    """0, -0, denormals, the kernels' clamp points (tanh 9, erf 3.925, exp range), huge values and infinities,
    and random values: bit-equal to ORT."""
    x = _random_values(7)
    got, want = _both(helper.make_node(op, ["x"], ["y"], **attrs), [x], opset=14)
    _bits_equal(got[0], want[0])


@pytest.mark.parametrize("opset", [9, 15])
def test_batch_normalization_exact(opset):
    """Inference BatchNormalization: ORT folds scale / sqrt(var + eps) once per channel; the same float32 steps."""
    rng = np.random.default_rng(opset)
    x = (rng.standard_normal((2, 6, 5, 7)) * 3).astype(F32)
    params = [rng.uniform(0.2, 2, 6).astype(F32) for _ in range(4)]
    params[1] -= 1  # a bias of either sign
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], epsilon=1e-3)
    got, want = _both(node, [x, *params], opset=opset)
    _bits_equal(got[0], want[0])


def test_data_movement_and_comparisons_exact():
    """Exact moves and selections through vkinfer's own host kernels: Split, Slice, Concat, Transpose,
    Gather, Resize nearest, DepthToSpace, Tile, Expand; Where/Equal/Greater; Cast to int (in range)."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((1, 4, 6, 6)) * 5).astype(F32)
    cases = [
        (helper.make_node("Split", ["x", "sp"], ["a", "b"], axis=1), [x, np.array([1, 3], np.int64)], 13),
        (helper.make_node("Slice", ["x", "st", "en", "ax", "stp"], ["y"]),
         [x, np.array([1, 5], np.int64), np.array([4, 0], np.int64), np.array([1, 3], np.int64),
          np.array([1, -2], np.int64)], 13),
        (helper.make_node("Concat", ["x", "x2"], ["y"], axis=2), [x, x[:, :, :2] * F32(3)], 13),
        (helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1]), [x], 13),
        (helper.make_node("Gather", ["x", "i"], ["y"], axis=3), [x, np.array([5, 0, -1], np.int64)], 13),
        (helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest"),
         [x, None, np.array([1, 1, 2, 2], F32)], 13),
        (helper.make_node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD"), [x], 13),
        (helper.make_node("Tile", ["x", "r"], ["y"]), [x, np.array([1, 2, 1, 1], np.int64)], 13),
        (helper.make_node("Where", ["c", "x", "x2"], ["y"]), [x > 0, x, -x], 13),
        (helper.make_node("Greater", ["x", "x2"], ["y"]), [x, x[:, :1]], 13),
        (helper.make_node("Equal", ["x", "x2"], ["y"]), [x, np.round(x)], 13),
        (helper.make_node("Cast", ["x"], ["y"], to=TensorProto.INT32), [np.clip(x, -100, 100)], 13),
        (helper.make_node("ReduceMax", ["x", "ax"], ["y"], keepdims=0), [x, np.array([1, 3], np.int64)], 18),
        (helper.make_node("ReduceMin", ["x"], ["y"], axes=[2]), [x], 13),
        (helper.make_node("Max", ["x", "x2", "x3"], ["y"]), [x, x[:, :1] * F32(0.5), F32(0.25) * x], 13),
        (helper.make_node("Min", ["x", "x2"], ["y"]), [x, x[:, :, :1]], 13),
    ]
    for node, inputs, opset in cases:
        got, want = _both(node, inputs, opset)
        for g, w in zip(got, want, strict=True):
            _bits_equal(g, w)


def test_bounded_transcendentals():
    """Exp, Log, Elu (exp(x) - 1), Pow by a non-integer exponent: numpy's libm (glibc, within 1 ulp of the true
    value) against ORT's Eigen packet polynomials (Exp, Log) and powf. Bound: 2 ulps for Exp and Elu, 4 for Log,
    1 for Pow."""
    x = _random_values(11)
    for op, bound, v in (("Exp", 2, x[np.abs(x) < 80]), ("Log", 4, np.abs(x[np.isfinite(x)]) + F32(1e-3))):
        got, want = _both(helper.make_node(op, ["x"], ["y"]), [v])
        assert _ulps(got[0], want[0]).max() <= bound, op
    v = x[np.abs(x) < 80]  # Elu: exp(x) - 1 cancels near 0, so the bound is 2 ulps of exp(x), not of the result
    got, want = _both(helper.make_node("Elu", ["x"], ["y"]), [v])
    assert np.all(np.abs(got[0] - want[0]) <= 2 * np.spacing(np.maximum(np.exp(v), np.abs(want[0]))))
    base = np.abs(x[np.isfinite(x) & (np.abs(x) < 1e4)])
    for e in (0.5, 1.7, -1.3):
        got, want = _both(helper.make_node("Pow", ["x", "e"], ["y"]), [base, np.array(e, F32)])
        assert _ulps(got[0], want[0]).max() <= 1, e


@pytest.mark.parametrize("opset,shape,axis", [(13, (3, 10), -1), (13, (2, 5, 64), 1), (11, (2, 3, 4, 5), 1),
                                              (18, (4, 300), -1)])
def test_softmax_bounded(opset, shape, axis):
    """Softmax: ORT runs MLAS's softmax (its own exp polynomial, an 8- or 16-lane sum by CPU, then a multiply by
    1/sum), vkinfer numpy's exp, sum and divide. Bound: 8 ulps of each output (measured: 5)."""
    x = (np.random.default_rng(shape[-1]).standard_normal(shape) * 4).astype(F32)
    got, want = _both(helper.make_node("Softmax", ["x"], ["y"], axis=axis), [x], opset=opset)
    assert _ulps(got[0], want[0]).max() <= 8


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum"])
@pytest.mark.parametrize("opset", [13, 18])
def test_sum_and_mean_reductions_exact(op, opset):
    """ReduceSum / ReduceMean in ORT's own orders (vkinfer/reference/float_reduce.py): the generic loop, its RK
    path, Eigen's per-row redux where the reduced axes are innermost (KR, every axis), MLAS's M = 1 SGEMM of ones
    (KRK), Eigen sums of each run (RKR): bit-equal to ORT on every axis set of a rank-4 tensor (the whole tables:
    tests/ops/test_float_reduce.py)."""
    x = (np.random.default_rng(3).standard_normal((2, 8, 9, 11)) * 3).astype(F32)
    for axes in ([1], [2, 3], [-1], [0, 1, 2, 3], [0], [0, 2], [1, 3], [0, 3], [1, 2], [0, 1], [0, 2, 3]):
        if opset >= 18 or (op in ("ReduceSum",) and opset >= 13):
            node, inputs = helper.make_node(op, ["x", "ax"], ["y"]), [x, np.array(axes, np.int64)]
        else:
            node, inputs = helper.make_node(op, ["x"], ["y"], axes=axes), [x]
        got, want = _both(node, inputs, opset=opset)
        _bits_equal(got[0], want[0])


@pytest.mark.parametrize("op", ["ReduceSumSquare", "ReduceL2"])
@pytest.mark.parametrize("opset", [13, 18])
def test_reductions_bounded(op, opset):
    """Sum-based reductions: ORT's Eigen vectorised summation order against numpy's pairwise sum. Bound: the
    error of a float32 sum, |got - want| <= 2 * n * eps * sum(|terms|) (measured far below; a few ulps of the
    sum when the terms do not cancel). ReduceMax/ReduceMin are exact (test_data_movement_and_comparisons_exact),
    ReduceSum/ReduceMean too (test_sum_and_mean_reductions_exact)."""
    x = (np.random.default_rng(3).standard_normal((2, 8, 9, 11)) * 3).astype(F32)
    for axes in ([1], [2, 3], [-1], [0, 1, 2, 3]):
        if opset >= 18 or (op in ("ReduceSum",) and opset >= 13):
            node, inputs = helper.make_node(op, ["x", "ax"], ["y"]), [x, np.array(axes, np.int64)]
        else:
            node, inputs = helper.make_node(op, ["x"], ["y"], axes=axes), [x]
        got, want = _both(node, inputs, opset=opset)
        n = int(np.prod([x.shape[a] for a in axes]))
        terms = np.abs(x * x) if op in ("ReduceSumSquare", "ReduceL2") else np.abs(x)
        mag = terms.sum(axis=tuple(axes), keepdims=True).reshape(want[0].shape)
        if op == "ReduceMean":
            mag = mag / n
        if op == "ReduceL2":
            mag = np.sqrt(mag)
        err = np.abs(got[0].astype(np.float64) - want[0])
        assert got[0].shape == want[0].shape and np.all(err <= 2 * n * np.finfo(F32).eps * mag + 1e-30), (op, axes)


def test_matmul_between_activations_bounded():
    """MatMul / Gemm of two float tensors: ORT's MLAS SGEMM (fused multiply-adds, its own blocking) against numpy's
    BLAS: both are float32 dot products in different orders. Bound: |got - want| <= 2 * K * eps * sum_k |a||b|."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((2, 3, 17, 40)).astype(F32)
    b = rng.standard_normal((2, 3, 40, 9)).astype(F32)
    got, want = _both(helper.make_node("MatMul", ["a", "b"], ["y"]), [a, b])
    bound = 2 * 40 * np.finfo(F32).eps * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(got[0].astype(np.float64) - want[0]) <= bound)
    c = rng.standard_normal(9).astype(F32)
    gemm = helper.make_node("Gemm", ["a", "b", "c"], ["y"], transB=1, alpha=0.5)
    got, want = _both(gemm, [a[0, 0], b[0, 0].T.copy(), c])
    bound = 2 * 41 * np.finfo(F32).eps * (np.abs(a[0, 0]) @ np.abs(b[0, 0]) + np.abs(c))
    assert np.all(np.abs(got[0].astype(np.float64) - want[0]) <= bound)


def test_bad_attributes_and_inputs_raise_named_errors():
    """Bad attributes or inputs: ValueError / TypeError naming the problem, never KeyError and friends."""
    x = np.ones((1, 4, 2, 2), F32)
    with pytest.raises(ValueError, match="(?i)split"):
        _host(helper.make_node("Split", ["x", "sp"], ["a", "b"], axis=1), [x, np.array([1, 1], np.int64)], 13)
    with pytest.raises(ValueError):
        _host(helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="cubicle"), [x, None, np.ones(4, F32)], 13)
    with pytest.raises(ValueError):
        _host(helper.make_node("Transpose", ["x"], ["y"], perm=[0, 1, 7, 2]), [x], 13)
    with pytest.raises(TypeError, match="float32"):
        _host(helper.make_node("Sigmoid", ["x"], ["y"]), [np.ones(3, np.int32)], 13)
    with pytest.raises(ValueError, match="training_mode"):
        _host(helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"], training_mode=1),
              [x] + [np.ones(4, F32)] * 4, 15)
    with pytest.raises(ValueError, match="shape"):
        _host(helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"]), [x] + [np.ones(3, F32)] * 4, 15)


def test_unsupported_ops_still_listed():
    """Ops nothing implements (custom domains, ops onnx.reference lacks, random ops) are still listed together."""
    m = onnx.load_model_from_string(_dq_unary_model("uint8", 1)[0])
    m.graph.node.append(helper.make_node("Foo", ["xf"], ["f"], name="f1", domain="com.example"))
    m.graph.node.append(helper.make_node("GlobalLpPool", ["xf"], ["g"], name="g1"))
    m.graph.node.append(helper.make_node("RandomNormalLike", ["xf"], ["r"], name="r1"))
    e = outcome_devices(m)  # every device refuses it alike
    assert isinstance(e, UnsupportedModelError), e
    for s in ("f1 (com.example:Foo)", "g1 (GlobalLpPool)", "r1 (RandomNormalLike)"):
        assert s in str(e)


# --- a small QDQ model end to end --------------------------------------------------------------------------------

@functools.cache
def _float_cnn() -> onnx.ModelProto:
    """Conv -> BatchNormalization -> HardSwish-style (x * HardSigmoid(x)) -> Conv -> Sigmoid gate (x * Sigmoid(x))
    -> ReduceMean over space -> Softmax: the float ops ORT's quantizer leaves in field CNNs."""
    rng = np.random.default_rng(4)

    def w(name, shape, s=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * s).astype(F32), name)
    c = 8
    inits = [w("w1", (c, 3, 3, 3)), w("b1", (c,), 0.1), w("w2", (c, c, 1, 1)), w("b2", (c,), 0.1),
             numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(F32), "bn_s"), w("bn_b", (c,), 0.2),
             w("bn_m", (c,), 0.2), numpy_helper.from_array(rng.uniform(0.5, 1.5, c).astype(F32), "bn_v"),
             numpy_helper.from_array(np.array([2, 3], np.int64), "axes")]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_s", "bn_b", "bn_m", "bn_v"], ["bn"]),
        helper.make_node("HardSigmoid", ["bn"], ["hs"], alpha=1 / 6, beta=0.5),
        helper.make_node("Mul", ["bn", "hs"], ["hw"]),
        helper.make_node("Conv", ["hw", "w2", "b2"], ["c2"]),
        helper.make_node("Sigmoid", ["c2"], ["sg"]),
        helper.make_node("Mul", ["c2", "sg"], ["silu"]),
        helper.make_node("ReduceMean", ["silu", "axes"], ["rm"], keepdims=0),
        helper.make_node("Softmax", ["rm"], ["y"], axis=-1),
    ]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 3, 12, 12))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, c))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("fmt,act", [("qdq", "uint8"), ("qoperator", "uint8"), ("qdq", "int8")])
def test_quantized_cnn_with_float_ops_runs_and_matches_ort(fmt, act):
    """The quantizer's output loads and runs on the CPU; its 8-bit tensors feed the float ops on the host.
    The final Softmax is float: bound 8 ulps (test_softmax_bounded); ReduceMean feeds it after a
    QuantizeLinear, so any rounding difference of the mean shows at most as one quantization step of its input,
    which the bound below allows for (|softmax'| <= 1/4 per unit of input)."""
    m = zoo.quantize(_float_cnn(), fmt=fmt, activation_type=act, reduce_range=True)
    x = zoo.random_inputs(m, 1)
    config = {"session.qdqisint8allowed": "1"} if act == "int8" else None
    want = zoo.ort_run(m, x, config=config)[0]
    (got,) = run_devices(m, x)  # ORT is within the bound below, not exact
    assert got.shape == want.shape and got.dtype == want.dtype
    assert _ulps(got, want).max() <= 8 or np.abs(got - want).max() <= 0.5 * 0.05, (got, want)


def test_ort_fusions_of_float_patterns():
    """Which float patterns ORT_ENABLE_ALL fuses (host_float's docstring states the consequence). In the float model
    the Erf GELU chain becomes Gelu, the layer-norm chain LayerNormalization and x * Sigmoid(x) QuickGelu; in the
    QDQ model the quantizer puts Q/DQ pairs inside those chains, so none of them fuses: the float pieces between
    the pairs (Div and Erf; ReduceMean, Sub, Pow, ReduceMean; Sqrt and Div) run as written, each the kernel
    host_float reproduces, and Sigmoid / Mul / Add become QLinear ops."""
    import os
    import tempfile

    d = 16
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(np.array(v, F32), n) for n, v in
             (("sqrt2", np.sqrt(2)), ("one", 1.0), ("half", 0.5), ("two", 2.0), ("eps", 1e-5))]
    inits += [numpy_helper.from_array(rng.standard_normal(d).astype(F32), n) for n in ("gamma", "beta")]
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
        helper.make_node("Add", ["e", "one"], ["a"]), helper.make_node("Mul", ["x", "a"], ["m"]),
        helper.make_node("Mul", ["m", "half"], ["gelu"]),
        helper.make_node("ReduceMean", ["gelu"], ["mu"], axes=[-1]), helper.make_node("Sub", ["gelu", "mu"], ["c"]),
        helper.make_node("Pow", ["c", "two"], ["c2"]), helper.make_node("ReduceMean", ["c2"], ["var"], axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["sd"]),
        helper.make_node("Div", ["c", "sd"], ["n"]), helper.make_node("Mul", ["n", "gamma"], ["ng"]),
        helper.make_node("Add", ["ng", "beta"], ["ln"]),
        helper.make_node("Sigmoid", ["ln"], ["sg"]), helper.make_node("Mul", ["ln", "sg"], ["y"]),
    ]
    g = helper.make_graph(nodes, "f", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, d))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (2, d))], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8

    def optimized(model: onnx.ModelProto) -> list[str]:
        with tempfile.TemporaryDirectory() as tmp:
            so = ort.SessionOptions()
            so.optimized_model_filepath = os.path.join(tmp, "opt.onnx")
            so.log_severity_level = 3
            ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
            return [n.op_type for n in onnx.load(so.optimized_model_filepath).graph.node]
    assert sorted(optimized(m)) == ["Gelu", "LayerNormalization", "QuickGelu"]
    ops = optimized(zoo.quantize(m, fmt="qdq"))
    assert not {"Gelu", "LayerNormalization", "QuickGelu"} & set(ops)
    floats = [o for o in ops if o not in ("QuantizeLinear", "DequantizeLinear") and not o.startswith("QLinear")]
    assert floats == ["Div", "Erf", "ReduceMean", "Sub", "Pow", "ReduceMean", "Sqrt", "Div"]


def test_int32_dequantize_of_a_quantized_bias_exact():
    """DequantizeLinear of an int32 tensor (the quantizer's int32 bias in front of a float op it leaves, e.g.
    BatchNormalization): float32(x) * scale, bit for bit with ORT, large values (rounded to float32) included;
    a non-zero zero point is refused."""
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.integers(-2**31, 2**31 - 1, 500), [0, 1, -1, 2**24 + 1, -2**31, 2**31 - 1]]).astype(
        np.int32)
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"])
    for s in (np.array(0.0123, np.float32), np.array(3.5e-7, np.float32)):
        got, want = _both(node, [x, s])
        _bits_equal(got[0], want[0])
    zp_node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"])
    zp_inputs = [x, np.array(1, F32), np.array(3, np.int32)]
    with pytest.raises(ValueError, match="zero point"):
        _host(zp_node, zp_inputs, 13)
    e = outcome_devices(_float_model(zp_node, zp_inputs, 13), dict(zip("xsz", zp_inputs, strict=True)))
    assert isinstance(e, ValueError) and "zero point" in str(e), e  # every device alike
