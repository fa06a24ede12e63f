"""TFLite's 8-bit AVERAGE_POOL_2D on Vulkan (shaders/tflite_average_pool.comp; numerics in
vkinfer/reference/tflite_average_pool.py): integer window sums, rounding half away from zero."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ._layout import ceil4


class TFLiteAveragePool:
    """(N, C, H, W) -> (N, C, OH, OW) packed; output size from the caller, pads (top, left, bottom, right)."""

    def __init__(self, shape, out_shape, dtype, kernel, strides, pads, lo: int, hi: int, dev: Device):
        n, c, h, w = shape
        _, _, oh, ow = out_shape
        self.dev = dev
        self.in_words, self.out_words = [n * h * w * ceil4(c)], n * oh * ow * ceil4(c)
        self.spec_consts = [ceil4(c), h, w, oh, ow, *kernel, *strides, pads[0], pads[1],
                            np.dtype(dtype) == np.int8, c]
        self.push = [lo, hi]
        self.groups = (-(-ceil4(c) // 4), -(-ow // 16), n * oh)

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        return [self.dev.program("tflite_average_pool", [ins[0], y], self.groups, self.spec_consts, self.push)]
