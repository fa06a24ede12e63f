"""TFLite's 8-bit SOFTMAX as ai-edge-litert's default interpreter runs it on x86 (over the last axis).

The XNNPACK delegate takes float32 softmax only; int8/uint8 run TFLite's builtin optimized kernel, which on
x86 (no aarch64 16-bit table) uses a float32 table of exponentials made once per model:
    table[255 - v] = expf(float32(-x_scale * beta) * v),  v = 0..255
and per row, in float32 throughout:
    e_j = table[255 - (max(x) - x_j)]                  (= exp(-x_scale * beta * (max - x_j)))
    sum = e_0 + e_1 + ... (sequential, in index order)
    inv = 1 / (sum * y_scale)
    p_j = e_j * inv
    y_j = clamp(q(p_j) + y_zero_point, qmin, qmax),  q = (int)(p + 0.5f) for uint8 output (a float32 add,
          then truncation), std::round (half away from zero) for int8 output
The x zero point cancels (only max - x_j enters). TFLite requires y_scale = 1/256 and y_zero_point = -128
(int8) or 0 (uint8); the formula is written for any.

expf is the C library's (ctypes, as TFLite calls it); where that cannot be loaded, exp in float64 rounded to
float32 (glibc's expf differs from that by one ulp on about 0.06% of table entries, which did not change an
output in the measured cases).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import numpy as np

from . import _qcheck as qc
from ._opdef import OpDef


@functools.cache
def _expf():
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        f = libm.expf
    except (OSError, AttributeError):
        return None
    f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
    return f


@functools.lru_cache(maxsize=64)
def softmax_table(x_scale: float, beta: float) -> np.ndarray:
    """TFLite's 256-entry float32 table for input scale `x_scale` and `beta` (read-only)."""
    s = np.float32(-np.float32(x_scale) * np.float32(beta))
    arg = s * np.arange(256, dtype=np.float32)  # float32 products, as TFLite's `scale * val`
    f = _expf()
    if f is not None:
        e = np.array([f(float(a)) for a in arg], np.float32)
    else:
        e = np.exp(arg.astype(np.float64)).astype(np.float32)
    t = np.ascontiguousarray(e[::-1])
    t.flags.writeable = False
    return t


def tflite_softmax(x, x_scale, y_scale, y_zero_point, beta: float = 1.0) -> np.ndarray:
    """x int8/uint8 of any rank >= 1, softmax over the last axis; output dtype = that of y_zero_point."""
    qc.qtensor("x", x)
    if x.ndim < 1 or x.shape[-1] == 0:
        raise ValueError(f"x must have a non-empty last axis, got shape {x.shape}")
    xs, ys = qc.scale("x_scale", x_scale), qc.scale("y_scale", y_scale)
    dtype = np.asarray(y_zero_point).dtype
    if dtype not in qc.QRANGE:
        raise TypeError(f"y_zero_point must be uint8 or int8, got {dtype}")
    yz = qc.zero_point("y_zero_point", y_zero_point, dtype)
    b = np.float32(beta)
    if not np.isfinite(b):
        raise ValueError(f"beta must be a finite float32, got {beta}")
    table = softmax_table(float(xs), float(b))
    xi = x.astype(np.int32)
    e = table[255 - (xi.max(axis=-1, keepdims=True) - xi)]
    total = np.cumsum(e, axis=-1, dtype=np.float32)[..., -1:]  # accumulate: sequential float32 adds
    inv = np.float32(1) / (total * ys)
    p = e * inv
    if dtype == np.uint8:
        q = np.floor(p + np.float32(0.5)).astype(np.int64)  # float32 add, then truncation (p >= 0)
    else:
        q = np.floor(p.astype(np.float64) + 0.5).astype(np.int64)  # round half away from zero, p >= 0
    lo, hi = qc.QRANGE[dtype]
    return np.clip(q + yz, lo, hi).astype(dtype)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, x, memo):
    """Over the last axis; inputs x, x_scale, y_scale, y_zero_point; attr beta."""
    return [tflite_softmax(*x[:4], beta=float(node.attrs.get("beta", 1.0)))]


DEFINITIONS = (OpDef("vkinfer:TFLiteSoftmax", _kernel, "elementwise", (4, (0, 1, 2))),)
