"""Comparisons and logic ops in the native CPU graph (cpu_fallback/src/ops/float_compare.c): Equal, Greater,
GreaterOrEqual, Less, LessOrEqual of float32, uint8/int8, int32 or int64 operands (Equal also of bool), And, Or,
Xor and Not of bool, writing bool bytes 0/1. The definition is vkinfer/model/host_elementwise.py's numpy kernels
(one IEEE comparison per element: ORT 1.31's bits, NaN compares false, +0 == -0).

A model quantized by onnxruntime.quantization.quantize_static keeps float comparisons between its quantized ops
(DQ -> Greater -> Where -> Q: ORT has no quantized form of them, and vkinfer's QDQ rules fold none), so the float
tensor, the bool tensor and Where (vkinfer/cpu/where.py) all stay in the CPU graph: one native call. 8-bit operands
are in their storage form (4-D NHWC canonical bytes: int8 XOR 0x80 keeps the order, so bytes compare unsigned),
everything else in the host layout; the operator reads each operand at its strides along the output's order, the
axes merged as vkinfer/cpu/_axes.py merges them (float_elementwise.py's merged-broadcast idea with strides).
Refused (the host runs them): other dtypes, empty outputs, more than 6 axes after merging."""

from __future__ import annotations

import numpy as np

from ..layout import u32
from ..model.lowering import Layer, lower
from ._axes import MAX_RANK, broadcast_strides, merge, u64

__all__ = ["COMPARE", "KINDS", "LOGIC", "lower_compare"]

COMPARE = {"Equal": 0, "Greater": 1, "GreaterOrEqual": 2, "Less": 3, "LessOrEqual": 4}
LOGIC = {"And": 5, "Or": 6, "Xor": 7, "Not": 8}
# float_compare.c's operand kinds: float32, unsigned bytes (uint8, bool, canonical int8), int32, int64
KINDS = {np.dtype(np.float32): 0, np.dtype(np.uint8): 1, np.dtype(np.int8): 1, np.dtype(np.bool_): 1,
         np.dtype(np.int32): 2, np.dtype(np.int64): 3}
_BOOL = np.dtype(np.bool_)


def _operands(ctx, node) -> tuple[list[str], np.dtype] | None:
    """The node's inputs and their one dtype where float_compare takes them, else None (the host runs it)."""
    n_in = 1 if node.op == "Not" else 2
    ins = list(node.inputs)
    if len(ins) != n_in or not all(ins) or len(node.outputs) != 1:
        return None
    y = node.outputs[0]
    if not all(t in ctx.info for t in (*ins, y)) or np.dtype(ctx.dtype(y)) != _BOOL:
        return None
    dts = {np.dtype(ctx.dtype(t)) for t in ins}
    if len(dts) != 1:
        return None
    dt = dts.pop()
    if node.op in LOGIC:
        return (ins, dt) if dt == _BOOL else None
    if dt not in KINDS or (dt == _BOOL and node.op != "Equal"):  # ONNX orders no bools
        return None
    return ins, dt


@lower("cpu", *COMPARE, *LOGIC)
def lower_compare(ctx, node, backend):
    """A comparison or logic op with numpy broadcasting as one float_compare (module docstring)."""
    got = _operands(ctx, node)
    if got is None:
        return None
    ins, dt = got
    y = node.outputs[0]
    out = tuple(int(s) for s in ctx.shape(y))
    if 0 in out:
        return None
    pair = [ins[0], ins[-1]]  # Not: a read as b too (float_compare.c reads a only)
    if not out:
        out_s, st = [1], [[0], [0]]
    else:  # y is bool in the host layout: contiguous in logical order
        full = [broadcast_strides(out, ctx.shape(t), ctx.dtype(t)) for t in pair]
        out_s, st, _, _ = merge(list(out), full)
        if not out_s:
            out_s, st = [1], [[0], [0]]
    if len(out_s) > MAX_RANK:
        raise ValueError(f"{node.op}: {len(out_s)} axes after merging, past the native graph's 6 (the host runs it)")
    op, kind, rank, shp = {**COMPARE, **LOGIC}[node.op], KINDS[dt], len(out_s), u32(out_s)
    sa, sb = (u64(s) for s in st)

    def emit(g, refs, out_ref, scratch):
        g.add("float_compare", op, kind, rank, shp, sa, sb, refs[0], refs[-1], out_ref)
    return Layer(node, ins, y, emit)
