"""The QLinearConv reference computed tile by tile (vkinfer/reference/qlinear_conv.py TILE_BYTES), and without the
windows that read padding only (`touched`: their accumulator is the bias): the same bits as ONNX Runtime for pads
larger than the kernel (whole rows and columns of padding-only windows, with strides and dilations that step over
the input), groups, and tiles of a few pixels. Before, a fuzzed 1x8x8x8 input with a left pad of 2**20
(tests/models/regressions/fuzz/hang/onnx-89662c5d) was convolved whole in float64: 21 s of CPU and 2.2 GB."""

from __future__ import annotations

import importlib
import time

import numpy as np
import pytest

from vkinfer.reference._spec import conv_spec

from ._build import ort_run
from .test_qlinear_conv import _case, _model

ref = importlib.import_module("vkinfer.reference.qlinear_conv")  # the package exports the function too

CASES = [
    ("pads_past_kernel", dict(c=3, h=4, w=5, m=4, kh=3, pads=(7, 2, 5, 9))),
    ("strided_dilated", dict(c=4, h=6, w=7, m=5, kh=3, strides=(3, 2), dilations=(2, 3), pads=(8, 6, 7, 10))),
    ("grouped", dict(c=6, h=5, w=5, m=6, kh=2, strides=(2, 1), pads=(4, 0, 0, 5), group=3, xt="u8", wt="u8")),
    ("depthwise_batch", dict(n=2, c=4, h=3, w=9, m=4, kh=3, pads=(1, 11, 3, 1), group=4)),
    ("stride_over_input", dict(c=2, h=3, w=3, m=3, kh=1, strides=(5, 4), pads=(6, 6, 6, 6))),
]


@pytest.mark.parametrize("tile_bytes", [ref.TILE_BYTES, 1], ids=["one_tile", "pixel_tiles"])
@pytest.mark.parametrize("cid,kw", CASES, ids=[c[0] for c in CASES])
def test_tiles_and_padding_windows_equal_ort(cid, kw, tile_bytes, monkeypatch):
    monkeypatch.setattr(ref, "TILE_BYTES", tile_bytes)
    case = _case(cid, kw)
    blob, x = _model(case)
    want = ort_run(blob, {"x": x})[0]
    np.testing.assert_array_equal(ref.qlinear_conv(conv_spec(**case)), want)


def test_touched_windows():
    # input 4 at head pad 7, kernel 3: windows o = 5..10 reach rows 7..10
    assert ref.touched(4, 7, 3, 1, 1, 20) == (5, 11)
    assert ref.touched(4, 0, 3, 2, 1, 1) == (0, 1)
    assert ref.touched(3, 6, 1, 5, 1, 3) == (2, 2)  # the stride steps over every input row: none


def test_huge_padding_costs_its_output_not_its_windows():
    """A left pad of 2**20 on a 1x8x8x8 input: an 8 MiB output, computed in well under a second (the touched
    windows are 8 columns; before, every one of the 8 Mi windows was summed in float64)."""
    case = _case("huge_pad", dict(c=8, h=8, w=8, m=8, kh=3, pads=(1, 1 << 20, 1, 1), xt="u8", wt="u8"))
    t0 = time.process_time()
    y = ref.qlinear_conv(conv_spec(**case))
    spent = time.process_time() - t0
    assert y.shape == (1, 8, 8, (1 << 20) + 7)
    small = dict(case, pads=(1, 3, 1, 1))  # the same windows over the input, 1M columns fewer of padding
    np.testing.assert_array_equal(y[..., (1 << 20) - 3:], ref.qlinear_conv(conv_spec(**small)))
    assert np.all(y[..., :(1 << 20) - 3] == y[..., :1])  # padding only: the requantized bias per channel
    assert spent < 2.0, spent
