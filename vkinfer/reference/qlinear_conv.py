"""QLinearConv, the readable definition (ONNX semantics, ONNX Runtime's requantization).

acc[n, m, oh, ow] = bias[m] + sum_{c in group(m), kh, kw} (x[n, c, ih, iw] - x_zp) * (w[m, c, kh, kw] - w_zp[m])
with padding contributing zero real value, accumulated in int32; then requantize().
"""

from __future__ import annotations

import numpy as np

from .requant import requantize


def conv_accumulate(s) -> np.ndarray:
    """int32 accumulators (N, M, OH, OW) of a validated ConvSpec, bias included."""
    n, c, h, w = s.x.shape
    m, cg, kh, kw = s.w.shape
    _, _, oh, ow = s.out_shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = s.strides, s.dilations, s.pads
    g, mg = s.group, m // s.group
    # Integer products summed in float64 are exact: |sum| <= K * 255 * 255 < 2**53 for any real K.
    xi = np.pad(s.x.astype(np.float64) - s.x_zp, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    wi = (s.w.astype(np.float64) - s.w_zp[:, None, None, None]).reshape(g, mg, cg, kh, kw)
    xg = xi.reshape(n, g, cg, h + pt + pb, w + pl + pr)
    acc = np.zeros((n, g, oh, ow, mg), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xg[:, :, :, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]
            # (n, g, oh, ow, cg) @ (g, cg, mg) -> (n, g, oh, ow, mg)
            acc += np.matmul(patch.transpose(0, 1, 3, 4, 2), wi[:, :, :, i, j].transpose(0, 2, 1)[None, :, None])
    acc = acc.transpose(0, 1, 4, 2, 3).reshape(n, m, oh, ow).astype(np.int64) + s.bias[None, :, None, None]
    return acc.astype(np.int32)  # int32 wrap-around, as an int32 accumulator would


def qlinear_conv(s) -> np.ndarray:
    """Quantized output (N, M, OH, OW) of a validated ConvSpec (see vkinfer.ops.qlinear_conv)."""
    acc = conv_accumulate(s)
    q = requantize(acc, s.out.m[None, :, None, None], s.out.zero_point, s.out.lo, s.out.hi)
    return q.astype(s.out.dtype)
