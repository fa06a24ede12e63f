"""Small 8-bit TFLite edge models shaped like the ones deployed in the field (MLPerf Tiny, ARM's "Hello Edge").

Same construction as `tflite_zoo` (tflite_builder's ModelBuilder and helpers): He-initialised weights from a seeded
numpy generator, biases as if batch norm were folded in, activation scales and zero points calibrated on a float
NHWC forward pass over a few seeded inputs, int8 weights symmetric per output channel (per tensor for the fully
connected layer), uint8 weights asymmetric per tensor, int32 biases with scale input_scale * weight_scale.

    from vkinfer.testing import field_zoo
    blob = field_zoo.ds_cnn_kws(0, "int8")                   # bytes of a .tflite file
    feed = field_zoo.field_inputs("ds_cnn_kws", 1, "int8")   # {"input": int8 1x49x10x1}
    field_zoo.describe(blob)                                 # input, op counts, MACs, parameters

Inputs: as in the field (the converter's ``inference_input_type=tf.int8``, which MLPerf Tiny's reference models
use), the graph input ``input`` is the 8-bit tensor itself, with no QUANTIZE in the graph: the application
quantizes its MFCC features or pixels. Its scale and zero point are fixed per model from the feature range
(`INPUT_RANGES`: pixels [0, 1] give scale 1/255, zero point -128 / 0), calibration draws uniform floats over that
range, and `field_inputs` draws uniform integers over the whole type, the same distribution on the 8-bit grid.
Outputs: ``logits`` (the FULLY_CONNECTED result, the tensor to compare between runtimes; a real model's converter
would keep it internal) and ``output`` (SOFTMAX in the activation type, scale 1/256, zero point -128 / 0).

Models (`FIELD_MODELS`; `describe` gives each one's MACs and ops):

- `ds_cnn_kws`: DS-CNN-S keyword spotter (MLPerf Tiny KWS): 1x49x10x1 MFCC, CONV_2D 10x4/2 to 64 + RELU,
  4 x (DEPTHWISE_CONV_2D 3x3 + RELU, CONV_2D 1x1 64 + RELU), AVERAGE_POOL_2D 25x5, FULLY_CONNECTED 12, SOFTMAX.
- `mobilenet_v2_kws`: a MobileNetV2-style keyword spotter on a 1x59x49x1 spectrogram: CONV_2D 3x3/2 to 16,
  inverted residual blocks (RELU6, linear bottlenecks, ADD), CONV_2D 1x1 to 64, MEAN (keep_dims false, as Keras'
  GlobalAveragePooling2D converts), FULLY_CONNECTED 12, SOFTMAX.
- `mobilenet_v1_vww`: MobileNetV1 alpha 0.25 on 1x96x96x3 (MLPerf Tiny visual wake words): CONV_2D 3x3/2 to 8 +
  RELU, the 13 depthwise-separable blocks (RELU), AVERAGE_POOL_2D 3x3, FULLY_CONNECTED 2, SOFTMAX.
- `resnet8`: MLPerf Tiny image classification ResNet-8 on 1x32x32x3: CONV_2D 3x3 16 + RELU, three stages
  (16, 32/2, 64/2) of one residual block (CONV_2D 3x3 + RELU, CONV_2D 3x3, ADD + RELU); the first stage's
  shortcut is the identity (channels and size match, as in MLPerf's model), the others a CONV_2D 1x1/2
  projection; AVERAGE_POOL_2D 8x8, FULLY_CONNECTED 10, SOFTMAX.

Fixed cost: `tiny_conv` is one CONV_2D 3x3 + RELU on 1x8x8x8 (8-bit input ``input``, output ``output``), and
`tiny_conv_onnx` the same convolution as an ONNX QLinearConv (uint8 NCHW activations, int8 per-channel weights).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from typing import Literal

import numpy as np
import onnx
import tflite
from onnx import helper

from .onnx_builder import OPSET, make_model
from .tflite_builder import (
    ACT,
    ACT_FLOAT,
    ModelBuilder,
    conv_float,
    depthwise_float,
    layer_tensors,
    qparams,
)

Dtype = Literal["int8", "uint8"]

# Input feature ranges (real units) that fix each model's input quantization. KWS: MFCC-like features (the
# log-mel energies of "Hello Edge" span about -120..30); images: pixels scaled to [0, 1].
INPUT_RANGES: dict[str, tuple[float, float]] = {
    "ds_cnn_kws": (-120.0, 30.0), "mobilenet_v2_kws": (-120.0, 30.0), "mobilenet_v1_vww": (0.0, 1.0),
    "resnet8": (0.0, 1.0), "tiny_conv": (-1.0, 1.0)}
INPUT_SHAPES: dict[str, tuple[int, ...]] = {
    "ds_cnn_kws": (1, 49, 10, 1), "mobilenet_v2_kws": (1, 59, 49, 1), "mobilenet_v1_vww": (1, 96, 96, 3),
    "resnet8": (1, 32, 32, 3), "tiny_conv": (1, 8, 8, 8)}
CALIBRATION = 16  # seeded float inputs per calibration pass (4 left 5-20% of the logits saturated)


class _Net:
    """A field model under construction: every layer's float activation (over the calibration batch) and the
    layer list; `classifier` appends the head and serialises the calibrated 8-bit TFLite model."""

    def __init__(self, name: str, seed: int, dtype: Dtype) -> None:
        self.qdt = np.dtype(dtype)
        if self.qdt not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise ValueError(f"dtype must be 'int8' or 'uint8', got {dtype!r}")
        self.rng = np.random.default_rng(seed)
        lo, hi = INPUT_RANGES[name]
        shape = INPUT_SHAPES[name]
        self.acts: dict[str, np.ndarray] = {
            "input": self.rng.uniform(lo, hi, (CALIBRATION, *shape[1:])).astype(np.float32)}
        # The input's parameters come from the feature range, not the calibration batch: field_inputs needs them
        # without building the model.
        self.qp: dict[str, tuple[float, int]] = {"input": qparams(lo, hi, self.qdt)}
        self.same_as: dict[str, str] = {}  # tensor -> tensor whose parameters it must share (8-bit pooling)
        self.layers: list[tuple] = []  # (kind, output, inputs, weights, bias, options)

    def _he(self, shape: tuple[int, ...], fan_in: int, gain: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * math.sqrt(gain / fan_in)).astype(np.float32)

    def _bias(self, n: int) -> np.ndarray:
        return (self.rng.standard_normal(n) * 0.05).astype(np.float32)

    def conv(self, src: str, name: str, cout: int, k: int | tuple[int, int], stride: int = 1,
             act: str | None = "relu", gain: float = 2.0) -> str:
        """CONV_2D k (or kh x kw) / stride, SAME, fused `act`; gain 1 for a linear (un-activated) output."""
        kh, kw = (k, k) if isinstance(k, int) else k
        cin = self.acts[src].shape[3]
        w = self._he((cout, kh, kw, cin), kh * kw * cin, gain)  # OHWI
        b = self._bias(cout)
        self.acts[name] = ACT_FLOAT[act](conv_float(self.acts[src], w, b, stride))
        self.layers.append(("conv", name, [src], w, b, {"stride": stride, "act": act}))
        return name

    def dwconv(self, src: str, name: str, k: int = 3, stride: int = 1, act: str | None = "relu") -> str:
        """DEPTHWISE_CONV_2D k x k / stride, SAME, depth multiplier 1, fused `act`."""
        c = self.acts[src].shape[3]
        w = self._he((1, k, k, c), k * k, 2.0)  # 1HWC
        b = self._bias(c)
        self.acts[name] = ACT_FLOAT[act](depthwise_float(self.acts[src], w[0], b, stride))
        self.layers.append(("dw", name, [src], w, b, {"stride": stride, "act": act}))
        return name

    def add(self, a: str, b: str, name: str, act: str | None = None) -> str:
        """ADD of two activations with fused `act` (the converter fuses Keras' Add + ReLU into one ADD)."""
        self.acts[name] = ACT_FLOAT[act](self.acts[a] + self.acts[b])
        self.layers.append(("add", name, [a, b], None, None, {"act": act}))
        return name

    def avg_pool(self, src: str, name: str = "pool") -> str:
        """AVERAGE_POOL_2D over the whole map (Keras AveragePooling2D(pool_size=map), VALID, stride = size);
        the pooled tensor keeps the input's parameters, as TFLite's 8-bit pooling requires."""
        self.acts[name] = self.acts[src].mean(axis=(1, 2), keepdims=True)
        self.same_as[name] = src
        self.layers.append(("avg_pool", name, [src], None, None, {}))
        return name

    def mean(self, src: str, name: str = "pool") -> str:
        """MEAN over H, W with keep_dims false (Keras GlobalAveragePooling2D): a (1, C) tensor, no RESHAPE."""
        self.acts[name] = self.acts[src].mean(axis=(1, 2))
        self.layers.append(("mean", name, [src], None, None, {}))
        return name

    def classifier(self, src: str, num_classes: int) -> bytes:
        """[RESHAPE to (1, C)] -> FULLY_CONNECTED ``logits`` -> SOFTMAX ``output``; calibrate and serialise."""
        pooled = self.acts[src].reshape(len(self.acts[src]), -1)
        c = pooled.shape[1]
        wf = self._he((num_classes, c), c, 1.0)
        bf = self._bias(num_classes)
        self.acts["logits"] = pooled @ wf.T + bf
        qdt = self.qdt
        qp = {k: self.qp.get(k) or qparams(float(v.min()), float(v.max()), qdt) for k, v in self.acts.items()}
        for k, src_k in self.same_as.items():
            qp[k] = qp[src_k]

        m = ModelBuilder()
        t = {k: m.tensor(k, (1, *v.shape[1:]), qdt, scale=qp[k][0], zero_point=qp[k][1])
             for k, v in self.acts.items()}
        B, A, P = tflite.BuiltinOperator, tflite.BuiltinOptions, tflite.Padding
        for kind, name, srcs, w, b, o in self.layers:
            x = t[srcs[0]]
            if kind == "conv":
                tw, tb = layer_tensors(m, qdt, name, w, 0, qp[srcs[0]][0], b)
                m.op(B.CONV_2D, [x, tw, tb], [t[name]], A.Conv2DOptions, Padding=P.SAME, StrideW=o["stride"],
                     StrideH=o["stride"], FusedActivationFunction=ACT[o["act"]])
            elif kind == "dw":
                tw, tb = layer_tensors(m, qdt, name, w, 3, qp[srcs[0]][0], b)
                m.op(B.DEPTHWISE_CONV_2D, [x, tw, tb], [t[name]], A.DepthwiseConv2DOptions, Padding=P.SAME,
                     StrideW=o["stride"], StrideH=o["stride"], DepthMultiplier=1,
                     FusedActivationFunction=ACT[o["act"]])
            elif kind == "add":
                m.op(B.ADD, [x, t[srcs[1]]], [t[name]], A.AddOptions, FusedActivationFunction=ACT[o["act"]])
            elif kind == "avg_pool":
                fh, fw = self.acts[srcs[0]].shape[1:3]
                m.op(B.AVERAGE_POOL_2D, [x], [t[name]], A.Pool2DOptions, Padding=P.VALID, StrideW=fw, StrideH=fh,
                     FilterWidth=fw, FilterHeight=fh, FusedActivationFunction=ACT[None])
            else:  # mean
                axes = m.tensor(f"{name}/axes", (2,), np.int32, np.array([1, 2], np.int32))
                m.op(B.MEAN, [x, axes], [t[name]], A.ReducerOptions, KeepDims=False)
        flat = t[src]
        if self.acts[src].ndim != 2:  # Keras' Flatten after AveragePooling2D
            flat = m.tensor("flatten", (1, c), qdt, scale=qp[src][0], zero_point=qp[src][1])
            shape = m.tensor("flatten/shape", (2,), np.int32, np.array([1, c], np.int32))
            m.op(B.RESHAPE, [t[src], shape], [flat], A.ReshapeOptions, NewShape=[1, c])
        tw, tb = layer_tensors(m, qdt, "fc", wf, None, qp[src][0], bf)
        m.op(B.FULLY_CONNECTED, [flat, tw, tb], [t["logits"]], A.FullyConnectedOptions, FusedActivationFunction=0)
        out = m.tensor("output", (1, num_classes), qdt, scale=1.0 / 256, zero_point=-128 if qdt == np.int8 else 0)
        m.op(B.SOFTMAX, [t["logits"]], [out], A.SoftmaxOptions, Beta=1.0)
        return m.finish([t["input"]], [t["logits"], out])


def ds_cnn_kws(seed: int = 0, dtype: Dtype = "int8") -> bytes:
    """DS-CNN-S keyword spotter ("Hello Edge"; MLPerf Tiny KWS) on 1x49x10x1 MFCC: CONV_2D 10x4/2 SAME to 64 +
    RELU (25x5x64), 4 x (DEPTHWISE_CONV_2D 3x3 + RELU, CONV_2D 1x1 to 64 + RELU), AVERAGE_POOL_2D 25x5, RESHAPE,
    FULLY_CONNECTED to 12 classes, SOFTMAX. Returns the .tflite bytes."""
    n = _Net("ds_cnn_kws", seed, dtype)
    x = n.conv("input", "conv1", 64, (10, 4), stride=2)
    for i in range(4):
        x = n.dwconv(x, f"block{i}/dwconv")
        x = n.conv(x, f"block{i}/pwconv", 64, 1)
    return n.classifier(n.avg_pool(x), 12)


# mobilenet_v2_kws's inverted residual stages: (expansion t, output channels c, repeats n, first stride s).
MOBILENET_V2_KWS_STAGES = [(1, 8, 1, 1), (4, 16, 2, 2), (4, 24, 2, 2)]


def mobilenet_v2_kws(seed: int = 0, dtype: Dtype = "int8") -> bytes:
    """MobileNetV2-style keyword spotter on a 1x59x49x1 spectrogram: CONV_2D 3x3/2 to 16 + RELU6, the inverted
    residual stages of `MOBILENET_V2_KWS_STAGES` (CONV_2D 1x1 expand + RELU6 where t > 1, DEPTHWISE_CONV_2D 3x3 +
    RELU6, linear CONV_2D 1x1 project, ADD where stride 1 and channels match), CONV_2D 1x1 to 64 + RELU6, MEAN
    over H, W (keep_dims false), FULLY_CONNECTED to 12, SOFTMAX. About 1.9 M MACs. Returns the .tflite bytes."""
    n = _Net("mobilenet_v2_kws", seed, dtype)
    cur = n.conv("input", "conv1", 16, 3, stride=2, act="relu6")
    cin, block = 16, 0
    for t, c, reps, s in MOBILENET_V2_KWS_STAGES:
        for i in range(reps):
            stride = s if i == 0 else 1
            y = cur
            if t != 1:
                y = n.conv(y, f"block{block}/expand", cin * t, 1, act="relu6")
            y = n.dwconv(y, f"block{block}/dwconv", stride=stride, act="relu6")
            y = n.conv(y, f"block{block}/project", c, 1, act=None, gain=1.0)
            if stride == 1 and cin == c:
                y = n.add(cur, y, f"block{block}/add")
            cur, cin, block = y, c, block + 1
    cur = n.conv(cur, "conv_last", 64, 1, act="relu6")
    return n.classifier(n.mean(cur), 12)


def mobilenet_v1_vww(seed: int = 0, dtype: Dtype = "int8") -> bytes:
    """MobileNetV1 alpha 0.25 on 1x96x96x3 (MLPerf Tiny visual wake words, 2 classes): CONV_2D 3x3/2 to 8 +
    RELU, the 13 depthwise-separable blocks (DEPTHWISE_CONV_2D 3x3, stride 2 in blocks 2, 4, 6, 12, + RELU;
    CONV_2D 1x1 + RELU) to 16, 32, 32, 64, 64, 128 x 6, 256, 256 channels, AVERAGE_POOL_2D over the 3x3 map,
    RESHAPE, FULLY_CONNECTED to 2, SOFTMAX. Returns the .tflite bytes."""
    n = _Net("mobilenet_v1_vww", seed, dtype)
    blocks = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    x = n.conv("input", "conv1", 8, 3, stride=2)
    for i, (c, s) in enumerate(blocks):
        x = n.dwconv(x, f"block{i}/dwconv", stride=s)
        x = n.conv(x, f"block{i}/pwconv", c // 4, 1)
    return n.classifier(n.avg_pool(x), 2)


def resnet8(seed: int = 0, dtype: Dtype = "int8") -> bytes:
    """MLPerf Tiny's ResNet-8 (CIFAR-10) on 1x32x32x3: CONV_2D 3x3 to 16 + RELU; three stages of one residual
    block each, 16, 32 (stride 2), 64 (stride 2) channels: CONV_2D 3x3 + RELU, CONV_2D 3x3 (linear), shortcut
    (identity in the first stage, where shapes match, as in MLPerf's model; CONV_2D 1x1/2 projection in the
    others), ADD + RELU; AVERAGE_POOL_2D 8x8, RESHAPE, FULLY_CONNECTED to 10, SOFTMAX. Returns the .tflite bytes."""
    n = _Net("resnet8", seed, dtype)
    x, cin = n.conv("input", "conv1", 16, 3), 16
    for i, (c, s) in enumerate([(16, 1), (32, 2), (64, 2)]):
        y = n.conv(x, f"stage{i}/conv1", c, 3, stride=s)
        y = n.conv(y, f"stage{i}/conv2", c, 3, act=None, gain=1.0)
        short = x if s == 1 and cin == c else n.conv(x, f"stage{i}/shortcut", c, 1, stride=s, act=None, gain=1.0)
        x, cin = n.add(short, y, f"stage{i}/add", act="relu"), c
    return n.classifier(n.avg_pool(x), 10)


FIELD_MODELS: dict[str, Callable[..., bytes]] = {
    "ds_cnn_kws": ds_cnn_kws,
    "mobilenet_v2_kws": mobilenet_v2_kws,
    "mobilenet_v1_vww": mobilenet_v1_vww,
    "resnet8": resnet8,
}


def _tiny_conv_float(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """tiny_conv's float calibration inputs (N,8,8,8), weights (OHWI 8x3x3x8) and bias, shared by both formats."""
    rng = np.random.default_rng(seed)
    lo, hi = INPUT_RANGES["tiny_conv"]
    x = rng.uniform(lo, hi, (CALIBRATION, *INPUT_SHAPES["tiny_conv"][1:])).astype(np.float32)
    w = (rng.standard_normal((8, 3, 3, 8)) * math.sqrt(2.0 / 72)).astype(np.float32)
    b = (rng.standard_normal(8) * 0.05).astype(np.float32)
    return x, w, b


def tiny_conv(seed: int = 0, dtype: Dtype = "int8") -> bytes:
    """One CONV_2D 3x3 SAME + RELU, 8 -> 8 channels on a 1x8x8x8 8-bit input ``input`` (output ``output``):
    36,864 MACs, so a run's time is nearly all fixed cost (call, input and output copies, dispatch)."""
    qdt = np.dtype(dtype)
    if qdt not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise ValueError(f"dtype must be 'int8' or 'uint8', got {dtype!r}")
    x, w, b = _tiny_conv_float(seed)
    y = np.maximum(conv_float(x, w, b, 1), 0)
    xq = qparams(*INPUT_RANGES["tiny_conv"], qdt)
    yq = qparams(0.0, float(y.max()), qdt)
    m = ModelBuilder()
    ti = m.tensor("input", INPUT_SHAPES["tiny_conv"], qdt, scale=xq[0], zero_point=xq[1])
    to = m.tensor("output", (1, 8, 8, 8), qdt, scale=yq[0], zero_point=yq[1])
    tw, tb = layer_tensors(m, qdt, "conv", w, 0, xq[0], b)
    B = tflite.BuiltinOperator
    m.op(B.CONV_2D, [ti, tw, tb], [to], tflite.BuiltinOptions.Conv2DOptions, Padding=tflite.Padding.SAME,
         StrideW=1, StrideH=1, FusedActivationFunction=ACT["relu"])
    return m.finish([ti], [to])


def tiny_conv_onnx(seed: int = 0) -> onnx.ModelProto:
    """`tiny_conv`'s convolution as one ONNX QLinearConv (opset 13): uint8 NCHW input ``input`` 1x8x8x8, int8
    weights symmetric per output channel within [-63, 63] (7 bits, so ONNX Runtime's x86 u8 x s8 kernels, which
    saturate pairs of products at int16 without VNNI, stay exact), int32 bias, uint8 output ``output`` whose
    zero point 0 is the ReLU (the range is calibrated after it, as onnxruntime.quantization folds a Relu)."""
    x, w, b = _tiny_conv_float(seed)
    y = np.maximum(conv_float(x, w, b, 1), 0)
    xs, xz = qparams(*INPUT_RANGES["tiny_conv"], np.uint8)
    ys, yz = qparams(0.0, float(y.max()), np.uint8)
    w_oihw = w.transpose(0, 3, 1, 2)
    ws = (np.abs(w_oihw).reshape(8, -1).max(axis=1) / 63.0).astype(np.float32)
    wq = np.clip(np.rint(w_oihw / ws[:, None, None, None]), -63, 63).astype(np.int8)
    bq = np.rint(b / (np.float32(xs) * ws)).astype(np.int32)
    consts = {"x_scale": np.array(xs, np.float32), "x_zero_point": np.array(xz, np.uint8), "w": wq, "w_scale": ws,
              "w_zero_point": np.zeros(8, np.int8), "y_scale": np.array(ys, np.float32),
              "y_zero_point": np.array(yz, np.uint8), "b": bq}
    node = helper.make_node("QLinearConv", ["input", *consts], ["output"], name="conv", kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1], strides=[1, 1])
    return make_model([node], {"input": (np.uint8, [1, 8, 8, 8])}, {"output": (np.uint8, [1, 8, 8, 8])}, consts,
                      opset=OPSET, name="tiny_conv", producer="vkinfer.testing.field_zoo", check=True)


def field_inputs(name: str, seed: int = 0, dtype: Dtype = "int8") -> dict[str, np.ndarray]:
    """{"input": uniform integers over `dtype`'s whole range} in the input shape of model `name` (a key of
    `FIELD_MODELS`, "tiny_conv", or "tiny_conv_onnx", whose input is uint8 NCHW whatever `dtype`): the uniform
    feature distribution the model was calibrated on, already quantized."""
    if name == "tiny_conv_onnx":
        name, dtype = "tiny_conv", "uint8"
    if name not in INPUT_SHAPES:
        raise ValueError(f"unknown field model {name!r}; one of {sorted(INPUT_SHAPES)} or 'tiny_conv_onnx'")
    info = np.iinfo(np.dtype(dtype))
    rng = np.random.default_rng(seed)
    return {"input": rng.integers(info.min, info.max, INPUT_SHAPES[name], endpoint=True, dtype=np.dtype(dtype))}


def describe(blob: bytes) -> dict:
    """What a .tflite model computes: input shape and type, number of ops, ops by type, multiply-accumulates of
    CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED (one per weight tap per output value), constant bytes."""
    names = {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}
    types = {v: k for k, v in vars(tflite.TensorType).items() if not k.startswith("_") and isinstance(v, int)}
    model = tflite.Model.GetRootAsModel(blob, 0)
    g = model.Subgraphs(0)

    def shape(i: int) -> tuple[int, ...]:
        return tuple(int(d) for d in g.Tensors(i).ShapeAsNumpy())

    ops: Counter[str] = Counter()
    macs = 0
    for k in range(g.OperatorsLength()):
        op = g.Operators(k)
        code = model.OperatorCodes(op.OpcodeIndex())
        name = names[max(code.BuiltinCode(), code.DeprecatedBuiltinCode())]
        ops[name] += 1
        out = math.prod(shape(op.Outputs(0)))
        w = shape(op.Inputs(1)) if op.InputsLength() > 1 else ()
        if name == "CONV_2D":
            macs += out * math.prod(w[1:])
        elif name == "DEPTHWISE_CONV_2D":
            macs += out * w[1] * w[2]
        elif name == "FULLY_CONNECTED":
            macs += out * w[1]
    t_in = g.Tensors(g.Inputs(0))
    const = sum(model.Buffers(i).DataLength() for i in range(model.BuffersLength()))
    return {"input_shape": shape(g.Inputs(0)), "input_type": types[t_in.Type()].lower(),
            "ops": g.OperatorsLength(), "op_types": dict(ops), "macs": macs, "constant_bytes": const}


__all__ = ["FIELD_MODELS", "INPUT_RANGES", "INPUT_SHAPES", "ds_cnn_kws", "mobilenet_v2_kws", "mobilenet_v1_vww",
           "resnet8", "tiny_conv", "tiny_conv_onnx", "field_inputs", "describe"]
