"""float32 PRelu, LeakyRelu and Clip with ONNX Runtime 1.31's CPU bits, in numpy: the reference device's kernels
and the specification cpu_fallback/src/ops/float_binary.c (PRelu), float_unary.c (LeakyRelu, constant Clip) and
float_clip.c (Clip whose bounds are tensors read at run time) follow. Each is a select or one IEEE operation per
element, so signed zeros and NaN follow ORT's expressions (measured, tests/ops/test_float_elementwise.py):

  PRelu      x < 0 ? x * slope : x     (slope broadcast to x; -0 and NaN pass through)
  LeakyRelu  x >= 0 ? x : alpha * x
  Clip       r = x < lo ? lo : x; y = hi < r ? hi : r   (std::max then std::min, Eigen's cwiseMax/cwiseMin: NaN
             passes through, a NaN bound is no bound, lo > hi gives hi); an absent bound is the lowest (highest)
             float, as ORT's, so -inf clips to -FLT_MAX.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32
LOWEST, HIGHEST = F32(np.finfo(F32).min), F32(np.finfo(F32).max)


def _f32(op: str, v, what: str = "input") -> np.ndarray:
    v = np.asarray(v)
    if v.dtype != F32:
        raise TypeError(f"{op}: the float kernel's {what} must be float32, got {v.dtype}")
    return v


def prelu(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    x, slope = _f32("PRelu", x), _f32("PRelu", slope, "slope")
    if np.broadcast_shapes(x.shape, slope.shape) != x.shape:
        raise ValueError(f"PRelu: slope {list(slope.shape)} does not broadcast to x {list(x.shape)}")
    with np.errstate(all="ignore"):
        return np.where(x < 0, x * slope, x).astype(F32)


def leaky_relu(x: np.ndarray, alpha: float) -> np.ndarray:
    x = _f32("LeakyRelu", x)
    with np.errstate(all="ignore"):
        return np.where(x >= 0, x, F32(alpha) * x).astype(F32)


def clip(x: np.ndarray, lo=None, hi=None) -> np.ndarray:
    """ORT's float32 Clip; lo, hi: float32 scalars (any shape of one element) or None."""
    x = _f32("Clip", x)
    bounds = []
    for what, v, default in (("min", lo, LOWEST), ("max", hi, HIGHEST)):
        if v is None:
            bounds.append(default)
            continue
        v = np.asarray(v)
        if v.size != 1:
            raise ValueError(f"Clip: {what} must be a scalar, got shape {list(v.shape)}")
        bounds.append(F32(v.reshape(())[()]))
    lo_v, hi_v = bounds
    with np.errstate(invalid="ignore"):
        r = np.where(x < lo_v, lo_v, x)
        return np.where(hi_v < r, hi_v, r).astype(F32)


def prelu_kernel(node, x: list, memo: dict) -> list:
    return [prelu(x[0], x[1])]


def leaky_relu_kernel(node, x: list, memo: dict) -> list:
    return [leaky_relu(x[0], float(node.attrs.get("alpha", 0.01)))]


def clip_kernel(node, x: list, memo: dict) -> list:
    """Clip-11+ (bounds as inputs, empty = absent) or Clip-1/6 (float attributes min, max)."""
    if len(x) > 1 or ("min" not in node.attrs and "max" not in node.attrs):
        lo = x[1] if len(x) > 1 else None
        hi = x[2] if len(x) > 2 else None
    else:
        lo, hi = node.attrs.get("min"), node.attrs.get("max")
    return [clip(x[0], lo, hi)]
