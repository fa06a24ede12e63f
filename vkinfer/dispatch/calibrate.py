"""Calibration: measure what each op class costs on one device of this machine and fit its cost model.

    entry = calibrate_device("cpu", threads=1, mode="quick")     # a DeviceProfile (vkinfer/dispatch/profile.py)
    entry = calibrate_device("vulkan:1")                         # lavapipe here
    model = fit_class([(work, ns), ...], tile=(32, 32))          # one ClassModel

**Microbenchmarks.** Every op class (vkinfer/dispatch/costs.py) is timed over a grid of single-node graphs whose
shapes come from the models vkinfer is used on: MobileNetV2 1.0/224 and 0.35/224, the DS-CNN keyword spotter
(49x10 MFCC, 64 channels), the MobileNetV2 keyword spotter, MobileNetV1 0.25 visual wake words (96x96), ResNet-8
(CIFAR 32x32) and the zoo's small ONNX models (grouped and dilated convolutions, channel shuffles, MLP heads).
`GRID` lists them with the grids that take them: CPU quick 4-5 shapes per class (a small one, a large one and
ones between, enough for the 3-term fit), CPU full 11-15, Vulkan quick 4 (each new pipeline costs 50-100 ms on
lavapipe), Vulkan full 9-14, host quick 3-4. Each graph is compiled through the execution core
(vkinfer.model.plan.Plan) as a session's would be, so the lowering, kernel and edge conversions are the real ones.

**What is timed.**
- cpu: the native graph's per-operator timers (NativeGraph.profile), reset before each run. A node's time is
  its own operators (which operators belong to which layer is found by replaying each layer's emitter into a
  recorder, `_op_split`) plus its share of the run loop outside the operators (about 35 ns per operator here).
  The conversions the segment adds at its edges (8-bit host NCHW arrays into the NHWC arena and back, int8
  XOR 0x80) are the `upload`/`download` links, fitted on every sample's edge operators; `segment_ns` is what
  remains of the wall time of `run_arrays` (Python, ctypes, argument checks, output allocation: 3-8 us here).
  The tile is picked among CPU_TILES by the fit (`pick_tile`; 4x32 or 1x32 here: avx512vnni's
  microkernel computes 4 rows x 32 channels).
- vulkan: the device time (timestamps) of the one-node segment's commands with the node dispatched CHAIN
  times, less the same with it dispatched once, over CHAIN - 1 (`_measure_vulkan`); `segment_ns` the wall
  time of submit-and-wait of the one-dispatch sequence less the node; `upload`/`download` the wall time of
  Buffer.write_nchw/read_nchw (plus the recorded copy where the device is not zero-copy) over several sizes.
  The tile is qlinear_gemm's workgroup tile, 32 rows x 32 output channels (shaders/qlinear_gemm.comp TM, TN).
- host (the numpy interpreter, for nodes no device runs): the wall time of a HostSegment running the node
  (QuantizeLinear/DequantizeLinear through its fast path, the rest through the interpreter's kernels);
  segment and transfers cost nothing there.

Every time is the median over rounds (`_rounds`: quick at least 7, full at least 21, more within the mode's time
budget), after warm-ups; `tail` is the median over shapes of p90/p50. The CPU runs at the entry's thread count.

**Fit.** `fit_class`: time = fixed_ns + ns_per_mac * tiled MACs + ns_per_byte * bytes by non-negative least
squares on the relative error (rows divided by the measured time, then reweighted towards the log-ratio, see
`_nnls_relative`), so small and large layers weigh alike.

**Limits measured here (CPU, avx512vnni, 2-core EPYC VM).** The three terms cannot follow everything the
kernels do: a 1x1 convolution whose output channels are not a multiple of 32 costs about 7 ns more per output
row than the tile explains (56x56, K=8: 20.6 us to 8 channels, 13.1 us to 32), depthwise channels past a
multiple of 16 take a slow tail path (48x48x8: 71 ns per pixel, 16 channels: 15 ns), grouped convolutions
round each group's channels to the tile (Work sees all of them at once), and reshapes that are aliases cost
nothing. Median errors of quick-calibrated predictions against the nodes of the field and zoo models (1 thread):
gemv 7%, depthwise 10%, elementwise 11%, gemm 12%, pool 13%, conv 30%, move 36%; whole models within 10% for
MobileNetV2 1.0 and 0.35, DS-CNN, ResNet-8 and the MLP, 14-27% low for the others, 47% low for the visual wake
words model (its 48x48x8 depthwise layer is half of its time). This machine's speed also drifts by up to 40%
between minutes, so a profile is only as good as the minute it was measured in.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from ..model.graph import Graph, Node, TensorInfo
from .costs import CLASSES, Work, node_work
from .profile import ClassModel, DeviceProfile, Link, cpu_identity, device_from_json, host_identity

MODES = ("quick", "full")
MIN_SAMPLES = 3  # fixed, per-MAC and per-byte terms
VULKAN_TILE = (32, 32)  # qlinear_gemm: a workgroup computes TM=32 rows x TN=32 output channels
HOST_TILE = (1, 1)
# The CPU's microkernel tile is the ISA variant's (rows MR x output channels NR: 4 x 32 for avx512vnni, 4 x 16
# for avx2, 2 x 4 scalar; the depthwise kernel pads channels to 16) and is not exported by the C library, so
# the calibration picks, among these, the tile whose fit explains the measured GEMM-like classes best.
CPU_TILES = [(1, 1), (1, 4), (1, 8), (1, 16), (1, 32), (4, 4), (4, 8), (4, 16), (4, 32)]
TILED = ("gemm", "gemv", "conv", "depthwise")

# Per mode: (minimum rounds, maximum rounds, time budget of the timed rounds in ns, warm-up runs per shape).
_REPEATS = {"quick": (7, 40, 60_000_000, 2), "full": (21, 400, 2_000_000_000, 3)}


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

    def done(self, target: int = -1) -> Built:
        last = self.nodes[-1]
        last.outputs = ["y"]
        for n in self.nodes:
            n.attrs["_static"] = all(not i or i in self.consts for i in n.inputs[1:])
        g = Graph(self.nodes, self.inputs, [TensorInfo("y", None, np.dtype(np.uint8))], self.consts)
        return g, self.feed, self.nodes[target].name


def _conv(b: _B, x: str, xq: list[str], c: int, m: int, k, stride: int, group: int, dil: int, pads, dt) -> str:
    kh, kw = (k, k) if isinstance(k, int) else k
    w = b.rng.integers(-60, 61, (m, c // group, kh, kw)).astype(np.int8)
    ws = (b.rng.uniform(0.002, 0.006, m)).astype(np.float32)
    if pads is None:
        pads = [dil * (kh - 1) // 2, dil * (kw - 1) // 2] * 2
    bias = b.rng.integers(-2000, 2000, m).astype(np.int32)
    return b.node("QLinearConv", [x, *xq, b.const(w), b.const(ws), b.const(np.zeros(m, np.int8)), *b.qp(dt),
                                  b.const(bias)],
                  kernel_shape=[kh, kw], strides=[stride, stride], pads=list(pads), group=group,
                  dilations=[dil, dil])


def g_conv(c: int, hw: tuple[int, int], m: int, k=1, stride: int = 1, group: int = 1, dil: int = 1, pads=None,
           dtype=np.uint8, seed: int = 0) -> Built:
    """One QLinearConv on a (1, c, h, w) input: 1x1 (gemm/gemv), kxk, grouped, dilated or depthwise."""
    b = _B(seed)
    x = b.input((1, c, *hw), dtype)
    _conv(b, x, b.qp(dtype), c, m, k, stride, group, dil, pads, dtype)
    return b.done()


def g_qgemm(k: int, m: int, rows: int = 1, dtype=np.uint8, seed: int = 0) -> Built:
    """com.microsoft:QGemm (a fully connected layer): A (rows, k) times constant B (m, k) transposed."""
    b = _B(seed)
    a = b.input((rows, k), dtype)
    w = b.rng.integers(-60, 61, (m, k)).astype(np.int8)
    bias = b.rng.integers(-2000, 2000, m).astype(np.int32)
    b.node("com.microsoft:QGemm", [a, *b.qp(dtype), b.const(w), b.const(np.float32(0.004)), b.const(np.int8(0)),
                                   b.const(bias), *b.qp(dtype)], transB=1)
    return b.done()


def g_matmul(k: int, m: int, rows: int = 1, dtype=np.uint8, seed: int = 0) -> Built:
    """QLinearMatMul: A (rows, k) times constant B (k, m) (the zoo MLP's hidden layer)."""
    b = _B(seed)
    a = b.input((rows, k), dtype)
    w = b.rng.integers(-60, 61, (k, m)).astype(np.int8)
    b.node("QLinearMatMul", [a, *b.qp(dtype), b.const(w), b.const(np.float32(0.004)), b.const(np.int8(0)),
                             *b.qp(dtype)])
    return b.done()


def g_binary(op: str, c: int, hw: tuple[int, int], dtype=np.uint8, seed: int = 0) -> Built:
    """com.microsoft:QLinearAdd or vkinfer:TFLiteAdd of two equal-shape activations (a residual add)."""
    b = _B(seed)
    x0, x1 = b.input((1, c, *hw), dtype), b.input((1, c, *hw), dtype)
    b.node(op, [x0, *b.qp(dtype), x1, *b.qp(dtype), *b.qp(dtype)])
    return b.done()


def g_unary(op: str, c: int, hw: tuple[int, int], dtype=np.uint8, seed: int = 0) -> Built:
    """A table op: com.microsoft:QLinearLeakyRelu or QLinearSigmoid."""
    b = _B(seed)
    x = b.input((1, c, *hw), dtype)
    attrs = {"alpha": 0.1} if op.endswith("LeakyRelu") else {}
    b.node(op, [x, *b.qp(dtype), *b.qp(dtype)], **attrs)
    return b.done()


def g_quantize(shape: tuple[int, ...], seed: int = 0) -> Built:
    """QuantizeLinear of a float tensor (a model's input) to uint8."""
    b = _B(seed)
    x = b.input(shape, np.float32)
    b.node("QuantizeLinear", [x, *b.qp(np.uint8)])
    return b.done()


def g_dequantize(shape: tuple[int, ...], seed: int = 0) -> Built:
    """DequantizeLinear of a uint8 tensor (a model's logits) to float."""
    b = _B(seed)
    x = b.input(shape, np.uint8)
    b.node("DequantizeLinear", [x, *b.qp(np.uint8)])
    return b.done()


def g_softmax(rows: int, cols: int, seed: int = 0) -> Built:
    """vkinfer:TFLiteSoftmax over the last axis of an int8 (rows, cols) tensor."""
    b = _B(seed)
    x = b.input((rows, cols), np.int8)
    b.node("vkinfer:TFLiteSoftmax", [x, b.const(np.float32(0.1)), b.const(np.float32(1 / 256)),
                                     b.const(np.int8(-128))], beta=1.0)
    return b.done()


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
    return b.done()


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
    return b.done()


def g_shuffle(c: int, hw: tuple[int, int], groups: int = 2, dtype=np.uint8, seed: int = 0) -> Built:
    """ShuffleNet's channel shuffle: Reshape (1, g, c/g, h, w), Transpose (0, 2, 1, 3, 4), Reshape back; the
    reshapes are aliases, the Transpose (the timed node) moves the bytes."""
    b = _B(seed)
    x = b.input((1, c, *hw), dtype)
    r = b.node("Reshape", [x, b.const(np.array([1, groups, c // groups, *hw], np.int64))])
    t = b.node("Transpose", [r], perm=[0, 2, 1, 3, 4])
    b.node("Reshape", [t, b.const(np.array([1, c, *hw], np.int64))])
    return b.done(target=1)


def g_pad(c: int, hw: tuple[int, int], p: int = 1, dtype=np.uint8, seed: int = 0) -> Built:
    """Pad (constant, the zero point) of the spatial axes by `p` on each side."""
    b = _B(seed)
    x = b.input((1, c, *hw), dtype)
    pads = np.array([0, 0, p, p, 0, 0, p, p], np.int64)
    b.node("Pad", [x, b.const(pads), b.const(np.dtype(dtype).type(128 if np.dtype(dtype) == np.uint8 else 0))],
           mode="constant")
    return b.done()


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
    # conv: kxk, strided, grouped, dilated (not depthwise).
    Shape("conv", "resnet8 stem 32x32 3->16", g_conv, (3, (32, 32), 16, 3), I8, "qfvVh"),
    Shape("conv", "resnet8 3x3 32x32 16->16", g_conv, (16, (32, 32), 16, 3), I8, "qfvVh"),
    Shape("conv", "resnet8 3x3 8x8 64->64", g_conv, (64, (8, 8), 64, 3), I8, "qfvVh"),
    Shape("conv", "mnv2 stem 224 3->32 /2", g_conv, (3, (224, 224), 32, 3, 2), (), "fV"),
    Shape("conv", "vww stem 96x96 3->8 /2", g_conv, (3, (96, 96), 8, 3, 2), I8, "fV"),
    Shape("conv", "mnv2-0.35 stem 224 3->16 /2", g_conv, (3, (224, 224), 16, 3, 2), (), "qf"),
    Shape("conv", "ds-cnn stem 49x10 10x4 /2 1->64", g_conv, (1, (49, 10), 64, (10, 4), 2),
          (("pads", (4, 1, 5, 1)), ("dtype", np.int8)), "fV"),
    Shape("conv", "resnet8 3x3 32x32 16->32 /2", g_conv, (16, (32, 32), 32, 3, 2), I8, "fV"),
    Shape("conv", "resnet8 3x3 16x16 32->32", g_conv, (32, (16, 16), 32, 3), I8, "fV"),
    Shape("conv", "resnext 3x3 32x32 32->32 g4", g_conv, (32, (32, 32), 32, 3, 1, 4), (), "fV"),
    Shape("conv", "resnext 3x3 16x16 64->64 g4", g_conv, (64, (16, 16), 64, 3, 1, 4), (), "fV"),
    Shape("conv", "shufflenet 1x1 16x16 24->12 g2", g_conv, (24, (16, 16), 12, 1, 1, 2), (), "fV"),
    Shape("conv", "shufflenet 1x1 8x8 48->12 g2", g_conv, (48, (8, 8), 12, 1, 1, 2), (), "qfvV"),
    Shape("conv", "dilated 3x3 d2 32x32 16->16", g_conv, (16, (32, 32), 16, 3, 1, 1, 2), (), "fV"),
    Shape("conv", "mnv2-kws stem 59x49 1->16 /2", g_conv, (1, (59, 49), 16, 3, 2), I8, "fV"),
    # depthwise: group == channels, 3x3 and 5x5. Not here: channels that leave a tail of 1-15 past a multiple of
    # 16 (vww's 48x48x8: 71 ns per pixel against 15 for 16 channels; the CPU kernel's tail path), which no
    # linear model of MACs and bytes follows.
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
    # elementwise: adds, tables, (de)quantize, softmax.
    Shape("elementwise", "mnv2 add 56x56x24", g_binary, (QADD, 24, (56, 56)), (), "qfvVh"),
    Shape("elementwise", "resnet8 add 16x16x32", g_binary, (TADD, 32, (16, 16)), I8, "qfvVh"),
    Shape("elementwise", "mnv2 quantize 3x224x224", g_quantize, ((1, 3, 224, 224),), (), "qfh"),
    Shape("elementwise", "mnv2 dequantize 1000", g_dequantize, ((1, 1000),), (), "qfh"),
    Shape("elementwise", "kws softmax 12", g_softmax, (1, 12), (), "qf"),
    Shape("elementwise", "mnv2 add 7x7x160", g_binary, (QADD, 160, (7, 7)), (), "fvV"),
    Shape("elementwise", "mnv2 add 28x28x32", g_binary, (QADD, 32, (28, 28)), (), "fV"),
    Shape("elementwise", "mnv2 add 14x14x64", g_binary, (QADD, 64, (14, 14)), (), "fV"),
    Shape("elementwise", "resnet8 add 32x32x16", g_binary, (TADD, 16, (32, 32)), I8, "fV"),
    Shape("elementwise", "resnet8 add 8x8x64", g_binary, (TADD, 64, (8, 8)), I8, "fvV"),
    Shape("elementwise", "mnv2-kws add 15x13x16", g_binary, (TADD, 16, (15, 13)), I8, "fV"),
    Shape("elementwise", "leaky relu 28x28x64", g_unary, ("com.microsoft:QLinearLeakyRelu", 64, (28, 28)), (), "fV"),
    Shape("elementwise", "sigmoid 14x14x96", g_unary, ("com.microsoft:QLinearSigmoid", 96, (14, 14)), (), "V"),
    Shape("elementwise", "quantize 3x32x32", g_quantize, ((1, 3, 32, 32),), (), "f"),
    Shape("elementwise", "softmax 1000", g_softmax, (1, 1000), (), "f"),
    Shape("elementwise", "dequantize 10", g_dequantize, ((1, 10),), (), "f"),
    # pool: max, average, global average.
    Shape("pool", "mnv2 gap 7x7x1280", g_pool, (GAP, 1280, (7, 7)), (), "qfvVh"),
    Shape("pool", "ds-cnn avgpool 25x5x64", g_pool, (TAVG, 64, (25, 5), (25, 5), 1), I8, "fvVh"),
    Shape("pool", "maxpool 3x3/2 56x56x64", g_pool, ("MaxPool", 64, (56, 56), 3, 2, 1), (), "fVh"),
    Shape("pool", "resnet8 avgpool 8x8x64", g_pool, (TAVG, 64, (8, 8), 8, 8), I8, "qfV"),
    Shape("pool", "maxpool 2x2/2 32x32x16", g_pool, ("MaxPool", 16, (32, 32), 2, 2), (), "fvV"),
    Shape("pool", "vww avgpool 3x3x256", g_pool, (TAVG, 256, (3, 3), 3, 3), I8, "fvV"),
    Shape("pool", "gap 4x4x96", g_pool, (GAP, 96, (4, 4)), (), "qfV"),
    Shape("pool", "mnv2-kws gap 8x7x64", g_pool, (GAP, 64, (8, 7)), I8, "fV"),
    Shape("pool", "resnext gap 8x8x128", g_pool, (GAP, 128, (8, 8)), (), "fV"),
    Shape("pool", "avgpool 3x3/1 14x14x64", g_pool, (QAVG, 64, (14, 14), 3, 1, 1), (), "f"),
    Shape("pool", "maxpool 3x3/2 112x112x24", g_pool, ("MaxPool", 24, (112, 112), 3, 2, 1), (), "qf"),
    # move: channel concat, channel shuffle, pad.
    Shape("move", "concat 8x8 16+16", g_concat, ((16, 16), (8, 8)), (), "qfvVh"),
    Shape("move", "shuffle 28x28x116 g2", g_shuffle, (116, (28, 28)), (), "qfvVh"),
    Shape("move", "pad 56x56x24", g_pad, (24, (56, 56)), (), "qfh"),
    Shape("move", "shufflenet shuffle 8x8x48 g2", g_shuffle, (48, (8, 8)), (), "qfvV"),
    Shape("move", "qconcat 28x28 58+58", g_concat, ((58, 58), (28, 28), True), (), "fvV"),
    Shape("move", "concat 56x56 24+24", g_concat, ((24, 24), (56, 56)), (), "fV"),
    Shape("move", "shuffle 14x14x232 g2", g_shuffle, (232, (14, 14)), (), "fV"),
    Shape("move", "shuffle 7x7x464 g2", g_shuffle, (464, (7, 7)), (), "fV"),
    Shape("move", "pad 112x112x16", g_pad, (16, (112, 112)), (), "f"),
    Shape("move", "pad 14x14x96", g_pad, (96, (14, 14)), (), "f"),
    Shape("move", "concat 7x7 160+160+160", g_concat, ((160, 160, 160), (7, 7)), (), "fV"),
    Shape("move", "shufflenet qconcat 4x4 48+48", g_concat, ((48, 48), (4, 4), True), (), "fV"),
]


def grid(kind: str, mode: str) -> list[Shape]:
    """The shapes a calibration of device kind `kind` ("cpu", "vulkan", "host") in `mode` times."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    flag = {"cpu": "q" if mode == "quick" else "f", "vulkan": "v" if mode == "quick" else "V",
            "host": "h" if mode == "quick" else "f"}[kind]
    return [s for s in GRID if flag in s.grids]


# --- fitting --------------------------------------------------------------------------------------------------

def _nnls_weighted(x: np.ndarray, t: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Non-negative c minimising sum(((x @ c - t) / w)^2); all-zero columns of x get 0."""
    from scipy.optimize import nnls

    coef = np.zeros(x.shape[1])
    active = [j for j in range(x.shape[1]) if np.any(x[:, j] != 0)]
    if not active:
        return coef
    xa = x[:, active]
    scale = np.abs(xa).max(axis=0)  # columns of 1, 1e7 MACs and 1e6 bytes: equalise them for the solver
    sol, _ = nnls(xa / scale / w[:, None], t / w, maxiter=50 * xa.shape[1])
    coef[active] = sol / scale
    return coef


def _nnls_relative(x: np.ndarray, t: np.ndarray, iterations: int = 8) -> np.ndarray:
    """Non-negative coefficients c for x @ c ~ t on relative error.

    First NNLS on rows divided by the measured time t, then `iterations` reweighted passes dividing by
    sqrt(t * predicted), which converge to the least squares of log(predicted / t). Why: where one linear model
    cannot follow a class (CPU GEMMs whose channels are not a multiple of the kernel's 32-column block, stems
    with 3 input channels), plain relative error is asymmetric (predicting 2x too much costs 1, half as much
    0.25), so it settles low: nodes of the field and zoo models came out 16% under their measured times in the
    median (gemm) and the summed node predictions 20% under; the log-ratio weighting is symmetric (median
    signed error -3%). Exact data gives the same coefficients either way."""
    coef = _nnls_weighted(x, t, t)
    for _ in range(iterations):
        p = x @ coef
        if np.any(p <= 0):
            break
        coef = _nnls_weighted(x, t, np.sqrt(t * p))
    return coef


def fit_class(samples: list[tuple[Work, float]], tile: tuple[int, int]) -> ClassModel:
    """Fit time = fixed_ns + ns_per_mac * work.tiled_macs(tile) + ns_per_byte * work.bytes to measured
    (work, ns) samples of one op class by non-negative least squares on the relative error (_nnls_relative).

    `error` is the median of |predicted - measured| / measured over the samples. Raises ValueError with fewer
    than MIN_SAMPLES samples, a non-positive or non-finite time, or samples that are all the same size (the
    terms cannot be told apart). A class without MACs (move) fits fixed_ns and ns_per_byte only."""
    if len(samples) < MIN_SAMPLES:
        raise ValueError(f"fit_class needs at least {MIN_SAMPLES} samples of different sizes (fixed, per-MAC and "
                         f"per-byte terms), got {len(samples)}")
    t = np.array([float(ns) for _, ns in samples])
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError(f"fit_class: measured times must be positive and finite, got {t.tolist()}")
    x = np.array([[1.0, float(w.tiled_macs(tile)), float(w.bytes)] for w, _ in samples])
    if len({tuple(r) for r in x[:, 1:]}) < 2:
        raise ValueError("fit_class: every sample has the same MACs and bytes; time shapes of different sizes")
    coef = _nnls_relative(x, t)
    err = float(np.median(np.abs(x @ coef - t) / t))
    return ClassModel(float(coef[0]), float(coef[1]), float(coef[2]), len(samples), err)


def _fit_link(samples: list[tuple[int, float]]) -> Link:
    """fixed_ns + ns_per_byte * bytes over (bytes, ns) samples (relative error); Link(0, 0) without samples."""
    samples = [(b, t) for b, t in samples if t > 0]
    if not samples:
        return Link(0.0, 0.0)
    t = np.array([t for _, t in samples])
    if len({b for b, _ in samples}) < 2:
        return Link(float(np.median(t)), 0.0)
    coef = _nnls_relative(np.array([[1.0, float(b)] for b, _ in samples]), t)
    return Link(float(coef[0]), float(coef[1]))


def pick_tile(samples: list, tiles: list[tuple[int, int]], classes: tuple[str, ...] = TILED) -> tuple[int, int]:
    """The tile among `tiles` whose per-class fits of the GEMM-like classes (TILED) have the smallest mean relative
    error over all their samples (ties: the first listed). `samples`: Sample objects or (Work, ns) pairs."""
    pairs = [(s.work, s.ns) if isinstance(s, Sample) else s for s in samples]
    best, best_err = tiles[0], float("inf")
    for tile in tiles:
        errs = []
        for c in classes:
            mine = [(w, t) for w, t in pairs if w.op_class == c]
            if len(mine) < MIN_SAMPLES:
                continue
            m = fit_class(mine, tile)
            errs.extend(abs(m.ns(w, tile) - t) / t for w, t in mine)
        err = float(np.mean(errs)) if errs else float("inf")
        if err < best_err - 1e-9:
            best, best_err = tile, err
    return best


# --- timing helpers -------------------------------------------------------------------------------------------

@dataclass
class Sample:
    """One shape's measurement on one device: its features, median time, tail ratio and label."""

    shape: Shape
    work: Work
    ns: float
    tail: float


def _rounds(probes: list[Callable[[], float]], mode: str, burst: int = 2) -> list[list[float]]:
    """Each probe (a callable running one measurement and returning its time in ns) after warm-ups, in rounds:
    every round runs every probe `burst` times in a row and keeps the last, so a slow spell of this shared
    machine (medians of one shape moved by up to 40% between minutes here) falls on all shapes alike instead of
    on one class, while each kept run finds its code and data in the caches as a node inside a model does (the
    first run after another shape's was 2-10x slower for sub-microsecond nodes: 1.5 us instead of 0.2 us for a
    64->12 fully connected layer). Rounds: the mode's minimum, more while the budget allows, at most its
    maximum."""
    lo, hi, budget, warm = _REPEATS[mode]
    per_round = 0
    for p in probes:
        for _ in range(warm):
            t0 = time.perf_counter_ns()
            p()
            dt = time.perf_counter_ns() - t0
        per_round += dt * burst
    n = int(min(hi, max(lo, budget // max(per_round, 1))))
    out: list[list[float]] = [[] for _ in probes]
    enabled = gc.isenabled()
    gc.disable()  # a collection inside a 10 us run would be its p90
    try:
        for _ in range(n):
            for i, p in enumerate(probes):
                for _ in range(burst - 1):
                    p()
                out[i].append(p())
    finally:
        if enabled:
            gc.enable()
    return out


def _repeat(fn: Callable[[], float], mode: str) -> list[float]:
    """One probe's measurements (see _rounds)."""
    return _rounds([fn], mode)[0]


def _tail(ts: list[float]) -> float:
    p50 = float(np.median(ts))
    return max(1.0, float(np.percentile(ts, 90)) / p50) if p50 > 0 else 1.0


class _Recorder:
    """Stands in for a NativeGraph while a layer's emitter runs: records the operators' names only."""

    def __init__(self):
        self.names: list[str] = []

    def add(self, op: str, *args) -> None:
        self.names.append(op)

    def write(self, offset, data) -> None:
        pass


def _op_split(runner) -> tuple[int, list[int], int]:
    """(input edge operators, operators of each of runner.layers, output edge operators) of a CpuSegment.

    A segment's native operators are its input conversions, then each live layer's, then its output conversions
    (vkinfer/cpu/segment.py); each layer's count comes from replaying its emitter into a recorder, and the edges
    split what is left (at most one conversion per 8-bit input and per 8-bit output)."""
    from ..cpu._form import is_8bit
    from ..cpu.graph import Ref

    names = [n.split(":")[0] for n in runner.ops()]
    counts = []
    for lay in runner.layers:
        if lay.alias:
            counts.append(0)
            continue
        rec = _Recorder()
        refs = [Ref(0, 0, 1) for _ in lay.acts]
        # (A quantize whose output a move took over emits its `plain` form instead: one operator as well.)
        lay.build()(rec, refs, Ref(0, 0, 1), Ref(0, 0, lay.scratch) if lay.scratch else None)
        counts.append(len(rec.names))
    body = sum(counts)
    edges = len(names) - body
    max_in = sum(1 for _, _, dt in runner.in_specs if is_8bit(dt))
    max_out = sum(1 for _, _, dt in runner.out_specs if is_8bit(dt))
    for n_in in range(0, min(edges, max_in) + 1):
        n_out = edges - n_in
        if n_out <= max_out and all(n == "transpose" for n in names[:n_in] + names[n_in + body:]):
            return n_in, counts, n_out
    raise RuntimeError(f"internal: cannot tell the edge operators of {names} (layers emit {counts})")


def _nbytes(info: dict, t: str) -> int:
    shape, dt = info[t]
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize


# --- CPU ------------------------------------------------------------------------------------------------------

_CPU_PLANS: dict[tuple, object] = {}  # (shape, variant) -> Plan, shared by the entries of every thread count


def _cpu_plan(shape: Shape):
    from ..model.plan import CpuBackend, Plan

    key = (shape, None)
    plan = _CPU_PLANS.get(key)
    if plan is None:
        g, feed, name = shape.graph()
        plan = Plan(g, feed, CpuBackend(None), "cpu")
        if len(plan.segments) != 1 or not plan.segments[0].device.startswith("cpu"):
            raise RuntimeError(f"calibration shape {shape.label!r} does not compile to one CPU segment: "
                               f"{[s.device for s in plan.segments]} ({plan.why_host})")
        _CPU_PLANS[key] = plan = (plan, feed, name)
    return plan


def _cpu_probe(shape: Shape, threads: int):
    """(probe, its per-run records, the plan's pieces) for one shape on the CPU: the probe runs the one-node
    segment once with fresh operator timers and returns the node's time (its operators plus its share of the
    run loop); each record is (node, wall minus every operator and the loop, input edges, output edges)."""
    plan, feed, name = _cpu_plan(shape)
    runner = plan.segments[0].runner
    n_in, counts, _ = _op_split(runner)
    body = sum(counts)
    arrays = [feed[t] for t, _, _ in runner.in_specs]
    graph = runner.graph
    runs: list[tuple[float, float, list, list]] = []

    def once() -> float:
        graph.profile(True)  # resets the timers
        t0 = time.perf_counter_ns()
        runner.run_arrays(arrays, threads)
        wall = time.perf_counter_ns() - t0
        ns, loop = graph.times_ns()
        node = sum(ns[n_in:n_in + body]) + loop * body / max(len(ns), 1)
        runs.append((node, wall - sum(ns) - loop, ns[:n_in], ns[n_in + body:]))
        return node
    return once, runs


def _measure_cpu(shapes: list[Shape], threads: int, mode: str) -> tuple[list[Sample], dict]:
    """Samples of `shapes` on the CPU at `threads`, and the edge measurements: "overhead" (per shape, ns),
    "upload"/"download" ((bytes, ns) per converted tensor)."""
    probes = [_cpu_probe(s, threads) for s in shapes]
    try:
        times = _rounds([p for p, _ in probes], mode)
    finally:
        for s in shapes:
            _cpu_plan(s)[0].segments[0].runner.graph.profile(False)
    samples, edges = [], {"overhead": [], "upload": [], "download": []}
    for s, (_, runs), ts in zip(shapes, probes, times, strict=True):
        plan, _, name = _cpu_plan(s)
        runner = plan.segments[0].runner
        runs = runs[-len(ts):]
        n_in, _, n_out = _op_split(runner)
        edges["overhead"].append(statistics.median(r[1] for r in runs))
        ins8 = [t for t, _, dt in runner.in_specs if np.dtype(dt).itemsize == 1]
        outs8 = [t for t, _, dt in runner.out_specs if np.dtype(dt).itemsize == 1]
        if n_in == len(ins8):
            for k, t in enumerate(ins8):
                edges["upload"].append((_nbytes(plan.info, t), statistics.median(r[2][k] for r in runs)))
        if n_out == len(outs8):
            for k, t in enumerate(outs8):
                edges["download"].append((_nbytes(plan.info, t), statistics.median(r[3][k] for r in runs)))
        node = next(n for n in plan.g.nodes if n.name == name)
        samples.append(Sample(s, node_work(plan.g, plan.info, node), float(np.median(ts)), _tail(ts)))
    return samples, edges


# --- Vulkan ---------------------------------------------------------------------------------------------------

CHAIN = 3  # dispatches of the node in the long sequence (_measure_vulkan)


def _vk_sequence(dev, runner, repeats: int):
    """The one-node segment's commands as VulkanSegment records them (barrier, uploads, barrier + dispatch per
    program, barrier, downloads, barrier), with the node's dispatches `repeats` times (0: none), each after a
    barrier."""
    from ..model.lowering import alias_roots
    from ..vulkan.segment import _bind

    root = alias_roots(runner.layers)
    bufs = dict(runner.const_bufs)
    bufs.update({root.get(t, t): b for t, b in runner.in_buffers.items()})
    bufs.update({root.get(t, t): b for t, b in runner.out_buffers.items()})
    [lay] = [lay for lay in runner.layers if not lay.alias]
    progs = _bind(lay.build(), [bufs.get(a) or bufs[root.get(a, a)] for a in lay.acts], bufs[root.get(lay.out,
                                                                                                     lay.out)])
    seq = dev.sequence()
    seq.barrier()
    ups = list(dict.fromkeys(runner.in_buffers.values()))
    if ups:
        seq.upload(*ups)
    for _ in range(repeats):
        for prog in progs:
            seq.barrier()
            seq.dispatch(prog)
    seq.barrier()
    seq.download(*dict.fromkeys(runner.out_buffers.values()))
    seq.barrier()
    return seq


def _measure_vulkan(dev, shapes: list[Shape], mode: str) -> tuple[list[Sample], float]:
    """(samples, segment_ns) on a Vulkan device.

    A node's time is the difference between the device times (timestamps before the first and after the last
    command) of two sequences of its one-node segment, one dispatching it CHAIN times and one once, measured
    back to back in each round, divided by CHAIN - 1: a dispatch and the barrier before it, as inside a longer
    segment, without the submit's own cost. That cost is not small and not steady on lavapipe: the device time
    of a sequence without any dispatch was 0-70 us from one round to the next (its queue thread's wake-ups),
    which made a one-dispatch measurement less a copy-only one swing between 0 and 100 us for the same 10 us
    node. segment_ns is the wall time of submit-and-wait of the same sequence without the dispatch, run as a
    session runs it (no timestamps): the fixed cost of one segment, 17-87 us on lavapipe here from one
    calibration to the next (the wall time of the one-dispatch sequence less the chained node time came out 2-4x
    higher: repeated dispatches find warm caches). Without timestamps, wall times stand in for device times."""
    from ..model.plan import Plan, VulkanBackend

    be = VulkanBackend(dev)
    built = []
    for s in shapes:  # build every plan first: pipelines compile on worker threads meanwhile
        g, feed, name = s.graph()
        plan = Plan(g, feed, be, "cpu")
        segs = [seg for seg in plan.segments if seg.device.startswith("vulkan")]
        if len(segs) != 1 or plan.placement.get(name, "").partition(":")[0] != "vulkan":
            raise RuntimeError(f"calibration shape {s.label!r} does not run on {be.name}: {plan.why_host}")
        runner = segs[0].runner
        runner.run(dict(feed))  # the inputs into their buffers
        built.append((s, plan, name, [_vk_sequence(dev, runner, k) for k in (0, 1, CHAIN)]))
    dev.wait_pipelines()
    timed = dev.timestamps

    def run(seq, with_timestamps: bool = timed) -> tuple[float, float]:
        """(device ns, wall ns) of one submit-and-wait."""
        t0 = time.perf_counter_ns()
        with dev.lock:  # as VulkanSegment.run holds it
            ns = seq.run(timed=with_timestamps)
        wall = float(time.perf_counter_ns() - t0)
        return (float(ns) if with_timestamps else wall), wall

    probes, walls = [], []
    for _, _, _, (zero, one, chain) in built:
        mine: list[float] = []
        walls.append(mine)

        def once(zero=zero, one=one, chain=chain, mine=mine) -> float:
            mine.append(run(zero, False)[1])  # as a session runs it: no timestamps
            t1, _ = run(one)
            tk, _ = run(chain)
            return max((tk - t1) / (CHAIN - 1), 1.0)
        probes.append(once)
    times = _rounds(probes, mode, burst=1)
    out = []
    for (s, plan, name, _), ts in zip(built, times, strict=True):
        node = next(n for n in plan.g.nodes if n.name == name)
        out.append(Sample(s, node_work(plan.g, plan.info, node), float(np.median(ts)), _tail(ts)))
    segment = [float(np.median(w[-len(ts):])) for w, ts in zip(walls, times, strict=True)]
    return out, max(0.0, float(np.median(segment)))


def _vulkan_links(dev, mode: str) -> tuple[Link, Link]:
    """(upload, download) of a Vulkan device: the wall time of Buffer.write_nchw / read_nchw, plus the recorded
    copy's device time where the device is not zero-copy, over several tensor sizes."""
    from ..vulkan._layout import packed_words

    rng = np.random.default_rng(0)
    sizes = [(1, 16, 8, 8), (1, 32, 28, 28), (1, 24, 56, 56), (1, 3, 224, 224)]
    if mode == "full":
        sizes += [(1, 64, 1, 1), (1, 96, 14, 14), (1, 16, 112, 112), (1, 1280, 7, 7)]
    up, down = [], []
    for shape in sizes:
        x = rng.integers(0, 256, shape).astype(np.uint8)
        b = dev.buffer(4 * packed_words(shape), staged=True)
        cu = cd = 0.0
        if not b.direct:
            su, sd = dev.sequence(), dev.sequence()
            su.upload(b)
            su.barrier()
            sd.barrier()
            sd.download(b)
            sd.barrier()
            if dev.timestamps:
                cu = float(np.median(_repeat(lambda s=su: float(s.run(timed=True)), "quick")))
                cd = float(np.median(_repeat(lambda s=sd: float(s.run(timed=True)), "quick")))

        def w(b=b, x=x) -> float:
            t0 = time.perf_counter_ns()
            b.write_nchw(x)
            return float(time.perf_counter_ns() - t0)

        def r(b=b, shape=shape) -> float:
            t0 = time.perf_counter_ns()
            b.read_nchw(shape, np.uint8)
            return float(time.perf_counter_ns() - t0)
        nbytes = int(np.prod(shape))
        up.append((nbytes, float(np.median(_repeat(w, mode))) + cu))
        down.append((nbytes, float(np.median(_repeat(r, mode))) + cd))
    return _fit_link(up), _fit_link(down)


# --- host -----------------------------------------------------------------------------------------------------

def _measure_host(shapes: list[Shape], mode: str) -> list[Sample]:
    """Wall time of a HostSegment running each shape's node on values prepared once."""
    from ..model.plan import HostSegment, interpret, trace

    probes, works = [], []
    for s in shapes:
        g, feed, name = s.graph()
        info = trace(g, feed)
        node = next(n for n in g.nodes if n.name == name)
        seg = HostSegment(g, [node], "cpu")
        values = dict(g.consts)
        values.update(feed)
        interpret(g, values, "cpu", g.nodes[:g.nodes.index(node)])  # what the node reads (a shuffle's reshape)

        def once(seg=seg, values=values) -> float:
            t0 = time.perf_counter_ns()
            seg.run(values)
            return float(time.perf_counter_ns() - t0)
        probes.append(once)
        works.append(node_work(g, info, node))
    times = _rounds(probes, mode)
    return [Sample(s, w, float(np.median(ts)), _tail(ts)) for s, w, ts in zip(shapes, works, times, strict=True)]


# --- the entry ------------------------------------------------------------------------------------------------

def _log_samples(samples: list[Sample], log) -> None:
    if log:
        for s in samples:
            log(f"  {s.shape.op_class:11s} {s.shape.label:40s} {s.ns / 1e3:9.2f} us")


def _fit_all(samples: list[Sample], tile: tuple[int, int], device: str, log) -> dict[str, ClassModel]:
    classes = {}
    for c in CLASSES:
        mine = [(s.work, s.ns) for s in samples if s.work.op_class == c]
        try:
            classes[c] = fit_class(mine, tile)
        except ValueError as e:
            raise RuntimeError(f"calibration of {device}: op class {c!r}: {e}") from None
        if log:
            m = classes[c]
            log(f"  {device} {c:11s} fixed {m.fixed_ns / 1e3:7.2f} us  {m.ns_per_mac * 1e3:8.3f} ps/MAC  "
                f"{m.ns_per_byte:7.4f} ns/B  error {100 * m.error:5.1f}% ({m.samples} shapes)")
    return classes


def _check_classes(samples: list[Sample], device: str) -> None:
    """Each sample must land in the class its shape was listed under (else the grid is wrong)."""
    for s in samples:
        if s.work.op_class != s.shape.op_class:
            raise RuntimeError(f"internal: calibration shape {s.shape.label!r} of {device} is {s.work.op_class}, "
                               f"listed as {s.shape.op_class}")


def calibrate_device(device: str, threads: int = 1, mode: str = "quick",
                     log: Callable[[str], None] | None = None) -> DeviceProfile:
    """Calibrate one device of this machine: "cpu" (the native CPU graph, default ISA variant, at `threads`
    threads), "vulkan:<index>" (or "vulkan": the default Vulkan device) or "host" (the numpy interpreter).

    `mode`: "quick" (3-5 shapes per op class) or "full" (9-15). `log`: an optional callable taking progress lines.
    Returns a DeviceProfile that profile.device_from_json(entry.to_json()) accepts, with a model for every op
    class. Raises ValueError for an unknown device, mode or thread count; VulkanUnavailableError (from
    vkinfer._vk) when a Vulkan device is asked for and Vulkan is missing."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    kind, _, which = device.partition(":")
    t0 = time.perf_counter()
    if kind == "cpu" and not which:
        entry = _calibrate_cpu(threads, mode, log)
    elif kind == "vulkan":
        entry = _calibrate_vulkan(which, mode, log)
    elif device == "host":
        entry = _calibrate_host(mode, log)
    else:
        raise ValueError(f"cannot calibrate device {device!r}: expected \"cpu\", \"vulkan:<index>\" or \"host\"")
    entry = device_from_json(entry.to_json())  # the same checks a profile file gets
    if log:
        log(f"{entry.device} (threads {entry.threads}): calibrated in {time.perf_counter() - t0:.2f} s")
    return entry


# Whole small models timed operator by operator (their native graph's timers): each node inside a model is a
# sample measured in the conditions a prediction is for, its inputs just written by the node before it and
# every other node's code and data competing for the caches. Isolated microbenchmarks alone predicted the
# nodes of real models 25-50% low (a 13 us tiny_cnn run predicted at 9 us; MobileNetV1 0.25/32 41 us at 31
# us). The field models are built offline in well under a second each (vkinfer.models.field_zoo).
MODEL_SAMPLES = {"quick": ("ds_cnn_kws", "mobilenet_v2_kws", "resnet8", "mobilenet_v1_vww"),
                 "full": ("ds_cnn_kws", "mobilenet_v2_kws", "resnet8", "mobilenet_v1_vww", "tiny_conv")}


def _model_samples(threads: int, mode: str) -> tuple[list[Sample], list[float]]:
    """Per-node samples from whole field models on the CPU (MODEL_SAMPLES; full: int8 and uint8), and per model
    the per-run cost outside the native operators when run through InferenceSession.run (the public path: its
    input checks and output list cost 1-2 us more than the runner's own call, a fifth of a 7 us MLP run)."""
    from ..model.session import InferenceSession
    from ..models import field_zoo

    out: list[Sample] = []
    overheads: list[float] = []
    runs = {"quick": 30, "full": 100}[mode]
    for name in MODEL_SAMPLES[mode]:
        for dtype in ("int8", "uint8") if mode == "full" else ("int8",):
            build = field_zoo.FIELD_MODELS.get(name) or getattr(field_zoo, name)
            sess = InferenceSession(build(0, dtype), device="cpu", threads=threads)
            if sess._fast is None or sess._fast[3] is None:
                continue  # not one native call: nothing to attribute
            plan, ins = sess._fast[0], sess._fast[1]
            runner = sess._fast[3]
            feed = field_zoo.field_inputs(name, 0, dtype)
            arrays = [feed[t] for t, _, _ in ins]
            n_in, counts, _ = _op_split(runner)
            for _ in range(5):
                runner.run_arrays(arrays, threads)
            per_run: list[list[float]] = []
            outside: list[float] = []
            for _ in range(runs):
                runner.graph.profile(True)  # resets the timers
                t0 = time.perf_counter_ns()
                sess.run(None, feed)  # the public path: this runner, one native call
                wall = time.perf_counter_ns() - t0
                ns, loop = runner.graph.times_ns()
                outside.append(wall - sum(ns) - loop)
                share = loop / max(len(ns), 1)
                at, row = n_in, []
                for k in counts:
                    row.append(sum(ns[at:at + k]) + share * k)
                    at += k
                per_run.append(row)
            runner.graph.profile(False)
            overheads.append(float(np.median(outside)))
            for i, lay in enumerate(runner.layers):
                if lay.alias or not counts[i]:
                    continue
                ts = [r[i] for r in per_run]
                out.append(Sample(None, node_work(plan.g, plan.info, lay.node), float(np.median(ts)), _tail(ts)))
    return out, overheads


def _calibrate_cpu(threads: int, mode: str, log) -> DeviceProfile:
    samples, edges = _measure_cpu(grid("cpu", mode), threads, mode)
    _log_samples(samples, log)
    _check_classes(samples, "cpu")
    in_models, overheads = _model_samples(threads, mode)
    samples = samples + in_models
    tile = pick_tile(samples, CPU_TILES)
    if log:
        log(f"  cpu tile {tile[0]}x{tile[1]}")
    classes = _fit_all(samples, tile, "cpu", log)
    # Each GEMM-like class then gets its own tile when that fits it better: the depthwise kernel vectorises
    # channels in 16s while the GEMM tile is 4 rows x 32 channels (avx512vnni), and channel tails cost a copy
    # per tap (an 8-channel depthwise layer took 71 ns per pixel against 15 ns for 16 channels).
    for c in TILED:
        mine = [(s.work, s.ns) for s in samples if s.work.op_class == c]
        own = pick_tile(mine, CPU_TILES, (c,))
        if own != tile:
            m = fit_class(mine, own)
            if m.error < classes[c].error:
                classes[c] = replace(m, tile=own)
                if log:
                    log(f"  cpu {c} tile {own[0]}x{own[1]}: error {100 * m.error:.1f}%")
    # Per segment: the public run's cost outside the operators where whole models gave it, else the runner's.
    segment = float(np.median(overheads)) if overheads else float(np.median(edges["overhead"]))
    upload = _fit_link(edges.get("upload", []))
    return DeviceProfile("cpu", "cpu", threads, cpu_identity(), max(0.0, segment),
                         upload, _fit_link(edges.get("download", [])), tile,
                         float(np.median([s.tail for s in samples])), classes)


def _calibrate_vulkan(which: str, mode: str, log) -> DeviceProfile:
    from .. import _vk
    from .machine import vulkan_identity

    dev = _vk.get_device(int(which) if which.isdigit() else (which or None))
    name = f"vulkan:{dev.info.index}"
    if log:
        log(f"{name}: {dev.info.name}")
    samples, seg = _measure_vulkan(dev, grid("vulkan", mode), mode)
    _log_samples(samples, log)
    _check_classes(samples, name)
    classes = _fit_all(samples, VULKAN_TILE, name, log)
    up, down = _vulkan_links(dev, mode)
    return DeviceProfile(name, "vulkan", 1, vulkan_identity(dev.info.index), seg, up, down, VULKAN_TILE,
                         float(np.median([s.tail for s in samples])), classes)


def _calibrate_host(mode: str, log) -> DeviceProfile:
    samples = _measure_host(grid("host", mode), mode)
    _log_samples(samples, log)
    _check_classes(samples, "host")
    classes = _fit_all(samples, HOST_TILE, "host", log)
    return DeviceProfile("host", "host", 1, host_identity(), 0.0, Link(0.0, 0.0), Link(0.0, 0.0), HOST_TILE,
                         float(np.median([s.tail for s in samples])), classes)


__all__ = ["calibrate_device", "fit_class", "grid", "GRID", "Shape", "MODES", "MIN_SAMPLES", "VULKAN_TILE"]
