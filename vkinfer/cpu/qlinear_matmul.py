"""QLinearMatMul in the native CPU graph: with constant B, A's rows as the pixels of a 1x1 convolution, one per
distinct B; with both operands activations (attention's Q x K^T, P x V; QDQ MatMuls fold to this op too), the
`qmatmul` operator: exact int32 sums requantized as the convolution's, batched over numpy-broadcast batch axes,
every operand read at its byte strides in the CPU form (4-D NHWC included, no copy)."""

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
    if ctx.quantized(a, node.inputs[3]) and not ctx.const(node.inputs[3]) and static(ctx, node, 4):
        return lower_two_activations(ctx, node)
    if not (static(ctx, node, 1) and ctx.quantized(a)):
        return None
    s = matmul_spec(*ctx.args(node)[:8])
    a_shape, out_shape = ctx.shape(a), s.out_shape
    if len(a_shape) == 4 and a_shape[:2] == (1, 1) and s.b.shape[0] == 1:
        # A (1, 1, m, k): its CPU form (NHWC with one channel) is the row-major matrix, as is the output's
        # (oww_melspec's mel MatMul, [1, 1, 8, 257] x [257, 32], ran on the host).
        a_shape, out_shape = a_shape[2:], out_shape[2:]
    if len(a_shape) > 3 or a_shape[:-2] != out_shape[:-2]:
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


def matmul_strides(ctx, node, packed: bool = False) -> tuple[list[int], list[int], int, int, int] | None:
    """(batch axes, strides: a_m, a_k, b_k, b_n, y_m, y_n then a, b, y per batch axis, m, k, n) of a two-activation
    QLinearMatMul in the CPU form (`packed`: Vulkan's), size-1 batch axes dropped; None past 4 batch axes."""
    from .qlinear_add import form_strides

    a, b, y = node.inputs[0], node.inputs[3], node.outputs[0]
    sa, sb, so = (tuple(ctx.shape(t)) for t in (a, b, y))
    if len(sa) < 2 or len(sb) < 2 or len(so) != max(len(sa), len(sb)):
        return None
    fa, fb, fy = form_strides(sa, packed), form_strides(sb, packed), form_strides(so, packed)
    walk = batch_strides(sa, sb, so, fa, fb, fy, [fa[-2], fa[-1], fb[-2], fb[-1], fy[-2], fy[-1]])
    return None if walk is None else (*walk, sa[-2], sa[-1], sb[-1])


def batch_strides(sa, sb, so, fa, fb, fy, strides: list[int]) -> tuple[list[int], list[int]] | None:
    """(batch sizes, `strides` followed by a, b, y byte strides per batch axis) over the output's batch axes
    (numpy broadcast: an operand's missing or size-1 axis has stride 0), size-1 axes dropped; None past 4 axes
    (the qmatmul operator's limit). Also TFLite BATCH_MATMUL's (cpu/tflite_batch_matmul.py)."""
    batch, strides = [], list(strides)
    for j in range(len(so) - 2):
        if so[j] == 1:
            continue
        per = []
        for shape, st in ((sa, fa), (sb, fb)):
            i = j - (len(so) - len(shape))
            per.append(0 if i < 0 or shape[i] == 1 else st[i])
        batch.append(so[j])
        strides += per + [fy[j]]
    return None if len(batch) > 4 else (batch, strides)


def lower_two_activations(ctx, node):
    """Both operands activations: the qmatmul operator (per-tensor parameters; B per column is a weight's)."""
    from ..layout import flip
    from ..reference._spec import matmul_spec

    s = matmul_spec(*ctx.args(node, acts=4)[:8])
    if np.any(s.b_zp != s.b_zp[0]) or np.any(s.out.m != s.out.m[0]) or ctx.dtype(node.outputs[0]) != s.out.dtype:
        return None
    if (geom := matmul_strides(ctx, node)) is None:
        return None
    batch, strides, m, k, n = geom
    fa, fb, fy = (flip(ctx.dtype(t)) for t in (node.inputs[0], node.inputs[3], node.outputs[0]))
    batch_arr, strides_arr = np.asarray(batch or [1], np.uint32), np.asarray(strides, np.uint64)
    args = (len(batch), batch_arr, strides_arr, m, k, n, s.a_zp + fa, int(s.b_zp[0]) + fb, float(s.out.m[0]),
            s.out.zero_point + fy, s.out.lo + fy, s.out.hi + fy)

    def emit(g, refs, out, scratch):
        g.add("qmatmul", *args, refs[0], refs[1], out)
    return Layer(node, [node.inputs[0], node.inputs[3]], node.outputs[0], emit)
