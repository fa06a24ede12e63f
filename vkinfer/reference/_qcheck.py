"""Argument checks shared by the auxiliary quantized reference ops."""

from __future__ import annotations

import numpy as np

QRANGE = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def qtensor(name: str, x) -> np.ndarray:
    """A uint8 or int8 numpy array, else TypeError naming the argument."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(x).__name__}")
    if x.dtype not in QRANGE:
        raise TypeError(f"{name} must be uint8 or int8, got {x.dtype}")
    return x


def scale(name: str, s) -> np.float32:
    """A scalar (or one-element) positive finite float32 scale."""
    a = np.asarray(s)
    if a.size != 1 or a.ndim > 1:
        raise ValueError(f"{name} must be a scalar or a one-element 1-D tensor, got shape {a.shape}")
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be a real number, got {a.dtype}")
    v = np.float32(a.reshape(()))
    if not (np.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be a positive finite float32, got {v}")
    return v


def zero_point(name: str, z, dtype: np.dtype) -> int:
    """A scalar zero point representable in dtype (a numpy zero point must have exactly that dtype)."""
    a = np.asarray(z)
    if a.size != 1 or a.ndim > 1:
        raise ValueError(f"{name} must be a scalar or a one-element 1-D tensor, got shape {a.shape}")
    if isinstance(z, np.ndarray | np.generic) and a.dtype != dtype:
        raise TypeError(f"{name} must have dtype {np.dtype(dtype)}, got {a.dtype}")
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer, got {a.dtype}")
    v = int(a.reshape(()))
    lo, hi = QRANGE[np.dtype(dtype)]
    if not lo <= v <= hi:
        raise ValueError(f"{name} = {v} is outside the {np.dtype(dtype)} range [{lo}, {hi}]")
    return v


def int_list(name: str, v, n: int, minimum: int) -> list[int]:
    """A list of n Python ints, each >= minimum."""
    try:
        out = [int(i) for i in v]
    except TypeError:
        raise TypeError(f"{name} must be a sequence of ints") from None
    if len(out) != n:
        raise ValueError(f"{name} must have {n} entries, got {len(out)}")
    if any(i < minimum for i in out):
        raise ValueError(f"{name} entries must be >= {minimum}, got {out}")
    return out
