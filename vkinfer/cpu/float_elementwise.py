"""Elementwise float32 ops between quantized ones in the native CPU graph, with ONNX Runtime 1.31's CPU bits:
binary Add, Sub, Mul, Div, Max, Min (two inputs), PRelu and Pow (the C library's powf; x * x and x * x * x where
ORT's broadcaster takes the exponent as a span scalar: vkinfer/reference/float_pow.py) with numpy broadcasting
(cpu_fallback/src/ops/float_binary.c), unary Relu, LeakyRelu, Clip, Neg, Abs, Sqrt, HardSigmoid, HardSwish,
MLAS's Sigmoid, Tanh, Erf, Exp and Eigen's Log with the C library's logf on the tensor's last n % 4 elements
(ops/float_unary.c, step by step as vkinfer/model/host_float.py and host_eigen.py reproduce them).
float32 tensors live in the CPU graph in the host's layout (NCHW, plain: vkinfer/layout.py), as DequantizeLinear
writes and QuantizeLinear reads them, so these operators run between the two in the same native call.

ORT's Max and Min give the first or the second operand on ties of +0/-0 depending on whether Eigen's packet or
scalar path took the element (ops/float_binary.c); the C operator follows ORT's broadcaster, whose spans it is
given here by merging the shapes as ORT does (`merged_broadcast`). Clip whose bounds are tensors computed at run
time (log-mel's Clip(x, ReduceMax(x) - 80)) reads them in the graph (ops/float_clip.c). What no C operator
reproduces stays on the host, with the reason: other dtypes, Max/Min of 1 or 3+ inputs, non-scalar or non-float32
bounds, ranks past 6 after merging."""

from __future__ import annotations

import numpy as np

from ..layout import u32
from ..model.lowering import Layer, lower
from ..reference.float_minmax import merged_broadcast, ort_spans
from ..reference.float_pow import ort_scalar_roles

__all__ = ["BINARY", "UNARY", "lower_float_binary", "lower_float_unary", "merged_broadcast"]

_F32 = np.dtype(np.float32)
BINARY = {"Add": 0, "Sub": 1, "Mul": 2, "Div": 3, "Max": 4, "Min": 5, "PRelu": 6, "Pow": 7}
_POW_SCALAR_EXP = 8  # float_binary.c: Pow with ORT's x * x / x * x * x for a span-scalar exponent 2 / 3
UNARY = {"Relu": 0, "LeakyRelu": 1, "Clip": 2, "Neg": 3, "Abs": 4, "Sqrt": 5, "HardSigmoid": 6, "HardSwish": 7,
         "Sigmoid": 8, "Tanh": 9, "Erf": 10, "Exp": 11, "Log": 12}
_MAX_RANK = 6  # float_binary.c's FB_RANK


def _floats(ctx, names) -> bool:
    return all(n and n in ctx.info and np.dtype(ctx.dtype(n)) == _F32 for n in names)


@lower("cpu", *BINARY)
def lower_float_binary(ctx, node, backend):
    """A two-input float32 op with numpy broadcasting (PRelu: the slope broadcast to x) as one float_binary."""
    ins = [t for t in node.inputs if t]
    y = node.outputs[0]
    if len(ins) != len(node.inputs) or not _floats(ctx, [*ins, y]):
        return None
    if len(ins) != 2:
        raise ValueError(f"{node.op} of {len(ins)} inputs: the native graph takes two (the host runs it)")
    a, b = ins
    if node.op in ("Max", "Min"):  # ORT's spans decide the operand order of ties (reference/float_minmax.py)
        out, sa, sb = ort_spans(tuple(ctx.shape(a)), tuple(ctx.shape(b)))
    else:
        out, sa, sb = merged_broadcast(ctx.shape(y), ctx.shape(a), ctx.shape(b))
    if len(out) > _MAX_RANK:
        raise ValueError(f"{node.op}: a broadcast of {len(out)} merged dimensions (the native graph takes 6)")
    op, rank, shape, ash, bsh = BINARY[node.op], len(out), u32(out), u32(sa), u32(sb)
    if node.op == "Pow":  # ORT's broadcaster decides whether x * x / x * x * x apply (reference/float_pow.py)
        s0, s1 = ort_scalar_roles(tuple(ctx.shape(a)), tuple(ctx.shape(b)))
        op = _POW_SCALAR_EXP if s1 and not s0 else op

    def emit(g, refs, out_ref, scratch):
        g.add("float_binary", op, rank, shape, ash, bsh, refs[0], refs[1], out_ref)
    return Layer(node, [a, b], y, emit)


def _const_scalar(ctx, node, i: int, default: float) -> np.float32 | None:
    """Input i of a node as a float32 scalar constant (`default` when absent), else None."""
    if i >= len(node.inputs) or not node.inputs[i]:
        return np.float32(default)
    t = node.inputs[i]
    if t not in ctx.g.consts:
        return None
    v = np.asarray(ctx.g.consts[t])
    if v.dtype != _F32 or v.size != 1:
        return None
    return v.reshape(())[()]


def _clip_tensor_bounds(ctx, node, lo, hi):
    """Clip with a bound computed at run time: one float_clip reading each such bound (a one-element float32
    tensor) when the graph runs; a constant bound is passed as a value."""
    x, y = node.inputs[0], node.outputs[0]
    flags, refs = 0, []
    for bit, (i, v) in enumerate(((1, lo), (2, hi))):
        if v is not None:
            continue
        t = node.inputs[i]
        if not _floats(ctx, [t]) or int(np.prod(ctx.shape(t), dtype=np.int64)) != 1:
            raise ValueError(f"Clip bound {t!r} is not a float32 scalar (the host runs it)")
        flags |= 1 << bit
        refs.append(t)
    n = int(np.prod(ctx.shape(x), dtype=np.int64))
    if n == 0:
        return None
    lo_c = float(lo) if lo is not None else 0.0
    hi_c = float(hi) if hi is not None else 0.0
    ins = [x, *refs]

    def emit(g, r, out_ref, scratch):
        lo_ref = r[1]
        hi_ref = r[2] if len(r) > 2 else r[1]
        g.add("float_clip", n, flags, lo_c, hi_c, r[0], lo_ref, hi_ref, out_ref)
    return Layer(node, ins, y, emit)


@lower("cpu", *UNARY)
def lower_float_unary(ctx, node, backend):
    """A float32 unary op as one float_unary over the tensor's values (any rank)."""
    x, y = node.inputs[0], node.outputs[0]
    if not _floats(ctx, [x, y]):
        return None
    alpha = beta = np.float32(0)
    if node.op == "LeakyRelu":
        alpha = np.float32(float(node.attrs.get("alpha", 0.01)))
    elif node.op == "HardSigmoid":
        alpha = np.float32(float(node.attrs.get("alpha", 0.2)))
        beta = np.float32(float(node.attrs.get("beta", 0.5)))
    elif node.op == "Clip":
        lowest, highest = float(np.finfo(np.float32).min), float(np.finfo(np.float32).max)
        if "min" in node.attrs or "max" in node.attrs or len(node.inputs) == 1:  # Clip-1/6: attributes
            alpha = np.float32(float(node.attrs.get("min", lowest)))
            beta = np.float32(float(node.attrs.get("max", highest)))
        else:
            alpha, beta = _const_scalar(ctx, node, 1, lowest), _const_scalar(ctx, node, 2, highest)
            if alpha is None or beta is None:
                return _clip_tensor_bounds(ctx, node, alpha, beta)
        if np.isnan(alpha) or np.isnan(beta):
            raise ValueError("Clip with a NaN bound (the host runs it)")
    n = int(np.prod(ctx.shape(x), dtype=np.int64))
    if n == 0:
        return None
    op = UNARY[node.op]

    def emit(g, refs, out_ref, scratch):
        g.add("float_unary", op, n, float(alpha), float(beta), refs[0], out_ref)
    return Layer(node, [x], y, emit)
