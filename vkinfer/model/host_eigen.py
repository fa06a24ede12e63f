"""The transcendental functions ONNX Runtime 1.31's CPU elementwise kernels evaluate, in numpy, bit for bit.

ORT's functors (activations.h, element_wise_ops.cc) run Eigen array expressions, which Eigen vectorises with its
4-lane SSE packet math; ORT's x86-64 build enables no FMA for Eigen, so every Eigen `pmadd(a, b, c)` is a
multiply and an add, each rounded to float32 (measured: the fused variant differs from ORT's Elu on 12 of 28,000
inputs, the unfused one on none). Exp itself is not Eigen's in ORT but MLAS's (MlasComputeExp).

- eigen_exp: Eigen's pexp_float (x < -104 gives 0; x clamped to 88.723; m = floor(x * log2(e) + 1/2);
  r = x - m * ln2 in two unfused steps (C1 = -0.693359375, C2 = 2.12194440e-4); a degree-6 minimax polynomial
  split in even and odd parts; 2^m * p by pldexp's four multiplies by powers of two; max(., x) keeps +inf).
- eigen_log: Eigen's plog_impl_float (frexp; the mantissa moved to [sqrt(1/2), sqrt(2)) and 1 subtracted; a
  rational (3,3) approximation of log(1 + x); + e * ln2; 0 -> -inf, x < 0 or NaN -> NaN, +inf -> +inf).
- eigen_log1p: Eigen's generic_plog1p (Kahan's formula on eigen_log).
- mlas_exp: MLAS's exp kernel (m = round(x / ln2) by the 1.5 * 2^23 trick, r in two fused steps, a degree-6
  polynomial by fused multiply-adds, p * 2^m rounded once; x clamped to [-103.972, 88.776]).
Measured bit-equal to ORT (tests/numerics/test_host_ops_elementwise.py): Exp, Log, Elu, Selu, Celu, Softplus,
Mish on edge tables (+-0, denormals, +-inf, NaN, the clamp points) and 40,000 random values.
"""

from __future__ import annotations

import numpy as np

from ..reference._float32 import fma32, horner32

F32 = np.float32


def _madd(a, b, c) -> np.ndarray:
    """Eigen's pmadd without FMA: a * b rounded, then + c rounded."""
    return (np.asarray(a, F32) * np.asarray(b, F32)).astype(F32) + np.asarray(c, F32)


def _ldexp(a: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Eigen's pldexp_generic: a * 2^e as ((a * c) * c) * c * 2^(e - 3b), c = 2^b, b = floor(e / 4)."""
    e = np.clip(e, -(2 ** 8 + 23), 2 ** 8 + 23).astype(np.int32)
    b = e >> 2
    c = ((b + 127) << 23).astype(np.int32).view(F32)
    out = ((a * c).astype(F32) * c).astype(F32) * c
    c2 = ((e - 3 * b + 127) << 23).astype(np.int32).view(F32)
    return (out.astype(F32) * c2).astype(F32)


_EXP_P = [F32(v) for v in (1.37449637986719608306884765625e-3, 8.36894474923610687255859375e-3,
                           4.166965186595916748046875e-2, 0.16666518151760101318359375,
                           0.49999988079071044921875)]


def eigen_exp(x: np.ndarray) -> np.ndarray:
    """Eigen's float32 exp (module docstring)."""
    x0 = np.asarray(x, F32)
    with np.errstate(all="ignore"):
        x = np.minimum(x0, F32(88.723))
        m = np.floor(_madd(x, F32(1.44269504088896341), F32(0.5)))
        r = _madd(m, F32(-0.693359375), x)
        r = _madd(m, F32(2.12194440e-4), r)
        r2 = r * r
        p_even = _madd(r2, _EXP_P[0], _EXP_P[2])
        p_odd = _madd(r2, _EXP_P[1], _EXP_P[3])
        p_even = _madd(r2, p_even, _EXP_P[4])
        y = _madd(r, p_odd, p_even)
        y = _madd(r2, y, r + F32(1))
        mi = np.where(np.isfinite(m), m, F32(0)).astype(np.int32)
        out = np.maximum(_ldexp(y, mi), x0)
        out = np.where(np.isnan(x0), x0, out)
        return np.where(x0 < F32(-104), F32(0), out).astype(F32)


def eigen_log(x: np.ndarray) -> np.ndarray:
    """Eigen's float32 log (module docstring)."""
    x0 = np.asarray(x, F32)
    with np.errstate(all="ignore"):
        mant, ex = np.frexp(x0)
        m, e = mant.astype(F32), ex.astype(F32)
        small = m < F32(0.707106781186547524)
        v = (m - F32(1)) + np.where(small, m, F32(0))
        e = e - np.where(small, F32(1), F32(0))
        p = _madd(v, F32(0.18256296349849254), F32(1.0000000190281063))
        p = _madd(v, p, F32(1.0000000190281136))
        p = v * p
        q = _madd(v, F32(0.049616247954120038), F32(0.59923249590823520))
        q = _madd(v, q, F32(1.4999999999999927))
        q = _madd(v, q, F32(1))
        out = _madd(e, F32(0.693147180559945309417232121458), p / q)
        out = np.where(x0 == np.inf, x0, out)
        out = np.where((x0 < 0) | np.isnan(x0), F32(np.nan), out)
        return np.where(x0 == 0, F32(-np.inf), out).astype(F32)


def eigen_log1p(x: np.ndarray) -> np.ndarray:
    """Eigen's generic_plog1p: x where 1 + x rounds to 1 or log(1 + x) is infinite, else
    x * (log(1 + x) / ((1 + x) - 1))."""
    x = np.asarray(x, F32)
    with np.errstate(all="ignore"):
        xp1 = x + F32(1)
        log1 = eigen_log(xp1)
        large = x * (log1 / (xp1 - F32(1)))
        return np.where((xp1 == F32(1)) | (xp1 == log1), x, large).astype(F32)


# MLAS's MlasExpConstants (compute.cpp).
_MLAS_LOWER, _MLAS_UPPER = F32(-103.9720840454), F32(88.7762626647950)
_ROUNDING_BIAS, _LOG2_RECIPROCAL = F32(12582912.0), F32(1.44269504088896341)
_LOG2_HIGH, _LOG2_LOW = F32(-6.93145752e-1), F32(-1.42860677e-6)
_MLAS_POLY = [F32(float.fromhex(h)) for h in ("0x1.694000p-10", "0x1.125edcp-7", "0x1.555b5ap-5", "0x1.555450p-3",
                                              "0x1.fffff6p-2", "0x1.000000p+0", "0x1.000000p+0")]


def mlas_exp(x: np.ndarray) -> np.ndarray:
    """MLAS's float32 exp (module docstring); NaN stays NaN."""
    x = np.asarray(x, F32)
    with np.errstate(all="ignore"):
        c = np.where(x > _MLAS_UPPER, _MLAS_UPPER, x)
        c = np.where(_MLAS_LOWER > c, _MLAS_LOWER, c)
        biased = fma32(c, _LOG2_RECIPROCAL, _ROUNDING_BIAS)
        m = biased - _ROUNDING_BIAS
        r = fma32(m, _LOG2_HIGH, c)
        r = fma32(m, _LOG2_LOW, r)
        p = horner32(r, _MLAS_POLY)
        # p * 2^m rounded once (m an integer in [-150, 128], exact in float64).
        return (p.astype(np.float64) * np.exp2(m.astype(np.float64))).astype(F32)
