"""A channel permutation of a packed tensor on Vulkan (shaders/channel_gather.comp): Transpose on the channel
axes, as in ShuffleNet's channel shuffle."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4
from .qlinear_conv import _upload_const


class ChannelGather:
    """rows x C packed -> rows x C packed with output channel c taken from input channel perm[c]."""

    def __init__(self, rows: int, perm: np.ndarray, dev: Device):
        c = len(perm)
        self.dev = dev
        self.in_words, self.out_words = [rows * ceil4(c)], rows * ceil4(c)
        self.p_buf = _upload_const(dev, np.ascontiguousarray(perm, np.int32))
        gy = min(rows, 65535)
        self.spec_consts = [rows, c, ceil4(c)]
        self.groups = (-(-ceil4(c) // 64), gy, -(-rows // gy))

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        return [self.dev.program("channel_gather", [ins[0], self.p_buf, y], self.groups, self.spec_consts)]


# --- lowering (vkinfer/model/lowering.py) ---
from ..layout import rows_width  # noqa: E402
from ..model.lowering import Layer, channel_perm, lower  # noqa: E402


@lower("vulkan", "Transpose")
def lower_channel_shuffle(ctx, node, backend):
    if (perm := channel_perm(ctx, node)) is None:
        return None
    x = node.inputs[0]
    return Layer(node, [x], node.outputs[0], make=lambda: ChannelGather(rows_width(ctx.shape(x))[0], perm, backend.dev))
