"""QLinearConv, the readable definition (ONNX semantics, ONNX Runtime's requantization).

acc[n, m, oh, ow] = bias[m] + sum_{c in group(m), kh, kw} (x[n, c, ih, iw] - x_zp) * (w[m, c, kh, kw] - w_zp[m])
with padding contributing zero real value, accumulated in int32; then requantize().
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ._opdef import OpDef, attr, cached_spec, check_auto_pad, ints
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


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def conv_node_spec(node, x: list, activation=None):
    """The ConvSpec of a QLinearConv node for input values `x` (x[0] may be any array of the input's shape)."""
    from ._spec import conv_spec

    check_auto_pad(node)
    a = node.attrs
    bias = x[8] if len(x) > 8 else None
    return conv_spec(*x[:8], bias, strides=ints(a.get("strides"), 2, 1), pads=ints(a.get("pads"), 4, 0),
                     dilations=ints(a.get("dilations"), 2, 1), group=int(a.get("group", 1)), activation=activation)


def _kernel(node, x, memo, activation=None):
    check_auto_pad(node)
    # Only the activation varies between runs; everything else is a constant of the model.
    spec = cached_spec(memo, (x[0].shape, x[0].dtype.str), lambda: conv_node_spec(node, x, activation))
    return [qlinear_conv(dataclasses.replace(spec, x=x[0]))]


def _shape(node, x, activation=None):
    spec = conv_node_spec(node, x, activation)
    return [(spec.out_shape, spec.out.dtype)]


def _clamp_kernel(node, x, memo):
    """QLinearConv with a fused activation (attribute `activation`: "relu", "relu6" or ("clip", lo, hi)) applied
    by narrowing the output clamp; the TFLite importer and the fusion pass emit it."""
    return _kernel(node, x, memo, attr(node, "activation"))


def _clamp_shape(node, x):
    return _shape(node, x, attr(node, "activation"))


_INPUTS = (8, (0, 1, 3, 4, 6))
DEFINITIONS = (
    OpDef("QLinearConv", _kernel, "conv", _INPUTS, y_params=(6, 7), weights=3, shape=_shape),
    OpDef("vkinfer:QLinearConvClamp", _clamp_kernel, "conv", _INPUTS, weights=3, shape=_clamp_shape),
)
