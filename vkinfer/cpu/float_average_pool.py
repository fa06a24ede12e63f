"""float32 AveragePool (1 to 3 spatial axes, N C ...) in the native CPU graph with ONNX Runtime 1.31's bits
(cpu_fallback/src/ops/float_avgpool.c: the loop ORT runs for the node's opset and geometry, as
vkinfer/reference/float_average_pool.py picks it, each with its own summation order and divisor). Negative
(auto_pad) pads are refused as ORT refuses them."""

from __future__ import annotations

import numpy as np

from ..layout import u32
from ..model.lowering import Layer, lower
from ..reference._pool_shape import pool_geometry
from ..reference.float_average_pool import pool_kind

# ops/float_avgpool.c's loop kinds
_KINDS = {("loop", 0): 0, ("generic", 1): 1, ("loop", 1): 2, ("global", 0): 3, ("global", 1): 3,
          ("vector", 1): 4, ("vector", 0): 5, ("generic", 0): 0}


def avgpool_dims(node, shape) -> tuple[list[int], list[int]]:
    """(ops/float_avgpool.c's dims, the output shape) of a float AveragePool node on an input of `shape`;
    ValueError for what the native loop does not take."""
    a = node.attrs
    if "kernel_shape" not in a:
        raise ValueError("AveragePool without kernel_shape")
    nd = len(shape) - 2
    ceil, cip = int(a.get("ceil_mode", 0)), int(a.get("count_include_pad", 0))
    k, s, p, d, out = pool_geometry(shape, list(a["kernel_shape"]), a.get("strides"), a.get("pads"),
                                    a.get("dilations"), ceil, a.get("auto_pad"))
    if min(p) < 0:
        raise ValueError(f"AveragePool: padding values must be non-negative, auto_pad gives {list(p)} (ORT refuses)")
    if cip not in (0, 1):
        raise ValueError(f"AveragePool count_include_pad must be 0 or 1, got {cip}")
    opset = int(a.get("_opset") or 22)
    kind = pool_kind(shape[2:], k, s, p, d, ceil, cip, opset)
    dims = [nd, _KINDS[(kind, cip)]]
    for i in range(nd):
        dims += [shape[2 + i], out[i], k[i], s[i], d[i], p[i], p[nd + i]]
    if max(dims) >= 2 ** 32 or max(k) > 4096 or max(d) > 4096 or max(p) > 2 ** 24:
        raise ValueError(f"AveragePool: sizes {dims} past ops/float_avgpool.c's limits (the host runs it)")
    return dims, [shape[0], shape[1], *out]


@lower("cpu", "AveragePool")
def lower_float_average_pool(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    shape = tuple(ctx.shape(x))
    if np.dtype(ctx.dtype(x)) != np.float32:
        return None
    if not 3 <= len(shape) <= 5:
        raise ValueError(f"float AveragePool of rank {len(shape)} (ORT takes 1 to 3 spatial axes; the host runs it)")
    if min(shape) == 0:
        return None
    dims, want = avgpool_dims(node, shape)
    if tuple(ctx.shape(y)) != tuple(want):
        raise ValueError(f"AveragePool: the traced output shape {list(ctx.shape(y))} is not ONNX Runtime's {want} "
                         "(the host runs it)")
    nc = shape[0] * shape[1]
    table = u32(dims)

    def emit(g, refs, out_ref, scratch):
        g.add("float_avgpool", nc, table, refs[0], out_ref)
    return Layer(node, [x], y, emit)
