"""Float elementwise chains between 8-bit tensors become lookup tables (vkinfer/model/tables.py).

Each model is DequantizeLinear -> a float chain as onnxruntime.quantization leaves it -> QuantizeLinear, with an
input holding every one of the 256 byte values, so the comparison covers the whole table. The oracle is ONNX
Runtime running the float chain itself (its float kernels; int8 models with `session.qdqisint8allowed=1`); every
device (reference, cpu, vulkan) must equal it, with the chain folded into one table node that runs on the device.
"""

from __future__ import annotations

import zlib

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.agree import DEVICES, run_devices, run_sessions

import vkinfer
from vkinfer.model.op_table import OPS
from vkinfer.model.tables import TABLE, TABLE2, swapped_table2, table2_operands
from vkinfer.testing.onnx_builder import make_model
from vkinfer.testing.zoo import ort_run

_T = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def _c(name, v, dtype=np.float32):
    return numpy_helper.from_array(np.asarray(v, dtype), name)


# Each chain: (name, nodes from "x" (float, dequantized) to "f" (float), constants, opset). Two-source chains
# read "x" and "z" (the second input's dequantized value).
def _chains():
    mk = helper.make_node
    return {
        "hardswish_mul": ([mk("HardSigmoid", ["x"], ["h"], alpha=1 / 6, beta=0.5), mk("Mul", ["x", "h"], ["f"])],
                          {}, 13),
        "hardswish_op": ([mk("HardSwish", ["x"], ["f"])], {}, 14),
        "silu": ([mk("Sigmoid", ["x"], ["s"]), mk("Mul", ["x", "s"], ["f"])], {}, 13),
        "gelu_erf": ([mk("Div", ["x", "sqrt2"], ["d"]), mk("Erf", ["d"], ["e"]), mk("Add", ["e", "one"], ["p"]),
                      mk("Mul", ["x", "p"], ["m"]), mk("Mul", ["m", "half"], ["f"])],
                     {"sqrt2": np.float32(1.4142135), "one": np.float32(1), "half": np.float32(0.5)}, 13),
        "relu6_div": ([mk("Clip", ["x", "lo", "hi"], ["c"]), mk("Div", ["c", "six"], ["f"])],
                      {"lo": np.float32(0), "hi": np.float32(6), "six": np.float32(6)}, 13),
        "tanh": ([mk("Tanh", ["x"], ["f"])], {}, 13),
        "leaky_sub": ([mk("LeakyRelu", ["x"], ["l"], alpha=0.1), mk("Sub", ["l", "k"], ["f"])],
                      {"k": np.full((1, 1, 1, 1), 0.25, np.float32)}, 13),
        "sigmoid": ([mk("Sigmoid", ["x"], ["f"])], {}, 13),
    }


def _model(nodes, consts, opset, dtype, scales, two: str | None = None) -> onnx.ModelProto:
    """x_q (1, 4, 8, 8) -> DQ -> nodes -> Q -> y; with `two` ("equal" or "row"), a second input z_q, DQ'd to z."""
    (xs, xz), (ys, yz), (zs, zz) = scales
    dt = np.dtype(dtype)
    inits = {"xs": np.asarray(xs, np.float32), "xz": np.asarray(xz, dt), "ys": np.asarray(ys, np.float32),
             "yz": np.asarray(yz, dt), **{k: np.asarray(v, np.float32) for k, v in consts.items()}}
    head = [helper.make_node("DequantizeLinear", ["x_q", "xs", "xz"], ["x"])]
    ins = {"x_q": (dt, [1, 4, 8, 8])}
    if two:
        inits.update(zs=np.asarray(zs, np.float32), zz=np.asarray(zz, dt))
        head.append(helper.make_node("DequantizeLinear", ["z_q", "zs", "zz"], ["z"]))
        ins["z_q"] = (dt, [1, 4, 8, 8] if two == "equal" else [1, 4, 1, 1])
    tail = [helper.make_node("QuantizeLinear", ["f", "ys", "yz"], ["y"])]
    return make_model(head + nodes + tail, ins, {"y": dt}, inits, opset=opset, name="chain")


def _scales(rng, dtype):
    lo, hi = (0, 255) if dtype == "uint8" else (-128, 127)
    return [(np.float32(rng.uniform(0.01, 0.08)), int(rng.integers(lo + 40, hi - 40))) for _ in range(3)]


def _every_byte(dtype, rng) -> np.ndarray:
    return rng.permutation(np.arange(256, dtype=np.uint8)).view(dtype).reshape(1, 4, 8, 8)


def _oracle(model, feed, dtype) -> list[np.ndarray]:
    cfg = {"session.qdqisint8allowed": "1"} if dtype == "int8" else None
    return ort_run(model, feed, config=cfg)


def _check(model, feed, dtype, op):
    blob = model.SerializeToString()
    sessions = {d: vkinfer.InferenceSession(blob, device=d) for d in DEVICES}
    for device, sess in sessions.items():
        ops = [n.op for n in sess.graph.nodes]
        assert ops == [op], f"{device}: the chain did not fold into one {op} node: {ops}"
    run_sessions(sessions, feed, want=_oracle(model, feed, dtype))
    for device in ("cpu", "vulkan"):
        assert all(d.startswith(device) for d in sessions[device].placement.values()), sessions[device].placement


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("chain", sorted(_chains()))
def test_unary_chain_folds_to_a_table_equal_to_ort(chain, dtype):
    rng = np.random.default_rng(zlib.crc32(f"{chain}{dtype}".encode()))  # hash() varies per process
    nodes, consts, opset = _chains()[chain]
    model = _model(nodes, consts, opset, dtype, _scales(rng, dtype))
    _check(model, {"x_q": _every_byte(dtype, rng)}, dtype, TABLE)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("mode", ["equal", "row"])
def test_two_input_chain_folds_to_a_65536_table(mode, dtype):
    """Mul(x, Sigmoid(z)) (a gate; with z one value per channel: squeeze-excite's broadcast), and the operands
    the other way round, which the devices run with the table transposed."""
    rng = np.random.default_rng(7 if mode == "equal" else 8)
    mk = helper.make_node
    for order in (["x", "s"], ["s", "x"]):
        nodes = [mk("Sigmoid", ["z"], ["s"]), mk("Mul", order, ["f"])]
        model = _model(nodes, {}, 13, dtype, _scales(rng, dtype), two=mode)
        z = rng.integers(0, 256, (1, 4, 8, 8) if mode == "equal" else (1, 4, 1, 1), dtype=np.uint8).view(dtype)
        _check(model, {"x_q": _every_byte(dtype, rng), "z_q": z}, dtype, TABLE2)


def test_chain_with_a_per_channel_constant_is_not_a_table():
    """Mul by a per-channel vector makes the result depend on the channel, not only the byte: no table; the
    chain runs in float on the host, still equal to ORT."""
    rng = np.random.default_rng(3)
    mk = helper.make_node
    nodes = [mk("Mul", ["x", "w"], ["f"])]
    model = _model(nodes, {"w": rng.uniform(0.5, 2, (1, 4, 1, 1)).astype(np.float32)}, 13, "uint8",
                   _scales(rng, "uint8"))
    feed = {"x_q": _every_byte("uint8", rng)}
    sess = vkinfer.InferenceSession(model.SerializeToString(), device="cpu")
    assert TABLE not in [n.op for n in sess.graph.nodes]
    run_devices(model, feed, want=_oracle(model, feed, "uint8"))


def test_table2_operand_modes():
    assert table2_operands((1, 4, 8, 8), (1, 4, 8, 8), (1, 4, 8, 8)) == ("equal", False)
    assert table2_operands((1, 4, 8, 8), (1, 4, 1, 1), (1, 4, 8, 8)) == ("row", False)
    assert table2_operands((1, 4, 1, 1), (1, 4, 8, 8), (1, 4, 8, 8)) == ("row", True)
    assert table2_operands((2, 6), (6,), (2, 6)) == ("row", False)
    assert table2_operands((1, 4, 8, 8), (1, 1, 8, 8), (1, 4, 8, 8)) is None
    t = np.arange(65536, dtype=np.uint32).astype(np.uint8)
    t[257] = 99
    s = swapped_table2(t)
    assert s[1 * 256 + 1] == 99 and s[3 * 256 + 5] == t[5 * 256 + 3]


def test_bad_table_nodes_raise_value_errors():
    from vkinfer.model.graph import Node

    x = np.zeros((2, 3), np.uint8)
    node = Node(TABLE, "t", ["x", "t"], ["y"], {"dtype": "int8"})
    with pytest.raises(ValueError, match="uint8\\[256\\]"):
        OPS[TABLE](node, [x, np.zeros(255, np.uint8)], {})
    with pytest.raises(TypeError, match="input x"):
        OPS[TABLE](node, [x.astype(np.float32), np.zeros(256, np.uint8)], {})
    with pytest.raises(ValueError, match="dtype"):
        OPS[TABLE](Node(TABLE, "t", ["x", "t"], ["y"], {"dtype": "float32"}), [x, np.zeros(256, np.uint8)],
                   {})
    node2 = Node(TABLE2, "t2", ["a", "b", "t"], ["y"], {"dtype": "uint8"})
    with pytest.raises(ValueError, match="broadcast"):
        OPS[TABLE2](node2, [x, np.zeros((4,), np.uint8), np.zeros(65536, np.uint8)], {})


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("const_first", [False, True])
def test_quantized_binary_op_with_a_constant_scalar_becomes_a_table(op, const_first, dtype):
    """com.microsoft QLinearAdd/QLinearMul with one operand a constant scalar (a layer norm's epsilon, GELU's
    + 1, as the quantizer leaves them) run as a table on every device, equal to ORT on every byte."""
    rng = np.random.default_rng(11 + const_first + 2 * (op == "QLinearMul"))
    (xs, xz), (ys, yz), (cs, cz) = _scales(rng, dtype)
    np_dt = np.dtype(dtype)
    c = np.array(rng.integers(-100, 100) + (128 if dtype == "uint8" else 0), np_dt)
    inits = [_c("xs", xs), _c("xz", xz, dtype), _c("cs", cs), _c("cz", cz, dtype), _c("ys", ys),
             _c("yz", yz, dtype), numpy_helper.from_array(c, "c")]
    a, b = (["c", "cs", "cz"], ["x_q", "xs", "xz"]) if const_first else (["x_q", "xs", "xz"], ["c", "cs", "cz"])
    node = helper.make_node(op, a + b + ["ys", "yz"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x_q", _T[dtype], [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", _T[dtype], None)], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    _check(m, {"x_q": _every_byte(dtype, rng)}, dtype, TABLE)


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qdq_mul_of_two_8bit_tensors_is_ort_qlinear_mul_not_a_float_table(dtype):
    """DQ(a) * DQ(b) -> Q is what ORT fuses into QLinearMul (its own rounding, not float Mul then Q): QDQ folding
    makes it QLinearMul before any table folding; equal to ORT on all 65536 byte pairs (a float table was 1 step
    off on 6 of 1296 values of a MobileNetV3's hard-swish)."""
    rng = np.random.default_rng(21)
    (xs, xz), (ys, yz), (zs, zz) = _scales(rng, dtype)
    inits = [_c("xs", xs), _c("xz", xz, dtype), _c("zs", zs), _c("zz", zz, dtype), _c("ys", ys), _c("yz", yz, dtype)]
    nodes = [helper.make_node("DequantizeLinear", ["x_q", "xs", "xz"], ["x"]),
             helper.make_node("DequantizeLinear", ["z_q", "zs", "zz"], ["z"]),
             helper.make_node("Mul", ["x", "z"], ["f"]), helper.make_node("QuantizeLinear", ["f", "ys", "yz"], ["y"])]
    ins = [helper.make_tensor_value_info(n, _T[dtype], [1, 1, 256, 256]) for n in ("x_q", "z_q")]
    graph = helper.make_graph(nodes, "mul", ins, [helper.make_tensor_value_info("y", _T[dtype], None)],
                              initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    codes = np.arange(256, dtype=np.uint8)
    feed = {"x_q": np.repeat(codes, 256).view(dtype).reshape(1, 1, 256, 256),
            "z_q": np.tile(codes, 256).view(dtype).reshape(1, 1, 256, 256)}
    _check(m, feed, dtype, "com.microsoft:QLinearMul")


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("form", ["qop_silu", "qop_silu_swapped", "square", "qdq_silu"])
def test_products_of_one_tensor_fold_to_one_table(form, dtype):
    """x * Sigmoid(x) as ORT's quantizer writes SiLU (QOperator: QLinearSigmoid then QLinearMul; QDQ: a Table then
    QLinearMul) and x * x are functions of x's byte: one vkinfer:Table (model/tables.py fold_self_products), the
    lookup it read gone, equal to ORT on every byte on every device."""
    rng = np.random.default_rng(31 + len(form))
    (xs, xz), (ss, sz), (ys, yz) = _scales(rng, dtype)
    inits = [_c("xs", xs), _c("xz", xz, dtype), _c("ss", ss), _c("sz", sz, dtype), _c("ys", ys), _c("yz", yz, dtype)]
    ms = "com.microsoft"
    if form == "qdq_silu":
        nodes = [helper.make_node("DequantizeLinear", ["x_q", "xs", "xz"], ["x"]),
                 helper.make_node("Sigmoid", ["x"], ["s"]),
                 helper.make_node("QuantizeLinear", ["s", "ss", "sz"], ["s_q"]),
                 helper.make_node("DequantizeLinear", ["s_q", "ss", "sz"], ["s2"]),
                 helper.make_node("Mul", ["x", "s2"], ["f"]),
                 helper.make_node("QuantizeLinear", ["f", "ys", "yz"], ["y"])]
    else:
        other = ["x_q", "xs", "xz"] if form == "square" else ["s_q", "ss", "sz"]
        a, b = (other, ["x_q", "xs", "xz"]) if form == "qop_silu_swapped" else (["x_q", "xs", "xz"], other)
        nodes = [] if form == "square" else [
            helper.make_node("QLinearSigmoid", ["x_q", "xs", "xz", "ss", "sz"], ["s_q"], domain=ms)]
        nodes.append(helper.make_node("QLinearMul", a + b + ["ys", "yz"], ["y"], domain=ms))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x_q", _T[dtype], [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", _T[dtype], None)], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(ms, 1)])
    m.ir_version = 8
    _check(m, {"x_q": _every_byte(dtype, rng)}, dtype, TABLE)


QAVG = "com.microsoft:QLinearAveragePool"
UNITS = [("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[2, 2]), QAVG),
         ("AveragePool", dict(kernel_shape=[2, 2], strides=[2, 2]), QAVG),
         ("AveragePool", dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), QAVG),
         ("AveragePool", dict(kernel_shape=[3, 3], ceil_mode=1, strides=[2, 2]), QAVG),
         ("MaxPool", dict(kernel_shape=[2, 2]), "MaxPool"), ("LeakyRelu", dict(alpha=0.1), TABLE),
         ("Sigmoid", {}, TABLE), ("Relu", {}, TABLE)]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("unit", range(len(UNITS)))
def test_qdq_unary_units_between_different_parameters(unit, dtype):
    """DQ -> op -> Q with other output parameters, as ORT runs each: AveragePool is ORT's integer
    QLinearAveragePool (float pooling then Q was 1 step off on 1 of 128 values), MaxPool and the activations
    are the float path (a byte table for the activations); every device equals ORT over 3 seeded inputs."""
    op, attrs, want_op = UNITS[unit]
    np_dt = np.dtype(dtype)
    inits = [_c("s", 0.037), _c("z", 3, np_dt), _c("s2", 0.029), _c("z2", 5, np_dt)]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["d"]), helper.make_node(op, ["d"], ["f"], **attrs),
             helper.make_node("QuantizeLinear", ["f", "s2", "z2"], ["y"])]
    graph = helper.make_graph(nodes, "unit", [helper.make_tensor_value_info("x", _T[dtype], [1, 8, 9, 9])],
                              [helper.make_tensor_value_info("y", _T[dtype], None)], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    sessions = {d: vkinfer.InferenceSession(m.SerializeToString(), device=d) for d in DEVICES}
    for device, sess in sessions.items():
        assert want_op in [n.op for n in sess.graph.nodes], device
    rng = np.random.default_rng(unit)
    for _ in range(3):  # three inputs through the same sessions: nothing stale in reused buffers
        x = rng.integers(0, 256, (1, 8, 9, 9)).astype(np.uint8).view(np_dt)
        run_sessions(sessions, {"x": x}, want=_oracle(m, {"x": x}, dtype))
