"""com.microsoft QLinearSoftmax (uint8/int8) as ONNX Runtime 1.31 computes it
(contrib_ops/cpu/quantization/qlinear_softmax.cc), which is also what ORT fuses DequantizeLinear -> Softmax ->
QuantizeLinear into at ORT_ENABLE_ALL.

Rows: attribute `opset` < 13: the input read as 2-D, (prod(shape[:axis]), prod(shape[axis:])); opset >= 13:
along `axis`. The default axis is -1 for every opset (the contrib schema's default, which ORT's kernel reads
before its own opset-dependent fallback could apply; measured: opset 12 without `axis` runs over the last
axis). D = the row length. x_zero_point is ignored (it cancels out).
A 256-entry float32 table of scaled exponentials from x_scale and D:
    shift    = max(0, log(double(float32(FLT_MAX / float32(D)))) - 5) / x_scale         (double)
    table[i] = float32(exp(float32((float32(i - 255) + float32(shift)) * x_scale)))   i = 0..255
with i = 255 - (max(row) - x). ORT's source writes the exponent's argument in double; the shipped 1.31 binary
evidently rounds it to float32 (fitted on 500 random tables: with a double argument 3 in 300 rows differ, by
up to 1e-5 relative, which moves results near a rounding tie).
Per row: k = max(row) - x (0..255), e = table[255 - k];
    sum = e[0] + e[1] + ... in float32, sequentially in row order
    v   = round_half_even(float32(e * float32(floor(1 / y_scale))) / sum)        float32, as an integer
    y   = min(v + y_zero_point, qmax)                                 (v >= 0: no lower clamp is needed)
Exactness: measured against ORT 1.31 on random rows, equal except in about 1 row in 200, by one step, and only
where the quotient lies on a .5 tie (ORT's float32 sum then differs from this one by an ulp; the order of its
sum could not be recovered from the binary). tests/numerics/test_quant_ops.py pins that bound.
y_scale enters only as floor(1 / y_scale): a y_scale above 1 gives 0 everywhere (ORT's arithmetic).
ORT's result is undefined behaviour where e * floor(1 / y_scale) overflows float32, which happens only for
rows with about D * 148.4 < floor(1 / y_scale) (e.g. D = 1 at y_scale 1/256): refused with ValueError.
"""

from __future__ import annotations

import math

import numpy as np

from . import _qcheck as qc

_FLT_MAX = np.float32(np.finfo(np.float32).max)


def softmax_table(x_scale: np.float32, d: int) -> np.ndarray:
    """ORT's 256-entry table for row length d: float32, index 255 - (row max - x)."""
    shift = np.float32(max(0.0, math.log(float(_FLT_MAX / np.float32(d))) - 5.0) / float(x_scale))
    arg = (np.arange(-255, 1, dtype=np.float32) + shift) * np.float32(x_scale)  # float32 throughout
    # math.exp is the C library's exp, which ORT calls too (numpy's vectorised exp may differ in the last bit).
    return np.array([math.exp(float(a)) for a in arg], np.float32)


def _rows(x: np.ndarray, axis: int, opset: int) -> tuple[np.ndarray, tuple[int, ...] | None]:
    """x as (rows, D) and the transpose undoing the move of `axis` to the end (None: a plain reshape)."""
    r = x.ndim
    if not -r <= axis < r:
        raise ValueError(f"axis {axis} is out of range for a rank-{r} input")
    axis += r if axis < 0 else 0
    if opset < 13:
        return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:])), None
    perm = list(range(r))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    t = np.ascontiguousarray(x.transpose(perm))
    return t.reshape(-1, x.shape[axis]), tuple(perm)


def qlinear_softmax(x, x_scale, x_zero_point, y_scale, y_zero_point, axis: int = -1, opset: int = 13) -> np.ndarray:
    """x uint8/int8 of rank >= 1 -> the same type and shape."""
    qc.qtensor("x", x)
    if x.ndim < 1:
        raise ValueError("x must have at least one dimension")
    if not isinstance(opset, int | np.integer) or opset < 1:
        raise ValueError(f"opset must be a positive integer, got {opset!r}")
    xs, ys = qc.scale("x_scale", x_scale), qc.scale("y_scale", y_scale)
    if x_zero_point is not None:
        qc.zero_point("x_zero_point", x_zero_point, x.dtype)
    yz = 0 if y_zero_point is None else qc.zero_point("y_zero_point", y_zero_point, x.dtype)
    if not isinstance(axis, int | np.integer):
        raise TypeError(f"axis must be an integer, got {type(axis).__name__}")
    axis = int(axis)
    rows, perm = _rows(x, axis, int(opset))
    if x.size == 0:
        return x.copy()
    d = rows.shape[1]
    y_mult = np.float32(math.floor(np.float32(1) / ys))
    table = softmax_table(xs, d)
    with np.errstate(over="ignore"):
        if not np.isfinite(table[-1] * y_mult):  # table[-1] is the largest entry
            raise ValueError(f"floor(1 / y_scale) = {y_mult:g} overflows ORT's float32 arithmetic for rows of "
                             f"{d} element(s) (its result is undefined there)")
    k = rows.max(axis=1, keepdims=True).astype(np.int32) - rows.astype(np.int32)
    e = table[255 - k]
    total = np.add.accumulate(e, axis=1, dtype=np.float32)[:, -1:]  # sequential float32 sum, as ORT's loop
    v = np.rint((e * y_mult) / total).astype(np.int64) + yz
    y = np.minimum(v, qc.QRANGE[x.dtype][1]).astype(x.dtype)
    if perm is None:
        return y.reshape(x.shape)
    return np.ascontiguousarray(y.reshape([x.shape[p] for p in perm]).transpose(perm))
