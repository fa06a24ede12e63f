"""TFLite's 8-bit AVERAGE_POOL_2D as ai-edge-litert's default interpreter runs it (NCHW here).

The XNNPACK delegate takes float32 average pooling only, so int8/uint8 pools run TFLite's builtin optimized
kernel (a 16-bit accumulator up to 16 x 16 windows, else the reference kernel's 32-bit one: the same integers).
Input and output share scale and zero point (TFLite requires it), so neither is used: per output, over the
window's in-image elements only (padding is not counted),
    acc = sum of the raw 8-bit values (the zero point is not subtracted)
    n   = number of in-image elements
    y   = clamp(round_half_away_from_zero(acc / n), act_min, act_max)
with the rounding done in integers: (acc + n / 2) / n for acc > 0, else (acc - n / 2) / n (C division, which
truncates toward zero; n / 2 truncated). act_min/act_max are the fused activation's quantized bounds
(CalculateActivationRangeQuantized), the type's range without one.

ONNX Runtime's QLinearAveragePool averages (x - zero_point) in float32 and rounds half to even: the two differ
by one step wherever the average is a tie (an even n), about 2% of values on typical inputs.
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from ._opdef import OpDef, attr
from ._pool_shape import pool_geometry


def tflite_average_pool(x, kernel_shape, strides=None, pads=None, activation_min=None,
                        activation_max=None) -> np.ndarray:
    """x: NCHW int8/uint8. kernel_shape (kh, kw), strides (sh, sw), pads [top, left, bottom, right] as ONNX
    gives them (TFLite SAME padding: top = total // 2). Output has x's dtype."""
    qc.qtensor("x", x)
    if x.ndim != 4:
        raise ValueError(f"x must be 4-D (NCHW), got shape {x.shape}")
    k, s, p, _, out = pool_geometry(x.shape, kernel_shape, strides, pads, None, 0)
    qmin, qmax = qc.QRANGE[x.dtype]
    lo = qmin if activation_min is None else int(activation_min)
    hi = qmax if activation_max is None else int(activation_max)
    if not qmin <= lo <= hi <= qmax:
        raise ValueError(f"activation bounds [{lo}, {hi}] must lie inside the {x.dtype} range [{qmin}, {qmax}]")
    h, w = x.shape[2:]
    # Integral image with a zero row and column in front: any window sum is exact in int64.
    ii = np.zeros(x.shape[:2] + (h + 1, w + 1), np.int64)
    ii[:, :, 1:, 1:] = x.astype(np.int64).cumsum(axis=2).cumsum(axis=3)
    y0 = np.arange(out[0]) * s[0] - p[0]
    x0 = np.arange(out[1]) * s[1] - p[1]
    ys, ye = np.maximum(y0, 0), np.minimum(y0 + k[0], h)
    xs, xe = np.maximum(x0, 0), np.minimum(x0 + k[1], w)
    acc = (ii[:, :, ye[:, None], xe[None, :]] - ii[:, :, ys[:, None], xe[None, :]]
           - ii[:, :, ye[:, None], xs[None, :]] + ii[:, :, ys[:, None], xs[None, :]])
    n = (ye - ys)[:, None] * (xe - xs)[None, :]
    if np.any(n <= 0):
        raise ValueError("a pooling window lies entirely in the padding")
    half = n // 2
    q = np.where(acc > 0, (acc + half) // n, -((half - acc) // n))
    return np.clip(q, lo, hi).astype(x.dtype)


def tflite_pool_attrs(node, dt) -> tuple:
    """(kernel, strides, pads, lo, hi) of a vkinfer:TFLiteAveragePool node on a tensor of dtype `dt`."""
    from .requant import QRANGE

    a = node.attrs
    k = tuple(int(v) for v in a["kernel_shape"])
    st = tuple(int(v) for v in a.get("strides") or (1, 1))
    pads = tuple(int(v) for v in a.get("pads") or (0, 0, 0, 0))
    lo = QRANGE[dt][0] if a.get("activation_min") is None else int(a["activation_min"])
    hi = QRANGE[dt][1] if a.get("activation_max") is None else int(a["activation_max"])
    return k, st, pads, lo, hi


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, x, memo):
    """On an NCHW input: integer sum of the in-image window, rounded half away from zero, clamped to attrs
    activation_min/activation_max."""
    a = node.attrs
    return [tflite_average_pool(x[0], list(attr(node, "kernel_shape")), a.get("strides"), a.get("pads"),
                                a.get("activation_min"), a.get("activation_max"))]


DEFINITIONS = (OpDef("vkinfer:TFLiteAveragePool", _kernel, "pool", (1, (0,))),)
