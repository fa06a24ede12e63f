"""ORT's 256-entry lookup tables for 8-bit unary ops (contrib_ops/cpu/quantization/qlinear_lookup_table.cc).

    table[i] = quantize(f(x_scale * float(int(T(i)) - x_zp)), y_scale, y_zp)   i = 0..255 (raw byte)
where x_scale * (int) is one float32 multiply, f runs on the 256 float32 values and quantize is MLAS's
MlasQuantizeLinear (quantize_linear.quantize_values). y[k] = table[byte(x[k])].
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from . import _qcheck as qc
from .quantize_linear import quantize_values


def build_table(dtype, x_scale, x_zp: int, y_scale, y_zp: int, f: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    raw = np.arange(256, dtype=np.uint8).view(dtype)
    deq = np.float32(x_scale) * (raw.astype(np.int32) - x_zp).astype(np.float32)
    return quantize_values(f(deq), np.float32(y_scale), y_zp, dtype)


def apply_table(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    return table[x.view(np.uint8)]


def unary_params(x, x_scale, x_zero_point, y_scale, y_zero_point):
    qc.qtensor("x", x)
    xs, ys = qc.scale("x_scale", x_scale), qc.scale("y_scale", y_scale)
    xz = 0 if x_zero_point is None else qc.zero_point("x_zero_point", x_zero_point, x.dtype)
    yz = 0 if y_zero_point is None else qc.zero_point("y_zero_point", y_zero_point, x.dtype)
    return xs, xz, ys, yz


def unary_table(dtype: np.dtype, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """fn on all 256 values of `dtype`, indexed by raw byte."""
    x = np.arange(256, dtype=np.uint8).view(dtype)
    return np.ascontiguousarray(fn(x)).view(np.uint8).reshape(256)


def binary_table(dtype: np.dtype, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """fn on all 65536 pairs of `dtype` values, indexed by a_byte * 256 + b_byte."""
    a = np.repeat(np.arange(256, dtype=np.uint8), 256).view(dtype)
    b = np.tile(np.arange(256, dtype=np.uint8), 256).view(dtype)
    return np.ascontiguousarray(fn(a, b)).view(np.uint8).reshape(65536)
