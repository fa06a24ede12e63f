"""The CPU graph's tensor form and the helpers CPU lowerings share.

8-bit tensors are canonical unsigned bytes (int8 XOR 0x80); 4-D tensors are NHWC, 5-D (N, A, B, H, W) are
(N, H, W, A, B) (a channel axis split in two, as a channel shuffle makes it), other ranks keep their layout.
float32 tensors keep the host layout.
"""

from __future__ import annotations

import numpy as np

from ..reference.requant import QRANGE


def flip(dtype) -> int:
    """The byte XORed into canonical form: 0x80 for int8, 0 for uint8 (and float)."""
    return 0x80 if np.dtype(dtype) == np.int8 else 0


def is_8bit(dtype) -> bool:
    return np.dtype(dtype) in QRANGE


def form_perm(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The axes permutation host layout -> form (numpy transpose semantics)."""
    if len(shape) == 4:
        return 0, 2, 3, 1
    if len(shape) == 5:
        return 0, 3, 4, 1, 2
    return tuple(range(len(shape)))


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
    return np.ascontiguousarray(seq, np.uint32)
