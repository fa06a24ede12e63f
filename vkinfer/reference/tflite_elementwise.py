"""TFLite 8-bit elementwise ops as ai-edge-litert 2.3.0 computes them, as lookup tables.

Each op here is a function of one input byte (unary) or of two (binary): the importer turns it into a
vkinfer:Table (256 entries) or vkinfer:Table2 (65536 entries, a_byte * 256 + b_byte) node, so every device runs
it as a lookup, bit-exact by construction with these definitions (tests/importers/test_tflite_ops.py checks each against
litert on every byte / byte pair).

- TANH: XNNPACK evaluates tanh in float and rounds to nearest: dequantize (float32), tanh, / y_scale, round half
  to even (identical to litert on every byte of the tested parameter sets).
- LEAKY_RELU: XNNPACK (when both ratios x_scale / y_scale and alpha * that lie in its range, `xnnpack_leaky_relu`)
  multiplies x - x_zero_point by round(256 * ratio) (or round(256 * alpha * ratio) below the zero point) and
  shifts right by 8, rounding half up; otherwise TFLite's builtin kernel: MultiplyByQuantizedMultiplier with
  31-bit multipliers of the same ratios.
- SUB: XNNPACK's add with the second multiplier negated (vkinfer/reference/tflite_add.py), ratios in its range;
  outside it, the float path (dequantize, subtract, round half to even: within 1 step of TFLite's builtin).
- MAXIMUM / MINIMUM: TFLite compares the raw 8-bit values (no rescaling; XNNPACK takes float ones only).
- PRELU: TFLite's builtin kernel (XNNPACK does not take quantized PRELU): x - x_zero_point >= 0 scaled by the
  31-bit multiplier of x_scale / y_scale, else (x - x_zero_point) * (alpha - alpha_zero_point) by that of
  x_scale * alpha_scale / y_scale.
"""

from __future__ import annotations

import numpy as np

from .tflite_add import tflite_add_params, xnnpack_adds
from .tflite_hard_swish import quantize_multiplier, rounding_divide_by_pot

QRANGE = {np.dtype(np.int8): (-128, 127), np.dtype(np.uint8): (0, 255)}


def byte_values(dtype) -> np.ndarray:
    """The 256 values of `dtype` (int8/uint8) in raw byte order 0..255, as int64."""
    return np.arange(256, dtype=np.uint8).view(np.dtype(dtype)).astype(np.int64)


def _clip(v, dtype) -> np.ndarray:
    return np.clip(v, *QRANGE[np.dtype(dtype)]).astype(dtype)


def srdhm32(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp's SaturatingRoundingDoublingHighMul on int32 (rounding half away, division truncating)."""
    ab = np.asarray(a, np.int64) * int(b)
    nudge = np.where(ab >= 0, 1 << 30, 1 - (1 << 30))
    s = ab + nudge
    out = np.where(s >= 0, s >> 31, -((-s) >> 31))
    return np.where((np.asarray(a) == -2 ** 31) & (b == -2 ** 31), 2 ** 31 - 1, out)


def multiply_by_quantized_multiplier(x: np.ndarray, m: int, shift: int) -> np.ndarray:
    """TFLite's MultiplyByQuantizedMultiplier (the reference, non-"double rounding" form used by its kernels)."""
    left, right = max(shift, 0), max(-shift, 0)
    return rounding_divide_by_pot(srdhm32(np.asarray(x, np.int64) * (1 << left), m), right)


def tanh_table(x_scale, x_zero_point: int, y_scale, y_zero_point: int, dtype) -> np.ndarray:
    v = np.float32(x_scale) * (byte_values(dtype) - int(x_zero_point)).astype(np.float32)
    y = np.tanh(v).astype(np.float32) / np.float32(y_scale)
    return _clip(np.rint(y) + int(y_zero_point), dtype)


def xnnpack_leaky_relu(x_scale, y_scale, alpha) -> bool:
    """Whether XNNPACK's delegate takes this 8-bit LEAKY_RELU (its range checks on the two ratios)."""
    pos = np.float32(x_scale) / np.float32(y_scale)
    neg = pos * np.float32(alpha)
    return bool(np.isfinite(pos) and 2.0 ** -8 <= pos <= 2.0 ** 7 and np.isfinite(neg)
                and -float.fromhex("0x1.FFFC00p+6") <= neg <= 2.0 ** 7 and abs(neg) >= 2.0 ** -8)


def leaky_relu_table(x_scale, x_zero_point: int, y_scale, y_zero_point: int, alpha, dtype) -> np.ndarray:
    q = byte_values(dtype) - int(x_zero_point)
    if xnnpack_leaky_relu(x_scale, y_scale, alpha):
        pos = np.float32(x_scale) / np.float32(y_scale)
        mp = int(np.rint(np.float32(256) * pos))
        mn = int(np.rint(np.float32(256) * (pos * np.float32(alpha))))
        y = ((int(y_zero_point) << 8) + 0x80 + q * np.where(q >= 0, mp, mn)) >> 8
        return _clip(y, dtype)
    m1, s1 = quantize_multiplier(float(np.float32(x_scale) / np.float32(y_scale)))
    m2, s2 = quantize_multiplier(float(np.float32(alpha) * np.float32(x_scale) / np.float32(y_scale)))
    y = np.where(q >= 0, multiply_by_quantized_multiplier(q, m1, s1), multiply_by_quantized_multiplier(q, m2, s2))
    return _clip(y + int(y_zero_point), dtype)


def _pairs(a_dtype, b_dtype) -> tuple[np.ndarray, np.ndarray]:
    a = byte_values(a_dtype)[:, None]
    b = byte_values(b_dtype)[None, :]
    return a, b


def sub_table(a_scale, a_zp: int, b_scale, b_zp: int, y_scale, y_zp: int, dtype, act_min: int, act_max: int
              ) -> np.ndarray:
    """SUB of every (a, b) byte pair, flattened a-major (65536 entries of `dtype`)."""
    a, b = _pairs(dtype, dtype)
    if xnnpack_adds(a_scale, b_scale, y_scale):
        ma, mb, shift = tflite_add_params(a_scale, b_scale, y_scale)
        acc = (a - int(a_zp)) * ma - (b - int(b_zp)) * mb + (1 << (shift - 1))
        y = (acc >> shift) + int(y_zp)
    else:
        f = (np.float32(a_scale) * (a - int(a_zp)).astype(np.float32)
             - np.float32(b_scale) * (b - int(b_zp)).astype(np.float32))
        y = np.rint(f / np.float32(y_scale)) + int(y_zp)
    return np.clip(y, act_min, act_max).astype(dtype).reshape(-1)


def max_min_table(dtype, maximum: bool) -> np.ndarray:
    a, b = _pairs(dtype, dtype)
    return (np.maximum(a, b) if maximum else np.minimum(a, b)).astype(dtype).reshape(-1)


def prelu_table(x_scale, x_zp: int, alpha_scale, alpha_zp: int, y_scale, y_zp: int, dtype, alpha_dtype
                ) -> np.ndarray:
    """PRELU of every (x, alpha) byte pair, flattened x-major."""
    x, al = _pairs(dtype, alpha_dtype)
    xv = x - int(x_zp)
    m1, s1 = quantize_multiplier(float(np.float32(x_scale) / np.float32(y_scale)))
    m2, s2 = quantize_multiplier(float(np.float32(x_scale) * np.float32(alpha_scale) / np.float32(y_scale)))
    pos = multiply_by_quantized_multiplier(np.broadcast_to(xv, (256, 256)), m1, s1)
    neg = multiply_by_quantized_multiplier(xv * (al - int(alpha_zp)), m2, s2)
    return _clip(np.where(xv >= 0, pos, neg) + int(y_zp), dtype).reshape(-1)
