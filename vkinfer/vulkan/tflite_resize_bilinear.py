"""TFLite's 8-bit RESIZE_BILINEAR on Vulkan (shaders/tflite_resize_bilinear.comp) with XNNPACK's bits
(vkinfer/reference/tflite_resize_bilinear.py): the host's taps, integer interpolation in the shader."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4
from .qlinear_conv import _upload_const


class TFLiteResizeBilinear:
    """(N, C, H, W) packed -> (N, C, OH, OW) packed; `taps`: the row then column tap tables (int32)."""

    def __init__(self, shape, out_hw, signed: bool, taps: np.ndarray, dev: Device):
        n, c, h, w = (int(d) for d in shape)
        oh, ow = out_hw
        self.dev = dev
        self.in_words, self.out_words = [n * h * w * ceil4(c)], n * oh * ow * ceil4(c)
        if max(self.in_words[0], self.out_words) >= 2 ** 31:
            raise ValueError(f"tflite_resize_bilinear: a tensor of shape {shape} is too large for int indices")
        self.t_buf = _upload_const(dev, np.ascontiguousarray(taps, np.int32))
        self.spec = [ceil4(c), h, w, oh, ow, bool(signed)]
        self.groups = (-(-ceil4(c) // 4), -(-ow // 16), n * oh)

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        return [self.dev.program("tflite_resize_bilinear", [ins[0], self.t_buf, y], self.groups, self.spec)]


# --- lowering (vkinfer/model/lowering.py) ---
from ..cpu.tflite_resize_bilinear import resize_attrs, resize_tap_table  # noqa: E402 (one definition of the taps)
from ..model.lowering import Layer, lower  # noqa: E402


@lower("vulkan", "vkinfer:TFLiteResizeBilinear")
def lower_tflite_resize_bilinear(ctx, node, backend):
    if (a := resize_attrs(ctx, node)) is None:
        return None
    x, y = node.inputs[0], node.outputs[0]
    shape = tuple(int(d) for d in ctx.shape(x))
    oh, ow, ac, hp = a
    if shape[0] * oh > 65535:
        return None  # one workgroup row per output row: the dispatch's z limit
    taps = np.concatenate([resize_tap_table(shape[2], oh, ac, hp), resize_tap_table(shape[3], ow, ac, hp)])
    signed = ctx.dtype(x) == np.int8
    return Layer(node, [x], y, make=lambda: TFLiteResizeBilinear(shape, (oh, ow), signed, taps, backend.dev))
