"""com.microsoft QLinearLeakyRelu, bit-exact with ONNX Runtime 1.31: a 256-entry table (see _lookup) of
    f(v) = v if v >= 0 else float32(alpha) * v        (float32)
"""

from __future__ import annotations

import numpy as np

from ._lookup import apply_table, build_table, unary_params


def qlinear_leaky_relu(x, x_scale, x_zero_point, y_scale, y_zero_point, alpha: float = 0.01) -> np.ndarray:
    xs, xz, ys, yz = unary_params(x, x_scale, x_zero_point, y_scale, y_zero_point)
    if not isinstance(alpha, int | float | np.floating) or not np.isfinite(alpha):
        raise TypeError(f"alpha must be a finite float, got {alpha!r}")
    a = np.float32(alpha)
    table = build_table(x.dtype, xs, xz, ys, yz, lambda v: np.where(v >= 0, v, a * v))
    return apply_table(x, table)
