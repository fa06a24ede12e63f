"""QLinearMatMul in the native CPU graph: A's rows as the pixels of a 1x1 convolution, one per distinct B."""

from __future__ import annotations

import ctypes

import numpy as np

from ..model.lowering import Layer, lower, static
from .graph import Ref
from .qlinear_conv import desc


@lower("cpu", "QLinearMatMul")
def lower_matmul(ctx, node, backend):
    from ..reference._spec import matmul_spec

    a = node.inputs[0]
    if not (static(ctx, node, 1) and ctx.quantized(a)):
        return None
    s = matmul_spec(*ctx.args(node)[:8])
    a_shape = ctx.shape(a)
    if len(a_shape) > 3 or a_shape[:-2] != s.out_shape[:-2]:
        return None  # A broadcast over B's batch
    nb, m, k = s.a.shape
    bb, _, n = s.b.shape
    # One 1x1 convolution per distinct B over the rows of A's batches (all of them when B is shared).
    convs = [dict(n=nb if bb == 1 else 1, h=1, w=m, c=k, m=n, kh=1, kw=1, strides=(1, 1), dilations=(1, 1),
                  pads=(0, 0, 0, 0), groups=1, weights=np.ascontiguousarray(s.b[i].T)[:, :, None, None],
                  w_zp=s.b_zp, bias=np.zeros(n, np.int32), scale=s.out.m, x_zp=s.a_zp, x_dtype=s.a.dtype,
                  out=s.out) for i in range(bb)]
    isa = backend.variant

    def emit(g, ins, out, scratch):
        for i, kw in enumerate(convs):
            d, _keep = desc(**kw, isa=isa)
            if bb == 1:
                g.add("conv", ctypes.addressof(d), ins[0], out)
            else:
                g.add("conv", ctypes.addressof(d), Ref(ins[0].buf, ins[0].offset + i * m * k, m * k),
                      Ref(out.buf, out.offset + i * m * n, m * n))
    return Layer(node, [a], node.outputs[0], emit)
