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
- eigen_sincos / eigen_asin / eigen_acos: Eigen's psincos_float (the no-FMA reduction in four steps, Payne-Hanek
  past 25966 / 18838), pasin_float and pacos_float.
ORT's single-threaded functor maps its 16-byte aligned output, so Eigen takes the packet path for every whole
4-element packet and its scalar path (std::exp, std::log, ...: the C library's) for the last len % 4 elements
(eigen_elementwise); with more intra-op threads ORT's blocks, hence its tails, change, so vkinfer follows the
single-threaded ORT. Measured bit-equal to ORT (tests/numerics/test_host_ops_elementwise.py): Exp, Log, Sin, Cos,
Asin, Acos, Elu, Selu, Celu, Softplus, Mish on edge tables (+-0, denormals, +-inf, NaN, the clamp points), 40,000
random values and every tail length. Not reproduced: Eigen's atan (a different polynomial from this one in ORT's
Eigen: bounded, numpy's arctan used).
"""

from __future__ import annotations

import contextlib
import contextvars

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


# Eigen's psincos_float, the branch without FMA (ORT's build): |x| reduced by y = round(|x| * 2/pi) in four unfused
# steps, or, from huge_th on, by Payne-Hanek with 192 bits of 2/pi (trig_reduce_huge); two polynomials on
# [-pi/4, pi/4] picked and signed by the quadrant's bits.
_TWO_OVER_PI = (0x00000028, 0x000028be, 0x0028be60, 0x28be60db, 0xbe60db93, 0x60db9391, 0xdb939105, 0x9391054a,
                0x91054a7f, 0x054a7f09, 0x4a7f09d5, 0x7f09d5f4, 0x09d5f47d, 0xd5f47d4d, 0xf47d4d37, 0x7d4d3770,
                0x4d377036, 0x377036d8, 0x7036d8a5, 0x36d8a566, 0xd8a5664f, 0xa5664f10, 0x664f10e4, 0x4f10e410,
                0x10e41000, 0xe4100000)
_M32, _M64 = (1 << 32) - 1, (1 << 64) - 1


def _trig_reduce_huge(xf: np.float32) -> tuple[np.float32, int]:
    """Eigen's trig_reduce_huge for one finite |x| >= huge_th: (x - q * pi/2 as float32, q)."""
    xi = int(np.float32(xf).view(np.uint32))
    e = (xi >> 23) - 118
    xi = (((xi & 0x007FFFFF) | 0x00800000) << (e & 7)) & _M32
    i = e >> 3
    t1, t2, t3 = _TWO_OVER_PI[i - 1], _TWO_OVER_PI[i + 3], _TWO_OVER_PI[i + 7]
    p = (xi * t3) & _M64
    p = (xi * t2 + (p >> 32)) & _M64
    p = ((((xi * t1) & _M32) << 32) + p) & _M64
    q = ((p + (1 << 61)) & _M64) >> 62
    p = (p - (q << 62)) & _M64
    signed = p - (1 << 64) if p >> 63 else p
    return np.float32(float(signed) * 3.4061215800865545e-19), int(q)


def eigen_sincos(x: np.ndarray, sine: bool) -> np.ndarray:
    """Eigen's float32 sin (sine) or cos, as ORT's Sin / Cos run it."""
    x0 = np.asarray(x, F32)
    shape = x0.shape
    x0 = x0.reshape(-1)
    with np.errstate(all="ignore"):
        a = np.abs(x0)
        y_round = a * F32(0.636619746685028076171875) + F32(12582912)
        y_int = y_round.view(np.int32).copy()
        y = y_round - F32(12582912)
        r = _madd(y, F32(-1.5703125), a)
        r = _madd(y, F32(-0.000483989715576171875), r)
        r = _madd(y, F32(1.62865035235881805419921875e-07), r)
        r = _madd(y, F32(5.5644315544167710640977020375430583953857421875e-11), r)
        huge = np.nonzero((a >= F32(25966.0 if sine else 18838.0)) & np.isfinite(a))[0]
        for k in huge:
            r[k], y_int[k] = _trig_reduce_huge(a[k])
        bits = (y_int.astype(np.int64) << 30) if sine else ((y_int.astype(np.int64) + 1) << 30)
        bits = (bits & 0xFFFFFFFF).astype(np.uint32)
        sign = ((x0.view(np.uint32) ^ bits) if sine else bits) & np.uint32(0x80000000)
        even = (y_int & 1) == 0
        r2 = r * r
        c = F32(2.4372266125283204019069671630859375e-05)
        for k in (-0.00138865201734006404876708984375, 0.041666619479656219482421875, -0.5, 1.0):
            c = _madd(c, r2, F32(k))
        s = F32(-0.0001959234114083702898469196984621021329076029360294342041015625)
        for k in (0.0083326873655616851693794799871284340042620897293090820312500000,
                  -0.1666666203982298255503735617821803316473960876464843750000000000):
            s = _madd(s, r2, F32(k))
        s = _madd(s * r2, r, r)
        out = np.where(even, s, c) if sine else np.where(even, c, s)
        out = (np.asarray(out, F32).view(np.uint32) ^ sign).view(F32)
    return out.reshape(shape)


def _poly_pairs(x2: np.ndarray, even: list, odd: list) -> tuple[np.ndarray, np.ndarray]:
    """Eigen's even/odd split Horner steps (unfused), coefficients highest first."""
    pe, po = even[0], odd[0]
    for ce, co in zip(even[1:], odd[1:], strict=True):
        pe, po = _madd(pe, x2, ce), _madd(po, x2, co)
    return pe, po


def eigen_atan(x: np.ndarray) -> np.ndarray:
    """Eigen's patan_float: |x| > 1 through 1 / |x| (an IEEE division without FMA) and pi/2 - atan; a degree-15 odd
    polynomial in even/odd halves; the input's sign put back."""
    x_in = np.asarray(x, F32)
    with np.errstate(all="ignore"):
        a = np.abs(x_in)
        large = F32(1) < a
        v = np.where(large, F32(1) / a, a).astype(F32)
        v2 = v * v
        v4 = v2 * v2
        q_odd, q_even = _poly_pairs(v4, [F32(c) for c in (2.90188402868807315826416015625e-3,
                                                           4.3082617223262786865234375e-2,
                                                           0.1066047251224517822265625, 0.19993579387664794921875)],
                                    [F32(c) for c in (-1.62907354533672332763671875e-2,
                                                      -7.5408883392810821533203125e-2,
                                                      -0.14209578931331634521484375, -0.3333314359188079833984375)])
        q = _madd(q_odd, v2, q_even)
        p = _madd(q, v * v2, v)
        out = np.where(large, F32(np.pi / 2) - p, p).astype(F32)
        sign = x_in.view(np.uint32) & np.uint32(0x80000000)
        return (out.view(np.uint32) ^ sign).view(F32)


def eigen_asin(x: np.ndarray) -> np.ndarray:
    """Eigen's pasin_float: |x| > 1/2 mapped through sqrt((1 - |x|) / 2) and pi/2 - 2 asin; an odd degree-9
    polynomial; the sign put back; NaN outside [-1, 1]."""
    x_in = np.asarray(x, F32)
    with np.errstate(all="ignore"):
        a = np.abs(x_in)
        half = F32(0.5)
        large = half < a
        v = np.where(large, np.sqrt(half - (half * a).astype(F32)), a).astype(F32)
        v2 = v * v
        p = F32(5.08838854730129241943359375e-2)
        for c in (3.95139865577220916748046875e-2, 7.550220191478729248046875e-2, 0.16664917767047882080078125,
                  1.00000011920928955078125):
            p = _madd(p, v2, F32(c))
        p = (p * v).astype(F32)
        p = np.where(large, F32(np.pi / 2) - (F32(2) * p).astype(F32), p).astype(F32)
        sign = x_in.view(np.uint32) & np.uint32(0x80000000)
        out = (p.view(np.uint32) ^ sign).view(F32)
        return np.where((F32(1) < a) | np.isnan(x_in), F32(np.nan), out).astype(F32)


def eigen_acos(x: np.ndarray) -> np.ndarray:
    """Eigen's pacos_float: acos(|x|) / sqrt(1 - |x|) by a degree-6 polynomial (even/odd halves in x^2), times
    sqrt(1 - |x|); pi - that for negative x (its sign bit); NaN outside [-1, 1]."""
    x_in = np.asarray(x, F32)
    with np.errstate(all="ignore"):
        a = np.abs(x_in)
        x2 = x_in * x_in
        pe, po = _poly_pairs(x2, [F32(c) for c in (2.36423197202384471893310546875e-3, 2.717843465507030487060546875e-2,
                                                   8.8804088532924652099609375e-2)],
                             [F32(c) for c in (-1.1368644423782825469970703125e-2, -4.8969544470310211181640625e-2,
                                               -0.214591205120086669921875)])
        pe = _madd(pe, x2, F32(1.57079637050628662109375))
        p = _madd(po, a, pe)
        r = (np.sqrt(F32(1) - a) * p).astype(F32)
        return np.where(np.signbit(x_in), F32(np.pi) - r, r).astype(F32)


def libm(name: str):
    """The C library's float32 function `name` (expf, logf, sinf, ...) element by element, as Eigen's scalar path
    (std::exp, std::log, ...) calls it."""
    from .host_elementwise import libm_unary

    return libm_unary(name)


# Set (scalar_path) while vkinfer/model/tables.py evaluates a chain as it would run on a tensor's last len % 4
# elements: every element then takes the scalar path.
_SCALAR_ONLY = contextvars.ContextVar("vkinfer_eigen_scalar_only", default=False)


@contextlib.contextmanager
def scalar_path():
    """Within: eigen_elementwise computes every element by Eigen's scalar path (the tail's functions)."""
    token = _SCALAR_ONLY.set(True)
    try:
        yield
    finally:
        _SCALAR_ONLY.reset(token)


def eigen_elementwise(x: np.ndarray, packet_fn, scalar_fn) -> np.ndarray:
    """An Eigen array expression over x as ORT's single-threaded functor runs it: the output buffer is 16-byte
    aligned, so every whole 4-element packet takes the packet functions (packet_fn) and the last len % 4 elements
    Eigen's scalar path (scalar_fn: the same expression with the C library's functions). Measured: ORT's Log, Sin
    and Elu tails differ from the packet results exactly where the C library's do."""
    x = np.asarray(x)
    flat = x.reshape(-1)
    if _SCALAR_ONLY.get():
        return np.asarray(scalar_fn(flat)).reshape(x.shape)
    out = np.asarray(packet_fn(flat))
    tail = flat.size % 4
    if tail:
        out = out.copy()
        out[-tail:] = scalar_fn(flat[-tail:])
    return out.reshape(x.shape)
