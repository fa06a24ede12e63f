"""Quantized ConvTranspose (vkinfer/reference/qlinear_conv_transpose.py, vkinfer/model/conv_transpose.py).

ONNX Runtime 1.31's CPU EP runs DequantizeLinear(x), DequantizeLinear(w) -> ConvTranspose -> QuantizeLinear in
float (no integer kernel; the optimized graph keeps the float op). vkinfer computes the exact integer result. The
bound pinned here: the two differ by at most one quantization step, and only where the exact real value
acc * x_scale * w_scale / y_scale lies within TIE of a .5 rounding tie (float32 rounding of ORT's DQ'd operands,
GEMM sums and division). Every device (reference interpreter, cpu, vulkan) gives the reference's bits.
"""

from __future__ import annotations

import functools
import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.agree import DEVICES, outcome_devices, run_sessions, sessions

import vkinfer
from vkinfer.model.onnx_import import UnsupportedModelError
from vkinfer.reference.qlinear_conv_transpose import (
    conv_transpose_accumulate,
    conv_transpose_float,
    conv_transpose_geometry,
    qlinear_conv_transpose,
)
from vkinfer.testing import zoo

TIE = 1e-4  # in quantization steps; measured: 3.0e-6 at most (40 random 16x16x12x12 draws, 1 element differed)
INT8_CFG = {"session.qdqisint8allowed": "1"}

# (name, C, M, kernel, strides, pads, dilations, output_padding, group, (H, W), activation type, per-channel,
#  bias, extra attributes). Rows cover uint8/int8, per-tensor/per-channel and bias/no bias between them; the last
# rows need pads that depend on the input size or lie beyond the kernel's reach (the host kernel runs those).
CASES = [
    ("k3s2p1op1", 4, 6, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1, (5, 6), "uint8", True, True, {}),
    ("k2s2_db", 3, 5, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (0, 0), 1, (4, 3), "int8", True, True, {}),
    ("k3s1p1", 4, 4, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), (0, 0), 1, (5, 5), "uint8", False, False, {}),
    ("asym_group2", 6, 4, (3, 2), (3, 2), (1, 0, 2, 1), (1, 2), (2, 1), 2, (3, 5), "int8", True, False, {}),
    ("dil2_group2", 4, 6, (4, 3), (2, 2), (1, 2, 1, 0), (2, 2), (1, 0), 2, (5, 4), "uint8", False, True, {}),
    ("depthwise", 4, 4, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 4, (4, 5), "int8", False, True, {}),
    ("k5s3", 2, 3, (5, 5), (3, 3), (2, 2, 2, 2), (1, 1), (2, 0), 1, (3, 4), "uint8", True, False, {}),
    # A draw (the seed is the name's CRC) whose exact value lies 3.0e-6 steps from a tie at one element: ORT's float
    # result is one step off there on an AVX2 Zen 3 (1 element of 368,640 over 40 such draws, none further than that)
    ("sweep25", 16, 16, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), (1, 1), 1, (12, 12), "uint8", True, True, {}),
    ("k1s2_host", 3, 2, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), (0, 0), 1, (4, 5), "int8", True, True, {}),
    ("output_shape", 4, 3, (3, 3), (2, 2), (0, 0, 0, 0), (1, 1), (0, 0), 1, (5, 6), "uint8", False, True,
     {"output_shape": [8, 12]}),
    ("same_upper", 3, 4, (3, 4), (2, 2), (0, 0, 0, 0), (1, 1), (0, 0), 1, (5, 5), "int8", True, True,
     {"auto_pad": "SAME_UPPER"}),
]
HOST_CASES = {"output_shape", "same_upper"}
# Non-overlapping kernels: vkinfer:QDQConvTranspose, ORT's float order (tests/ops/test_float_conv_transpose.py), run by
# the CPU's native operator in every session (no shader does ORT's float order).
FLOAT_CASES = {"k2s2_db", "k1s2_host"}


def _attrs(case) -> dict:
    _, _, _, k, s, p, d, op, group, _, _, _, _, extra = case
    a = dict(kernel_shape=list(k), strides=list(s), dilations=list(d), output_padding=list(op), group=group)
    if "auto_pad" not in extra and "output_shape" not in extra:
        a["pads"] = list(p)
    a.update(extra)
    return a


@functools.cache
def _case(name: str):
    """(model bytes, input, quantization params dict) of a hand-built single-node QDQ model:
    x -> DQ -> ConvTranspose(DQ(w, axis 1), DQ(int32 bias)) -> Q -> y, seeded random parameters."""
    case = next(c for c in CASES if c[0] == name)
    _, c, m, k, _, _, _, _, group, (h, w), act, per_channel, bias, _ = case
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    dt = np.dtype(act)
    lo, hi = (0, 255) if dt == np.uint8 else (-128, 127)
    mg = m // group
    x = rng.integers(lo, hi + 1, (1, c, h, w)).astype(dt)
    wq = rng.integers(-127, 128, (c, mg, *k)).astype(np.int8)
    xs = np.float32(rng.uniform(0.01, 0.05))
    xz = dt.type(rng.integers(lo + 20, hi - 20))
    ws = rng.uniform(0.002, 0.01, mg if per_channel else ()).astype(np.float32)
    wz = np.zeros(mg if per_channel else (), np.int8)
    a = _attrs(case)
    real = conv_transpose_float((x.astype(np.float32) - np.float32(xz)) * xs,
                                wq.astype(np.float32) * ws.reshape(1, -1, 1, 1) if per_channel else wq * ws,
                                **{kk: v for kk, v in a.items() if kk != "kernel_shape"})
    ys = np.float32((real.max() - real.min()) / 230)  # a little saturation at both ends
    yz = dt.type(np.clip(np.rint(lo - real.min() / ys) + 10, lo, hi))
    params = dict(x_scale=xs, x_zero_point=xz, w=wq, w_scale=ws, w_zero_point=wz, y_scale=ys, y_zero_point=yz)
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
             (("xs", xs), ("xz", xz), ("wq", wq), ("ws", ws), ("wz", wz), ("ys", ys), ("yz", yz))]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], axis=1)]
    ins = ["xf", "wf"]
    if bias:
        bq = rng.integers(-3000, 3000, m).astype(np.int32)
        bs = (xs * np.tile(np.broadcast_to(ws, (mg,)), group)).astype(np.float32)
        params["bias"] = bq
        inits += [numpy_helper.from_array(bq, "bq"), numpy_helper.from_array(bs, "bs"),
                  numpy_helper.from_array(np.zeros(m, np.int32), "bz")]
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bf"], axis=0))
        ins.append("bf")
    nodes += [helper.make_node("ConvTranspose", ins, ["yf"], name=f"ct_{name}", **a),
              helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    elem = TensorProto.UINT8 if dt == np.uint8 else TensorProto.INT8
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", elem, list(x.shape))],
                          [helper.make_tensor_value_info("y", elem, None)], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString(), x, params


def _reference(name: str) -> np.ndarray:
    case = next(c for c in CASES if c[0] == name)
    _, x, p = _case(name)
    return qlinear_conv_transpose(x, p["x_scale"], p["x_zero_point"], p["w"], p["w_scale"], p["w_zero_point"],
                                  p["y_scale"], p["y_zero_point"], p.get("bias"), **_attrs(case))


def _ort(model: bytes, feed: dict) -> list[np.ndarray]:
    return zoo.ort_run(onnx.load_from_string(model), feed, config=INT8_CFG)


def _tie_distance(name: str) -> np.ndarray:
    """|frac(v) - 0.5| of the exact real output v = acc * x_scale * w_scale / y_scale (float64), in steps."""
    case = next(c for c in CASES if c[0] == name)
    _, x, p = _case(name)
    a = _attrs(case)
    group = a["group"]
    begin, out = conv_transpose_geometry(x.shape[2:], p["w"].shape[2:], strides=a["strides"], pads=a.get("pads"),
                                         dilations=a["dilations"], output_padding=a["output_padding"],
                                         output_shape=a.get("output_shape"), auto_pad=a.get("auto_pad", "NOTSET"))
    acc = conv_transpose_accumulate(x.astype(np.int64) - int(p["x_zero_point"]), p["w"].astype(np.int64), group,
                                    a["strides"], a["dilations"], begin, out)
    if "bias" in p:
        acc = acc + p["bias"][None, :, None, None]
    ws = np.tile(np.broadcast_to(p["w_scale"], (p["w"].shape[1],)), group).astype(np.float64)
    v = acc * float(p["x_scale"]) * ws[None, :, None, None] / float(p["y_scale"])
    return np.abs(v - np.floor(v) - 0.5)


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_reference_against_ort(name):
    """The integer definition equals ORT's float QDQ computation but for ties: at most 1 step, only where the
    exact real value is within TIE steps of a .5 tie."""
    model, x, _ = _case(name)
    (want,) = _ort(model, {"x": x})
    got = _reference(name)
    assert got.shape == want.shape and got.dtype == want.dtype
    diff = np.abs(got.astype(np.int32) - want.astype(np.int32))
    assert diff.max() <= 1
    if diff.any():
        assert _tie_distance(name)[diff > 0].max() < TIE


@pytest.mark.parametrize("name", [c[0] for c in CASES])
def test_devices_against_reference(name):
    """reference, cpu and vulkan give the reference's bits; the convolution runs on the device unless the pads
    depend on the input size or lie beyond the kernel (then the host kernel runs the whole op)."""
    model, x, _ = _case(name)
    per_device = sessions(model)
    want = _ort(model, {"x": x}) if name in FLOAT_CASES else [_reference(name)]
    run_sessions(per_device, {"x": x}, want=want)
    for device in DEVICES[1:]:  # where each device's session puts the op
        sess = per_device[device]
        where = sess.placement[f"ct_{name}"]
        assert (where == "host") == (name in HOST_CASES), (device, sess.placement)
        if name in FLOAT_CASES:
            assert where == "cpu", (device, sess.placement)
        elif name not in HOST_CASES:
            assert where.startswith(device)
            # The zero insertion too: a pad operator on the CPU, a byte gather on Vulkan.
            spread = [n.name for n in sess.graph.nodes if n.op == "vkinfer:ZeroInsert"]
            assert all(sess.placement[n].startswith(device) for n in spread), sess.placement


GEOMETRY = [dict(strides=[2, 2], output_shape=[12, 11]), dict(strides=[2, 2], output_shape=[8, 9]),
            dict(strides=[2, 2], output_shape=[8, 9], auto_pad="SAME_UPPER"),
            dict(strides=[3, 2], auto_pad="SAME_LOWER"), dict(strides=[2, 2], auto_pad="SAME_UPPER"),
            dict(strides=[2, 2], auto_pad="VALID"), dict(strides=[2, 2], pads=[3, 3, 4, 4]),
            dict(strides=[2, 3], pads=[0, 1, 2, 0], dilations=[2, 1], output_padding=[1, 2])]


@functools.cache
def _float_model(i: int, group: int) -> tuple[bytes, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 4, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 6 // group, 3, 4)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="ct", group=group, **GEOMETRY[i])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString(), x, w, b


@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("i", range(len(GEOMETRY)))
def test_geometry_and_float_against_ort(i, group):
    """Pads, output_padding, output_shape and auto_pad place the output as ORT does (shape and values); the float
    kernel (real sum rounded once) is within float32 rounding of ORT's GEMM."""
    model, x, w, b = _float_model(i, group)
    # The float model itself is refused by every device alike (vkinfer runs 8-bit models): the host kernel here is
    # what every device runs for a float ConvTranspose in a quantized model (test_db_head's QOperator models).
    assert isinstance(outcome_devices(model, {"x": x}), UnsupportedModelError)
    (want,) = _ort(model, {"x": x})
    got = conv_transpose_float(x, w, b, group=group, **GEOMETRY[i])
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(np.abs(want).max()))


def _db_head(c: int = 8, size: int = 8, seed: int = 0) -> onnx.ModelProto:
    """A DB text detector's head: Conv 3x3 + ReLU, then two BN-folded ConvTranspose 2x2 stride 2 (ReLU between),
    then Sigmoid: the probability map at 4x the feature size."""
    g = zoo._Graph(seed)
    x = g.relu(g.conv(zoo.INPUT, c, c // 2, 3))
    for cin, cout in ((c // 2, c // 2), (c // 2, 1)):
        w = g.const("w", g.weight((cin, cout, 2, 2), cin * 4))
        b = g.const("b", g.bias(cout))
        x = g.node("ConvTranspose", [x, w, b], kernel_shape=[2, 2], strides=[2, 2])
        if cout != 1:
            x = g.relu(x)
    return g.model("db_head", [1, c, size, size], g.node("Sigmoid", [x]), [1, 1, size * 4, size * 4])


@functools.cache
def _db_quantized(fmt: str, act: str) -> bytes:
    return zoo.quantize(_db_head(), fmt=fmt, per_channel=True, activation_type=act).SerializeToString()


@pytest.mark.parametrize("act", ["uint8", "int8"])
@pytest.mark.parametrize("fmt", ["qdq", "qoperator"])
def test_db_head(fmt, act):
    """The quantized DB head on every device equals the reference device bit for bit and ORT within one output
    step (QDQ: vkinfer's integer ConvTranspose against ORT's float one, the tie mechanism above; QOperator: ORT
    leaves ConvTranspose in float with float weights, vkinfer runs it on the host as the real sum rounded once),
    exactly on nearly every element. QDQ: each ConvTranspose's convolution runs on the device."""
    model = _db_quantized(fmt, act)
    q = onnx.load_from_string(model)
    x = zoo.random_inputs(q, 5)
    (want,) = _ort(model, x)
    per_device = sessions(model)
    (ref,) = run_sessions(per_device, x)  # ORT is within one step, not exact: checked below
    for device in DEVICES[1:] if fmt == "qdq" else ():  # placement
        sess = per_device[device]
        convs = [n for n in sess.graph.nodes if n.name.startswith("convtranspose")]
        # each 2x2 stride-2 ConvTranspose is one vkinfer:QDQConvTranspose (ORT's float order) on the native CPU
        assert len(convs) == 2 and all(n.op == "vkinfer:QDQConvTranspose" for n in convs), [n.op for n in convs]
        assert all(sess.placement[n.name] == "cpu" for n in convs), sess.placement
    step = [t for t in q.graph.initializer if t.name == "output_scale"]
    scale = float(numpy_helper.to_array(step[0])) if step else float(np.abs(want - ref).max() or 1)
    steps = np.abs(ref.astype(np.float64) - want) / scale
    assert steps.max() <= 1 + 1e-6
    assert np.mean(steps > 0.5) <= 0.01


def _bad_model(w_shape, group=1, **attrs) -> bytes:
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array(rng.integers(-100, 100, w_shape).astype(np.int8), "wq"),
             numpy_helper.from_array(np.float32(0.01), "ws"), numpy_helper.from_array(np.int8(0), "wz"),
             numpy_helper.from_array(np.float32(0.02), "xs"), numpy_helper.from_array(np.uint8(128), "xz"),
             numpy_helper.from_array(np.float32(0.05), "ys"), numpy_helper.from_array(np.uint8(128), "yz")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"]),
             helper.make_node("ConvTranspose", ["xf", "wf"], ["yf"], name="bad_ct", group=group, **attrs),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    g = helper.make_graph(nodes, "bad", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 4, 5, 5])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


@pytest.mark.parametrize("w_shape, group, attrs, culprit", [
    ((4, 3, 3), 1, {}, "4-D"),
    ((4, 3, 3, 3), 3, {}, "group=3"),
    ((4, 3, 3, 3), 1, {"strides": [2, 2], "output_shape": [30, 30]}, "output_shape"),
    ((4, 3, 3, 3), 1, {"strides": [2, 2], "output_shape": [1, 3, 10, 10]}, "output_shape"),
    ((4, 3, 3, 3), 1, {"strides": [2, 2], "output_padding": [2, 2]}, "output_padding"),
    ((5, 3, 3, 3), 1, {}, "input channels"),
])
def test_bad_input_names_the_node(w_shape, group, attrs, culprit):
    """Malformed ConvTranspose nodes raise ValueError naming the node and the culprit, on every device."""
    model = _bad_model(w_shape, group, **attrs)
    x = np.full((1, 4, 5, 5), 130, np.uint8)
    for device in DEVICES:
        with pytest.raises(ValueError, match=f"bad_ct.*{culprit}|{culprit}.*bad_ct") as e:
            vkinfer.InferenceSession(model, device=device).run(None, {"x": x})
        assert "bad_ct" in str(e.value), device
