"""float32 building blocks shared by the auxiliary reference ops (x86-64 SSE/AVX2 semantics).

numpy float32 arithmetic is IEEE single precision with round-to-nearest-even, so a plain numpy
multiply or add is exactly one SSE/AVX instruction. What numpy lacks is a fused multiply-add and the
x86 float -> int32 conversion, both provided here.
"""

from __future__ import annotations

import math

import numpy as np

_INT32_MIN = np.int32(-(2**31))


# Elements of one block of `fma32`: its TwoSum keeps about 8 float64 temporaries per element, so a 2**27-element
# activation (a fuzzed [16777216, 8] Sigmoid on the reference device) took 8 GB at once; by blocks, 64 MB.
BLOCK = 1 << 20


def blocks(shape: tuple[int, ...], block: int = BLOCK):
    """Index tuples covering `shape` (row-major) in pieces of at most `block` elements (one piece: `()`)."""
    k, inner = len(shape), 1
    while k > 0 and inner * shape[k - 1] <= block:
        k -= 1
        inner *= shape[k]
    if k == 0:
        yield ()
        return
    step = max(1, block // inner)
    for lead in np.ndindex(*shape[:k - 1]):
        for i in range(0, shape[k - 1], step):
            yield (*lead, slice(i, i + step))


def fma32(a, b, c) -> np.ndarray:
    """Single-rounding float32 a * b + c (the x86 VFMADD instruction), exact for finite inputs (element-wise, by
    blocks of at most BLOCK elements: the same bits)."""
    a, b, c = (np.asarray(v, dtype=np.float32) for v in (a, b, c))
    shape = np.broadcast_shapes(a.shape, b.shape, c.shape)
    if math.prod(shape) <= BLOCK:
        return _fma32(a, b, c)
    a, b, c = (np.broadcast_to(v, shape) for v in (a, b, c))
    out = np.empty(shape, np.float32)
    for ix in blocks(shape, BLOCK):
        out[ix] = _fma32(a[ix], b[ix], c[ix])
    return out


def _fma32(a, b, c) -> np.ndarray:
    """fma32 of one block.

    a * b is exact in float64 (24 + 24 bit significands); s = a * b + c is rounded once in float64 and
    the rounding error e is recovered exactly (TwoSum). Rounding s to float32 is then correct unless s
    sits exactly on a float32 tie with e != 0; there the true value lies on e's side of the tie, so s is
    nudged by one float64 ulp in that direction before the final rounding.
    """
    a, b, c = (np.asarray(v, dtype=np.float32) for v in (a, b, c))
    with np.errstate(over="ignore", invalid="ignore"):
        p = a.astype(np.float64) * b.astype(np.float64)
        c64 = c.astype(np.float64)
        s = p + c64
        bb = s - p
        e = (p - (s - bb)) + (c64 - bb)
        r = s.astype(np.float32)
        r64 = r.astype(np.float64)
        # s is a float32 tie when it is not representable and its neighbours' midpoint equals it.
        other = np.where(s > r64, np.nextafter(r, np.float32(np.inf)), np.nextafter(r, np.float32(-np.inf)))
        tie = (r64 != s) & (((r64 + other.astype(np.float64)) / 2) == s) & (e != 0) & np.isfinite(s)
        if np.any(tie):
            s = np.where(tie, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
            r = s.astype(np.float32)
    return r


def horner32(t, coeffs) -> np.ndarray:
    """coeffs[0] * t^(n-1) + ... + coeffs[n-1] by Horner's rule, each step one fused multiply-add: how MLAS's
    float32 polynomial kernels (logistic, tanh, erf, exp) evaluate on FMA3 machines."""
    t = np.asarray(t, dtype=np.float32)
    p = np.full_like(t, coeffs[0])
    for c in coeffs[1:]:
        p = fma32(p, t, c)
    return p


def cvtps_epi32(f) -> np.ndarray:
    """x86 CVTPS2DQ under the default MXCSR: round half to even; NaN or out of int32 range -> INT32_MIN."""
    f = np.asarray(f, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        r = np.rint(f)
        ok = (r >= -(2.0**31)) & (r < 2.0**31)
        return np.where(ok, np.where(ok, r, 0).astype(np.int32), _INT32_MIN)
