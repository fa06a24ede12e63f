"""float32 Softmax and LogSoftmax with ONNX Runtime 1.31's CPU bits as its AVX-512F build computes them, in numpy:
the reference device's kernel and the specification cpu_fallback/src/ops/float_softmax.c follows.

Rows: opset 13 and later along `axis` (default -1; ORT transposes the axis last, which changes no bit); before
opset 13 the input read as 2-D, (prod(shape[:axis]), prod(shape[axis:])), axis default 1 (the importer marks
such nodes `_coerce_2d`). ORT (math/softmax.cc) hands the rows to MLAS's MlasComputeSoftmax, which on an x86-64
CPU with AVX-512F runs per row of D elements:

1. max: MLAS's ReduceMaximum kernel (AVX-512F): 16 lanes from the lowest float (-FLT_MAX, not -inf); with
   D >= 64 four accumulators over blocks of 64, merged as max(max(a0, a1), max(a2, a3)); then blocks of 16 into
   a0; the 16 lanes folded 16 -> 8 -> 4 -> 2 -> 1 (low half first); then the D % 16 tail one by one. Every max is
   vmaxps's `a > b ? a : b` (a NaN operand gives the second one).
2. e = exp(x - max) by MLAS's SumExp kernel (AVX-512F): v = max(-88.3762626647949, x + (-max)), m = round(v /
   ln 2) by the 1.5 * 2^23 trick, v -= m * ln2 in two fused steps, a degree-6 polynomial by fused
   multiply-adds (MlasExpConstants: poly_0 .. poly_4, then poly_56 twice), scaled by vscalefps (p * 2^m,
   rounded once). The e are summed in 16 lanes (lane = index % 16; the D % 16 tail masked), then lanes i and
   i + 8 added, then ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7)) (vhaddps twice, a last add).
3. Softmax: y = e * (1 / sum); LogSoftmax: y = (x + (-max)) - logf(sum), logf the C library's (std::log of a
   float; numpy's float32 log differs from glibc's in the last bit).

ORT on a CPU without AVX-512F (or whose OS does not enable its state) runs the FMA3 kernels instead: 8 lanes,
exp clamped at -88.376 and scaled by an integer exponent (so e below 2^-126 are 0 there), the max over 8 lanes.
vkinfer gives the AVX-512F bits on every machine, the fixed order its native graph follows too
(tests/ops/test_float_softmax.py measures ORT where it runs: equal bit for bit on an AVX-512F machine; on an
FMA3-only one the bound is pinned there). A row with a NaN or +inf is NaN throughout; a row of -inf too (every e
rounds to 0, so 0 * (1 / 0)), as in ORT."""

from __future__ import annotations

import math

import numpy as np

from ._float32 import fma32, horner32
from ._libm import logf

F32 = np.float32
OPS = ("Softmax", "LogSoftmax")
LANES = 16
LOWEST = F32(np.finfo(F32).min)
# MLAS's MlasExpConstants (compute.cpp).
LOWER_RANGE = F32(-103.9720840454)  # the AVX-512F kernel clamps at LowerRange, not LowerRangeSumExp
ROUNDING_BIAS = F32(12582912.0)  # 1.5 * 2^23
LOG2_RECIPROCAL = F32(1.44269504088896341)
LOG2_HIGH, LOG2_LOW = F32(-6.93145752e-1), F32(-1.42860677e-6)
POLY = [F32(float.fromhex(h)) for h in ("0x1.694000p-10", "0x1.125edcp-7", "0x1.555b5ap-5", "0x1.555450p-3",
                                        "0x1.fffff6p-2", "0x1.000000p+0", "0x1.000000p+0")]


def _mx(a, b):
    """vmaxps: a > b ? a : b (a NaN in either gives b)."""
    return np.where(a > b, a, b)


def _fold(init: np.ndarray, x: np.ndarray) -> np.ndarray:
    """acc = init, then acc = _mx(acc, x[:, k]) for k in order, for each (row, lane): x (rows, n, lanes), init
    (rows, lanes); without a Python step per k (one per 16 elements took minutes on rows of 2**24).
    The fold's value: a NaN is replaced by the next element (NaN > b is false), so only the elements after the
    last NaN count (NaN if it is the last); among them (init first) `a > b ? a : b` keeps the maximum, and of equal
    ones the later: only zeros' signs tell them apart, so the sign is the last zero's."""
    y = np.concatenate([init[:, None, :], x], axis=1)
    n = y.shape[1]
    nan = np.isnan(y)
    last_nan = np.where(nan.any(axis=1), n - 1 - np.argmax(nan[:, ::-1], axis=1), -1)  # (rows, lanes)
    live = np.arange(n)[None, :, None] > last_nan[:, None, :]
    m = np.where(live, y, F32(-np.inf)).max(axis=1)
    zero = live & (y == 0)
    last_zero = n - 1 - np.argmax(zero[:, ::-1], axis=1)
    signed = np.take_along_axis(y, last_zero[:, None, :], axis=1)[:, 0]
    m = np.where(m == 0, signed, m)
    return np.where(last_nan == n - 1, y[:, -1], m).astype(F32)  # that NaN itself (its payload)


def row_max(v: np.ndarray) -> np.ndarray:
    """MLAS's AVX-512F ReduceMaximum of each row of v (rows, D) (module docstring, step 1)."""
    rows, d = v.shape
    i = 0
    m = np.full(rows, LOWEST, F32)
    if d >= LANES:
        acc = np.full((rows, LANES), LOWEST, F32)
        if d >= 4 * LANES:
            i = d // (4 * LANES) * 4 * LANES
            blocks = v[:, :i].reshape(rows, i // (4 * LANES), 4, LANES)
            accs = [_fold(acc, blocks[:, :, k]) for k in range(4)]
            acc = _mx(_mx(accs[0], accs[1]), _mx(accs[2], accs[3]))
        if d - i >= LANES:
            j = i + (d - i) // LANES * LANES
            acc = _fold(acc, v[:, i:j].reshape(rows, (j - i) // LANES, LANES))
            i = j
        t = _mx(acc[:, :8], acc[:, 8:])
        t = _mx(t[:, :4], t[:, 4:])
        t = _mx(t[:, :2], t[:, 2:])
        m = _mx(t[:, 0], t[:, 1])
    for j in range(i, d):
        m = _mx(m, v[:, j])
    return m.astype(F32)


def mlas_sum_exp_element(v: np.ndarray) -> np.ndarray:
    """exp(v) for v = x + (-max) as MLAS's AVX-512F SumExp kernel computes it (module docstring, step 2)."""
    v = np.asarray(v, F32)
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.where(LOWER_RANGE > v, LOWER_RANGE, v)
        biased = fma32(v, LOG2_RECIPROCAL, ROUNDING_BIAS)
        m = biased - ROUNDING_BIAS
        r = fma32(m, LOG2_HIGH, v)
        r = fma32(m, LOG2_LOW, r)
        p = horner32(r, POLY)
        # vscalefps: p * 2^m with one rounding; m is an integer in [-150, 0] (or NaN), exact in float64.
        return (p.astype(np.float64) * np.exp2(m.astype(np.float64))).astype(F32)


def lane_sum(e: np.ndarray) -> np.ndarray:
    """The SumExp kernel's 16-lane accumulation of each row of e (rows, D) and its final reduction."""
    rows, d = e.shape
    full = d // LANES * LANES
    if full:
        # Each lane's running sum, left to right in float32: add.accumulate is strictly sequential (the loop it
        # replaced took 1M Python steps a row for an axis of 16M: a [16777216, 8] Softmax on axis 0 ran minutes).
        # Starting from the first block rather than 0 + it is the same bits: e >= 0 or NaN, never -0.
        acc = np.add.accumulate(e[:, :full].reshape(rows, full // LANES, LANES), axis=1, dtype=F32)[:, -1]
    else:
        acc = np.zeros((rows, LANES), F32)
    if d > full:
        acc[:, :d - full] = acc[:, :d - full] + e[:, full:]
    a = acc[:, 8:] + acc[:, :8]
    return ((a[:, 0] + a[:, 1]) + (a[:, 2] + a[:, 3])) + ((a[:, 4] + a[:, 5]) + (a[:, 6] + a[:, 7]))


# Elements of one block of rows: the float32 exp's emulation keeps about 15 float64 temporaries per element, so a
# [16777216, 8] input done at once took 5 GB (MemoryError under a 6 GiB address space); by blocks of 2**20
# elements, about 120 MB. Rows are independent: the same bits.
BLOCK = 1 << 20


def softmax_rows(v: np.ndarray, log: bool) -> np.ndarray:
    """ORT's float32 Softmax (log: LogSoftmax) of each row of v (rows, D)."""
    v = np.asarray(v, F32)
    rows, d = v.shape
    step = max(1, BLOCK // max(d, 1))
    if rows <= step:
        return _softmax_block(v, log)
    out = np.empty(v.shape, F32)
    for i in range(0, rows, step):
        out[i:i + step] = _softmax_block(v[i:i + step], log)
    return out


def _exp_by_columns(shifted: np.ndarray) -> np.ndarray:
    """mlas_sum_exp_element by blocks of columns when a block of rows is one long row (element-wise: the same
    bits): its float64 temporaries on one row of 2**24 took 2 GB."""
    rows, d = shifted.shape
    if rows * d <= BLOCK:
        return mlas_sum_exp_element(shifted)
    e = np.empty(shifted.shape, F32)
    step = max(1, BLOCK // rows)
    for j in range(0, d, step):
        e[:, j:j + step] = mlas_sum_exp_element(shifted[:, j:j + step])
    return e


def _softmax_block(v: np.ndarray, log: bool) -> np.ndarray:
    neg_max = -row_max(v)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        shifted = v + neg_max[:, None]
        e = _exp_by_columns(shifted)
        s = lane_sum(e)
        if log:
            return (shifted - logf(s)[:, None]).astype(F32)
        return (e * (F32(1) / s)[:, None]).astype(F32)


def _checked(x, axis: int, coerce_2d: bool, op: str) -> np.ndarray:
    """x as an array, refused unless float32 with `axis` in range (the kernel's checks, and its shape rule's)."""
    x = np.asarray(x)
    if x.dtype != F32:
        raise TypeError(f"{op}: the float kernel takes float32 input, got {x.dtype} (ONNX Runtime's CPU kernels "
                        "for other types are not reproduced)")
    r = x.ndim
    if r == 0 or not (-r <= axis <= (r if coerce_2d else r - 1)):
        raise ValueError(f"{op} axis {axis} is out of range for a rank-{r} input")
    return x


def softmax_float(x: np.ndarray, axis: int, log: bool = False, coerce_2d: bool = False) -> np.ndarray:
    """float32 Softmax/LogSoftmax of x over `axis` (opset 13 semantics), or over every axis from `axis` on
    (`coerce_2d`, opset < 13), with ORT's bits (module docstring)."""
    x = _checked(x, axis, coerce_2d, "LogSoftmax" if log else "Softmax")
    axis += x.ndim if axis < 0 else 0
    if x.size == 0:
        return x.copy()
    if coerce_2d:
        rows = softmax_rows(x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:])), log)
        return rows.reshape(x.shape)
    moved = np.moveaxis(x, axis, -1)
    rows = softmax_rows(moved.reshape(-1, x.shape[axis]), log)
    return np.moveaxis(rows.reshape(moved.shape), -1, axis)


def node_axis(node) -> tuple[int, bool]:
    """(axis, coerce_2d) of a Softmax/LogSoftmax node: opset < 13 (marked `_coerce_2d` by the importer, or
    `_opset` < 13) reads the input as 2-D from axis (default 1); opset 13 and later: axis default -1."""
    opset = node.attrs.get("_opset")
    legacy = bool(node.attrs.get("_coerce_2d", False)) or (opset is not None and int(opset) < 13)
    return int(node.attrs.get("axis", 1 if legacy else -1)), legacy


def shape(node, x: list) -> list:
    """The trace's shape rule: what the kernel checks (a float32 input, the axis in range), and its output's shape,
    without computing it (ORT's exact exp in numpy on a [16777216, 8] Softmax over axis 0 took minutes a trace)."""
    axis, legacy = node_axis(node)
    return [(_checked(x[0], axis, legacy, node.op.rpartition(":")[2]).shape, np.dtype(F32))]


def kernel(node, x: list, memo: dict) -> list:
    """A float32 Softmax/LogSoftmax node (the interpreter's kernel); other input types: TypeError."""
    axis, legacy = node_axis(node)
    return [softmax_float(x[0], axis, node.op.rpartition(":")[2] == "LogSoftmax", legacy)]
