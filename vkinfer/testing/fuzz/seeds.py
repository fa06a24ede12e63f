"""The fuzzers' seed models: small members of the zoos (vkinfer.testing.zoo, field_zoo, tflite_zoo) and a few
hand-written graphs (onnx_builder), each built in well under a second so a fuzzing process (or one restarted
after a crash) starts quickly, and each run on the reference, cpu and vulkan devices in milliseconds.

Together they cover the importers' paths: QOperator and QDQ ONNX (convolutions, matmuls, Gemm, float ops between
quantized ones, moves, pooling, a symbolic batch) and int8/uint8 TFLite (convolutions, pooling, FULLY_CONNECTED,
SOFTMAX, PAD, CONCATENATION, RESIZE, STRIDED_SLICE, MEAN, a streaming model with resource variables).
"""

from __future__ import annotations

import functools
import logging

import numpy as np


def _moves_u8() -> bytes:
    """uint8, symbolic batch N: MaxPool 2x2/2, Concat with itself, Transpose to NHWC, Reshape [0, -1],
    QLinearMatMul to 8 columns."""
    from ..onnx_builder import GraphBuilder

    g = GraphBuilder(0)
    x = g.input("x", np.uint8, ["N", 4, 6, 6])
    p = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    c = g.node("Concat", [p, p], axis=1)
    t = g.node("Transpose", [c], perm=[0, 2, 3, 1])
    r = g.node("Reshape", [t, g.i64("shape", [0, -1])])
    b = g.rng.integers(0, 256, (72, 8)).astype(np.uint8)
    y = g.qlinear_matmul(r, g.quant("a", 0.02, 128), b, 0.01, 120, g.quant("y", 0.5, 100))
    g.rename({y: "y"})
    return g.build("moves_u8", {"y": (np.uint8, ["N", 8])}).SerializeToString()


def _float_between() -> bytes:
    """QuantizeLinear -> DequantizeLinear -> Sigmoid -> Softmax -> Mul -> QuantizeLinear -> DequantizeLinear: float
    ops between quantized tensors."""
    from ..onnx_builder import GraphBuilder

    g = GraphBuilder(0)
    x = g.input("x", np.float32, [2, 8])
    q = g.node("QuantizeLinear", [x, *g.quant("x", 0.03, 128)])
    d = g.node("DequantizeLinear", [q, *g.quant("x", 0.03, 128)])
    s = g.node("Softmax", [g.node("Sigmoid", [d])], axis=-1)
    m = g.node("Mul", [s, g.f32("k", 3.0)])
    q2 = g.node("QuantizeLinear", [m, *g.quant("y", 0.004, 0)])
    y = g.node("DequantizeLinear", [q2, *g.quant("y", 0.004, 0)])
    g.rename({y: "y"})
    return g.build("float_between", {"y": (np.float32, [2, 8])}).SerializeToString()


@functools.cache
def onnx_seeds() -> dict[str, bytes]:
    """name -> the bytes of a small ONNX model."""
    from .. import field_zoo, zoo

    logging.disable(logging.WARNING)  # onnxruntime.quantization's advice on every call
    try:
        mlp = zoo.mlp(in_features=16, hidden=16, num_classes=4, batch=2)
        dilated = zoo.dilated_net(channels=4, size=8, num_classes=2)
        seeds = {
            "tiny_conv": field_zoo.tiny_conv_onnx(0).SerializeToString(),
            "mlp_qdq": zoo.quantize(mlp, fmt="qdq").SerializeToString(),
            "mlp_qop": zoo.quantize(mlp, fmt="qoperator").SerializeToString(),
            "dilated_qdq": zoo.quantize(dilated, fmt="qdq", per_channel=True).SerializeToString(),
            "moves_u8": _moves_u8(),
            "float_between": _float_between(),
        }
    finally:
        logging.disable(logging.NOTSET)
    return seeds


@functools.cache
def tflite_seeds() -> dict[str, bytes]:
    """name -> the bytes of a small TFLite model."""
    from .. import tflite_zoo

    small = {"shape": (1, 4, 4, 8)}
    return {
        "tiny_cnn": tflite_zoo.tiny_cnn(0, size=8, channels=4, num_classes=4),
        "tiny_cnn_u8": tflite_zoo.tiny_cnn(0, dtype="uint8", pool="average_pool", head="dequantize", size=8,
                                           channels=4, num_classes=4),
        "streaming_kws": tflite_zoo.streaming_kws(0),
        **{f"op_{op}": tflite_zoo.op_model(op, **small) for op in ("add", "concat", "max_pool", "pad", "softmax",
                                                                   "hard_swish", "mean")},
        "op_resize_nearest": tflite_zoo.op_model("resize_nearest", shape=(1, 3, 3, 4), size=(6, 5),
                                                 half_pixel=True),
        "op_strided_slice": tflite_zoo.op_model("strided_slice", shape=(1, 6, 5, 8), begin=[0, -1, 0, 7],
                                                end=[1, 0, 5, 0], strides=[1, -2, 2, -2], BeginMask=0b0100,
                                                EndMask=0b1000, out_shape=(1, 3, 3, 4)),
    }


def seeds(kind: str) -> dict[str, bytes]:
    """The seeds of "onnx", "tflite" or "any" (both)."""
    if kind == "onnx":
        return onnx_seeds()
    if kind == "tflite":
        return tflite_seeds()
    return {**onnx_seeds(), **tflite_seeds()}


__all__ = ["onnx_seeds", "tflite_seeds", "seeds"]
