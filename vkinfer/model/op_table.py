"""The interpreter's node kernels: one function per op type, registered in `OPS`.

A kernel takes (node, input values, memo) and returns the output values, in numpy with ONNX Runtime's exact
CPU numerics (vkinfer/reference/); it never calls a device. `memo` is the node's dict in one executor (what a
kernel prepares once: a convolution's spec), so the graph holds no runtime state.
Importers may only emit ops named here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..reference._opdef import attr as _attr
from ..reference._opdef import check_auto_pad as _check_auto_pad
from ..reference._opdef import definitions
from ..reference.dequantize_linear import dequantize_linear
from ..reference.max_pool import max_pool
from ..reference.quantize_linear import quantize_linear
from .graph import Node

Kernel = Callable[[Node, list, dict], list]
OPS: dict[str, Kernel] = {}
# Shape rules: (node, input values) -> [(shape, dtype) of each output], for the ops whose kernel is too slow
# for the trace (`interpreter.trace`); they check the node as the kernel would, without computing it.
ShapeRule = Callable[[Node, list], list]
SHAPES: dict[str, ShapeRule] = {}
# op -> the inputs whose values its shape rule never reads (only their shapes and dtypes): the trace reuses a rule's
# answer for nodes that differ only in these (a chain of QLinearConvs, each with its own weights, is checked once).
VALUE_FREE: dict[str, tuple[int, ...]] = {
    "com.microsoft:QLinearAdd": (0, 3), "com.microsoft:QLinearMul": (0, 3), "vkinfer:TFLiteAdd": (0, 3),
    "QLinearConv": (0, 3, 8), "vkinfer:QLinearConvClamp": (0, 3, 8), "vkinfer:QDQConvTranspose": (0, 3, 4)}


def _op(*names: str):
    def register(fn: Kernel) -> Kernel:
        for n in names:
            OPS[n] = fn
        return fn
    return register


# Inputs every op's kernel needs: (at least this many inputs, the indices that must not be empty). The
# importers check each node against it (passes.check_graph), so a malformed model fails at import naming the
# node and the input, not inside the kernel.
REQUIRED_INPUTS: dict[str, tuple[int, tuple[int, ...]]] = {
    "QuantizeLinear": (2, (0, 1)), "DequantizeLinear": (2, (0, 1)),
    "MaxPool": (1, (0,)), "Identity": (1, (0,)), "Reshape": (2, (0, 1)), "Flatten": (1, (0,)),
    "Transpose": (1, (0,)), "Squeeze": (1, (0,)), "Unsqueeze": (1, (0,)), "Concat": (1, (0,)),
    "Softmax": (1, (0,)), "Pad": (1, (0,)), "ConvInteger": (2, (0, 1)), "MatMulInteger": (2, (0, 1)),
    "DynamicQuantizeLinear": (1, (0,)), "Cast": (1, (0,)), "Mul": (2, (0, 1)), "Add": (2, (0, 1)),
    "Relu": (1, (0,)), "Clip": (1, (0,)), "GlobalAveragePool": (1, (0,)),
    # Float ops QDQ folding turns into the quantized ones.
    "Conv": (2, (0, 1)), "MatMul": (2, (0, 1)), "Gemm": (2, (0, 1)), "AveragePool": (1, (0,)),
    "Sigmoid": (1, (0,)),
}
# The ops defined in their own files (vkinfer/reference/<op>.py, found by name: reference/_opdef.py).
for _d in definitions().values():
    OPS[_d.op] = _d.kernel
    REQUIRED_INPUTS[_d.op] = _d.inputs
    if _d.shape is not None:
        SHAPES[_d.op] = _d.shape


@_op("QuantizeLinear")
def _quantize(node, x, memo):
    """Per-tensor, per-axis or blocked (`block_size`, opset 21); `output_dtype` (opset 21) uint8/int8 only
    (`saturate` concerns float8 outputs only: nothing to do for integers)."""
    from .quant_ops import q_block_size, q_output_dtype

    return [quantize_linear(x[0], x[1], x[2] if len(x) > 2 else None, axis=int(node.attrs.get("axis", 1)),
                            dtype=q_output_dtype(node, x), block_size=q_block_size(node))]


@_op("DequantizeLinear")
def _dequantize(node, x, memo):
    from .quant_ops import dq_check_output_dtype, q_block_size

    dq_check_output_dtype(node)
    return [dequantize_linear(x[0], x[1], x[2] if len(x) > 2 else None, axis=int(node.attrs.get("axis", 1)),
                              block_size=q_block_size(node))]


@_op("MaxPool")
def _maxpool(node, x, memo):
    _check_auto_pad(node)
    a = node.attrs
    if x[0].dtype not in (np.uint8, np.int8):  # float32 takes host_float's float_max_pool kernel before this one
        raise TypeError(f"MaxPool input must be uint8, int8 or float32, got {x[0].dtype}")
    if a.get("storage_order", 0):
        raise ValueError("MaxPool with storage_order=1 is not supported")
    return [max_pool(x[0], list(_attr(node, "kernel_shape")), a.get("strides"), a.get("pads"), a.get("dilations"),
                     int(a.get("ceil_mode", 0)), a.get("auto_pad"))]


@_op("Identity")
def _identity(node, x, memo):
    return [x[0]]


@_op("Reshape")
def _reshape(node, x, memo):
    shape = [int(s) for s in x[1]]
    if not node.attrs.get("allowzero", 0):
        shape = [x[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [x[0].reshape(shape)]


@_op("Flatten")
def _flatten(node, x, memo):
    """ONNX Flatten: (prod(shape[:axis]), prod(shape[axis:])), axis in [-rank, rank] (rank gives (N, 1))."""
    a, r = x[0], x[0].ndim
    axis = int(node.attrs.get("axis", 1))
    if not -r <= axis <= r:
        raise ValueError(f"Flatten axis {axis} is outside [-{r}, {r}] for a rank-{r} input")
    axis += r if axis < 0 else 0
    return [a.reshape(math.prod(a.shape[:axis]), math.prod(a.shape[axis:]))]


@_op("Transpose")
def _transpose(node, x, memo):
    perm = node.attrs.get("perm")
    return [np.ascontiguousarray(np.transpose(x[0], perm))]


@_op("Squeeze")
def _squeeze(node, x, memo):
    axes = x[1] if len(x) > 1 and x[1] is not None else node.attrs.get("axes")
    return [np.squeeze(x[0], axis=tuple(int(a) for a in axes) if axes is not None else None)]


@_op("Unsqueeze")
def _unsqueeze(node, x, memo):
    axes = x[1] if len(x) > 1 and x[1] is not None else _attr(node, "axes")
    return [np.expand_dims(x[0], tuple(int(a) for a in axes))]


@_op("Concat")
def _concat(node, x, memo):
    if any(v is None for v in x):
        raise ValueError("an input is empty")
    return [np.concatenate(x, axis=int(_attr(node, "axis")))]


@_op("Pad")
def _pad(node, x, memo):
    """ONNX Pad (opset 2 attributes or opset 11+ inputs: pads, constant_value, axes), exact on any type."""
    from ..reference.pad import pad

    a = node.attrs
    if len(x) > 1:
        pads, value = x[1], x[2] if len(x) > 2 else None
        axes = x[3] if len(x) > 3 else None
    else:  # opset 2: pads and a float value as attributes
        pads, value, axes = _attr(node, "pads"), a.get("value", 0.0), None
    if value is not None and np.asarray(value).dtype != x[0].dtype:
        v = np.asarray(value).reshape(-1)
        if v.size != 1 or v[0] != np.asarray(v[0]).astype(x[0].dtype):
            raise ValueError(f"constant value {v} is not representable in {x[0].dtype}")
    return [pad(x[0], pads, value, axes, a.get("mode", "constant"))]


@_op("ConvInteger")
def _conv_integer(node, x, memo):
    """int32 output: runs in numpy on every device (the device kernels requantize to 8 bits)."""
    from ..reference import _auto_pad
    from ..reference.conv_integer import conv_integer

    a, x0, pads = node.attrs, x[0], node.attrs.get("pads")
    if _auto_pad.node_mode(node) != "NOTSET" and np.ndim(x0) == np.ndim(x[1]) >= 3:  # ORT's rule: _auto_pad.py
        x0, pads = _auto_pad.crop(x0, _auto_pad.conv_pads(node, np.shape(x0), np.shape(x[1])))
    return [conv_integer(x0, x[1], x[2] if len(x) > 2 else None, x[3] if len(x) > 3 else None,
                         strides=a.get("strides"), pads=pads, dilations=a.get("dilations"),
                         group=int(a.get("group", 1)))]


@_op("MatMulInteger")
def _matmul_integer(node, x, memo):
    from ..reference.matmul_integer import matmul_integer

    return [matmul_integer(x[0], x[1], x[2] if len(x) > 2 else None, x[3] if len(x) > 3 else None)]


@_op("DynamicQuantizeLinear")
def _dynamic_quantize_linear(node, x, memo):
    from ..reference.dynamic_quantize_linear import dynamic_quantize_linear

    return list(dynamic_quantize_linear(x[0]))


# Host ops on float (and integer) tensors, as dynamically quantized models use them between the integer ops.
# One numpy float32 operation per element is one IEEE float32 operation: what ONNX Runtime's CPU kernels compute.
_CAST = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 11: np.float64}


def _same_type(node, x) -> None:
    if len({v.dtype for v in x}) != 1:
        raise TypeError(f"inputs of {node.op} must have one type, got {[str(v.dtype) for v in x]}")


@_op("Cast")
def _cast(node, x, memo):
    to = int(_attr(node, "to"))
    if to not in _CAST:
        raise ValueError(f"Cast to ONNX type {to} is not supported")
    dt = np.dtype(_CAST[to])
    v = x[0]
    if v.dtype.kind == "f" and dt.kind in "iu" and v.size:
        info = np.iinfo(dt)
        if not (np.all(np.isfinite(v)) and v.min() > info.min - 1 and v.max() < info.max + 1):
            raise ValueError(f"Cast of float values outside the {dt} range is undefined in ONNX Runtime")
    return [np.asarray(v).astype(dt)]  # float -> int truncates toward zero, int -> int wraps: C++ static_cast


@_op("Mul")
def _mul(node, x, memo):
    _same_type(node, x)
    return [np.asarray(np.multiply(x[0], x[1]), x[0].dtype)]


@_op("Add")
def _add(node, x, memo):
    _same_type(node, x)
    return [np.asarray(np.add(x[0], x[1]), x[0].dtype)]


@_op("Clip")
def _clip(node, x, memo):
    """min(max(x, lo), hi) (opset 11+ inputs, or opset 6 float attributes), any numeric type."""
    v = x[0]
    if len(x) > 1 or "min" not in node.attrs and "max" not in node.attrs:
        lo = x[1] if len(x) > 1 and x[1] is not None else None
        hi = x[2] if len(x) > 2 and x[2] is not None else None
    else:
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
    if lo is not None:
        v = np.maximum(v, np.asarray(lo).astype(v.dtype))
    if hi is not None:
        v = np.minimum(v, np.asarray(hi).astype(v.dtype))
    return [np.asarray(v, x[0].dtype)]


@_op("GlobalAveragePool")
def _global_average_pool_float(node, x, memo):
    """float32 GlobalAveragePool summed in ONNX Runtime's order (MLAS's global pooling kernel): four running
    sums over the elements 4i + j of each channel, reduced as (s0 + s2) + (s1 + s3), then the remaining
    1-3 elements one by one, divided by the element count."""
    v = x[0]
    if v.dtype != np.float32:
        raise ValueError(f"GlobalAveragePool on {v.dtype} tensors is not supported (QDQ folding makes the "
                         "quantized one com.microsoft:QLinearGlobalAveragePool)")
    if v.ndim < 3:
        raise ValueError(f"GlobalAveragePool needs an (N, C, ...) input, got shape {v.shape}")
    n, c = v.shape[:2]
    size = int(np.prod(v.shape[2:], dtype=np.int64))
    flat = v.reshape(n * c, size)
    body = size // 4 * 4
    if body:
        lanes = np.add.accumulate(flat[:, :body].reshape(n * c, body // 4, 4), axis=1, dtype=np.float32)[:, -1]
        total = (lanes[:, 0] + lanes[:, 2]) + (lanes[:, 1] + lanes[:, 3])
    else:
        total = np.zeros(n * c, np.float32)
    for i in range(body, size):
        total = total + flat[:, i]
    out = (total / np.float32(size)).astype(np.float32)
    return [out.reshape(n, c, *([1] * (v.ndim - 2)))]


# Op families that register their kernels (and REQUIRED_INPUTS) from their own modules, imported last because
# they use `_op` and `OPS` from here.
from . import (  # noqa: E402,F401
    conv_transpose,
    host_float,
    moves,
    quant_ops,
    resize,
    tables,
)

# Kernels whose output can be far larger than their inputs check its size first (the session's limits in a trace,
# sizes.DEFAULT elsewhere), wherever they run: constant folding at import runs them on constants too, where a
# Tile of a constant by 2**20 x 2**20 raised MemoryError; now the node stays, and the trace refuses it by name.
GUARDED = ("Tile", "Expand", "Pad", "ConstantOfShape", "Range", "OneHot", "Resize", "Upsample", "CenterCropPad",
           "vkinfer:ZeroInsert")


def guard(op: str, fn: Kernel) -> Kernel:
    """`fn` checking its outputs' size rule (size_rules.BOUNDS) against sizes.CURRENT before it runs."""
    from .size_rules import BOUNDS
    from .sizes import CURRENT, check_tensor

    bound = BOUNDS[op]

    def guarded(node, x, memo):
        try:
            needs = bound(node, x)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, ZeroDivisionError):
            needs = []  # the kernel gives the node's own error
        for what, shape, dt in needs:
            name = node.outputs[what] if isinstance(what, int) and what < len(node.outputs) else what
            check_tensor(f"node {node.name!r} ({node.op}): output {name!r}", [max(int(d), 0) for d in shape], dt,
                         CURRENT.get())
        return fn(node, x, memo)
    guarded.__wrapped__ = fn  # type: ignore[attr-defined]
    return guarded


for _name in GUARDED:
    OPS[_name] = guard(_name, OPS[_name])

