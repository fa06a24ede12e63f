"""Stand-ins for large tensors in the trace: an element-wise op (or a global pool) on inputs over `SLAB_BYTES` runs its
kernel on a slab of them (every broadcast axis cut to one element, the quantization axis kept; a global pool's
spatial axes cut to one), which checks the node as the kernel does and gives the output's dtype; the output is the
slab's result broadcast (a view: no memory) to the full shape, which the trace checks against the size limits.

Why: the trace (vkinfer/model/interpreter.py) otherwise runs these kernels on whole activations, and numpy's
float64 intermediates made it the session's largest allocation: QuantizeLinear of a 768 MB batch-65536 input took
10 s, a QLinearGlobalAveragePool of a 1.3 GB tensor 10 GB of RSS (mutated models from ../shared/regressions/hang).
On the trace's zeros (or any input constant along the cut axes) the broadcast result is the kernel's own; otherwise
it stands in like a shape rule's zeros (its values are not used for shapes: see interpreter.trace). Normal models
(tensors under SLAB_BYTES) trace exactly as before.
Other kernels run on a large input are checked for a float64 copy of it (`scratch`), their usual intermediate.
"""

from __future__ import annotations

import numpy as np

from .graph import Node

SLAB_BYTES = 1 << 20

# op -> the data inputs cut to a slab (others are parameters: scales, zero points, bounds).
_UNARY = ("Relu", "Sigmoid", "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Abs", "Neg", "Exp", "Log", "Sqrt",
          "Erf", "Softplus", "Softsign", "Elu", "Selu", "Celu", "Gelu", "Mish", "Swish", "Floor", "Ceil", "Round",
          "Reciprocal", "Sign", "Not", "IsNaN", "IsInf", "Clip", "Cast", "Identity", "Dropout",
          "QuantizeLinear", "DequantizeLinear", "com.microsoft:QLinearLeakyRelu", "com.microsoft:QLinearSigmoid")
_BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "PRelu", "Where", "Equal", "Greater",
           "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "BitwiseAnd", "BitwiseOr", "BitwiseXor")
DATA: dict[str, tuple[int, ...] | None] = {op: (0,) for op in _UNARY}
DATA.update({op: None for op in _BINARY})  # None: every input
DATA.update({"com.microsoft:QLinearAdd": (0, 3), "com.microsoft:QLinearMul": (0, 3), "vkinfer:Table": (0,),
             "vkinfer:Table2": (0, 1)})
GLOBAL = ("GlobalAveragePool", "GlobalMaxPool", "com.microsoft:QLinearGlobalAveragePool")
# Ops over the axes from `axis` on (one axis from opset 13, all of them before): the axes ahead of it are cut. A
# [1048576, 8] Softmax traced whole took 8.8 s (its ORT-exact float32 exp in numpy); its slab is [1, 8].
ROWS = ("Softmax", "LogSoftmax", "Hardmax", "com.microsoft:QLinearSoftmax", "vkinfer:TFLiteSoftmax")
# Kernels whose intermediates are their output's size (moves, copies): no float64 copy assumed.
MOVES = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Concat", "Split", "Slice", "Gather",
                   "Pad", "Tile", "Expand", "DepthToSpace", "SpaceToDepth", "Shape", "Size", "MaxPool",
                   "vkinfer:ZeroInsert", "com.microsoft:QLinearConcat"})


def large(args: list) -> bool:
    """Whether an input is over SLAB_BYTES."""
    return any(isinstance(v, np.ndarray) and v.nbytes > SLAB_BYTES for v in args)


def _cut(v: np.ndarray, keep: set[int]) -> np.ndarray:
    return v[tuple(slice(None) if i in keep or d <= 1 else slice(0, 1) for i, d in enumerate(v.shape))]


def slab(node: Node, args: list, kernel) -> tuple[list, list] | None:
    """(outputs as broadcast views, their (shape, dtype)) of an element-wise op or global pool on large inputs,
    from `kernel(node, slab args)`; None where the op has no slab form (the kernel runs on the whole inputs)."""
    op = node.op
    if not large(args) or "block_size" in node.attrs:
        return None
    if op in GLOBAL:
        x = args[0]
        if not isinstance(x, np.ndarray) or x.ndim < 3:
            return None
        last = bool(node.attrs.get("channels_last", 0))
        spatial = range(1, x.ndim - 1) if last else range(2, x.ndim)
        small = [x[tuple(slice(0, 1) if i in spatial or i == 0 else slice(None) for i in range(x.ndim))], *args[1:]]
        outs = kernel(node, small)  # (1, C, 1, ...): the batch axis too is cut, and given back
        if any(getattr(o, "ndim", 0) != x.ndim for o in outs):
            return None
        full = [(x.shape[0], *o.shape[1:]) for o in outs]
        return [np.broadcast_to(o, f) for o, f in zip(outs, full, strict=True)], \
            [(f, o.dtype) for o, f in zip(outs, full, strict=True)]
    if op in ROWS:
        return _rows(node, args, kernel)
    if op not in DATA:
        return None
    data = DATA[op] if DATA[op] is not None else tuple(range(len(args)))
    arrays = [args[i] for i in data if i < len(args) and isinstance(args[i], np.ndarray)]
    if not arrays:
        return None
    full = np.broadcast_shapes(*(v.shape for v in arrays))  # ValueError where the kernel would refuse them
    keep: set[int] = set()
    if op in ("QuantizeLinear", "DequantizeLinear") and len(args) > 1 and np.size(args[1]) > 1:
        axis = int(node.attrs.get("axis", 1))
        keep.add(axis + args[0].ndim if axis < 0 else axis)  # per-axis parameters: that axis whole
    small = list(args)
    for i in data:
        if i < len(args) and isinstance(args[i], np.ndarray):
            small[i] = _cut(args[i], keep)
    outs = kernel(node, small)
    shaped = [(full if getattr(o, "ndim", -1) == len(full) else None, o) for o in outs]
    if any(s is None for s, _ in shaped):
        return None  # an output not of the broadcast shape: not element-wise after all
    views = [np.broadcast_to(o, s) for s, o in shaped]
    return views, [(tuple(s), o.dtype) for s, o in shaped]


def _rows(node: Node, args: list, kernel) -> tuple[list, list] | None:
    """`slab` of a ROWS op: every axis ahead of its axis cut to one (an absent axis read as 1, which keeps at least
    the axes any opset's default reduces over); None where no axis can be cut."""
    x = args[0]
    try:
        a = int(node.attrs.get("axis", 1))
    except (TypeError, ValueError):
        return None  # the kernel's own error
    if not isinstance(x, np.ndarray) or not -x.ndim <= a < x.ndim:
        return None
    a += x.ndim if a < 0 else 0
    if a == 0 or all(d <= 1 for d in x.shape[:a]):
        return None
    outs = kernel(node, [x[tuple(slice(0, 1) if i < a else slice(None) for i in range(x.ndim))], *args[1:]])
    if any(getattr(o, "ndim", -1) != x.ndim for o in outs):
        return None
    return [np.broadcast_to(o, x.shape) for o in outs], [(x.shape, o.dtype) for o in outs]


def scratch(node: Node, args: list) -> list:
    """A float64 copy of the largest input, for a kernel without a slab form run on large inputs."""
    if node.op in MOVES or not large(args):
        return []
    big = max((v for v in args if isinstance(v, np.ndarray)), key=lambda v: v.size)
    return [("float64 intermediate (8 bytes per element of its largest input)", big.shape, 8)]
