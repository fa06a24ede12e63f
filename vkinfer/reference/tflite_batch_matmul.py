"""TFLite's int8 BATCH_MATMUL as ai-edge-litert's default interpreter runs it (uint8 is not supported by TFLite).
Per output, with numpy-broadcast batch axes and adj_x / adj_y transposing the last two axes of x / y:

    acc = sum_k (x[.., i, k] - x_zp) * (y[.., k, j] - y_zp)                          exact int32

then one of two requantizations, as litert picks the kernel (fitted on litert, ties included):
  - y_zp == 0: litert delegates to XNNPACK (the one-op plan has a DELEGATE node), whose qs8 batch matmul
    requantizes in float32 exactly as the convolution contract (docs/numerics.md, requant.py):
        m = float32(float32(x_scale * y_scale) / out_scale),  out = clamp(rint(float32(acc) * m) + out_zp)
    ties to even (1024 of 1024 exact halves in a K = 1 test were even);
  - y_zp != 0: TFLite's builtin kernel, fixed point:
        (q, shift) = QuantizeMultiplier(double(x_scale) * double(y_scale) / double(out_scale))
        out = clamp(RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc, q), -shift) + out_zp)
    gemmlowp's two roundings (reference/tflite_elementwise.py); one rounding of the exact product differs from
    litert on values within ~0.002 of a half, and so does the float32 form. A multiplier >= 1 (shift > 0) is
    refused on this path (TFLite's int32 left shift there can overflow).
Checked bit for bit against litert (tests/ops/test_tflite_batch_matmul.py).
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from ._opdef import OpDef
from .requant import multiplier
from .tflite_elementwise import multiply_by_quantized_multiplier
from .tflite_hard_swish import quantize_multiplier


def batch_matmul_multiplier(x_scale, y_scale, out_scale) -> tuple[int, int]:
    """TFLite's (q, shift) for the product of two int8 tensors requantized to the output's scale."""
    real = float(np.float32(x_scale)) * float(np.float32(y_scale)) / float(np.float32(out_scale))
    return quantize_multiplier(real)


def batch_matmul_shapes(x_shape, y_shape, adj_x: bool, adj_y: bool) -> tuple[tuple[int, ...], int, int, int]:
    """(broadcast batch shape, rows, inner, cols), ValueError naming a mismatch."""
    if len(x_shape) < 2 or len(y_shape) < 2:
        raise ValueError(f"BATCH_MATMUL operands must have rank >= 2, got {list(x_shape)} and {list(y_shape)}")
    m, kx = (x_shape[-1], x_shape[-2]) if adj_x else (x_shape[-2], x_shape[-1])
    ky, n = (y_shape[-1], y_shape[-2]) if adj_y else (y_shape[-2], y_shape[-1])
    if kx != ky:
        raise ValueError(f"BATCH_MATMUL inner dimensions differ: {list(x_shape)} (adj_x={adj_x}) and "
                         f"{list(y_shape)} (adj_y={adj_y})")
    try:
        batch = np.broadcast_shapes(tuple(x_shape[:-2]), tuple(y_shape[:-2]))
    except ValueError:
        raise ValueError(f"BATCH_MATMUL batch axes do not broadcast: {list(x_shape)} and {list(y_shape)}") from None
    return tuple(int(d) for d in batch), int(m), int(kx), int(n)


def tflite_batch_matmul(x, x_scale, x_zp, y, y_scale, y_zp, out_scale, out_zp, adj_x: bool = False,
                        adj_y: bool = False) -> np.ndarray:
    """int8 x (.., M, K) times int8 y (.., K, N) (adj: the last two axes swapped), int8 out (batch.., M, N)."""
    for name, v in (("x", x), ("y", y)):
        qc.qtensor(name, v)
        if v.dtype != np.int8:
            raise TypeError(f"BATCH_MATMUL takes int8 operands (TFLite's kernel), got {name} of {v.dtype}")
    xs, ys, os_ = qc.scale("x_scale", x_scale), qc.scale("y_scale", y_scale), qc.scale("out_scale", out_scale)
    xz, yz = qc.zero_point("x_zero_point", x_zp, x.dtype), qc.zero_point("y_zero_point", y_zp, y.dtype)
    oz = qc.zero_point("out_zero_point", out_zp, np.dtype(np.int8))
    batch_matmul_shapes(x.shape, y.shape, adj_x, adj_y)
    a = x.astype(np.int64) - xz
    b = y.astype(np.int64) - yz
    if adj_x:
        a = np.swapaxes(a, -1, -2)
    if adj_y:
        b = np.swapaxes(b, -1, -2)
    acc = np.matmul(a, b)
    if np.abs(acc).max(initial=0) >= 2 ** 31:
        raise ValueError("BATCH_MATMUL accumulators overflow int32")
    q, shift = batch_matmul_multiplier(xs, ys, os_)
    if yz != 0 and shift > 0:
        raise ValueError(f"BATCH_MATMUL with out_scale {os_} below x_scale * y_scale ({xs} * {ys}: a multiplier "
                         ">= 1) and a nonzero y zero point (TFLite's builtin kernel) is not supported")
    if yz == 0:  # XNNPACK: one float32 product, ties to even (the requantization contract, requant.py)
        m = multiplier(xs, ys, os_)
        v = np.rint((acc.astype(np.int32).astype(np.float32) * m).astype(np.float32)).astype(np.int64) + oz
    else:
        v = multiply_by_quantized_multiplier(acc, q, shift) + oz
    return np.clip(v, -128, 127).astype(np.int8)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, v, memo):
    """Inputs x, x_scale, x_zero_point, y, y_scale, y_zero_point, out_scale, out_zero_point; attrs adj_x, adj_y."""
    a = node.attrs
    return [tflite_batch_matmul(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], bool(a.get("adj_x", 0)),
                                bool(a.get("adj_y", 0)))]


DEFINITIONS = (OpDef("vkinfer:TFLiteBatchMatMul", _kernel, "gemm", (8, (0, 1, 2, 3, 4, 5, 6, 7)), y_params=(6, 7),
                     x_slots=(0, 3)),)
