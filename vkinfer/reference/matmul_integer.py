"""ONNX MatMulInteger: int32 y = (a - a_zero_point) @ (b - b_zero_point) with numpy matmul broadcasting, equal to
ONNX Runtime 1.31.

a, b uint8/int8 (each its own type); a_zero_point a scalar or one per row of a (M), b_zero_point a scalar, one per
column of b (N) or, for batched b, shaped (..., 1, N) like ONNX Runtime's per-column layout. Exact integer
arithmetic (float64 sums of products are exact below 2**53), wrapping at int32 like an int32 accumulator.
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc


def _zp(name: str, z, dtype: np.dtype) -> np.ndarray:
    if z is None:
        return np.zeros((), np.float64)
    a = np.asarray(z)
    if a.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype} (its tensor's), got {a.dtype}")
    return a.astype(np.float64)


def matmul_integer(a, b, a_zero_point=None, b_zero_point=None) -> np.ndarray:
    qc.qtensor("a", a)
    qc.qtensor("b", b)
    if a.ndim < 1 or b.ndim < 1:
        raise ValueError("a and b must have at least one dimension")
    az, bz = _zp("a_zero_point", a_zero_point, a.dtype), _zp("b_zero_point", b_zero_point, b.dtype)
    if az.size != 1:
        if az.ndim != 1 or a.ndim < 2 or az.size != a.shape[-2]:
            raise ValueError(f"a_zero_point must be a scalar or have one entry per row ({a.shape[-2:-1]}), "
                             f"got shape {az.shape}")
        az = az[:, None]
    else:
        az = az.reshape(())
    if bz.size != 1:
        n = b.shape[-1]
        if bz.ndim == 1 and bz.size == n:
            pass
        elif bz.ndim == b.ndim and bz.shape[-2] == 1 and bz.shape[-1] == n:
            pass
        else:
            raise ValueError(f"b_zero_point must be a scalar, one entry per column ({n}) or shaped (..., 1, {n}), "
                             f"got shape {bz.shape}")
    else:
        bz = bz.reshape(())
    try:
        acc = np.matmul(a.astype(np.float64) - az, b.astype(np.float64) - bz)
    except ValueError as e:
        raise ValueError(f"a {a.shape} and b {b.shape} do not multiply: {e}") from None
    return np.asarray(acc).astype(np.int64).astype(np.int32)  # int32 wrap-around, as an int32 accumulator would
