"""TFLite's 8-bit AVERAGE_POOL_2D on Vulkan (shaders/tflite_average_pool.comp; numerics in
vkinfer/reference/tflite_average_pool.py): integer window sums, rounding half away from zero."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4
from ..reference.tflite_average_pool import tflite_pool_attrs


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


# --- lowering (vkinfer/model/lowering.py) ---
from ..model.lowering import Layer, lower  # noqa: E402
from ._loops import check_loops, loop_cost, nested_iterations  # noqa: E402


@lower("vulkan", "vkinfer:TFLiteAveragePool")
def lower_tflite_average_pool(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    if not (ctx.quantized(x) and len(ctx.shape(x)) == 4):
        return None
    dt = ctx.dtype(x)
    attrs = tflite_pool_attrs(node, dt)
    # One invocation loops over its window's in-image rows and columns: past llvmpipe's loop limit it would sum a
    # prefix (_loops), so refused and placed on the CPU.
    (kh, kw), (_, _, h, w) = attrs[0], ctx.shape(x)
    check_loops(f"AVERAGE_POOL_2D with a {kh}x{kw} window",
                nested_iterations((min(kh, h), min(kw, w))) + loop_cost(4))
    return Layer(node, [x], y, make=lambda: TFLiteAveragePool(ctx.shape(x), ctx.shape(y), dt, *attrs, backend.dev))
