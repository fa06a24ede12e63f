"""The interpreter's node kernels: one function per op type, registered in `OPS`.

A kernel takes (node, input values, device) and returns the output values. QLinearConv, QLinearMatMul and
QGemm run on the session's device (prepared layers cached on the node); every other op runs in numpy
with ONNX Runtime's exact CPU numerics (vkinfer/reference/). Importers may only emit ops named here.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from .. import reference
from ..reference._spec import conv_spec, matmul_spec
from ..reference.dequantize_linear import dequantize_linear
from ..reference.max_pool import max_pool
from ..reference.qlinear_add import qlinear_add
from ..reference.qlinear_average_pool import qlinear_average_pool
from ..reference.qlinear_concat import qlinear_concat
from ..reference.qlinear_global_average_pool import qlinear_global_average_pool
from ..reference.qlinear_leaky_relu import qlinear_leaky_relu
from ..reference.qlinear_mul import qlinear_mul
from ..reference.qlinear_sigmoid import qlinear_sigmoid
from ..reference.quantize_linear import quantize_linear
from .graph import Node

Kernel = Callable[[Node, list, str], list]
OPS: dict[str, Kernel] = {}


def _op(*names: str):
    def register(fn: Kernel) -> Kernel:
        for n in names:
            OPS[n] = fn
        return fn
    return register


# Inputs every op's kernel needs: (at least this many inputs, the indices that must not be empty). The
# importers check each node against it (passes.check_graph), so a malformed model fails at import naming the
# node and the input, not inside the kernel.
_QUNARY = (5, (0, 1, 3))
REQUIRED_INPUTS: dict[str, tuple[int, tuple[int, ...]]] = {
    "QLinearConv": (8, (0, 1, 3, 4, 6)), "vkinfer:QLinearConvClamp": (8, (0, 1, 3, 4, 6)),
    "QLinearMatMul": (8, (0, 1, 3, 4, 6)),
    "com.microsoft:QGemm": (6, (0, 1, 3, 4)), "vkinfer:QGemmClamp": (6, (0, 1, 3, 4)),
    "QuantizeLinear": (2, (0, 1)), "DequantizeLinear": (2, (0, 1)),
    "com.microsoft:QLinearAdd": (8, (0, 1, 3, 4, 6)), "com.microsoft:QLinearMul": (8, (0, 1, 3, 4, 6)),
    "com.microsoft:QLinearGlobalAveragePool": _QUNARY, "com.microsoft:QLinearAveragePool": _QUNARY,
    "com.microsoft:QLinearLeakyRelu": _QUNARY, "com.microsoft:QLinearSigmoid": _QUNARY,
    "com.microsoft:QLinearConcat": (5, (0, 1, 2, 3)),
    "MaxPool": (1, (0,)), "Identity": (1, (0,)), "Reshape": (2, (0, 1)), "Flatten": (1, (0,)),
    "Transpose": (1, (0,)), "Squeeze": (1, (0,)), "Unsqueeze": (1, (0,)), "Concat": (1, (0,)),
    "Softmax": (1, (0,)), "Pad": (1, (0,)), "ConvInteger": (2, (0, 1)), "MatMulInteger": (2, (0, 1)),
    "DynamicQuantizeLinear": (1, (0,)), "Cast": (1, (0,)), "Mul": (2, (0, 1)), "Add": (2, (0, 1)),
    "Relu": (1, (0,)), "Clip": (1, (0,)), "GlobalAveragePool": (1, (0,)),
    "vkinfer:TFLiteQuantize": (3, (0, 1)), "vkinfer:TFLiteAveragePool": (1, (0,)),
    "vkinfer:TFLiteSoftmax": (4, (0, 1, 2)), "vkinfer:TFLiteAdd": (8, (0, 1, 3, 4, 6)),
    # Float ops QDQ folding turns into the quantized ones.
    "Conv": (2, (0, 1)), "MatMul": (2, (0, 1)), "Gemm": (2, (0, 1)), "AveragePool": (1, (0,)),
    "Sigmoid": (1, (0,)),
}


def _attr(node: Node, key: str):
    """A required attribute: ValueError naming it when the node lacks it."""
    if key not in node.attrs:
        raise ValueError(f"missing attribute {key!r}")
    return node.attrs[key]


def _ints(v, n: int, default: int) -> tuple[int, ...]:
    return tuple(int(i) for i in v) if v is not None else (default,) * n


def _check_auto_pad(node: Node) -> None:
    if node.attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        raise ValueError(f"{node.name} ({node.op}): auto_pad={node.attrs['auto_pad']!r} is not supported")


def _prepared(node: Node, key: tuple, device: str, make_spec, run_reference):
    """The node's prepared layer for this input signature, made once (weights packed, pipeline
    built) and kept on the node; a new input shape prepares again."""
    cached = node.attrs.get("_prepared")
    key = (device, *key)
    if cached is not None and cached[0] == key and node.attrs["_static"]:
        return cached[1]
    spec = make_spec()
    kind, _, which = device.partition(":")
    if kind == "reference":
        def fn(x):
            return run_reference(dataclasses.replace(spec, **{"x" if hasattr(spec, "x") else "a": x}))
    elif kind == "cpu":
        from .. import cpu

        prepared = (cpu.QLinearConv if hasattr(spec, "x") else cpu.QLinearMatMul)(spec, which or None)

        def fn(x):
            return prepared.run(x)
    else:
        from .. import vulkan
        from .._vk import get_device

        dev = get_device(which or None)
        op = (vulkan.QLinearConv if hasattr(spec, "x") else vulkan.QLinearMatMul)(spec, dev)
        fn = vulkan.Executable(op, dev).run
    node.attrs["_prepared"] = (key, fn)
    return fn


def conv_node_spec(node: Node, x: list, activation=None):
    """The ConvSpec of a QLinearConv node for input values `x` (x[0] may be any array of the input's shape)."""
    _check_auto_pad(node)
    a = node.attrs
    bias = x[8] if len(x) > 8 else None
    return conv_spec(*x[:8], bias, strides=_ints(a.get("strides"), 2, 1), pads=_ints(a.get("pads"), 4, 0),
                     dilations=_ints(a.get("dilations"), 2, 1), group=int(a.get("group", 1)), activation=activation)


@_op("QLinearConv")
def _qlinear_conv(node, x, device, activation=None):
    _check_auto_pad(node)
    # Only the activation varies between runs; everything else is a constant of the model.
    return [_prepared(node, (x[0].shape, x[0].dtype.str), device, lambda: conv_node_spec(node, x, activation),
                      reference.qlinear_conv)(x[0])]


@_op("QLinearMatMul")
def _qlinear_matmul(node, x, device):
    def spec():
        return matmul_spec(*x[:8])
    run = _prepared(node, (x[0].shape, x[0].dtype.str), device, spec, reference.qlinear_matmul)
    a, b = x[0], x[3]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])  # matmul_spec has checked it broadcasts
    if a.ndim > 3 or a.shape[:-2] != batch:  # 4-D, or A broadcast over B's batch: A as the spec's (batch, M, K)
        a = np.ascontiguousarray(np.broadcast_to(a, (*batch, *a.shape[-2:]))).reshape(-1, *a.shape[-2:])
    return [run(a)]


@_op("vkinfer:QLinearConvClamp")
def _qlinear_conv_clamp(node, x, device):
    """QLinearConv with a fused activation (attribute `activation`: "relu", "relu6" or ("clip", lo, hi)) applied
    by narrowing the output clamp; the TFLite importer emits it for fused RELU/RELU6/RELU_N1_TO_1."""
    return _qlinear_conv(node, x, device, _attr(node, "activation"))


@_op("vkinfer:QGemmClamp")
def _qgemm_clamp(node, x, device):
    """com.microsoft:QGemm with a fused activation, as vkinfer:QLinearConvClamp."""
    return _qgemm(node, x, device, _attr(node, "activation"))


def qgemm_node_spec(node: Node, x: list, activation=None):
    """QGemm = requant((A - a_zp)(B - b_zp) + C) as a 1x1 QLinearConv over A's rows with bias C: its ConvSpec."""
    a = node.attrs
    if float(a.get("alpha", 1.0)) != 1.0:
        raise ValueError("QGemm with alpha != 1 is not supported")
    if len(x) < 9 or x[7] is None:
        raise ValueError("QGemm without y_scale (float output) is not supported")
    if np.ndim(x[3]) != 2:
        raise ValueError(f"B must be 2-D, got shape {list(np.shape(x[3]))}")
    A = x[0].T if a.get("transA", 0) else x[0]
    m, k = A.shape
    B = x[3] if a.get("transB", 0) else x[3].T  # (N, K)
    bias = None if x[6] is None else np.ascontiguousarray(np.broadcast_to(x[6], (B.shape[0],)), np.int32)
    return conv_spec(np.ascontiguousarray(A).reshape(m, k, 1, 1), x[1], x[2],
                     np.ascontiguousarray(B).reshape(B.shape[0], k, 1, 1), x[4], x[5], x[7], x[8], bias,
                     activation=activation)


@_op("com.microsoft:QGemm")
def _qgemm(node, x, device, activation=None):
    if np.ndim(x[0]) != 2:
        raise ValueError(f"A must be 2-D, got shape {list(np.shape(x[0]))}")
    A = x[0].T if node.attrs.get("transA", 0) else x[0]
    m, k = A.shape
    run = _prepared(node, (A.shape, A.dtype.str), device, lambda: qgemm_node_spec(node, x, activation),
                    reference.qlinear_conv)
    out = run(np.ascontiguousarray(A).reshape(m, k, 1, 1))
    return [out.reshape(m, out.shape[1])]


# Auxiliary ops: numpy references bit-exact with ONNX Runtime's CPU kernels (vkinfer/reference/).
@_op("QuantizeLinear")
def _quantize(node, x, device):
    """Per-tensor, per-axis or blocked (`block_size`, opset 21); `output_dtype` (opset 21) uint8/int8 only
    (`saturate` concerns float8 outputs only: nothing to do for integers)."""
    from .quant_ops import q_block_size, q_output_dtype

    return [quantize_linear(x[0], x[1], x[2] if len(x) > 2 else None, axis=int(node.attrs.get("axis", 1)),
                            dtype=q_output_dtype(node, x), block_size=q_block_size(node))]


@_op("DequantizeLinear")
def _dequantize(node, x, device):
    from .quant_ops import dq_check_output_dtype, q_block_size

    dq_check_output_dtype(node)
    return [dequantize_linear(x[0], x[1], x[2] if len(x) > 2 else None, axis=int(node.attrs.get("axis", 1)),
                              block_size=q_block_size(node))]


@_op("com.microsoft:QLinearAdd")
def _qadd(node, x, device):
    # Residual adds (equal shapes) run in C off the reference device; the numerics are the same.
    if not device.startswith("reference") and x[0].shape == x[3].shape:
        from .. import cpu

        return [cpu.qlinear_add(*x[:8])]
    return [qlinear_add(*x[:8])]


@_op("com.microsoft:QLinearMul")
def _qmul(node, x, device):
    return [qlinear_mul(*x[:8])]


@_op("com.microsoft:QLinearGlobalAveragePool")
def _qgap(node, x, device):
    return [qlinear_global_average_pool(*x[:5], channels_last=int(node.attrs.get("channels_last", 0)))]


@_op("com.microsoft:QLinearAveragePool")
def _qavgpool(node, x, device):
    _check_auto_pad(node)
    a = node.attrs
    return [qlinear_average_pool(*x[:5], kernel_shape=list(_attr(node, "kernel_shape")), strides=a.get("strides"),
                                 pads=a.get("pads"), count_include_pad=int(a.get("count_include_pad", 0)),
                                 ceil_mode=int(a.get("ceil_mode", 0)), channels_last=int(a.get("channels_last", 0)))]


@_op("com.microsoft:QLinearConcat")
def _qconcat(node, x, device):
    if (len(x) - 2) % 3 or any(x[i] is None for i in range(2, len(x), 3)) or any(
            x[i] is None for i in range(3, len(x), 3)):
        raise ValueError(f"inputs must be y_scale, y_zero_point, then (x, x_scale, x_zero_point) triples, got "
                         f"{len(x)} inputs")
    triples = [tuple(x[i:i + 3]) for i in range(2, len(x), 3)]
    return [qlinear_concat(x[0], x[1], triples, axis=int(_attr(node, "axis")))]


@_op("com.microsoft:QLinearLeakyRelu")
def _qleaky(node, x, device):
    return [qlinear_leaky_relu(*x[:5], alpha=float(node.attrs.get("alpha", 0.01)))]


@_op("com.microsoft:QLinearSigmoid")
def _qsigmoid(node, x, device):
    return [qlinear_sigmoid(*x[:5])]


@_op("MaxPool")
def _maxpool(node, x, device):
    _check_auto_pad(node)
    a = node.attrs
    if x[0].dtype not in (np.uint8, np.int8):  # float: between a DQ and a Q of other parameters, on the host
        from .host_float import reference_kernel

        return reference_kernel(node, x, device)
    if a.get("storage_order", 0):
        raise ValueError("MaxPool with storage_order=1 is not supported")
    return [max_pool(x[0], list(_attr(node, "kernel_shape")), a.get("strides"), a.get("pads"), a.get("dilations"),
                     int(a.get("ceil_mode", 0)))]


@_op("Identity")
def _identity(node, x, device):
    return [x[0]]


@_op("Reshape")
def _reshape(node, x, device):
    shape = [int(s) for s in x[1]]
    if not node.attrs.get("allowzero", 0):
        shape = [x[0].shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [x[0].reshape(shape)]


@_op("Flatten")
def _flatten(node, x, device):
    """ONNX Flatten: (prod(shape[:axis]), prod(shape[axis:])), axis in [-rank, rank] (rank gives (N, 1))."""
    a, r = x[0], x[0].ndim
    axis = int(node.attrs.get("axis", 1))
    if not -r <= axis <= r:
        raise ValueError(f"Flatten axis {axis} is outside [-{r}, {r}] for a rank-{r} input")
    axis += r if axis < 0 else 0
    return [a.reshape(math.prod(a.shape[:axis]), math.prod(a.shape[axis:]))]


@_op("Transpose")
def _transpose(node, x, device):
    perm = node.attrs.get("perm")
    return [np.ascontiguousarray(np.transpose(x[0], perm))]


@_op("Squeeze")
def _squeeze(node, x, device):
    axes = x[1] if len(x) > 1 and x[1] is not None else node.attrs.get("axes")
    return [np.squeeze(x[0], axis=tuple(int(a) for a in axes) if axes is not None else None)]


@_op("Unsqueeze")
def _unsqueeze(node, x, device):
    axes = x[1] if len(x) > 1 and x[1] is not None else _attr(node, "axes")
    return [np.expand_dims(x[0], tuple(int(a) for a in axes))]


@_op("Concat")
def _concat(node, x, device):
    if any(v is None for v in x):
        raise ValueError("an input is empty")
    return [np.concatenate(x, axis=int(_attr(node, "axis")))]


@_op("Softmax")
def _softmax(node, x, device):
    """ONNX Softmax in float32. Opset 13+: over `axis` (default -1). Before opset 13 (`_coerce_2d`, set by the
    importer): the input is read as 2-D, (prod(shape[:axis]), prod(shape[axis:])), axis default 1, and the
    softmax runs over each row, i.e. over all of the trailing axes together."""
    a = x[0]
    if a.dtype != np.float32:
        raise TypeError(f"Softmax input must be float32, got {a.dtype}")
    legacy = bool(node.attrs.get("_coerce_2d", False))
    r = a.ndim
    axis = int(node.attrs.get("axis", 1 if legacy else -1))
    if not (-r <= axis <= (r if legacy else r - 1)) or r == 0:
        raise ValueError(f"Softmax axis {axis} is out of range for a rank-{r} input")
    axis += r if axis < 0 else 0
    v = a.reshape(math.prod(a.shape[:axis]), math.prod(a.shape[axis:])) if legacy else a
    over = 1 if legacy else axis
    e = np.exp(v - v.max(axis=over, keepdims=True))
    return [(e / e.sum(axis=over, keepdims=True)).astype(np.float32).reshape(a.shape)]


@_op("Pad")
def _pad(node, x, device):
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
def _conv_integer(node, x, device):
    """int32 output: runs in numpy on every device (the device kernels requantize to 8 bits)."""
    from ..reference.conv_integer import conv_integer

    a = node.attrs
    return [conv_integer(x[0], x[1], x[2] if len(x) > 2 else None, x[3] if len(x) > 3 else None,
                         strides=a.get("strides"), pads=a.get("pads"), dilations=a.get("dilations"),
                         group=int(a.get("group", 1)), auto_pad=a.get("auto_pad", "NOTSET"))]


@_op("MatMulInteger")
def _matmul_integer(node, x, device):
    from ..reference.matmul_integer import matmul_integer

    return [matmul_integer(x[0], x[1], x[2] if len(x) > 2 else None, x[3] if len(x) > 3 else None)]


@_op("DynamicQuantizeLinear")
def _dynamic_quantize_linear(node, x, device):
    from ..reference.dynamic_quantize_linear import dynamic_quantize_linear

    return list(dynamic_quantize_linear(x[0]))


# Host ops on float (and integer) tensors, as dynamically quantized models use them between the integer ops.
# One numpy float32 operation per element is one IEEE float32 operation: what ONNX Runtime's CPU kernels compute.
_CAST = {1: np.float32, 2: np.uint8, 3: np.int8, 6: np.int32, 7: np.int64, 11: np.float64}


def _same_type(node, x) -> None:
    if len({v.dtype for v in x}) != 1:
        raise TypeError(f"inputs of {node.op} must have one type, got {[str(v.dtype) for v in x]}")


@_op("Cast")
def _cast(node, x, device):
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
def _mul(node, x, device):
    _same_type(node, x)
    return [np.asarray(np.multiply(x[0], x[1]), x[0].dtype)]


@_op("Add")
def _add(node, x, device):
    _same_type(node, x)
    return [np.asarray(np.add(x[0], x[1]), x[0].dtype)]


@_op("Clip")
def _clip(node, x, device):
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
def _global_average_pool_float(node, x, device):
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


@_op("vkinfer:TFLiteQuantize")
def _tflite_quantize(node, x, device):
    """TFLite's QUANTIZE (vkinfer/reference/tflite_quantize.py): of a float32 tensor (inputs x, scale, zero
    point) it multiplies by the float32 reciprocal of the scale, where ONNX QuantizeLinear divides; of an 8-bit
    one (x, x_scale, x_zero_point, y_scale, y_zero_point) it requantizes as XNNPACK does."""
    from ..reference.tflite_quantize import tflite_quantize_op

    return [tflite_quantize_op(*x)]


@_op("vkinfer:TFLiteAveragePool")
def _tflite_average_pool(node, x, device):
    """TFLite's 8-bit AVERAGE_POOL_2D (vkinfer/reference/tflite_average_pool.py) on an NCHW input: integer sum of
    the in-image window, rounded half away from zero, clamped to attrs activation_min/activation_max."""
    from ..reference.tflite_average_pool import tflite_average_pool

    a = node.attrs
    return [tflite_average_pool(x[0], list(_attr(node, "kernel_shape")), a.get("strides"), a.get("pads"),
                                a.get("activation_min"), a.get("activation_max"))]


@_op("vkinfer:TFLiteSoftmax")
def _tflite_softmax(node, x, device):
    """TFLite's 8-bit SOFTMAX over the last axis (vkinfer/reference/tflite_softmax.py): inputs x, x_scale,
    y_scale, y_zero_point; attr beta."""
    from ..reference.tflite_softmax import tflite_softmax

    return [tflite_softmax(*x[:4], beta=float(node.attrs.get("beta", 1.0)))]


@_op("vkinfer:TFLiteAdd")
def _tflite_add(node, x, device):
    """TFLite's 8-bit ADD as XNNPACK computes it (vkinfer/reference/tflite_add.py): inputs as QLinearAdd's
    (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point), numpy broadcasting; ~21-bit
    fixed-point multipliers, ties half up, clamped to attrs activation_min/activation_max."""
    from ..reference.tflite_add import tflite_add

    a = node.attrs
    return [tflite_add(*x[:8], a.get("activation_min"), a.get("activation_max"))]


# Op families that register their kernels (and REQUIRED_INPUTS) from their own modules, imported last because
# they use `_op` and `OPS` from here.
# Explicit kernels (`_op`) replace host_float's generic onnx.reference ones whatever the order.
from . import (  # noqa: E402,F401
    conv_transpose,
    host_float,
    moves,
    quant_ops,
    resize,
    tables,
)
