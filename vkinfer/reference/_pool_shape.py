"""Pool window geometry as ORT's PoolAttributes computes it (auto_pad resolved by vkinfer/reference/_auto_pad.py),
and the work limit of every pool (`check_work`)."""

from __future__ import annotations

import math

from ..errors import SizeLimitError
from . import _auto_pad
from . import _qcheck as qc

# Work limits (issue 26 item 1: never unbounded): a pool's window of more taps, or a pool reading more elements
# (outputs x taps) in all, is refused on every device. The references step over the taps of a window one numpy
# pass each (3 us a tap at the least: a 5000x5000 window took minutes for one output), and a pool past 2**36 reads
# is minutes of native work. The zoo's and the real models' largest pools: 13x13 windows, 15 M reads (a 4K 3x3
# pool of 64 channels: 1.2 G).
MAX_WINDOW_TAPS = 1 << 20
MAX_POOL_READS = 1 << 36


def check_work(x_shape, k, out) -> None:
    """SizeLimitError (a ValueError) where a pool of kernel `k` and output spatial sizes `out` over `x_shape` is past
    the work limits."""
    taps = math.prod(k)
    if taps > MAX_WINDOW_TAPS:
        raise SizeLimitError(f"kernel_shape {list(k)}: a window of {taps} taps, over the work limit of "
                             f"{MAX_WINDOW_TAPS} taps per window")
    reads = math.prod(x_shape[:2]) * math.prod(out) * taps
    if reads > MAX_POOL_READS:
        raise SizeLimitError(f"kernel_shape {list(k)} over {math.prod(x_shape[:2]) * math.prod(out)} outputs reads "
                             f"{reads} elements, over the work limit of {MAX_POOL_READS}")


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
    check_work(x_shape, k, out)
    return k, s, p, d, out
