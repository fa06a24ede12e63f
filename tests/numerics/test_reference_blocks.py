"""Reference kernels that work by blocks to bound their scratch (issue 26 item 1: a legal 512 MB activation on the
reference device ran out of a 6 GiB address space in float64 temporaries): the float32 fused multiply-add
(vkinfer/reference/_float32.py fma32, the MLAS polynomial kernels' step) and ORT's float Softmax rows
(vkinfer/reference/float_softmax.py softmax_rows). Element-wise and row-wise work is independent per element and
per row, so blocks of any size give the same bits: checked here with blocks of a few elements against one block,
on values that hit fma32's float32 ties and Softmax's NaN, infinite and large rows."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

f32 = importlib.import_module("vkinfer.reference._float32")
sm = importlib.import_module("vkinfer.reference.float_softmax")
ql = importlib.import_module("vkinfer.reference.quantize_linear")


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 4), (1, 1, 9), (4, 1)])
@pytest.mark.parametrize("block", [1, 2, 5, 6, 1 << 20])
def test_blocks_cover_every_element_once(shape, block):
    hits = np.zeros(shape, np.int64)
    for ix in f32.blocks(shape, block):
        assert hits[ix].size <= block
        hits[ix] += 1
    assert np.all(hits == 1)


def _ties(rng, n):
    """a * b + c on and near float32 ties (c = -a * b rounded, plus a few ulps)."""
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    c = (-(a.astype(np.float64) * b) + rng.integers(-3, 4, n) * 2.0 ** -30).astype(np.float32)
    return a, b, c


def test_fma32_by_blocks_same_bits(monkeypatch):
    calls = []
    one = f32._fma32
    monkeypatch.setattr(f32, "_fma32", lambda *a: (calls.append(np.shape(a[0])), one(*a))[1])
    rng = np.random.default_rng(0)
    a, b, c = _ties(rng, 3000)
    a = a.reshape(30, 100)
    c = c.reshape(30, 100)
    cases = [(a, b[:100], c), (a, np.float32(1.4426950), c[:1]), (a, b[:100], np.float32(12582912.0))]
    whole = [f32.fma32(*args) for args in cases]
    monkeypatch.setattr(f32, "BLOCK", 7)
    for args, want in zip(cases, whole, strict=True):
        got = f32.fma32(*args)
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    assert max(int(np.prod(c)) for c in calls[-3:]) <= 7  # by blocks indeed


def test_quantize_by_blocks_same_bits(monkeypatch):
    """MLAS's QuantizeLinear (reference/quantize_linear.py quantize_values) by blocks: ties, saturation, per-axis
    scales and zero points broadcast along the blocks."""
    rng = np.random.default_rng(2)
    x = (rng.integers(-600, 600, (6, 5, 40)) / 2).astype(np.float32)  # .5 ties
    x[0, 0, :3] = [1e30, -1e30, -0.0]
    cases = [(x, np.float32(0.5), 3, np.uint8), (x, np.linspace(0.1, 2, 5, dtype=np.float32)[:, None],
                                                   np.arange(-2, 3, dtype=np.int32)[:, None], np.int8)]
    whole = [ql.quantize_values(*c) for c in cases]
    monkeypatch.setattr(ql, "BLOCK", 16)
    for c, want in zip(cases, whole, strict=True):
        got = ql.quantize_values(*c)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_softmax_rows_by_blocks_same_bits(monkeypatch):
    rng = np.random.default_rng(1)
    v = (rng.standard_normal((50, 37)) * 30).astype(np.float32)
    v[3, 5], v[7, :], v[9, 2], v[11, :] = np.nan, -np.inf, np.inf, 1e30
    want = {log: sm.softmax_rows(v, log) for log in (False, True)}
    monkeypatch.setattr(sm, "BLOCK", 80)  # blocks of 2 rows
    for log in (False, True):
        got = sm.softmax_rows(v, log)
        np.testing.assert_array_equal(got.view(np.uint32), want[log].view(np.uint32))


def test_softmax_long_rows_by_column_blocks_same_bits(monkeypatch):
    """A row longer than a block: its exp by blocks of columns (at most BLOCK elements at once), the same bits;
    lane_sum's accumulation equals the kernel's sequential 16-lane loop, written out here."""
    rng = np.random.default_rng(2)
    v = (rng.standard_normal((3, 133)) * 30).astype(np.float32)
    v[0, 5], v[1, 17], v[2, :] = np.nan, np.inf, -3.0
    want = {log: sm.softmax_rows(v, log) for log in (False, True)}
    sizes = []
    real = sm.mlas_sum_exp_element
    monkeypatch.setattr(sm, "mlas_sum_exp_element", lambda x: sizes.append(x.size) or real(x))
    monkeypatch.setattr(sm, "BLOCK", 40)  # one row a block, its 133 columns by 40
    for log in (False, True):
        got = sm.softmax_rows(v, log)
        np.testing.assert_array_equal(got.view(np.uint32), want[log].view(np.uint32))
    assert sizes and max(sizes) <= 40
    e = np.abs(v).astype(np.float32)
    acc = np.zeros((3, 16), np.float32)
    for i in range(0, 128, 16):
        acc = acc + e[:, i:i + 16]
    acc[:, :5] = acc[:, :5] + e[:, 128:]
    a = acc[:, 8:] + acc[:, :8]
    loop = ((a[:, 0] + a[:, 1]) + (a[:, 2] + a[:, 3])) + ((a[:, 4] + a[:, 5]) + (a[:, 6] + a[:, 7]))
    np.testing.assert_array_equal(sm.lane_sum(e).view(np.uint32), loop.view(np.uint32))


def _row_max_loop(v):
    """MLAS's AVX-512F ReduceMaximum written out step by step (vmaxps: a > b ? a : b), as the module docstring
    says: four accumulators over blocks of 64, merged, then blocks of 16, the lanes folded, the tail one by one."""
    def mx(a, b):
        return np.where(a > b, a, b)
    rows, d = v.shape
    i, m = 0, np.full(rows, sm.LOWEST, np.float32)
    if d >= 16:
        acc = np.full((rows, 16), sm.LOWEST, np.float32)
        if d >= 64:
            accs = [acc.copy() for _ in range(4)]
            while d - i >= 64:
                for k in range(4):
                    accs[k] = mx(accs[k], v[:, i + 16 * k:i + 16 * k + 16])
                i += 64
            acc = mx(mx(accs[0], accs[1]), mx(accs[2], accs[3]))
        while d - i >= 16:
            acc, i = mx(acc, v[:, i:i + 16]), i + 16
        t = mx(acc[:, :8], acc[:, 8:])
        t = mx(t[:, :4], t[:, 4:])
        t = mx(t[:, :2], t[:, 2:])
        m = mx(t[:, 0], t[:, 1])
    for j in range(i, d):
        m = mx(m, v[:, j])
    return m


@pytest.mark.parametrize("d", [1, 15, 16, 17, 63, 64, 65, 129, 300, 1000])
def test_row_max_without_a_step_per_block_same_bits(d):
    """row_max folds each lane at once (a Python step per 64 elements took minutes on rows of 2**24): the same bits
    as the step-by-step kernel, NaNs (with their payloads), signed zeros, infinities and the lowest float included."""
    rng = np.random.default_rng(d)
    odd_nan = np.frombuffer(np.uint32(0xFFC00001).tobytes(), np.float32)[0]
    specials = np.array([np.nan, odd_nan, 0.0, -0.0, np.inf, -np.inf, sm.LOWEST, -sm.LOWEST, 1.0], np.float32)
    for trial in range(40):
        if trial % 3 == 0:
            v = rng.choice(specials, (4, d))
        elif trial % 3 == 1:
            v = rng.choice(np.array([0.0, -0.0, np.nan, -np.inf], np.float32), (4, d))
        else:
            v = rng.standard_normal((4, d)).astype(np.float32)
            hit = rng.random((4, d)) < 0.05
            v[hit] = rng.choice(specials, int(hit.sum()))
        np.testing.assert_array_equal(sm.row_max(v).view(np.uint32), _row_max_loop(v).view(np.uint32))
