"""Concat and com.microsoft QLinearConcat in the native CPU graph: per row of the output's form, each input's
block copied (or mapped through its 256-byte requantization table, ONNX Runtime's: the reference's) side by side.

Along the channel axis every (QLinear)Concat runs here. Along another axis a concat whose inputs all keep the
output's parameters is a byte gather (byte_gather.py, model/moves.py); one whose inputs requantize runs here too:
the CPU form is a permutation of the axes with no padding, so concatenating along any axis is, in the form's
storage order, `rows` (the axes stored outside the concat axis) times each input's block (the concat axis and
the axes stored inside it) side by side."""

from __future__ import annotations

import ctypes

import numpy as np

from ..layout import form_perm, form_shape, table1, u32
from ..model.lowering import Layer, channel_concat, concat_parts, concat_table, lower
from .graph import _Ref


def concat_blocks(shapes: list[tuple[int, ...]], axis: int) -> tuple[int, list[int]] | None:
    """(rows, each input's block width) of a concatenation of `shapes` along `axis` in the CPU form, or None
    when the shapes do not concatenate there (the interpreter names the mismatch)."""
    rank = len(shapes[0])
    if rank == 0 or any(len(s) != rank for s in shapes) or not -rank <= axis < rank:
        return None
    axis %= rank
    if any(tuple(s[:axis]) + tuple(s[axis + 1:]) != tuple(shapes[0][:axis]) + tuple(shapes[0][axis + 1:])
           for s in shapes):
        return None
    p = form_perm(shapes[0]).index(axis)
    forms = [form_shape(tuple(s)) for s in shapes]
    rows = int(np.prod(forms[0][:p], dtype=np.int64))
    return rows, [int(np.prod(f[p:], dtype=np.int64)) for f in forms]


def requant_concat(ctx, node) -> tuple[list[str], list[np.ndarray | None]] | None:
    """(inputs, raw 256-byte tables) of a QLinearConcat along a non-channel axis with at least one requantizing
    input (what the byte gather cannot take), else None."""
    if node.op != "com.microsoft:QLinearConcat" or (parts := concat_parts(ctx, node)) is None:
        return None
    xs, params, y = parts
    if not ctx.quantized(*xs, node.outputs[0]) or any(ctx.dtype(x) != ctx.dtype(xs[0]) for x in xs):
        return None
    tables = [concat_table(ctx.dtype(xs[0]), p, y) for p in params]
    return (xs, tables) if any(t is not None for t in tables) else None


@lower("cpu", "Concat", "com.microsoft:QLinearConcat")
def lower_concat(ctx, node, backend):
    if (cc := channel_concat(ctx, node)) is None and (cc := requant_concat(ctx, node)) is None:
        return None
    xs, raw_tables = cc
    if ctx.dtype(node.outputs[0]) != ctx.dtype(xs[0]):
        return None
    if (blocks := concat_blocks([ctx.shape(x) for x in xs], int(node.attrs["axis"]))) is None:
        return None
    rows, w = blocks
    dt = ctx.dtype(xs[0])
    widths = u32(w)
    tables = [None if raw is None else table1(raw, dt, dt) for raw in raw_tables]

    def emit(g, refs, out, scratch):
        ptrs = (ctypes.c_void_p * len(tables))(*[None if t is None else t.ctypes.data for t in tables])
        arr = (_Ref * len(refs))(*[r.c() for r in refs])
        g.add("concat", len(xs), rows, widths, ctypes.addressof(ptrs), ctypes.addressof(arr), out)
    return Layer(node, xs, node.outputs[0], emit)
