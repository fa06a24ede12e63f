"""What a node costs: its op class and the few numbers that drive its time (the dispatcher's features).

Every node of a traced graph maps to one `Work`: an op class (the calibrated model that predicts it) and
its GEMM view (`rows` output pixels x `m` output channels x `k` reduction length), bytes moved and output
elements. A device's model for the class turns that into nanoseconds (vkinfer/dispatch/profile.py):

    time = fixed + ns_per_mac * MACs(tiled) + ns_per_byte * bytes

with MACs rounded up to the device's tile grid (a GPU computes whole 32-row tiles whether or not the rows
exist; the CPU's tile is 1x1). Op classes, chosen because their MAC rates differ by up to 20x on one core:

- gemm:        1x1 convolutions (group 1), QGemm and matmuls with at least GEMV_ROWS output rows;
- gemv:        the same with fewer rows (fully connected heads): weight-bandwidth bound;
- conv:        kxk, strided, dilated and grouped (not depthwise) convolutions;
- depthwise:   group == input channels == output channels (3x3 and 5x5 share the model; k says which);
- elementwise: adds, muls, tables, (de)quantize, softmax: per element;
- pool:        max/average/global-average pooling: per window element;
- move:        concat, channel shuffle/transpose, pad, reshape: bytes only.
Every op the importers accept has one class: an op defined in its own file (vkinfer/reference/<op>.py) in its
OpDef, the others listed here (CONV_OPS, GEMM_OPS, POOL_OPS and REDUCE_OPS, MOVE_OPS,
ELEMENTWISE_OPS: `OP_CLASS`); `node_work` raises ValueError naming a node whose op is in none of them, so a new
op is filed where it belongs instead of defaulting to elementwise.
Within a class, a CPU entry may predict a node by its kernel path's model instead (path_keys: the weight path,
u8s8 or int16; grouped, dilated or dense convolutions; the op of the other classes).
A reshape that a device's lowering makes an alias (the bytes stay where they are) costs nothing there (the
planner asks the lowering: vkinfer/dispatch/placement.py).
"""

from __future__ import annotations

import dataclasses
import math
import weakref

from ..model.graph import Graph, Node
from ..model.op_table import OPS
from ..reference._opdef import definitions

CLASSES = ("gemm", "gemv", "conv", "depthwise", "elementwise", "pool", "move")
GEMV_ROWS = 8  # below this many output rows a GEMM tile is mostly waste (vkinfer/vulkan/qlinear_conv.py)

# Every op the importers accept (vkinfer/model/op_table.py's OPS) is filed under exactly one class below; a node
# of an op in none of them is an error (node_work), never a silent default.
# Convolutions, with the input holding their weights; transposed ones' weights are (C, M/group, kH, kW).
CONV_WEIGHTS = {"ConvInteger": 1, "Conv": 1, "DeformConv": 1,
                "CausalConvWithState": 1, "ConvTranspose": 1, "vkinfer:QLinearConvTranspose": 3}
TRANSPOSED_CONV = ("ConvTranspose", "vkinfer:QLinearConvTranspose", "vkinfer:QDQConvTranspose")
CONV_OPS = tuple(CONV_WEIGHTS)
GEMM_OPS = ("MatMulInteger", "Gemm", "MatMul")
POOL_OPS = ("MaxPool", "GlobalAveragePool", "AveragePool", "LpPool", "GlobalMaxPool")
# Reductions cost as global pools: the window is the input's elements per output element.
REDUCE_OPS = ("ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMean", "ReduceProd", "ReduceSum",
              "ReduceSumSquare", "com.microsoft:QLinearReduceMean")
MOVE_OPS = ("Concat", "Transpose", "Pad", "Reshape", "Flatten", "Squeeze",
            "Unsqueeze", "Identity", "Slice", "Split", "Gather", "DepthToSpace", "SpaceToDepth", "Tile", "Expand",
            "Resize", "vkinfer:ZeroInsert", "Upsample", "Dropout", "BitCast", "Shape", "Size", "CenterCropPad",
            "Compress", "GatherElements", "GatherND", "ScatterElements", "ScatterND", "TensorScatter",
            "ReverseSequence", "Trilu", "MaxUnpool")
# Per output element: arithmetic, activations and tables (8-bit and float), (de)quantization, softmax and the
# normalizations, comparisons and logic, casts, generators; and, costed the same way for want of a closer class,
# the ops none of the others describes (recurrences, attention, transforms, sorting, sampling, losses).
ELEMENTWISE_OPS = (
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Mean", "Sum", "Abs", "Neg", "Sign", "Reciprocal",
    "Sqrt", "Exp", "Log", "Erf", "Floor", "Ceil", "Round", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh",
    "Cosh", "Asinh", "Acosh", "Atanh", "Relu", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Gelu", "Mish",
    "Sigmoid", "HardSigmoid", "HardSwish", "Swish", "SwiGLU", "Softplus", "Softsign", "Tanh", "ThresholdedRelu",
    "Shrink", "Clip", "vkinfer:Table", "vkinfer:Table2",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
    "Softmax", "LogSoftmax", "Hardmax", "com.microsoft:QLinearSoftmax",
    "BatchNormalization", "InstanceNormalization", "GroupNormalization", "RMSNormalization",
    "LpNormalization", "MeanVarianceNormalization", "LRN",
    "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "Not", "IsInf", "IsNaN",
    "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "Cast", "CastLike",
    "ConstantOfShape", "EyeLike", "Range", "OneHot", "BlackmanWindow", "HammingWindow", "HannWindow",
    "MelWeightMatrix", "AttributeHasValue", "CumSum", "CumProd",
    "Einsum", "Attention", "LinearAttention", "RotaryEmbedding", "RNN", "GRU", "DFT", "STFT", "Det",
    "TopK", "Unique", "NonZero", "NonMaxSuppression", "GridSample", "AffineGrid", "RoiAlign", "Col2Im",
    "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss",
)
# The ops defined in their own files (vkinfer/reference/<op>.py) carry their class in their OpDef.
_defs = definitions().values()
CONV_WEIGHTS.update({d.op: d.weights for d in _defs if d.cost == "conv"})
CONV_OPS = tuple(CONV_WEIGHTS)
GEMM_OPS += tuple(d.op for d in _defs if d.cost == "gemm")
POOL_OPS += tuple(d.op for d in _defs if d.cost == "pool")
REDUCE_OPS += tuple(d.op for d in _defs if d.cost == "reduce")
MOVE_OPS += tuple(d.op for d in _defs if d.cost == "move")
ELEMENTWISE_OPS += tuple(d.op for d in _defs if d.cost == "elementwise")
OP_CLASS: dict[str, str] = {}
for _cls, _ops in (("conv", CONV_OPS), ("gemm", GEMM_OPS), ("pool", POOL_OPS + REDUCE_OPS), ("move", MOVE_OPS),
                   ("elementwise", ELEMENTWISE_OPS)):
    for _op in _ops:
        if _op in OP_CLASS:
            raise ValueError(f"vkinfer/dispatch/costs.py files op {_op!r} twice ({OP_CLASS[_op]}, {_cls})")
        OP_CLASS[_op] = _cls  # the class family: conv covers depthwise, gemm covers gemv (node_work decides)
del _cls, _ops, _op
# Every op the importers may emit has a class, checked when this module loads: a new op without one fails at
# import, not when some model first reaches the dispatcher.
_unclassed = sorted(set(OPS) - set(OP_CLASS))
if _unclassed:
    raise ImportError(f"ops without a cost class: {_unclassed} (an OpDef's `cost` in vkinfer/reference/<op>.py, or "
                      f"a list in vkinfer/dispatch/costs.py)")


@dataclasses.dataclass(frozen=True)
class Work:
    """A node's cost features: op class, GEMM view (rows x m x k, 0 when not a GEMM), bytes of activations
    read and written plus constants read, and output elements."""

    op_class: str
    rows: int = 0
    m: int = 0
    k: int = 0
    bytes: int = 0
    out_elems: int = 0
    window: int = 1  # pool: elements per output element
    groups: int = 1  # conv: output channels are tiled per group
    # The kernel path's features (path_keys): the op, and for a convolution or matrix product with constant
    # 8-bit weights the range of (weights - their zero point), None otherwise; conv: dilated.
    op: str = ""
    wlo: int | None = None
    whi: int | None = None
    dilated: bool = False
    rank: int = 0  # move: the output's rank (a channel shuffle's 5-D transpose against a 4-D layout change)

    @property
    def macs(self) -> int:
        """Multiply-accumulates (pool: window reads; elementwise: output elements)."""
        if self.op_class in ("gemm", "gemv", "conv", "depthwise"):
            return self.rows * self.m * self.k
        if self.op_class == "pool":
            return self.out_elems * self.window
        if self.op_class == "elementwise":
            return self.out_elems
        return 0

    def tiled_macs(self, tile: tuple[int, int]) -> int:
        """MACs over the device's tile grid: rows and output channels rounded up to (tile rows, tile channels)."""
        tr, tc = tile
        if self.op_class in ("gemm", "gemv", "conv", "depthwise") and (tr > 1 or tc > 1):
            g = self.groups if self.op_class == "conv" else 1
            return -(-self.rows // tr) * tr * (g * -(-(self.m // g) // tc) * tc) * self.k
        return self.macs


# The CPU's kernel paths (cpu_fallback/src/conv.c): a convolution or matrix product runs the variant's u8s8
# kernels when every (weight - weight zero point) lies in the variant's range (AVX-512 VNNI: [-128, 127]; AVX2:
# [-64, 64]; none on scalar builds), else the int16 kernels, 1.4-3x slower per MAC here (resnet8's uint8 3x3
# convolutions: 46 us against 14 us for the int8 model's). Which range a machine has is measured by the
# calibration (`u8s8` in a CPU profile entry); a node carries its weights' range (Work.wlo, Work.whi).
WEIGHT_PATHS = ("u8s8", "i16")
# The x86 depthwise kernels' channel block: channels past a multiple of it take a per-pixel tail path (vww's 48x48x8
# layer: 71 ns per pixel, 16 channels 15 ns). A variant with another block still gets both paths fitted from its
# own samples; a split at the wrong place only makes them alike.
DW_BLOCK = 16
_WEIGHT_INPUTS = {"ConvInteger": (1, 3), "MatMulInteger": (1, 3)}  # (weights, their zero point); QLinear*: (3, 5)
_wrange_cache: dict[tuple[int, int], tuple[weakref.ref, object, tuple[int, int] | None]] = {}


def _weight_range(g: Graph, node: Node) -> tuple[int | None, int | None]:
    """(min, max) of (weights - weight zero point) of a node with constant 8-bit weights, else (None, None).
    A per-channel zero point bounds the range from both sides (exact for per-tensor and for symmetric weights).
    Memoised per weights array (planning a 500-node graph calls this for every node)."""
    wi, zi = _WEIGHT_INPUTS.get(node.op, (3, 5))
    if node.op not in _WEIGHT_INPUTS and not (node.op in CONV_WEIGHTS and CONV_WEIGHTS[node.op] == 3
                                              or node.op in GEMM_OPS):
        return None, None
    if node.op in TRANSPOSED_CONV or len(node.inputs) <= wi:
        return None, None
    w = g.consts.get(node.inputs[wi])
    if w is None or w.dtype.itemsize != 1 or w.dtype.kind not in "iu" or w.size == 0:
        return None, None
    z = g.consts.get(node.inputs[zi]) if len(node.inputs) > zi and node.inputs[zi] else None
    key = (id(w), id(z))
    hit = _wrange_cache.get(key)
    if hit is not None and hit[0]() is w and hit[1] is z:
        r = hit[2]
    else:
        zlo, zhi = (0, 0) if z is None or z.size == 0 else (int(z.min()), int(z.max()))
        r = (int(w.min()) - zhi, int(w.max()) - zlo)
        try:
            _wrange_cache[key] = (weakref.ref(w, lambda _, k=key: _wrange_cache.pop(k, None)), z, r)
        except TypeError:  # an array type without weak references: not memoised
            pass
    return r


def path_keys(work: Work, u8s8: dict | None) -> list[str]:
    """The kernel path keys of `work`, the most specific first (a device profile's per-path models are looked up in
    this order, then the op class's). `u8s8`: the CPU's u8s8 weight ranges ({"igemm": [lo, hi], "depthwise": [lo,
    hi]}, a kind absent where the variant has no u8s8 kernel), or None where unknown (then no weight path).

    - gemm, gemv, conv, depthwise with constant 8-bit weights: "<class>/u8s8" or "<class>/i16" (the weight path);
      conv also "conv/<path>/grouped", "conv/<path>/dilated" or "conv/<path>/dense" first (grouped and dilated
      layers take the generic per-tap kernel, dense kxk ones merged rows: conv.c), depthwise
      "depthwise/<path>/tail" or ".../full" first (channels past a multiple of DW_BLOCK);
    - the others: "<class>/<op>" (each op is its own kernel); moves "move/<op>/<rank>d" first."""
    c = work.op_class
    if c in ("gemm", "gemv", "conv", "depthwise"):
        if work.wlo is None or u8s8 is None:
            return []
        rng = u8s8.get("depthwise" if c == "depthwise" else "igemm")
        wp = "u8s8" if rng and rng[0] <= work.wlo and work.whi <= rng[1] else "i16"
        if c == "conv":
            sub = "grouped" if work.groups > 1 else "dilated" if work.dilated else "dense"
            return [f"conv/{wp}/{sub}", f"conv/{wp}"]
        if c == "depthwise":
            return [f"depthwise/{wp}/{'tail' if work.m % DW_BLOCK else 'full'}", f"depthwise/{wp}"]
        return [f"{c}/{wp}"]
    if not work.op:
        return []
    if c == "move" and work.rank:  # the transpose kernel loops per axis: 5-D shuffles cost 5-10x a 4-D move's per byte
        return [f"move/{work.op}/{work.rank}d", f"move/{work.op}"]
    return [f"{c}/{work.op}"]


def _nbytes(info: dict, name: str) -> int:
    shape, dt = info[name]
    return math.prod(shape) * dt.itemsize


def node_work(g: Graph, info: dict, node: Node) -> Work:
    """The cost features of `node` from the traced shapes `info` (name -> (shape, dtype))."""
    op = node.op
    outs = [o for o in node.outputs if o and o in info]
    out_elems = sum(math.prod(info[o][0]) for o in outs)
    acts = [t for t in node.inputs if t and t not in g.consts and t in info]
    consts = [t for t in node.inputs if t and t in g.consts]
    nbytes = sum(_nbytes(info, t) for t in acts) + sum(_nbytes(info, o) for o in outs) + sum(
        int(g.consts[t].nbytes) for t in consts)
    if op in CONV_OPS:
        w = g.consts.get(node.inputs[CONV_WEIGHTS[op]])
        x_shape = info[node.inputs[0]][0]
        o_shape = info[outs[0]][0] if outs else ()
        if w is not None and len(w.shape) == 4 and len(x_shape) == 4 and len(o_shape) == 4:
            group = int(node.attrs.get("group", 1))
            if op in TRANSPOSED_CONV:  # every input pixel times every weight of its group: rows are input pixels
                c, mg, kh, kw = (int(v) for v in w.shape)
                rows = int(x_shape[0]) * int(x_shape[2]) * int(x_shape[3])
                return Work("conv", rows, mg * group, c // group * kh * kw, nbytes, out_elems, groups=group, op=op)
            m, cg, kh, kw = (int(v) for v in w.shape)
            rows = int(o_shape[0]) * int(o_shape[2]) * int(o_shape[3])
            wlo, whi = _weight_range(g, node)
            if group > 1 and group == int(x_shape[1]) == m:
                return Work("depthwise", rows, m, kh * kw, nbytes, out_elems, op=op, wlo=wlo, whi=whi)
            if kh == kw == 1 and group == 1:
                return Work("gemm" if rows >= GEMV_ROWS else "gemv", rows, m, cg, nbytes, out_elems, op=op, wlo=wlo,
                            whi=whi)
            dil = any(int(v) > 1 for v in node.attrs.get("dilations") or ())
            return Work("conv", rows, m, cg * kh * kw, nbytes, out_elems, groups=group, op=op, wlo=wlo, whi=whi,
                        dilated=dil)
    if op in GEMM_OPS and outs:
        a_shape = info[node.inputs[0]][0] if node.inputs[0] in info else ()
        if len(a_shape) >= 2:
            trans_a = op not in ("QLinearMatMul", "MatMulInteger", "MatMul") and bool(node.attrs.get("transA", 0))
            k = int(a_shape[-2] if trans_a else a_shape[-1])
            o_shape = info[outs[0]][0]
            m = int(o_shape[-1]) if o_shape else 1
            rows = max(1, out_elems // max(m, 1))
            wlo, whi = _weight_range(g, node)
            return Work("gemm" if rows >= GEMV_ROWS else "gemv", rows, m, k, nbytes, out_elems, op=op, wlo=wlo,
                        whi=whi)
    if op in CONV_OPS or op in GEMM_OPS:
        # Weights that are not a constant 4-D tensor, or operands without a matrix shape: no GEMM view to cost,
        # so per output element (the elementwise model).
        return Work("elementwise", bytes=nbytes, out_elems=out_elems, op=op)
    if op in POOL_OPS or op in REDUCE_OPS:
        x = node.inputs[0]
        in_elems = math.prod(info[x][0]) if x in info else out_elems
        window = max(1, in_elems // max(out_elems, 1)) if "Global" in op or op in REDUCE_OPS else math.prod(
            int(v) for v in node.attrs.get("kernel_shape") or [1])
        return Work("pool", bytes=nbytes, out_elems=out_elems, window=window, op=op)
    if op in MOVE_OPS:
        return Work("move", bytes=nbytes, out_elems=out_elems, op=op, rank=len(info[outs[0]][0]) if outs else 0)
    if op in ELEMENTWISE_OPS:
        return Work("elementwise", bytes=nbytes, out_elems=out_elems, op=op)
    raise ValueError(f"node {node.name!r}: op {op!r} has no cost class (vkinfer/dispatch/costs.py files every op "
                     f"the importers accept under one of {', '.join(CLASSES)}; add it to the right list)")


def graph_work(g: Graph, info: dict) -> dict[str, Work]:
    """node name -> Work for every node of `g`."""
    return {n.name: node_work(g, info, n) for n in g.nodes}


# One layer of MobileNetV2 1.0/224 per op class (bytes: activations in and out, weights and int32 bias): what
# `vkinfer calibrate` quotes each class's throughput on, and where a device's speed relative to the CPU is
# measured when one of its fits is not trusted (vkinfer/dispatch/profile.py relative_speed).
REFERENCE: dict[str, tuple[str, Work]] = {
    "gemm": ("expand 56x56 24->144", Work("gemm", 3136, 144, 24, 3136 * 24 + 3136 * 144 + 144 * 24 + 144 * 4)),
    "gemv": ("classifier 1280->1000", Work("gemv", 1, 1000, 1280, 1280 + 1000 + 1280 * 1000 + 1000 * 4)),
    "conv": ("stem 224x224 3->32 3x3/2", Work("conv", 12544, 32, 27, 3 * 224 * 224 + 12544 * 32 + 864 + 32 * 4)),
    "depthwise": ("dw 56x56x144 3x3", Work("depthwise", 3136, 144, 9, 2 * 3136 * 144 + 144 * 9 + 144 * 4)),
    "elementwise": ("add 56x56x24", Work("elementwise", bytes=3 * 75264, out_elems=75264)),
    "pool": ("global average pool 7x7x1280", Work("pool", bytes=62720 + 1280, out_elems=1280, window=49)),
    "move": ("channel shuffle 28x28x116", Work("move", bytes=2 * 90944, out_elems=90944)),
}
