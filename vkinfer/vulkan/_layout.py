"""Host-side conversions between numpy layouts and vkinfer's packed device layout.

On the device, 8-bit tensors are NHWC with channels padded to a multiple of 4 with zero bytes and
packed 4 per 32-bit word (little-endian: channel 4i+j is byte j of word i). Matrices are rows of
K padded the same way.

These numpy functions are the reference. The runtime packs straight into device-visible memory with the
native `Buffer.write_nchw`/`write_rows` and unpacks with `Buffer.read_nchw`/`read_rows` (vkinfer/_vk.py):
equal on every rank and odd shape (tests/test_vk_runtime.py), and 10-15x faster for a 1x3x224x224 input
(36 us against 350-600 us of transpose, pad and copy here).
"""

from __future__ import annotations

import numpy as np

from ..layout import rows_width  # the one definition, shared with the alias rule (vkinfer/layout.py)


def ceil4(n: int) -> int:
    """Words needed for `n` bytes (channels) packed 4 per word."""
    return (n + 3) // 4


def pad_last(a: np.ndarray, to: int, fill: int | np.ndarray = 0) -> np.ndarray:
    """Pad the last axis of a uint8 array to length `to` with `fill` (a byte or per-row bytes)."""
    if a.shape[-1] == to:
        return a
    out = np.empty((*a.shape[:-1], to), np.uint8)
    out[..., : a.shape[-1]] = a
    out[..., a.shape[-1]:] = np.asarray(fill, np.uint8)[..., None] if np.ndim(fill) else fill
    return out


def as_bytes(a: np.ndarray) -> np.ndarray:
    """The raw bytes of a uint8/int8 array (int8 as two's complement)."""
    return a.view(np.uint8)


def nchw_to_packed(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) uint8/int8 -> (N, H, W, C/4) uint32 words."""
    b = as_bytes(np.ascontiguousarray(x.transpose(0, 2, 3, 1)))
    return np.ascontiguousarray(pad_last(b, 4 * ceil4(x.shape[1]))).view(np.uint32)


def packed_to_nchw(words: np.ndarray, shape: tuple[int, int, int, int], dtype: np.dtype) -> np.ndarray:
    """(N*H*W*C/4) uint32 words -> (N, C, H, W) of `dtype`."""
    n, c, h, w = shape
    b = words.view(np.uint8).reshape(n, h, w, 4 * ceil4(c))[..., :c]
    return np.ascontiguousarray(b.transpose(0, 3, 1, 2)).view(dtype)


def rows_to_packed(a: np.ndarray) -> np.ndarray:
    """(..., K) uint8/int8 -> (..., K/4) uint32 words (zero padded)."""
    return np.ascontiguousarray(pad_last(as_bytes(np.ascontiguousarray(a)), 4 * ceil4(a.shape[-1]))).view(np.uint32)


def packed_words(shape: tuple[int, ...]) -> int:
    """Words a tensor of `shape` takes in the packed form."""
    rows, width = rows_width(shape)
    return rows * ceil4(width)


def to_packed(x: np.ndarray) -> np.ndarray:
    """uint8/int8 tensor (NCHW when 4-D) -> packed words."""
    if x.ndim == 4:
        return nchw_to_packed(x)
    if x.ndim == 5:
        n, a, b, h, w = x.shape
        return nchw_to_packed(x.reshape(n, a * b, h, w))
    return rows_to_packed(x.reshape(rows_width(x.shape)))


def from_packed(words: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """Packed words -> tensor of `shape` (NCHW when 4-D) and `dtype`."""
    if len(shape) == 4:
        return packed_to_nchw(words, shape, dtype)
    if len(shape) == 5:
        n, a, b, h, w = shape
        return packed_to_nchw(words, (n, a * b, h, w), dtype).reshape(shape)
    rows, width = rows_width(shape)
    b = words.view(np.uint8).reshape(rows, 4 * ceil4(width))[:, :width]
    return np.ascontiguousarray(b).view(dtype).reshape(shape)
