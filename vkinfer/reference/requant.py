"""The requantization step, the numerical contract every backend must match bit for bit.

ONNX Runtime (MLAS) requantizes an int32 accumulator as
    y = clamp(round_half_to_even(float32(acc) * m) + zero_point, qmin, qmax)
with m = float32((float32(x_scale) * float32(w_scale)) / float32(y_scale)) computed in float32 and
one float32 multiply (no FMA, no float64). numpy's float32 arithmetic is IEEE round-to-nearest-even,
so this file is the executable definition.
"""

from __future__ import annotations

import numpy as np

QRANGE = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def multiplier(x_scale: np.float32, w_scale: np.ndarray, y_scale: np.float32) -> np.ndarray:
    """Per-channel float32 multipliers m[c] = (x_scale * w_scale[c]) / y_scale, each step in float32."""
    with np.errstate(over="ignore"):  # callers reject a non-finite multiplier by name
        return (np.float32(x_scale) * np.asarray(w_scale, dtype=np.float32)) / np.float32(y_scale)


def requantize(acc: np.ndarray, m: np.ndarray, zero_point: int, lo: int, hi: int) -> np.ndarray:
    """int32 accumulators -> quantized integers in [lo, hi] (returned as int32).

    `m` broadcasts against `acc` (per output channel on the channel axis).
    """
    with np.errstate(over="ignore"):  # an infinite product saturates below, as in ORT
        f = acc.astype(np.float32) * np.asarray(m, dtype=np.float32)  # one float32 multiply, RNE
    r = np.rint(f)  # round half to even
    # Clamp before adding the zero point so that huge or infinite products cannot wrap.
    r = np.clip(r, np.float32(lo - zero_point), np.float32(hi - zero_point))
    return r.astype(np.int32) + np.int32(zero_point)


def quantize_scalar(value: float, scale: np.float32, zero_point: int, qmin: int, qmax: int) -> int:
    """Quantize one real value (used for activation bounds): clamp(rne(value / scale) + zp)."""
    q = np.rint(np.float32(value) / np.float32(scale))
    return int(np.clip(q, qmin - zero_point, qmax - zero_point)) + zero_point


def split_float32(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact integer form of float32 values: m = mant * 2**exp with mant < 2**24 (subnormals too).

    The shaders requantize with integer arithmetic on this form, so the result does not depend on
    the driver's float rounding or on multiply-add contraction.
    """
    bits = np.ascontiguousarray(m, dtype=np.float32).view(np.uint32)
    if np.any((bits & 0x7F800000) == 0x7F800000):
        raise ValueError("requantization multiplier is not finite (x_scale * w_scale / y_scale overflows)")
    if np.any(bits >> 31):
        raise ValueError("requantization multiplier is negative")
    e = ((bits >> 23) & 0xFF).astype(np.int32)
    frac = (bits & 0x7FFFFF).astype(np.int32)
    mant = np.where(e == 0, frac, frac | (1 << 23)).astype(np.int32)
    exp = np.where(e == 0, -149, e - 150).astype(np.int32)
    return mant, exp
