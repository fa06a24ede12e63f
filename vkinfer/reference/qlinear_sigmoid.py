"""com.microsoft QLinearSigmoid, bit-exact with ONNX Runtime 1.31 on x86-64 with FMA3.

A 256-entry table (see _lookup) of MLAS's logistic approximation (logistic.cpp constants, Eigen's
rational polynomial); on FMA3 machines MLAS runs MlasLogisticKernelFma3, so every multiply-add is fused:
    v  = min(max(x, -18), 18);  v2 = v * v
    p  = v * fma(fma(fma(fma(v2, a9, a7), v2, a5), v2, a3), v2, a1)
    q  = fma(fma(fma(fma(fma(v2, b10, b8), v2, b6), v2, b4), v2, b2), v2, b0)
    f  = max(p / q + 0.5, 0)   (no upper clamp in the FMA3 kernel: f can be 1.0000001)
all in float32.
"""

from __future__ import annotations

import numpy as np

from ._float32 import horner32
from ._lookup import apply_table, build_table, unary_params
from ._opdef import OpDef

_A = [np.float32(v) for v in (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
                              8.51377133304701e-03, 2.48287947061529e-01)]
_B = [np.float32(v) for v in (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
                              1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01)]


def mlas_logistic(x: np.ndarray) -> np.ndarray:
    v = np.minimum(np.maximum(np.asarray(x, np.float32), np.float32(-18)), np.float32(18))
    v2 = v * v
    p = horner32(v2, _A) * v
    q = horner32(v2, _B)
    return np.maximum(p / q + np.float32(0.5), np.float32(0))


def qlinear_sigmoid(x, x_scale, x_zero_point, y_scale, y_zero_point) -> np.ndarray:
    xs, xz, ys, yz = unary_params(x, x_scale, x_zero_point, y_scale, y_zero_point)
    return apply_table(x, build_table(x.dtype, xs, xz, ys, yz, mlas_logistic))


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _unary(node, consts: dict):
    p = [consts.get(n) if n else None for n in node.inputs]
    return lambda x: qlinear_sigmoid(x, *p[1:5])


DEFINITIONS = (OpDef("com.microsoft:QLinearSigmoid", lambda node, x, memo: [qlinear_sigmoid(*x[:5])],
                     "elementwise", (5, (0, 1, 3)), y_params=(3, 4), unary=_unary),)
