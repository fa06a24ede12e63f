"""ONNX Pow with ONNX Runtime 1.31's CPU bits (math/element_wise_ops.cc, PowImpl), in numpy: the reference
device's kernel for every type pair ORT takes and the specification cpu_fallback/src/ops/float_binary.c's Pow
(float32 base and exponent) follows.

ORT takes a base of int32, int64, float or double and an exponent of int32, int64, float or double (other types:
ORT refuses the model; here a TypeError). Its broadcaster (broadcaster.h) walks the output in spans and picks one
of three loops for the whole tensor from its two iterators' first entries (`ort_scalar_roles`):

- the base is a scalar of each span (IsInput0Scalar, tested first): std::pow(X, y) for every element;
- else the exponent is (IsInput1Scalar): Y == 2 gives x * x, Y == 3 gives x * x * x, in the base's type
  (int32/int64 wrap), any other Y std::pow(x, Y);
- else std::pow(x, y) element by element.

Which input is a "scalar" follows the broadcaster's first dimension: the innermost one, except that innermost
dimensions of size 1 in both inputs are skipped while more dimensions common to both ranks remain. So x (2, 1)
with y (1,) or y () has spans of one element with both inputs "scalar", and x ** 3 goes through pow there, while
with y (1, 1) it is x * x * x (measured).

std::pow(float, float) is the C library's powf; every other pair is promoted to double and calls pow(double,
double) (C++'s rules for an integral argument), then static_cast to the base type: a float rounds once; an int
truncates, and out of range or NaN gives the x86 "integer indefinite" (INT32_MIN / INT64_MIN, cvttsd2si).
powf and pow are the C library's (glibc's on Linux, through ctypes: vkinfer/reference/_libm.py): numpy's float32
power is its own SIMD routine and differs from glibc's powf on about a fifth of random inputs, and x * x * x
differs from powf(x, 3) on about a quarter, so both the C library and ORT's span choice matter (measured against
ORT 1.31, tests/ops/test_float_pow.py). glibc's powf is not correctly rounded (within 0.82 ulp): vkinfer gives
glibc's bits, as ORT does on Linux.
"""

from __future__ import annotations

import numpy as np

from ._libm import pow64, powf

BASES = (np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.float32), np.dtype(np.float64))
EXPONENTS = BASES


def _cast(d: np.ndarray, t: np.dtype) -> np.ndarray:
    """static_cast<T>(double) as x86-64 compiles it: a float rounds; an int truncates toward zero, NaN or out of
    range giving the type's minimum (cvttsd2si's integer indefinite)."""
    if t.kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):
            return d.astype(t)
    info = np.iinfo(t)
    with np.errstate(invalid="ignore"):
        r = np.trunc(d)
        ok = (r >= float(info.min)) & (r < -float(info.min))  # [-2^(b-1), 2^(b-1))
        return np.where(ok, np.where(ok, r, 0).astype(t), t.type(info.min))


def ort_scalar_roles(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[bool, bool]:
    """(IsInput0Scalar, IsInput1Scalar) of ORT's Broadcaster for input shapes a and b: whether each input's
    iterator starts on a broadcast (size-1) dimension (module docstring)."""
    if not a or not b:
        if not a and not b:
            return True, True
        return (True, False) if not a else (a[-1] <= 1, True)
    r = min(len(a), len(b))
    for i in range(1, r + 1):
        x, y = a[-i], b[-i]
        if max(x, y) <= 1 and i < r:
            continue
        return x <= 1, y <= 1
    raise AssertionError("unreachable")


def _pow_each(x: np.ndarray, y: np.ndarray, t: np.dtype) -> np.ndarray:
    """static_cast<T>(std::pow(x, y)) element by element (module docstring)."""
    if x.dtype == np.float32 and y.dtype == np.float32:
        return powf(x, y)
    return _cast(pow64(x.astype(np.float64), y.astype(np.float64)), t)


def pow_ort(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """ORT's Pow(x, y) with numpy broadcasting (module docstring)."""
    x, y = np.asarray(x), np.asarray(y)
    if x.dtype not in BASES:
        raise TypeError(f"Pow: base type {x.dtype} is not one ONNX Runtime's CPU kernel takes "
                        "(int32, int64, float32, float64)")
    if y.dtype not in EXPONENTS:
        raise TypeError(f"Pow: exponent type {y.dtype} is not one ONNX Runtime's CPU kernel takes "
                        "(int32, int64, float32, float64)")
    t = x.dtype
    shape = np.broadcast_shapes(x.shape, y.shape)
    n = int(np.prod(shape, dtype=np.int64))
    if n == 0:
        return np.empty(shape, t)
    xs = np.broadcast_to(x, shape).reshape(-1)
    ys = np.broadcast_to(y, shape).reshape(-1)
    s0, s1 = ort_scalar_roles(x.shape, y.shape)
    out = np.empty(n, t)
    if s1 and not s0:  # the exponent is each span's scalar: ORT's x * x and x * x * x
        sq, cu = ys == 2, ys == 3
        with np.errstate(over="ignore", invalid="ignore"):
            out[sq] = xs[sq] * xs[sq]
            out[cu] = xs[cu] * xs[cu] * xs[cu]
        rest = ~(sq | cu)
        if rest.any():
            out[rest] = _pow_each(xs[rest], ys[rest], t)
    else:
        out[:] = _pow_each(xs, ys, t)
    return out.reshape(shape)


def kernel(node, x: list, memo: dict) -> list:
    """A Pow node (the interpreter's kernel), every type pair ORT takes."""
    if len(x) < 2 or x[0] is None or x[1] is None:
        raise ValueError("Pow takes two inputs, X and Y")
    return [pow_ort(x[0], x[1])]
