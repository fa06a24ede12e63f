"""Small 8-bit TFLite models with seeded random weights, written with tflite_builder.ModelBuilder.

No TensorFlow: every model is serialised with the generated ``tflite.*Start/Add/End`` functions and a
``flatbuffers.Builder`` (tflite_builder; one-op models: tflite_ops.op_model, also importable from here). Weights
are He-initialised from a seeded numpy generator; activation scales and zero points are calibrated on a float
forward pass (numpy, NHWC) over a few seeded random images, so the quantized model computes something close to the
float one.

    from vkinfer.testing import tflite_zoo
    blob = tflite_zoo.tiny_cnn(0)                       # bytes of a .tflite file
    blob = tflite_zoo.tiny_cnn(0, dtype="uint8", pool="average_pool", head="dequantize")
    blob = tflite_zoo.mobilenet_v2(0)                   # MobileNetV2 1.0/224, int8, 1000 classes

The model's input is ``input`` (float32 NHWC 1x16x16x3); its outputs are ``logits`` (the FULLY_CONNECTED
result, int8/uint8, the tensor to compare between runtimes) and ``output`` (SOFTMAX in the activation type, or
DEQUANTIZE to float32). `mobilenet_v2` has the same ``input``, ``logits`` and ``output`` (DEQUANTIZE).

    blob = tflite_zoo.ops_net(0, dtype="uint8")         # PAD, MAX_POOL_2D, depth multiplier 2, LOGISTIC, MUL,
                                                        # CONCATENATION, fused activations that clamp
    blob = tflite_zoo.op_model("mul", 0, dtype="int8")  # one op, 8-bit graph inputs x (and y), output out
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import tflite

from .tflite_builder import (
    ACT,
    LiteRT,
    ModelBuilder,
    conv_float,
    conv_nhwc,
    depthwise_float,
    layer_tensors,
    litert_run,
    max_pool_nhwc,
    qparams,
    same_pads,
)
from .tflite_ops import op_model
from .zoo import MOBILENET_V2_STAGES, _divisible


def tiny_cnn(seed: int = 0, *, dtype: Literal["int8", "uint8"] = "int8",
             pool: Literal["mean", "average_pool"] = "mean", head: Literal["softmax", "dequantize"] = "softmax",
             size: int = 16, channels: int = 8, num_classes: int = 10, extra_outputs: tuple[str, ...] = ()) -> bytes:
    """QUANTIZE -> CONV_2D 3x3/2 (+RELU6) -> DEPTHWISE_CONV_2D 3x3 (+RELU) -> CONV_2D 1x1 -> ADD (residual)
    -> MEAN over H,W (or AVERAGE_POOL_2D) -> RESHAPE -> FULLY_CONNECTED -> SOFTMAX (or DEQUANTIZE).

    int8: symmetric per-axis weights for the convolutions, per-tensor for the fully connected layer.
    uint8: asymmetric per-tensor weights (TFLite has no per-axis uint8). Biases are int32 with scale
    input_scale * weight_scale. `extra_outputs` names intermediate tensors ("conv1", "dwconv", "conv2", "add",
    "pool") to expose as further graph outputs, after ``logits`` and ``output``. Returns the .tflite bytes.
    """
    qdt = np.dtype(dtype)
    if qdt not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise ValueError(f"dtype must be 'int8' or 'uint8', got {dtype!r}")
    rng = np.random.default_rng(seed)
    c, half = channels, -(-size // 2)

    def he(shape, fan_in, gain=2.0):
        return rng.standard_normal(shape) * math.sqrt(gain / fan_in)

    w1 = he((c, 3, 3, 3), 27)                 # OHWI
    b1 = rng.standard_normal(c) * 0.05
    wd = he((1, 3, 3, c), 9)                  # 1HWC
    bd = rng.standard_normal(c) * 0.05
    w2 = he((c, 1, 1, c), c, 1.0)             # OHWI
    b2 = rng.standard_normal(c) * 0.05
    wf = he((num_classes, c), c, 1.0)         # (N, K)
    bf = rng.standard_normal(num_classes) * 0.05

    # Float calibration pass over a few images (the activation ranges set the scales).
    x = rng.uniform(-1.0, 1.0, (8, size, size, 3))
    a1 = np.clip(conv_nhwc(x, w1.transpose(1, 2, 3, 0), b1, 2), 0, 6)
    a2 = np.maximum(conv_nhwc(a1, wd[0][:, :, None, :], bd, 1, groups=c), 0)
    a3 = conv_nhwc(a2, w2.transpose(1, 2, 3, 0), b2, 1)
    a4 = a1 + a3
    a5 = a4.mean(axis=(1, 2))
    a6 = a5 @ wf.T + bf
    qp = {k: qparams(float(v.min()), float(v.max()), qdt)
          for k, v in {"x": x, "a1": a1, "a2": a2, "a3": a3, "a4": a4, "a5": a5, "a6": a6}.items()}
    if pool == "average_pool":  # TFLite's int8/uint8 AVERAGE_POOL_2D wants equal input and output parameters
        qp["a5"] = qp["a4"]

    m = ModelBuilder()
    act_shape = {"x": (1, size, size, 3), "a1": (1, half, half, c), "a2": (1, half, half, c),
                 "a3": (1, half, half, c), "a4": (1, half, half, c), "a5": (1, 1, 1, c), "a6": (1, num_classes)}
    names = {"x": "input_q", "a1": "conv1", "a2": "dwconv", "a3": "conv2", "a4": "add", "a5": "pool",
             "a6": "logits"}
    t = {k: m.tensor(names[k], act_shape[k], qdt, scale=qp[k][0], zero_point=qp[k][1]) for k in act_shape}
    t_in = m.tensor("input", (1, size, size, 3), np.float32)
    flat = m.tensor("flatten", (1, c), qdt, scale=qp["a5"][0], zero_point=qp["a5"][1])

    B, A, P = tflite.BuiltinOperator, tflite.BuiltinOptions, tflite.Padding
    m.op(B.QUANTIZE, [t_in], [t["x"]])
    tw, tb = layer_tensors(m, qdt, "conv1", w1, 0, qp["x"][0], b1)
    m.op(B.CONV_2D, [t["x"], tw, tb], [t["a1"]], A.Conv2DOptions, Padding=P.SAME, StrideW=2, StrideH=2,
         FusedActivationFunction=ACT["relu6"])
    tw, tb = layer_tensors(m, qdt, "dwconv", wd, 3, qp["a1"][0], bd)
    m.op(B.DEPTHWISE_CONV_2D, [t["a1"], tw, tb], [t["a2"]], A.DepthwiseConv2DOptions, Padding=P.SAME,
         StrideW=1, StrideH=1, DepthMultiplier=1, FusedActivationFunction=ACT["relu"])
    tw, tb = layer_tensors(m, qdt, "conv2", w2, 0, qp["a2"][0], b2)
    m.op(B.CONV_2D, [t["a2"], tw, tb], [t["a3"]], A.Conv2DOptions, Padding=P.VALID, StrideW=1, StrideH=1)
    m.op(B.ADD, [t["a1"], t["a3"]], [t["a4"]], A.AddOptions, FusedActivationFunction=ACT[None])
    if pool == "mean":
        axes = m.tensor("mean/axes", (2,), np.int32, np.array([1, 2], np.int32))
        m.op(B.MEAN, [t["a4"], axes], [t["a5"]], A.ReducerOptions, KeepDims=True)
    else:
        m.op(B.AVERAGE_POOL_2D, [t["a4"]], [t["a5"]], A.Pool2DOptions, Padding=P.VALID, StrideW=1, StrideH=1,
             FilterWidth=half, FilterHeight=half)
    shape = m.tensor("flatten/shape", (2,), np.int32, np.array([1, c], np.int32))
    m.op(B.RESHAPE, [t["a5"], shape], [flat], A.ReshapeOptions, NewShape=[1, c])
    tw, tb = layer_tensors(m, qdt, "fc", wf, None, qp["a5"][0], bf)
    m.op(B.FULLY_CONNECTED, [flat, tw, tb], [t["a6"]], A.FullyConnectedOptions, FusedActivationFunction=0)
    if head == "softmax":
        out = m.tensor("output", (1, num_classes), qdt, scale=1.0 / 256,
                       zero_point=-128 if qdt == np.int8 else 0)
        m.op(B.SOFTMAX, [t["a6"]], [out], A.SoftmaxOptions, Beta=1.0)
    else:
        out = m.tensor("output", (1, num_classes), np.float32)
        m.op(B.DEQUANTIZE, [t["a6"]], [out])
    by_name = {v: t[k] for k, v in names.items()}
    return m.finish([t_in], [t["a6"], out] + [by_name[n] for n in extra_outputs])


def mobilenet_v2(seed: int = 0, size: int = 224, width: float = 1.0, num_classes: int = 1000,
                 dtype: Literal["int8"] = "int8", *, calibration_images: int = 4,
                 pool: Literal["mean", "average_pool"] = "mean", extra_outputs: tuple[str, ...] = ()) -> bytes:
    """MobileNetV2 as an int8 TFLite model with seeded He-initialised weights (BN folded into the biases).

    QUANTIZE -> CONV_2D 3x3/2 + RELU6 -> 17 inverted residual blocks (CONV_2D 1x1 + RELU6 expand, except in the
    first; DEPTHWISE_CONV_2D 3x3 stride 1/2 SAME + RELU6; CONV_2D 1x1 project; ADD residual where stride 1 and
    channels match) -> CONV_2D 1x1 to 1280*max(1, width) + RELU6 -> MEAN over H,W (or, with pool="average_pool",
    a VALID AVERAGE_POOL_2D over the whole 7x7 (size / 32) map, as in the converter's Keras MobileNetV2, with the
    pooled tensor keeping conv_last's parameters) -> RESHAPE -> FULLY_CONNECTED (``logits``, int8) -> DEQUANTIZE
    (``output``, float32). Input ``input``: float32 NHWC 1 x size x size x 3.

    Symmetric per-axis int8 weights for the convolutions, per-tensor for the fully connected layer; int32 biases
    with scale input_scale * weight_scale; activation scales from a float32 numpy forward pass over
    `calibration_images` seeded uniform(-1, 1) images, except the quantized input (scale 1/128, zero point 0).
    Tensor names: ``conv1``, ``block{i}/expand``,
    ``block{i}/dwconv``, ``block{i}/project``, ``block{i}/add``, ``conv_last``, ``pool``, ``logits``;
    `extra_outputs` names intermediate tensors to expose as further graph outputs, after ``logits`` and ``output``.
    Returns the .tflite bytes.
    """
    if np.dtype(dtype) != np.dtype(np.int8):
        raise ValueError(f"dtype must be 'int8', got {dtype!r}")
    qdt = np.dtype(np.int8)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (calibration_images, size, size, 3)).astype(np.float32)
    acts: dict[str, np.ndarray] = {"input_q": x}
    layers: list[tuple] = []  # (kind, output name, input names, weights, bias, stride, activation)

    def conv(src: str, name: str, cout: int, k: int, stride: int = 1, act: str | None = "relu6",
             depthwise: bool = False, gain: float = 2.0) -> str:
        a = acts[src]
        cin = a.shape[3]
        if depthwise:
            w = (rng.standard_normal((1, k, k, cin)) * math.sqrt(gain / (k * k))).astype(np.float32)
            b = (rng.standard_normal(cin) * 0.05).astype(np.float32)
            y = depthwise_float(a, w[0], b, stride)
        else:
            w = (rng.standard_normal((cout, k, k, cin)) * math.sqrt(gain / (k * k * cin))).astype(np.float32)
            b = (rng.standard_normal(cout) * 0.05).astype(np.float32)
            y = conv_float(a, w, b, stride)
        acts[name] = np.clip(y, 0, 6) if act == "relu6" else y
        layers.append(("dw" if depthwise else "conv", name, [src], w, b, stride, act))
        return name

    settings = MOBILENET_V2_STAGES
    cin = _divisible(32 * width)
    last = _divisible(1280 * max(1.0, width))
    cur = conv("input_q", "conv1", cin, 3, stride=2)
    block = 0
    for t, c, n, s in settings:
        cout = _divisible(c * width)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = int(round(cin * t))
            y = cur
            if t != 1:
                y = conv(y, f"block{block}/expand", hidden, 1)
            y = conv(y, f"block{block}/dwconv", hidden, 3, stride=stride, depthwise=True)
            y = conv(y, f"block{block}/project", cout, 1, act=None, gain=1.0)
            if stride == 1 and cin == cout:
                name = f"block{block}/add"
                acts[name] = acts[cur] + acts[y]
                layers.append(("add", name, [cur, y], None, None, 1, None))
                y = name
            cur, cin = y, cout
            block += 1
    cur = conv(cur, "conv_last", last, 1)
    acts["pool"] = acts[cur].mean(axis=(1, 2), keepdims=True)
    wf = (rng.standard_normal((num_classes, last)) * math.sqrt(1.0 / last)).astype(np.float32)
    bf = (rng.standard_normal(num_classes) * 0.05).astype(np.float32)
    acts["logits"] = acts["pool"].reshape(-1, last) @ wf.T + bf
    qp = {k: qparams(float(v.min()), float(v.max()), qdt) for k, v in acts.items()}
    # The [-1, 1] input gets scale 1/128, as in converter-made MobileNets.
    qp["input_q"] = (1.0 / 128, 0)
    if pool == "average_pool":  # TFLite's 8-bit AVERAGE_POOL_2D wants equal input and output parameters
        qp["pool"] = qp[cur]

    m = ModelBuilder()
    t = {k: m.tensor(k, (1, *v.shape[1:]), qdt, scale=qp[k][0], zero_point=qp[k][1]) for k, v in acts.items()}
    t_in = m.tensor("input", (1, size, size, 3), np.float32)
    flat = m.tensor("flatten", (1, last), qdt, scale=qp["pool"][0], zero_point=qp["pool"][1])

    B, A, P = tflite.BuiltinOperator, tflite.BuiltinOptions, tflite.Padding
    m.op(B.QUANTIZE, [t_in], [t["input_q"]])
    for kind, name, srcs, w, b, stride, act in layers:
        if kind == "add":
            m.op(B.ADD, [t[srcs[0]], t[srcs[1]]], [t[name]], A.AddOptions, FusedActivationFunction=ACT[None])
        elif kind == "dw":
            tw, tb = layer_tensors(m, qdt, name, w, 3, qp[srcs[0]][0], b)
            m.op(B.DEPTHWISE_CONV_2D, [t[srcs[0]], tw, tb], [t[name]], A.DepthwiseConv2DOptions, Padding=P.SAME,
                 StrideW=stride, StrideH=stride, DepthMultiplier=1, FusedActivationFunction=ACT[act])
        else:
            tw, tb = layer_tensors(m, qdt, name, w, 0, qp[srcs[0]][0], b)
            m.op(B.CONV_2D, [t[srcs[0]], tw, tb], [t[name]], A.Conv2DOptions, Padding=P.SAME, StrideW=stride,
                 StrideH=stride, FusedActivationFunction=ACT[act])
    if pool == "average_pool":
        fh, fw = acts[cur].shape[1:3]
        m.op(B.AVERAGE_POOL_2D, [t[cur]], [t["pool"]], A.Pool2DOptions, Padding=P.VALID, StrideW=1, StrideH=1,
             FilterWidth=fw, FilterHeight=fh)
    else:
        axes = m.tensor("mean/axes", (2,), np.int32, np.array([1, 2], np.int32))
        m.op(B.MEAN, [t[cur], axes], [t["pool"]], A.ReducerOptions, KeepDims=True)
    shape = m.tensor("flatten/shape", (2,), np.int32, np.array([1, last], np.int32))
    m.op(B.RESHAPE, [t["pool"], shape], [flat], A.ReshapeOptions, NewShape=[1, last])
    tw, tb = layer_tensors(m, qdt, "fc", wf, None, qp["pool"][0], bf)
    m.op(B.FULLY_CONNECTED, [flat, tw, tb], [t["logits"]], A.FullyConnectedOptions, FusedActivationFunction=0)
    out = m.tensor("output", (1, num_classes), np.float32)
    m.op(B.DEQUANTIZE, [t["logits"]], [out])
    return m.finish([t_in], [t["logits"], out] + [t[n] for n in extra_outputs])


def ops_net(seed: int = 0, *, dtype: Literal["int8", "uint8"] = "int8", size: int = 16, channels: int = 8,
            num_classes: int = 10) -> bytes:
    """A small net over the remaining 8-bit ops, with fused activations that really clamp:

        input (float32 1 x size x size x 3) -> QUANTIZE (scale not a power of two) ``input_q``
        -> CONV_2D 3x3 SAME + RELU ``conv1`` (output range from the pre-activation: RELU clamps at the zero point)
        -> PAD 1 on H and W ``pad`` -> MAX_POOL_2D 3x3/2 VALID + RELU_N1_TO_1 ``pool``
        -> DEPTHWISE_CONV_2D 3x3 SAME, depth multiplier 2, + RELU6 ``dwconv``
        -> LOGISTIC ``sigmoid``; MUL(dwconv, sigmoid) + RELU_N1_TO_1 ``mul``
        -> ADD(mul, a constant (1, 1, 1, 2*channels) tensor, broadcast) + RELU ``add``
        -> CONCATENATION(add, pool) on channels ``concat`` -> MEAN over H,W -> RESHAPE
        -> FULLY_CONNECTED ``logits`` -> DEQUANTIZE ``output``.

    int8: per-axis weights; TFLite's int8 CONCATENATION does not rescale, so ``add``, ``pool`` (and ``conv1``,
    ``pad``, as pooling and padding keep their input's parameters) share ``concat``'s scale and zero point (plain
    Concat). uint8: per-tensor weights, every tensor its own parameters (QLinearConcat rescales). Every
    intermediate tensor above is also a graph output, after ``logits`` and ``output``. Returns the .tflite bytes.
    """
    qdt = np.dtype(dtype)
    if qdt not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise ValueError(f"dtype must be 'int8' or 'uint8', got {dtype!r}")
    rng = np.random.default_rng(seed)
    c, c2 = channels, 2 * channels

    def he(shape, fan_in, gain=2.0):
        return rng.standard_normal(shape) * math.sqrt(gain / fan_in)

    w1, b1 = he((c, 3, 3, 3), 27), rng.standard_normal(c) * 0.05       # OHWI
    wd, bd = he((1, 3, 3, c2), 9) * 2.0, rng.standard_normal(c2) * 0.05  # 1HW(C*2): large, so RELU6 clips
    addc = rng.standard_normal((1, 1, 1, c2)) * 0.3
    wf, bf = he((num_classes, c2 + c), c2 + c, 1.0), rng.standard_normal(num_classes) * 0.05

    x = rng.uniform(-1.0, 1.0, (8, size, size, 3))
    pre1 = conv_nhwc(x, w1.transpose(1, 2, 3, 0), b1, 1) * 2.0
    w1 = w1 * 2.0
    b1 = b1 * 2.0
    a1 = np.maximum(pre1, 0)
    pool = np.clip(max_pool_nhwc(np.pad(a1, ((0, 0), (1, 1), (1, 1), (0, 0))), 3, 2), -1, 1)
    pre_d = conv_nhwc(pool, wd[0][:, :, None, :].reshape(3, 3, 1, c2), bd, 1, groups=c)
    dw = np.clip(pre_d, 0, 6)
    sig = 1 / (1 + np.exp(-dw))
    pre_m = dw * sig
    mul = np.clip(pre_m, -1, 1)
    pre_a = mul + addc
    add = np.maximum(pre_a, 0)
    cat = np.concatenate([add, pool], axis=3)
    pooled = cat.mean(axis=(1, 2))
    logits = pooled @ wf.T + bf
    # Activation outputs take the pre-activation range, so the fused clamps are narrower than the type.
    ranges = {"input_q": x, "conv1": pre1, "dwconv": pre_d * 1.5, "mul": pre_m * 1.5, "add": pre_a,
              "concat": np.concatenate([pre_a.ravel(), pre1.ravel()]), "mean": pooled, "logits": logits}
    qp = {k: qparams(float(v.min()), float(v.max()), qdt) for k, v in ranges.items()}
    qp["input_q"] = (float(np.float32(qp["input_q"][0] * 1.037)), qp["input_q"][1])  # far from a power of two
    qp["sigmoid"] = (1.0 / 256, -128 if qdt == np.int8 else 0)
    if qdt == np.int8:
        qp["conv1"] = qp["add"] = qp["concat"]
    qp["pad"] = qp["pool"] = qp["conv1"]

    half = (size + 2 - 3) // 2 + 1
    shapes = {"input_q": (1, size, size, 3), "conv1": (1, size, size, c), "pad": (1, size + 2, size + 2, c),
              "pool": (1, half, half, c), "dwconv": (1, half, half, c2), "sigmoid": (1, half, half, c2),
              "mul": (1, half, half, c2), "add": (1, half, half, c2), "concat": (1, half, half, c2 + c),
              "mean": (1, 1, 1, c2 + c), "logits": (1, num_classes)}
    m = ModelBuilder()
    t = {k: m.tensor(k, shp, qdt, scale=qp[k][0], zero_point=qp[k][1]) for k, shp in shapes.items()}
    t_in = m.tensor("input", (1, size, size, 3), np.float32)
    flat = m.tensor("flatten", (1, c2 + c), qdt, scale=qp["mean"][0], zero_point=qp["mean"][1])

    B, A, P = tflite.BuiltinOperator, tflite.BuiltinOptions, tflite.Padding
    m.op(B.QUANTIZE, [t_in], [t["input_q"]])
    tw, tb = layer_tensors(m, qdt, "conv1", w1, 0, qp["input_q"][0], b1)
    m.op(B.CONV_2D, [t["input_q"], tw, tb], [t["conv1"]], A.Conv2DOptions, Padding=P.SAME, StrideW=1, StrideH=1,
         FusedActivationFunction=ACT["relu"])
    pads = m.tensor("pad/paddings", (4, 2), np.int32, np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    m.op(B.PAD, [t["conv1"], pads], [t["pad"]])
    m.op(B.MAX_POOL_2D, [t["pad"]], [t["pool"]], A.Pool2DOptions, Padding=P.VALID, StrideW=2, StrideH=2,
         FilterWidth=3, FilterHeight=3, FusedActivationFunction=ACT["relu_n1_to_1"])
    tw, tb = layer_tensors(m, qdt, "dwconv", wd, 3, qp["pool"][0], bd)
    m.op(B.DEPTHWISE_CONV_2D, [t["pool"], tw, tb], [t["dwconv"]], A.DepthwiseConv2DOptions, Padding=P.SAME,
         StrideW=1, StrideH=1, DepthMultiplier=2, FusedActivationFunction=ACT["relu6"])
    m.op(B.LOGISTIC, [t["dwconv"]], [t["sigmoid"]])
    m.op(B.MUL, [t["dwconv"], t["sigmoid"]], [t["mul"]], A.MulOptions,
         FusedActivationFunction=ACT["relu_n1_to_1"])
    cs, cz = qparams(float(addc.min()), float(addc.max()), qdt)
    tc = m.tensor("add/constant", addc.shape, qdt,
                  np.clip(np.rint(addc / cs) + cz, *((-128, 127) if qdt == np.int8 else (0, 255))), cs, cz)
    m.op(B.ADD, [t["mul"], tc], [t["add"]], A.AddOptions, FusedActivationFunction=ACT["relu"])
    m.op(B.CONCATENATION, [t["add"], t["pool"]], [t["concat"]], A.ConcatenationOptions, Axis=3,
         FusedActivationFunction=ACT[None])
    axes = m.tensor("mean/axes", (2,), np.int32, np.array([1, 2], np.int32))
    m.op(B.MEAN, [t["concat"], axes], [t["mean"]], A.ReducerOptions, KeepDims=True)
    shape = m.tensor("flatten/shape", (2,), np.int32, np.array([1, c2 + c], np.int32))
    m.op(B.RESHAPE, [t["mean"], shape], [flat], A.ReshapeOptions, NewShape=[1, c2 + c])
    tw, tb = layer_tensors(m, qdt, "fc", wf, 0, qp["mean"][0], bf)  # int8: per-axis (output channels) here too
    m.op(B.FULLY_CONNECTED, [flat, tw, tb], [t["logits"]], A.FullyConnectedOptions, FusedActivationFunction=0)
    out = m.tensor("output", (1, num_classes), np.float32)
    m.op(B.DEQUANTIZE, [t["logits"]], [out])
    inner = ["input_q", "conv1", "pad", "pool", "dwconv", "sigmoid", "mul", "add", "concat"]
    return m.finish([t_in], [t["logits"], out] + [t[k] for k in inner])


def streaming_kws(seed: int = 0, *, dtype: Literal["int8", "uint8"] = "int8", features: int = 10,
                  window: int = 4, channels: int = 8, num_classes: int = 6) -> bytes:
    """A streaming keyword spotter as TFLite's converter writes stateful models: two subgraphs, the main one
    starting with CALL_ONCE of an init subgraph that assigns each state ring buffer its zero point (a real 0),
    resource variables (VAR_HANDLE "kws"/"stream1" and "kws"/"stream2") holding the last frames between calls.

    Per call, input ``frame`` (float32 1 x 1 x 1 x features, one frame of audio features):
        QUANTIZE -> READ_VARIABLE stream1 (1, window-1, 1, features) -> CONCATENATION on the time axis (1)
        -> CONV_2D (window x 1, VALID) + RELU ``conv1``; STRIDED_SLICE of the concatenation dropping the oldest
        frame -> ASSIGN_VARIABLE stream1
        -> READ_VARIABLE stream2 (1, 2, 1, channels) -> CONCATENATION -> DEPTHWISE_CONV_2D (3 x 1, VALID) + RELU6
        ``dwconv``; SPLIT_V of the concatenation into its oldest frame and the rest -> ASSIGN_VARIABLE stream2
        -> CONV_2D 1x1 -> RESHAPE -> FULLY_CONNECTED ``logits`` (8-bit) -> DEQUANTIZE ``output``.
    Weights seeded (int8: per-axis); activation parameters from a float pass over seeded frames. Returns bytes.
    """
    qdt = np.dtype(dtype)
    if qdt not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise ValueError(f"dtype must be 'int8' or 'uint8', got {dtype!r}")
    rng = np.random.default_rng(seed)
    f, c, t = features, channels, window
    w1, b1 = rng.standard_normal((c, t, 1, f)) * math.sqrt(2.0 / (t * f)), rng.standard_normal(c) * 0.05  # OHWI
    wd, bd = rng.standard_normal((1, 3, 1, c)) * math.sqrt(2.0 / 3), rng.standard_normal(c) * 0.05       # 1HWC
    w2, b2 = rng.standard_normal((c, 1, 1, c)) * math.sqrt(1.0 / c), rng.standard_normal(c) * 0.05
    wf, bf = rng.standard_normal((num_classes, c)) * math.sqrt(1.0 / c), rng.standard_normal(num_classes) * 0.05

    # Float calibration over a stream of seeded frames.
    frames = rng.uniform(-1.0, 1.0, (64, f))
    pad = np.concatenate([np.zeros((t - 1, f)), frames])
    a1 = np.maximum(np.stack([np.einsum("thf,othf->o", pad[i:i + t, None, :], w1) for i in range(len(frames))])
                    + b1, 0)
    pad1 = np.concatenate([np.zeros((2, c)), a1])
    a2 = np.clip(np.stack([(pad1[i:i + 3] * wd[0, :, 0, :]).sum(0) for i in range(len(a1))]) + bd, 0, 6)
    a3 = a2 @ w2[:, 0, 0, :].T + b2
    a4 = a3 @ wf.T + bf
    qp = {k: qparams(float(v.min()), float(v.max()), qdt)
          for k, v in {"q": frames, "a1": a1, "a2": a2, "a3": a3, "a4": a4}.items()}

    B, A, P = tflite.BuiltinOperator, tflite.BuiltinOptions, tflite.Padding
    m = ModelBuilder()
    init = m.subgraph()
    for name, shape, key in (("stream1", (1, t - 1, 1, f), "q"), ("stream2", (1, 2, 1, c), "a1")):
        h = init.tensor(f"{name}/handle", (), "resource")
        init.op(B.VAR_HANDLE, [], [h], A.VarHandleOptions, Container="kws", SharedName=name)
        zero = init.tensor(f"{name}/zeros", shape, qdt, np.full(shape, qp[key][1]), *qp[key])
        init.op(B.ASSIGN_VARIABLE, [h, zero], [])

    x = m.tensor("frame", (1, 1, 1, f), np.float32)
    m.op(B.CALL_ONCE, [], [], A.CallOnceOptions, InitSubgraphIndex=1)
    xq = m.tensor("frame_q", (1, 1, 1, f), qdt, None, *qp["q"])
    m.op(B.QUANTIZE, [x], [xq])

    def stream(name, new, shape, params, keep_with):
        """READ -> CONCATENATION(state, new) on axis 1 -> the window; the window without its oldest frame
        (STRIDED_SLICE or SPLIT_V) -> ASSIGN."""
        h = m.tensor(f"{name}/handle", (), "resource")
        m.op(B.VAR_HANDLE, [], [h], A.VarHandleOptions, Container="kws", SharedName=name)
        state = m.tensor(f"{name}/state", shape, qdt, None, *params)
        m.op(B.READ_VARIABLE, [h], [state])
        win_shape = (1, shape[1] + 1, 1, shape[3])
        win = m.tensor(f"{name}/window", win_shape, qdt, None, *params)
        m.op(B.CONCATENATION, [state, new], [win], A.ConcatenationOptions, Axis=1, FusedActivationFunction=0)
        rest = m.tensor(f"{name}/next", shape, qdt, None, *params)
        if keep_with == "strided_slice":
            begin = m.tensor(f"{name}/begin", (4,), np.int32, np.array([0, 1, 0, 0], np.int32))
            end = m.tensor(f"{name}/end", (4,), np.int32, np.array(win_shape, np.int32))
            strides = m.tensor(f"{name}/strides", (4,), np.int32, np.ones(4, np.int32))
            m.op(B.STRIDED_SLICE, [win, begin, end, strides], [rest], A.StridedSliceOptions, BeginMask=0,
                 EndMask=0, EllipsisMask=0, NewAxisMask=0, ShrinkAxisMask=0)
        else:
            sizes = m.tensor(f"{name}/sizes", (2,), np.int32, np.array([1, shape[1]], np.int32))
            axis = m.tensor(f"{name}/axis", (), np.int32, np.array(1, np.int32))
            oldest = m.tensor(f"{name}/oldest", (1, 1, 1, shape[3]), qdt, None, *params)
            m.op(B.SPLIT_V, [win, sizes, axis], [oldest, rest], A.SplitVOptions, NumSplits=2)
        m.op(B.ASSIGN_VARIABLE, [h, rest], [])
        return win

    win1 = stream("stream1", xq, (1, t - 1, 1, f), qp["q"], "strided_slice")
    conv1 = m.tensor("conv1", (1, 1, 1, c), qdt, None, *qp["a1"])
    tw, tb = layer_tensors(m, qdt, "conv1", w1, 0, qp["q"][0], b1)
    m.op(B.CONV_2D, [win1, tw, tb], [conv1], A.Conv2DOptions, Padding=P.VALID, StrideW=1, StrideH=1,
         FusedActivationFunction=ACT["relu"])
    win2 = stream("stream2", conv1, (1, 2, 1, c), qp["a1"], "split_v")
    dw = m.tensor("dwconv", (1, 1, 1, c), qdt, None, *qp["a2"])
    tw, tb = layer_tensors(m, qdt, "dwconv", wd, 3, qp["a1"][0], bd)
    m.op(B.DEPTHWISE_CONV_2D, [win2, tw, tb], [dw], A.DepthwiseConv2DOptions, Padding=P.VALID, StrideW=1,
         StrideH=1, DepthMultiplier=1, FusedActivationFunction=ACT["relu6"])
    conv2 = m.tensor("conv2", (1, 1, 1, c), qdt, None, *qp["a3"])
    tw, tb = layer_tensors(m, qdt, "conv2", w2, 0, qp["a2"][0], b2)
    m.op(B.CONV_2D, [dw, tw, tb], [conv2], A.Conv2DOptions, Padding=P.VALID, StrideW=1, StrideH=1,
         FusedActivationFunction=0)
    flat = m.tensor("flatten", (1, c), qdt, None, *qp["a3"])
    shape = m.tensor("flatten/shape", (2,), np.int32, np.array([1, c], np.int32))
    m.op(B.RESHAPE, [conv2, shape], [flat], A.ReshapeOptions, NewShape=[1, c])
    logits = m.tensor("logits", (1, num_classes), qdt, None, *qp["a4"])
    tw, tb = layer_tensors(m, qdt, "fc", wf, None, qp["a3"][0], bf)
    m.op(B.FULLY_CONNECTED, [flat, tw, tb], [logits], A.FullyConnectedOptions, FusedActivationFunction=0)
    out = m.tensor("output", (1, num_classes), np.float32)
    m.op(B.DEQUANTIZE, [logits], [out])
    return m.finish([x], [logits, out, conv1, dw], subgraphs=[(init, [], [])])


__all__ = ["tiny_cnn", "mobilenet_v2", "ops_net", "streaming_kws", "op_model", "litert_run", "LiteRT",
           "ModelBuilder", "same_pads", "tflite"]
