"""TFLite's 8-bit RESIZE_BILINEAR as ai-edge-litert's default interpreter runs it (NCHW here).

litert 2.3 hands every 8-bit RESIZE_BILINEAR with a constant size to the XNNPACK delegate (the one-op model's
execution plan shows a DELEGATE node; tests/ops/test_tflite_resize_bilinear.py asserts it). Input and output
share scale and zero point (TFLite requires it; the delegate fails to prepare otherwise), so the op works on the
raw 8-bit values. XNNPACK's arithmetic (its resize-bilinear indirection and 11-bit `ibilinear` micro-kernels):

    scale  = float32(in - a) / float32(out - a)        a = 1 when align_corners and out > 1, else 0
    src    = float32(o * scale)                                   align_corners, or neither flag (legacy)
    src    = clamp(float32(float32(o * scale) + float32(float32(0.5 * scale) - 0.5)), 0, in - 1)   half_pixel
    i0     = trunc(src), i1 = min(i0 + 1, in - 1), alpha = float32(src - i0)
    w      = round_half_even(alpha * 2048)                                     (an 11-bit weight, 0..2048)
    top    = (tl << 11) + (tr - tl) * w_x,   bottom = (bl << 11) + (br - bl) * w_x
    y      = ((top << 11) + (bottom - top) * w_y + 2^21) >> 22                 (arithmetic shift)

every float step a float32 rounding (no fused multiply-add). align_corners takes precedence over half_pixel
(XNNPACK's legacy flag is set only without half_pixel, and its align_corners path ignores the offset).
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from ._opdef import OpDef

f32 = np.float32


def resize_taps(in_size: int, out_size: int, align_corners: bool, half_pixel: bool):
    """(i0, i1, w) per output index along one axis: the two source indices and the 11-bit weight of i1."""
    if in_size < 1 or out_size < 1 or max(in_size, out_size) >= 2 ** 24:
        raise ValueError(f"resize sizes must lie in [1, 2^24): input {in_size}, output {out_size}")
    adj = 1 if align_corners and out_size != 1 else 0
    scale = f32(f32(in_size - adj) / f32(out_size - adj))
    o = np.arange(out_size, dtype=np.int64).astype(f32)
    src = (o * scale).astype(f32)
    if half_pixel and not align_corners:
        offset = f32(f32(f32(0.5) * scale) - f32(0.5))
        src = np.clip((src + offset).astype(f32), f32(0), f32(in_size - 1)).astype(f32)
    i0 = src.astype(np.int64)  # trunc: src >= 0
    i1 = np.minimum(i0 + 1, in_size - 1)
    alpha = (src - i0.astype(f32)).astype(f32)
    w = np.rint((alpha * f32(2048)).astype(f32)).astype(np.int64)
    return i0, i1, w


def tflite_resize_bilinear(x, size, align_corners: bool = False, half_pixel: bool = False) -> np.ndarray:
    """x: NCHW int8/uint8, size (out_h, out_w); y has x's dtype (and its scale and zero point)."""
    qc.qtensor("x", x)
    if x.ndim != 4:
        raise ValueError(f"x must be 4-D (NCHW), got shape {x.shape}")
    oh, ow = qc.int_list("size", size, 2, 1)
    y0, y1, wy = resize_taps(x.shape[2], oh, bool(align_corners), bool(half_pixel))
    x0, x1, wx = resize_taps(x.shape[3], ow, bool(align_corners), bool(half_pixel))
    v = x.astype(np.int64)
    tl, tr = v[:, :, y0][:, :, :, x0], v[:, :, y0][:, :, :, x1]
    bl, br = v[:, :, y1][:, :, :, x0], v[:, :, y1][:, :, :, x1]
    top = (tl << 11) + (tr - tl) * wx
    bottom = (bl << 11) + (br - bl) * wx
    acc = (top << 11) + (bottom - top) * wy[:, None]
    return ((acc + (1 << 21)) >> 22).astype(x.dtype)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, x, memo):
    """On an NCHW input; attrs size (out_h, out_w), align_corners, half_pixel_centers."""
    a = node.attrs
    return [tflite_resize_bilinear(x[0], a["size"], bool(a.get("align_corners", 0)),
                                   bool(a.get("half_pixel_centers", 0)))]


DEFINITIONS = (OpDef("vkinfer:TFLiteResizeBilinear", _kernel, "move", (1, (0,))),)
