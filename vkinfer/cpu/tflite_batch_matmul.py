"""TFLite's int8 BATCH_MATMUL in the native CPU graph (vkinfer/reference/tflite_batch_matmul.py), every operand
at its byte strides in the CPU form (adj_x / adj_y as swapped strides, numpy-broadcast batch axes, 4-D NHWC
without a copy): with y's zero point 0 (litert's XNNPACK path, float32 requantization) H4's `qmatmul` operator
(cpu_fallback/src/ops/qmatmul.c, ORT's requantization, the same arithmetic), else the `tflite_batch_matmul`
operator (cpu_fallback/src/ops/tflite_batch_matmul.c, the builtin kernel's fixed point)."""

from __future__ import annotations

import numpy as np

from ..model.lowering import Layer, lower, static_params
from ..reference import _qcheck as qc
from ..reference.tflite_batch_matmul import batch_matmul_multiplier, batch_matmul_shapes


def batch_matmul_geometry(ctx, node, packed: bool = False):
    """(batch axes, strides: a_m, a_k, b_k, b_n, y_m, y_n then a, b, y per batch axis, m, k, n) in the CPU form
    (`packed`: Vulkan's), size-1 batch axes dropped; None past 4 batch axes or on a shape mismatch."""
    from .qlinear_add import form_strides
    from .qlinear_matmul import batch_strides

    a, b, y = node.inputs[0], node.inputs[3], node.outputs[0]
    sa, sb, so = (tuple(int(d) for d in ctx.shape(t)) for t in (a, b, y))
    adj_x, adj_y = bool(node.attrs.get("adj_x", 0)), bool(node.attrs.get("adj_y", 0))
    try:
        batch_shape, m, k, n = batch_matmul_shapes(sa, sb, adj_x, adj_y)
    except ValueError:
        return None
    if so != (*batch_shape, m, n):
        return None
    fa, fb, fy = form_strides(sa, packed), form_strides(sb, packed), form_strides(so, packed)
    am, ak = (fa[-1], fa[-2]) if adj_x else (fa[-2], fa[-1])
    bk, bn = (fb[-1], fb[-2]) if adj_y else (fb[-2], fb[-1])
    walk = batch_strides(sa, sb, so, fa, fb, fy, [am, ak, bk, bn, fy[-2], fy[-1]])
    return None if walk is None else (*walk, m, k, n)


def batch_matmul_params(ctx, node) -> tuple[int, int, int, np.float32, int, int] | None:
    """(x_zp, y_zp, out_zp, float32 multiplier, q, shift) of an int8 vkinfer:TFLiteBatchMatMul with constant
    parameters that the operators take (the fixed-point path: a multiplier below 1), else None."""
    from ..reference.requant import multiplier

    ins = node.inputs
    if not (static_params(ctx, node, (1, 2, 4, 5, 6, 7)) and all(
            ctx.dtype(t) == np.int8 for t in (ins[0], ins[3], node.outputs[0]))):
        return None
    c, i8 = ctx.g.consts, np.dtype(np.int8)
    try:
        xs, ys, os_ = (qc.scale(nm, c[ins[i]]) for nm, i in (("x_scale", 1), ("y_scale", 4), ("out_scale", 6)))
        xz, yz, oz = (qc.zero_point(nm, c[ins[i]], i8) for nm, i in (("x_zp", 2), ("y_zp", 5), ("out_zp", 7)))
    except (ValueError, TypeError):
        return None  # the interpreter's kernel reports it
    m = np.float32(np.asarray(multiplier(xs, ys, os_)).reshape(()))
    q, shift = batch_matmul_multiplier(xs, ys, os_)
    if (yz == 0 and not np.isfinite(m)) or (yz != 0 and not (2 ** 30 <= q < 2 ** 31 and -31 <= shift <= 0)):
        return None
    return xz, yz, oz, m, q, shift


@lower("cpu", "vkinfer:TFLiteBatchMatMul")
def lower_tflite_batch_matmul(ctx, node, backend):
    if (p := batch_matmul_params(ctx, node)) is None or (geom := batch_matmul_geometry(ctx, node)) is None:
        return None
    batch, strides, m, k, n = geom
    if k * 255 * 255 >= 2 ** 31:
        return None
    xz, yz, oz, mult, q, shift = p
    head = (len(batch), np.asarray(batch or [1], np.uint32), np.asarray(strides, np.uint64), m, k, n, xz + 128,
            yz + 128)
    if yz == 0:  # XNNPACK's float32 requantization: the qmatmul operator's
        op, args = "qmatmul", (*head, float(mult), oz + 128, 0, 255)
    else:
        op, args = "tflite_batch_matmul", (*head, oz + 128, q, shift)

    def emit(g, refs, out, scratch):
        g.add(op, *args, refs[0], refs[1], out)
    return Layer(node, [node.inputs[0], node.inputs[3]], node.outputs[0], emit)
