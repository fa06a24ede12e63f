"""8-bit TFLite ops with the bits of litert's integer kernels (XNNPACK's where litert 2.3 delegates them, else
TFLite's builtin ones): each op's check, build and entry in the op table (ops.py).

    RESIZE_BILINEAR    -> vkinfer:TFLiteResizeBilinear (XNNPACK's 11-bit weights, vkinfer/reference/
                          tflite_resize_bilinear.py), on NCHW
    BATCH_MATMUL       -> vkinfer:TFLiteBatchMatMul (int8; the builtin kernel's fixed-point multiplier,
                          vkinfer/reference/tflite_batch_matmul.py), on TFLite's layout, either operand constant
"""

from __future__ import annotations

import numpy as np

from .builder import Op, expect_shape, same_q
from .reader import DTYPES


def _const_ints(tensors, i: int, what: str) -> np.ndarray:
    t = tensors[i]
    if t.data is None or t.dtype not in (2, 4):
        raise ValueError(f"{what} {t.name!r} must be a constant int32/int64 tensor")
    return np.frombuffer(t.data, DTYPES[t.dtype]).astype(np.int64)


def _q8(tensors, i: int) -> bool:
    return DTYPES.get(tensors[i].dtype) in (np.uint8, np.int8) and tensors[i].scale is not None and (
        tensors[i].scale.size == 1)


# ---- RESIZE_BILINEAR -------------------------------------------------------------------------------------------

def resize_bilinear(imp, ins, outs, opts) -> None:
    """RESIZE_BILINEAR -> vkinfer:TFLiteResizeBilinear on NCHW (the size constant)."""
    x = ins[0]
    n, _, _, c = imp.t[x].shape
    size = _const_ints(imp.t, ins[1], "size")
    if size.size != 2 or size.min() < 1 or size.max() >= 2 ** 24:
        raise ValueError(f"size {size.tolist()} must be two integers in [1, 2^24)")
    oh, ow = (int(v) for v in size)
    expect_shape(imp, outs[0], [n, oh, ow, c], f"resizing to {[oh, ow]}")
    ac = bool(opts.AlignCorners()) if opts is not None else False
    hp = bool(opts.HalfPixelCenters()) if opts is not None else False
    imp.node("vkinfer:TFLiteResizeBilinear", [imp.get(x, "NCHW")], [imp.put(outs[0], "NCHW")], size=[oh, ow],
             align_corners=int(ac), half_pixel_centers=int(hp))


def check_resize_bilinear(ins, outs, opts, tensors) -> str | None:
    if not (_q8(tensors, ins[0]) and _q8(tensors, outs[0])):
        return "only per-tensor int8/uint8 quantized tensors are supported (float models are not)"
    if tensors[ins[0]].dtype != tensors[outs[0]].dtype or not same_q(tensors[ins[0]], tensors[outs[0]]):
        return "input and output must share one type, scale and zero point (as TFLite requires)"
    if len(tensors[ins[0]].shape) != 4:
        return "input is not 4-D"
    if tensors[ins[1]].data is None:
        return "the size must be a constant tensor"
    return None


# ---- BATCH_MATMUL ----------------------------------------------------------------------------------------------

def batch_matmul(imp, ins, outs, opts) -> None:
    """BATCH_MATMUL -> vkinfer:TFLiteBatchMatMul on TFLite's own layout (adj_x / adj_y as attributes)."""
    from ...reference.tflite_batch_matmul import batch_matmul_shapes

    adj_x = bool(opts.AdjX()) if opts is not None else False
    adj_y = bool(opts.AdjY()) if opts is not None else False
    a, b = ins[:2]
    batch, m, _, n = batch_matmul_shapes(imp.t[a].shape, imp.t[b].shape, adj_x, adj_y)
    expect_shape(imp, outs[0], [*batch, m, n], f"BATCH_MATMUL (adj_x={adj_x}, adj_y={adj_y})")
    imp.node("vkinfer:TFLiteBatchMatMul", [imp.get(a), *imp.qparams(a), imp.get(b), *imp.qparams(b),
                                           *imp.qparams(outs[0])], [imp.put(outs[0])], adj_x=int(adj_x),
             adj_y=int(adj_y))


def check_batch_matmul(ins, outs, opts, tensors) -> str | None:
    if not all(_q8(tensors, i) and DTYPES[tensors[i].dtype] == np.int8 for i in [*ins[:2], outs[0]]):
        return "only per-tensor int8 operands and output are supported (TFLite's 8-bit BATCH_MATMUL is int8)"
    if opts is not None and opts.AsymmetricQuantizeInputs():
        return "asymmetric_quantize_inputs (hybrid float) is not supported"
    return None


OPS = {
    "BATCH_MATMUL": Op("BatchMatMulOptions", check_batch_matmul, batch_matmul, ("vkinfer:TFLiteBatchMatMul",),
                       min_inputs=2),
    "RESIZE_BILINEAR": Op("ResizeBilinearOptions", check_resize_bilinear, resize_bilinear,
                          ("vkinfer:TFLiteResizeBilinear",), min_inputs=2),
}
