"""ONNX DynamicQuantizeLinear (float32 -> uint8, its scale and zero point), bit-exact with ONNX Runtime 1.31.

ORT's CPU kernel (GetQuantizationParameter, then MlasQuantizeLinear), all in float32:
    lo = min(min(x), 0), hi = max(max(x), 0)
    scale = 1 if hi == lo else (hi - lo) / 255
    zero_point = round_half_even(clamp(0 - lo / scale, 0, 255))
    y = QuantizeLinear(x, scale, zero_point)          (one float32 division per element)
NaN or infinite input is rejected (ORT's min/max scan and the scale are then ill-defined).
"""

from __future__ import annotations

import numpy as np

from .quantize_linear import quantize_values


def dynamic_quantize_linear(x) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y uint8 shaped like x, scale float32 scalar, zero_point uint8 scalar)."""
    if not isinstance(x, np.ndarray) or x.dtype != np.float32:
        raise TypeError("x must be a float32 numpy array")
    if not np.all(np.isfinite(x)):
        raise ValueError("x contains NaN or infinity")
    lo = np.minimum(x.min(initial=np.float32(0)), np.float32(0)).astype(np.float32)
    hi = np.maximum(x.max(initial=np.float32(0)), np.float32(0)).astype(np.float32)
    with np.errstate(over="ignore"):
        scale = np.float32(1) if hi == lo else np.float32(np.float32(hi - lo) / np.float32(255))
    zp = np.float32(np.float32(0) - np.float32(lo / scale))
    zero_point = np.uint8(np.rint(np.clip(zp, np.float32(0), np.float32(255))))
    y = quantize_values(x, scale, np.int32(zero_point), np.uint8)
    return y, np.array(scale, np.float32), np.array(zero_point, np.uint8)
