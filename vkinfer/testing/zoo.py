"""Small float ONNX CNNs with seeded random weights, their static 8-bit quantization, and an ORT runner.

Every builder writes its graph with the one graph builder (onnx_builder.GraphBuilder over `onnx.helper`; no
training framework): NCHW float32 input named ``input`` (batch 1 unless told), one output named ``output``,
opset 13, IR version 8. Weights are He-initialised from a seeded numpy generator and biases are small, so
activations stay in a sane range and the calibrated quantization parameters are meaningful. Batch norm is taken
as already folded into each Conv's weights and bias.

    from vkinfer.testing import zoo
    f = zoo.mobilenet_v2(width=0.25, size=32, num_classes=10)
    q = zoo.quantize(f, fmt="qoperator", per_channel=True)
    (y,) = zoo.ort_run(q, {"input": x})
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from typing import Literal

import numpy as np
import onnx
from onnx import helper

from .onnx_builder import IR_VERSION, OPSET, GraphBuilder

INPUT = "input"
OUTPUT = "output"


class _Graph(GraphBuilder):
    """The float CNNs' layers over the one graph builder (onnx_builder.GraphBuilder): He-initialised weights from
    its seeded generator; every helper returns the name of the tensor it produced."""

    def weight(self, shape: tuple[int, ...], fan_in: int, gain: float = 2.0) -> np.ndarray:
        return (self.rng.standard_normal(shape) * math.sqrt(gain / fan_in)).astype(np.float32)

    def bias(self, n: int) -> np.ndarray:
        return (self.rng.standard_normal(n) * 0.05).astype(np.float32)

    def conv(self, x: str, cin: int, cout: int, k: int, *, stride: int = 1, group: int = 1, dilation: int = 1,
             gain: float = 2.0) -> str:
        fan_in = cin // group * k * k
        w = self.const("w", self.weight((cout, cin // group, k, k), fan_in, gain))
        b = self.const("b", self.bias(cout))
        p = dilation * (k - 1) // 2
        return self.node("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p],
                         dilations=[dilation, dilation], group=group)

    def relu(self, x: str) -> str:
        return self.node("Relu", [x])

    def relu6(self, x: str) -> str:
        lo = self.const("clip_min", np.array(0.0, np.float32))
        hi = self.const("clip_max", np.array(6.0, np.float32))
        return self.node("Clip", [x, lo, hi])

    def add(self, a: str, b: str) -> str:
        return self.node("Add", [a, b])

    def head(self, x: str, c: int, num_classes: int) -> str:
        """GlobalAveragePool, Flatten, Gemm (transB=1) to the classes."""
        x = self.node("Flatten", [self.node("GlobalAveragePool", [x])], axis=1)
        w = self.const("fc_w", self.weight((num_classes, c), c, 1.0))
        b = self.const("fc_b", self.bias(num_classes))
        return self.node("Gemm", [x, w, b], transB=1)

    def shuffle(self, x: str, c: int, groups: int, hw: int) -> str:
        """Channel shuffle: Reshape (1,g,c/g,h,w), Transpose (0,2,1,3,4), Reshape (1,c,h,w)."""
        s5 = self.const("shape5", np.array([1, groups, c // groups, hw, hw], np.int64))
        s4 = self.const("shape4", np.array([1, c, hw, hw], np.int64))
        x = self.node("Reshape", [x, s5])
        x = self.node("Transpose", [x], perm=[0, 2, 1, 3, 4])
        return self.node("Reshape", [x, s4])

    def model(self, name: str, x_shape: list[int], y: str, y_shape: list[int]) -> onnx.ModelProto:
        """The float model: input ``input`` of `x_shape`, output ``output`` (tensor `y`, written by the last node)
        of `y_shape`, opset 13, checked and shape-inferred."""
        assert self.nodes[-1].output[0] == y
        self.nodes[-1].output[0] = OUTPUT
        self.input(INPUT, np.float32, x_shape)
        return self.build(name, {OUTPUT: (np.float32, y_shape)}, opset=OPSET, producer="vkinfer.testing.zoo",
                          infer_shapes=True)


# MobileNetV2's inverted-residual stages: (expansion t, output channels c, repeats n, first stride s).
MOBILENET_V2_STAGES = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)]


def _divisible(v: float, divisor: int = 8) -> int:
    """torchvision's _make_divisible: round to a multiple of divisor, never below 90% of v."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def _out(size: int, stride: int) -> int:
    return (size + stride - 1) // stride  # 3x3 pad 1 (or 1x1 pad 0) convs: ceil(size / stride)


def mobilenet_v2(width: float = 1.0, size: int = 224, num_classes: int = 1000, seed: int = 0, *,
                 batch: int = 1) -> onnx.ModelProto:
    """MobileNetV2 (torchvision layout, BN folded into Conv bias, ReLU6 as Clip(0, 6), no dropout).

    Stem 3x3/s2 conv to 32*width, 17 inverted residual blocks (expand 1x1 + ReLU6, depthwise 3x3 + ReLU6,
    linear project 1x1, residual Add where stride 1 and channels match), 1x1 conv to 1280*max(1, width) + ReLU6,
    GlobalAveragePool, Flatten, Gemm. Small `width` (0.25) and `size` (32) give a fast test model with the
    same topology."""
    g = _Graph(seed)
    settings = MOBILENET_V2_STAGES
    cin = _divisible(32 * width)
    last = _divisible(1280 * max(1.0, width))
    x = g.relu6(g.conv(INPUT, 3, cin, 3, stride=2))
    for t, c, n, s in settings:
        cout = _divisible(c * width)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = int(round(cin * t))
            y = x
            if t != 1:
                y = g.relu6(g.conv(y, cin, hidden, 1))
            y = g.relu6(g.conv(y, hidden, hidden, 3, stride=stride, group=hidden))
            y = g.conv(y, hidden, cout, 1, gain=1.0)
            x = g.add(x, y) if stride == 1 and cin == cout else y
            cin = cout
    x = g.relu6(g.conv(x, cin, last, 1))
    y = g.head(x, last, num_classes)
    return g.model("mobilenet_v2", [batch, 3, size, size], y, [batch, num_classes])


def mobilenet_v1(width: float = 0.25, size: int = 32, num_classes: int = 10, seed: int = 0, *,
                 batch: int = 1) -> onnx.ModelProto:
    """MobileNetV1: stem 3x3/s2 conv, 13 depthwise-separable pairs (depthwise 3x3 + ReLU, pointwise 1x1 + ReLU),
    GlobalAveragePool, Flatten, Gemm. Channels are the paper's times `width` (at least 8)."""
    g = _Graph(seed)
    pairs = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    cin = max(8, int(32 * width))
    x = g.relu(g.conv(INPUT, 3, cin, 3, stride=2))
    for c, s in pairs:
        cout = max(8, int(c * width))
        x = g.relu(g.conv(x, cin, cin, 3, stride=s, group=cin))
        x = g.relu(g.conv(x, cin, cout, 1))
        cin = cout
    y = g.head(x, cin, num_classes)
    return g.model("mobilenet_v1", [batch, 3, size, size], y, [batch, num_classes])


def shufflenet_like(groups: int = 2, size: int = 32, num_classes: int = 10, seed: int = 0, *,
                    batch: int = 1) -> onnx.ModelProto:
    """ShuffleNet(v1)-style units: grouped 1x1 conv + ReLU, channel shuffle (Reshape-Transpose-Reshape),
    depthwise 3x3, grouped 1x1 conv; stride 1 units add the input (Add + ReLU), stride 2 units concatenate a
    depthwise 3x3/s2 shortcut (Concat + ReLU). Stem 3x3/s2 conv to 24, then GlobalAveragePool, Flatten, Gemm.
    `batch` must be 1 (the shuffle's Reshape shapes are constant)."""
    if batch != 1:
        raise ValueError("shufflenet_like is built for batch 1")
    g = _Graph(seed)
    cin = 24
    x = g.relu(g.conv(INPUT, 3, cin, 3, stride=2))
    hw = _out(size, 2)
    for cout, repeats in [(48, 2), (96, 2)]:
        for i in range(repeats):
            stride = 2 if i == 0 else 1
            branch_out = cout - cin if stride == 2 else cout
            mid = cout // 4
            y = g.relu(g.conv(x, cin, mid, 1, group=groups))
            y = g.shuffle(y, mid, groups, hw)
            y = g.conv(y, mid, mid, 3, stride=stride, group=mid, gain=1.0)
            y = g.conv(y, mid, branch_out, 1, group=groups, gain=1.0)
            if stride == 1:
                x = g.relu(g.add(x, y))
            else:
                short = g.conv(x, cin, cin, 3, stride=2, group=cin, gain=1.0)
                x = g.relu(g.node("Concat", [short, y], axis=1))
            cin, hw = cout, _out(hw, stride)
    y = g.head(x, cin, num_classes)
    return g.model("shufflenet_like", [batch, 3, size, size], y, [batch, num_classes])


def resnext_like(cardinality: int = 4, size: int = 32, num_classes: int = 10, seed: int = 0, *,
                 batch: int = 1) -> onnx.ModelProto:
    """ResNeXt-style bottlenecks: 1x1 reduce + ReLU, grouped 3x3 (groups = `cardinality`) + ReLU, 1x1 expand,
    residual Add (a 1x1 strided projection where the shape changes) + ReLU. Stem 3x3 conv to 32, three blocks
    (64, 128/s2, 128), GlobalAveragePool, Flatten, Gemm."""
    g = _Graph(seed)
    cin = 32
    x = g.relu(g.conv(INPUT, 3, cin, 3))
    for cout, stride in [(64, 1), (128, 2), (128, 1)]:
        mid = cout // 2
        y = g.relu(g.conv(x, cin, mid, 1))
        y = g.relu(g.conv(y, mid, mid, 3, stride=stride, group=cardinality))
        y = g.conv(y, mid, cout, 1, gain=1.0)
        short = x if stride == 1 and cin == cout else g.conv(x, cin, cout, 1, stride=stride, gain=1.0)
        x = g.relu(g.add(short, y))
        cin = cout
    y = g.head(x, cin, num_classes)
    return g.model("resnext_like", [batch, 3, size, size], y, [batch, num_classes])


def dilated_net(channels: int = 16, size: int = 32, num_classes: int = 4, seed: int = 0, *,
                batch: int = 1) -> onnx.ModelProto:
    """Dense-prediction net with dilated 3x3 convs: stem 3x3 conv + ReLU, 3x3 convs with dilation 2, 4, 2
    (+ ReLU, a residual Add around the dilation-4 one), 1x1 conv to `num_classes`: output (N, classes, size, size)."""
    g = _Graph(seed)
    c = channels
    x = g.relu(g.conv(INPUT, 3, c, 3))
    x = g.relu(g.conv(x, c, c, 3, dilation=2))
    x = g.relu(g.add(x, g.conv(x, c, c, 3, dilation=4, gain=1.0)))
    x = g.relu(g.conv(x, c, c, 3, dilation=2))
    y = g.conv(x, c, num_classes, 1, gain=1.0)
    return g.model("dilated_net", [batch, 3, size, size], y, [batch, num_classes, size, size])


def mlp(in_features: int = 64, hidden: int = 128, num_classes: int = 10, seed: int = 0, *,
        batch: int = 4) -> onnx.ModelProto:
    """MLP on a 2-D (batch, in_features) input: MatMul + Add bias + Relu, Gemm (transB=1) + Relu, Gemm."""
    g = _Graph(seed)
    w1 = g.const("w", g.weight((in_features, hidden), in_features))
    x = g.node("Add", [g.node("MatMul", [INPUT, w1]), g.const("b", g.bias(hidden))])
    x = g.relu(x)
    x = g.relu(g.node("Gemm", [x, g.const("w", g.weight((hidden, hidden), hidden)), g.const("b", g.bias(hidden))],
                      transB=1))
    y = g.node("Gemm", [x, g.const("w", g.weight((num_classes, hidden), hidden, 1.0)),
                        g.const("b", g.bias(num_classes))], transB=1)
    return g.model("mlp", [batch, in_features], y, [batch, num_classes])


BUILDERS = {
    "mobilenet_v2": mobilenet_v2,
    "mobilenet_v1": mobilenet_v1,
    "shufflenet_like": shufflenet_like,
    "resnext_like": resnext_like,
    "dilated_net": dilated_net,
    "mlp": mlp,
}


def random_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal float32 data for every graph input (static shapes only), from a seeded generator."""
    rng = np.random.default_rng(seed)
    inits = {t.name for t in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        if any(s <= 0 for s in shape):
            raise ValueError(f"input {vi.name!r} has a dynamic shape {shape}")
        out[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _stamp_ir(model: onnx.ModelProto) -> None:
    """IR 8 where the opsets allow it, else the lowest IR version the opsets need (ORT 1.31 loads up to 13)."""
    need = helper.find_min_ir_version_for(list(model.opset_import), ignore_unknown=True)
    model.ir_version = max(need, min(model.ir_version, IR_VERSION))


def quantize(model: onnx.ModelProto, *, fmt: Literal["qoperator", "qdq"] = "qoperator", per_channel: bool = False,
             activation_type: Literal["uint8", "int8"] = "uint8", weight_type: Literal["int8", "uint8"] = "int8",
             seed: int = 0, num_calib: int = 8, reduce_range: bool = False) -> onnx.ModelProto:
    """Static 8-bit quantization with onnxruntime.quantization.quantize_static (MinMax calibration on `num_calib`
    seeded standard-normal inputs, symmetric weights, asymmetric activations).

    fmt "qoperator" gives QLinearConv / QLinearMatMul / QGemm / com.microsoft QLinear* nodes, "qdq" keeps float
    ops between QuantizeLinear / DequantizeLinear pairs. `reduce_range` quantizes weights to 7 bits: ORT's u8 x s8
    kernels on x86 without VNNI (AVX2 vpmaddubsw) saturate pairs of products at int16, so full-range s8 weights
    (per-channel especially) make ORT's output differ from exact integer arithmetic; 7-bit weights cannot saturate.
    Returns the quantized model with its IR version stamped down to 8 (see `_stamp_ir`)."""
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    formats = {"qoperator": QuantFormat.QOperator, "qdq": QuantFormat.QDQ}
    types = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}
    if fmt not in formats:
        raise ValueError(f"fmt must be one of {sorted(formats)}, not {fmt!r}")
    if activation_type not in types or weight_type not in types:
        raise ValueError(f"activation_type and weight_type must be 'uint8' or 'int8', not {activation_type!r}, "
                         f"{weight_type!r}")

    class _Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it: Iterator[dict[str, np.ndarray]] = (random_inputs(model, seed * 1000 + i)
                                                         for i in range(num_calib))

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    with tempfile.TemporaryDirectory(prefix="vkinfer_quant_") as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "quant.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, _Reader(), quant_format=formats[fmt], per_channel=per_channel,
                        reduce_range=reduce_range, activation_type=types[activation_type],
                        weight_type=types[weight_type], calibration_providers=["CPUExecutionProvider"],
                        extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})
        q = onnx.load(dst)
    _stamp_ir(q)
    return q


def op_types(model: onnx.ModelProto) -> list[str]:
    """Sorted node op types, prefixed with their domain where it is not the default one ("com.microsoft.QGemm")."""
    return sorted({f"{n.domain}.{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type
                   for n in model.graph.node})


def ort_run(model: onnx.ModelProto, inputs: dict[str, np.ndarray], *, optimize: bool = True,
            config: Mapping[str, str] | None = None) -> list[np.ndarray]:
    """Run `model` in ONNX Runtime on the CPU with one thread and return every output.

    `optimize=False` disables ORT's graph optimizations, so each node runs as written (QDQ models then compute
    in float between DequantizeLinear and QuantizeLinear instead of being fused into integer kernels). `config`:
    session config entries, e.g. `{"session.qdqisint8allowed": "1"}`, which makes ORT on x86 fuse int8 QDQ
    tensors with several readers as it does on ARM (exact integer arithmetic, vkinfer's result; README)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                     else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    opts.log_severity_level = 3
    for key, value in (config or {}).items():
        opts.add_session_config_entry(key, value)
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


__all__ = ["BUILDERS", "mobilenet_v2", "mobilenet_v1", "shufflenet_like", "resnext_like", "dilated_net", "mlp",
           "quantize", "ort_run", "random_inputs", "op_types"]
