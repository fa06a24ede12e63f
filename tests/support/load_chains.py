"""Long generated chains for load-time tests (tests/compiler/test_load_time.py) and profiling: `n` layers, each
reading the one before, on small 8-bit tensors, so that loading is all graph passes, lowering and planning.

    blob = chain_model("qlinear_add", 20_000)   # ONNX bytes (kinds: CHAINS), or TFLite bytes for "tflite_add"
"""

from __future__ import annotations

import numpy as np
import tflite
from onnx import TensorProto, helper, numpy_helper

from vkinfer.testing.onnx_builder import MS, OPSET, ir_version
from vkinfer.testing.tflite_builder import ACT, ModelBuilder

CHAINS = ("transpose", "qlinear_add", "qlinear_conv", "qdq_conv", "tflite_add")
_SHAPE = [1, 4, 3, 5]  # NCHW; a Transpose chain alternates it with its (0, 2, 3, 1) permutation


def _onnx(nodes, inits, x_shape, y_shape, elem=TensorProto.UINT8) -> bytes:
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x0", elem, x_shape)],
                          [helper.make_tensor_value_info(nodes[-1].output[0], elem, y_shape)], inits)
    opsets = [helper.make_opsetid("", OPSET), *(helper.make_opsetid(d, v) for d, v in MS.items())]
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = ir_version(OPSET, MS)
    return m.SerializeToString()


def _const(name: str, value) -> TensorProto:
    return numpy_helper.from_array(np.asarray(value), name)


def chain_model(kind: str, n: int, seed: int = 0) -> bytes:
    """A model of `n` layers in a chain (`kind` in CHAINS): Transposes on uint8, com.microsoft QLinearAdds of the
    running tensor and a constant of its shape, 1x1 QLinearConvs with their own weights, the same as QDQ
    (DequantizeLinear -> Conv -> Relu -> QuantizeLinear, five nodes a layer, a Transpose pair half-way), or
    TFLite int8 ADDs of the running tensor and a constant."""
    rng = np.random.default_rng(seed)
    if kind == "tflite_add":
        return _tflite_add(n, rng)
    shape, nodes = list(_SHAPE), []
    inits = [_const("s", np.float32(0.05)), _const("z", np.uint8(128)), _const("s_out", np.float32(0.1))]
    x = "x0"
    for i in range(n):
        y = f"x{i + 1}"
        if kind == "transpose":
            perm = [0, 2, 3, 1] if i % 2 == 0 else [0, 3, 1, 2]
            nodes.append(helper.make_node("Transpose", [x], [y], f"t{i}", perm=perm))
            shape = [shape[p] for p in perm]
        elif kind == "qlinear_add":
            inits.append(_const(f"b{i}", rng.integers(0, 256, _SHAPE, dtype=np.uint8)))
            nodes.append(helper.make_node("QLinearAdd", [x, "s", "z", f"b{i}", "s", "z", "s_out", "z"], [y],
                                          f"add{i}", domain="com.microsoft"))
        elif kind == "qdq_conv":  # DQ -> Conv (DQ'd weights) -> Relu -> Q: QDQ folding, activation fusion
            c = _SHAPE[1]
            inits.append(_const(f"w{i}", rng.integers(-8, 9, (c, c, 1, 1), dtype=np.int8)))
            nodes += [helper.make_node("DequantizeLinear", [x, "s", "z"], [f"{y}_f"], f"dq{i}"),
                      helper.make_node("DequantizeLinear", [f"w{i}", "s", "zw"], [f"w{i}_f"], f"dqw{i}"),
                      helper.make_node("Conv", [f"{y}_f", f"w{i}_f"], [f"{y}_c"], f"conv{i}"),
                      helper.make_node("Relu", [f"{y}_c"], [f"{y}_r"], f"relu{i}"),
                      helper.make_node("QuantizeLinear", [f"{y}_r", "s", "z"], [y], f"q{i}")]
            if i == n // 2:  # a Transpose pair in float between DQ and Q: ORT's QDQ propagation has work
                nodes += [helper.make_node("DequantizeLinear", [y, "s", "z"], [f"{y}_tf"], f"dqt{i}"),
                          helper.make_node("Transpose", [f"{y}_tf"], [f"{y}_t1"], f"ta{i}", perm=[0, 2, 3, 1]),
                          helper.make_node("Transpose", [f"{y}_t1"], [f"{y}_t2"], f"tb{i}", perm=[0, 3, 1, 2]),
                          helper.make_node("QuantizeLinear", [f"{y}_t2", "s", "z"], [f"{y}_t"], f"qt{i}")]
                y = f"{y}_t"
        elif kind == "qlinear_conv":
            c = _SHAPE[1]
            inits.append(_const(f"w{i}", rng.integers(-8, 9, (c, c, 1, 1), dtype=np.int8)))
            nodes.append(helper.make_node("QLinearConv", [x, "s", "z", f"w{i}", "s", "zw", "s_out", "z"], [y],
                                          f"conv{i}"))
        else:
            raise ValueError(f"unknown chain kind {kind!r}")
        x = y
    if kind in ("qlinear_conv", "qdq_conv"):
        inits.append(_const("zw", np.int8(0)))
    return _onnx(nodes, inits, _SHAPE, shape)


def _tflite_add(n: int, rng) -> bytes:
    B, A = tflite.BuiltinOperator, tflite.BuiltinOptions
    m = ModelBuilder()
    shape = (1, 3, 5, 4)
    x = m.tensor("x0", shape, np.int8, None, 0.05, 0)
    first = x
    for i in range(n):
        b = m.tensor(f"b{i}", shape, np.int8, rng.integers(-128, 128, shape, dtype=np.int8), 0.05, 0)
        y = m.tensor(f"x{i + 1}", shape, np.int8, None, 0.05, 0)
        m.op(B.ADD, [x, b], [y], A.AddOptions, FusedActivationFunction=ACT[None])
        x = y
    return m.finish([first], [x])
