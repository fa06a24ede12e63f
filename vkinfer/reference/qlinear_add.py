"""com.microsoft QLinearAdd, bit-exact with ONNX Runtime 1.31 on x86-64 with AVX2 (MLAS qladd_avx2.cpp).

With rA = float32(A_scale / C_scale), rB = float32(B_scale / C_scale) (float32 divisions), ORT folds the
zero points into one float32 constant, contracted by the compiler into a fused multiply-add:
    fixed = float(C_zp) - fma(rA, float(A_zp), rB * float(B_zp))
and then, per element, with fused multiply-adds (VFMADD, one rounding each):
    y = cvt(fma(A, rA, fma(B, rB, fixed)))
(when B is a broadcast scalar ORT computes fma(B, rB, fixed) once: the same value)
where cvt is CVTPS2DQ (round half to even; NaN or |v| >= 2**31 -> INT32_MIN) followed by saturating packs
to int16 and then to 8 bits (a clamp to the output range). A, B are the raw integers as float32.

Which operand plays "A" depends on ORT's broadcaster: when the innermost broadcast dimension of input A is
1 ("input0 is scalar", checked first), ORT calls the kernel with the roles swapped (kernel A = input B,
kernel B = input A), which changes the constant `fixed` and the order of the two fused steps. The result
can differ in the last bit of the float sum, hence by one quantum after rounding; see `_input0_is_scalar`.
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from ._float32 import cvtps_epi32, fma32
from ._opdef import OpDef


def _input0_is_scalar(sa: tuple[int, ...], sb: tuple[int, ...]) -> bool:
    """ORT's InputBroadcaster.IsInput0Scalar(): A's dimension at the innermost non-trivial axis is 1."""
    if len(sa) == 0:
        return True
    if len(sb) == 0:
        return sa[-1] == 1
    m = min(len(sa), len(sb))
    for i in range(1, m + 1):
        a1, b1 = sa[-i], sb[-i]
        if max(a1, b1) <= 1 and i < m:
            continue  # trailing axes where both are 1 are skipped, as ORT's Broadcaster does
        return a1 == 1
    return False  # unreachable


def _binary_setup(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point):
    qc.qtensor("a", a)
    qc.qtensor("b", b)
    if b.dtype != a.dtype:
        raise TypeError(f"b must have the dtype of a ({a.dtype}), got {b.dtype}")
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"a {a.shape} and b {b.shape} are not broadcastable") from None
    sa, sb, sc = qc.scale("a_scale", a_scale), qc.scale("b_scale", b_scale), qc.scale("c_scale", c_scale)
    za = qc.zero_point("a_zero_point", a_zero_point, a.dtype)
    zb = qc.zero_point("b_zero_point", b_zero_point, a.dtype)
    zc = qc.zero_point("c_zero_point", c_zero_point, a.dtype)
    return shape, sa, sb, sc, za, zb, zc


def qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point) -> np.ndarray:
    """Quantized a + b with numpy broadcasting; output dtype = a.dtype."""
    shape, sa, sb, sc, za, zb, zc = _binary_setup(
        a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point)
    if _input0_is_scalar(a.shape, b.shape):  # kernel roles swapped
        a, sa, za, b, sb, zb = b, sb, zb, a, sa, za
    with np.errstate(over="ignore", invalid="ignore"):
        ra, rb = sa / sc, sb / sc
        fixed = np.float32(zc) - fma32(ra, np.float32(za), rb * np.float32(zb))
    xa = np.broadcast_to(a, shape).astype(np.float32)
    xb = np.broadcast_to(b, shape).astype(np.float32)
    v = fma32(xa, ra, fma32(xb, rb, fixed))
    lo, hi = qc.QRANGE[a.dtype]
    return np.clip(cvtps_epi32(v), lo, hi).astype(a.dtype)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _binary(node, consts: dict):
    p = [consts.get(n) if n else None for n in node.inputs]
    return lambda a, b: qlinear_add(a, p[1], p[2], b, p[4], p[5], p[6], p[7])


def shape(node, x) -> list:
    """Shape rule (QLinearAdd and QLinearMul; interpreter.trace): `_binary_setup` is everything their kernels
    refuse, so it checks the node as they do, without their arithmetic (~100 us of numpy calls a node). None (the
    kernel runs) for two 0-d inputs, whose sum the kernels give as a numpy scalar, not an array."""
    shape = _binary_setup(*x[:8])[0]
    return [(shape, x[0].dtype)] if shape else None


DEFINITIONS = (OpDef("com.microsoft:QLinearAdd", lambda node, x, memo: [qlinear_add(*x[:8])], "elementwise",
                     (8, (0, 1, 3, 4, 6)), y_params=(6, 7), x_slots=(0, 3), binary=_binary, shape=shape),)
