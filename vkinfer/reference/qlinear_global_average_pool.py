"""com.microsoft QLinearGlobalAveragePool, bit-exact with ONNX Runtime 1.31 (MLAS qlgavgpool.cpp).

    acc = sum(x over the image) - x_zp * image_size                  exact int32
    m   = float32(x_scale / float32(y_scale * float32(image_size)))
    y   = clamp(round_half_even(float32(acc) * m), qmin - y_zp, qmax - y_zp) + y_zp   (requant.requantize)
ORT refuses (and so does this function, with ValueError) image_size >= 2**24, m < 2**-32 or m >= 256.
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from ._opdef import OpDef
from .requant import requantize


def global_pool_multiplier(x_scale: np.float32, y_scale: np.float32, image_size: int) -> np.float32:
    m = x_scale / (y_scale * np.float32(image_size))
    if image_size >= 1 << 24 or not (np.float32(2.0**-32) <= m < np.float32(256)):
        raise ValueError("x_scale / (y_scale * image_size) or image_size is outside ORT's range "
                         "(image_size < 2**24, 2**-32 <= multiplier < 256)")
    return m


def qlinear_global_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, channels_last: int = 0):
    """x (N, C, *spatial) or, with channels_last=1, (N, *spatial, C); spatial dims become 1."""
    qc.qtensor("x", x)
    if x.ndim < 3:
        raise ValueError(f"x must have at least 3 dims, got shape {x.shape}")
    if channels_last not in (0, 1):
        raise ValueError(f"channels_last must be 0 or 1, got {channels_last!r}")
    xs, ys = qc.scale("x_scale", x_scale), qc.scale("y_scale", y_scale)
    xz = qc.zero_point("x_zero_point", x_zero_point, x.dtype)
    yz = qc.zero_point("y_zero_point", y_zero_point, x.dtype)
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    size = int(np.prod([x.shape[a] for a in axes]))
    m = global_pool_multiplier(xs, ys, size)
    # Summed with an int64 accumulator in place (numpy casts chunk by chunk): an int64 copy of a 1.3 GB input took
    # 10 GiB (a mutated MobileNetV2 with a pad of 2**20, ../shared/regressions/hang/case_104337).
    acc = (x.sum(axis=axes, keepdims=True, dtype=np.int64) - xz * size).astype(np.int32)
    lo, hi = qc.QRANGE[x.dtype]
    return requantize(acc, m, yz, lo, hi).astype(x.dtype)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, x, memo):
    return [qlinear_global_average_pool(*x[:5], channels_last=int(node.attrs.get("channels_last", 0)))]


DEFINITIONS = (OpDef("com.microsoft:QLinearGlobalAveragePool", _kernel, "pool", (5, (0, 1, 3)), y_params=(3, 4)),)
