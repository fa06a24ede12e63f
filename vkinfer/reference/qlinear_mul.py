"""com.microsoft QLinearMul, bit-exact with ONNX Runtime 1.31 on x86-64 (MLAS qlmul.cpp, SSE2 path).

    ratio = float32(float32(A_scale * B_scale) / C_scale)
    p     = (A - A_zp) * (B - B_zp)                      exact int32 (16-bit operands)
    y     = cvt(float32(p) * ratio + float32(C_zp))      two float32 roundings, no FMA
with cvt = CVTPS2DQ (round half to even; NaN or |v| >= 2**31 -> INT32_MIN) and saturating packs to int16
then 8 bits (a clamp to the output range). The product is symmetric, so the broadcaster's role swap
(see qlinear_add) does not matter.
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from ._float32 import cvtps_epi32
from ._opdef import OpDef
from .qlinear_add import _binary_setup, shape


def qlinear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point) -> np.ndarray:
    """Quantized a * b with numpy broadcasting; output dtype = a.dtype."""
    shape, sa, sb, sc, za, zb, zc = _binary_setup(
        a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point)
    with np.errstate(over="ignore", invalid="ignore"):
        ratio = (sa * sb) / sc
        p = (a.astype(np.int32) - za) * (b.astype(np.int32) - zb)
        v = np.broadcast_to(p, shape).astype(np.float32) * ratio + np.float32(zc)
    lo, hi = qc.QRANGE[a.dtype]
    return np.clip(cvtps_epi32(v), lo, hi).astype(a.dtype)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _binary(node, consts: dict):
    p = [consts.get(n) if n else None for n in node.inputs]
    return lambda a, b: qlinear_mul(a, p[1], p[2], b, p[4], p[5], p[6], p[7])


DEFINITIONS = (OpDef("com.microsoft:QLinearMul", lambda node, x, memo: [qlinear_mul(*x[:8])], "elementwise",
                     (8, (0, 1, 3, 4, 6)), y_params=(6, 7), x_slots=(0, 3), binary=_binary, shape=shape),)
