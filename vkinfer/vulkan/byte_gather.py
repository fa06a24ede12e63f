"""Data-movement ops on 8-bit tensors on Vulkan as one byte gather (shaders/byte_gather.comp): Slice, Concat on
any axis, Transpose, Pad (every mode), Gather, DepthToSpace, SpaceToDepth, Tile, Expand, nearest Resize
(vkinfer/model/moves.py computes the table, in the packed form's element order). Registered as a fallback: the
channel concat, channel shuffle and reshapes are tried first."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4, packed_words, rows_width
from .qlinear_conv import _upload_const


class ByteGather:
    """Packed inputs of `in_shapes` -> packed output of `out_shape` by the row table `rows` (moves.gather_rows)."""

    def __init__(self, in_shapes: list[tuple[int, ...]], out_shape: tuple[int, ...], L: int, rows: np.ndarray,
                 fill: int, dev: Device):
        self.dev = dev
        orows, c_out = rows_width(tuple(out_shape))
        self.in_words = [packed_words(tuple(s)) for s in in_shapes]
        self.out_words = packed_words(tuple(out_shape))
        self.r_buf = _upload_const(dev, np.ascontiguousarray(rows, np.int32).reshape(-1))
        gy = min(orows, 65535)
        groups = (-(-ceil4(c_out) // 64), gy, -(-orows // gy))
        self.parts = []
        for k, s in enumerate(in_shapes):
            c_in = rows_width(tuple(s))[1]
            self.parts.append(([orows, c_out, ceil4(c_out), L, k, c_in, ceil4(c_in), k == 0, fill], groups))

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        return [self.dev.program("byte_gather", [x, self.r_buf, y], groups, spec)
                for x, (spec, groups) in zip(ins, self.parts, strict=True)]


# --- lowering (vkinfer/model/lowering.py) ---
from ..model.lowering import Layer, lower  # noqa: E402
from ..model.moves import GATHER_OPS, gather_spec  # noqa: E402


@lower("vulkan", *GATHER_OPS, fallback=True)
def lower_byte_gather(ctx, node, backend):
    spec = gather_spec(ctx, node)
    if spec is None:
        return None
    names, L, rows, fill, _ = spec
    shapes = [ctx.shape(t) for t in names]
    y = node.outputs[0]
    return Layer(node, list(names), y, make=lambda: ByteGather(shapes, ctx.shape(y), L, rows, fill, backend.dev))
