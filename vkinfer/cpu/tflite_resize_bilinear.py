"""TFLite's 8-bit RESIZE_BILINEAR in the native CPU graph (XNNPACK's 11-bit interpolation,
vkinfer/reference/tflite_resize_bilinear.py): the host computes each output row's and column's taps with the
reference's float32 coordinates, the C operator (cpu_fallback/src/ops/tflite_resize_bilinear.c) interpolates
NHWC canonical bytes in integers."""

from __future__ import annotations

import numpy as np

from ..model.lowering import Layer, lower
from ..reference.tflite_resize_bilinear import resize_taps


def resize_tap_table(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """(out_size * 3,) uint32: i0, i1 and the 11-bit weight of i1 per output index (the C operator's taps)."""
    i0, i1, w = resize_taps(in_size, out_size, align_corners, half_pixel)
    return np.ascontiguousarray(np.stack([i0, i1, w], axis=1).astype(np.uint32).ravel())


def resize_attrs(ctx, node) -> tuple[int, int, bool, bool] | None:
    """(out_h, out_w, align_corners, half_pixel) of a vkinfer:TFLiteResizeBilinear node on an 8-bit NCHW tensor
    whose output has the input's type and the attribute's size, else None."""
    x, y = node.inputs[0], node.outputs[0]
    shape, out = tuple(ctx.shape(x)), tuple(ctx.shape(y))
    size = [int(v) for v in node.attrs.get("size", ())]
    if not (ctx.quantized(x, y) and ctx.dtype(x) == ctx.dtype(y) and len(shape) == 4 and len(size) == 2
            and out == (shape[0], shape[1], *size) and min(size) >= 1 and max(max(size), *shape[2:]) < 2 ** 24):
        return None
    return size[0], size[1], bool(node.attrs.get("align_corners", 0)), bool(node.attrs.get("half_pixel_centers", 0))


@lower("cpu", "vkinfer:TFLiteResizeBilinear")
def lower_tflite_resize_bilinear(ctx, node, backend):
    if (a := resize_attrs(ctx, node)) is None:
        return None
    x, y = node.inputs[0], node.outputs[0]
    n, c, h, w = (int(d) for d in ctx.shape(x))
    oh, ow, ac, hp = a
    ytaps, xtaps = resize_tap_table(h, oh, ac, hp), resize_tap_table(w, ow, ac, hp)

    def emit(g, refs, out, scratch):
        g.add("tflite_resize_bilinear", n, h, w, c, oh, ow, ytaps, xtaps, refs[0], out)
    return Layer(node, [x], y, emit)
