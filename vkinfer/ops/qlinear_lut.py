"""Elementwise 8-bit ops as lookup tables: the numpy reference evaluated on every input byte (or byte pair), so
a device that looks the table up gives the reference's bits with no float arithmetic of its own."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def unary_table(dtype: np.dtype, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """fn on all 256 values of `dtype`, indexed by raw byte."""
    x = np.arange(256, dtype=np.uint8).view(dtype)
    return np.ascontiguousarray(fn(x)).view(np.uint8).reshape(256)


def binary_table(dtype: np.dtype, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> np.ndarray:
    """fn on all 65536 pairs of `dtype` values, indexed by a_byte * 256 + b_byte."""
    a = np.repeat(np.arange(256, dtype=np.uint8), 256).view(dtype)
    b = np.tile(np.arange(256, dtype=np.uint8), 256).view(dtype)
    return np.ascontiguousarray(fn(a, b)).view(np.uint8).reshape(65536)
