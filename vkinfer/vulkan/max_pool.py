"""ONNX MaxPool on 8-bit tensors on Vulkan (shaders/max_pool.comp)."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4
from ..reference.max_pool import pool_attrs


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


# --- lowering (vkinfer/model/lowering.py) ---
from ..model.lowering import Layer, lower  # noqa: E402
from ._loops import check_loops, nested_iterations  # noqa: E402


@lower("vulkan", "MaxPool")
def lower_max_pool(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    if not (ctx.quantized(x) and len(ctx.shape(x)) == 4 and not node.attrs.get("storage_order", 0)
            and len(node.outputs) == 1) or (p := pool_attrs(node)) is None:
        return None
    # One invocation loops over every window row and column: past llvmpipe's loop limit it would take the maximum
    # of a prefix (_loops), so refused and placed on the CPU.
    check_loops(f"MaxPool with a {p[0][0]}x{p[0][1]} window", nested_iterations(p[0]))
    return Layer(node, [x], y, make=lambda: MaxPool(ctx.shape(x), ctx.shape(y), ctx.dtype(x), *p, backend.dev))
