"""The element order of 8-bit tensors on the devices, and the one rule that decides when a layout-changing node
(Reshape, Flatten, Squeeze, Unsqueeze, Identity, Transpose) may alias its input instead of moving bytes.

Both device forms store a tensor's elements in one order, fixed by its rank (`form_perm`): 4-D (N, C, H, W) as
NHWC, 5-D (N, A, B, H, W) as (N, H, W, A, B) (a channel axis split in two, as a channel shuffle makes it), every
other rank in ONNX's row-major order. The CPU form stores that order densely (canonical bytes, below); the
Vulkan form pads each row of `rows_width(shape)[1]` values to whole 32-bit words (below). This module is the one
definition of the host, CPU and Vulkan forms, their converters and a run's keys for them.

A node may alias only when the output's storage, read in its own form, holds the very elements the input's
storage holds at the same places: the same order (`same_order`) and, on Vulkan, the same row padding. The
order depends on the shape, not only on the element count: (1, 8, 8, 8) is stored NHWC while its reshape to
(64, 8) is stored row-major, so that reshape moves bytes even though both forms are 64 rows of 8 bytes (an
alias there returned the NHWC order, up to 255 steps off, until 2026-11).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .reference.requant import QRANGE

Shape = Sequence[int]


def form_perm(shape: Shape) -> tuple[int, ...]:
    """The axes permutation from ONNX's layout to the devices' storage order (numpy transpose semantics)."""
    if len(shape) == 4:
        return 0, 2, 3, 1
    if len(shape) == 5:
        return 0, 3, 4, 1, 2
    return tuple(range(len(shape)))


def rows_width(shape: Shape) -> tuple[int, int]:
    """The Vulkan packed form of a shape as (rows, width): rows of `width` values, each padded to whole words.
    4-D NCHW packs as N*H*W rows of C channels, 5-D (N, A, B, H, W) as N*H*W rows of A*B channels, any other
    rank as rows of its last axis (a scalar: one row of one value)."""
    shape = [int(s) for s in shape]
    if len(shape) == 4:
        n, c, h, w = shape
        return n * h * w, c
    if len(shape) == 5:
        n, a, b, h, w = shape
        return n * h * w, a * b
    if not shape:
        return 1, 1
    rows = 1
    for s in shape[:-1]:
        rows *= s
    return rows, shape[-1]


def _strides(shape: Shape) -> list[int]:
    """Row-major strides (in elements) of `shape`."""
    out, acc = [0] * len(shape), 1
    for a in range(len(shape) - 1, -1, -1):
        out[a] = acc
        acc *= int(shape[a])
    return out


def storage_order(shape: Shape, source_strides: Sequence[int] | None = None) -> tuple[tuple[int, int], ...]:
    """The order in which a device stores the elements of a tensor of `shape`, as runs (count, stride) from the
    outermost to the innermost, strides counted in the source's row-major element index: size-1 axes dropped and
    runs that continue each other merged, so two tensors store their elements alike exactly when these are
    equal. `source_strides[a]` is how far one step along axis `a` moves in the source (default: `shape`'s own
    row-major strides, which is what a reshape keeps); a Transpose passes its input's strides permuted."""
    strides = _strides(shape) if source_strides is None else [int(s) for s in source_strides]
    runs: list[tuple[int, int]] = []
    for a in form_perm(shape):
        n = int(shape[a])
        if n == 1:
            continue
        if runs and runs[-1][1] == n * strides[a]:
            runs[-1] = (runs[-1][0] * n, strides[a])
        else:
            runs.append((n, strides[a]))
    return tuple(runs)


def same_order(x_shape: Shape, y_shape: Shape, perm: Sequence[int] | None = None) -> bool:
    """Whether y (a reshape of x, or with `perm` x's Transpose) is stored in x's element order on the devices."""
    if perm is None:
        return storage_order(x_shape) == storage_order(y_shape)
    xs = _strides(x_shape)
    return storage_order(x_shape) == storage_order(y_shape, [xs[p] for p in perm])


def aliases(kind: str, x_shape: Shape, y_shape: Shape, perm: Sequence[int] | None = None) -> bool:
    """THE rule: whether a layout-changing node from `x_shape` to `y_shape` (a Transpose: with `perm`) may share
    its input's storage on device kind `kind` ("cpu" or "vulkan"), else it must move the bytes into the output's
    own form. The CPU form is dense, so the same order is enough; the Vulkan form also pads each row to whole
    words, so the padding must fall in the same places too (the same rows, or rows of whole words)."""
    if kind not in ("cpu", "vulkan"):
        raise ValueError(f"unknown device kind {kind!r}")
    if not same_order(x_shape, y_shape, perm):
        return False
    if kind == "cpu":
        return True
    (rx, wx), (ry, wy) = rows_width(x_shape), rows_width(y_shape)
    return (rx, wx) == (ry, wy) or (wx % 4 == 0 and wy % 4 == 0)


# ---- the CPU graph's form ----------------------------------------------------------------------------------
# 8-bit tensors are canonical unsigned bytes (int8 XOR 0x80) in the devices' element order (form_perm: 4-D
# tensors are NHWC, 5-D (N, A, B, H, W) are (N, H, W, A, B), other ranks keep their layout). float32 tensors
# keep the host layout.

def flip(dtype) -> int:
    """The byte XORed into canonical form: 0x80 for int8, 0 for uint8 (and float)."""
    return 0x80 if np.dtype(dtype) == np.int8 else 0


def is_8bit(dtype) -> bool:
    return np.dtype(dtype) in QRANGE


def form_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[p] for p in form_perm(shape))


def unform_perm(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation form -> host layout (the inverse of form_perm)."""
    p = form_perm(shape)
    return tuple(int(i) for i in np.argsort(p))


def same_bytes(shape: tuple[int, ...]) -> bool:
    """Whether the form's bytes are in the host layout's order (no axis of size > 1 moves)."""
    moved = [a for a in form_perm(shape) if shape[a] != 1]
    return moved == sorted(moved)


def table1(raw: np.ndarray, dt_in, dt_out) -> np.ndarray:
    """A 256-byte table indexed by raw bytes, re-indexed and re-valued for canonical bytes."""
    idx = np.arange(256, dtype=np.uint8) ^ np.uint8(flip(dt_in))
    return np.ascontiguousarray(raw.view(np.uint8)[idx] ^ np.uint8(flip(dt_out)))


def table2(raw: np.ndarray, dt_in, dt_out) -> np.ndarray:
    """A 65536-byte table (a_byte * 256 + b_byte) re-indexed and re-valued for canonical bytes."""
    f = flip(dt_in)
    idx = np.arange(256, dtype=np.intp) ^ f
    t = raw.view(np.uint8).reshape(256, 256)[idx][:, idx]
    return np.ascontiguousarray(t.reshape(-1) ^ np.uint8(flip(dt_out)))


def canonical(x: np.ndarray) -> np.ndarray:
    """Host array -> its form's canonical bytes (a constant operand written into the arena once)."""
    if not is_8bit(x.dtype):
        return np.ascontiguousarray(x)
    b = np.ascontiguousarray(x.transpose(form_perm(x.shape))).view(np.uint8)
    return b ^ np.uint8(flip(x.dtype))


def u32(seq) -> np.ndarray:
    """`seq` (shapes, permutations, offsets for the C library) as uint32; ValueError when a value does not fit
    (a cast would narrow it silently)."""
    a = np.asarray(seq)
    if a.size:
        if a.dtype.kind not in "iuO":
            raise ValueError(f"internal: {a.dtype} values passed as C uint32")
        lo, hi = int(a.min()), int(a.max())
        if lo < 0 or hi >= 2 ** 32:
            raise ValueError(f"{lo if lo < 0 else hi} does not fit the C library's uint32 (a dimension, axis or "
                             f"offset of {a.reshape(-1)[:8].tolist()})")
    return np.ascontiguousarray(a, np.uint32)


# ---- the Vulkan device's packed form ------------------------------------------------------------------------
# 8-bit tensors are NHWC with channels padded to a multiple of 4 with zero bytes and packed 4 per 32-bit word
# (little-endian: channel 4i+j is byte j of word i). Matrices are rows of K padded the same way. These numpy
# functions are the reference: the runtime packs straight into device-visible memory with the native
# `Buffer.write_nchw`/`write_rows` and unpacks with `Buffer.read_nchw`/`read_rows` (vkinfer/_vk.py), equal on
# every rank and odd shape (tests/vulkan/test_vk_runtime.py) and 10-15x faster for a 1x3x224x224 input. The native
# packers take the form's parameters from `packed_form()` below, so the form is written here only.

#: 8-bit values per 32-bit word of the packed form (value 4i+j of a row is byte j of word i, little-endian).
WORD_VALUES = 4
#: The byte a packed row is padded with to whole words.
PAD_BYTE = 0
# Ranks whose storage order `packed_form` lists for the native packers (an unlisted rank packs as rows of its last
# axis, as form_perm's row-major order does); ONNX allows more, none of vkinfer's devices stores them otherwise.
_LISTED_RANKS = range(17)


def packed_form() -> dict:
    """The packed form's parameters as the native packers take them (vkinfer/_native/vk_buffers.cpp; vkinfer._vk
    hands them to _vkcore when it loads it): values per word, the pad byte, and per rank whose storage order is not
    row-major that order (`form_perm`), which packs as pixel rows of channels (4-D NCHW as N*H*W rows of C)."""
    orders = {r: form_perm(range(r)) for r in _LISTED_RANKS}
    return {"word_values": WORD_VALUES, "pad_byte": PAD_BYTE,
            "orders": {r: p for r, p in orders.items() if p != tuple(range(r))}}


def ceil4(n: int) -> int:
    """Words needed for `n` bytes (channels) packed 4 per word."""
    return (n + WORD_VALUES - 1) // WORD_VALUES


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
    return np.ascontiguousarray(pad_last(b, WORD_VALUES * ceil4(x.shape[1]), PAD_BYTE)).view(np.uint32)


def packed_to_nchw(words: np.ndarray, shape: tuple[int, int, int, int], dtype: np.dtype) -> np.ndarray:
    """(N*H*W*C/4) uint32 words -> (N, C, H, W) of `dtype`."""
    n, c, h, w = shape
    b = words.view(np.uint8).reshape(n, h, w, WORD_VALUES * ceil4(c))[..., :c]
    return np.ascontiguousarray(b.transpose(0, 3, 1, 2)).view(dtype)


def rows_to_packed(a: np.ndarray) -> np.ndarray:
    """(..., K) uint8/int8 -> (..., K/4) uint32 words (zero padded)."""
    padded = pad_last(as_bytes(np.ascontiguousarray(a)), WORD_VALUES * ceil4(a.shape[-1]), PAD_BYTE)
    return np.ascontiguousarray(padded).view(np.uint32)


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
    b = words.view(np.uint8).reshape(rows, WORD_VALUES * ceil4(width))[:, :width]
    return np.ascontiguousarray(b).view(dtype).reshape(shape)


# ---- a run's keys for the forms -----------------------------------------------------------------------------
# A run's values dict holds each tensor in the host's form under its own name; a tensor handed between device
# segments in another form sits beside it under one of these keys (never spelled out elsewhere).

def form_key(t: str) -> str:
    """The run's key for tensor `t` in the CPU graph's form (canonical bytes, devices' element order)."""
    return t + "\x00form"


def packed_key(t: str) -> str:
    """The run's key for tensor `t` in the Vulkan device's packed form, written so by a CPU producer."""
    return t + "\x00packed"


def base_name(key: str) -> str:
    """The tensor a run's key stands for (the key itself for the host's form)."""
    return key.partition("\x00")[0]
