"""Data movement of float32 (and int32, int64) tensors in the native CPU graph: Slice (any starts, ends, axes and
steps, negative ones included), Split (as Slices: vkinfer/model/moves.py `split_to_slices`), Concat, Pad (constant,
reflect, edge), Gather with constant indices, DepthToSpace, SpaceToDepth, Tile, Expand and nearest Resize as one
element gather (cpu_fallback/src/ops/gather.c with 4- or 8-byte elements; moves.py `gather_spec(wide=True)`
computes its table), Transpose as one 4-byte permutation (ops/transpose.c), and the reshape family (Identity,
Reshape, Flatten, Squeeze, Unsqueeze) as one copy.

These tensors live in the CPU graph in the host's plain row-major order (vkinfer/layout.py: only 8-bit tensors take
the NHWC form), so every op here only moves values and is exact by construction: ONNX Runtime's kernels copy the
same elements. The reshape family copies rather than aliasing: a float segment output is written in place by its
producer (vkinfer/cpu/segment.py), which an alias is not, and the copy is a memcpy of a tensor the quantize next to
it reads anyway. What is refused stays on the host with the reason: parameters that are not constant, other
element types, empty tensors, Split without sizes (only the trace knows them)."""

from __future__ import annotations

import ctypes

import numpy as np

from ..layout import u32
from ..model.lowering import ALIAS_OPS, Layer, lower, transpose_perm
from ..model.moves import GATHER_OPS, WIDE, gather_spec
from .graph import _Ref

_PERMUTE = (np.dtype(np.float32), np.dtype(np.int32))  # ops/transpose.c moves 1- or 4-byte elements


def _wide(ctx, *names: str) -> bool:
    return all(n and n in ctx.info and np.dtype(ctx.dtype(n)) in WIDE for n in names)


@lower("cpu", *ALIAS_OPS)
def lower_float_reshape(ctx, node, backend):
    """A reshape of a float32/int32/int64 tensor: the same elements in the same order, one copy."""
    x, y = node.inputs[0] if node.inputs else "", node.outputs[0] if node.outputs else ""
    if not _wide(ctx, x, y) or ctx.dtype(x) != ctx.dtype(y):
        return None
    n = int(np.prod(ctx.shape(x), dtype=np.int64))
    if n != int(np.prod(ctx.shape(y), dtype=np.int64)):
        raise ValueError(f"{node.op}: {list(ctx.shape(x))} and {list(ctx.shape(y))} differ in size")
    if n == 0:
        return None
    elem = np.dtype(ctx.dtype(x)).itemsize
    # one row of n elements as 1-byte elements (transpose.c's plain copy: a memcpy)
    count = n * elem
    if count >= 2 ** 32:
        raise ValueError(f"{node.op}: {count} bytes, past the copy's 32-bit shape (the host runs it)")

    def emit(g, refs, out, scratch):
        g.add("transpose", 1, u32([count]), u32([0]), 1, 0, refs[0], out)
    return Layer(node, [x], y, emit)


@lower("cpu", "Transpose")
def lower_float_transpose(ctx, node, backend):
    """Any permutation of a float32/int32 tensor of rank <= 6 as one 4-byte transpose."""
    x, y = node.inputs[0], node.outputs[0] if node.outputs else ""
    if not _wide(ctx, x, y) or np.dtype(ctx.dtype(x)) not in _PERMUTE or ctx.dtype(x) != ctx.dtype(y):
        return None
    shape = ctx.shape(x)
    perm = transpose_perm(node, len(shape))
    if sorted(perm) != list(range(len(shape))) or tuple(shape[p] for p in perm) != tuple(ctx.shape(y)):
        raise ValueError(f"Transpose: perm {list(perm)} of {list(shape)} is not the traced {list(ctx.shape(y))}")
    if not shape or min(shape) == 0:
        return None  # a scalar or an empty tensor: the gather (or the host) takes it
    if len(shape) > 6 or max(shape) >= 2 ** 32:
        raise ValueError(f"Transpose of rank {len(shape)} (the native graph takes 6; the host runs it)")
    sh, pp = u32(shape), u32(perm)

    def emit(g, refs, out, scratch):
        g.add("transpose", len(shape), sh, pp, 4, 0, refs[0], out)
    return Layer(node, [x], y, emit)


@lower("cpu", *GATHER_OPS, fallback=True)
def lower_float_gather(ctx, node, backend):
    """A move of float32/int32/int64 tensors as one element gather (its table computed once per plan)."""
    spec = gather_spec(ctx, node, wide=True)
    if spec is None:
        return None
    names, L, rows, fill, sizes = spec
    elem = np.dtype(ctx.dtype(node.outputs[0])).itemsize
    counts = np.ascontiguousarray(sizes, np.uint64)
    n_rows = len(rows)

    def emit(g, refs, out, scratch):
        arr = (_Ref * len(refs))(*[r.c() for r in refs])
        g.add("gather", len(refs), counts, L, n_rows, rows, fill, elem, ctypes.addressof(arr), out)
    return Layer(node, list(names), node.outputs[0], emit)
