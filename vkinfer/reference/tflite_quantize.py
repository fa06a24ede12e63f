"""TFLite's QUANTIZE (float32 -> int8/uint8) as ai-edge-litert runs it (builtin optimized kernel and XNNPACK).

    y = clamp(round_half_even(float32(x * float32(1 / scale))) + zero_point, qmin, qmax)
one float32 multiply by the float32 reciprocal of the scale (ONNX QuantizeLinear divides by the scale instead:
the two differ for most scales that are not powers of two). TFLite's reference kernel (BUILTIN_REF) divides and
rounds half away from zero; the default interpreter does not run it.
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc


def tflite_quantize(x, scale, zero_point) -> np.ndarray:
    """x float32, per-tensor scale (float32 > 0) and zero point (a uint8/int8 numpy scalar: it sets the dtype)."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError("x must be a float32 numpy array")
    if np.isnan(x).any():
        raise ValueError("x contains NaN")
    dtype = np.asarray(zero_point).dtype
    if dtype not in qc.QRANGE:
        raise TypeError(f"zero_point must be uint8 or int8, got {dtype}")
    s = np.asarray(scale, np.float32).reshape(-1)
    if s.size != 1 or not (np.isfinite(s[0]) and s[0] > 0):
        raise ValueError("scale must be one positive finite float32")
    lo, hi = qc.QRANGE[dtype]
    zp = int(np.asarray(zero_point).reshape(-1)[0])
    with np.errstate(over="ignore"):
        q = x * (np.float32(1) / s[0])
    q = np.clip(np.rint(q), lo - zp, hi - zp)  # integer bounds: clamping before or after rounding is the same
    return (q.astype(np.int32) + zp).astype(dtype)
