"""Data-movement ops on 8-bit tensors in the native CPU graph as one byte gather (cpu_fallback/src/ops/gather.c):
Slice, Concat on any axis, Transpose, Pad (every mode), Gather, DepthToSpace, SpaceToDepth, Tile, Expand, nearest
Resize (vkinfer/model/moves.py computes the table). Registered as a fallback: the specialised channel concat,
transposes and constant pad are tried first."""

from __future__ import annotations

import ctypes

import numpy as np

from ..layout import flip
from ..model.lowering import Layer, lower
from ..model.moves import GATHER_OPS, gather_spec
from .graph import _Ref


@lower("cpu", *GATHER_OPS, fallback=True)
def lower_byte_gather(ctx, node, backend):
    spec = gather_spec(ctx, node)
    if spec is None:
        return None
    names, L, rows, fill, sizes = spec
    byte = fill ^ flip(ctx.dtype(node.outputs[0]))  # the canonical form's fill
    in_bytes = np.ascontiguousarray(sizes, np.uint64)
    n_rows = len(rows)

    def emit(g, refs, out, scratch):
        arr = (_Ref * len(refs))(*[r.c() for r in refs])
        g.add("gather", len(refs), in_bytes, L, n_rows, rows, byte, 1, ctypes.addressof(arr), out)
    return Layer(node, list(names), node.outputs[0], emit)
