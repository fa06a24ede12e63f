"""Calibration's default whole-model workload: small 8-bit CNNs of the field, described layer by layer and built
here as graphs.

Whole models timed operator by operator (measure.model_samples) give per-node samples measured in the conditions
a prediction is for. These are the models of MLPerf Tiny and ARM's "Hello Edge": the DS-CNN-S keyword spotter
(`ds_cnn_kws`), a MobileNetV2 keyword spotter (`mobilenet_v2_kws`), MobileNetV1 0.25 visual wake words
(`mobilenet_v1_vww`), ResNet-8 (`resnet8`), and one 3x3 convolution whose run is nearly all fixed cost
(`tiny_conv`). Each is built directly as a vkinfer graph in the form the TFLite importer gives the converted model:
the 8-bit NHWC input ``input`` transposed to NCHW, a QLinearConv per CONV_2D / DEPTHWISE_CONV_2D (TensorFlow's
SAME padding), vkinfer:TFLiteAdd, vkinfer:TFLiteAveragePool (then Transpose and Reshape) or
vkinfer:TFLiteMean, QGemm ``logits`` and vkinfer:TFLiteSoftmax ``output``.

Weights come from the generator calls of the test zoo's builder of the same model and seed
(vkinfer.testing.field_zoo: He-initialised, drawn after its 16-image calibration batch) and are quantized as it
quantizes them (int8 symmetric per output channel, per tensor for the fully connected layer; uint8 asymmetric per
tensor), because the CPU kernel a layer gets depends on its weights' range (the u8s8 paths: the weights minus
their zero point within the variant's bounds). Activation scales and zero points are seeded stand-ins (the
zero point at the type's minimum after a ReLU, as calibrated models have it): a node's time does not depend on
them. tests/dispatcher/test_calibrate.py checks that every model and type here has the nodes, attributes, weights and
input of field_zoo's .tflite file as imported, and compiles to the same native operators and kernels.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ...model.graph import Graph, TensorInfo
from .grid import _B

# Each model's input (NHWC) and the feature range its calibration batch is drawn over (a KWS model's MFCC-like
# features, an image's pixels in [0, 1]): drawn only to keep the weights' draws in step with field_zoo's.
INPUT_SHAPES: dict[str, tuple[int, int, int, int]] = {
    "ds_cnn_kws": (1, 49, 10, 1), "mobilenet_v2_kws": (1, 59, 49, 1), "mobilenet_v1_vww": (1, 96, 96, 3),
    "resnet8": (1, 32, 32, 3), "tiny_conv": (1, 8, 8, 8), "mobilenet_v2": (1, 224, 224, 3),
    "float_mlp": (4, 64)}
INPUT_RANGES: dict[str, tuple[float, float]] = {
    "ds_cnn_kws": (-120.0, 30.0), "mobilenet_v2_kws": (-120.0, 30.0), "mobilenet_v1_vww": (0.0, 1.0),
    "resnet8": (0.0, 1.0), "tiny_conv": (-1.0, 1.0), "mobilenet_v2": (0.0, 1.0)}
CALIBRATION = 16  # images in the field models' calibration batch

# mobilenet_v2_kws's inverted residual stages: (expansion t, output channels c, repeats n, first stride s).
MOBILENET_V2_KWS_STAGES = [(1, 8, 1, 1), (4, 16, 2, 2), (4, 24, 2, 2)]
# mobilenet_v2's (MobileNetV2 1.0/224) inverted residual stages, as MOBILENET_V2_KWS_STAGES.
MOBILENET_V2_STAGES = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)]
# mobilenet_v1_vww's 13 depthwise-separable blocks: (MobileNetV1 1.0's output channels, stride); alpha 0.25.
MOBILENET_V1_BLOCKS = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + \
    [(1024, 2), (1024, 1)]
# resnet8's stages of one residual block each: (channels, stride).
RESNET8_STAGES = [(16, 1), (32, 2), (64, 2)]


def _same_pads(size: int, k: int, stride: int) -> tuple[int, int]:
    """TensorFlow's SAME padding of one spatial axis: (before, after), the odd pixel after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + k - size, 0)
    return total // 2, total - total // 2


class _Net:
    """One model under construction: the graph builder, each activation's (C, H, W) and quantization constants."""

    def __init__(self, name: str, seed: int, dtype: str) -> None:
        self.dt = np.dtype(dtype)
        if self.dt not in (np.dtype(np.int8), np.dtype(np.uint8)):
            raise ValueError(f"dtype must be 'int8' or 'uint8', got {dtype!r}")
        self.qmin, self.qmax = (-128, 127) if self.dt == np.int8 else (0, 255)
        self.b = _B(seed)  # constants, nodes, and the stand-in activation parameters' generator
        self.rng = np.random.default_rng(seed)  # the weights' generator, in step with field_zoo's
        shape = INPUT_SHAPES[name]
        self.rng.uniform(*INPUT_RANGES[name], (CALIBRATION, *shape[1:]))  # field_zoo's calibration batch
        self.b.inputs.append(TensorInfo("input", shape, self.dt))
        self.shape: dict[str, tuple[int, int, int]] = {}
        self.q: dict[str, list[str]] = {}
        self.x = self._act(self.b.node("Transpose", ["input"], perm=[0, 3, 1, 2]), (shape[3], shape[1], shape[2]),
                           self._qp(False))

    def _qp(self, relu: bool) -> list[str]:
        """Seeded stand-in (scale, zero point) constants of an activation; after a ReLU the zero point is the
        type's minimum."""
        zp = self.qmin if relu else (self.qmin + self.qmax + 1) // 2 + int(self.b.rng.integers(-20, 21))
        return [self.b.const(np.float32(self.b.rng.uniform(0.02, 0.06))), self.b.const(self.dt.type(zp))]

    def _act(self, t: str, chw: tuple[int, int, int], q: list[str]) -> str:
        """Record activation `t`: its (C, H, W) and its (scale, zero point) constants."""
        self.shape[t], self.q[t] = chw, q
        return t

    def _he(self, shape: tuple[int, ...], fan_in: int, gain: float) -> np.ndarray:
        return (self.rng.standard_normal(shape) * math.sqrt(gain / fan_in)).astype(np.float32)

    def _bias(self, n: int) -> np.ndarray:
        return (self.rng.standard_normal(n) * 0.05).astype(np.float32)

    def _weights(self, w: np.ndarray, axis: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(quantized weights, scale, zero point): int8 symmetric per `axis` (None: per tensor), scales and zero
        points of shape (channels,); uint8 asymmetric per tensor over [min(w, 0), max(w, 0)], scalars."""
        if self.dt == np.uint8:
            lo, hi = min(float(w.min()), 0.0), max(float(w.max()), 0.0)
            scale = max(hi - lo, 1e-6) / 255
            zp = int(np.clip(round(-lo / scale), 0, 255))
            scale = float(np.float32(scale))
            q = np.clip(np.rint(w / scale) + zp, 0, 255).astype(np.uint8)
            return q, np.float32(scale), np.uint8(zp)
        red = tuple(i for i in range(w.ndim) if i != axis) if axis is not None else None
        amax = np.maximum(np.abs(w).max(axis=red, keepdims=axis is not None), 1e-8)
        s = (amax / 127.0).astype(np.float32)
        q = np.clip(np.rint(w / s), -127, 127).astype(np.int8)
        if axis is None:
            return q, np.float32(s), np.int8(0)
        return q, s.reshape(-1), np.zeros(s.size, np.int8)

    def _qconv(self, src: str, w_ohwi: np.ndarray, axis: int, b: np.ndarray, stride: int, group: int,
               act: str | None) -> str:
        c, h, w = self.shape[src]
        wq, ws, wz = self._weights(w_ohwi, axis)
        wq = wq.transpose(0, 3, 1, 2) if group == 1 else wq.transpose(3, 0, 1, 2)  # OHWI / 1HWC -> OIHW
        m, _, kh, kw = wq.shape
        (pt, pb), (pl, pr) = _same_pads(h, kh, stride), _same_pads(w, kw, stride)
        xs = float(self.b.consts[self.q[src][0]])
        bias = np.rint(b / (np.float32(xs) * ws)).astype(np.int32)
        q = self._qp(act is not None)
        y = self.b.node("QLinearConv", [src, *self.q[src], self.b.const(wq), self.b.const(ws), self.b.const(wz),
                                        *q, self.b.const(bias)],
                        strides=[stride, stride], pads=[pt, pl, pb, pr], dilations=[1, 1], group=group)
        return self._act(y, (m, -(-h // stride), -(-w // stride)), q)

    def conv(self, src: str, cout: int, k: int | tuple[int, int], stride: int = 1, act: str | None = "relu",
             gain: float = 2.0) -> str:
        """CONV_2D k (or kh x kw) / stride, SAME, fused `act`; gain 1 for a linear output (field_zoo's draws)."""
        kh, kw = (k, k) if isinstance(k, int) else k
        cin = self.shape[src][0]
        w = self._he((cout, kh, kw, cin), kh * kw * cin, gain)
        return self._qconv(src, w, 0, self._bias(cout), stride, 1, act)

    def dwconv(self, src: str, stride: int = 1, act: str | None = "relu") -> str:
        """DEPTHWISE_CONV_2D 3x3 / stride, SAME, depth multiplier 1, fused `act`."""
        c = self.shape[src][0]
        w = self._he((1, 3, 3, c), 9, 2.0)
        return self._qconv(src, w, 3, self._bias(c), stride, c, act)

    def add(self, a: str, b: str, act: str | None = None) -> str:
        """ADD with fused `act` (its clamp is the output type's range once the zero point is at its minimum)."""
        q = self._qp(act is not None)
        y = self.b.node("vkinfer:TFLiteAdd", [a, *self.q[a], b, *self.q[b], *q], activation_min=self.qmin,
                        activation_max=self.qmax)
        return self._act(y, self.shape[a], q)

    def avg_pool(self, src: str) -> str:
        """AVERAGE_POOL_2D over the whole map (the input's parameters), back to NHWC, RESHAPE to (1, C)."""
        c, h, w = self.shape[src]
        y = self.b.node("vkinfer:TFLiteAveragePool", [src], activation_min=self.qmin, activation_max=self.qmax,
                        kernel_shape=[h, w], strides=[h, w], pads=[0, 0, 0, 0])
        y = self.b.node("Transpose", [y], perm=[0, 2, 3, 1])
        y = self.b.node("Reshape", [y, self.b.const(np.array([1, c], np.int64))])
        return self._act(y, (c, 1, 1), self.q[src])

    def mean(self, src: str) -> str:
        """MEAN over H, W (keep_dims false): vkinfer:TFLiteMean to (1, C) (XNNPACK's arithmetic, as litert)."""
        c = self.shape[src][0]
        q = self._qp(False)
        y = self.b.node("vkinfer:TFLiteMean", [src, *self.q[src], *q], axes=[2, 3], keepdims=0)
        return self._act(y, (c, 1, 1), q)

    def classifier(self, src: str, num_classes: int) -> Graph:
        """FULLY_CONNECTED ``logits`` (per-tensor weights), SOFTMAX ``output`` (scale 1/256, zero point the type's
        minimum, as TFLite requires): the finished graph."""
        c = self.shape[src][0]
        wq, ws, wz = self._weights(self._he((num_classes, c), c, 1.0), None)
        bias = np.rint(self._bias(num_classes) / (self.b.consts[self.q[src][0]] * ws)).astype(np.int32)
        q = self._qp(False)
        logits = self.b.node("com.microsoft:QGemm", [src, *self.q[src], self.b.const(wq), self.b.const(ws),
                                                     self.b.const(wz), self.b.const(bias), *q], transB=1, alpha=1.0)
        out = self.b.node("vkinfer:TFLiteSoftmax", [logits, q[0], self.b.const(np.float32(1 / 256)),
                                                    self.b.const(self.dt.type(self.qmin))], beta=1.0)
        return self._graph({logits: "logits", out: "output"}, (1, num_classes))

    def _graph(self, outputs: dict[str, str], shape: tuple[int, ...]) -> Graph:
        for n in self.b.nodes:
            n.outputs = [outputs.get(o, o) for o in n.outputs]
            n.inputs = [outputs.get(i, i) for i in n.inputs]
        return Graph(self.b.nodes, self.b.inputs, [TensorInfo(o, shape, self.dt) for o in outputs.values()],
                     self.b.consts)


def ds_cnn_kws(seed: int = 0, dtype: str = "int8") -> Graph:
    """DS-CNN-S on 1x49x10x1 MFCC: CONV_2D 10x4/2 to 64 + RELU, 4 x (DEPTHWISE_CONV_2D 3x3 + RELU, CONV_2D 1x1 to
    64 + RELU), AVERAGE_POOL_2D 25x5, FULLY_CONNECTED to 12, SOFTMAX."""
    n = _Net("ds_cnn_kws", seed, dtype)
    x = n.conv(n.x, 64, (10, 4), stride=2)
    for _ in range(4):
        x = n.conv(n.dwconv(x), 64, 1)
    return n.classifier(n.avg_pool(x), 12)


def mobilenet_v2_kws(seed: int = 0, dtype: str = "int8") -> Graph:
    """MobileNetV2-style keyword spotter on a 1x59x49x1 spectrogram: CONV_2D 3x3/2 to 16 + RELU6, the inverted
    residual stages of MOBILENET_V2_KWS_STAGES (expand 1x1 + RELU6 where t > 1, DEPTHWISE 3x3 + RELU6, linear
    project 1x1, ADD where stride 1 and channels match), CONV_2D 1x1 to 64 + RELU6, MEAN, FULLY_CONNECTED to 12,
    SOFTMAX."""
    n = _Net("mobilenet_v2_kws", seed, dtype)
    cur, cin = n.conv(n.x, 16, 3, stride=2, act="relu6"), 16
    for t, c, reps, s in MOBILENET_V2_KWS_STAGES:
        for i in range(reps):
            stride = s if i == 0 else 1
            y = cur if t == 1 else n.conv(cur, cin * t, 1, act="relu6")
            y = n.conv(n.dwconv(y, stride, act="relu6"), c, 1, act=None, gain=1.0)
            cur, cin = (n.add(cur, y) if stride == 1 and cin == c else y), c
    return n.classifier(n.mean(n.conv(cur, 64, 1, act="relu6")), 12)


def mobilenet_v2(seed: int = 0, dtype: str = "int8") -> Graph:
    """MobileNetV2 1.0 on 1x224x224x3, as mobilenet_v2_kws with MOBILENET_V2_STAGES: CONV_2D 3x3/2 to 32 + RELU6,
    the stages, CONV_2D 1x1 to 1280 + RELU6, MEAN, FULLY_CONNECTED to 1000, SOFTMAX. Not a field model: the
    large layers' times inside a model whose 3.5 MB of weights leave the caches between runs (its classifier took
    44 us in the model against 15 us alone, its 1x1 convolutions 7-25% more than alone)."""
    n = _Net("mobilenet_v2", seed, dtype)
    cur, cin = n.conv(n.x, 32, 3, stride=2, act="relu6"), 32
    for t, c, reps, s in MOBILENET_V2_STAGES:
        for i in range(reps):
            stride = s if i == 0 else 1
            y = cur if t == 1 else n.conv(cur, cin * t, 1, act="relu6")
            y = n.conv(n.dwconv(y, stride, act="relu6"), c, 1, act=None, gain=1.0)
            cur, cin = (n.add(cur, y) if stride == 1 and cin == c else y), c
    return n.classifier(n.mean(n.conv(cur, 1280, 1, act="relu6")), 1000)


def mobilenet_v1_vww(seed: int = 0, dtype: str = "int8") -> Graph:
    """MobileNetV1 alpha 0.25 on 1x96x96x3: CONV_2D 3x3/2 to 8 + RELU, the 13 depthwise-separable blocks of
    MOBILENET_V1_BLOCKS (+ RELU each), AVERAGE_POOL_2D 3x3, FULLY_CONNECTED to 2, SOFTMAX."""
    n = _Net("mobilenet_v1_vww", seed, dtype)
    x = n.conv(n.x, 8, 3, stride=2)
    for c, s in MOBILENET_V1_BLOCKS:
        x = n.conv(n.dwconv(x, s), c // 4, 1)
    return n.classifier(n.avg_pool(x), 2)


def resnet8(seed: int = 0, dtype: str = "int8") -> Graph:
    """ResNet-8 on 1x32x32x3: CONV_2D 3x3 to 16 + RELU, the RESNET8_STAGES (CONV_2D 3x3 + RELU, linear CONV_2D 3x3,
    identity or CONV_2D 1x1/2 shortcut, ADD + RELU), AVERAGE_POOL_2D 8x8, FULLY_CONNECTED to 10, SOFTMAX."""
    n = _Net("resnet8", seed, dtype)
    x, cin = n.conv(n.x, 16, 3), 16
    for c, s in RESNET8_STAGES:
        y = n.conv(n.conv(x, c, 3, stride=s), c, 3, act=None, gain=1.0)
        short = x if s == 1 and cin == c else n.conv(x, c, 1, stride=s, act=None, gain=1.0)
        x, cin = n.add(short, y, act="relu"), c
    return n.classifier(n.avg_pool(x), 10)


def tiny_conv(seed: int = 0, dtype: str = "int8") -> Graph:
    """One CONV_2D 3x3 SAME + RELU, 8 -> 8 channels on 1x8x8x8, output ``output`` back in NHWC."""
    n = _Net("tiny_conv", seed, dtype)
    y = n.b.node("Transpose", [n.conv(n.x, 8, 3)], perm=[0, 2, 3, 1])
    return n._graph({y: "output"}, INPUT_SHAPES["tiny_conv"])


def float_mlp(seed: int = 0, dtype: str = "int8") -> Graph:
    """A float-input head as ONNX quantizes one: float32 (4, 64) input, QuantizeLinear to `dtype`, QGemm 64 -> 128,
    QGemm 128 -> 10, DequantizeLinear to the float32 output ``y`` (uint8: wide per-tensor weights, grid._weights).
    Not a field model: the per-run cost of a model whose input and output the CPU segment reads and writes in place
    (0.6 us here against 0.9-1.4 us for the field models' 8-bit inputs and outputs, which it converts)."""
    from .grid import _weights

    dt = np.dtype(dtype)
    b = _B(seed)
    x = b.input(INPUT_SHAPES["float_mlp"], np.float32)
    q = b.qp(dt)
    x = b.node("QuantizeLinear", [x, *q])
    for k, m in ((64, 128), (128, 10)):
        w, wz = _weights(b, (m, k), dt == np.uint8)
        bias = b.rng.integers(-2000, 2000, m).astype(np.int32)
        out_q = b.qp(dt)
        x = b.node("com.microsoft:QGemm", [x, *q, b.const(w), b.const(np.float32(0.004)), b.const(wz[0]),
                                           b.const(bias), *out_q], transB=1)
        q = out_q
    b.node("DequantizeLinear", [x, *q])
    return b.done(np.float32)[0]


MODELS: dict[str, Callable[[int, str], Graph]] = {
    "ds_cnn_kws": ds_cnn_kws, "mobilenet_v2_kws": mobilenet_v2_kws, "mobilenet_v1_vww": mobilenet_v1_vww,
    "resnet8": resnet8, "tiny_conv": tiny_conv, "mobilenet_v2": mobilenet_v2, "float_mlp": float_mlp}


def field_workload(name: str, dtype: str) -> tuple[Graph, dict[str, np.ndarray]]:
    """The default workload: model `name` (a key of MODELS, seed 0) in `dtype` ("int8" or "uint8") as a fresh
    graph, and its input ``input``: uniform integers over the type's whole range (seed 0), the uniform feature
    distribution the field models are calibrated on, already quantized."""
    if name not in MODELS:
        raise ValueError(f"unknown calibration model {name!r}; one of {sorted(MODELS)}")
    g = MODELS[name](0, dtype)
    rng = np.random.default_rng(0)
    [inp] = g.inputs
    if inp.dtype == np.float32:
        return g, {inp.name: rng.standard_normal(INPUT_SHAPES[name]).astype(np.float32)}
    info = np.iinfo(np.dtype(dtype))
    return g, {"input": rng.integers(info.min, info.max, INPUT_SHAPES[name], endpoint=True, dtype=np.dtype(dtype))}


__all__ = ["MODELS", "INPUT_SHAPES", "field_workload", "ds_cnn_kws", "mobilenet_v2_kws", "mobilenet_v1_vww",
           "resnet8", "tiny_conv"]
