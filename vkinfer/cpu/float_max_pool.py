"""float32 MaxPool (2-D, NCHW) and GlobalMaxPool (any spatial rank) in the native CPU graph with ONNX Runtime 1.31's
bits (cpu_fallback/src/ops/float_maxpool.c: the loop ORT or MLAS picks for the geometry, each with its own operand
order for signed zeros, NaN and -inf). GlobalMaxPool is MLAS's global kernel over each channel's flat image
(MlasPool's global case for every spatial rank): one float_maxpool of a 1 x H*W... image and a kernel of its size.
The Indices output, storage_order=1, auto_pad other than NOTSET and other ranks of MaxPool stay on the host."""

from __future__ import annotations

import numpy as np

from ..model.lowering import Layer, lower
from ..reference._pool_shape import pool_geometry
from ..reference.max_pool import pool_attrs


@lower("cpu", "MaxPool")
def lower_float_max_pool(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    if np.dtype(ctx.dtype(x)) != np.float32 or len(ctx.shape(x)) != 4:
        return None
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        raise ValueError("MaxPool's Indices output is not produced by the native graph (the host runs it)")
    if node.attrs.get("storage_order", 0):
        raise ValueError("MaxPool with storage_order=1 (the host runs it)")
    p = pool_attrs(node)
    if p is None:
        raise ValueError("float MaxPool other than 2-D with explicit pads (the host runs it)")
    (kh, kw), (sh, sw), (dh, dw), pads = p
    shape = ctx.shape(x)
    ceil = int(node.attrs.get("ceil_mode", 0))
    _, _, _, _, out = pool_geometry(shape, [kh, kw], [sh, sw], list(pads), [dh, dw], ceil)
    if tuple(ctx.shape(y)) != (shape[0], shape[1], *out):
        raise ValueError(f"MaxPool: the traced output shape {list(ctx.shape(y))} is not ONNX Runtime's "
                         f"{[shape[0], shape[1], *out]} (the host runs it)")
    n, c, h, w = shape
    oh, ow = out

    def emit(g, refs, out_ref, scratch):
        g.add("float_maxpool", n * c, h, w, oh, ow, kh, kw, sh, sw, dh, dw, pads[0], pads[1], pads[2], pads[3],
              refs[0], out_ref)
    return Layer(node, [x], y, emit)


@lower("cpu", "GlobalMaxPool")
def lower_float_global_max_pool(ctx, node, backend):
    """A float32 GlobalMaxPool (N, C, *spatial) as MLAS's global kernel: float_maxpool over each channel's flat
    image (1 x the spatial size, kernel the same, strides 1, no pads: the C operator's global loop)."""
    x, y = node.inputs[0], node.outputs[0]
    if np.dtype(ctx.dtype(x)) != np.float32 or len(ctx.shape(x)) < 3:
        return None
    shape = [int(v) for v in ctx.shape(x)]
    nc, hw = shape[0] * shape[1], int(np.prod(shape[2:]))
    if not nc or not hw:
        return None  # an empty tensor: the host
    if nc >= 2 ** 32 or hw >= 2 ** 32:
        raise ValueError(f"GlobalMaxPool of {shape}: past the native operator's 32-bit sizes (the host runs it)")

    def emit(g, refs, out_ref, scratch):
        g.add("float_maxpool", nc, 1, hw, 1, 1, 1, hw, 1, 1, 1, 1, 0, 0, 0, 0, refs[0], out_ref)
    return Layer(node, [x], y, emit)
