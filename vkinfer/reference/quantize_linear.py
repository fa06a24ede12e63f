"""ONNX QuantizeLinear (float32 -> uint8/int8), bit-exact with ONNX Runtime 1.31 (MLAS MlasQuantizeLinear).

    y = clamp(round_half_even(float32(x / scale)), qmin - zp, qmax - zp) + zp
with one float32 division (not a multiply by the reciprocal). Per-tensor (scalar scale), per-axis (1-D
scale of length x.shape[axis]) or blocked (opset 21 `block_size` B > 0: scale and zero point have x's rank,
x's shape except ceil(x.shape[axis] / B) along `axis`; element i along `axis` uses entry i // B, the last block
may be short, as ONNX and ORT allow). NaN is rejected: ORT's vector path maps it to qmin but its scalar tail
path is undefined behaviour, so the result depends on the element's position. Blocked quantization uses the
same per-element arithmetic in ORT 1.31 (checked bit for bit in tests/numerics/test_quant_ops.py), except that where
elements follow the block axis ORT converts x / scale to int32 before it clamps: |x / scale| >= 2**31
(infinities included) is undefined behaviour there (x86: INT_MIN, plus the zero point, which can wrap to qmax),
rejected with ValueError.
"""

from __future__ import annotations

import math

import numpy as np

from . import _qcheck as qc
from ._float32 import BLOCK, blocks


def quantize_values(x: np.ndarray, scale, zero_point, dtype) -> np.ndarray:
    """MLAS's quantize kernel on float32 values; scale/zero_point broadcast against x. Element-wise, by blocks of at
    most 2**20 elements (vkinfer/reference/_float32.py blocks: the same bits): whole, its five float32 and int32
    temporaries of a batch-65536 input (768 MiB) took 4 GB."""
    x = np.asarray(x, dtype=np.float32)
    scale, zero_point = np.asarray(scale, dtype=np.float32), np.asarray(zero_point, dtype=np.int32)
    shape = np.broadcast_shapes(x.shape, scale.shape, zero_point.shape)
    if math.prod(shape) <= BLOCK:
        return _quantize(x, scale, zero_point, dtype)
    out = np.empty(shape, dtype)
    x, scale, zero_point = (np.broadcast_to(v, shape) for v in (x, scale, zero_point))
    for ix in blocks(shape, BLOCK):
        out[ix] = _quantize(x[ix], scale[ix], zero_point[ix], dtype)
    return out


def _quantize(x: np.ndarray, scale, zero_point, dtype) -> np.ndarray:
    lo, hi = qc.QRANGE[np.dtype(dtype)]
    zp = np.asarray(zero_point, dtype=np.int32)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        q = np.asarray(x, dtype=np.float32) / np.asarray(scale, dtype=np.float32)
        q = np.minimum(np.maximum(q, (lo - zp).astype(np.float32)), (hi - zp).astype(np.float32))
    return (np.rint(q).astype(np.int32) + zp).astype(dtype)


def _blocked(x, s, z, axis, block_size: int):
    """Blocked scale and zero point expanded to x's shape (entry i // block_size along axis)."""
    if s.ndim != x.ndim:
        raise ValueError(f"blocked quantization (block_size={block_size}) needs a scale of x's rank {x.ndim}, got "
                         f"shape {s.shape}")
    if not isinstance(axis, int) or not -x.ndim <= axis < x.ndim:
        raise ValueError(f"axis {axis!r} is out of range for x with {x.ndim} dims")
    axis %= x.ndim
    want = list(x.shape)
    want[axis] = -(-x.shape[axis] // block_size)
    if list(s.shape) != want:
        raise ValueError(f"with block_size={block_size} on axis {axis}, the scale must have shape {want} for x of "
                         f"shape {list(x.shape)}, got {list(s.shape)}")
    n = x.shape[axis]
    return (np.repeat(s, block_size, axis=axis).take(range(n), axis=axis),
            np.repeat(z, block_size, axis=axis).take(range(n), axis=axis).astype(np.int32))


def _params(x, y_scale, y_zero_point, axis, dtype, block_size: int = 0):
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
    if not isinstance(block_size, int | np.integer) or block_size < 0:
        raise ValueError(f"block_size must be an integer >= 0, got {block_size!r}")
    if block_size:
        return _blocked(x, s, z, axis, int(block_size))
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


def quantize_linear(x, y_scale, y_zero_point=None, axis: int = 1, dtype=None, block_size: int = 0) -> np.ndarray:
    """x float32 -> dtype (that of y_zero_point, else `dtype`, default uint8; both given: they must agree, as
    ONNX's `output_dtype` attribute must agree with the zero point). `block_size` > 0: blocked quantization."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError("x must be a float32 numpy array")
    if np.isnan(x).any():
        raise ValueError("x contains NaN (ORT's result is position dependent)")
    if dtype is None:
        dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else np.uint8
    dtype = np.dtype(dtype)
    if isinstance(y_zero_point, np.ndarray | np.generic) and y_zero_point.dtype != dtype:
        raise TypeError(f"output dtype {dtype} differs from y_zero_point's dtype {y_zero_point.dtype}")
    if dtype not in qc.QRANGE:
        raise TypeError(f"output dtype must be uint8 or int8, got {dtype}")
    s, z = _params(x, y_scale, y_zero_point, axis, dtype, block_size)
    if block_size and math.prod(x.shape[axis % x.ndim + 1:]) > 1:
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            if np.any(np.abs(x / s) >= np.float32(2.0**31)):
                raise ValueError("|x / y_scale| reaches 2**31: ORT's blocked quantization (with elements after the "
                                 "block axis) converts to int32 before clamping there, which is undefined behaviour "
                                 "(x86: INT_MIN plus the zero point, which can wrap)")
    return quantize_values(x, s, z, dtype)
