"""The CPU graph's tensor form and the helpers CPU lowerings share.

8-bit tensors are canonical unsigned bytes (int8 XOR 0x80) in the devices' element order (vkinfer/layout.py:
4-D tensors are NHWC, 5-D (N, A, B, H, W) are (N, H, W, A, B), other ranks keep their layout).
float32 tensors keep the host layout.
"""

from __future__ import annotations

import numpy as np

from ..layout import form_perm  # the one definition of the element order, shared with Vulkan
from ..reference.requant import QRANGE


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
