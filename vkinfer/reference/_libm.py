"""The C math library's float32 powf and logf and its double pow, called element by element through ctypes.

ONNX Runtime calls these (std::pow, std::log) from the C library it is linked against; numpy's float32 power
and log are its own SIMD routines and differ from glibc's in the last bit for many inputs (measured on glibc
2.36 / numpy 2.4 x86-64: np.power float32 differs from powf on 21% of random x in [0, 10), y in [-3, 3); np.log
on 4% of x in [1, 1000)), so the reference calls the C library's, as the native graph does. Slow (about a
microsecond per element): only the element-wise paths ORT sends to libm use it."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

import numpy as np


@functools.cache
def _libm() -> ctypes.CDLL:
    for name in (ctypes.util.find_library("m"), "libm.so.6", ctypes.util.find_library("c")):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            lib.powf, lib.logf, lib.pow  # noqa: B018  (all three must be there)
        except (OSError, AttributeError):
            continue
        lib.powf.restype, lib.powf.argtypes = ctypes.c_float, [ctypes.c_float, ctypes.c_float]
        lib.logf.restype, lib.logf.argtypes = ctypes.c_float, [ctypes.c_float]
        lib.pow.restype, lib.pow.argtypes = ctypes.c_double, [ctypes.c_double, ctypes.c_double]
        return lib
    raise RuntimeError("no C math library (libm) could be loaded: vkinfer's float Pow/LogSoftmax reference "
                       "calls its powf/logf as ONNX Runtime does")


def powf(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The C library's powf over broadcast float32 arrays (float32 result)."""
    x, y = np.broadcast_arrays(np.asarray(x, np.float32), np.asarray(y, np.float32))
    f = _libm().powf
    with np.errstate(all="ignore"):
        out = np.frompyfunc(lambda a, b: f(a, b), 2, 1)(x.astype(np.float64), y.astype(np.float64))
    return np.asarray(out, np.float64).astype(np.float32).reshape(x.shape)


def pow64(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The C library's double pow over broadcast arrays (float64 result), as C++'s std::pow(float, int) etc.
    promote to it."""
    x, y = np.broadcast_arrays(np.asarray(x, np.float64), np.asarray(y, np.float64))
    f = _libm().pow
    with np.errstate(all="ignore"):
        return np.asarray(np.frompyfunc(lambda a, b: f(a, b), 2, 1)(x, y), np.float64).reshape(x.shape)


def logf(x: np.ndarray) -> np.ndarray:
    """The C library's logf over a float32 array."""
    x = np.asarray(x, np.float32)
    f = _libm().logf
    with np.errstate(all="ignore"):
        out = np.frompyfunc(f, 1, 1)(x.astype(np.float64))
    return np.asarray(out, np.float64).astype(np.float32).reshape(x.shape)
