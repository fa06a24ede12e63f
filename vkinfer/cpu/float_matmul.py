"""float32 MatMul, Gemm and Conv in the native CPU graph with ONNX Runtime 1.31's bits: one `float_gemm` operator
(cpu_fallback/src/ops/float_gemm.c) each, in MLAS SGEMM's order as vkinfer/reference/float_matmul.py and
float_conv.py define it (the K block or MLAS's M = 1 kernel chosen here exactly as the definition chooses it, so the
C operator equals the numpy kernel bit for bit).

float32 tensors live in the CPU graph in the host's layout (NCHW, plain). A constant B (MatMul's 2-D B, Gemm's B,
transposed here when transB) and the Conv filters and bias are copied into the operator once, when the graph is
built. MatMul folds A's batch into M when B is 2-D (as ORT does) and broadcasts up to 4 batch dimensions otherwise;
Gemm's C broadcasts to (M, N) by strides. Conv takes 1-D and 2-D kernels with constant weights and pads >= 0 after
auto_pad (3-D and computed weights stay on the host, where the definition runs)."""

from __future__ import annotations

import numpy as np

from ..model.lowering import Layer, lower
from ..reference._auto_pad import conv_pads
from ..reference.float_conv import conv_geometry, conv_plan
from ..reference.float_matmul import b_packed, k_block, matmul_plan

_F32 = np.dtype(np.float32)
_NDIMS = 40  # float_gemm.c's FG_NDIMS
_TA, _TB, _W, _C, _BIAS = 1, 2, 4, 8, 16


def _floats(ctx, names) -> bool:
    return all(n and n in ctx.info and np.dtype(ctx.dtype(n)) == _F32 for n in names)


def _dims(m: int, n: int, k: int, kb: int, flags: int, **kw) -> np.ndarray:
    d = np.zeros(_NDIMS, np.uint64)
    d[1:6] = [m, n, k, kb, flags]
    d[6:10] = kw.get("bs", [1, 1, 1, 1])
    d[10:14] = kw.get("a_st", [0, 0, 0, 0])
    d[14:18] = kw.get("b_st", [0, 0, 0, 0])
    d[18:21] = kw.get("c", [0, 0, 0])
    d[21:25] = [kw.get("a_elems", 0), kw.get("b_elems", 0), kw.get("w_elems", 0), kw.get("y_elems", 0)]
    if "conv" in kw:
        d[0] = 1
        d[25:40] = kw["conv"]
    return d


def _const_f32(ctx, name: str) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(ctx.g.consts[name], np.float32))


_NONE = np.zeros(1, np.float32)  # the pointer argument of an absent w / bias


def _batch_strides(shape: tuple, out: tuple, inner: int) -> list[int]:
    """Element strides of a batch `shape` (left-padded to `out`'s rank) over `inner` elements per matrix; 0 where it
    broadcasts; padded to 4 on the left."""
    shape = (1,) * (len(out) - len(shape)) + tuple(shape)
    st, acc = [], inner
    for s in reversed(shape):
        st.append(0 if s == 1 else acc)
        acc *= s
    st = list(reversed(st))
    return [0] * (4 - len(st)) + st


@lower("cpu", "MatMul")
def lower_float_matmul(ctx, node, backend):
    """A float32 MatMul as one float_gemm (module docstring)."""
    a, b = node.inputs[0], node.inputs[1]
    y = node.outputs[0]
    if not _floats(ctx, [a, b, y]):
        return None
    sa, sb = tuple(ctx.shape(a)), tuple(ctx.shape(b))
    if not sa or not sb or 0 in sa or 0 in sb:
        raise ValueError(f"MatMul of shapes {list(sa)} and {list(sb)}: empty or scalar (the host runs it)")
    packed = b_packed(node, b in ctx.g.consts)  # as the interpreter decides (memo["static"])
    m, n, k, kb, _ = matmul_plan(sa, sb, packed)
    a2 = (1,) + sa if len(sa) == 1 else sa
    b2 = sb + (1,) if len(sb) == 1 else sb
    y_elems = int(np.prod(ctx.shape(y)))
    flags = 0
    w = _NONE
    if len(b2) == 2:  # A's batch folded into M (ORT's MatMul does the same)
        bs, a_st, b_st = [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 0]
        mm = int(np.prod(a2[:-1]))
        if mm != m:
            raise ValueError("internal: MatMul's folded M")
    else:
        out = np.broadcast_shapes(a2[:-2], b2[:-2])
        if len(out) > 4:
            raise ValueError(f"MatMul with {len(out)} batch dimensions: the native operator takes 4 (the host runs it)")
        bs = [1] * (4 - len(out)) + list(out)
        a_st = _batch_strides(a2[:-2], out, a2[-2] * k)
        b_st = _batch_strides(b2[:-2], out, k * n)
        mm = a2[-2]
    if b in ctx.g.consts and len(b2) == 2:  # any constant B is copied in once; `packed` only picks the order
        w = _const_f32(ctx, b).reshape(k, n)
        flags |= _W
    a_elems = int(np.prod(sa))
    b_elems = 0 if flags & _W else int(np.prod(sb))
    dims = _dims(mm, n, k, kb, flags, bs=bs, a_st=a_st, b_st=b_st, a_elems=a_elems, b_elems=b_elems,
                 w_elems=w.size if flags & _W else 0, y_elems=y_elems)
    acts = [a] if flags & _W else [a, b]

    def emit(g, refs, out_ref, scratch):
        g.add("float_gemm", dims, 1.0, 0.0, w, _NONE, refs[0], refs[-1], refs[0], out_ref)
    return Layer(node, acts, y, emit)


@lower("cpu", "Gemm")
def lower_float_gemm(ctx, node, backend):
    """A float32 Gemm (transA/transB, alpha, beta, C broadcast) as one float_gemm."""
    ins = list(node.inputs) + [""]
    a, b, c = ins[0], ins[1], ins[2]
    y = node.outputs[0]
    if not _floats(ctx, [a, b, y] + ([c] if c else [])):
        return None
    at = node.attrs
    ta, tb = int(at.get("transA", 0)), int(at.get("transB", 0))
    alpha, beta = float(np.float32(at.get("alpha", 1.0))), float(np.float32(at.get("beta", 1.0)))
    sa, sb = tuple(ctx.shape(a)), tuple(ctx.shape(b))
    if len(sa) != 2 or len(sb) != 2 or 0 in sa or 0 in sb:
        return None  # the definition names the problem
    m, k = (sa[1], sa[0]) if ta else sa
    kb_, n = (sb[1], sb[0]) if tb else sb
    if kb_ != k:
        return None
    use_c = bool(c) and beta != 0.0
    packed = b_packed(node, b in ctx.g.consts and (not c or c in ctx.g.consts))  # memo["static"] as the interpreter
    kb = k_block(m, n, k, packed=packed, trans_a=bool(ta), trans_b=bool(tb), alpha=alpha,
                 beta=beta if use_c else 0.0)
    flags = _TA if ta else 0
    w = _NONE
    if b in ctx.g.consts:
        wv = _const_f32(ctx, b)
        w = np.ascontiguousarray(wv.T if tb else wv)
        flags |= _W
    elif tb:
        flags |= _TB
    cst = [0, 0, 0]
    if use_c:
        sc = tuple(ctx.shape(c))
        if len(sc) > 2:
            return None
        cr, cc = ((1, 1) + sc)[-2:]
        if cr not in (1, m) or cc not in (1, n):
            return None  # the definition names the problem
        cst = [0 if cr == 1 else cc, 0 if cc == 1 else 1, cr * cc]
        flags |= _C
    dims = _dims(m, n, k, kb, flags, a_elems=m * k, b_elems=0 if flags & _W else k * n,
                 w_elems=w.size if flags & _W else 0, y_elems=m * n, c=cst)
    acts = [a] + ([] if flags & _W else [b]) + ([c] if use_c else [])
    nb = 1 if flags & _W else 2

    def emit(g, refs, out_ref, scratch):
        rb = refs[1] if nb == 2 else refs[0]
        rc = refs[nb] if use_c else refs[0]
        g.add("float_gemm", dims, alpha, beta if use_c else 0.0, w, _NONE, refs[0], rb, rc, out_ref)
    return Layer(node, acts, y, emit)


@lower("cpu", "Conv")
def lower_float_conv(ctx, node, backend):
    """A float32 1-D or 2-D Conv with constant weights as one float_gemm in convolution mode."""
    ins = list(node.inputs) + [""]
    x, wn, bn = ins[0], ins[1], ins[2]
    y = node.outputs[0]
    if not _floats(ctx, [x, wn, y] + ([bn] if bn else [])):
        return None
    if wn not in ctx.g.consts or (bn and bn not in ctx.g.consts):
        raise ValueError("float Conv with computed weights or bias (the host runs it)")
    sx, w = tuple(ctx.shape(x)), _const_f32(ctx, wn)
    if len(sx) not in (3, 4) or w.ndim != len(sx) or 0 in sx:
        raise ValueError(f"float Conv of input {list(sx)}: the native operator takes 1-D and 2-D (the host runs it)")
    a = node.attrs
    r = len(sx) - 2
    group = int(a.get("group", 1))
    strides = [int(v) for v in (a.get("strides") or [1] * r)]
    dilations = [int(v) for v in (a.get("dilations") or [1] * r)]
    pads = conv_pads(node, sx, w.shape)
    if min(pads) < 0:
        raise ValueError("float Conv whose auto_pad gives a negative pad (the host runs it)")
    out, mg, k, _ = conv_geometry(sx, w.shape, group, strides, pads, dilations)
    kb, _ = conv_plan(sx, w.shape, group, strides, pads, dilations)
    if tuple(ctx.shape(y)) != (sx[0], w.shape[0], *out):
        return None
    bias = _NONE
    flags = 0
    if bn:
        bias = _const_f32(ctx, bn).reshape(-1)
        if bias.size != w.shape[0]:
            return None
        flags |= _BIAS
    if r == 1:  # as MLAS: a 1-D convolution is a 2-D one of height 1
        h, wd, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow = (1, sx[2], 1, w.shape[2], 1, strides[0], 1, dilations[0], 0,
                                                         pads[0], 1, out[0])
    else:
        h, wd, kh, kw = sx[2], sx[3], w.shape[2], w.shape[3]
        (sh, sw), (dh, dw), pt, pl, (oh, ow) = strides, dilations, pads[0], pads[1], out
    wflat = np.ascontiguousarray(w.reshape(-1))
    dims = _dims(mg, oh * ow, k, kb, flags, w_elems=wflat.size, y_elems=sx[0] * w.shape[0] * oh * ow,
                 conv=[sx[0], sx[1], h, wd, group, kh, kw, sh, sw, dh, dw, pt, pl, oh, ow])

    def emit(g, refs, out_ref, scratch):
        g.add("float_gemm", dims, 1.0, 0.0, wflat, bias, refs[0], refs[0], refs[0], out_ref)
    return Layer(node, [x], y, emit)
