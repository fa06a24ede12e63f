"""Float ONNX models shaped like the int8 CNNs found in the field, and their quantization as a user would do it.

Four builders write, with the one graph builder (onnx_builder.GraphBuilder) and seeded random weights, the graphs a
PyTorch / PaddlePaddle export of these architectures gives (batch norm folded into each Conv where the exporter
folds it; the ops each exporter writes: HardSwish or x * HardSigmoid(x), SiLU as x * Sigmoid(x), `Split`, nearest
`Resize`, `ConvTranspose`, `BatchNormalization`, `Softmax`, layer norm written out as
ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add, GELU with `Erf`). The default sizes are small enough to quantize
and run in the test suite in a few seconds; the docstrings say which arguments give the full-size network's
channels.

- `mobilenet_v3_small`: torchvision's MobileNetV3-small (opset 14): stem 3x3/2 + HardSwish, the 11 bneck blocks
  (expand 1x1, depthwise k x k, squeeze-excite GlobalAveragePool -> 1x1 Conv -> Relu -> 1x1 Conv -> HardSigmoid
  -> Mul, project 1x1, residual Add), 1x1 conv + HardSwish, GlobalAveragePool, Flatten, Gemm + HardSwish, Gemm.
- `yolov8n`: Ultralytics' YOLOv8n layout at 160x160 (opset 17): Conv + SiLU, C2f blocks (Split, Bottlenecks,
  Concat), SPPF (three 5x5 MaxPools, Concat), an FPN/PAN neck with nearest Resize x2 and Concat, and the Detect
  head: box/class branches, Reshape + Concat of the three levels, Split, DFL (Reshape -> Transpose -> Softmax ->
  1x1 Conv with weights 0..15 -> Reshape), dist2bbox (Split, Sub, Add, Div, Concat, Mul by strides), Sigmoid.
- `db_text_detector`: PaddleOCR's DB detector layout (opset 13): a MobileNetV3-style backbone in PaddlePaddle's
  export form (hard-swish as x * HardSigmoid(x), SE HardSigmoid with slope 0.2), DBFPN (1x1 laterals, nearest
  Resize x2 + Add top-down, 3x3 smoothing convs, Resize x8/x4/x2, Concat), DB head Conv -> BatchNormalization ->
  Relu -> ConvTranspose 2x2/2 -> BatchNormalization -> Relu -> ConvTranspose 2x2/2 -> Sigmoid.
- `crnn_attention`: a CRNN-style text recognizer (opset 13): conv + Relu + MaxPool backbone down to height 1,
  Reshape + Transpose to a (1, T, C) sequence, one pre-norm transformer block (explicit layer norm, Q/K/V MatMul,
  MatMul(Q, K^T) / sqrt(d), Softmax, MatMul(attn, V), output projection, residual Add, GELU MLP with Erf,
  residual Add), a final layer norm and MatMul to the classes.

    from vkinfer.testing import field_onnx
    f = field_onnx.yolov8n()
    q = field_onnx.quantize(f, fmt="qdq", per_channel=True, activation_type="int8")
    field_onnx.describe(f)   # nodes, op counts, MACs

`quantize` runs `onnxruntime.quantization.quant_pre_process` (ORT's basic graph optimizations: Conv /
ConvTranspose + BatchNormalization folding, HardSwish -> x * HardSigmoid(x), 3-D MatMul + Add -> Gemm, constant
folding; ONNX shape inference; `skip_optimization=True` keeps the graph as exported) and then `zoo.quantize`
(`quantize_static`, MinMax calibration on seeded standard-normal inputs), the steps ORT's documentation gives.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections import Counter
from collections.abc import Callable
from typing import Literal

import numpy as np
import onnx
from onnx import TensorProto, helper

from . import zoo
from .zoo import INPUT, _divisible, _Graph


class _Net(_Graph):
    """zoo's float CNN layers plus the ops of the field models (BN, activations, Resize, attention pieces)."""

    def conv_nb(self, x: str, cin: int, cout: int, k: int | tuple[int, int], *, stride: int | tuple[int, int] = 1,
                group: int = 1, gain: float = 2.0, bias: bool = True) -> str:
        """Conv with a (kh, kw) kernel, "same" padding for odd kernels, optional bias."""
        kh, kw = (k, k) if isinstance(k, int) else k
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        w = self.const("w", self.weight((cout, cin // group, kh, kw), cin // group * kh * kw, gain))
        ins = [x, w] + ([self.const("b", self.bias(cout))] if bias else [])
        return self.node("Conv", ins, kernel_shape=[kh, kw], strides=[sh, sw],
                         pads=[(kh - 1) // 2, (kw - 1) // 2, (kh - 1) // 2, (kw - 1) // 2], group=group)

    def bn(self, x: str, c: int) -> str:
        """BatchNormalization (inference form) with seeded statistics near a trained network's."""
        r = self.rng
        scale = self.f32("bn_scale", 1.0 + 0.1 * r.standard_normal(c))
        shift = self.f32("bn_bias", 0.1 * r.standard_normal(c))
        mean = self.f32("bn_mean", 0.2 * r.standard_normal(c))
        var = self.f32("bn_var", 0.5 + r.random(c))
        return self.node("BatchNormalization", [x, scale, shift, mean, var], epsilon=1e-5)

    def hardsigmoid(self, x: str, alpha: float = 1.0 / 6.0) -> str:
        return self.node("HardSigmoid", [x], alpha=alpha, beta=0.5)

    def hardswish(self, x: str, style: Literal["op", "mul"]) -> str:
        """HardSwish (PyTorch's export from opset 14) or x * HardSigmoid(x) (PaddlePaddle's)."""
        if style == "op":
            return self.node("HardSwish", [x])
        return self.node("Mul", [x, self.hardsigmoid(x)])

    def silu(self, x: str) -> str:
        return self.node("Mul", [x, self.node("Sigmoid", [x])])

    def act(self, x: str, kind: str, hswish: Literal["op", "mul"]) -> str:
        return self.relu(x) if kind == "RE" else self.hardswish(x, hswish)

    def upsample(self, x: str, factor: int = 2) -> str:
        """Nearest Resize by an integer factor, as torch.nn.Upsample / F.interpolate export it."""
        roi = self.f32("roi", np.zeros(0))
        scales = self.f32("scales", [1.0, 1.0, factor, factor])
        return self.node("Resize", [x, roi, scales], mode="nearest", coordinate_transformation_mode="asymmetric",
                         nearest_mode="floor")

    def se(self, x: str, c: int, alpha: float) -> str:
        """Squeeze-excite: GlobalAveragePool -> 1x1 Conv -> Relu -> 1x1 Conv -> HardSigmoid -> Mul."""
        mid = _divisible(c // 4, 8)
        s = self.node("GlobalAveragePool", [x])
        s = self.relu(self.conv(s, c, mid, 1))
        s = self.hardsigmoid(self.conv(s, mid, c, 1, gain=1.0), alpha)
        return self.node("Mul", [x, s])

    def bneck(self, x: str, cin: int, k: int, exp: int, cout: int, use_se: bool, act: str, stride: int, *,
              hswish: Literal["op", "mul"], se_alpha: float) -> str:
        """MobileNetV3's inverted residual block (torchvision's order: SE after the depthwise activation)."""
        y = x
        if exp != cin:
            y = self.act(self.conv(y, cin, exp, 1), act, hswish)
        y = self.act(self.conv(y, exp, exp, k, stride=stride, group=exp), act, hswish)
        if use_se:
            y = self.se(y, exp, se_alpha)
        y = self.conv(y, exp, cout, 1, gain=1.0)
        return self.add(x, y) if stride == 1 and cin == cout else y

    def layer_norm(self, x: str, d: int) -> str:
        """Layer norm over the last axis as PyTorch exports it before opset 17."""
        mean = self.node("ReduceMean", [x], axes=[-1], keepdims=1)
        diff = self.node("Sub", [x, mean])
        var = self.node("ReduceMean", [self.node("Pow", [diff, self.f32("two", 2.0)])], axes=[-1], keepdims=1)
        std = self.node("Sqrt", [self.node("Add", [var, self.f32("eps", 1e-5)])])
        y = self.node("Div", [diff, std])
        gamma = self.f32("ln_gamma", 1.0 + 0.1 * self.rng.standard_normal(d))
        beta = self.f32("ln_beta", 0.05 * self.rng.standard_normal(d))
        return self.node("Add", [self.node("Mul", [y, gamma]), beta])

    def linear(self, x: str, din: int, dout: int, gain: float = 1.0) -> str:
        """nn.Linear on a 3-D activation as PyTorch exports it: MatMul by W^T, Add bias."""
        w = self.const("lin_w", self.weight((din, dout), din, gain))
        return self.node("Add", [self.node("MatMul", [x, w]), self.const("lin_b", self.bias(dout))])

    def gelu(self, x: str) -> str:
        """x * 0.5 * (1 + erf(x / sqrt(2))), PyTorch's export of nn.GELU() before opset 20."""
        e = self.node("Erf", [self.node("Div", [x, self.f32("sqrt2", math.sqrt(2.0))])])
        return self.node("Mul", [self.node("Mul", [x, self.node("Add", [e, self.f32("one", 1.0)])]),
                                 self.f32("half", 0.5)])

    def finish(self, name: str, opset: int, x_shape: list[int], outputs: dict[str, str]) -> onnx.ModelProto:
        """The model with input ``input`` and the tensors `outputs` (public name -> tensor) as its outputs, their
        shapes from ONNX shape inference."""
        self.rename({t: pub for pub, t in outputs.items()})
        self.input(INPUT, np.float32, x_shape)
        return self.build(name, {p: np.float32 for p in outputs}, opset=opset,
                          producer="vkinfer.testing.field_onnx", infer_shapes=True)


# torchvision's MobileNetV3-small: (kernel, expanded channels, output channels, SE, activation, stride)
MOBILENET_V3_SMALL = [(3, 16, 16, True, "RE", 2), (3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1),
                      (5, 96, 40, True, "HS", 2), (5, 240, 40, True, "HS", 1), (5, 240, 40, True, "HS", 1),
                      (5, 120, 48, True, "HS", 1), (5, 144, 48, True, "HS", 1), (5, 288, 96, True, "HS", 2),
                      (5, 576, 96, True, "HS", 1), (5, 576, 96, True, "HS", 1)]


def mobilenet_v3_small(width: float = 0.5, size: int = 96, num_classes: int = 10, seed: int = 0, *,
                       hswish: Literal["op", "mul"] = "op") -> onnx.ModelProto:
    """MobileNetV3-small as torchvision builds it (BN folded, dropout gone), opset 14, input (1, 3, size, size).

    Every channel count is torchvision's times `width` (`_make_divisible` to 8; width 1.0, size 224,
    num_classes 1000 is the published network), the classifier's hidden layer 1024 * width. Hard-swish is the
    HardSwish op (`hswish="op"`, PyTorch's export) or x * HardSigmoid(x) (`"mul"`); the SE gate is HardSigmoid
    with alpha 1/6 (torch.nn.Hardsigmoid)."""
    g = _Net(seed)
    cin = _divisible(16 * width)
    x = g.hardswish(g.conv(INPUT, 3, cin, 3, stride=2), hswish)
    for k, exp, out, use_se, act, stride in MOBILENET_V3_SMALL:
        exp, out = _divisible(exp * width), _divisible(out * width)
        x = g.bneck(x, cin, k, exp, out, use_se, act, stride, hswish=hswish, se_alpha=1.0 / 6.0)
        cin = out
    last = 6 * cin
    x = g.hardswish(g.conv(x, cin, last, 1), hswish)
    hidden = _divisible(1024 * width)
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])], axis=1)
    x = g.hardswish(g.node("Gemm", [x, g.const("fc_w", g.weight((hidden, last), last)),
                                    g.const("fc_b", g.bias(hidden))], transB=1), hswish)
    y = g.node("Gemm", [x, g.const("fc_w", g.weight((num_classes, hidden), hidden, 1.0)),
                        g.const("fc_b", g.bias(num_classes))], transB=1)
    return g.finish("mobilenet_v3_small", 14, [1, 3, size, size], {"output": y})


def _yolo_conv(g: _Net, x: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
    """Ultralytics' Conv after fuse(): Conv (BN folded into weights and bias) + SiLU."""
    return g.silu(g.conv(x, cin, cout, k, stride=stride))


def _c2f(g: _Net, x: str, cin: int, cout: int, n: int, shortcut: bool) -> str:
    """C2f: 1x1 Conv to 2c, Split in two, n Bottlenecks (two 3x3 Convs, + input if shortcut) each on the
    previous piece, Concat of all pieces, 1x1 Conv."""
    c = cout // 2
    y = g.nodes_out("Split", [_yolo_conv(g, x, cin, 2 * c, 1), g.i64("split", [c, c])], 2, axis=1)
    for _ in range(n):
        b = _yolo_conv(g, _yolo_conv(g, y[-1], c, c, 3), c, c, 3)
        y.append(g.add(y[-1], b) if shortcut else b)
    return _yolo_conv(g, g.node("Concat", y, axis=1), (2 + n) * c, cout, 1)


def _sppf(g: _Net, x: str, cin: int, cout: int) -> str:
    c = cin // 2
    x = _yolo_conv(g, x, cin, c, 1)
    ys = [x]
    for _ in range(3):
        ys.append(g.node("MaxPool", [ys[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]))
    return _yolo_conv(g, g.node("Concat", ys, axis=1), 4 * c, cout, 1)


def yolov8n(size: int = 160, width: float = 0.125, num_classes: int = 8, seed: int = 0, *,
            reg_max: int = 16) -> onnx.ModelProto:
    """A YOLOv8 detector as Ultralytics exports it (fused Conv + BN, opset 17), input (1, 3, size, size), output
    ``output`` (1, 4 + num_classes, anchors): boxes (cx, cy, w, h) in pixels, class probabilities.

    Channels are YOLOv8's (64, 128, 256, 512, 1024) times `width` and C2f depths YOLOv8n's (1, 2, 2, 1 in the
    backbone, 1 in the neck): width 0.25, num_classes 80, size 640 is YOLOv8n itself; the default, width 0.125 at
    160x160, keeps the topology (three levels, strides 8/16/32, 525 anchors) at about 1/60 of its MACs."""
    if size % 32:
        raise ValueError(f"size must be a multiple of 32, not {size}")
    g = _Net(seed)
    c1, c2, c3, c4, c5 = (max(8, int(c * width)) for c in (64, 128, 256, 512, 1024))
    x = _yolo_conv(g, INPUT, 3, c1, 3, 2)
    x = _yolo_conv(g, x, c1, c2, 3, 2)
    x = _c2f(g, x, c2, c2, 1, True)
    x = _yolo_conv(g, x, c2, c3, 3, 2)
    p3 = x = _c2f(g, x, c3, c3, 2, True)
    x = _yolo_conv(g, x, c3, c4, 3, 2)
    p4 = x = _c2f(g, x, c4, c4, 2, True)
    x = _yolo_conv(g, x, c4, c5, 3, 2)
    x = _c2f(g, x, c5, c5, 1, True)
    p5 = _sppf(g, x, c5, c5)
    # neck: top-down, then bottom-up
    n4 = _c2f(g, g.node("Concat", [g.upsample(p5), p4], axis=1), c5 + c4, c4, 1, False)
    n3 = _c2f(g, g.node("Concat", [g.upsample(n4), p3], axis=1), c4 + c3, c3, 1, False)
    m4 = _c2f(g, g.node("Concat", [_yolo_conv(g, n3, c3, c3, 3, 2), n4], axis=1), c3 + c4, c4, 1, False)
    m5 = _c2f(g, g.node("Concat", [_yolo_conv(g, m4, c4, c4, 3, 2), p5], axis=1), c4 + c5, c5, 1, False)
    # Detect
    no = 4 * reg_max + num_classes
    cb, cc = max(16, c3 // 4, 4 * reg_max), max(c3, min(num_classes, 100))
    levels, anchors, strides = [], [], []
    for feat, ch, stride in ((n3, c3, 8), (m4, c4, 16), (m5, c5, 32)):
        b = _yolo_conv(g, _yolo_conv(g, feat, ch, cb, 3), cb, cb, 3)
        b = g.conv(b, cb, 4 * reg_max, 1, gain=1.0)
        c = _yolo_conv(g, _yolo_conv(g, feat, ch, cc, 3), cc, cc, 3)
        c = g.conv(c, cc, num_classes, 1, gain=1.0)
        levels.append(g.node("Reshape", [g.node("Concat", [b, c], axis=1), g.i64("shape", [1, no, -1])]))
        h = size // stride
        sy, sx = np.meshgrid(np.arange(h) + 0.5, np.arange(h) + 0.5, indexing="ij")
        anchors.append(np.stack([sx.ravel(), sy.ravel()]))
        strides.append(np.full(h * h, stride))
    a = sum(s.size for s in strides)
    x = g.node("Concat", levels, axis=2)
    box, cls = g.nodes_out("Split", [x, g.i64("split", [4 * reg_max, num_classes])], 2, axis=1)
    # DFL: (1, 4*16, A) -> (1, 4, 16, A) -> (1, 16, 4, A) -> softmax over the 16 bins -> expectation by a 1x1 conv
    d = g.node("Transpose", [g.node("Reshape", [box, g.i64("shape", [1, 4, reg_max, a])])], perm=[0, 2, 1, 3])
    d = g.node("Softmax", [d], axis=1)
    dfl_w = g.const("dfl_w", np.arange(reg_max, dtype=np.float32).reshape(1, reg_max, 1, 1))
    d = g.node("Reshape", [g.node("Conv", [d, dfl_w], kernel_shape=[1, 1]), g.i64("shape", [1, 4, a])])
    # dist2bbox (xywh) times the strides
    lt, rb = g.nodes_out("Split", [d, g.i64("split", [2, 2])], 2, axis=1)
    anchor = g.f32("anchors", np.concatenate(anchors, axis=1)[None])
    x1y1, x2y2 = g.node("Sub", [anchor, lt]), g.node("Add", [anchor, rb])
    cxy = g.node("Div", [g.add(x1y1, x2y2), g.f32("two", 2.0)])
    wh = g.node("Sub", [x2y2, x1y1])
    dbox = g.node("Mul", [g.node("Concat", [cxy, wh], axis=1), g.f32("strides", np.concatenate(strides)[None])])
    y = g.node("Concat", [dbox, g.node("Sigmoid", [cls])], axis=1)
    return g.finish("yolov8n", 17, [1, 3, size, size], {"output": y})


# PaddleOCR's MobileNetV3 blocks for the DB backbone at scale 0.5 (the "small" text detector's settings, trimmed):
# (kernel, expanded, output, SE, activation, stride); the feature map after each stage is one FPN input.
DB_STAGES = [[(3, 16, 16, True, "RE", 2)],
             [(3, 72, 24, False, "RE", 2), (3, 88, 24, False, "RE", 1)],
             [(5, 96, 40, True, "HS", 2), (5, 120, 40, True, "HS", 1)],
             [(5, 144, 48, True, "HS", 2)]]


def db_text_detector(height: int = 64, width: int = 128, inner: int = 32, seed: int = 0) -> onnx.ModelProto:
    """A DB text detector as PaddleOCR exports it through paddle2onnx (opset 13), input (1, 3, height, width),
    output ``output`` (1, 1, height, width): the shrink map's probabilities.

    Backbone: stem 3x3/2 conv + hard-swish (x * HardSigmoid(x), PaddlePaddle's form), then `DB_STAGES` of
    MobileNetV3 blocks (SE gate HardSigmoid slope 0.2, offset 0.5, PaddlePaddle's hardsigmoid) giving strides 4,
    8, 16, 32. DBFPN with `inner` channels: bias-free 1x1 laterals, top-down nearest Resize x2 + Add, 3x3
    smoothing convs to inner/4, Resize x8/x4/x2 to stride 4, Concat. DB head: 3x3 Conv (bias-free) ->
    BatchNormalization -> Relu -> ConvTranspose 2x2/2 -> BatchNormalization -> Relu -> ConvTranspose 2x2/2 ->
    Sigmoid."""
    if height % 32 or width % 32:
        raise ValueError(f"height and width must be multiples of 32, not {height}x{width}")
    g = _Net(seed)
    cin = 8
    x = g.hardswish(g.conv(INPUT, 3, cin, 3, stride=2), "mul")
    feats = []
    for stage in DB_STAGES:
        for k, exp, out, use_se, act, stride in stage:
            x = g.bneck(x, cin, k, exp, out, use_se, act, stride, hswish="mul", se_alpha=0.2)
            cin = out
        feats.append((x, cin))
    lat = [g.conv_nb(f, c, inner, 1, bias=False, gain=1.0) for f, c in feats]
    out = [lat[3]]
    for i in (2, 1, 0):
        out.insert(0, g.add(lat[i], g.upsample(out[0])))
    q = inner // 4
    ps = [g.conv_nb(o, inner, q, 3, bias=False, gain=1.0) for o in out]
    fuse = g.node("Concat", [g.upsample(ps[3], 8), g.upsample(ps[2], 4), g.upsample(ps[1], 2), ps[0]], axis=1)
    h = g.relu(g.bn(g.conv_nb(fuse, inner, q, 3, bias=False), q))
    for cout, last in ((q, False), (1, True)):
        w = g.const("w", g.weight((q, cout, 2, 2), q))  # stride 2, kernel 2: each output sums q inputs
        h = g.node("ConvTranspose", [h, w, g.const("b", g.bias(cout))], kernel_shape=[2, 2], strides=[2, 2])
        h = g.node("Sigmoid", [h]) if last else g.relu(g.bn(h, cout))
    return g.finish("db_text_detector", 13, [1, 3, height, width], {"output": h})


def crnn_attention(height: int = 32, width: int = 128, d: int = 64, num_classes: int = 40, seed: int = 0,
                   ) -> onnx.ModelProto:
    """A CRNN-style text recognizer with one self-attention block, as PyTorch exports it at opset 13, input
    (1, 3, height, width), output ``output`` (1, width / 4, num_classes) logits per time step.

    Backbone: 3x3 Conv + Relu + MaxPool 2x2 (twice), then 3x3 Conv + Relu + MaxPool (2, 1) until the height is 1
    (`d` channels), Reshape to (1, d, T) and Transpose to (1, T, d). Block (pre-norm, one head): LN, Q/K/V
    projections, MatMul(Q, Transpose(K)) / sqrt(d), Softmax(-1), MatMul(attn, V), output projection, + input;
    LN, Linear to 2d, GELU (Erf), Linear to d, + input. LN, Linear to `num_classes`. Each LN is written out as
    ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add (PyTorch before opset 17), each Linear as MatMul + Add."""
    if height & (height - 1) or height < 4 or width % 4:
        raise ValueError(f"height must be a power of two >= 4 and width a multiple of 4, not {height}x{width}")
    g = _Net(seed)
    x, c, h = INPUT, 3, height
    for cout in (16, 32):
        x = g.node("MaxPool", [g.relu(g.conv(x, c, cout, 3))], kernel_shape=[2, 2], strides=[2, 2])
        c, h = cout, h // 2
    while h > 1:
        cout = d if h == 2 else min(d, 2 * c)
        x = g.node("MaxPool", [g.relu(g.conv(x, c, cout, 3))], kernel_shape=[2, 1], strides=[2, 1])
        c, h = cout, h // 2
    t = width // 4
    x = g.node("Transpose", [g.node("Reshape", [x, g.i64("shape", [1, d, t])])], perm=[0, 2, 1])
    hn = g.layer_norm(x, d)
    q, k, v = (g.linear(hn, d, d) for _ in range(3))
    s = g.node("MatMul", [q, g.node("Transpose", [k], perm=[0, 2, 1])])
    a = g.node("Softmax", [g.node("Div", [s, g.f32("sqrt_d", math.sqrt(d))])], axis=-1)
    x = g.add(x, g.linear(g.node("MatMul", [a, v]), d, d))
    m = g.linear(g.gelu(g.linear(g.layer_norm(x, d), d, 2 * d)), 2 * d, d)
    x = g.add(x, m)
    y = g.linear(g.layer_norm(x, d), d, num_classes)
    return g.finish("crnn_attention", 13, [1, 3, height, width], {"output": y})


BUILDERS: dict[str, Callable[..., onnx.ModelProto]] = {
    "mobilenet_v3_small": mobilenet_v3_small,
    "yolov8n": yolov8n,
    "db_text_detector": db_text_detector,
    "crnn_attention": crnn_attention,
}


def preprocess(model: onnx.ModelProto, *, skip_optimization: bool = False) -> onnx.ModelProto:
    """onnxruntime.quantization.quant_pre_process: ORT's basic optimizations (Conv / ConvTranspose +
    BatchNormalization folding, HardSwish -> x * HardSigmoid(x), MatMul + Add -> Gemm, constant folding), then
    ONNX shape inference; IR version stamped down as zoo's. `skip_optimization` leaves the graph as exported (what
    ORT's error message tells a user to do when its optimization fails): BatchNormalization and HardSwish stay."""
    from onnxruntime.quantization import quant_pre_process

    with tempfile.TemporaryDirectory(prefix="vkinfer_prep_") as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "prep.onnx")
        onnx.save(model, src)  # a path: given a ModelProto over 1 KiB of weights, ORT 1.31 fails on external data
        # Symbolic shape inference (it needs sympy, not a vkinfer dependency) adds nothing to ONNX's own on these
        # static-shaped graphs; ORT's error message tells a user without sympy to skip it the same way.
        quant_pre_process(src, dst, skip_optimization=skip_optimization, skip_symbolic_shape=True)
        m = onnx.load(dst)
    zoo._stamp_ir(m)
    return m


def quantize(model: onnx.ModelProto, *, fmt: Literal["qoperator", "qdq"] = "qdq", per_channel: bool = True,
             activation_type: Literal["uint8", "int8"] = "uint8", weight_type: Literal["int8", "uint8"] = "int8",
             reduce_range: bool = False, seed: int = 0, num_calib: int = 4,
             skip_optimization: bool = False) -> onnx.ModelProto:
    """`preprocess`, then `zoo.quantize` with these settings (MinMax calibration on `num_calib` seeded
    standard-normal inputs, symmetric weights, asymmetric activations)."""
    return zoo.quantize(preprocess(model, skip_optimization=skip_optimization), fmt=fmt, per_channel=per_channel,
                        activation_type=activation_type, weight_type=weight_type, reduce_range=reduce_range,
                        seed=seed, num_calib=num_calib)


def _shapes(model: onnx.ModelProto) -> dict[str, list[int]]:
    m = onnx.shape_inference.infer_shapes(model)
    out = {}
    for vi in [*m.graph.input, *m.graph.value_info, *m.graph.output]:
        out[vi.name] = [dd.dim_value for dd in vi.type.tensor_type.shape.dim]
    for t in m.graph.initializer:
        out[t.name] = list(t.dims)
    return out


def macs(model: onnx.ModelProto) -> int:
    """Multiply-accumulates of the Conv, ConvTranspose, MatMul and Gemm nodes (from ONNX shape inference)."""
    shapes = _shapes(model)
    total = 0
    for n in model.graph.node:
        if n.op_type == "Conv":
            w = shapes[n.input[1]]
            total += math.prod(shapes[n.output[0]]) * math.prod(w[1:])
        elif n.op_type == "ConvTranspose":
            w = shapes[n.input[1]]
            total += math.prod(shapes[n.input[0]]) * math.prod(w[1:])
        elif n.op_type in ("MatMul", "Gemm"):
            a, y = shapes[n.input[0]], shapes[n.output[0]]
            k = a[0] if n.op_type == "Gemm" and any(at.name == "transA" and at.i for at in n.attribute) else a[-1]
            total += math.prod(y) * k
    return total


def describe(model: onnx.ModelProto) -> dict:
    """Node count, op type counts, MACs and parameter count of a float model."""
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    return {"nodes": len(model.graph.node), "ops": dict(sorted(Counter(n.op_type for n in model.graph.node).items())),
            "macs": macs(model), "params": params,
            "input": [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]}


def _typed_outputs(model: onnx.ModelProto) -> dict[str, onnx.ValueInfoProto]:
    """Every node output's type and shape as ONNX Runtime infers them (it knows the com.microsoft ops, which
    onnx's shape inference does not): one unoptimized session with all node outputs as graph outputs."""
    import onnxruntime as ort

    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    names = [o for n in model.graph.node for o in n.output if o]
    have = {o.name for o in probe.graph.output}
    probe.graph.output.extend(helper.make_empty_tensor_value_info(o) for o in names if o not in have)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    sess = ort.InferenceSession(probe.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    types = {"tensor(uint8)": TensorProto.UINT8, "tensor(int8)": TensorProto.INT8, "tensor(float)": TensorProto.FLOAT,
             "tensor(int64)": TensorProto.INT64, "tensor(int32)": TensorProto.INT32}
    return {o.name: helper.make_tensor_value_info(o.name, types[o.type], o.shape) for o in sess.get_outputs()
            if o.type in types}


def quantized_tensors(model: onnx.ModelProto) -> list[str]:
    """Every node output of a quantized model whose type is uint8 or int8 (QuantizeLinear outputs, QLinear*
    outputs, 8-bit MaxPool / Reshape / Split / Concat / Resize ... outputs), in node order."""
    infos = _typed_outputs(model)
    eight = (TensorProto.UINT8, TensorProto.INT8)
    return [o for n in model.graph.node for o in n.output
            if o in infos and infos[o].type.tensor_type.elem_type in eight]


def with_outputs(model: onnx.ModelProto, names: list[str] | None = None) -> onnx.ModelProto:
    """A copy of `model` with the tensors `names` (default: `quantized_tensors(model)`) added to its outputs,
    typed as ORT infers them."""
    infos = _typed_outputs(model)
    if names is None:
        eight = (TensorProto.UINT8, TensorProto.INT8)
        names = [o for n in model.graph.node for o in n.output
                 if o in infos and infos[o].type.tensor_type.elem_type in eight]
    have = {o.name for o in model.graph.output}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    out.graph.output.extend(infos[n] for n in names if n not in have)
    return out


def float_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded standard-normal inputs (zoo.random_inputs): the calibration's distribution."""
    return zoo.random_inputs(model, seed)


__all__ = ["BUILDERS", "mobilenet_v3_small", "yolov8n", "db_text_detector", "crnn_attention", "preprocess",
           "quantize", "macs", "describe", "quantized_tensors", "with_outputs", "float_inputs",
           "MOBILENET_V3_SMALL", "DB_STAGES"]
