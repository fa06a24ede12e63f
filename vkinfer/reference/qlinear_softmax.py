"""com.microsoft QLinearSoftmax (uint8/int8) as ONNX Runtime 1.31 computes it on x86-64 Linux
(contrib_ops/cpu/quantization/qlinear_softmax.cc, MLAS's qsoftmax.cpp), which is also what ORT fuses
DequantizeLinear -> Softmax -> QuantizeLinear into at ORT_ENABLE_ALL. Bit for bit: measured equal to ORT 1.31 on
tens of thousands of rows built to land on rounding ties (tests/numerics/test_quant_ops.py,
tests/ops/test_qlinear_softmax.py).

Rows: attribute `opset` < 13: the input read as 2-D, (prod(shape[:axis]), prod(shape[axis:])); opset >= 13:
along `axis`. The default axis is -1 for every opset (the contrib schema's default, which ORT's kernel reads
before its own opset-dependent fallback could apply; measured: opset 12 without `axis` runs over the last
axis). D = the row length. x_zero_point is ignored (it cancels out).

A 256-entry float32 table of scaled exponentials from x_scale and D (`softmax_table`), k = max(row) - x:
    shift  = max(0, double(logf(FLT_MAX / float32(D))) - 5) / double(x_scale)                   (double)
    e(k)   = float32(exp((double(255 - k) - 255 + shift) * double(x_scale)))                      (double exp)
logf is the C library's float32 log, not float32(log(double)) (they differ for D = 60594, ...) nor numpy's
(which differs for thousands of D): measured, only the C library's logf reproduces ORT at those D.
Per row, in float32 with round to nearest even:
    sum = e[0] + e[1] + ... sequentially in row order (ORT's scalar loop; MLAS's AVX2/AVX-512 kernels, whose
          lane-parallel sums and fused multiply-adds would differ, are not the ones 1.31 runs: measured)
    v   = round_half_even((e * m) / sum) with m = floor(1 / y_scale) (float32); a y_scale above 1 gives m = 0
    y   = min(v + y_zero_point, qmax)   (v >= 0: no lower clamp is needed; int8 saturates at 127, measured,
                                          where the source's int8 path would wrap)
ORT's result is undefined behaviour where e * m overflows float32, which happens only for rows with about
D * 148.4 < m (e.g. D = 1 at y_scale 1/256): refused with ValueError.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math

import numpy as np

from . import _qcheck as qc

_FLT_MAX = np.float32(np.finfo(np.float32).max)


@functools.cache
def _c_logf():
    """The C library's logf (ORT calls it), or None where no C math library loads."""
    for name in (ctypes.util.find_library("m"), ctypes.util.find_library("c"), "libm.so.6"):
        if not name:
            continue
        try:
            f = ctypes.CDLL(name).logf
        except (OSError, AttributeError):
            continue
        f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
        return f
    return None


def _logf(v: np.float32) -> float:
    """logf(v) as a float32 value, widened to double (C's float -> double)."""
    f = _c_logf()
    if f is None:  # no C library: the correctly rounded value, which glibc's logf gives for almost every D
        return float(np.float32(math.log(float(v))))
    return float(np.float32(f(float(v))))


def row_multiplier(y_scale) -> np.float32:
    """m = floor(1 / y_scale) in float32, as ORT computes it (0 for a y_scale above 1)."""
    return np.float32(math.floor(np.float32(1) / np.float32(y_scale)))


def softmax_table(x_scale, d: int) -> np.ndarray:
    """ORT's 256-entry table for row length d: float32, index 255 - (row max - x)."""
    if not isinstance(d, int | np.integer) or d < 1:
        raise ValueError(f"the row length must be a positive integer, got {d!r}")
    xs = float(np.float32(x_scale))
    shift = max(0.0, _logf(_FLT_MAX / np.float32(d)) - 5.0) / xs
    # math.exp is the C library's exp, which ORT calls too (numpy's vectorised exp may differ in the last bit).
    return np.array([math.exp(((float(i) - 255.0) + shift) * xs) for i in range(256)], np.float32)


def overflows(table: np.ndarray, y_mult: np.float32) -> bool:
    """Whether e * m overflows float32 for the table's largest entry (ORT's result is undefined there)."""
    with np.errstate(over="ignore"):
        return not bool(np.isfinite(table[-1] * y_mult))


def normalized_axis(rank: int, axis) -> int:
    """`axis` in [0, rank), else ValueError (TypeError for a non-integer)."""
    if not isinstance(axis, int | np.integer):
        raise TypeError(f"axis must be an integer, got {type(axis).__name__}")
    axis = int(axis)
    if not -rank <= axis < rank:
        raise ValueError(f"axis {axis} is out of range for a rank-{rank} input")
    return axis + rank if axis < 0 else axis


def _rows(x: np.ndarray, axis: int, opset: int) -> tuple[np.ndarray, tuple[int, ...] | None]:
    """x as (rows, D) and the transpose undoing the move of `axis` to the end (None: a plain reshape)."""
    r = x.ndim
    if opset < 13:
        return x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:])), None
    perm = list(range(r))
    perm[axis], perm[-1] = perm[-1], perm[axis]
    t = np.ascontiguousarray(x.transpose(perm))
    return t.reshape(-1, x.shape[axis]), tuple(perm)


def softmax_rows(rows: np.ndarray, table: np.ndarray, y_mult: np.float32, y_zp: int) -> np.ndarray:
    """ORT's per-row arithmetic on (rows, D) 8-bit values -> the same shape and type."""
    k = rows.max(axis=1, keepdims=True).astype(np.int32) - rows.astype(np.int32)
    e = table[255 - k]
    total = np.add.accumulate(e, axis=1, dtype=np.float32)[:, -1:]  # sequential float32 sum, as ORT's loop
    v = np.rint((e * y_mult) / total).astype(np.int64) + y_zp
    return np.minimum(v, qc.QRANGE[rows.dtype][1]).astype(rows.dtype)


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
    axis = normalized_axis(x.ndim, axis)
    rows, perm = _rows(x, axis, int(opset))
    if x.size == 0:
        return x.copy()
    d = rows.shape[1]
    y_mult = row_multiplier(ys)
    table = softmax_table(xs, d)
    if overflows(table, y_mult):
        raise ValueError(f"floor(1 / y_scale) = {y_mult:g} overflows ORT's float32 arithmetic for rows of "
                         f"{d} element(s) (its result is undefined there)")
    y = softmax_rows(rows, table, y_mult, yz)
    if perm is None:
        return y.reshape(x.shape)
    return np.ascontiguousarray(y.reshape([x.shape[p] for p in perm]).transpose(perm))
