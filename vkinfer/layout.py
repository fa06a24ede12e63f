"""The element order of 8-bit tensors on the devices, and the one rule that decides when a layout-changing node
(Reshape, Flatten, Squeeze, Unsqueeze, Identity, Transpose) may alias its input instead of moving bytes.

Both device forms store a tensor's elements in one order, fixed by its rank (`form_perm`): 4-D (N, C, H, W) as
NHWC, 5-D (N, A, B, H, W) as (N, H, W, A, B) (a channel axis split in two, as a channel shuffle makes it), every
other rank in ONNX's row-major order. The CPU form stores that order densely (canonical bytes,
vkinfer/cpu/_form.py); the Vulkan form pads each row of `rows_width(shape)[1]` values to whole 32-bit words
(vkinfer/vulkan/_layout.py).

A node may alias only when the output's storage, read in its own form, holds the very elements the input's
storage holds at the same places: the same order (`same_order`) and, on Vulkan, the same row padding. The
order depends on the shape, not only on the element count: (1, 8, 8, 8) is stored NHWC while its reshape to
(64, 8) is stored row-major, so that reshape moves bytes even though both forms are 64 rows of 8 bytes (an
alias there returned the NHWC order, up to 255 steps off, until 2026-11).
"""

from __future__ import annotations

from collections.abc import Sequence

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
