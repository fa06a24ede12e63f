"""com.microsoft QLinearAveragePool (NCHW or NHWC, any auto_pad), bit-exact with ONNX Runtime 1.31
(contrib_ops/cpu/quantization/qlinear_pool.cc).

ORT dequantizes every input, xf = float32(x_scale * float(x - x_zp)), then per output:
    s = 0; s += xf[...] for the in-image window elements in row-major order   (float32, sequential)
    s = s / float(count)      count = prod(kernel_shape) if count_include_pad else the in-image count
    y = clamp(int32(round_half_even(float32(s / y_scale) + float(y_zp))), qmin, qmax)
A window is [o*stride - pad_head, min(that + kernel, size)) clipped at 0 (no dilation). When the kernel
covers the whole image and all pads are 0, ORT switches to QLinearGlobalAveragePool's integer path (and
its range check), whatever the strides: replicated here.
"""

from __future__ import annotations

import itertools

import numpy as np

from . import _qcheck as qc
from ._float32 import cvtps_epi32
from ._opdef import OpDef, attr, check_auto_pad
from ._pool_shape import pool_geometry
from .qlinear_global_average_pool import qlinear_global_average_pool


def qlinear_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point, kernel_shape, strides=None, pads=None,
                         count_include_pad: int = 0, ceil_mode: int = 0, channels_last: int = 0,
                         auto_pad=None) -> np.ndarray:
    """x (N, C, *spatial), or with channels_last=1 (N, *spatial, C): the same arithmetic per channel (ORT's NHWC
    kernel sums each window in the same row-major order)."""
    qc.qtensor("x", x)
    if channels_last not in (0, 1):
        raise ValueError(f"channels_last must be 0 or 1, got {channels_last!r}")
    if channels_last:
        if x.ndim not in (3, 4, 5):
            raise ValueError(f"x must be 3-D, 4-D or 5-D (1 to 3 spatial dims), got shape {x.shape}")
        to_first = (0, x.ndim - 1, *range(1, x.ndim - 1))
        y = qlinear_average_pool(np.ascontiguousarray(x.transpose(to_first)), x_scale, x_zero_point, y_scale,
                                 y_zero_point, kernel_shape, strides, pads, count_include_pad, ceil_mode,
                                 auto_pad=auto_pad)
        return np.ascontiguousarray(y.transpose(0, *range(2, x.ndim), 1))
    if x.ndim not in (3, 4, 5):
        raise ValueError(f"x must be 3-D, 4-D or 5-D (1 to 3 spatial dims), got shape {x.shape}")
    if count_include_pad not in (0, 1):
        raise ValueError(f"count_include_pad must be 0 or 1, got {count_include_pad!r}")
    # auto_pad's pads may be negative (a window then starts past the head; windows are clipped to the input).
    k, s, p, _, out = pool_geometry(x.shape, kernel_shape, strides, pads, None, ceil_mode, auto_pad)
    xs, ys = qc.scale("x_scale", x_scale), qc.scale("y_scale", y_scale)
    xz = qc.zero_point("x_zero_point", x_zero_point, x.dtype)
    yz = qc.zero_point("y_zero_point", y_zero_point, x.dtype)
    nd, sp = len(k), x.shape[2:]
    if list(sp) == k and not any(p):
        return qlinear_global_average_pool(x, xs, xz, ys, yz)
    xf = xs * (x.astype(np.int32) - xz).astype(np.float32)
    # Per axis: window start (clipped) and end for every output position.
    starts, ends = [], []
    for i in range(nd):
        h0 = np.arange(out[i]) * s[i] - p[i]
        ends.append(np.minimum(h0 + k[i], sp[i]))
        starts.append(np.maximum(h0, 0))
    acc = np.zeros(x.shape[:2] + tuple(out), np.float32)
    for off in itertools.product(*[range(kk) for kk in k]):
        # Window element `off` in row-major order: position start + off if < end (else adds nothing).
        idx, valid = [], np.ones(tuple(out), bool)
        for i in range(nd):
            pos = starts[i] + off[i]
            ok = pos < ends[i]
            shp = [1] * nd
            shp[i] = -1
            valid = valid & ok.reshape(shp)
            idx.append(np.minimum(pos, sp[i] - 1).reshape(shp))
        vals = xf[(slice(None), slice(None), *idx)]
        acc = acc + np.where(valid, vals, np.float32(0))  # adding +0.0 leaves a float32 sum unchanged
    if count_include_pad:
        count = np.full(tuple(out), np.prod(k), np.int64)
    else:
        count = np.ones(tuple(out), np.int64)
        for i in range(nd):
            shp = [1] * nd
            shp[i] = -1
            count = count * (ends[i] - starts[i]).reshape(shp)
    with np.errstate(over="ignore", invalid="ignore"):
        v = (acc / count.astype(np.float32)) / ys + np.float32(yz)
    lo, hi = qc.QRANGE[x.dtype]
    return np.clip(cvtps_epi32(v), lo, hi).astype(x.dtype)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, x, memo):
    check_auto_pad(node)
    a = node.attrs
    return [qlinear_average_pool(*x[:5], kernel_shape=list(attr(node, "kernel_shape")), strides=a.get("strides"),
                                 pads=a.get("pads"), count_include_pad=int(a.get("count_include_pad", 0)),
                                 ceil_mode=int(a.get("ceil_mode", 0)), channels_last=int(a.get("channels_last", 0)),
                                 auto_pad=a.get("auto_pad"))]


DEFINITIONS = (OpDef("com.microsoft:QLinearAveragePool", _kernel, "pool", (5, (0, 1, 3)), y_params=(3, 4)),)
