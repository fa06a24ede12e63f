"""ONNX importer extras against ONNX Runtime on every device: Pad on 8-bit tensors (and its QDQ folding),
ConvInteger / MatMulInteger, dynamic quantization (DynamicQuantizeLinear, Cast and the float tail), activation
fusion and constant folding."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper, numpy_helper
from support import ort_oracle as oo
from support.agree import outcome_devices, refused_devices, run_devices

import vkinfer
from vkinfer.model.onnx_import import UnsupportedModelError
from vkinfer.model.op_table import OPS
from vkinfer.testing import zoo
from vkinfer.testing.onnx_builder import MS, make_model


def _model(nodes, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray], outputs: dict[str, type],
           opset: int = 13) -> onnx.ModelProto:
    """A model of `nodes`; `outputs` maps each output name to its numpy type."""
    return make_model(nodes, inputs, outputs, consts, opset=opset, domains=MS)


def _ort(model: onnx.ModelProto, feed: dict[str, np.ndarray], optimize: bool = True) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 4
    if not optimize:
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feed)


def _quiet_quantize(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zoo.quantize(*args, **kwargs)


# ---------------------------------------------------------------------------------------------- Pad

def _pad_cases():
    """Seeded table: every mode, both types, axes, negative pads (cropping, even past the other side's
    padding in constant mode), constant values at the type's ends; plus random ones."""
    table = [
        ("constant", np.uint8, (1, 3, 4, 5), [0, 0, 1, 2, 0, 0, 2, 1], 255, None),
        ("constant", np.int8, (1, 3, 4, 5), [0, 1, 1, 0, 0, 0, 3, 1], -128, None),
        ("constant", np.int8, (2, 5), [1, -2, -1, 3], 127, None),
        ("constant", np.uint8, (3, 1), [2, 4, -4, -1], 7, None),        # crop past the original data
        ("constant", np.uint8, (2, 3, 4), [1, 2, 0, 1], None, [-1, 0]),  # axes, default value 0
        ("reflect", np.uint8, (1, 2, 5, 4), [0, 0, 3, 2, 0, 0, 1, 3], None, None),
        ("reflect", np.int8, (4, 6), [-1, 2, 0, -2], None, None),
        ("edge", np.int8, (1, 2, 3, 3), [0, 0, 4, 1, 0, 0, 0, 5], None, None),
        ("edge", np.uint8, (5, 2, 3), [-2, 3, 1, -1], None, [0, 2]),
        ("wrap", np.uint8, (2, 3, 4), [0, 2, 5, 1, 1, 3], None, None),   # wraps more than once
        ("wrap", np.int8, (3, 4), [1, -1, -1, 2], None, None),
    ]
    rng = np.random.default_rng(41)
    for _ in range(12):
        mode = ["constant", "reflect", "edge", "wrap"][int(rng.integers(4))]
        dt = [np.uint8, np.int8][int(rng.integers(2))]
        shape = tuple(int(s) for s in rng.integers(2, 6, int(rng.integers(1, 5))))
        lo = -1 if mode != "constant" else -3
        hi = 2 if mode == "reflect" else 5
        pads = rng.integers(lo, hi, 2 * len(shape)).tolist()
        value = int(rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1)) if mode == "constant" else None
        table.append((mode, dt, shape, pads, value, None))
    return table


PAD_CASES = _pad_cases()


@pytest.mark.parametrize("mode,dtype,shape,pads,value,axes", PAD_CASES,
                         ids=[f"{c[0]}-{np.dtype(c[1]).name}-{i}" for i, c in enumerate(PAD_CASES)])
def test_pad_8bit_equals_onnxruntime(mode, dtype, shape, pads, value, axes):
    rng = np.random.default_rng(len(shape) * 100 + sum(pads) + 7)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    x.flat[0], x.flat[-1] = info.min, info.max
    consts = {"pads": np.array(pads, np.int64)}
    ins = ["x", "pads", "", ""]
    if value is not None:
        consts["value"], ins[2] = np.array(value, dtype), "value"
    if axes is not None:
        consts["axes"], ins[3] = np.array(axes, np.int64), "axes"
    while not ins[-1]:
        ins.pop()
    m = _model([helper.make_node("Pad", ins, ["y"], mode=mode)], {"x": x}, consts, {"y": dtype}, opset=19)
    want = _ort(m, {"x": x})
    run_devices(m, {"x": x}, want=want)


def test_pad_invalid_like_onnxruntime():
    """Where ORT refuses (reflect beyond the axis, edge of an emptied axis) vkinfer raises ValueError too, on every
    device."""
    x = np.arange(12, dtype=np.uint8).reshape(3, 4)
    for mode, pads in [("reflect", [3, 0, 0, 0]), ("edge", [-3, 1, 0, 0]), ("constant", [-2, 0, -2, 0])]:
        m = _model([helper.make_node("Pad", ["x", "pads"], ["y"], mode=mode)], {"x": x},
                   {"pads": np.array(pads, np.int64)}, {"y": np.uint8})
        with pytest.raises(Exception):  # noqa: B017 (ORT's own exception type)
            _ort(m, {"x": x})
        refused_devices(m, {"x": x}, ValueError)


def _padnet(mode: str, value: float | None, seed: int = 0) -> onnx.ModelProto:
    g = zoo._Graph(seed)
    x = g.relu(g.conv(zoo.INPUT, 3, 8, 3))
    ins = [x, g.const("pads", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))]
    if value is not None:
        ins.append(g.const("cv", np.array(value, np.float32)))
    x = g.node("Pad", ins, mode=mode)
    x = g.conv(x, 8, 4, 3)
    return g.model("padnet", [1, 3, 8, 8], x, [1, 4, 11, 11])


@pytest.mark.parametrize("mode,value", [("constant", None), ("constant", 0.7), ("constant", -3.0), ("reflect", None),
                                        ("edge", None)])
@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
def test_pad_model_equals_onnxruntime(fmt, mode, value):
    """quantize_static puts Pad on the 8-bit tensor (QOperator: constant_value quantized; QDQ: DQ -> Pad -> Q,
    which vkinfer folds to an 8-bit Pad with the value quantized by the Q's parameters). A value outside the
    input's range (-3.0 after a Relu) gives the Pad output its own parameters: QDQ then stays a float Pad
    between DQ and Q, as in ORT."""
    q = _quiet_quantize(_padnet(mode, value), fmt=fmt, reduce_range=True, seed=5)
    feed = zoo.random_inputs(q, seed=6)
    sess = vkinfer.InferenceSession(q, device="reference")
    [pad] = [n for n in sess.graph.nodes if n.op == "Pad"]
    dq_fed = any(n.op == "DequantizeLinear" and n.outputs[0] == pad.inputs[0] for n in sess.graph.nodes)
    assert dq_fed == (fmt == "qdq" and value == -3.0)
    run_devices(q, feed, want=zoo.ort_run(q, feed))


def test_pad_qdq_fold_quantizes_the_value():
    """DQ -> Pad(c) -> Q with shared parameters: the folded Pad's value is Q(c) (saturated when c is out of range),
    and a Pad whose DQ and Q parameters differ is left alone."""
    x = np.array([[0, 3, 255], [17, 128, 1]], np.uint8)
    s, z = np.float32(0.05), np.uint8(10)
    for c, want_value in [(0.7, 24), (-100.0, 0), (1e6, 255), (0.025, 10), (0.075, 12)]:
        nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]),
                 helper.make_node("Pad", ["xf", "pads", "c"], ["pf"]),
                 helper.make_node("QuantizeLinear", ["pf", "s2", "z"], ["y"])]
        for s2, folds in [(s, True), (np.float32(0.06), False)]:
            m = _model(nodes, {"x": x}, {"s": s, "z": z, "s2": s2, "pads": np.array([1, 0, 0, 2], np.int64),
                                         "c": np.array(c, np.float32)}, {"y": np.uint8})
            sess = vkinfer.InferenceSession(m, device="reference")
            assert [n.op for n in sess.graph.nodes] == (["Pad"] if folds else ["DequantizeLinear", "Pad",
                                                                               "QuantizeLinear"])
            if folds:
                assert sess.graph.consts[sess.graph.nodes[0].inputs[2]] == want_value
            run_devices(m, {"x": x}, want=_ort(m, {"x": x}))


# ------------------------------------------------------------------------------ ConvInteger / MatMulInteger

def _q(rng, dtype, shape, bits: int = 8):
    """Random 8-bit values with both ends present; `bits=7` keeps int8 within [-64, 63] (ORT's x86 u8 x s8
    kernels saturate int16 pair sums on full-range pairs: see README)."""
    if np.dtype(dtype) == np.int8:
        lo, hi = (-128, 127) if bits == 8 else (-64, 63)
    else:
        lo, hi = (0, 255) if bits == 8 else (0, 127)
    v = rng.integers(lo, hi + 1, shape).astype(dtype)
    v.flat[0], v.flat[-1] = lo, hi
    return v


def _7bit(xt, wt) -> tuple[int, int]:
    """Operand widths ORT computes exactly on this machine: u8 x u8 and s8 x s8 full range; mixed pairs with
    the signed operand's magnitude kept to 6 bits or the unsigned one to 7."""
    if np.dtype(xt) == np.dtype(wt):
        return 8, 8
    return (8, 7) if np.dtype(wt) == np.int8 else (7, 8)


CONV_INT_CASES = [  # (x type, w type, x shape, w shape, attrs, w_zero_point as a 1-element vector)
    (np.uint8, np.uint8, (1, 3, 7, 6), (4, 3, 3, 3), dict(pads=[1, 1, 1, 1]), False),
    (np.uint8, np.int8, (2, 4, 9, 8), (6, 2, 3, 3), dict(group=2, strides=[2, 1], dilations=[1, 2],
                                                       pads=[0, 2, 1, 0]), True),
    (np.int8, np.int8, (1, 8, 5, 5), (8, 1, 3, 3), dict(group=8, pads=[1, 1, 1, 1]), False),
    (np.int8, np.uint8, (1, 2, 6, 6), (3, 2, 1, 1), dict(strides=[3, 3]), False),
    (np.uint8, np.uint8, (1, 3, 10), (5, 3, 4), dict(pads=[2, 1], strides=[2]), False),  # 1-D
    (np.uint8, np.int8, (1, 3, 7, 7), (4, 3, 2, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2]), False),
    (np.uint8, np.uint8, (1, 3, 7, 7), (4, 3, 2, 3), dict(auto_pad="SAME_LOWER"), True),
    (np.int8, np.uint8, (1, 3, 6, 5), (2, 3, 3, 3), dict(auto_pad="VALID"), False),
    (np.uint8, np.uint8, (1, 64, 3, 3), (2, 64, 3, 3), dict(pads=[1, 1, 1, 1]), False),  # |acc| large
]


@pytest.mark.parametrize("xt,wt,xs,ws,attrs,vec_zp", CONV_INT_CASES, ids=[str(i) for i in range(len(CONV_INT_CASES))])
def test_conv_integer_equals_onnxruntime(xt, wt, xs, ws, attrs, vec_zp):
    rng = np.random.default_rng(sum(xs) * 31 + sum(ws))
    xb, wb = _7bit(xt, wt)
    x, w = _q(rng, xt, xs, xb), _q(rng, wt, ws, wb)
    xz = np.array(rng.integers(0, 40), xt)
    wz = np.array([rng.integers(0, 20)] if vec_zp else rng.integers(0, 20), wt)
    m = _model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"], **attrs)], {"x": x},
               {"w": w, "xz": xz, "wz": wz}, {"y": np.int32})
    want = _ort(m, {"x": x})
    assert np.abs(want[0]).max() > 1000
    run_devices(m, {"x": x}, want=want)
    if xt == np.uint8 and wt == np.uint8:  # optional zero points left out
        m = _model([helper.make_node("ConvInteger", ["x", "w"], ["y"], **attrs)], {"x": x}, {"w": w}, {"y": np.int32})
        run_devices(m, {"x": x}, want=_ort(m, {"x": x}))


MATMUL_INT_CASES = [  # (a type, b type, a shape, b shape, b_zero_point kind)
    (np.uint8, np.uint8, (4, 16), (16, 5), "scalar"),
    (np.uint8, np.int8, (3, 7), (7, 9), "column"),
    (np.int8, np.int8, (2, 3, 8), (8, 4), "column"),
    (np.int8, np.uint8, (2, 3, 8), (2, 8, 4), "batched_column"),
    (np.uint8, np.uint8, (1, 5), (5, 1), "none"),
    (np.uint8, np.uint8, (2, 300), (300, 3), "scalar"),  # sums beyond int16
]


@pytest.mark.parametrize("at,bt,ash,bsh,zkind", MATMUL_INT_CASES, ids=[str(i) for i in range(len(MATMUL_INT_CASES))])
def test_matmul_integer_equals_onnxruntime(at, bt, ash, bsh, zkind):
    rng = np.random.default_rng(sum(ash) * 17 + sum(bsh))
    ab, bb = _7bit(at, bt)
    a, b = _q(rng, at, ash, ab), _q(rng, bt, bsh, bb)
    consts, ins = {"b": b}, ["a", "b"]
    if zkind != "none":
        n = bsh[-1]
        bz = {"scalar": rng.integers(0, 20), "column": rng.integers(0, 20, n),
              "batched_column": rng.integers(0, 20, (bsh[0], 1, n))}[zkind]
        consts.update(az=np.array(rng.integers(0, 30), at), bz=np.array(bz, bt))
        ins += ["az", "bz"]
    m = _model([helper.make_node("MatMulInteger", ins, ["y"])], {"a": a}, consts, {"y": np.int32})
    run_devices(m, {"a": a}, want=_ort(m, {"a": a}))


def test_integer_ops_beyond_onnxruntime():
    """Per-row a_zero_point and per-channel ConvInteger w_zero_point are valid ONNX that ORT refuses; the
    reference computes them (checked against an explicit sum), and so does every device on the one-node models.
    Bad zero points raise."""
    from vkinfer.reference.conv_integer import conv_integer
    from vkinfer.reference.matmul_integer import matmul_integer

    rng = np.random.default_rng(3)
    a, b = _q(rng, np.uint8, (3, 4)), _q(rng, np.int8, (4, 2))
    az, bz = np.array([1, 2, 3], np.uint8), np.array([-1, 5], np.int8)
    want = (a.astype(np.int64) - az[:, None]) @ (b.astype(np.int64) - bz)
    np.testing.assert_array_equal(matmul_integer(a, b, az, bz), want)
    m = _model([helper.make_node("MatMulInteger", ["a", "b", "az", "bz"], ["y"])], {"a": a},
               {"b": b, "az": az, "bz": bz}, {"y": np.int32})
    run_devices(m, {"a": a}, want=[want.astype(np.int32)])
    x, w = _q(rng, np.uint8, (1, 2, 3, 3)), _q(rng, np.int8, (2, 2, 1, 1))
    wz = np.array([3, -4], np.int8)
    want = np.einsum("nchw,mc->nmhw", x.astype(np.int64) - 7, w[:, :, 0, 0].astype(np.int64) - wz[:, None])
    np.testing.assert_array_equal(conv_integer(x, w, np.uint8(7), wz), want)
    m = _model([helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"])], {"x": x},
               {"w": w, "xz": np.array(7, np.uint8), "wz": wz}, {"y": np.int32})
    run_devices(m, {"x": x}, want=[want.astype(np.int32)])
    with pytest.raises(TypeError):
        matmul_integer(a, b, np.int8(1), None)  # zero point of the wrong type
    with pytest.raises(ValueError):
        conv_integer(x, w, None, np.array([1, 2, 3], np.int8))


# ------------------------------------------------------------------------------------ DynamicQuantizeLinear

_DQL_TABLE = [
    np.array([0.0], np.float32), np.array([-0.0, 0.0], np.float32), np.array([3.0], np.float32),
    np.array([-2.5], np.float32), np.array([1e-30, -1e-30], np.float32), np.array([1e30, -3e30], np.float32),
    np.array([0.5, 1.5, 2.5, -0.5, -1.5], np.float32), np.array([-1.0, 254.0, 255.0, 256.0], np.float32),
    np.array([-127.5, 127.5], np.float32), np.linspace(-1, 3, 1000, dtype=np.float32),
    np.array([1.4e-45, 0.0, 2.0], np.float32),  # a subnormal
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_dynamic_quantize_linear_equals_onnxruntime(data):
    if data.draw(st.booleans(), "from the table"):
        x = data.draw(st.sampled_from(_DQL_TABLE), "x")
    else:
        n = data.draw(st.integers(1, 700), "n")
        mag = data.draw(st.sampled_from([1e-38, 1e-6, 1.0, 100.0, 1e20]), "magnitude")
        sign = data.draw(st.sampled_from(["mixed", "positive", "negative"]), "sign")
        seed = data.draw(st.integers(0, 2**32 - 1), "seed")
        rng = np.random.default_rng(seed)
        x = (rng.standard_normal(n) * mag).astype(np.float32)
        if sign != "mixed":
            x = np.abs(x) if sign == "positive" else -np.abs(x)
        if data.draw(st.booleans(), "ties"):  # values on quantization-step ties and integers
            x = (np.round(x * 2) / 2).astype(np.float32)
        x = x.reshape(data.draw(st.sampled_from([(n,), (1, n)] if n % 2 else [(n,), (2, n // 2)]), "shape"))
    m = _model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], {"x": x}, {},
               {"y": np.uint8, "s": np.float32, "z": np.uint8})
    run_devices(m, {"x": x}, want=_ort(m, {"x": x}))


def test_dynamic_quantize_linear_every_device_and_bad_input():
    x = np.linspace(-3, 7, 97, dtype=np.float32).reshape(1, 97)
    m = _model([helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])], {"x": x}, {},
               {"y": np.uint8, "s": np.float32, "z": np.uint8})
    run_devices(m, {"x": x}, want=_ort(m, {"x": x}))
    from vkinfer.reference.dynamic_quantize_linear import dynamic_quantize_linear

    with pytest.raises(ValueError):
        dynamic_quantize_linear(np.array([1.0, np.nan], np.float32))
    with pytest.raises(TypeError):
        dynamic_quantize_linear(np.array([1.0, 2.0]))  # float64


# ------------------------------------------------------------------------------- dynamic quantization models

def quantize_dynamic(model: onnx.ModelProto, weight_type: str, per_channel: bool, reduce_range: bool):
    """onnxruntime.quantization.quantize_dynamic on a zoo model (DynamicQuantizeLinear -> ConvInteger /
    MatMulInteger -> Cast -> Mul (scales) -> Add (bias) -> float Relu/Clip/GlobalAveragePool/...)."""
    import os
    import tempfile

    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization import quantize_dynamic as qd

    with tempfile.TemporaryDirectory(prefix="vkinfer_dyn_") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(model, src)
        qd(src, dst, per_channel=per_channel, reduce_range=reduce_range,
           weight_type={"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}[weight_type])
        return onnx.load(dst)


DYNAMIC_MODELS = {"mlp": {}, "dilated_net": dict(size=12), "mobilenet_v1": {},
                  "mobilenet_v2": dict(width=0.35, size=32, num_classes=10), "shufflenet_like": dict(size=16)}


@pytest.mark.parametrize("wt,per_channel,reduce_range", [("uint8", False, False), ("uint8", True, False),
                                                         ("int8", True, True), ("int8", True, False)],
                         ids=["u8", "u8_pc", "s8_7bit_pc", "s8_pc"])
@pytest.mark.parametrize("name", list(DYNAMIC_MODELS))
def test_dynamic_quantized_model_equals_onnxruntime(name, wt, per_channel, reduce_range):
    """Every output bit equal to ORT, with its graph optimizations on (ORT fuses DynamicQuantizeLinear /
    MatMulInteger / Cast / Mul into DynamicQuantizeMatMul and MatMulIntegerToFloat, same numerics) and off.
    Full-range int8 weights (s8_pc) against ORT where its u8 x s8 GEMM is exact, else against the exact reference
    (ORT's x86 AVX2 u8 x s8 GEMM saturates int16 pair sums: the next test pins that down; README)."""
    q = quantize_dynamic(zoo.BUILDERS[name](seed=11, **DYNAMIC_MODELS[name]), wt, per_channel, reduce_range)
    ops = set(zoo.op_types(q))
    assert {"DynamicQuantizeLinear", "Cast", "Mul"} <= ops and ops & {"ConvInteger", "MatMulInteger"}
    feed = zoo.random_inputs(q, seed=12)
    if wt == "int8" and not reduce_range and oo.u8s8_behaviour() == oo.SATURATING:
        # ORT saturates int16 pairs here (see the next test): every device against the exact reference instead
        run_devices(q, feed)
        return
    want = zoo.ort_run(q, feed)
    for g, w in zip(want, zoo.ort_run(q, feed, optimize=False), strict=True):
        np.testing.assert_array_equal(g, w)
    run_devices(q, feed, want=want)


@pytest.mark.parametrize("source", oo.SOURCES)
def test_dynamic_quantized_mlp_full_range_int8_is_exact_or_ort_saturation(source):
    """Full-range int8 weights: ORT's first MatMulInteger is the exact int32 product (ARM, x86 VNNI) or exactly
    the int16-pair saturated one (x86 AVX2 without VNNI), nothing else; its inputs are identical to vkinfer's, and
    vkinfer is exact on every device. Where ORT is exact the whole model is identical to ORT; `source` runs the
    same check logic on both behaviours computed in numpy, so both branches run on every machine."""
    q = quantize_dynamic(zoo.mlp(seed=11), "int8", True, False)
    feed = zoo.random_inputs(q, seed=12)
    dql = next(n for n in q.graph.node if n.op_type == "DynamicQuantizeLinear")
    mmi = next(n for n in q.graph.node if n.op_type == "MatMulInteger")
    probe = onnx.ModelProto()
    probe.CopyFrom(q)
    for name in (dql.output[0], mmi.output[0]):
        probe.graph.output.append(helper.make_empty_tensor_value_info(name))
    want = dict(zip([o.name for o in probe.graph.output], _ort(probe, feed, optimize=False), strict=True))
    a, a_zp, got = run_devices(q, feed, output_names=[dql.output[0], dql.output[2], mmi.output[0]])
    np.testing.assert_array_equal(a, want[dql.output[0]])
    consts = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    b, b_zp = consts[mmi.input[1]], consts[mmi.input[3]].astype(np.int64)
    exact, saturated = oo.u8s8_exact(a, b, int(a_zp), b_zp), oo.u8s8_pair_saturated(a, b, int(a_zp), b_zp)
    np.testing.assert_array_equal(got, exact)  # vkinfer: exact
    behaviour, _ = oo.u8s8_check(source, lambda: want[mmi.output[0]], exact, saturated)
    ort_exact = source == "onnxruntime" and behaviour == oo.EXACT  # else ORT is no oracle for the outputs
    run_devices(q, feed, want=zoo.ort_run(q, feed) if ort_exact else None)


@pytest.mark.parametrize("shape", [(1, 8, 7, 7), (2, 3, 5, 3), (1, 16, 1, 1), (1, 4, 2, 1), (1, 5, 16, 16),
                                   (3, 2, 9)])
def test_float_global_average_pool_sums_like_onnxruntime(shape):
    """The float GlobalAveragePool dynamically quantized CNNs end with: ORT's MLAS summation order, exact.
    ORT's NCHWc layout transformer (graph optimizations on, channels a multiple of 8, the pool fed by the
    graph input) swaps in a kernel that sums in another order: then the last bits may differ, bounded by
    the float32 rounding of an n-term sum (n * 2**-24 relative to the sum of magnitudes)."""
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 1000).astype(np.float32)
    m = _model([helper.make_node("GlobalAveragePool", ["x"], ["y"])], {"x": x}, {}, {"y": np.float32})
    # The kernel itself, the host's on every device: the one-node float model is refused everywhere alike
    # (vkinfer runs 8-bit models only).
    assert isinstance(outcome_devices(m, {"x": x}), UnsupportedModelError)
    got = OPS["GlobalAveragePool"](None, [x], {})[0]
    np.testing.assert_array_equal(got, _ort(m, {"x": x}, optimize=False)[0])
    n = int(np.prod(shape[2:]))
    bound = 2 * n * 2.0**-24 * np.abs(x).reshape(shape[0], shape[1], -1).mean(axis=2)
    assert np.all(np.abs(got - _ort(m, {"x": x})[0]).reshape(bound.shape) <= bound)


# ---------------------------------------------------------------------------------------- activation fusion

def _qdq_layer(kind: str, act: str | None, clip, y_scale: float, y_zp: int, *, dtype=np.uint8, mid=None,
               seed: int = 0):
    """x (8-bit) -> DQ -> Conv (3x3), Gemm (with DQ weights and int32 bias) or MatMul -> [Q -> DQ with `mid` = (scale,
    zero point)] -> Relu / Clip(clip) -> Q(y_scale, y_zp). Returns the model and an input."""
    rng = np.random.default_rng(seed)
    lo, hi = (0, 255) if dtype == np.uint8 else (-128, 127)
    if kind == "conv":
        x = rng.integers(lo, hi + 1, (1, 4, 6, 6)).astype(dtype)
        w = rng.integers(-60, 61, (8, 4, 3, 3)).astype(np.int8)
        op = helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=[1, 1, 1, 1])
    elif kind == "gemm":
        x = rng.integers(lo, hi + 1, (5, 24)).astype(dtype)
        w = rng.integers(-60, 61, (8, 24)).astype(np.int8)
        op = helper.make_node("Gemm", ["xf", "wf", "bf"], ["c"], transB=1)
    else:
        x = rng.integers(lo, hi + 1, (5, 24)).astype(dtype)
        w = rng.integers(-60, 61, (24, 8)).astype(np.int8)
        op = helper.make_node("MatMul", ["xf", "wf"], ["c"])
    consts = {"xs": np.array(0.02, np.float32), "xz": np.array(lo + 128 if dtype == np.uint8 else 3, dtype), "w": w,
              "ws": np.array(0.01, np.float32), "wz": np.array(0, np.int8),
              "b": rng.integers(-3000, 3000, 8).astype(np.int32), "bs": np.array(0.0002, np.float32),
              "ys": np.array(y_scale, np.float32), "yz": np.array(y_zp, dtype)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["w", "ws", "wz"], ["wf"]),
             helper.make_node("DequantizeLinear", ["b", "bs"], ["bf"]), op]
    if kind == "matmul":  # no bias
        del nodes[2]
    src = "c"
    if mid is not None:
        consts.update(ms=np.array(mid[0], np.float32), mz=np.array(mid[1], dtype))
        nodes += [helper.make_node("QuantizeLinear", ["c", "ms", "mz"], ["cq"]),
                  helper.make_node("DequantizeLinear", ["cq", "ms", "mz"], ["cd"])]
        src = "cd"
    if act == "relu":
        nodes.append(helper.make_node("Relu", [src], ["r"]))
        src = "r"
    elif act == "clip":
        ins = [src, "", ""]
        if clip[0] is not None:
            consts["lo"], ins[1] = np.array(clip[0], np.float32), "lo"
        if clip[1] is not None:
            consts["hi"], ins[2] = np.array(clip[1], np.float32), "hi"
        nodes.append(helper.make_node("Clip", [i for i in ins[:3 if clip[1] is not None else 2]], ["r"]))
        src = "r"
    nodes.append(helper.make_node("QuantizeLinear", [src, "ys", "yz"], ["y"]))
    return _model(nodes, {"x": x}, consts, {"y": dtype}), x


# (kind, activation, clip bounds, y_scale, y_zp, dtype, what vkinfer makes of it)
ACT_REMOVED = [  # ORT's ReluQuantFusion / ClipQuantFusion drop the activation: plain QLinearConv / QGemm
    ("conv", "relu", None, 0.05, 0, np.uint8), ("conv", "relu", None, 0.05, -128, np.int8),
    ("conv", "clip", (0.0, 12.73), 0.05, 0, np.uint8),  # ORT's MaxLower: float32(254.5 + ulp) * 0.05 = 12.725
    ("conv", "clip", (-1.0, 20.0), 0.05, 20, np.uint8), ("conv", "clip", (None, None), 0.05, 20, np.uint8),
    ("gemm", "relu", None, 0.04, 0, np.uint8), ("gemm", "clip", (0.0, 10.2), 0.04, 0, np.uint8),
    ("conv", "clip", (-0.5, 15.0), 0.05, 10, np.uint8),  # -0.5 = 10 steps below zero: ORT's MinUpper edge
    ("matmul", "relu", None, 0.04, -128, np.int8),
]
ACT_KEPT = [  # the activation matters: ORT computes the Conv/Gemm in float; vkinfer clamps the integer op
    ("conv", "relu", None, 0.05, 10, np.uint8), ("conv", "relu", None, 0.05, 0, np.int8),
    ("conv", "clip", (0.0, 6.0), 0.05, 0, np.uint8), ("conv", "clip", (0.0, 12.72), 0.05, 0, np.uint8),
    ("conv", "clip", (-0.3, 4.0), 0.04, 30, np.uint8), ("gemm", "relu", None, 0.04, 20, np.uint8),
    ("gemm", "clip", (0.0, 6.0), 0.04, 0, np.int8), ("conv", "clip", (-0.45, 15.0), 0.05, 10, np.uint8),
    ("matmul", "relu", None, 0.04, 20, np.uint8), ("matmul", "clip", (-1.0, 3.0), 0.03, 60, np.uint8),
]


@pytest.mark.parametrize("kind,act,clip,ys,yz,dt", ACT_REMOVED, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in
                                                                     enumerate(ACT_REMOVED)])
def test_redundant_activation_dropped_like_onnxruntime(kind, act, clip, ys, yz, dt):
    m, x = _qdq_layer(kind, act, clip, ys, yz, dtype=dt)
    sess = vkinfer.InferenceSession(m, device="reference")
    assert [n.op for n in sess.graph.nodes] == [{"conv": "QLinearConv", "gemm": "com.microsoft:QGemm",
                                                 "matmul": "QLinearMatMul"}[kind]]
    run_devices(m, {"x": x}, want=_ort(m, {"x": x}))


@pytest.mark.parametrize("kind,act,clip,ys,yz,dt", ACT_KEPT, ids=[f"{c[0]}-{c[1]}-{i}" for i, c in
                                                                  enumerate(ACT_KEPT)])
def test_kept_activation_becomes_the_clamp(kind, act, clip, ys, yz, dt):
    """Exactly the integer op with the activation as its clamp (ORT's own QLinearConv/QGemm followed by the
    activation between DQ and Q, run by ORT); within one step of ORT's float Conv/Gemm on the QDQ model."""
    m, x = _qdq_layer(kind, act, clip, ys, yz, dtype=dt)
    sess = vkinfer.InferenceSession(m, device="reference")
    ops = [n.op for n in sess.graph.nodes]
    assert ops == {"conv": ["vkinfer:QLinearConvClamp"], "gemm": ["vkinfer:QGemmClamp"],
                   "matmul": ["QLinearMatMul", "vkinfer:Table"]}[kind]  # DQ -> act -> Q: a byte table
    # The same graph with a Q -> DQ pair at the output's parameters between the op and the activation: ORT
    # then folds the op to its integer kernel and runs the activation on the dequantized values.
    m2, _ = _qdq_layer(kind, act, clip, ys, yz, dtype=dt, mid=(ys, yz))
    exact = _ort(m2, {"x": x})
    run_devices(m, {"x": x}, want=exact)
    run_devices(m2, {"x": x}, want=exact)
    assert [n.op for n in vkinfer.InferenceSession(m2, device="reference").graph.nodes] == ops
    float_path = _ort(m, {"x": x})[0]
    assert np.abs(float_path.astype(np.int32) - exact[0]).max() <= 1


def test_activation_between_different_parameters_is_not_fused():
    """QLinearConv -> DQ -> Relu -> Q where the Q's parameters differ from the conv output's: a requantization,
    not fused into the conv's clamp but folded into a byte table (vkinfer/model/tables.py), equal to ORT."""
    m, x = _qdq_layer("conv", "relu", None, 0.03, 10, mid=(0.03, 100))
    sess = vkinfer.InferenceSession(m, device="reference")
    assert [n.op for n in sess.graph.nodes] == ["QLinearConv", "vkinfer:Table"]
    run_devices(m, {"x": x}, want=_ort(m, {"x": x}))


@pytest.mark.parametrize("dt,act,bounds", [(np.uint8, "clip", (20, 200)), (np.int8, "relu", None),
                                           (np.int8, "clip", (-100, 50)), (np.uint8, "clip", (None, 100)),
                                           (np.int8, "clip2", (-50, 90))])
def test_integer_activation_on_qlinearconv_output(dt, act, bounds):
    """QOperator graphs: Clip (or int8 Relu) applied to QLinearConv's 8-bit output is an integer clamp;
    'clip2' is two Clips in a row, both folded."""
    rng = np.random.default_rng(5)
    lo, hi = (0, 255) if dt == np.uint8 else (-128, 127)
    x = rng.integers(lo, hi + 1, (1, 3, 5, 5)).astype(dt)
    consts = {"xs": np.array(0.03, np.float32), "xz": np.array(lo + 100, dt),
              "w": rng.integers(-60, 61, (4, 3, 3, 3)).astype(np.int8), "ws": np.array(0.02, np.float32),
              "wz": np.array(0, np.int8), "ys": np.array(0.02, np.float32), "yz": np.array(lo + 90, dt)}
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["c"], pads=[1] * 4)]
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
    else:
        ins = ["c", "", ""]
        for k, v, name in ((1, bounds[0], "lo"), (2, bounds[1], "hi")):
            if v is not None:
                consts[name], ins[k] = np.array(v, dt), name
        nodes.append(helper.make_node("Clip", ins, ["y" if act == "clip" else "y1"]))
        if act == "clip2":
            consts["lo2"] = np.array(bounds[0] + 30, dt)
            nodes.append(helper.make_node("Clip", ["y1", "lo2"], ["y"]))
    m = _model(nodes, {"x": x}, consts, {"y": dt}, opset=14)
    sess = vkinfer.InferenceSession(m, device="reference")
    assert [n.op for n in sess.graph.nodes] == ["vkinfer:QLinearConvClamp"]
    want = _ort(m, {"x": x})
    assert len(np.unique(want[0])) > 10
    run_devices(m, {"x": x}, want=want)


# ---------------------------------------------------------------------------------------- constant folding

def test_constant_folding_removes_constant_chains():
    """Concat of constant shapes -> Reshape -> Transpose of constant weights, an Identity of a scale, a
    Constant node and a DequantizeLinear of constant int8 data feeding a float Mul: evaluated once at import
    (reference kernels), outputs unchanged and equal to ORT on every device."""
    rng = np.random.default_rng(8)
    x = rng.integers(0, 256, (1, 3, 5, 5)).astype(np.uint8)
    w_hwio = rng.integers(-64, 64, (3, 3, 3, 4)).astype(np.int8)  # HWIO, flat; 7-bit (ORT u8 x s8, README)
    consts = {"w_flat": w_hwio.reshape(-1), "s0": np.array([3, 3], np.int64), "s1": np.array([3, 4], np.int64),
              "xs": np.array(0.03, np.float32), "xz": np.array(120, np.uint8), "ws0": np.array(0.02, np.float32),
              "wz": np.array(0, np.int8), "ys": np.array(0.05, np.float32), "yz": np.array(7, np.uint8),
              "k": np.array([-3, 5, 17, -128], np.int8).reshape(1, 4, 1, 1), "ks": np.array(0.25, np.float32)}
    nodes = [helper.make_node("Concat", ["s0", "s1"], ["shape"], axis=0),
             helper.make_node("Reshape", ["w_flat", "shape"], ["w_hwio"]),
             helper.make_node("Transpose", ["w_hwio"], ["w"], perm=[3, 2, 0, 1]),
             helper.make_node("Identity", ["ws0"], ["ws"]),
             helper.make_node("Constant", [], ["kz"], value=numpy_helper.from_array(np.array(2, np.int8))),
             helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1] * 4),
             helper.make_node("DequantizeLinear", ["y", "ys", "yz"], ["yf"]),
             helper.make_node("DequantizeLinear", ["k", "ks", "kz"], ["kf"]),
             helper.make_node("Mul", ["yf", "kf"], ["z"])]
    m = _model(nodes, {"x": x}, consts, {"y": np.uint8, "z": np.float32})
    sess = vkinfer.InferenceSession(m, device="reference")
    assert [n.op for n in sess.graph.nodes] == ["QLinearConv", "DequantizeLinear", "Mul"]
    np.testing.assert_array_equal(sess.graph.consts["w"], w_hwio.transpose(3, 2, 0, 1))
    np.testing.assert_array_equal(sess.graph.consts["kf"], (consts["k"].astype(np.float32) - 2) * np.float32(0.25))
    want = _ort(m, {"x": x})
    run_devices(m, {"x": x}, want=want)
    # Every node of the unfolded model interpreted one by one gives the same bits.
    from vkinfer.model.graph import Node

    values = {**{t.name: numpy_helper.to_array(t) for t in m.graph.initializer}, "kz": np.array(2, np.int8), "x": x}
    for n in (Node(n.op_type, n.name, list(n.input), list(n.output),
                   {a.name: helper.get_attribute_value(a) for a in n.attribute})
              for n in m.graph.node if n.op_type != "Constant"):
        for name, v in zip(n.outputs, OPS[n.op](n, [values[i] for i in n.inputs], {}), strict=False):
            values[name] = v
    np.testing.assert_array_equal(values["y"], want[0])
    np.testing.assert_array_equal(values["z"], want[1])


def test_constant_folding_in_dynamic_models_and_failures_left_to_run_time():
    """quantize_dynamic's bias Reshapes of constants are folded (the model still equals ORT, see above); a
    constant node whose kernel fails stays in the graph and raises when run, naming the node."""
    q = quantize_dynamic(zoo.mobilenet_v1(seed=2), "uint8", False, False)
    assert "Reshape" in zoo.op_types(q)
    sess = vkinfer.InferenceSession(q, device="reference")
    assert not any(n.op == "Reshape" for n in sess.graph.nodes)
    assert len(sess.graph.nodes) < len(q.graph.node)
    feed = zoo.random_inputs(q, seed=3)
    run_devices(q, feed, want=zoo.ort_run(q, feed))
    x = np.zeros((1, 2), np.uint8)
    bad = _model([helper.make_node("Reshape", ["c", "shape"], ["r"]),
                  helper.make_node("Concat", ["x", "r"], ["y"], axis=0)], {"x": x},
                 {"c": np.arange(6, dtype=np.uint8), "shape": np.array([4, 4], np.int64)}, {"y": np.uint8})
    sess = vkinfer.InferenceSession(bad, device="reference")
    assert [n.op for n in sess.graph.nodes] == ["Reshape", "Concat"]
    refused_devices(bad, {"x": x}, ValueError, "Reshape")
