"""Pool window geometry as ORT's PoolAttributes computes it (auto_pad resolved by vkinfer/reference/_auto_pad.py)."""

from __future__ import annotations

from . import _auto_pad
from . import _qcheck as qc


def pool_geometry(x_shape, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad=None):
    """Validated (kernel, strides, pads, dilations, output spatial sizes). With auto_pad VALID or SAME_*, the pads
    are ORT's (they may be negative: window o starts at o * stride - pads[i] and is clipped to the input)."""
    nd = len(x_shape) - 2
    if nd < 1:
        raise ValueError(f"x must have at least 3 dims, got shape {tuple(x_shape)}")
    k = qc.int_list("kernel_shape", kernel_shape, nd, 1)
    s = qc.int_list("strides", [1] * nd if strides is None else strides, nd, 1)
    d = qc.int_list("dilations", [1] * nd if dilations is None else dilations, nd, 1)
    auto = _auto_pad.mode(auto_pad) != "NOTSET"
    if auto:
        p = _auto_pad.pads(auto_pad, x_shape[2:], k, s, d, None, pool=True)
    else:
        p = qc.int_list("pads", [0] * (2 * nd) if pads is None else pads, 2 * nd, 0)
    if ceil_mode not in (0, 1):
        raise ValueError(f"ceil_mode must be 0 or 1, got {ceil_mode!r}")
    out = []
    for i in range(nd):
        if not auto and (p[i] >= k[i] or p[i + nd] >= k[i]):
            raise ValueError(f"pads {p} must be smaller than kernel_shape {k}")
        span = x_shape[2 + i] + p[i] + p[i + nd] - d[i] * (k[i] - 1) - 1
        if span < 0:
            raise ValueError(f"kernel_shape {k} does not fit the padded input {tuple(x_shape)}")
        o = (-(-span // s[i]) if ceil_mode else span // s[i]) + 1
        if ceil_mode and (o - 1) * s[i] >= x_shape[2 + i] + p[i]:
            o -= 1  # the last window must start inside the input or the head padding
        out.append(o)
    return k, s, p, d, out
