"""ONNX QuantizeLinear (float32 -> uint8/int8), bit-exact with ONNX Runtime 1.31 (MLAS MlasQuantizeLinear).

    y = clamp(round_half_even(float32(x / scale)), qmin - zp, qmax - zp) + zp
with one float32 division (not a multiply by the reciprocal). Per-tensor (scalar scale) or per-axis (1-D
scale of length x.shape[axis]). NaN is rejected: ORT's vector path maps it to qmin but its scalar tail
path is undefined behaviour, so the result depends on the element's position.
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc


def quantize_values(x: np.ndarray, scale, zero_point, dtype) -> np.ndarray:
    """MLAS's quantize kernel on float32 values; scale/zero_point broadcast against x."""
    lo, hi = qc.QRANGE[np.dtype(dtype)]
    zp = np.asarray(zero_point, dtype=np.int32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        q = np.asarray(x, dtype=np.float32) / np.asarray(scale, dtype=np.float32)
        q = np.minimum(np.maximum(q, (lo - zp).astype(np.float32)), (hi - zp).astype(np.float32))
    return (np.rint(q).astype(np.int32) + zp).astype(dtype)


def _params(x, y_scale, y_zero_point, axis, dtype):
    s = np.asarray(y_scale)
    if s.dtype.kind != "f":
        raise TypeError(f"y_scale must be float32, got {s.dtype}")
    s = s.astype(np.float32)
    if not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError("y_scale must be positive and finite")
    if y_zero_point is None:
        z = np.zeros(s.shape, np.int64)
    else:
        z = np.asarray(y_zero_point)
        if isinstance(y_zero_point, np.ndarray | np.generic) and z.dtype != dtype:
            raise TypeError(f"y_zero_point must have dtype {np.dtype(dtype)}, got {z.dtype}")
        if z.shape != s.shape:
            raise ValueError(f"y_zero_point shape {z.shape} differs from y_scale shape {s.shape}")
        lo, hi = qc.QRANGE[np.dtype(dtype)]
        if z.dtype.kind not in "iu" or np.any(z < lo) or np.any(z > hi):
            raise ValueError(f"y_zero_point must be integers in [{lo}, {hi}]")
    if s.size == 1 and s.ndim <= 1:
        return s.reshape(()), z.reshape(()).astype(np.int32)
    if s.ndim != 1:
        raise ValueError(f"y_scale must be a scalar or 1-D, got shape {s.shape}")
    if not isinstance(axis, int) or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis!r} is out of range for x with {x.ndim} dims")
    axis %= x.ndim
    if s.shape[0] != x.shape[axis]:
        raise ValueError(f"y_scale has {s.shape[0]} entries but x.shape[axis] = {x.shape[axis]}")
    shape = [1] * x.ndim
    shape[axis] = -1
    return s.reshape(shape), z.reshape(shape).astype(np.int32)


def quantize_linear(x, y_scale, y_zero_point=None, axis: int = 1, dtype=None) -> np.ndarray:
    """x float32 -> dtype (that of y_zero_point, else `dtype`, default uint8)."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError("x must be a float32 numpy array")
    if np.isnan(x).any():
        raise ValueError("x contains NaN (ORT's result is position dependent)")
    if dtype is None:
        dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else np.uint8
    dtype = np.dtype(dtype)
    if dtype not in qc.QRANGE:
        raise TypeError(f"output dtype must be uint8 or int8, got {dtype}")
    s, z = _params(x, y_scale, y_zero_point, axis, dtype)
    return quantize_values(x, s, z, dtype)
