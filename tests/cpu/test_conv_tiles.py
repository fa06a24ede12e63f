"""The CPU convolution by tiles of output pixels (cpu_fallback/src/conv.c, issue 26 item 1): a layer whose whole
indirection buffer (one pointer per tap of every output pixel) would pass 64 MiB fills one bounded buffer per tile
at every run instead (a legal 1 GiB input to a 3x3 layer asked for 9.6 GB of pointers, fuzz memory/e4986fdbbe).

The test hook vki_conv_set_tiling lowers the bound and the tile, so that small layers of odd sizes take the tiled
path (tiles of 1, 7 and 128 pixels: tile edges inside rows, across rows and images, inside the microkernels'
MR-row tiles); each must equal the reference (vkinfer/reference/qlinear_conv.py, itself checked against ONNX
Runtime in tests/ops/test_qlinear_conv.py) and the untiled layer, on every ISA variant this CPU runs, on 1 and 3
threads. The same table runs under AddressSanitizer + UBSan, and a layer past the real bound runs with its memory
bounded by the tile."""

from __future__ import annotations

import ctypes
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from support.cases import conv_case

from vkinfer import cpu
from vkinfer.reference._spec import conv_spec
from vkinfer.reference.qlinear_conv import qlinear_conv

ROOT = Path(__file__).resolve().parents[2]

# id -> conv_case keywords: odd sizes, every path of conv.c (igemm, merged-row candidates, groups, several NR
# blocks, weights-outer layers, depthwise of 9, 25 and other tap counts, the two-row depthwise candidate).
TABLE = [
    ("igemm_3x3_pad1", dict(c=5, h=7, w=9, m=7, kh=3, pads=(1, 1, 1, 1))),
    ("igemm_stride2_asym", dict(c=6, h=9, w=11, m=9, kh=3, strides=(2, 2), pads=(0, 1, 2, 1))),
    ("igemm_dilated", dict(c=4, h=10, w=9, m=5, kh=3, dilations=(2, 3), pads=(2, 1, 0, 3))),
    ("igemm_2x5_stride_3x2", dict(c=3, h=8, w=13, m=6, kh=2, kw=5, strides=(3, 2), pads=(1, 2, 1, 0))),
    ("rgb_stem_merge_candidate", dict(c=3, h=11, w=13, m=8, kh=3, strides=(2, 2), pads=(1, 1, 1, 1))),
    ("small_c_wide_kernel", dict(c=1, h=5, w=31, m=3, kh=1, kw=7, strides=(1, 3), pads=(0, 2, 0, 2))),
    ("groups_2", dict(c=6, h=7, w=7, m=10, kh=3, group=2, pads=(1, 1, 1, 1))),
    ("groups_3_1x1", dict(c=9, h=5, w=7, m=6, kh=1, group=3)),
    ("many_blocks_batch2", dict(n=2, c=7, h=5, w=6, m=37, kh=3, pads=(1, 0, 1, 2))),
    ("weights_outer", dict(c=64, h=3, w=3, m=72, kh=3, pads=(1, 1, 1, 1))),
    ("s8_input_u8_weights", dict(c=5, h=6, w=7, m=4, kh=3, xt="s8", wt="u8", pads=(1, 1, 0, 0))),
    ("depthwise_3x3", dict(c=16, h=7, w=9, m=16, kh=3, group=16, pads=(1, 1, 1, 1))),
    ("depthwise_3x3_rows2_candidate", dict(n=2, c=64, h=5, w=6, m=64, kh=3, group=64, pads=(1, 1, 1, 1))),
    ("depthwise_5x5_stride2", dict(c=12, h=9, w=11, m=12, kh=5, group=12, strides=(2, 2), pads=(2, 2, 2, 2))),
    ("depthwise_2x3_dilated", dict(c=5, h=7, w=8, m=5, kh=2, kw=3, group=5, dilations=(2, 1), pads=(0, 1, 1, 1))),
]
TILE_PIXELS = (1, 7, 130)  # 130 pixels of pointers: the tile rounds down to whole 64-pixel chunks (128)


def _lib() -> ctypes.CDLL:
    so = cpu.lib()
    so.vki_conv_set_tiling.argtypes = [ctypes.c_uint64, ctypes.c_uint64]
    so.vki_conv_set_tiling.restype = None
    so.vki_conv_tile_pixels.argtypes = [ctypes.c_void_p]
    so.vki_conv_tile_pixels.restype = ctypes.c_uint64
    return so


@contextmanager
def tiling(bound: int, tile_bytes: int):
    """Convolutions created inside use `bound` and `tile_bytes` (vki_conv_set_tiling); the defaults after."""
    so = _lib()
    so.vki_conv_set_tiling(bound, tile_bytes)
    try:
        yield so
    finally:
        so.vki_conv_set_tiling(0, 0)


def _spec(cid: str, kw: dict):
    case = conv_case(np.random.default_rng(sum(map(ord, cid))), **{"xt": "u8", "wt": "s8", **kw})
    case.pop("activation", None)
    return conv_spec(**case)


def _pointers_per_pixel(s) -> int:
    """conv.c's pointers per output pixel: kh in merged-row mode (group 1, not depthwise, horizontal dilation 1, kw > 1,
    c * kw <= 64 bytes or c <= 4 and c * kw <= 4096; the padded copy within 64 MiB: every layer here), else kh * kw."""
    m, cg, kh, kw = s.w.shape
    c = s.x.shape[1]
    merged = s.group == 1 and not (c == m == 1) and s.dilations[1] == 1 and kw > 1 and (
        c * kw <= 64 or (c <= 4 and c * kw <= 4096))
    return kh if merged else kh * kw


def check_case(cid: str, kw: dict, isa: str, tile_pixels: int, threads=(1, 3)) -> None:
    """The layer tiled (tiles of `tile_pixels` output pixels, or 128 for 130) against the reference and the layer
    built whole."""
    s = _spec(cid, kw)
    want = qlinear_conv(s)
    whole = cpu.QLinearConv(s, isa)
    assert _lib().vki_conv_tile_pixels(whole.conv.handle) == 0, cid
    with tiling(1, tile_pixels * _pointers_per_pixel(s) * 8) as so:
        tiled = cpu.QLinearConv(s, isa)
        assert so.vki_conv_tile_pixels(tiled.conv.handle) == (128 if tile_pixels == 130 else tile_pixels), cid
    for t in threads:
        got = tiled.run(s.x, t)
        assert got.dtype == want.dtype and got.shape == want.shape, cid
        bad = np.argwhere(got != want)
        assert not bad.size, f"{cid} {isa} tile {tile_pixels} threads {t}: {len(bad)} differ, first at {bad[0]}"
        assert np.array_equal(tiled.run(s.x, t), got), f"{cid}: a second run (tiles rebuilt) differs"
    assert np.array_equal(whole.run(s.x, 1), want), cid


@pytest.mark.parametrize("isa", cpu.available_variants())
@pytest.mark.parametrize("tile_pixels", TILE_PIXELS)
@pytest.mark.parametrize("cid,kw", TABLE, ids=[c[0] for c in TABLE])
def test_a_tiled_convolution_equals_the_reference_and_the_whole_one(cid, kw, tile_pixels, isa):
    check_case(cid, kw, isa, tile_pixels)


def test_the_default_bound_tiles_only_past_64_mib():
    """Real layers keep the indirection built once (a 224x224 3x3 layer: 3.6 MB); a layer whose whole buffer would
    pass 64 MiB (3x3 over 1024x1024 output pixels: 72 MiB) is tiled, with 16 MiB tiles (233,016 pixels, rounded
    down to whole chunks of 64). With 8 channels the same layer is merged (3 pointers a pixel: 24 MiB), untiled."""
    def tile_of(h, w, group):  # 2 groups: never merged
        s = _spec("bound", dict(c=8, h=h, w=w, m=8, kh=3, group=group, pads=(1, 1, 1, 1)))
        return _lib().vki_conv_tile_pixels(cpu.QLinearConv(s).conv.handle)

    assert tile_of(224, 224, 2) == 0 and tile_of(960, 960, 2) == 0 and tile_of(1024, 1024, 1) == 0
    assert tile_of(1024, 1024, 2) == (16 << 20) // 72 // 64 * 64


def test_a_tile_bound_tiles_no_real_model_layer():
    """Tiling is for layers far past real ones: with the bound at its default, a merged RGB stem of a 640x640 input
    (the largest real model's) keeps its merged rows and whole indirection; a 4K one at stride 1 (199 MB of row
    pointers, a 25 MB padded copy) keeps its merged rows, by tiles of 3 pointers a pixel."""
    s = _spec("stem", dict(c=3, h=640, w=640, m=16, kh=3, strides=(2, 2), pads=(1, 1, 1, 1)))
    assert _lib().vki_conv_tile_pixels(cpu.QLinearConv(s).conv.handle) == 0
    s = _spec("stem", dict(c=3, h=2160, w=3840, m=16, kh=3, pads=(1, 1, 1, 1)))
    assert _lib().vki_conv_tile_pixels(cpu.QLinearConv(s).conv.handle) == (16 << 20) // 24 // 64 * 64


_BIG = r"""
import resource, sys
import numpy as np
from vkinfer import cpu
from vkinfer.reference._spec import conv_spec
from vkinfer.reference.qlinear_conv import qlinear_conv
rng = np.random.default_rng(5)
x = rng.integers(0, 256, (1, 2, 32, 8192), dtype=np.uint8)
w = rng.integers(-128, 128, (4, 1, 31, 31), dtype=np.int8)
args = (np.float32(0.02), np.uint8(5), w, np.float32(0.0004), np.int8(3), np.float32(0.5), np.uint8(100))
s = conv_spec(x, *args, pads=(15, 15, 15, 15), group=2)
q = cpu.QLinearConv(s)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
y = q.run(s.x, 1)
grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10) - before
# the reference on column slabs: output columns [a, b) read input columns [a - 15, b + 15)
for a in (0, 4000, 8192 - 37):
    b = a + 37
    lo, hi = max(a - 15, 0), min(b + 15, 8192)
    slab = conv_spec(np.ascontiguousarray(x[..., lo:hi]), *args,
                     pads=(15, 15 - (a - lo), 15, 15 - (hi - b)), group=2)
    assert np.array_equal(qlinear_conv(slab), y[..., a:b]), a
print(cpu.lib().vki_conv_tile_pixels(q.conv.handle), grew)
"""


def test_a_big_convolution_runs_in_bounded_memory():
    """A 31x31 layer of 2 groups over 32x8192 output pixels: its whole indirection would be 1.9 GB (961 pointers a
    pixel); by
    tiles of 16 MiB the run's resident memory grows by less than 64 MB, and its output equals the reference's on
    column slabs at both edges and inside (the same convolution on the input columns they read)."""
    r = subprocess.run([sys.executable, "-c", _BIG], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-3000:]
    tile, grew = map(int, r.stdout.split())
    assert tile == (16 << 20) // (961 * 8) // 64 * 64 and grew < 64, r.stdout


def test_tiled_convolutions_under_asan_and_ubsan():
    """A third of the table (every path) on every variant, tiles of 1 and 7 pixels, in the library's ASan + UBSan
    build: a pointer built past a tile, or a microkernel reading past one, aborts."""
    from support.cpu_build import asan_env

    r = subprocess.run([sys.executable, "-m", "cpu.test_conv_tiles"], cwd=ROOT / "tests", env=asan_env(),
                       capture_output=True, text=True, timeout=600)
    where = f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, where
    assert r.returncode == 0 and "tiled under asan: ok" in r.stdout and "asan" in r.stdout, where


if __name__ == "__main__":  # the ASan run above
    print("library:", cpu.lib()._name)
    for i, (cid, kw) in enumerate(TABLE):
        for isa in cpu.available_variants():
            check_case(cid, kw, isa, (1, 7)[i % 2], threads=(2,))
    print("tiled under asan: ok")
