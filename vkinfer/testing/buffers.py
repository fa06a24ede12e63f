"""Test buffers for the native library's external inputs and outputs (a tool module: the runtime never imports it)."""

from __future__ import annotations

import numpy as np


def external(a: np.ndarray, misalign: bool) -> np.ndarray:
    """`a` as a contiguous array, or, with `misalign`, a copy at an odd byte address (one byte into a fresh buffer):
    the native graph's operators must read and write external buffers of any alignment (UBSan checks it)."""
    if not misalign:
        return np.ascontiguousarray(a)
    raw = np.zeros(a.nbytes + 1, np.uint8)
    v = np.frombuffer(raw, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    v[...] = a
    return v
