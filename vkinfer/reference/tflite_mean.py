"""TFLite's 8-bit MEAN over any set of axes as ai-edge-litert's default interpreter runs it (XNNPACK's mean).

litert 2.3 hands every 8-bit MEAN to the XNNPACK delegate (the model's op list shows the DELEGATE node; its
builtin kernel, BUILTIN_WITHOUT_DEFAULT_DELEGATES, differs by a step on some values). XNNPACK's reduce
operator sums the raw 8-bit values of each output's n reduced elements in an integer accumulator, converts the
sum to float32 and requantizes in float32 with the zero points folded into one bias:

    m    = float32(float32(1 / n) * float32(x_scale / y_scale))        (the scale, then `scale *= 1/n`)
    bias = float32(y_zp - float32(float32(n * x_zp) * m))
    y    = clamp(round_half_even(float32(float32(sum) * m) + bias), qmin, qmax)

every step a float32 rounding (no fused multiply-add). Fitted and then checked bit for bit against litert on
random shapes, axes, scales and zero points (tests/ops/test_tflite_mean.py); the orders that differ by one
rounding (the zero points subtracted in integers, the ratio divided by n, the output zero point added after
rounding) each disagree with litert on some values.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import _qcheck as qc
from ._opdef import OpDef

f32 = np.float32


def mean_axes(axes, rank: int) -> tuple[int, ...]:
    """Sorted distinct axes in [0, rank) (negative axes count from the end); ValueError naming a bad one."""
    out = set()
    for a in np.asarray(axes, np.int64).ravel().tolist():
        if not -rank <= a < rank:
            raise ValueError(f"axis {a} is outside a rank-{rank} input")
        out.add(a % rank)
    return tuple(sorted(out))


def mean_params(n: int, x_scale, x_zp: int, y_scale, y_zp: int) -> tuple[np.float32, np.float32]:
    """(m, bias) of XNNPACK's 8-bit mean over n elements, float32 (see the module docstring)."""
    m = f32(f32(f32(1) / f32(n)) * f32(f32(x_scale) / f32(y_scale)))
    bias = f32(f32(y_zp) - f32(f32(n * x_zp) * m))
    return m, bias


class MeanGeometry(NamedTuple):
    """What a device lowering of vkinfer:TFLiteMean needs: input and output shapes, the reduced axes, keepdims,
    the count reduced, and XNNPACK's multiplier and bias (`mean_params`)."""

    shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    axes: tuple[int, ...]
    keep: bool
    n: int
    m: np.float32
    bias: np.float32


def mean_lowering(ctx, node, max_rank: int) -> MeanGeometry | None:
    """The node's MeanGeometry for a device lowering (a model/lowering.py context), or None where no device form
    applies (non-constant or bad parameters, which the interpreter's kernel reports; a rank outside 1..max_rank;
    sums that could pass int32; an output shape other than the attributes give)."""
    ins, x, y = node.inputs, node.inputs[0], node.outputs[0]
    shape = tuple(int(d) for d in ctx.shape(x))
    dt = ctx.dtype(x)
    if (not ctx.quantized(x, y) or ctx.dtype(y) != dt or len(ins) < 5 or not all(ctx.const(i) for i in ins[1:5])
            or not 1 <= len(shape) <= max_rank):
        return None
    c = ctx.g.consts
    try:
        axes = mean_axes(node.attrs.get("axes", ()), len(shape))
        xs, ys = qc.scale("x_scale", c[ins[1]]), qc.scale("y_scale", c[ins[3]])
        xz, yz = qc.zero_point("x_zero_point", c[ins[2]], dt), qc.zero_point("y_zero_point", c[ins[4]], dt)
    except ValueError:
        return None
    n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    if n < 1 or n * 255 >= 2 ** 31:
        return None
    keep = bool(node.attrs.get("keepdims", 1))
    y_shape = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else tuple(
        d for i, d in enumerate(shape) if i not in axes)
    if tuple(ctx.shape(y)) != y_shape:
        return None
    with np.errstate(all="ignore"):
        m, bias = mean_params(n, xs, xz, ys, yz)
    if not (np.isfinite(m) and np.isfinite(bias)):
        return None
    return MeanGeometry(shape, y_shape, axes, keep, n, m, bias)


def tflite_mean(x, x_scale, x_zp, y_scale, y_zp, axes, keepdims: bool = True) -> np.ndarray:
    """MEAN of 8-bit `x` over `axes` (any subset; empty: every element kept, n = 1), y in x's dtype."""
    qc.qtensor("x", x)
    xs, ys = qc.scale("x_scale", x_scale), qc.scale("y_scale", y_scale)
    xz, yz = qc.zero_point("x_zero_point", x_zp, x.dtype), qc.zero_point("y_zero_point", y_zp, x.dtype)
    ax = mean_axes(axes, x.ndim)
    n = int(np.prod([x.shape[a] for a in ax], dtype=np.int64))
    if n < 1:
        raise ValueError(f"MEAN over axes {list(ax)} of shape {list(x.shape)} has no elements")
    if n * 255 >= 2 ** 31:
        raise ValueError(f"MEAN over {n} elements overflows XNNPACK's 32-bit accumulator")
    m, bias = mean_params(n, xs, xz, ys, yz)
    s = x.astype(np.int64).sum(axis=ax, keepdims=bool(keepdims)).astype(np.int32)
    v = (s.astype(f32) * m).astype(f32) + bias
    qmin, qmax = qc.QRANGE[x.dtype]
    return np.clip(np.rint(v), qmin, qmax).astype(x.dtype)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, x, memo):
    """Inputs x, x_scale, x_zero_point, y_scale, y_zero_point; attrs axes, keepdims."""
    a = node.attrs
    return [tflite_mean(x[0], x[1], x[2], x[3], x[4], a.get("axes", ()), bool(a.get("keepdims", 1)))]


DEFINITIONS = (OpDef("vkinfer:TFLiteMean", _kernel, "reduce", (5, (0, 1, 2, 3, 4)), y_params=(3, 4),
                     x_slots=(0,)),)
