"""ONNX ConvInteger: int32 y[n, m, ...] = sum (x - x_zero_point) * (w - w_zero_point[m]), equal to ONNX Runtime 1.31.

x (N, C, H, W) or (N, C, W) uint8/int8, w (M, C/group, kH, kW) (or (M, C/group, kW)) uint8/int8; x_zero_point a
scalar of x's type, w_zero_point a scalar or one per output channel of w's type (default 0). Padding contributes
zero real value (the padded input equals x_zero_point). Exact integer arithmetic, wrapping at int32 like an int32
accumulator; the summation itself is conv_accumulate of qlinear_conv.py (one definition of the convolution).
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from . import _qcheck as qc
from .qlinear_conv import conv_accumulate


def _zp(name: str, z, dtype: np.dtype, count: int) -> np.ndarray:
    if z is None:
        return np.zeros(count, np.int32)
    a = np.asarray(z)
    if a.dtype != dtype:
        raise TypeError(f"{name} must have dtype {dtype} (its tensor's), got {a.dtype}")
    if a.size == 1 and a.ndim <= 1:
        return np.full(count, int(a.reshape(())), np.int32)
    if a.ndim != 1 or a.size != count:
        raise ValueError(f"{name} must be a scalar or have {count} entries, got shape {a.shape}")
    return a.astype(np.int32)


def _pads_for(auto_pad: str, size, kernel, strides, dilations, pads):
    """Explicit (begins..., ends...) pads; auto_pad SAME_UPPER/SAME_LOWER/VALID computed as ONNX defines them."""
    r = len(size)
    if auto_pad in ("", "NOTSET"):
        return list(pads) if pads is not None else [0] * (2 * r)
    if auto_pad == "VALID":
        return [0] * (2 * r)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ValueError(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {auto_pad!r}")
    begins, ends = [], []
    for n, k, s, d in zip(size, kernel, strides, dilations, strict=True):
        total = max((-(-n // s) - 1) * s + (k - 1) * d + 1 - n, 0)
        small = total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else total - small)
        ends.append(total - begins[-1])
    return begins + ends


def conv_integer(x, w, x_zero_point=None, w_zero_point=None, *, strides=None, pads=None, dilations=None,
                 group: int = 1, auto_pad: str = "NOTSET") -> np.ndarray:
    qc.qtensor("x", x)
    qc.qtensor("w", w)
    if x.ndim not in (3, 4) or w.ndim != x.ndim:
        raise ValueError(f"x and w must both be 3-D or 4-D (1-D or 2-D convolution), got {x.shape} and {w.shape}")
    r = x.ndim - 2
    strides = qc.int_list("strides", strides if strides is not None else [1] * r, r, 1)
    dilations = qc.int_list("dilations", dilations if dilations is not None else [1] * r, r, 1)
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    p = qc.int_list("pads", _pads_for(auto_pad, x.shape[2:], w.shape[2:], strides, dilations, pads), 2 * r, 0)
    m, cg = w.shape[:2]
    if group < 1 or x.shape[1] != cg * group or m % group:
        raise ValueError(f"channels do not match: x has {x.shape[1]}, w {w.shape} with group {group}")
    xz = _zp("x_zero_point", x_zero_point, x.dtype, 1)[0]
    wz = _zp("w_zero_point", w_zero_point, w.dtype, m)
    if r == 1:  # a 1-D convolution is a 2-D one over a height of 1
        x, w = x[:, :, None, :], w[:, :, None, :]
        strides, dilations, p = [1, *strides], [1, *dilations], [0, p[0], 0, p[1]]
    size = [x.shape[2] + p[0] + p[2], x.shape[3] + p[1] + p[3]]
    span = [(w.shape[2] - 1) * dilations[0] + 1, (w.shape[3] - 1) * dilations[1] + 1]
    if size[0] < span[0] or size[1] < span[1]:
        raise ValueError(f"the kernel (extent {span}) is larger than the padded input {size}")
    out = (x.shape[0], m, (size[0] - span[0]) // strides[0] + 1, (size[1] - span[1]) // strides[1] + 1)
    spec = SimpleNamespace(x=x, w=w, x_zp=int(xz), w_zp=wz, bias=np.zeros(m, np.int64), strides=tuple(strides),
                           dilations=tuple(dilations), pads=tuple(p), group=group, out_shape=out)
    y = conv_accumulate(spec)
    return y[:, :, 0, :] if r == 1 else y
