"""TFLite's int8 TRANSPOSE_CONV where litert runs its builtin kernel: geometry XNNPACK's delegate refuses (a
negative total padding (in - 1) * stride + kernel - out, i.e. a kernel below the stride with SAME padding).
Elsewhere the delegate runs it with the convolution contract's float32 requantization, which the importer maps
onto vkinfer:QLinearConvTranspose (vkinfer/reference/qlinear_conv_transpose.py) and so onto the devices.

The builtin kernel (reference_integer_ops::TransposeConv, per-channel):
    acc[c] = bias[c] + sum (x - x_zp) * w[c]                        exact int32 (weights symmetric)
    (q[c], shift[c]) = QuantizeMultiplier(double(x_scale) * double(w_scale[c]) / double(y_scale))
    y = clamp(RoundingDivideByPOT(SaturatingRoundingDoublingHighMul(acc, q[c]), -shift[c]) + y_zp, lo, hi)
gemmlowp's two roundings (reference/tflite_elementwise.py), lo/hi the fused activation's bounds. Fitted against
litert: identical on 17 of 18 seeded models (exact halves included: one rounding of the exact product, either
tie rule, fails those); one model (4x2 kernel, strides 2x3) differs on 1 of 840 values by one step, a value
0.0009 below a half that litert rounds toward zero: not explained yet, bounded by
tests/ops/test_tflite_transpose_conv.py. Runs on the host (numpy) only.
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from ._opdef import OpDef
from .qlinear_conv_transpose import conv_transpose_accumulate, conv_transpose_geometry
from .tflite_elementwise import multiply_by_quantized_multiplier
from .tflite_hard_swish import quantize_multiplier


def tflite_transpose_conv(x, x_scale, x_zp, w, w_scale, y_scale, y_zp, bias=None, *, strides, pads,
                          output_padding=(0, 0), activation_min=-128, activation_max=127) -> np.ndarray:
    """x (N, C, H, W) int8, w (C, M, kH, kW) int8 symmetric (per-channel scales along M), int32 bias (M,); ONNX
    ConvTranspose geometry (pads [top, left, bottom, right], output_padding); y int8 (N, M, OH, OW)."""
    for name, v in (("x", x), ("w", w)):
        qc.qtensor(name, v)
        if v.dtype != np.int8:
            raise TypeError(f"{name} must be int8 (TFLite's 8-bit TRANSPOSE_CONV), got {v.dtype}")
    if x.ndim != 4 or w.ndim != 4 or w.shape[0] != x.shape[1]:
        raise ValueError(f"x {list(x.shape)} and w {list(w.shape)} must be NCHW and (C, M, kH, kW)")
    m = w.shape[1]
    xs, ys = qc.scale("x_scale", x_scale), qc.scale("y_scale", y_scale)
    ws = np.broadcast_to(np.asarray(w_scale, np.float32).reshape(-1), (m,))
    xz = qc.zero_point("x_zero_point", x_zp, np.dtype(np.int8))
    yz = qc.zero_point("y_zero_point", y_zp, np.dtype(np.int8))
    if not -128 <= int(activation_min) <= int(activation_max) <= 127:
        raise ValueError(f"activation bounds [{activation_min}, {activation_max}] must lie inside [-128, 127]")
    begin, out_hw = conv_transpose_geometry(x.shape[2:], w.shape[2:], strides=list(strides), pads=list(pads),
                                            output_padding=list(output_padding))
    acc = conv_transpose_accumulate(x.astype(np.int64) - xz, w.astype(np.int64), 1, tuple(strides), (1, 1), begin,
                                    out_hw).astype(np.int64)  # float64 sums of integers below 2^53: exact
    if bias is not None:
        acc = acc + np.asarray(bias, np.int64).reshape(1, m, 1, 1)
    if np.abs(acc).max(initial=0) >= 2 ** 31:
        raise ValueError("TRANSPOSE_CONV accumulators overflow int32")
    out = np.empty(acc.shape, np.int64)
    for c in range(m):
        q, shift = quantize_multiplier(float(xs) * float(ws[c]) / float(ys))
        if shift > 0:
            raise ValueError(f"TRANSPOSE_CONV channel {c}: a multiplier >= 1 is not supported")
        out[:, c] = multiply_by_quantized_multiplier(acc[:, c], q, shift)
    return np.clip(out + yz, int(activation_min), int(activation_max)).astype(np.int8)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, v, memo):
    """Inputs x, x_scale, x_zero_point, w, w_scale, y_scale, y_zero_point, bias (optional); attrs strides, pads,
    output_padding, activation_min, activation_max."""
    a = node.attrs
    return [tflite_transpose_conv(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7] if len(v) > 7 else None,
                                  strides=[int(s) for s in a["strides"]], pads=[int(p) for p in a["pads"]],
                                  output_padding=[int(p) for p in a.get("output_padding", (0, 0))],
                                  activation_min=int(a.get("activation_min", -128)),
                                  activation_max=int(a.get("activation_max", 127)))]


DEFINITIONS = (OpDef("vkinfer:TFLiteTransposeConv", _kernel, "conv", (7, (0, 1, 2, 3, 4, 5, 6)), y_params=(5, 6),
                     x_slots=(0,), weights=3),)
