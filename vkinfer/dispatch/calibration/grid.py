"""Calibration's grid: the single-node graphs timed per op class, and which grids take them.

**Microbenchmarks.** Every op class (vkinfer/dispatch/costs.py) is timed over a grid of single-node graphs whose
shapes come from the models vkinfer is used on: MobileNetV2 1.0/224 and 0.35/224, the DS-CNN keyword spotter
(49x10 MFCC, 64 channels), the MobileNetV2 keyword spotter, MobileNetV1 0.25 visual wake words (96x96), ResNet-8
(CIFAR 32x32) and the zoo's small ONNX models (grouped and dilated convolutions, channel shuffles, MLP heads).
`GRID` lists them with the grids that take them: CPU quick 4-5 shapes per class (a small one, a large one and
ones between, enough for the 3-term fit), CPU full 11-15, Vulkan quick 4 (each new pipeline costs 50-100 ms on
lavapipe), Vulkan full 9-14, host quick 3-4. Each graph is compiled through the execution core
(vkinfer.compiler.plan.Plan) as a session's would be, so the lowering, kernel and edge conversions are the real ones.
Each `Shape` builds a fresh graph (`Shape.graph()`: the graph, its feed, the timed node's name); `grid(kind,
mode)` picks a device kind's shapes. Running and timing them: calibration/measure.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...model.graph import Graph, Node, TensorInfo

MODES = ("quick", "full")

# --- single-node graphs ---------------------------------------------------------------------------------------

Built = tuple[Graph, dict[str, np.ndarray], str]  # a graph, its feed, the name of the node to time

class _B:
    """Builds one small graph: constants, quantization parameters and nodes; the last node's output is "y"."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[Node] = []
        self.consts: dict[str, np.ndarray] = {}
        self.inputs: list[TensorInfo] = []
        self.feed: dict[str, np.ndarray] = {}
        self.k = 0

    def const(self, v) -> str:
        self.k += 1
        name = f"c{self.k}"
        self.consts[name] = np.asarray(v)
        return name

    def qp(self, dtype) -> list[str]:
        """A sane (scale, zero point) pair of an 8-bit activation type, as constant names."""
        dt = np.dtype(dtype)
        zp = 128 + int(self.rng.integers(-20, 21)) if dt == np.uint8 else int(self.rng.integers(-20, 21))
        return [self.const(np.float32(self.rng.uniform(0.02, 0.06))), self.const(dt.type(zp))]

    def input(self, shape, dtype) -> str:
        name = f"x{len(self.inputs)}"
        dt = np.dtype(dtype)
        if dt == np.float32:
            v = self.rng.standard_normal(shape).astype(np.float32)
        else:
            info = np.iinfo(dt)
            v = self.rng.integers(info.min, info.max, shape, endpoint=True).astype(dt)
        self.inputs.append(TensorInfo(name, tuple(shape), dt))
        self.feed[name] = v
        return name

    def node(self, op: str, ins: list[str], **attrs) -> str:
        out = f"t{len(self.nodes)}"
        self.nodes.append(Node(op, f"n{len(self.nodes)}_{op.split(':')[-1]}", ins, [out], attrs))
        return out

    def done(self, dtype, target: int = -1) -> Built:
        """The graph (its last node's output is "y", of `dtype`), its feed and the name of node `target`."""
        last = self.nodes[-1]
        last.outputs = ["y"]
        for n in self.nodes:
            n.attrs["_static"] = all(not i or i in self.consts for i in n.inputs[1:])
        g = Graph(self.nodes, self.inputs, [TensorInfo("y", None, np.dtype(dtype))], self.consts)
        return g, self.feed, self.nodes[target].name


# Weights: int8 in [-60, 60] (7-bit: the u8s8 kernels of every variant take them), or `wide`: uint8 over [0, 255]
# with zero point WIDE_ZP, as a uint8 TFLite model's per-tensor asymmetric weights, (w - zp) in [-100, 155],
# beyond every variant's u8s8 range: the int16 kernels (costs.path_keys).
WIDE_ZP = 100


def _weights(b: _B, shape: tuple[int, ...], wide: bool) -> tuple[np.ndarray, np.ndarray]:
    """(weights, per-output-channel zero points) of `shape` (output channels first)."""
    m = shape[0]
    if wide:
        w = b.rng.integers(0, 256, shape).astype(np.uint8)
        w.flat[0], w.flat[-1] = 0, 255  # the whole range, whatever the draw
        return w, np.full(m, WIDE_ZP, np.uint8)
    return b.rng.integers(-60, 61, shape).astype(np.int8), np.zeros(m, np.int8)


def _conv(b: _B, x: str, xq: list[str], c: int, m: int, k, stride: int, group: int, dil: int, pads, dt,
          wide: bool = False) -> str:
    kh, kw = (k, k) if isinstance(k, int) else k
    w, wz = _weights(b, (m, c // group, kh, kw), wide)
    ws = (b.rng.uniform(0.002, 0.006, m)).astype(np.float32)
    if pads is None:
        pads = [dil * (kh - 1) // 2, dil * (kw - 1) // 2] * 2
    bias = b.rng.integers(-2000, 2000, m).astype(np.int32)
    return b.node("QLinearConv", [x, *xq, b.const(w), b.const(ws), b.const(wz), *b.qp(dt), b.const(bias)],
                  kernel_shape=[kh, kw], strides=[stride, stride], pads=list(pads), group=group,
                  dilations=[dil, dil])


def g_conv(c: int, hw: tuple[int, int], m: int, k=1, stride: int = 1, group: int = 1, dil: int = 1, pads=None,
           dtype=np.uint8, seed: int = 0, wide: bool = False) -> Built:
    """One QLinearConv on a (1, c, h, w) input: 1x1 (gemm/gemv), kxk, grouped, dilated or depthwise; `wide`:
    uint8 weights beyond the u8s8 range (_weights)."""
    b = _B(seed)
    x = b.input((1, c, *hw), dtype)
    _conv(b, x, b.qp(dtype), c, m, k, stride, group, dil, pads, dtype, wide)
    return b.done(dtype)


def g_qgemm(k: int, m: int, rows: int = 1, dtype=np.uint8, seed: int = 0, wide: bool = False) -> Built:
    """com.microsoft:QGemm (a fully connected layer): A (rows, k) times constant B (m, k) transposed; `wide`:
    uint8 weights beyond the u8s8 range (per tensor, as TFLite's)."""
    b = _B(seed)
    a = b.input((rows, k), dtype)
    w, wz = _weights(b, (m, k), wide)
    bias = b.rng.integers(-2000, 2000, m).astype(np.int32)
    b.node("com.microsoft:QGemm", [a, *b.qp(dtype), b.const(w), b.const(np.float32(0.004)), b.const(wz[0]),
                                   b.const(bias), *b.qp(dtype)], transB=1)
    return b.done(dtype)


def g_matmul(k: int, m: int, rows: int = 1, dtype=np.uint8, seed: int = 0) -> Built:
    """QLinearMatMul: A (rows, k) times constant B (k, m) (the zoo MLP's hidden layer)."""
    b = _B(seed)
    a = b.input((rows, k), dtype)
    w = b.rng.integers(-60, 61, (k, m)).astype(np.int8)
    b.node("QLinearMatMul", [a, *b.qp(dtype), b.const(w), b.const(np.float32(0.004)), b.const(np.int8(0)),
                             *b.qp(dtype)])
    return b.done(dtype)


def g_binary(op: str, c: int, hw: tuple[int, int], dtype=np.uint8, seed: int = 0) -> Built:
    """com.microsoft:QLinearAdd or vkinfer:TFLiteAdd of two equal-shape activations (a residual add)."""
    b = _B(seed)
    x0, x1 = b.input((1, c, *hw), dtype), b.input((1, c, *hw), dtype)
    b.node(op, [x0, *b.qp(dtype), x1, *b.qp(dtype), *b.qp(dtype)])
    return b.done(dtype)


def g_unary(op: str, c: int, hw: tuple[int, int], dtype=np.uint8, seed: int = 0) -> Built:
    """A table op: com.microsoft:QLinearLeakyRelu or QLinearSigmoid."""
    b = _B(seed)
    x = b.input((1, c, *hw), dtype)
    attrs = {"alpha": 0.1} if op.endswith("LeakyRelu") else {}
    b.node(op, [x, *b.qp(dtype), *b.qp(dtype)], **attrs)
    return b.done(dtype)


def g_quantize(shape: tuple[int, ...], seed: int = 0) -> Built:
    """QuantizeLinear of a float tensor (a model's input) to uint8."""
    b = _B(seed)
    x = b.input(shape, np.float32)
    b.node("QuantizeLinear", [x, *b.qp(np.uint8)])
    return b.done(np.uint8)


def g_dequantize(shape: tuple[int, ...], seed: int = 0) -> Built:
    """DequantizeLinear of a uint8 tensor (a model's logits) to float."""
    b = _B(seed)
    x = b.input(shape, np.uint8)
    b.node("DequantizeLinear", [x, *b.qp(np.uint8)])
    return b.done(np.float32)


def g_softmax(rows: int, cols: int, seed: int = 0) -> Built:
    """vkinfer:TFLiteSoftmax over the last axis of an int8 (rows, cols) tensor."""
    b = _B(seed)
    x = b.input((rows, cols), np.int8)
    b.node("vkinfer:TFLiteSoftmax", [x, b.const(np.float32(0.1)), b.const(np.float32(1 / 256)),
                                     b.const(np.int8(-128))], beta=1.0)
    return b.done(np.int8)


def g_pool(op: str, c: int, hw: tuple[int, int], k: int | tuple[int, int] = 2, stride: int = 2, pad: int = 0,
           dtype=np.uint8, seed: int = 0) -> Built:
    """MaxPool, com.microsoft:QLinearAveragePool, vkinfer:TFLiteAveragePool (k x k / stride) or
    com.microsoft:QLinearGlobalAveragePool on a (1, c, h, w) input."""
    b = _B(seed)
    x = b.input((1, c, *hw), dtype)
    kk = [k, k] if isinstance(k, int) else list(k)
    win = {"kernel_shape": kk, "strides": [stride, stride], "pads": [pad] * 4}
    if op == "MaxPool":
        b.node(op, [x], **win)
    elif op == "com.microsoft:QLinearAveragePool":
        b.node(op, [x, *b.qp(dtype), *b.qp(dtype)], count_include_pad=0, **win)
    elif op == "vkinfer:TFLiteAveragePool":
        lo, hi = (-128, 127) if np.dtype(dtype) == np.int8 else (0, 255)
        b.node(op, [x], activation_min=lo, activation_max=hi, **win)
    else:
        b.node(op, [x, *b.qp(dtype), *b.qp(dtype)], channels_last=0)
    return b.done(dtype)


def g_concat(widths: tuple[int, ...], hw: tuple[int, int], requant: bool = False, dtype=np.uint8,
             seed: int = 0) -> Built:
    """Concat (or com.microsoft:QLinearConcat with requantization) of activations along channels."""
    b = _B(seed)
    xs = [b.input((1, w, *hw), dtype) for w in widths]
    if requant:
        ins = [*b.qp(dtype)]
        for x in xs:
            ins += [x, *b.qp(dtype)]
        b.node("com.microsoft:QLinearConcat", ins, axis=1)
    else:
        b.node("Concat", xs, axis=1)
    return b.done(dtype)


def g_shuffle(c: int, hw: tuple[int, int], groups: int = 2, dtype=np.uint8, seed: int = 0) -> Built:
    """ShuffleNet's channel shuffle: Reshape (1, g, c/g, h, w), Transpose (0, 2, 1, 3, 4), Reshape back; the
    reshapes are aliases, the Transpose (the timed node) moves the bytes."""
    b = _B(seed)
    x = b.input((1, c, *hw), dtype)
    r = b.node("Reshape", [x, b.const(np.array([1, groups, c // groups, *hw], np.int64))])
    t = b.node("Transpose", [r], perm=[0, 2, 1, 3, 4])
    b.node("Reshape", [t, b.const(np.array([1, c, *hw], np.int64))])
    return b.done(dtype, target=1)


def g_pad(c: int, hw: tuple[int, int], p: int = 1, dtype=np.uint8, seed: int = 0) -> Built:
    """Pad (constant, the zero point) of the spatial axes by `p` on each side."""
    b = _B(seed)
    x = b.input((1, c, *hw), dtype)
    pads = np.array([0, 0, p, p, 0, 0, p, p], np.int64)
    b.node("Pad", [x, b.const(pads), b.const(np.dtype(dtype).type(128 if np.dtype(dtype) == np.uint8 else 0))],
           mode="constant")
    return b.done(dtype)


@dataclass(frozen=True)
class Shape:
    """One microbenchmark: op class, a label saying where the shape comes from, the graph builder and its
    arguments, and which grids take it ("q" quick, "f" full; "v"/"V" the Vulkan quick/full grids: only shapes
    Vulkan lowers; "h" the host's, kept to cheap shapes)."""

    op_class: str
    label: str
    build: Callable
    args: tuple
    kw: tuple = ()
    grids: str = "f"

    def graph(self) -> Built:
        """(a fresh graph, its feed, the timed node's name)."""
        return self.build(*self.args, **dict(self.kw))


I8 = (("dtype", np.int8),)
QADD, TADD = "com.microsoft:QLinearAdd", "vkinfer:TFLiteAdd"
GAP, TAVG = "com.microsoft:QLinearGlobalAveragePool", "vkinfer:TFLiteAveragePool"
QAVG = "com.microsoft:QLinearAveragePool"
# Labels: the model a shape comes from (mnv2: MobileNetV2 1.0/224, mnv2-0.35: width 0.35, ds-cnn and mnv2-kws: the
# keyword spotters, vww: MobileNetV1 0.25 at 96x96, resnet8, and the zoo's mnv1/resnext/shufflenet/dilated/mlp),
# the layer, the input's spatial size and the channels. Channel counts that are not a multiple of the CPU
# kernels' blocks (32 output channels for the GEMM, 16 for depthwise) are included on purpose: those layers cost
# more per MAC (a 56x56 K=8 1x1 convolution to 8 channels took as long as to 16 and 1.6x as long as to 32).
GRID: list[Shape] = [
    # gemm: 1x1 convolutions with >= 8 output rows.
    Shape("gemm", "ds-cnn pw 25x5 64->64", g_conv, (64, (25, 5), 64), I8, "qfvVh"),
    Shape("gemm", "mnv2 expand 28x28 32->192", g_conv, (32, (28, 28), 192), (), "fvVh"),
    Shape("gemm", "mnv2 last 7x7 320->1280", g_conv, (320, (7, 7), 1280), (), "fVh"),
    Shape("gemm", "mnv2 project 112x112 32->16", g_conv, (32, (112, 112), 16), (), "fV"),
    Shape("gemm", "vww pw 48x48 8->16", g_conv, (8, (48, 48), 16), I8, "fV"),
    Shape("gemm", "mnv2 expand 56x56 24->144", g_conv, (24, (56, 56), 144), (), "qfV"),
    Shape("gemm", "mnv2 expand 14x14 96->576", g_conv, (96, (14, 14), 576), (), "qfvV"),
    Shape("gemm", "mnv2 project 28x28 192->32", g_conv, (192, (28, 28), 32), (), "fV"),
    Shape("gemm", "mnv2 project 14x14 384->64", g_conv, (384, (14, 14), 64), (), "fV"),
    Shape("gemm", "mnv2-0.35 expand 112x112 8->48", g_conv, (8, (112, 112), 48), (), "f"),
    Shape("gemm", "mnv2-0.35 project 56x56 48->8", g_conv, (48, (56, 56), 8), (), "fV"),
    Shape("gemm", "vww pw 6x6 128->128", g_conv, (128, (6, 6), 128), I8, "qfvV"),
    Shape("gemm", "vww pw 3x3 256->256", g_conv, (256, (3, 3), 256), I8, "fV"),
    Shape("gemm", "mnv2-kws pw 30x25 8->32", g_conv, (8, (30, 25), 32), I8, "qfV"),
    Shape("gemm", "resnext pw 32x32 64->128 /2", g_conv, (64, (32, 32), 128, 1, 2), (), "fV"),
    # gemv: fully connected heads and 1x1 convolutions on fewer than 8 pixels.
    Shape("gemv", "ds-cnn fc 64->12", g_qgemm, (64, 12), I8, "qfvVh"),
    Shape("gemv", "mnv2 fc 1280->1000", g_qgemm, (1280, 1000), (), "qfvVh"),
    Shape("gemv", "vww fc 256->2", g_qgemm, (256, 2), I8, "qfvVh"),
    Shape("gemv", "mnv1 pw 2x2 128->128", g_conv, (128, (2, 2), 128), (), "qfV"),
    Shape("gemv", "resnet8 fc 64->10", g_qgemm, (64, 10), I8, "fV"),
    Shape("gemv", "mlp 4x64->128", g_matmul, (64, 128, 4), (), "fvV"),
    Shape("gemv", "mlp 4x128->10", g_qgemm, (128, 10, 4), (), "fV"),
    Shape("gemv", "mnv1 pw 1x1 256->256", g_conv, (256, (1, 1), 256), (), "fV"),
    Shape("gemv", "mnv1 pw 2x2 64->128", g_conv, (64, (2, 2), 128), (), "fV"),
    Shape("gemv", "fc 1024->512", g_qgemm, (1024, 512), (), "fV"),
    Shape("gemv", "shufflenet fc 96->10", g_qgemm, (96, 10), (), "fV"),
    Shape("gemv", "u8 ds-cnn fc 64->12", g_qgemm, (64, 12), (("wide", True), ("dtype", np.int8)), "qf"),
    Shape("gemv", "u8 mlp 4x128->10", g_qgemm, (128, 10, 4), (("wide", True),), "qf"),
    Shape("gemv", "u8 fc 256->256", g_qgemm, (256, 256), (("wide", True),), "qf"),
    # conv: kxk, strided, grouped, dilated (not depthwise).
    Shape("conv", "resnet8 stem 32x32 3->16", g_conv, (3, (32, 32), 16, 3), I8, "qfvVh"),
    Shape("conv", "tiny 3x3 8x8 8->8", g_conv, (8, (8, 8), 8, 3), I8, "qf"),
    Shape("conv", "tiny stem 16x16 3->8", g_conv, (3, (16, 16), 8, 3), I8, "qf"),
    Shape("conv", "resnet8 3x3 32x32 16->16", g_conv, (16, (32, 32), 16, 3), I8, "qfvVh"),
    Shape("conv", "resnet8 3x3 8x8 64->64", g_conv, (64, (8, 8), 64, 3), I8, "qfvVh"),
    Shape("conv", "mnv2 stem 224 3->32 /2", g_conv, (3, (224, 224), 32, 3, 2), (), "fV"),
    Shape("conv", "vww stem 96x96 3->8 /2", g_conv, (3, (96, 96), 8, 3, 2), I8, "fV"),
    Shape("conv", "mnv2-0.35 stem 224 3->16 /2", g_conv, (3, (224, 224), 16, 3, 2), (), "qf"),
    Shape("conv", "ds-cnn stem 49x10 10x4 /2 1->64", g_conv, (1, (49, 10), 64, (10, 4), 2),
          (("pads", (4, 1, 5, 1)), ("dtype", np.int8)), "fV"),
    Shape("conv", "resnet8 3x3 32x32 16->32 /2", g_conv, (16, (32, 32), 32, 3, 2), I8, "fV"),
    Shape("conv", "resnet8 3x3 16x16 32->32", g_conv, (32, (16, 16), 32, 3), I8, "fV"),
    Shape("conv", "resnext 3x3 32x32 32->32 g4", g_conv, (32, (32, 32), 32, 3, 1, 4), (), "qfV"),
    Shape("conv", "resnext 3x3 32x32 64->64 g4", g_conv, (64, (32, 32), 64, 3, 1, 4), (), "qf"),
    Shape("conv", "resnext 3x3 8x8 128->128 g4", g_conv, (128, (8, 8), 128, 3, 1, 4), (), "qf"),
    Shape("conv", "resnext 3x3 16x16 64->64 g4", g_conv, (64, (16, 16), 64, 3, 1, 4), (), "qfV"),
    Shape("conv", "shufflenet 1x1 16x16 24->12 g2", g_conv, (24, (16, 16), 12, 1, 1, 2), (), "qfV"),
    Shape("conv", "shufflenet 1x1 8x8 48->12 g2", g_conv, (48, (8, 8), 12, 1, 1, 2), (), "qfvV"),
    Shape("conv", "dilated 3x3 d2 32x32 16->16", g_conv, (16, (32, 32), 16, 3, 1, 1, 2), (), "qfV"),
    Shape("conv", "mnv2-kws stem 59x49 1->16 /2", g_conv, (1, (59, 49), 16, 3, 2), I8, "fV"),
    Shape("conv", "dilated 3x3 d4 32x32 16->16", g_conv, (16, (32, 32), 16, 3, 1, 1, 4), (), "qfV"),
    Shape("conv", "dilated 3x3 d2 16x16 32->32", g_conv, (32, (16, 16), 32, 3, 1, 1, 2), (), "qf"),
    # The int16 path (wide weights): small layers here, large ones from the uint8 field models (measure.py).
    Shape("conv", "u8 tiny 3x3 8x8 8->8", g_conv, (8, (8, 8), 8, 3), (("wide", True),), "qf"),
    Shape("conv", "u8 resnet8 3x3 8x8 64->64", g_conv, (64, (8, 8), 64, 3), (("wide", True),), "qf"),
    Shape("conv", "u8 stem 16x16 3->8", g_conv, (3, (16, 16), 8, 3), (("wide", True),), "qf"),
    # depthwise: group == channels, 3x3 and 5x5; channels that leave a tail of 1-15 past a multiple of 16 (vww's
    # 48x48x8: 71 ns per pixel against 15 for 16 channels; the CPU kernel's tail path) at the end, their own path.
    Shape("depthwise", "ds-cnn dw 25x5x64", g_conv, (64, (25, 5), 64, 3, 1, 64), I8, "qfvVh"),
    Shape("depthwise", "mnv2 dw 56x56x144", g_conv, (144, (56, 56), 144, 3, 1, 144), (), "qfVh"),
    Shape("depthwise", "mnv2 dw 112x112x96 /2", g_conv, (96, (112, 112), 96, 3, 2, 96), (), "qf"),
    Shape("depthwise", "mnv2 dw 7x7x960", g_conv, (960, (7, 7), 960, 3, 1, 960), (), "qfvVh"),
    Shape("depthwise", "vww dw 6x6x128", g_conv, (128, (6, 6), 128, 3, 1, 128), I8, "qfvV"),
    Shape("depthwise", "mnv2 dw 28x28x192", g_conv, (192, (28, 28), 192, 3, 1, 192), (), "fvV"),
    Shape("depthwise", "mnv2 dw 112x112x32", g_conv, (32, (112, 112), 32, 3, 1, 32), (), "f"),
    Shape("depthwise", "mnv2 dw 14x14x576", g_conv, (576, (14, 14), 576, 3, 1, 576), (), "fV"),
    Shape("depthwise", "mnv2-0.35 dw 112x112x16", g_conv, (16, (112, 112), 16, 3, 1, 16), (), "f"),
    Shape("depthwise", "mnv2-0.35 dw 56x56x48", g_conv, (48, (56, 56), 48, 3, 1, 48), (), "fV"),
    Shape("depthwise", "vww dw 48x48x16 /2", g_conv, (16, (48, 48), 16, 3, 2, 16), I8, "fV"),
    Shape("depthwise", "vww dw 3x3x256", g_conv, (256, (3, 3), 256, 3, 1, 256), I8, "fV"),
    Shape("depthwise", "mnv2-kws dw 30x25x16", g_conv, (16, (30, 25), 16, 3, 1, 16), I8, "fV"),
    Shape("depthwise", "dw 5x5 14x14x240", g_conv, (240, (14, 14), 240, 5, 1, 240), (), "fV"),
    Shape("depthwise", "dw 5x5 14x14x480 /2", g_conv, (480, (14, 14), 480, 5, 2, 480), (), "fV"),
    # Channels past a multiple of the kernel's block of 16 (the "tail" path, costs.path_keys): slower per pixel.
    Shape("depthwise", "vww dw 48x48x8", g_conv, (8, (48, 48), 8, 3, 1, 8), I8, "qf"),
    Shape("depthwise", "shufflenet dw 16x16x24", g_conv, (24, (16, 16), 24, 3, 1, 24), (), "qf"),
    Shape("depthwise", "mnv1 dw 16x16x8", g_conv, (8, (16, 16), 8, 3, 1, 8), (), "qf"),
    Shape("depthwise", "dw 8x8x40 /2", g_conv, (40, (8, 8), 40, 3, 2, 40), (), "qf"),
    Shape("depthwise", "u8 dw 16x16x24", g_conv, (24, (16, 16), 24, 3, 1, 24), (("wide", True),), "qf"),
    Shape("depthwise", "u8 dw 24x24x8", g_conv, (8, (24, 24), 8, 3, 1, 8), (("wide", True),), "qf"),
    # elementwise: adds, tables, (de)quantize, softmax.
    Shape("elementwise", "mnv2 add 56x56x24", g_binary, (QADD, 24, (56, 56)), (), "qfvVh"),
    Shape("elementwise", "resnet8 add 16x16x32", g_binary, (TADD, 32, (16, 16)), I8, "qfvVh"),
    Shape("elementwise", "mnv2 quantize 3x224x224", g_quantize, ((1, 3, 224, 224),), (), "qfh"),
    Shape("elementwise", "mnv2 dequantize 1000", g_dequantize, ((1, 1000),), (), "qfh"),
    Shape("elementwise", "kws softmax 12", g_softmax, (1, 12), (), "qf"),
    Shape("elementwise", "mnv2 add 7x7x160", g_binary, (QADD, 160, (7, 7)), (), "qfvV"),
    Shape("elementwise", "mnv2 add 28x28x32", g_binary, (QADD, 32, (28, 28)), (), "fV"),
    Shape("elementwise", "mnv2 add 14x14x64", g_binary, (QADD, 64, (14, 14)), (), "qfV"),
    Shape("elementwise", "resnet8 add 32x32x16", g_binary, (TADD, 16, (32, 32)), I8, "fV"),
    Shape("elementwise", "resnet8 add 8x8x64", g_binary, (TADD, 64, (8, 8)), I8, "fvV"),
    Shape("elementwise", "mnv2-kws add 15x13x16", g_binary, (TADD, 16, (15, 13)), I8, "fV"),
    Shape("elementwise", "leaky relu 28x28x64", g_unary, ("com.microsoft:QLinearLeakyRelu", 64, (28, 28)), (), "fV"),
    Shape("elementwise", "sigmoid 14x14x96", g_unary, ("com.microsoft:QLinearSigmoid", 96, (14, 14)), (), "V"),
    Shape("elementwise", "quantize 3x32x32", g_quantize, ((1, 3, 32, 32),), (), "qf"),
    Shape("elementwise", "softmax 1000", g_softmax, (1, 1000), (), "f"),
    Shape("elementwise", "dequantize 10", g_dequantize, ((1, 10),), (), "qf"),
    Shape("elementwise", "dequantize 4x32x32", g_dequantize, ((1, 4, 32, 32),), (), "qf"),
    Shape("elementwise", "quantize 4x64", g_quantize, ((4, 64),), (), "qf"),
    # pool: max, average, global average.
    Shape("pool", "mnv2 gap 7x7x1280", g_pool, (GAP, 1280, (7, 7)), (), "qfvVh"),
    Shape("pool", "ds-cnn avgpool 25x5x64", g_pool, (TAVG, 64, (25, 5), (25, 5), 1), I8, "fvVh"),
    Shape("pool", "maxpool 3x3/2 56x56x64", g_pool, ("MaxPool", 64, (56, 56), 3, 2, 1), (), "fVh"),
    Shape("pool", "resnet8 avgpool 8x8x64", g_pool, (TAVG, 64, (8, 8), 8, 8), I8, "qfV"),
    Shape("pool", "maxpool 2x2/2 32x32x16", g_pool, ("MaxPool", 16, (32, 32), 2, 2), (), "fvV"),
    Shape("pool", "vww avgpool 3x3x256", g_pool, (TAVG, 256, (3, 3), 3, 3), I8, "fvV"),
    Shape("pool", "gap 4x4x96", g_pool, (GAP, 96, (4, 4)), (), "qfV"),
    Shape("pool", "mnv2-kws gap 8x7x64", g_pool, (GAP, 64, (8, 7)), I8, "fV"),
    Shape("pool", "resnext gap 8x8x128", g_pool, (GAP, 128, (8, 8)), (), "qfV"),
    Shape("pool", "avgpool 3x3/1 14x14x64", g_pool, (QAVG, 64, (14, 14), 3, 1, 1), (), "f"),
    Shape("pool", "maxpool 3x3/2 112x112x24", g_pool, ("MaxPool", 24, (112, 112), 3, 2, 1), (), "qf"),
    # move: channel concat, channel shuffle, pad.
    Shape("move", "concat 8x8 16+16", g_concat, ((16, 16), (8, 8)), (), "qfvVh"),
    Shape("move", "shuffle 28x28x116 g2", g_shuffle, (116, (28, 28)), (), "qfvVh"),
    Shape("move", "pad 56x56x24", g_pad, (24, (56, 56)), (), "qfh"),
    Shape("move", "shufflenet shuffle 8x8x48 g2", g_shuffle, (48, (8, 8)), (), "qfvV"),
    # Small shuffles (the 5-D transpose's own path needs 6 samples for its own fit; 3 scale the 4-D moves').
    Shape("move", "shufflenet shuffle 16x16x12 g2", g_shuffle, (12, (16, 16)), (), "qf"),
    Shape("move", "shufflenet shuffle 8x8x24 g2", g_shuffle, (24, (8, 8)), (), "qf"),
    Shape("move", "shufflenet shuffle 4x4x24 g2", g_shuffle, (24, (4, 4)), (), "qf"),
    Shape("move", "qconcat 28x28 58+58", g_concat, ((58, 58), (28, 28), True), (), "qfvV"),
    Shape("move", "shufflenet qconcat 8x8 24+24", g_concat, ((24, 24), (8, 8), True), (), "qf"),
    Shape("move", "concat 56x56 24+24", g_concat, ((24, 24), (56, 56)), (), "qfV"),
    Shape("move", "shuffle 14x14x232 g2", g_shuffle, (232, (14, 14)), (), "qfV"),
    Shape("move", "shuffle 7x7x464 g2", g_shuffle, (464, (7, 7)), (), "fV"),
    Shape("move", "pad 112x112x16", g_pad, (16, (112, 112)), (), "f"),
    Shape("move", "pad 14x14x96", g_pad, (96, (14, 14)), (), "f"),
    Shape("move", "concat 7x7 160+160+160", g_concat, ((160, 160, 160), (7, 7)), (), "qfV"),
    Shape("move", "shufflenet qconcat 4x4 48+48", g_concat, ((48, 48), (4, 4), True), (), "qfV"),
]


def grid(kind: str, mode: str) -> list[Shape]:
    """The shapes a calibration of device kind `kind` ("cpu", "vulkan", "host") in `mode` times."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    flag = {"cpu": "q" if mode == "quick" else "f", "vulkan": "v" if mode == "quick" else "V",
            "host": "h" if mode == "quick" else "f"}[kind]
    return [s for s in GRID if flag in s.grids]



__all__ = ["MODES", "Built", "Shape", "GRID", "grid", "g_conv", "g_qgemm", "g_matmul", "g_binary", "g_unary",
           "g_quantize", "g_dequantize", "g_softmax", "g_pool", "g_concat", "g_shuffle", "g_pad"]
