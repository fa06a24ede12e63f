"""com.microsoft MatMulIntegerToFloat with a constant 2-D B (the QDQ MatMul with a float output,
vkinfer/model/qdq_rules.py fold_matmul_to_float) in the native CPU graph: the `qmatmul_f32` operator (int32 sums,
one float32 multiply by float32(a_scale * b_scale) per column, then the bias), A's rows (rank 2 or 3: the CPU form
is row-major) on canonical bytes. The same operator runs com.microsoft QGemm with a float output
(reference/qgemm.py qgemm_float: an int32 C per column starts each sum, the multiplier float32(alpha * a_scale) *
b_scale[j]); a C of another shape stays on the host."""

from __future__ import annotations

import numpy as np

from ..layout import flip
from ..model.lowering import Layer, lower


@lower("cpu", "com.microsoft:MatMulIntegerToFloat")
def lower_matmul_integer_to_float(ctx, node, backend):
    ins = (node.inputs + [""] * 7)[:7]
    a, b, y = ins[0], ins[1], node.outputs[0]
    if not (ctx.quantized(a) and all(ctx.const(i) for i in ins[1:]) and b and ins[2] and ins[3]):
        return None
    c = ctx.g.consts
    bw = np.asarray(c[b])
    shape = ctx.shape(a)
    if bw.ndim != 2 or bw.dtype not in (np.uint8, np.int8) or len(shape) not in (2, 3) or shape[-1] != bw.shape[0]:
        return None
    k, n = bw.shape
    sa, sb = np.asarray(c[ins[2]]), np.asarray(c[ins[3]])
    za = np.asarray(c[ins[4]]) if ins[4] else np.zeros((), ctx.dtype(a))
    zb = np.asarray(c[ins[5]]) if ins[5] else np.zeros((), bw.dtype)
    bias = np.asarray(c[ins[6]]) if ins[6] else None
    if (sa.dtype != np.float32 or sb.dtype != np.float32 or sa.size != 1 or sb.size not in (1, n) or za.size != 1
            or zb.size not in (1, n) or za.dtype != ctx.dtype(a) or zb.dtype != bw.dtype
            or (bias is not None and (bias.dtype != np.float32 or bias.size != n))):
        return None  # the reference raises the error naming the input
    scale = np.ascontiguousarray(np.broadcast_to(sa.reshape(()) * sb.reshape(-1), (n,)), np.float32)
    fb = flip(bw.dtype)
    b_canon = np.ascontiguousarray((bw.astype(np.int32) + fb).astype(np.uint8))
    zb_canon = np.ascontiguousarray(np.broadcast_to(zb.reshape(-1).astype(np.int64) + fb, (n,)), np.uint32)
    a_zp = int(za.reshape(())) + flip(ctx.dtype(a))
    bias_arr = None if bias is None else np.ascontiguousarray(bias.reshape(n), np.float32)
    rows = int(np.prod(shape[:-1]))

    def emit(g, refs, out, scratch):
        g.add("qmatmul_f32", rows, k, n, a_zp, b_canon, zb_canon, scale, bias_arr, None, refs[0], out)
    return Layer(node, [a], y, emit)


def lower_qgemm_float(ctx, node):
    """A QGemm with a float output (no y_scale) as one qmatmul_f32, or None (the host runs it): A a quantized 2-D
    tensor (transA 0: quant_ops.split_transposed_a made it so), B, the parameters and C constant, C absent or an
    int32 scalar or per-column vector."""
    ins = (node.inputs + [""] * 9)[:9]
    a, b, y = ins[0], ins[3], node.outputs[0]
    if (node.attrs.get("transA", 0) or not (ctx.quantized(a) and b and ins[1] and ins[4])
            or not all(ctx.const(i) for i in ins[1:7] if i)):
        return None
    c = ctx.g.consts
    bw = np.asarray(c[b])
    if node.attrs.get("transB", 0):
        bw = bw.T
    shape = ctx.shape(a)
    if bw.ndim != 2 or bw.dtype not in (np.uint8, np.int8) or len(shape) != 2 or shape[-1] != bw.shape[0]:
        return None
    k, n = bw.shape
    sa, sb = np.asarray(c[ins[1]]), np.asarray(c[ins[4]])
    za = np.asarray(c[ins[2]]) if ins[2] else np.zeros((), ctx.dtype(a))
    zb = np.asarray(c[ins[5]]) if ins[5] else np.zeros((), bw.dtype)
    cc = np.asarray(c[ins[6]]) if ins[6] else None
    if (sa.dtype != np.float32 or sb.dtype != np.float32 or sa.size != 1 or sb.size not in (1, n) or za.size != 1
            or zb.size not in (1, n) or za.dtype != ctx.dtype(a) or zb.dtype != bw.dtype
            or (cc is not None and (cc.dtype != np.int32 or cc.size not in (1, n) or cc.ndim > 2
                                    or (cc.size == n and n > 1 and cc.shape[-1] != n)))):
        return None  # the reference raises the error naming the input, or runs the other C shapes
    alpha = np.float32(node.attrs.get("alpha", 1.0))
    scale = np.ascontiguousarray(np.broadcast_to(np.float32(alpha * sa.reshape(())[()]) * sb.reshape(-1), (n,)),
                                 np.float32)
    fb = flip(bw.dtype)
    b_canon = np.ascontiguousarray((bw.astype(np.int32) + fb).astype(np.uint8))
    zb_canon = np.ascontiguousarray(np.broadcast_to(zb.reshape(-1).astype(np.int64) + fb, (n,)), np.uint32)
    a_zp = int(za.reshape(())) + flip(ctx.dtype(a))
    c_arr = None if cc is None else np.ascontiguousarray(np.broadcast_to(cc.reshape(-1), (n,)), np.int32)
    rows = int(shape[0])

    def emit(g, refs, out, scratch):
        g.add("qmatmul_f32", rows, k, n, a_zp, b_canon, zb_canon, scale, None, c_arr, refs[0], out)
    return Layer(node, [a], y, emit)
