"""The native graph's pool and quantize operators (cpu_fallback/src/ops/maxpool.c, qgap.c, qavgpool.c,
tflite_avgpool.c, quantize.c, dequantize.c, tflite_softmax.c) against the numpy references, bit for bit: each test
builds a one-operator NativeGraph whose input and output are external buffers, moves data NCHW <-> NHWC and int8 <->
canonical bytes (XOR 0x80) here, and compares.

Each case runs on 1 thread and on the default count; the larger cases pass the operators' threshold for the
thread pool, so both the serial and the parallel paths are compared.

The operator list (cpu_fallback/include/vkinfer_graph_ops.def): the ctypes signatures the package reads from the
library's table equal the C prototypes the compiler sees, and each listed operator is its file ops/<op>.c."""

from __future__ import annotations

import ctypes
import itertools
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from vkinfer.cpu import graph as cpu_graph
from vkinfer.cpu import lib
from vkinfer.cpu.graph import NativeGraph, Ref
from vkinfer.reference._pool_shape import pool_geometry
from vkinfer.reference.dequantize_linear import dequantize_linear
from vkinfer.reference.max_pool import max_pool
from vkinfer.reference.qlinear_average_pool import qlinear_average_pool
from vkinfer.reference.qlinear_global_average_pool import qlinear_global_average_pool
from vkinfer.reference.quantize_linear import quantize_linear
from vkinfer.reference.tflite_average_pool import tflite_average_pool
from vkinfer.reference.tflite_quantize import tflite_quantize
from vkinfer.reference.tflite_softmax import softmax_table, tflite_softmax

SETTINGS = settings(max_examples=50, deadline=None)


def f32s(lo: float, hi: float):
    """float32 values in [lo, hi] (hypothesis wants float32-exact bounds)."""
    return st.floats(float(np.float32(lo)), float(np.float32(hi)), width=32)
DTYPES = (np.uint8, np.int8)
QR = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def canon(a: np.ndarray) -> np.ndarray:
    """int8/uint8 -> canonical bytes (a C-contiguous copy)."""
    a = np.ascontiguousarray(a)
    return a.view(np.uint8) ^ np.uint8(0x80) if a.dtype == np.int8 else a.copy()


def uncanon(b: np.ndarray, dtype) -> np.ndarray:
    return (b ^ np.uint8(0x80)).view(np.int8) if np.dtype(dtype) == np.int8 else b


def nhwc(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 2, 3, 1))


def run_op(op: str, args: list, x: np.ndarray, y: np.ndarray, threads: int = 0) -> np.ndarray:
    """One operator over external buffers 0 (x) and 1 (y); y is filled in place and returned."""
    g = NativeGraph(0, [x.nbytes, y.nbytes])
    g.add(op, *args, Ref(1, 0, x.nbytes), Ref(2, 0, y.nbytes))
    assert g.ops()[0].split(":")[0] == op
    g.run([x, y], threads)
    return y


def run_both(op: str, args: list, x: np.ndarray, y_like: np.ndarray) -> np.ndarray:
    """Runs on 1 thread and on the default count; both must agree (the caller compares one with the reference)."""
    y1 = run_op(op, args, x, np.full_like(y_like, 0xA5 if y_like.dtype == np.uint8 else np.nan))
    y2 = run_op(op, args, x, np.full_like(y_like, 0x5A if y_like.dtype == np.uint8 else np.nan), threads=0)
    assert y1.tobytes() == y2.tobytes(), f"{op}: 1 thread and the default count differ"
    return y1


def rand_q(rng, shape, dtype) -> np.ndarray:
    lo, hi = QR[np.dtype(dtype)]
    return rng.integers(lo, hi + 1, size=shape, dtype=np.int64).astype(dtype)


def assert_same(got: np.ndarray, ref: np.ndarray, what: str) -> None:
    assert got.dtype == ref.dtype and got.shape == ref.shape, (what, got.dtype, got.shape, ref.dtype, ref.shape)
    if got.dtype == np.float32:
        bad = got.view(np.uint32) != ref.view(np.uint32)
    else:
        bad = got != ref
    if bad.any():
        i = tuple(int(v[0]) for v in np.nonzero(bad))
        pytest.fail(f"{what}: {int(bad.sum())} of {bad.size} values differ, first at {i}: {got[i]!r} != {ref[i]!r}")


# ---- pooling ----

def native_pool(op: str, x: np.ndarray, out_hw, extra_args: list, dtype) -> np.ndarray:
    n, c, h, w = x.shape
    oh, ow = out_hw
    y = run_both(op, [n, h, w, c, oh, ow, *extra_args], canon(nhwc(x)), np.zeros(n * oh * ow * c, np.uint8))
    return uncanon(y, dtype).reshape(n, oh, ow, c).transpose(0, 3, 1, 2)


def check_maxpool(x, k, s, pads, d, ceil_mode):
    _, _, p, _, out = pool_geometry(x.shape, k, s, pads, d, ceil_mode)
    ref = max_pool(x, k, s, pads, d, ceil_mode)
    got = native_pool("maxpool", x, out, [k[0], k[1], s[0], s[1], d[0], d[1], p[0], p[1]], x.dtype)
    assert_same(got, ref, f"maxpool {x.shape} {x.dtype} k={k} s={s} pads={pads} d={d} ceil={ceil_mode}")


MAXPOOL_TABLE = [  # shape NCHW, kernel, strides, pads (t, l, b, r), dilations, ceil_mode
    ((1, 1, 5, 5), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), 1),
    ((2, 3, 7, 9), (3, 3), (2, 1), (1, 1, 1, 1), (1, 1), 0),
    ((1, 17, 6, 5), (3, 2), (1, 2), (2, 1, 2, 0), (1, 1), 0),
    ((1, 3, 9, 9), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 0),
    ((1, 5, 10, 7), (2, 3), (3, 2), (1, 0, 1, 2), (3, 2), 1),
    ((1, 17, 7, 7), (7, 7), (1, 1), (0, 0, 0, 0), (1, 1), 0),
    ((2, 33, 4, 6), (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), 0),
    ((1, 1, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 0),
    ((1, 64, 56, 56), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 0),  # past the threads threshold
    ((1, 3, 1, 1), (2, 1), (1, 1), (1, 0, 1, 0), (2, 1), 0),   # taps -1 and 1 of 1 row: no pixel, qmin
    ((2, 5, 3, 2), (2, 2), (1, 2), (1, 1, 1, 1), (3, 3), 1),   # empty windows among full ones
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", MAXPOOL_TABLE, ids=lambda c: "x".join(map(str, c[0])))
def test_maxpool_table(case, dtype):
    shape, k, s, pads, d, ceil_mode = case
    x = rand_q(np.random.default_rng(1), shape, dtype)
    x.flat[::7] = QR[np.dtype(dtype)][0]  # the type's minimum, where a pad value would show
    check_maxpool(x, k, s, pads, d, ceil_mode)


@st.composite
def pool_params(draw, dilation=True, ceil=True):
    n, c = draw(st.integers(1, 2)), draw(st.sampled_from([1, 2, 3, 5, 16, 17, 35]))
    h, w = draw(st.integers(1, 11)), draw(st.integers(1, 11))
    k = [draw(st.integers(1, 4)), draw(st.integers(1, 4))]
    s = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    d = [draw(st.integers(1, 3)), draw(st.integers(1, 3))] if dilation else [1, 1]
    p = [draw(st.integers(0, k[i % 2] - 1)) for i in range(4)]
    cm = draw(st.integers(0, 1)) if ceil else 0
    shape = (n, c, h, w)
    try:
        pool_geometry(shape, k, s, p, d, cm)
    except ValueError:
        assume(False)
    return shape, k, s, p, d, cm, draw(st.sampled_from(DTYPES)), draw(st.integers(0, 2**31))


@SETTINGS
@given(pool_params())
def test_maxpool_hypothesis(params):
    shape, k, s, p, d, cm, dtype, seed = params
    check_maxpool(rand_q(np.random.default_rng(seed), shape, dtype), k, s, p, d, cm)


def check_qgap(x, xs, xz, ys, yz):
    n, c, h, w = x.shape
    ref = qlinear_global_average_pool(x, np.float32(xs), xz, np.float32(ys), yz).reshape(n, c)
    y = run_both("qgap", [n, h * w, c, int(x.dtype == np.int8), xs, xz, ys, yz], canon(nhwc(x)),
                 np.zeros(n * c, np.uint8))
    assert_same(uncanon(y, x.dtype).reshape(n, c), ref, f"qgap {x.shape} {x.dtype} xs={xs} xz={xz} ys={ys} yz={yz}")


QGAP_TABLE = [  # shape NCHW, x_scale, x_zp (uint8; int8 shifts by -128), y_scale, y_zp
    ((1, 1280, 7, 7), 0.0235, 0, 0.0117, 0),
    ((1, 3, 2, 2), 2.0, 0, 1.0, 0),           # multiplier 0.5: ties on odd sums
    ((2, 17, 3, 5), 0.5, 255, 1.0, 255),     # zero points at the range ends
    ((1, 1, 1, 1), 255.0, 0, 1.0, 128),        # multiplier just under ORT's 256
    ((3, 5, 1, 1), 0.2, 128, 0.001, 0),        # multiplier 200: saturating
    ((2, 1280, 8, 8), 0.1, 100, 0.07, 3),       # past the threads threshold
    ((1, 1, 1, 12582912), 1.0, 0, 1.0, 0),     # 255 * 12582912 > 2^31: the int32 sum wraps as ORT's does
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", QGAP_TABLE, ids=lambda c: "x".join(map(str, c[0])))
def test_qgap_table(case, dtype):
    shape, xs, xz, ys, yz = case
    if dtype == np.int8:
        xz, yz = xz - 128, yz - 128
    rng = np.random.default_rng(2)
    x = rand_q(rng, shape, dtype) if shape[-1] < 1000 else np.full(shape, QR[np.dtype(dtype)][1], dtype)
    check_qgap(x, xs, xz, ys, yz)


@SETTINGS
@given(st.integers(1, 2), st.integers(1, 40), st.integers(1, 6), st.integers(1, 6), st.sampled_from(DTYPES),
       f32s(1e-3, 10), f32s(1e-3, 10), st.integers(0, 255), st.integers(0, 255),
       st.integers(0, 2**31))
def test_qgap_hypothesis(n, c, h, w, dtype, xs, ys, xz, yz, seed):
    off = 128 if dtype == np.int8 else 0
    m = np.float32(xs) / (np.float32(ys) * np.float32(h * w))
    if not np.float32(2.0**-32) <= m < np.float32(256):
        return
    check_qgap(rand_q(np.random.default_rng(seed), (n, c, h, w), dtype), xs, xz - off, ys, yz - off)


def check_qavgpool(x, xs, xz, ys, yz, k, s, pads, cip, cm):
    _, _, p, _, out = pool_geometry(x.shape, k, s, pads, None, cm)
    with np.errstate(over="ignore"):
        ref = qlinear_average_pool(x, np.float32(xs), xz, np.float32(ys), yz, k, s, pads, cip, cm)
    args = [k[0], k[1], s[0], s[1], p[0], p[1], p[2], p[3], cip, int(x.dtype == np.int8), xs, xz, ys, yz]
    got = native_pool("qavgpool", x, out, args, x.dtype)
    assert_same(got, ref, f"qavgpool {x.shape} {x.dtype} k={k} s={s} pads={pads} cip={cip} ceil={cm} "
                          f"xs={xs} xz={xz} ys={ys} yz={yz}")


QAVG_TABLE = [  # shape, kernel, strides, pads, count_include_pad, ceil_mode, x_scale, x_zp, y_scale, y_zp
    ((1, 3, 5, 5), (2, 2), (2, 2), (0, 0, 0, 0), 0, 1, 0.5, 0, 0.5, 0),      # ceil: clipped windows, ties
    ((2, 17, 7, 6), (3, 3), (2, 2), (1, 1, 1, 1), 0, 0, 0.02, 128, 0.03, 128),
    ((2, 17, 7, 6), (3, 3), (2, 2), (1, 1, 1, 1), 1, 0, 0.02, 128, 0.03, 128),
    ((1, 1, 9, 4), (3, 2), (1, 1), (2, 1, 0, 1), 1, 1, 1.0, 255, 1.0, 0),
    ((1, 5, 6, 6), (6, 6), (3, 1), (0, 0, 0, 0), 0, 0, 0.1, 7, 0.05, 250),  # kernel = image: ORT's global path
    ((1, 5, 6, 6), (6, 6), (2, 2), (0, 0, 1, 1), 0, 0, 0.1, 7, 0.05, 250),  # 1x1 output, pads: the float path
    ((1, 4, 3, 3), (2, 2), (1, 1), (0, 0, 0, 0), 0, 0, 3e38, 0, 1e-3, 0),   # float32 overflow: inf -> qmin
    ((1, 4, 3, 3), (2, 2), (1, 1), (0, 0, 0, 0), 0, 0, 1e6, 0, 1e-6, 0),    # past int32: CVTPS2DQ -> qmin
    ((1, 32, 32, 32), (3, 3), (1, 1), (1, 1, 1, 1), 0, 0, 0.05, 10, 0.04, 20),  # past the threads threshold
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", QAVG_TABLE, ids=lambda c: "x".join(map(str, c[0])) + f"-k{c[1][0]}-cip{c[4]}")
def test_qavgpool_table(case, dtype):
    shape, k, s, pads, cip, cm, xs, xz, ys, yz = case
    if dtype == np.int8:
        xz, yz = xz - 128, yz - 128
    check_qavgpool(rand_q(np.random.default_rng(3), shape, dtype), xs, xz, ys, yz, k, s, pads, cip, cm)


@SETTINGS
@given(pool_params(dilation=False), st.integers(0, 1), f32s(1e-3, 10), f32s(1e-3, 10),
       st.integers(0, 255), st.integers(0, 255))
def test_qavgpool_hypothesis(params, cip, xs, ys, xz, yz):
    shape, k, s, p, _, cm, dtype, seed = params
    off = 128 if dtype == np.int8 else 0
    if list(shape[2:]) == k and not any(p):
        m = np.float32(xs) / (np.float32(ys) * np.float32(shape[2] * shape[3]))
        if not np.float32(2.0**-32) <= m < np.float32(256):
            return
    check_qavgpool(rand_q(np.random.default_rng(seed), shape, dtype), xs, xz - off, ys, yz - off, k, s, p, cip, cm)


def check_tflite_avgpool(x, k, s, pads, lo, hi):
    _, _, p, _, out = pool_geometry(x.shape, k, s, pads, None, 0)
    ref = tflite_average_pool(x, k, s, pads, lo, hi)
    args = [k[0], k[1], s[0], s[1], p[0], p[1], int(x.dtype == np.int8), lo, hi]
    got = native_pool("tflite_avgpool", x, out, args, x.dtype)
    assert_same(got, ref, f"tflite_avgpool {x.shape} {x.dtype} k={k} s={s} pads={pads} [{lo}, {hi}]")


TFAVG_TABLE = [  # shape, kernel, strides, pads, clamp (uint8; int8 shifts by -128)
    ((1, 3, 5, 5), (2, 2), (2, 2), (0, 0, 1, 1), (0, 255)),   # SAME: clipped windows, even counts (ties)
    ((2, 17, 7, 6), (3, 3), (2, 2), (1, 1, 1, 1), (0, 255)),
    ((1, 1, 9, 4), (3, 2), (1, 1), (1, 0, 1, 1), (10, 200)),  # fused activation bounds
    ((1, 5, 20, 20), (17, 18), (3, 2), (0, 0, 0, 0), (0, 255)),  # windows past 16 x 16
    ((1, 1, 255, 257), (255, 257), (1, 1), (0, 0, 0, 0), (0, 255)),  # count 65535: the float32 quotient
    ((1, 1, 257, 257), (257, 257), (1, 1), (0, 0, 0, 0), (0, 255)),  # count 66049: integer division
    ((1, 1024, 7, 7), (7, 7), (1, 1), (0, 0, 0, 0), (0, 255)),
    ((1, 32, 32, 32), (3, 3), (1, 1), (1, 1, 1, 1), (0, 255)),  # past the threads threshold
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", TFAVG_TABLE, ids=lambda c: "x".join(map(str, c[0])) + f"-k{c[1][0]}")
def test_tflite_avgpool_table(case, dtype):
    shape, k, s, pads, (lo, hi) = case
    if dtype == np.int8:
        lo, hi = lo - 128, hi - 128
    rng = np.random.default_rng(4)
    x = rand_q(rng, shape, dtype)
    if shape[2] > 200:  # near-tie sums: a constant plane with one value off by a few
        x[:] = rng.integers(-100, 100) if dtype == np.int8 else rng.integers(0, 255)
        x[0, 0, 3, :5] += 1
    check_tflite_avgpool(x, k, s, pads, lo, hi)


@SETTINGS
@given(pool_params(dilation=False, ceil=False), st.integers(0, 255), st.integers(0, 255))
def test_tflite_avgpool_hypothesis(params, a, b):
    shape, k, s, p, _, _, dtype, seed = params
    off = 128 if dtype == np.int8 else 0
    check_tflite_avgpool(rand_q(np.random.default_rng(seed), shape, dtype), k, s, p, min(a, b) - off,
                         max(a, b) - off)


# ---- quantize / dequantize ----

def special_floats(scale: float) -> np.ndarray:
    s = np.float32(scale)
    ties = (np.arange(-300, 300, dtype=np.float32) + np.float32(0.5)) * s  # exact ties when s is a power of 2
    edges = np.array([0.0, -0.0, np.inf, -np.inf, 3e38, -3e38, 1e-45, -1e-45, 126.5, 127.5, -128.5, 255.5,
                      -0.5, 0.5, 1.5, 2.5], np.float32)
    near = np.nextafter(ties, np.float32(np.inf))
    with np.errstate(over="ignore", under="ignore"):
        return np.concatenate([ties, near, edges, edges * s])


def ref_quantize(mode, x, scale, zp, dtype):
    z = np.array(zp, dtype).reshape(())
    if mode == 0:
        return quantize_linear(x, np.float32(scale), z)
    return tflite_quantize(x, np.float32(scale), z)


def native_quantize(mode, x, scale, zp, dtype, nchw):
    """x float32 NCHW (nchw) or any shape (elementwise); returns the logical output (NHWC when nchw)."""
    if nchw:
        n, c, h, w = x.shape
    else:
        n, c, h, w = 1, 1, 1, x.size
    y = run_both("quantize", [mode, n, c, h * w, int(nchw), scale, zp, int(dtype == np.int8)],
                 np.ascontiguousarray(x), np.zeros(x.size, np.uint8))
    y = uncanon(y, dtype)
    return y.reshape(n, h, w, c) if nchw else y.reshape(x.shape)


QUANT_PARAMS = [(1.0, 0), (0.5, 128), (0.1, 255), (0.0078125, 0), (3.7e-3, 17), (1e30, 0), (1e-40, 100)]


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale,zp", QUANT_PARAMS)
def test_quantize_edges(mode, dtype, scale, zp):
    if dtype == np.int8:
        zp -= 128
    x = special_floats(scale)
    with np.errstate(over="ignore"):
        no_recip = not np.isfinite(np.float32(1) / np.float32(scale))
    if mode == 1 and no_recip:
        # TFLite mode refuses a scale without a finite float32 reciprocal (0 * inf would be NaN).
        with pytest.raises(ValueError, match="quantize: scale .* reciprocal"):
            native_quantize(mode, x, scale, zp, dtype, False)
        return
    ref = ref_quantize(mode, x, scale, zp, dtype)
    assert_same(native_quantize(mode, x, scale, zp, dtype, False), ref, f"quantize mode {mode} {scale} {zp}")
    x4 = np.resize(x, (2, 3, 7, 11)).astype(np.float32)
    ref4 = nhwc(ref_quantize(mode, x4, scale, zp, dtype))
    assert_same(native_quantize(mode, x4, scale, zp, dtype, True), ref4, f"quantize nchw mode {mode}")


# c = 3 takes the RGB path: 16-pixel blocks while a pixel follows, byte stores for the rest (hw 1, 16, 17, ...).
NCHW_SHAPES = [(1, 3, 224, 224), (1, 1, 5, 3), (2, 17, 9, 9), (1, 70, 3, 5), (1, 3, 1, 1), (1, 3, 4, 4), (2, 3, 1, 17),
               (1, 3, 64, 65)]


@pytest.mark.parametrize("shape", NCHW_SHAPES)
@pytest.mark.parametrize("mode", [0, 1])
def test_quantize_nchw_shapes(shape, mode):
    rng = np.random.default_rng(5)
    x = rng.normal(0, 2, size=shape).astype(np.float32)
    for dtype, scale, zp in ((np.uint8, 0.0187, 114), (np.int8, 0.0213, -3)):
        ref = nhwc(ref_quantize(mode, x, scale, zp, dtype))
        assert_same(native_quantize(mode, x, scale, zp, dtype, True), ref, f"quantize {shape} mode {mode}")


def test_quantize_nan_gives_qmin():
    """The references refuse NaN; the operator gives qmin, as ORT's vectorised kernel does (documented)."""
    x = np.array([np.nan, 1.0, -np.nan] * 11, np.float32)
    for mode, dtype, zp in ((0, np.int8, -7), (1, np.int8, 3), (0, np.uint8, 9), (1, np.uint8, 250)):
        y = native_quantize(mode, x, 0.5, zp, dtype, False).astype(int)
        lo, hi = QR[np.dtype(dtype)]
        assert list(y[::3]) == [lo] * 11 and list(y[2::3]) == [lo] * 11 and list(y[1::3]) == [min(zp + 2, hi)] * 11


@pytest.mark.parametrize("shape, nchw", [((1, 3, 37, 41), True), ((2, 5, 9, 70), True), ((1, 1, 1, 40000), False),
                                         ((1, 1, 1, 3), False)])
@pytest.mark.parametrize("mode", [0, 1])
def test_quantize_refuses_nan_when_asked(shape, nchw, mode):
    """With VKI_QUANT_REFUSE_NAN (mode | 4: the session's quantize operators) a NaN anywhere, in every path (RGB
    planes, NCHW tiles, flat spans across work items, 1 thread and several) makes the run return VKI_ENAN (a
    ValueError saying NaN), and NaN-free inputs give the same bytes as without the flag; +-inf is not NaN."""
    from vkinfer.cpu.quantize_linear import REFUSE_NAN

    rng = np.random.default_rng(11)
    x = rng.normal(0, 2, size=shape).astype(np.float32)
    x.reshape(-1)[:: max(1, x.size // 7)] = np.inf
    x.reshape(-1)[1:: max(1, x.size // 5)] = -np.inf
    for dtype, zp in ((np.uint8, 114), (np.int8, -3)):
        plain = native_quantize(mode, x, 0.0187, zp, dtype, nchw)
        assert_same(native_quantize(mode | REFUSE_NAN, x, 0.0187, zp, dtype, nchw), plain, "refusing flag, no NaN")
    flat = x.reshape(-1)
    for pos in sorted({0, flat.size // 2, flat.size - 1, 16384 if flat.size > 16384 else 0}):
        y = x.copy()
        y.reshape(-1)[pos] = np.float32(np.nan) if pos % 2 else -np.float32(np.nan)
        for threads in (1, 0):
            n, c, h, w = shape if nchw else (1, 1, 1, y.size)
            with pytest.raises(ValueError, match="NaN"):
                run_op("quantize", [mode | REFUSE_NAN, n, c, h * w, int(nchw), 0.5, 0, 0], np.ascontiguousarray(y),
                       np.zeros(y.size, np.uint8), threads)


def native_quantize_packed(mode, x, scale, zp, dtype):
    """VKI_QUANT_PACKED: x float32 NCHW when 4-D, else rows of its last axis; the device layout's bytes."""
    from vkinfer.cpu.quantize_linear import PACKED
    from vkinfer.layout import packed_words

    if x.ndim == 4:
        n, c, h, w = x.shape
        n, c, hw, nchw = n, c, h * w, 1
    else:
        c = x.shape[-1] if x.ndim else 1
        n, hw, nchw = 1, x.size // c, 0
    return run_both("quantize", [mode | PACKED, n, c, hw, nchw, scale, zp, int(dtype == np.int8)],
                    np.ascontiguousarray(x), np.zeros(4 * packed_words(x.shape), np.uint8))


# c = 3 takes the RGB path (one word per pixel); c = 4, 8: no pad; the rest pad each row to whole words.
PACKED_SHAPES = [(1, 3, 224, 224), (1, 3, 1, 1), (1, 3, 4, 4), (2, 3, 1, 17), (1, 3, 64, 65), (1, 1, 5, 3),
                 (2, 17, 9, 9), (1, 70, 3, 5), (1, 4, 3, 3), (1, 8, 2, 7), (7, 3), (5, 1), (3, 70), (1, 40000),
                 (2, 9, 6), (100, 4)]


@pytest.mark.parametrize("shape", PACKED_SHAPES)
@pytest.mark.parametrize("mode", [0, 1])
def test_quantize_packed_is_the_device_layout_of_the_reference(shape, mode):
    """A CPU quantize feeding a Vulkan segment writes the device's packed layout (raw bytes, zero pad) in place
    of the canonical one: equal to vkinfer.layout.to_packed of the reference, pads zero, every path
    (RGB words, NCHW tiles, rows across work items), edge floats included."""
    from vkinfer.layout import to_packed

    rng = np.random.default_rng(7)
    x = rng.normal(0, 2, size=shape).astype(np.float32)
    flat = x.reshape(-1)
    edge = special_floats(0.0187)
    flat[: min(flat.size, edge.size)] = edge[: flat.size]
    rng.shuffle(flat)
    for dtype, scale, zp in ((np.uint8, 0.0187, 114), (np.int8, 0.0187, -3), (np.int8, 0.5, 127), (np.uint8, 2.0, 0)):
        ref = to_packed(ref_quantize(mode, x, scale, zp, dtype)).view(np.uint8).reshape(-1)
        assert_same(native_quantize_packed(mode, x, scale, zp, dtype), ref, f"packed {shape} mode {mode} {dtype}")


@pytest.mark.parametrize("shape", [(1, 3, 37, 41), (2, 5, 9, 70), (300, 70), (1, 40000)])
def test_quantize_packed_refuses_nan(shape):
    from vkinfer.cpu.quantize_linear import REFUSE_NAN

    x = np.random.default_rng(3).normal(0, 2, size=shape).astype(np.float32)
    plain = native_quantize_packed(0, x, 0.0187, 9, np.uint8)
    assert_same(native_quantize_packed(REFUSE_NAN, x, 0.0187, 9, np.uint8), plain, "refusing flag, no NaN")
    for pos in (0, x.size // 2, x.size - 1):
        y = x.copy()
        y.reshape(-1)[pos] = np.nan
        with pytest.raises(ValueError, match="NaN"):
            native_quantize_packed(REFUSE_NAN, y, 0.0187, 9, np.uint8)


@SETTINGS
@given(st.lists(st.floats(width=32, allow_nan=False), min_size=1, max_size=80), f32s(1e-6, 1e6),
       st.integers(0, 255), st.sampled_from(DTYPES), st.integers(0, 1))
def test_quantize_hypothesis(values, scale, zp, dtype, mode):
    x = np.array(values, np.float32)
    zp -= 128 if dtype == np.int8 else 0
    assert_same(native_quantize(mode, x, scale, zp, dtype, False), ref_quantize(mode, x, scale, zp, dtype),
                f"quantize mode {mode} scale {scale} zp {zp}")


def native_dequantize(xq, scale, zp, nchw):
    """xq NCHW (nchw: the native input is its NHWC form) or any shape; returns float32 in xq's shape."""
    if nchw:
        n, c, h, w = xq.shape
        src = canon(nhwc(xq))
    else:
        n, c, h, w = 1, 1, 1, xq.size
        src = canon(xq).reshape(-1)
    y = run_both("dequantize", [n, c, h * w, int(nchw), scale, zp, int(xq.dtype == np.int8)], src,
                 np.zeros(xq.size, np.float32))
    return y.reshape(xq.shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale,zp", [(1.0, 0), (0.1, 255), (3e38, 0), (1e-45, 128), (0.0235, 77)])
def test_dequantize(dtype, scale, zp):
    off = 128 if dtype == np.int8 else 0
    zp -= off
    every = (np.arange(256) - off).astype(dtype)
    with np.errstate(over="ignore"):
        ref = dequantize_linear(every, np.float32(scale), np.array(zp, dtype))
        assert_same(native_dequantize(every, scale, zp, False), ref, f"dequantize {scale} {zp}")
        for shape in [(1, 3, 5, 7), (2, 17, 9, 9), (1, 1000, 1, 1), (1, 70, 80, 3)]:  # the last: threads
            xq = rand_q(np.random.default_rng(6), shape, dtype)
            ref = dequantize_linear(xq, np.float32(scale), np.array(zp, dtype))
            assert_same(native_dequantize(xq, scale, zp, True), ref, f"dequantize nchw {shape}")


# ---- softmax ----

def check_softmax(x, xs, ys, yz, ydtype, beta=1.0):
    table = softmax_table(float(np.float32(xs)), float(np.float32(beta)))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        ref = tflite_softmax(x, np.float32(xs), np.float32(ys), np.array(yz, ydtype), beta=beta)
    cols = x.shape[-1]
    rows = x.size // cols
    y = run_both("tflite_softmax", [rows, cols, np.ascontiguousarray(table, np.float32), int(x.dtype == np.int8), ys,
                                    yz, int(ydtype == np.int8)], canon(x).reshape(-1), np.zeros(x.size, np.uint8))
    assert_same(uncanon(y, ydtype).reshape(x.shape), ref,
                f"tflite_softmax {x.shape} {x.dtype}->{np.dtype(ydtype)} xs={xs} ys={ys} yz={yz} beta={beta}")


SOFTMAX_TABLE = [  # shape, x_scale, y_scale, y_zp (uint8 output; int8 shifts by -128), beta
    ((1, 1000), 0.0625, 1 / 256, 0, 1.0),
    ((1, 1), 0.1, 1 / 256, 0, 1.0),
    ((5, 1), 0.1, 1 / 256, 0, 1.0),
    ((3, 17), 0.5, 1 / 256, 0, 1.0),
    ((2, 3, 1001), 0.02, 1 / 256, 0, 1.0),
    ((4, 10), 0.25, 0.01, 100, 0.7),
    ((4, 10), 1.0, 0.003, 255, 2.0),
    ((2, 33), 0.1, 1e-40, 0, 1.0),   # inv infinite: NaN and inf products give qmin
    ((2, 33), 0.1, 1e-40, 200, 1.0),  # the same with y_zp >= 0 in both types (no int64 wrap: qmin)
    ((2, 33), 0.1, 1e-18, 0, 1.0),   # p past 2^63: INT64_MIN, + y_zp wraps to qmax when y_zp < 0
    ((2, 33), 0.1, 1e-18, 200, 1.0),
    ((2, 33), 0.1, 1e-15, 0, 1.0),   # huge but in range: saturates at qmax
    ((2, 33), 0.1, 1e30, 0, 1.0),
    ((128, 1000), 0.0625, 1 / 256, 0, 1.0),  # past the threads threshold
]


@pytest.mark.parametrize("xdtype,ydtype", list(itertools.product(DTYPES, DTYPES)))
@pytest.mark.parametrize("case", SOFTMAX_TABLE, ids=lambda c: "x".join(map(str, c[0])) + f"-ys{c[2]:.3g}")
def test_softmax_table(case, xdtype, ydtype):
    shape, xs, ys, yz, beta = case
    if ydtype == np.int8:
        yz -= 128
    x = rand_q(np.random.default_rng(7), shape, xdtype)
    x.reshape(-1, shape[-1])[0, :3] = x.reshape(-1, shape[-1])[0, 0]  # repeated maxima and equal values
    check_softmax(x, xs, ys, yz, ydtype, beta)


def test_softmax_rounding_ties():
    """Two equal values per row: p = 0.5 / y_scale exactly, a tie for every y_scale = 1 / (2k)."""
    for k in (1, 2, 3, 64, 128):
        x = np.array([[5, 5], [0, 0]], np.uint8)
        for ydtype, yz in ((np.uint8, 0), (np.int8, -128), (np.int8, 0)):
            check_softmax(x, 0.1, 1 / (2 * k), yz, ydtype)


@SETTINGS
@given(st.integers(1, 4), st.integers(1, 300), st.sampled_from(DTYPES), st.sampled_from(DTYPES),
       f32s(1e-3, 2), f32s(1e-3, 0.1), st.integers(0, 255), st.integers(0, 2**31))
def test_softmax_hypothesis(rows, cols, xdtype, ydtype, xs, ys, yz, seed):
    x = rand_q(np.random.default_rng(seed), (rows, cols), xdtype)
    check_softmax(x, xs, ys, yz - (128 if ydtype == np.int8 else 0), ydtype)


# ---- refusals ----

def add_error(op: str, args: list, x_bytes: int, y_bytes: int, x_ref: Ref | None = None) -> None:
    g = NativeGraph(0, [x_bytes, y_bytes])
    g.add(op, *args, x_ref or Ref(1, 0, x_bytes), Ref(2, 0, y_bytes))


TABLE9 = softmax_table(0.1, 1.0)
POOL = [1, 4, 4, 3, 2, 2]  # n h w c oh ow
BAD = [  # op, args (without refs), x bytes, y bytes, message fragment
    ("maxpool", [*POOL, 0, 2, 2, 2, 1, 1, 0, 0], 48, 12, "maxpool: kernel"),
    ("maxpool", [*POOL, 2, 2, 0, 2, 1, 1, 0, 0], 48, 12, "maxpool: strides"),
    ("maxpool", [*POOL, 2, 2, 2, 2, 0, 1, 0, 0], 48, 12, "maxpool: dilations"),
    ("maxpool", [0, 4, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 0, 0], 48, 12, "maxpool: input shape"),
    ("qgap", [1, 16, 3, 0, 0.0, 0, 1.0, 0], 48, 3, "qgap: x_scale"),
    ("qgap", [1, 16, 3, 0, float("inf"), 0, 1.0, 0], 48, 3, "qgap: x_scale"),
    ("qgap", [1, 16, 3, 0, 1.0, 0, float("nan"), 0], 48, 3, "qgap: y_scale"),
    ("qgap", [1, 16, 3, 1, 1.0, 128, 1.0, 0], 48, 3, "qgap: x_zp"),
    ("qgap", [1, 16, 3, 0, 1.0, 0, 1.0, 256], 48, 3, "qgap: y_zp"),
    ("qgap", [1, 16, 3, 0, 4096.0, 0, 1.0, 0], 48, 3, "qgap: multiplier"),
    ("qgap", [1, 16, 3, 0, 1e-12, 0, 1.0, 0], 48, 3, "qgap: multiplier"),
    ("qgap", [1, 1 << 24, 1, 0, 1.0, 0, 1e-9, 0], 1 << 24, 1, "qgap: multiplier"),
    ("qavgpool", [*POOL, 2, 2, 2, 2, 0, 0, 0, 0, 2, 0, 1.0, 0, 1.0, 0], 48, 12, "qavgpool: count_include_pad"),
    ("qavgpool", [*POOL, 2, 2, 2, 2, 0, 0, 0, 0, 0, 1, 1.0, -129, 1.0, 0], 48, 12, "qavgpool: x_zp"),
    ("qavgpool", [*POOL, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0.0, 0, 1.0, 0], 48, 12, "qavgpool: x_scale"),
    ("qavgpool", [*POOL, 2, 2, 2, 2, 3, 0, 0, 0, 0, 0, 1.0, 0, 1.0, 0], 48, 12, "qavgpool: a window"),
    ("qavgpool", [1, 4, 4, 3, 3, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 1.0, 0, 1.0, 0], 48, 18, "qavgpool: a window"),
    ("tflite_avgpool", [1, 4, 4, 3, 2, 3, 2, 2, 2, 2, 0, 0, 0, 0, 255], 48, 18, "tflite_avgpool: a window"),
    ("qavgpool", [1, 4, 4, 3, 1, 1, 4, 4, 1, 1, 0, 0, 0, 0, 0, 0, 1e4, 0, 1.0, 0], 48, 3, "qavgpool: multiplier"),
    ("qavgpool", [1, 4, 4, 3, 2, 1, 4, 4, 1, 1, 0, 0, 0, 0, 0, 0, 1.0, 0, 1.0, 0], 48, 6, "qavgpool: a kernel"),
    ("tflite_avgpool", [*POOL, 2, 2, 2, 2, 0, 0, 1, -129, 127], 48, 12, "tflite_avgpool: activation bounds"),
    ("tflite_avgpool", [*POOL, 2, 2, 2, 2, 0, 0, 0, 20, 10], 48, 12, "tflite_avgpool: activation bounds"),
    ("tflite_avgpool", [*POOL, 2, 2, 0, 2, 0, 0, 0, 0, 255], 48, 12, "tflite_avgpool: strides"),
    ("quantize", [2, 1, 1, 4, 0, 1.0, 0, 0], 16, 4, "quantize: mode"),
    ("quantize", [0, 1, 1, 4, 0, -1.0, 0, 0], 16, 4, "quantize: scale"),
    ("quantize", [1, 1, 1, 4, 0, 1.0, 128, 1], 16, 4, "quantize: zp"),
    ("quantize", [0, 1, 0, 4, 1, 1.0, 0, 0], 16, 4, "quantize: shape"),
    ("dequantize", [1, 1, 4, 0, float("inf"), 0, 0], 4, 16, "dequantize: scale"),
    ("dequantize", [1, 1, 4, 0, 1.0, -1, 0], 4, 16, "dequantize: zp"),
    ("tflite_softmax", [2, 0, TABLE9, 0, 1 / 256, 0, 0], 4, 4, "tflite_softmax: rows"),
    ("tflite_softmax", [2, 2, TABLE9, 0, 0.0, 0, 0], 4, 4, "tflite_softmax: y_scale"),
    ("tflite_softmax", [2, 2, TABLE9, 0, 1 / 256, 0, 1], 4, 4, None),  # valid: the control
    ("tflite_softmax", [2, 2, TABLE9, 0, 1 / 256, -1, 0], 4, 4, "tflite_softmax: y_zp"),
    ("tflite_softmax", [2, 2, np.full(256, np.inf, np.float32), 0, 1 / 256, 0, 0], 4, 4, "tflite_softmax: table"),
]


@pytest.mark.parametrize("op,args,xb,yb,msg", BAD, ids=[f"{b[0]}-{i}" for i, b in enumerate(BAD)])
def test_bad_parameters_refused(op, args, xb, yb, msg):
    if msg is None:
        add_error(op, args, xb, yb)
        return
    with pytest.raises(ValueError, match=msg):
        add_error(op, args, xb, yb)


WRONG_SIZE = [  # op, args, x bytes, y bytes
    ("maxpool", [*POOL, 2, 2, 2, 2, 1, 1, 0, 0], 48, 12),
    ("qgap", [1, 16, 3, 0, 1.0, 0, 1.0, 0], 48, 3),
    ("qavgpool", [*POOL, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 1.0, 0, 1.0, 0], 48, 12),
    ("qavgpool", [1, 4, 4, 3, 1, 1, 4, 4, 1, 1, 0, 0, 0, 0, 0, 0, 1.0, 0, 1.0, 0], 48, 3),  # the global path
    ("tflite_avgpool", [*POOL, 2, 2, 2, 2, 0, 0, 0, 0, 255], 48, 12),
    ("quantize", [0, 1, 3, 4, 1, 1.0, 0, 0], 48, 12),
    ("dequantize", [1, 3, 4, 1, 1.0, 0, 0], 12, 48),
    ("tflite_softmax", [3, 4, TABLE9, 0, 1 / 256, 0, 0], 12, 12),
]


@pytest.mark.parametrize("op,args,xb,yb", WRONG_SIZE, ids=[f"{w[0]}-{i}" for i, w in enumerate(WRONG_SIZE)])
def test_wrong_size_ref_refused(op, args, xb, yb):
    add_error(op, args, xb, yb)  # the right sizes are taken
    for x_ref, y_bytes in ((Ref(1, 0, xb - 1), yb), (Ref(1, 0, xb), yb + 1), (Ref(1, 1, xb), yb)):
        with pytest.raises(ValueError, match=f"{op}(:onnx)?: operand"):
            g = NativeGraph(0, [xb, y_bytes])
            g.add(op, *args, x_ref, Ref(2, 0, y_bytes))


def test_overlapping_refs_refused():
    g = NativeGraph(64, [])
    with pytest.raises(ValueError, match="maxpool: x and y overlap"):
        g.add("maxpool", *POOL, 2, 2, 2, 2, 1, 1, 0, 0, Ref(0, 0, 48), Ref(0, 40, 12))
    g.add("maxpool", *POOL, 2, 2, 2, 2, 1, 1, 0, 0, Ref(0, 0, 48), Ref(0, 48, 12))
    with pytest.raises(ValueError, match="tflite_softmax: x and y overlap"):
        g.add("tflite_softmax", 3, 4, TABLE9, 0, 1 / 256, 0, 0, Ref(0, 0, 12), Ref(0, 11, 12))


# ---- the operator list ----

ROOT = Path(__file__).resolve().parents[2]
# What each C parameter type of an add function is as a ctypes argument: every pointer is an address.
C_TO_CTYPES = {"uint32_t": ctypes.c_uint32, "int32_t": ctypes.c_int32, "uint64_t": ctypes.c_uint64,
               "float": ctypes.c_float, "vki_ref": cpu_graph._Ref}


def c_prototypes() -> dict[str, list]:
    """vki_graph_add_<op>'s parameters after the graph, as ctypes types, from the header as the C compiler reads it
    (the preprocessor expands the operator list into prototypes), in the header's order."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.fail("cc not found: apt-get install build-essential", pytrace=False)
    r = subprocess.run([cc, "-E", "-P", "-I", str(ROOT / "cpu_fallback" / "include"), "-"],
                       input='#include "vkinfer_graph.h"\n', capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-4000:]
    text = " ".join(r.stdout.split())
    protos = {}
    for op, params in re.findall(r"vki_status vki_graph_add_(\w+) ?\(vki_graph ?\* ?g ?, (.*?)\);", text):
        types = []
        for p in params.split(","):
            ctype = re.fullmatch(r"\s*(.*?)\s*\b\w+\s*", p)[1]  # the type: all but the parameter's name
            types.append(ctypes.c_void_p if "*" in ctype else C_TO_CTYPES[ctype])
        protos[op] = types
    return protos


def test_signatures_are_the_c_prototypes():
    """SIGNATURES (read from the library's table at load) holds exactly the header's add functions, in the list's
    order, each with the ctypes type of every C parameter: a mistyped letter in the table's generator, or a ctypes
    mapping that narrows or widens an argument, would show here."""
    protos = c_prototypes()
    assert len(protos) >= 16, sorted(protos)
    sigs = cpu_graph.SIGNATURES
    assert list(sigs) == list(protos)
    for op, types in protos.items():
        assert sigs[op] == types, (op, sigs[op], types)


def test_each_listed_op_is_its_file_and_entry_point():
    """Every operator of the list is cpu_fallback/src/ops/<op>.c, which defines vki_graph_add_<op>, and no file
    there is unlisted; the table's entry point is the library's vki_graph_add_<op>."""
    ops_dir = ROOT / "cpu_fallback" / "src" / "ops"
    files = {p.stem: p.read_text() for p in ops_dir.glob("*.c")}
    assert set(files) == set(cpu_graph.SIGNATURES), (sorted(files), sorted(cpu_graph.SIGNATURES))
    for op, text in files.items():
        assert re.search(rf"^vki_status vki_graph_add_{op}\(", text, re.M), f"ops/{op}.c lacks vki_graph_add_{op}"
    so = lib()
    count = ctypes.c_uint32()
    table = so.vki_graph_op_table(ctypes.byref(count))
    entries = {table[i].name.decode(): table[i].entry for i in range(count.value)}
    for op in files:
        assert entries[op] == ctypes.cast(getattr(so, f"vki_graph_add_{op}"), ctypes.c_void_p).value, op
