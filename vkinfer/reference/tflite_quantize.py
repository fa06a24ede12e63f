"""TFLite's QUANTIZE as ai-edge-litert's default interpreter runs it (builtin optimized kernel and XNNPACK).

float32 -> int8/uint8 (`tflite_quantize`):
    y = clamp(round_half_even(float32(x * float32(1 / scale))) + zero_point, qmin, qmax)
one float32 multiply by the float32 reciprocal of the scale (ONNX QuantizeLinear divides by the scale instead:
the two differ for most scales that are not powers of two). TFLite's reference kernel (BUILTIN_REF) divides and
rounds half away from zero; the default interpreter does not run it.

int8 -> int8 or uint8 -> uint8 requantization (`tflite_requantize`), XNNPACK's convert with an 8-bit fraction
multiplier, used when 2**-8 <= x_scale / y_scale <= 2**7 (`xnnpack_requantizes`; else TFLite's builtin kernel
runs it, with a 31-bit fixed-point multiplier):
    m = round_half_even(256 * float32(x_scale / y_scale))
    y = clamp((((x - x_zero_point) * m + 128) >> 8) + y_zero_point, qmin, qmax)      (>>: floor)
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from ._opdef import OpDef


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


def xnnpack_requantizes(x_scale, y_scale, x_dtype, y_dtype) -> bool:
    """Whether ai-edge-litert runs this 8-bit -> 8-bit QUANTIZE in XNNPACK (same type, scale ratio in range)."""
    r = np.float32(x_scale) / np.float32(y_scale)
    return np.dtype(x_dtype) == np.dtype(y_dtype) and 2.0 ** -8 <= r <= 2.0 ** 7


def tflite_requantize(x, x_scale, x_zero_point, y_scale, y_zero_point) -> np.ndarray:
    """XNNPACK's 8-bit requantization (module docstring); output dtype = that of y_zero_point."""
    qc.qtensor("x", x)
    dtype = np.asarray(y_zero_point).dtype
    if dtype not in qc.QRANGE:
        raise TypeError(f"y_zero_point must be uint8 or int8, got {dtype}")
    xs, ys = qc.scale("x_scale", x_scale), qc.scale("y_scale", y_scale)
    m = int(np.rint(np.float32(256) * (xs / ys)))
    xz, yz = int(np.asarray(x_zero_point).reshape(-1)[0]), int(np.asarray(y_zero_point).reshape(-1)[0])
    lo, hi = qc.QRANGE[dtype]
    y = (((x.astype(np.int64) - xz) * m + 128) >> 8) + yz
    return np.clip(y, lo, hi).astype(dtype)


def tflite_quantize_op(x, *params) -> np.ndarray:
    """vkinfer:TFLiteQuantize: (x float32, y_scale, y_zero_point) -> tflite_quantize; (x 8-bit, x_scale,
    x_zero_point, y_scale, y_zero_point) -> tflite_requantize."""
    if isinstance(x, np.ndarray) and x.dtype == np.float32:
        return tflite_quantize(x, *params[:2])
    return tflite_requantize(x, *params[:4])


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
# TFLite's QUANTIZE: of a float32 tensor (inputs x, scale, zero point) it multiplies by the float32 reciprocal of
# the scale, where ONNX QuantizeLinear divides; of an 8-bit one (x, x_scale, x_zero_point, y_scale, y_zero_point)
# it requantizes as XNNPACK does.
DEFINITIONS = (OpDef("vkinfer:TFLiteQuantize", lambda node, x, memo: [tflite_quantize_op(*x)], "elementwise",
                     (3, (0, 1))),)
