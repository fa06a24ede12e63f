"""float32 MatMul and Gemm (what stays float between quantized ops: a node the quantizer excluded, a float weight it
left) with ONNX Runtime 1.31's CPU bits: MLAS SGEMM's summation order, reproduced exactly (tests/ops/
test_float_matmul.py, against ORT on random and edge shapes).

MLAS's SGEMM (onnxruntime/core/mlas/lib/sgemm.cpp) computes C = alpha * A B + beta * C in K blocks. Its FMA3 and
AVX-512F kernels keep one accumulator per output: within a K block it is a chain of fused multiply-adds from +0 over
k in order, whatever the vector width, so the bits do not depend on the CPU. Per output (m, n):

    y = beta * C (rounded; C itself for beta 1, nothing for beta 0 or no C)
    per K block [k0, k1): acc = fma(a[m,k1-1], b[k1-1,n], ... fma(a[m,k0], b[k0,n], +0))
                          y = acc * alpha for the first block when there is no y (beta 0), else fma(acc, alpha, y)

The K block (`k_block`):
- B packed (ORT prepacks a constant B of MatMul and Gemm: MlasGemmPackB): MLAS_SGEMM_PACKED_STRIDEK = 256;
- B not packed (an activation B; Conv's im2col panel, vkinfer/reference/float_conv.py): MLAS_SGEMM_STRIDEK = 128,
  halved (N doubled) while it is at least twice K when N >= K, or doubled while the N stride (128, down to 16)
  halves to at least N when N < K and A is not transposed (MlasSgemmOperation's panel shaping).

Two special kernels of the unpacked SGEMM (alpha 1, beta 0 or 1):
- M = 1, A and B not transposed: MlasSgemmKernelM1Avx (AVX, no FMA), reproduced (`K_BLOCK_M1`): k in groups of 4,
  t = ((a0 b0 + a1 b1) + a2 b2) + a3 b3 with every product and sum rounded, y = t + y (y = +0 for the first group in
  beta-0 mode); then a group of 2 left, then 1, the same way.
- M = 1 with B transposed, or N = 1 with contiguous B and C: MlasSgemmKernelM1TransposeBAvx, a dot product over
  8 lanes with a horizontal sum, not reproduced: vkinfer keeps the blocked order there, a few ulps of the largest
  |partial sum| apart (pinned in tests/ops/test_float_matmul.py; vkinfer/model/host_float.py's list).

This is ORT with one intra-op thread (the project's oracle, as for the reductions). With more, MLAS slices N (or M)
across threads and the unpacked K block follows the thread's N slice (MlasSgemmTryMultithread, MlasConvPrepare's
ThreadStrideN), so ORT's own bits change with its thread count: a few ulps of the largest |partial sum| (pinned in
tests/ops/test_float_matmul.py::test_ort_thread_count_changes_its_bits).

ORT's MatMul prepacks a constant B only when it is 2-D (a 1-D or batched constant B takes the unpacked order,
measured). It folds A's batch into M when B is 2-D (one GEMM, so an M of 1 needs a 1-row A overall); with a batched B
each batch is its own GEMM. ORT packs B when it is an initializer of the model (`b_packed`: the importer marks it; a
DequantizeLinear of a constant that vkinfer folds into a constant is not one in ORT, which runs that node).
"""

from __future__ import annotations

import numpy as np

from ._float32 import fma32

F32 = np.float32
STRIDE_N, STRIDE_K, PACKED_STRIDE_K = 128, 128, 256  # MLAS_SGEMM_STRIDEN / _STRIDEK / _PACKED_STRIDEK
K_BLOCK_M1 = 0  # `k_block`'s value for the M = 1 AVX kernel
_LOW29, _HALF29 = np.uint64((1 << 29) - 1), np.uint64(1 << 28)  # float64 bits below float32's last place
_TINY = 2.0 ** -126


def fma(a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """float32 fma(a, b, acc) (one rounding), elementwise with broadcasting: a * b is exact in float64 and
    a * b + acc rounds once there; its float32 rounding is the fused one unless it sits on a float32 midpoint or
    below float32's normals, where the exact `fma32` runs instead."""
    with np.errstate(over="ignore", invalid="ignore"):
        s = a.astype(np.float64) * b.astype(np.float64) + acc
        low = s.view(np.uint64) & _LOW29
        odd = (low == _HALF29) | ((low == 0) & (np.abs(s) < _TINY) & (s != 0))
        if odd.any():
            return fma32(a, b, acc)
        return s.astype(F32)


def stride_k(n: int, k: int, trans_a: bool = False) -> int:
    """The K block of MLAS's unpacked SGEMM for an N of `n` and a K of `k` (module docstring)."""
    sn, sk = STRIDE_N, STRIDE_K
    if n >= k:
        while sk // 2 >= k:
            sn, sk = sn * 2, sk // 2
    elif not trans_a:
        while sn > 16 and sn // 2 >= n:
            sn, sk = sn // 2, sk * 2
    return sk


def k_block(m: int, n: int, k: int, *, packed: bool, trans_a: bool = False, trans_b: bool = False,
            alpha: float = 1.0, beta: float = 0.0) -> int:
    """How MLAS sums one GEMM: the K block, or K_BLOCK_M1 for its M = 1 AVX kernel (module docstring)."""
    if packed:
        return PACKED_STRIDE_K
    if m == 1 and not trans_a and not trans_b and alpha == 1.0 and beta in (0.0, 1.0):
        return K_BLOCK_M1
    return stride_k(n, k, trans_a)


def bounded(m: int, n: int, *, packed: bool, trans_a: bool = False, trans_b: bool = False, alpha: float = 1.0,
            beta: float = 0.0) -> bool:
    """Whether ORT runs this GEMM with its M = 1 transposed-B dot-product kernel (not reproduced: bounded)."""
    if packed or alpha != 1.0 or beta not in (0.0, 1.0):
        return False
    return (m == 1 and not trans_a and trans_b) or (n == 1 and not trans_b and not (m == 1 and not trans_a))


def sgemm(a: np.ndarray, b: np.ndarray, kb: int, alpha: float = 1.0, c: np.ndarray | None = None) -> np.ndarray:
    """alpha * a @ b (+ c) in MLAS's order: a (..., M, K), b (..., K, N) float32 (batch dims broadcast), `kb` from
    `k_block`, `c` the already beta-scaled C broadcast to the output (None: beta 0)."""
    alpha = F32(alpha)
    m, k = a.shape[-2:]
    n = b.shape[-1]
    shape = np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (m, n)
    y = None if c is None else np.broadcast_to(np.asarray(c, F32), shape).astype(F32)
    if kb == K_BLOCK_M1:
        return _m1(a, b, y, shape)
    with np.errstate(over="ignore", invalid="ignore"):
        for k0 in range(0, k, kb):
            acc = np.zeros(shape, F32)
            for i in range(k0, min(k, k0 + kb)):
                acc = fma(a[..., :, i:i + 1], b[..., i:i + 1, :], acc)
            y = acc * alpha if y is None else fma(acc, np.broadcast_to(alpha, shape), y)
    return np.zeros(shape, F32) if y is None else y


def _m1(a: np.ndarray, b: np.ndarray, y: np.ndarray | None, shape) -> np.ndarray:
    """MlasSgemmKernelM1Avx's order (module docstring)."""
    k = a.shape[-1]
    groups = [(i, 4) for i in range(0, k - k % 4, 4)]
    rest = k - k % 4
    if k % 4 >= 2:
        groups.append((rest, 2))
        rest += 2
    if k % 2:
        groups.append((rest, 1))
    with np.errstate(over="ignore", invalid="ignore"):
        for k0, g in groups:
            t = a[..., :, k0:k0 + 1] * b[..., k0:k0 + 1, :]
            for i in range(k0 + 1, k0 + g):
                t = t + a[..., :, i:i + 1] * b[..., i:i + 1, :]
            y = (t + F32(0)) if y is None else t + y
    return np.broadcast_to(F32(0), shape).astype(F32) if y is None else np.broadcast_to(y, shape).astype(F32)


def _f32(v, what: str) -> np.ndarray:
    v = np.asarray(v)
    if v.dtype != F32:
        raise TypeError(f"{what} must be float32 (vkinfer runs ORT's float32 GEMM), got {v.dtype}")
    return v


def matmul_plan(a_shape, b_shape, packed: bool) -> tuple[int, int, int, int, bool]:
    """(M, N, K, k_block, bounded) of ORT's MatMul for these operand shapes (1-D operands promoted as numpy does; A's
    batch folded into M when B is 2-D; bounded: ORT's dot-product kernel, see `bounded`). ValueError when the shapes
    do not multiply."""
    ra, rb = len(a_shape), len(b_shape)
    packed = packed and rb == 2  # ORT's MatMul prepacks a 2-D B only
    if ra == 0 or rb == 0:
        raise ValueError("MatMul operands must have at least one dimension")
    k = a_shape[-1]
    kb_dim = b_shape[0] if rb == 1 else b_shape[-2]
    if k != kb_dim:
        raise ValueError(f"MatMul: A {list(a_shape)} and B {list(b_shape)} do not multiply (K {k} against {kb_dim})")
    n = 1 if rb == 1 else b_shape[-1]
    m = 1 if ra == 1 else a_shape[-2]
    if rb <= 2 and ra > 2:
        m = int(np.prod(a_shape[:-1]))
    try:
        np.broadcast_shapes(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
    except ValueError as e:
        raise ValueError(f"MatMul: batch dimensions of A {list(a_shape)} and B {list(b_shape)} do not broadcast") from e
    return m, n, k, k_block(m, n, k, packed=packed), bounded(m, n, packed=packed)


def matmul(a: np.ndarray, b: np.ndarray, packed: bool) -> np.ndarray:
    """ONNX MatMul of float32 a and b (numpy's broadcasting and 1-D rules) with ORT's bits; `packed`: B is a
    constant (ORT prepacks it when it is 2-D)."""
    a, b = _f32(a, "MatMul's A"), _f32(b, "MatMul's B")
    kb = matmul_plan(a.shape, b.shape, packed)[3]
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    y = sgemm(a2, b2, kb)
    if a.ndim == 1:
        y = y[..., 0, :]
    if b.ndim == 1:
        y = y[..., 0]
    return y


def gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None, *, alpha=1.0, beta=1.0, trans_a: int = 0,
         trans_b: int = 0, packed: bool = False) -> np.ndarray:
    """ONNX Gemm of float32 operands with ORT's bits: ORT copies C broadcast to (M, N) into Y, then MLAS scales it
    by beta (beta not 0 or 1) and accumulates alpha * A B in its order; `packed`: B is a constant ORT prepacks."""
    a, b = _f32(a, "Gemm's A"), _f32(b, "Gemm's B")
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"Gemm takes 2-D A and B, got {list(a.shape)} and {list(b.shape)}")
    at, bt = (a.T if trans_a else a), (b.T if trans_b else b)
    if at.shape[1] != bt.shape[0]:
        raise ValueError(f"Gemm: A {list(a.shape)} (transA {trans_a}) and B {list(b.shape)} (transB {trans_b}) "
                         "do not multiply")
    m, k = at.shape
    n = bt.shape[1]
    alpha, beta = F32(alpha), F32(beta)
    if c is None or beta == 0:
        beta, y0 = F32(0), None
    else:
        c = _f32(c, "Gemm's C")
        try:
            y0 = np.broadcast_to(c, (m, n)).astype(F32)
        except ValueError as e:
            raise ValueError(f"Gemm: C {list(c.shape)} does not broadcast to ({m}, {n})") from e
        if beta != 1:
            y0 = y0 * beta
    kb = k_block(m, n, k, packed=packed, trans_a=bool(trans_a), trans_b=bool(trans_b), alpha=float(alpha),
                 beta=float(beta))
    return sgemm(np.ascontiguousarray(at), np.ascontiguousarray(bt), kb, alpha, y0)


def _attr_f(node, key: str, default: float) -> float:
    v = node.attrs.get(key, default)
    try:
        return float(v)
    except (TypeError, ValueError) as e:
        raise ValueError(f"attribute {key!r} must be a float, got {v!r}") from e


def b_packed(node, static: bool) -> bool:
    """Whether ORT prepacks the node's B: B is an initializer of the model (the importer's `_b_initializer`; a
    DequantizeLinear of a constant that vkinfer folds is not one in ORT), else `static` (every input after A a
    constant: graphs built without the ONNX importer)."""
    return bool(node.attrs.get("_b_initializer", static))


def matmul_kernel(node, x, memo):
    """MatMul of two float32 tensors (B constant: ORT's packed order); two integer tensors of one type multiply
    exactly (wrapping, as ORT's integer MatMul)."""
    a, b = np.asarray(x[0]), np.asarray(x[1])
    if a.dtype.kind in "iu" and a.dtype == b.dtype and a.ndim and b.ndim:
        return [np.matmul(a, b)]
    return [matmul(a, b, b_packed(node, bool(memo.get("static", False))))]


def gemm_kernel(node, x, memo):
    """Gemm of float32 tensors (transA, transB, alpha, beta; C optional, broadcast)."""
    c = x[2] if len(x) > 2 else None
    return [gemm(x[0], x[1], c, alpha=_attr_f(node, "alpha", 1.0), beta=_attr_f(node, "beta", 1.0),
                 trans_a=int(node.attrs.get("transA", 0)), trans_b=int(node.attrs.get("transB", 0)),
                 packed=b_packed(node, bool(memo.get("static", False))))]


def matmul_shape(node, x) -> list:
    """MatMul's output (shape, dtype), checked as the kernel checks it (the trace's shape rule)."""
    a, b = np.asarray(x[0]), np.asarray(x[1])
    matmul_plan(a.shape, b.shape, False)
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    shape = batch + ((a.shape[-2],) if a.ndim > 1 else ()) + ((b.shape[-1],) if b.ndim > 1 else ())
    return [(shape, a.dtype)]


def gemm_shape(node, x) -> list:
    """Gemm's output (shape, dtype): (M, N)."""
    a, b = np.asarray(x[0]), np.asarray(x[1])
    if a.ndim != 2 or b.ndim != 2:
        raise ValueError(f"Gemm takes 2-D A and B, got {list(a.shape)} and {list(b.shape)}")
    m = a.shape[1] if int(node.attrs.get("transA", 0)) else a.shape[0]
    n = b.shape[0] if int(node.attrs.get("transB", 0)) else b.shape[1]
    return [((m, n), a.dtype)]
