"""Reshape of a packed tensor whose packed form changes (shaders/repack.comp): Reshape, Flatten, Squeeze,
Unsqueeze, or a Transpose that only moves size-1 axes, between shapes whose packed forms differ: in element
order (a 4-D tensor is stored NHWC, its reshape to (N*H*W, C) row-major) or in row padding. Where the forms
agree (vkinfer.layout.aliases) the plan aliases the buffer instead and nothing runs."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4, packed_words


def form3(shape: tuple[int, ...]) -> tuple[int, int, int]:
    """(outer, channels, inner) of a tensor's packed form (see shaders/repack.comp)."""
    if len(shape) == 4:
        return shape[0], shape[1], shape[2] * shape[3]
    if len(shape) == 5:
        return shape[0], shape[1] * shape[2], shape[3] * shape[4]
    if len(shape) == 0:
        return 1, 1, 1
    return int(np.prod(shape[:-1], dtype=np.int64)), shape[-1], 1


class Repack:
    """Packed `in_shape` -> packed `out_shape` (same number of elements, row-major order kept)."""

    def __init__(self, in_shape, out_shape, dev: Device):
        if int(np.prod(in_shape, dtype=np.int64)) != int(np.prod(out_shape, dtype=np.int64)):
            raise ValueError("internal: repack between shapes of different sizes")
        self.dev = dev
        oo, oc, oi = form3(tuple(out_shape))
        _, ic, ii = form3(tuple(in_shape))
        self.in_words, self.out_words = [packed_words(tuple(in_shape))], packed_words(tuple(out_shape))
        self.spec_consts = [oo, oc, oi, ic, ii]
        rows = oo * oi
        gy = min(rows, 65535)
        self.groups = (-(-ceil4(oc) // 64), gy, -(-rows // gy))

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        return [self.dev.program("repack", [ins[0], y], self.groups, self.spec_consts)]


# --- lowering (vkinfer/model/lowering.py) ---
from ..model.lowering import ALIAS_OPS, Layer, alias_ok, lower, reshape_like  # noqa: E402


@lower("vulkan", *ALIAS_OPS, "Transpose")
def lower_reshape(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0] if node.outputs else ""
    if alias_ok(ctx, node, "vulkan"):  # the one rule (vkinfer/layout.py): same element order and row padding
        return Layer(node, [x], y, alias=True)
    if reshape_like(ctx, node):
        return Layer(node, [x], y, make=lambda: Repack(ctx.shape(x), ctx.shape(y), backend.dev))
    return None
