"""com.microsoft QLinearLeakyRelu, bit-exact with ONNX Runtime 1.31: a 256-entry table (see _lookup) of
    f(v) = v if v >= 0 else float32(alpha) * v        (float32)
"""

from __future__ import annotations

import numpy as np

from ._lookup import apply_table, build_table, unary_params
from ._opdef import OpDef


def qlinear_leaky_relu(x, x_scale, x_zero_point, y_scale, y_zero_point, alpha: float = 0.01) -> np.ndarray:
    xs, xz, ys, yz = unary_params(x, x_scale, x_zero_point, y_scale, y_zero_point)
    if not isinstance(alpha, int | float | np.floating) or not np.isfinite(alpha):
        raise TypeError(f"alpha must be a finite float, got {alpha!r}")
    a = np.float32(alpha)
    table = build_table(x.dtype, xs, xz, ys, yz, lambda v: np.where(v >= 0, v, a * v))
    return apply_table(x, table)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, x, memo):
    return [qlinear_leaky_relu(*x[:5], alpha=float(node.attrs.get("alpha", 0.01)))]


def _unary(node, consts: dict):
    p = [consts.get(n) if n else None for n in node.inputs]
    alpha = float(node.attrs.get("alpha", 0.01))
    return lambda x: qlinear_leaky_relu(x, *p[1:5], alpha=alpha)


DEFINITIONS = (OpDef("com.microsoft:QLinearLeakyRelu", _kernel, "elementwise", (5, (0, 1, 3)), y_params=(3, 4),
                     unary=_unary),)
