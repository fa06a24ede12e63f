"""com.microsoft QLinearReduceMean (uint8/int8): the definition vkinfer uses.

ONNX Runtime 1.31 registers the op's schema but has no CPU kernel for it ("Could not find an implementation for
QLinearReduceMean(1)"), so there is no ORT result to match. vkinfer defines it with the arithmetic of ORT's
QLinearGlobalAveragePool (MLAS qlgavgpool.cpp), which is the same reduction over the spatial axes:
    acc = sum(x over the reduced axes) - x_zp * count                      exact int32
    m   = float32(x_scale / float32(y_scale * float32(count)))
    y   = clamp(round_half_even(float32(acc) * m), qmin - y_zp, qmax - y_zp) + y_zp
with ORT's limits on count (< 2**24) and m ([2**-32, 256)), ValueError outside them. So QLinearReduceMean over
axes (2, 3) with keepdims=1 equals ORT's QLinearGlobalAveragePool bit for bit (tests/numerics/test_quant_ops.py checks
it). Attributes as in the contrib schema: `axes` (negative values count from the end; empty: all axes) and
`keepdims` (0 or 1).
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from .qlinear_global_average_pool import global_pool_multiplier
from .requant import requantize


def reduce_axes(axes, rank: int) -> tuple[int, ...]:
    """Sorted non-negative axes, ValueError on an out-of-range or repeated axis."""
    try:
        ax = [int(a) for a in axes]
    except TypeError:
        raise TypeError(f"axes must be a sequence of ints, got {type(axes).__name__}") from None
    if not ax:
        return tuple(range(rank))
    if any(not -rank <= a < rank for a in ax):
        raise ValueError(f"axes {ax} out of range for a rank-{rank} input")
    ax = [a % rank for a in ax]
    if len(set(ax)) != len(ax):
        raise ValueError(f"axes {ax} repeat an axis")
    return tuple(sorted(ax))


def qlinear_reduce_mean(x, x_scale, x_zero_point, y_scale, y_zero_point, axes, keepdims: int = 1) -> np.ndarray:
    """Mean of uint8/int8 x over `axes`, requantized to (y_scale, y_zero_point) in x's type."""
    qc.qtensor("x", x)
    if keepdims not in (0, 1):
        raise ValueError(f"keepdims must be 0 or 1, got {keepdims!r}")
    ax = reduce_axes(axes, x.ndim)
    xs, ys = qc.scale("x_scale", x_scale), qc.scale("y_scale", y_scale)
    xz = 0 if x_zero_point is None else qc.zero_point("x_zero_point", x_zero_point, x.dtype)
    yz = 0 if y_zero_point is None else qc.zero_point("y_zero_point", y_zero_point, x.dtype)
    count = int(np.prod([x.shape[a] for a in ax], dtype=np.int64))
    if count == 0:
        raise ValueError(f"the reduced axes {list(ax)} of x {list(x.shape)} are empty")
    m = global_pool_multiplier(xs, ys, count)
    acc = (x.astype(np.int64).sum(axis=ax, keepdims=bool(keepdims)) - xz * count).astype(np.int32)
    lo, hi = qc.QRANGE[x.dtype]
    return requantize(acc, m, yz, lo, hi).astype(x.dtype)
