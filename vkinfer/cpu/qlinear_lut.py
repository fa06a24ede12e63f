"""8-bit elementwise ops as tables in the native CPU graph: binary ops (QLinearAdd broadcasts, QLinearMul,
TFLite ADD) as 65536-byte tables, unary ones (QLinearLeakyRelu, QLinearSigmoid, TFLite's 8-bit QUANTIZE) as
256-byte tables. Every table is the numpy reference evaluated on all inputs, so the result is the
reference's by construction; it is re-indexed for canonical bytes once."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import VkInferError
from ..layout import table1, table2
from ..model.graph import Node
from ..model.lowering import Layer, binary_fn, binary_mode, lower, static_params, table_ops, unary_fn
from ..reference._lookup import binary_table, unary_table


def binary_table_fn(node: Node, consts: dict) -> Callable:
    """`binary_fn` for filling a 65536-entry table (operands of equal shape): QLinearAdd through the C kernel
    when the CPU library is built (exact, tested against the reference: 0.1 ms a table where the reference's
    float32 emulation takes 3 ms, 30 ms of MobileNetV2's Vulkan session creation), else the reference. It lives
    in the CPU's file so that the Vulkan lowering reaches the C kernel through the CPU backend."""
    ref = binary_fn(node, consts)
    if node.op != "com.microsoft:QLinearAdd":
        return ref
    from . import lib, qlinear_add

    try:
        lib()
    except (VkInferError, OSError):
        return ref
    p = [consts.get(n) if n else None for n in node.inputs]
    return lambda a, b: qlinear_add(a, p[1], p[2], b, p[4], p[5], p[6], p[7])


def _lut1(node, x, dt_in, dt_out, raw, n):
    t = table1(raw, dt_in, dt_out)

    def emit(g, refs, out, scratch):
        g.add("lut1", n, t, refs[0], out)
    return Layer(node, [x], node.outputs[0], emit)


@lower("cpu", *table_ops("binary"), fallback=True)
def lower_binary(ctx, node, backend):
    a, b, y = node.inputs[0], node.inputs[3], node.outputs[0]
    mode = binary_mode(ctx, node)
    if not mode or ctx.dtype(y) != ctx.dtype(a):
        return None
    t = table2(binary_table(ctx.dtype(a), binary_table_fn(node, ctx.g.consts)), ctx.dtype(a), ctx.dtype(y))
    n = int(np.prod(ctx.shape(a)))
    period = 0 if mode == "equal" else int(np.prod(ctx.shape(b)))

    def emit(g, refs, out, scratch):
        g.add("lut2", n, period, t, refs[0], refs[1], out)
    return Layer(node, [a, b], y, emit)


@lower("cpu", *table_ops("unary"))
def lower_unary(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    if not (ctx.quantized(x, y) and static_params(ctx, node, (1, 2, 3, 4))):
        return None
    raw = unary_table(ctx.dtype(x), unary_fn(node, ctx.g.consts))
    return _lut1(node, x, ctx.dtype(x), ctx.dtype(y), raw, int(np.prod(ctx.shape(x))))


@lower("cpu", "vkinfer:TFLiteQuantize")
def lower_tflite_requantize(ctx, node, backend):
    """TFLite's 8-bit -> 8-bit QUANTIZE (the float one is in quantize_linear.py)."""
    from ..reference.tflite_quantize import tflite_quantize_op

    x, y = node.inputs[0], node.outputs[0]
    if not (ctx.quantized(x, y) and static_params(ctx, node, range(1, len(node.inputs)))):
        return None
    p = [ctx.g.consts[n] for n in node.inputs[1:]]
    raw = unary_table(ctx.dtype(x), lambda v: tflite_quantize_op(v, *p))
    return _lut1(node, x, ctx.dtype(x), ctx.dtype(y), raw, int(np.prod(ctx.shape(x))))


@lower("cpu", "vkinfer:Table")
def lower_table(ctx, node, backend):
    """A folded float chain (vkinfer/model/tables.py): its 256-byte table, re-indexed for canonical bytes."""
    x, y = node.inputs[0], node.outputs[0]
    if not (ctx.quantized(x, y) and ctx.const(node.inputs[1])):
        return None
    raw = np.asarray(ctx.g.consts[node.inputs[1]])
    return _lut1(node, x, ctx.dtype(x), ctx.dtype(y), raw, int(np.prod(ctx.shape(x))))


@lower("cpu", "vkinfer:Table2")
def lower_table2(ctx, node, backend):
    from ..model.tables import table2_lookup

    y = node.outputs[0]
    if (found := table2_lookup(ctx, node)) is None:
        return None
    a, b, raw, mode = found
    t = table2(raw, ctx.dtype(a), ctx.dtype(y))
    n = int(np.prod(ctx.shape(y)))
    period = 0 if mode == "equal" else int(np.prod(ctx.shape(b)))

    def emit(g, refs, out, scratch):
        g.add("lut2", n, period, t, refs[0], refs[1], out)
    return Layer(node, [a, b], y, emit)
