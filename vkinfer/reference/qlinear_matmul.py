"""QLinearMatMul, the readable definition (ONNX semantics, ONNX Runtime's requantization).

acc[..., i, j] = sum_k (a[..., i, k] - a_zp) * (b[..., k, j] - b_zp[j]) in int32; then requantize().
"""

from __future__ import annotations

import numpy as np

from .requant import requantize


def qlinear_matmul(s) -> np.ndarray:
    """Quantized output of a validated MatMulSpec, in the broadcast output shape."""
    a = s.a.astype(np.float64) - s.a_zp
    b = s.b.astype(np.float64) - s.b_zp[None, None, :]
    acc = np.matmul(a, b).astype(np.int64).astype(np.int32)  # exact: |acc| < 2**53
    q = requantize(acc, s.out.m[None, None, :], s.out.zero_point, s.out.lo, s.out.hi)
    return q.astype(s.out.dtype).reshape(s.out_shape)
