"""ONNX MaxPool on 8-bit tensors on Vulkan (shaders/max_pool.comp)."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ._layout import ceil4


class MaxPool:
    """(N, C, H, W) -> (N, C, OH, OW) packed, with explicit kernel, strides, dilations and pads (t, l, b, r);
    the output size comes from the caller (it already applied ceil_mode)."""

    def __init__(self, shape, out_shape, dtype, kernel, strides, dilations, pads, dev: Device):
        n, c, h, w = shape
        _, _, oh, ow = out_shape
        self.dev = dev
        self.in_words, self.out_words = [n * h * w * ceil4(c)], n * oh * ow * ceil4(c)
        self.spec_consts = [ceil4(c), h, w, oh, ow, *kernel, *strides, *dilations, pads[0], pads[1],
                            np.dtype(dtype) == np.int8]
        self.groups = (-(-ceil4(c) // 4), -(-ow // 16), n * oh)

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        return [self.dev.program("max_pool", [ins[0], y], self.groups, self.spec_consts)]
