"""TFLite's int8 BATCH_MATMUL on Vulkan where litert runs XNNPACK's form (y's zero point 0: float32
requantization, the requantization contract): H4's shaders/qlinear_matmul_act.comp (vulkan/qlinear_matmul.py
`QLinearMatMulAct`) over the packed operands at their byte strides, adj_x / adj_y as swapped strides. The builtin
kernel's fixed point (y's zero point nonzero) has no shader: the CPU runs it."""

from __future__ import annotations

import numpy as np

from ..cpu.qlinear_add import form_strides
from ..cpu.tflite_batch_matmul import batch_matmul_params
from ..layout import form_perm
from ..model.lowering import Layer, lower
from ..reference.requant import QRANGE, split_float32
from ..reference.tflite_batch_matmul import batch_matmul_shapes
from .qlinear_matmul import QLinearMatMulAct, check_matmul_act_loops


@lower("vulkan", "vkinfer:TFLiteBatchMatMul")
def lower_tflite_batch_matmul(ctx, node, backend):
    if (p := batch_matmul_params(ctx, node)) is None or p[1] != 0:
        return None
    xz, _, oz, mult, _, _ = p
    a, b, y = node.inputs[0], node.inputs[3], node.outputs[0]
    sa, sb, so = (tuple(int(d) for d in ctx.shape(t)) for t in (a, b, y))
    adj_x, adj_y = bool(node.attrs.get("adj_x", 0)), bool(node.attrs.get("adj_y", 0))
    try:
        batch, m, k, n = batch_matmul_shapes(sa, sb, adj_x, adj_y)
    except ValueError:
        return None
    r = len(so)
    if so != (*batch, m, n) or r > 4 or r != max(len(sa), len(sb)):
        return None
    fa, fb = form_strides(sa, True), form_strides(sb, True)
    am, ak = (fa[-1], fa[-2]) if adj_x else (fa[-2], fa[-1])
    bk, bn = (fb[-1], fb[-2]) if adj_y else (fb[-2], fb[-1])
    per_a, per_b = [0] * r, [0] * r
    for j in range(r - 2):
        for shape, st, per in ((sa, fa, per_a), (sb, fb, per_b)):
            i = j - (r - len(shape))
            per[j] = 0 if i < 0 or shape[i] == 1 else st[i]
    per_a[r - 2], per_b[r - 1] = am, bn
    perm = form_perm(so)
    xa, xb = [per_a[q] for q in perm], [per_b[q] for q in perm]
    if max(xa + xb + [4 * int(np.prod(sa)) + 4 * int(np.prod(sb)) + k * max(ak, bk)]) >= 2 ** 30:
        return None
    mant, exp = split_float32(np.atleast_1d(np.float32(mult)))
    lo, hi = QRANGE[np.dtype(np.int8)]
    push = [xz, 0, oz, lo, hi, int(mant[0]), int(exp[0])]
    check_matmul_act_loops(k)
    geom = (xa, xb, ak, bk)
    return Layer(node, [a, b], y, make=lambda: QLinearMatMulAct((sa, sb, so), k, geom, (True, True), push,
                                                               backend.dev))
