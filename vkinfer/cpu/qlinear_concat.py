"""Concat and com.microsoft QLinearConcat along the channel axis in the native CPU graph: per pixel row, each
input's channels copied (or mapped through its 256-byte requantization table) side by side."""

from __future__ import annotations

import ctypes

import numpy as np

from ..layout import table1, u32
from ..model.lowering import Layer, channel_concat, lower
from .graph import _Ref


@lower("cpu", "Concat", "com.microsoft:QLinearConcat")
def lower_concat(ctx, node, backend):
    if (cc := channel_concat(ctx, node)) is None:
        return None
    xs, raw_tables = cc
    shape = ctx.shape(xs[0])
    if len(shape) == 5 or ctx.dtype(node.outputs[0]) != ctx.dtype(xs[0]):
        return None
    dt = ctx.dtype(xs[0])
    widths = u32([ctx.shape(x)[1 if len(shape) == 4 else -1] for x in xs])
    rows = int(np.prod(shape)) // int(shape[1 if len(shape) == 4 else -1])
    tables = [None if raw is None else table1(raw, dt, dt) for raw in raw_tables]

    def emit(g, refs, out, scratch):
        ptrs = (ctypes.c_void_p * len(tables))(*[None if t is None else t.ctypes.data for t in tables])
        arr = (_Ref * len(refs))(*[r.c() for r in refs])
        g.add("concat", len(xs), rows, widths, ctypes.addressof(ptrs), ctypes.addressof(arr), out)
    return Layer(node, xs, node.outputs[0], emit)
