"""com.microsoft QLinearSoftmax against ONNX Runtime on every device, bit for bit, each device running the node itself
(cpu: cpu_fallback/src/ops/qlinear_softmax.c; vulkan: shaders/qlinear_softmax.comp): ranks 1-5, any axis (the
NHWC form's strided rows included), row lengths 1 to 4000, the real models' shapes (an attention softmax over
[1, 4, 400, 400]'s last axis, YOLO's DFL softmax over [1, 16, 4, 8400]'s channels), uint8 and int8, output scales
1/256 and others (odd floor(1 / y_scale) puts quotients on .5 ties), zero points at both ends, opset < 13 rows;
tie-heavy inputs. The C operator under AddressSanitizer + UBSan; bad parameters refused naming the node."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from support.cpu_build import ASAN_LIB, ROOT, run_sanitized

from ._build import check, model, node, ort_run, qrange, refused


def softmax_model(shape, dt, xs=0.1, ys=1 / 256, yz=None, axis=-1, opset=13) -> bytes:
    dt = np.dtype(dt)
    yz = qrange(dt)[0] if yz is None else yz
    kw = {} if axis is None else {"axis": axis}
    n = node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], domain="com.microsoft", opset=opset, **kw)
    return model([n], {"x": (dt, tuple(shape))}, {"xs": np.float32(xs), "xz": dt.type(qrange(dt)[0] // 2 + 60),
                                                  "ys": np.float32(ys), "yz": dt.type(yz)})


def feeds(shape, dt, seed: int) -> list[dict]:
    """Full-range values, and near-equal ones (rows of a few distinct values near the top: sums of equal terms,
    quotients on rounding ties, the maximum repeated)."""
    dt = np.dtype(dt)
    lo, hi = qrange(dt)
    rng = np.random.default_rng(seed)
    full = rng.integers(lo, hi + 1, shape)
    near = hi - rng.integers(0, 3, shape) - int(rng.integers(0, 40))
    return [{"x": full.astype(dt)}, {"x": np.clip(near, lo, hi).astype(dt)}]


def check_softmax(shape, dt, where="device", **kw):
    """Every device equals ORT on `feeds`; the node runs on the session's device (or `where`)."""
    blob = softmax_model(shape, dt, **kw)
    fs = feeds(shape, dt, len(shape) * 7 + sum(shape))
    want = [ort_run(blob, f) for f in fs]
    if where == "device":
        check(blob, fs, want, where="cpu", on_vulkan="vulkan")
    else:
        check(blob, fs, want, where=where)


SHAPES = [  # id, shape, axis, x_scale, y_scale, y_zero_point (None: qmin), opset
    ("r2_10", (4, 10), -1, 0.1, 1 / 256, None, 13),
    ("r2_one_column", (5, 1), -1, 0.1, 1 / 64, None, 13),
    ("r1_33", (33,), 0, 0.3, 1 / 255, None, 13),
    ("r2_1001", (2, 1001), -1, 0.02, 1 / 256, None, 13),
    ("r2_4000", (3, 4000), 1, 0.05, 1 / 256, None, 13),
    ("r2_odd_axis0", (37, 3), 0, 0.2, 0.3, 5, 13),
    ("r3_mid_axis", (3, 7, 5), 1, 0.3, 1 / 256, None, 13),
    ("r3_axis0", (9, 2, 11), 0, 0.07, 0.1, 17, 13),
    ("r4_last_axis_strided", (2, 3, 5, 17), -1, 0.3, 1 / 256, None, 13),
    ("r4_channels_contiguous", (2, 13, 3, 5), 1, 0.15, 1 / 256, None, 13),
    ("r4_h", (1, 6, 9, 4), 2, 0.5, 0.2, 9, 13),
    ("r4_batch", (3, 2, 2, 3), 0, 1.1, 1 / 3, None, 13),
    ("r5", (2, 3, 4, 5, 6), 2, 0.2, 1 / 256, None, 13),
    ("yoloseg_attention", (1, 4, 400, 400), -1, 0.15261021, 1 / 256, None, 19),
    ("yoloseg_dfl", (1, 16, 4, 8400), 1, 0.15769577, 1 / 256, None, 19),
    ("nsfw_classifier", (1, 2), -1, 0.03091129, 1 / 256, None, 17),
    ("ys_above_1", (4, 9), -1, 0.1, 2.0, 7, 13),        # floor(1 / y_scale) = 0: every output is y_zero_point
    ("ys_tiny_long_rows", (2, 3000), -1, 0.01, 1e-5, None, 13),  # quotients up to ~100: zero points and saturation
    ("large_x_scale", (6, 40), -1, 8.0, 1 / 256, None, 13),  # one element takes it all; denormal table entries
    ("tiny_x_scale", (6, 40), -1, 1e-4, 1 / 256, None, 13),  # nearly uniform rows
    ("zp_top", (8, 12), -1, 0.2, 1 / 256, "max", 13),   # v + y_zero_point far over qmax: saturates
    ("legacy_last_axis", (2, 3, 4), 2, 0.1, 1 / 256, None, 11),
    ("legacy_flattened_rows", (2, 3, 4), 1, 0.1, 1 / 256, None, 11),
    ("legacy_unit_axes", (2, 5, 1, 1), 1, 0.1, 1 / 256, None, 12),  # one axis in disguise: NHWC rows
    ("legacy_no_axis", (2, 3, 4), None, 0.1, 1 / 256, None, 12),  # the contrib default: the last axis
]


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("cid,shape,axis,xs,ys,yz,opset", SHAPES, ids=[c[0] for c in SHAPES])
def test_qlinear_softmax_equals_ort_on_every_device(cid, shape, axis, xs, ys, yz, opset, dt):
    yz = qrange(dt)[1] if yz == "max" else yz if yz is None else yz + (qrange(dt)[0] if dt == np.int8 else 0)
    check_softmax(shape, dt, xs=xs, ys=ys, yz=yz, axis=axis, opset=opset)


def test_legacy_rows_across_the_nhwc_form_run_on_the_host():
    """Opset < 13 over axis 1 of a 4-D tensor: a row is C*H*W values in NCHW order, which the NHWC form does not
    keep (ORT's float32 sum is ordered), so the node stays on the host, still ORT's bits."""
    check_softmax((2, 3, 4, 5), np.uint8, where="host", axis=1, opset=11)


def test_random_shapes_axes_and_parameters():
    """Seeded shapes of ranks 1-4, any axis, scales and zero points: ORT's bits on every device."""
    rng = np.random.default_rng(25)
    for trial in range(12):
        dt = np.dtype([np.uint8, np.int8][trial % 2])
        r = int(rng.integers(1, 5))
        shape = [int(v) for v in rng.integers(1, 7, r)]
        shape[int(rng.integers(0, r))] = int(rng.choice([1, 2, 16, 31, 100, 257]))
        axis = int(rng.integers(-r, r))
        ys = float(rng.choice([1 / 256, 1 / 255, 0.3, 0.2, 0.01]))
        if shape[axis] * 148 < 1 / ys:  # ORT's result is undefined there (refused: see below)
            continue
        lo, hi = qrange(dt)
        check_softmax(tuple(shape), dt, xs=float(np.float32(10 ** rng.uniform(-3, 0.7))), ys=ys,
                      yz=int(rng.integers(lo, hi + 1)), axis=axis)


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_reference_equals_ort_on_tie_heavy_rows(dt):
    """The numpy reference alone (the contract the devices follow) against ORT on rows built to land on rounding
    ties: a few copies of the maximum over smaller values, odd floor(1 / y_scale), row lengths 1 to 5000, and
    60594 (where the C library's logf differs from float32(log)). Each of these alternatives fails here (checked
    by substituting them): float32(log) for logf, a reciprocal-then-multiply for the division, numpy's pairwise
    sum or MLAS's AVX2 / AVX-512 lane sums for the sequential one, rounding after adding the zero point."""
    from vkinfer.reference.qlinear_softmax import qlinear_softmax

    dt = np.dtype(dt)
    lo, hi = qrange(dt)
    rng = np.random.default_rng(60594)
    for d in (1, 2, 3, 4, 6, 7, 10, 16, 17, 31, 32, 33, 48, 64, 100, 255, 512, 1000, 2048, 5000):
        xs = float(np.float32(10 ** rng.uniform(-3, 1)))
        for ys in (0.3, 1 / 255, 0.2, 1 / 256, 0.9, 1 / 3):
            if d * 148 < 1 / ys:
                continue
            rows = 96 if d < 1000 else 8
            x = np.empty((rows, d), dt)
            for r in range(rows):
                top = int(rng.integers(hi - 40, hi + 1))
                gap = int(rng.choice([1, 3, 10, 40]))
                row = np.clip(top - rng.integers(gap, gap + 30, d), lo, hi)
                row[rng.permutation(d)[:int(rng.choice([1, 2, 2, 6, 10, d, d]))]] = top
                x[r] = row
            yz = int(rng.integers(lo, hi + 1))
            blob = softmax_model((rows, d), dt, xs=xs, ys=ys, yz=yz)
            got = qlinear_softmax(x, np.float32(xs), None, np.float32(ys), dt.type(yz))
            np.testing.assert_array_equal(got, ort_run(blob, {"x": x})[0], err_msg=f"d={d} xs={xs} ys={ys} yz={yz}")
    d = 60594  # quotients near 1..140 (y_scale about 1 / (d * 140)): the table's last bits decide many of them
    for xs in (0.08144886791706085, 0.010365436784923077):
        x = rng.integers(hi - 60, hi + 1, (4, d)).astype(dt)
        ys, yz = float(np.float32(1 / (d * rng.uniform(1, 140)))), lo
        blob = softmax_model((4, d), dt, xs=xs, ys=ys, yz=yz)
        got = qlinear_softmax(x, np.float32(xs), None, np.float32(ys), dt.type(yz))
        np.testing.assert_array_equal(got, ort_run(blob, {"x": x})[0], err_msg=f"d={d} xs={xs} ys={ys}")


@pytest.mark.parametrize("change,culprit", [(dict(xs=0.0), "scale"), (dict(ys=-1.0), "scale"),
                                            (dict(shape=(3, 1), ys=1e-6), "overflows")],
                         ids=["x_scale_zero", "y_scale_negative", "undefined_overflow"])
def test_bad_qlinear_softmax_refused_naming_the_node(change, culprit):
    shape = change.pop("shape", (3, 8))
    blob = softmax_model(shape, np.uint8, **change)
    refused(blob, {"x": np.zeros(shape, np.uint8)}, culprit)


# ---- the C operator alone: refusals, and every path under AddressSanitizer + UBSan ----

def test_c_operator_refuses_bad_parameters():
    from vkinfer.cpu.graph import NativeGraph, Ref
    from vkinfer.reference.qlinear_softmax import softmax_table

    t = softmax_table(np.float32(0.1), 4)
    bad = [((0, 4, 1, t, 256.0, 0, 0), "outer"), ((2, 4, 1, t, 255.5, 0, 0), "y_mult"),
           ((2, 4, 1, t, 256.0, 128, 1), "y_zp"), ((2, 4, 1, np.full(256, np.nan, np.float32), 256.0, 0, 0), "table"),
           ((2, 4, 1, np.zeros(256, np.float32), 256.0, 0, 0), "table"), ((2, 4, 1, t, 3e38, 0, 0), "overflows")]
    for args, msg in bad:
        g = NativeGraph(0, [8, 8])
        with pytest.raises(ValueError, match=f"qlinear_softmax: .*{msg}"):
            g.add("qlinear_softmax", *args, Ref(1, 0, 8), Ref(2, 0, 8))
    g = NativeGraph(0, [8, 8])  # the control: valid
    g.add("qlinear_softmax", 2, 4, 1, t, 256.0, 0, 0, Ref(1, 0, 8), Ref(2, 0, 8))


_ASAN_DRIVER = r"""
import numpy as np
from vkinfer.cpu import LIB_PATH
from vkinfer.cpu.graph import NativeGraph, Ref
from vkinfer.reference.qlinear_softmax import row_multiplier, softmax_rows, softmax_table
print("library:", LIB_PATH)
rng = np.random.default_rng(3)
n = 0
for outer, d, inner in [(1, 1, 1), (3, 7, 1), (40, 33, 1), (2, 5, 3), (3, 17, 70), (1, 300, 129), (200, 2, 1)]:
    for dt, yz in ((np.uint8, 0), (np.int8, -128), (np.int8, 100)):
        x = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1, (outer, d, inner)).astype(dt)
        t, m = softmax_table(np.float32(0.2), d), row_multiplier(np.float32(1 / 256 if d > 1 else 0.5))
        rows = np.ascontiguousarray(x.transpose(0, 2, 1)).reshape(-1, d)
        want = softmax_rows(rows, t, m, yz).reshape(outer, inner, d).transpose(0, 2, 1)
        flip = np.uint8(0x80 if dt == np.int8 else 0)
        size = x.size
        for threads in (1, 4):
            g = NativeGraph(0, [size, size])
            g.add("qlinear_softmax", outer, d, inner, t, float(m), yz, int(dt == np.int8), Ref(1, 0, size),
                  Ref(2, 0, size))
            out = np.zeros(size, np.uint8)
            g.run([np.ascontiguousarray(x).view(np.uint8).reshape(-1) ^ flip, out], threads=threads)
            assert np.array_equal((out ^ flip).view(dt).reshape(x.shape), want), (outer, d, inner, dt, yz)
            n += 1
print("qlinear_softmax cases:", n)
"""


def test_c_operator_under_asan_and_ubsan():
    r = run_sanitized([sys.executable, "-c", _ASAN_DRIVER], "qlinear_softmax cases: 42", cwd=ROOT)
    assert f"library: {ASAN_LIB}" in r.stdout, r.stdout[-2000:]
