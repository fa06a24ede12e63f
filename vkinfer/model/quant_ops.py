"""Quantized-domain ops ONNX Runtime emits, registered into the interpreter's op table (kernels.OPS):
com.microsoft QLinearSoftmax and QLinearReduceMean (host kernels over the numpy references), the attribute
checks of blocked / typed QuantizeLinear and DequantizeLinear (opset 21), and the graph rewrites that let the
devices run what ORT's quantizer and QDQ fusion leave: DQ -> Softmax -> Q becomes QLinearSoftmax (ORT fuses it
at ORT_ENABLE_ALL, measured; passes.fold_qdq calls `fold_softmax`), and QGemm with transA=1 becomes an 8-bit
Transpose of A followed by a QGemm with transA=0 (`split_transposed_a`), which the CPU and Vulkan lowerings take.

QLinearSoftmax and QLinearReduceMean stay on the host: the softmax is a per-row max, a table lookup, a float32
sum and a division per element, and its table depends on the row length, so a device kernel is a new shader and
C operator for an op that runs once per attention block; the reduce mean is rare (ORT has no kernel for it).
"""

from __future__ import annotations

import numpy as np

from ..reference.qlinear_reduce_mean import qlinear_reduce_mean
from ..reference.qlinear_softmax import qlinear_softmax
from .graph import Graph, Node
from .op_table import REQUIRED_INPUTS, _attr, _op

REQUIRED_INPUTS.update({
    "com.microsoft:QLinearSoftmax": (4, (0, 1, 3)),
    "com.microsoft:QLinearReduceMean": (4, (0, 1, 3)),
})

# ONNX TensorProto element types of the 8-bit integers vkinfer quantizes to; anything else is out of scope.
_INT8_TYPES = {2: np.dtype(np.uint8), 3: np.dtype(np.int8)}
_NAMES = {1: "float32", 4: "uint16", 5: "int16", 10: "float16", 16: "bfloat16", 17: "float8e4m3fn",
          18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4", 23: "float4e2m1",
          25: "uint2", 26: "int2"}


def _unsupported(msg: str) -> Exception:
    from .onnx_import import UnsupportedModelError

    return UnsupportedModelError(msg)


def q_block_size(node: Node) -> int:
    """The `block_size` attribute of a QuantizeLinear / DequantizeLinear (0: per tensor or per axis)."""
    b = node.attrs.get("block_size", 0)
    if not isinstance(b, int | np.integer) or b < 0:
        raise ValueError(f"block_size must be an integer >= 0, got {b!r}")
    return int(b)


def q_output_dtype(node: Node, x: list) -> np.dtype | None:
    """QuantizeLinear's output type from `output_dtype` (opset 21; 0 or absent: the zero point's type, else
    uint8). Only uint8 and int8 are in scope: other types raise UnsupportedModelError, a zero point of another
    type TypeError. `saturate` only concerns float8 outputs, so it changes nothing here."""
    t = node.attrs.get("output_dtype", 0)
    if not isinstance(t, int | np.integer):
        raise ValueError(f"output_dtype must be an ONNX element type, got {t!r}")
    if not t:
        return None
    if int(t) not in _INT8_TYPES:
        raise _unsupported(f"QuantizeLinear to {_NAMES.get(int(t), f'ONNX type {t}')}: vkinfer quantizes to uint8 "
                           f"and int8 only")
    dt = _INT8_TYPES[int(t)]
    zp = x[2] if len(x) > 2 else None
    if zp is not None and np.asarray(zp).dtype != dt:
        raise TypeError(f"output_dtype {dt} differs from y_zero_point's type {np.asarray(zp).dtype}")
    return dt


def dq_check_output_dtype(node: Node) -> None:
    """DequantizeLinear's `output_dtype` (opset 23): float32 (1) or absent only."""
    t = node.attrs.get("output_dtype", 0)
    if t not in (0, 1):
        raise _unsupported(f"DequantizeLinear to {_NAMES.get(t, f'ONNX type {t}')}: vkinfer dequantizes to "
                           f"float32 only")


@_op("com.microsoft:QLinearSoftmax")
def _qsoftmax(node, x, memo):
    """QLinearSoftmax (vkinfer/reference/qlinear_softmax.py): attributes `opset` (required, as ORT requires it)
    and `axis` (default -1)."""
    opset = _attr(node, "opset")
    if not isinstance(opset, int | np.integer):
        raise ValueError(f"attribute 'opset' must be an integer, got {opset!r}")
    return [qlinear_softmax(x[0], x[1], x[2] if len(x) > 2 else None, x[3], x[4] if len(x) > 4 else None,
                            axis=node.attrs.get("axis", -1), opset=int(opset))]


@_op("com.microsoft:QLinearReduceMean")
def _qreduce_mean(node, x, memo):
    """QLinearReduceMean (vkinfer/reference/qlinear_reduce_mean.py): attributes `axes` and `keepdims`."""
    return [qlinear_reduce_mean(x[0], x[1], x[2] if len(x) > 2 else None, x[3], x[4] if len(x) > 4 else None,
                                axes=_attr(node, "axes"), keepdims=int(node.attrs.get("keepdims", 1)))]


def fold_softmax(g: Graph, n: Node, x: Node, q: Node) -> Node | None:
    """DQ(x) -> Softmax `n` -> Q as ORT's QDQ fusion makes it: a QLinearSoftmax with `opset` 11 for the pre-13
    Softmax (the input read as 2-D from `axis`, default 1) and 13 after, `axis` written out; only when the DQ and
    the Q have per-tensor constant parameters of one 8-bit type (ORT leaves mixed types in float)."""
    def params(node: Node):
        s = g.consts.get(node.inputs[1])
        z = g.consts.get(node.inputs[2]) if len(node.inputs) > 2 and node.inputs[2] else np.zeros((), np.uint8)
        return s, z

    (xs, xz), (ys, yz) = params(x), params(q)
    if any(v is None for v in (xs, ys)) or xs.size != 1 or ys.size != 1 or xz.size != 1 or yz.size != 1:
        return None
    if xz.dtype != yz.dtype or xz.dtype not in _INT8_TYPES.values() or q.attrs.get("output_dtype", 0):
        return None
    if any(a.attrs.get("block_size", 0) for a in (x, q)):
        return None
    legacy = bool(n.attrs.get("_coerce_2d", False))
    axis = int(n.attrs.get("axis", 1 if legacy else -1))
    return Node("com.microsoft:QLinearSoftmax", n.name, [x.inputs[0], x.inputs[1], x.inputs[2] if len(x.inputs) > 2
                                                         else "", q.inputs[1], q.inputs[2] if len(q.inputs) > 2
                                                         else ""], [q.outputs[0]],
                {"opset": 11 if legacy else 13, "axis": axis})


def split_transposed_a(g: Graph) -> Graph:
    """QGemm(Clamp) with transA=1 -> Transpose(A, perm (1, 0)) then the QGemm with transA=0: the same values
    (the transpose only moves bytes), and the devices' QGemm lowerings take A untransposed. The transpose is
    named after the QGemm, so an A that is not 2-D is reported with the QGemm's name."""
    nodes, changed = [], False
    for n in g.nodes:
        if n.op in ("com.microsoft:QGemm", "vkinfer:QGemmClamp") and n.attrs.get("transA", 0) and n.inputs \
                and n.inputs[0] and n.inputs[0] not in g.consts:
            at = f"{n.name}__transA"
            nodes.append(Node("Transpose", f"{n.name} (transA)", [n.inputs[0]], [at], {"perm": [1, 0]}))
            attrs = dict(n.attrs)
            attrs["transA"] = 0
            nodes.append(Node(n.op, n.name, [at, *n.inputs[1:]], list(n.outputs), attrs))
            changed = True
        else:
            nodes.append(n)
    return Graph(nodes, g.inputs, g.outputs, g.consts) if changed else g
