"""qlinear_conv on Vulkan equals the numpy reference exactly, over the edge-case table and random shapes."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from support.cases import conv_args, conv_case, conv_table

from vkinfer import ops
from vkinfer.reference._spec import conv_spec
from vkinfer.reference.qlinear_conv import conv_accumulate
from vkinfer.vulkan import KERNELS, choose_kernel

TABLE = conv_table()


@pytest.mark.parametrize("name,case", TABLE, ids=[n for n, _ in TABLE])
def test_table(name, case):
    ref = ops.qlinear_conv(**case, device="reference")
    out = ops.qlinear_conv(**case, device="vulkan")
    assert out.dtype == ref.dtype and out.shape == ref.shape
    np.testing.assert_array_equal(out, ref)


GEMM_CASES = [(n, c) for n, c in TABLE if choose_kernel(conv_spec(**c)) == "qlinear_gemm"]


@pytest.mark.parametrize("tile", ["shared", "direct"])
def test_gemm_cases_with_each_tile_variant(tile, monkeypatch):
    """qlinear_gemm's shared-memory and direct paths both run here, whatever the device's default."""
    monkeypatch.setenv("VKINFER_GEMM_TILE", tile)
    assert len(GEMM_CASES) >= 20
    for name, case in GEMM_CASES:
        np.testing.assert_array_equal(ops.qlinear_conv(**case), ops.qlinear_conv(**case, device="reference"), name)


def test_table_covers_every_kernel_and_edge():
    kernels = {choose_kernel(conv_spec(**c)) for _, c in TABLE}
    assert kernels == set(KERNELS)
    # Outputs saturate at both ends somewhere, and large-K cases really pass 2**24.
    lo_hit = hi_hit = False
    for name, c in TABLE:
        s = conv_spec(**c)
        y = ops.qlinear_conv(**c, device="reference")
        lo_hit |= bool((y == np.iinfo(y.dtype).min).any()) and "saturate" in name
        hi_hit |= bool((y == np.iinfo(y.dtype).max).any()) and "saturate" in name
        if name.startswith("bigacc"):
            assert np.abs(conv_accumulate(s).astype(np.int64)).max() > 2**24, name
    assert lo_hit and hi_hit
    # The depthwise 3x3 rows use every input/weight type pair.
    dw_types = {(c["x"].dtype, c["w"].dtype) for name, c in TABLE if name.startswith("dw3x3-")}
    assert dw_types == {(np.dtype(a), np.dtype(b)) for a in (np.uint8, np.int8) for b in (np.uint8, np.int8)}


def test_ties_really_tie():
    """Power-of-two scales put float32(acc) * m exactly on .5 for many outputs: the rounding rule matters."""
    hits = 0
    for name, c in TABLE:
        if "ties" in name:
            s = conv_spec(**c)
            f = conv_accumulate(s).astype(np.float32) * s.out.m[None, :, None, None]
            hits += int(np.sum(f - np.floor(f) == 0.5))
    assert hits > 100


def test_repeat_calls_and_cache_give_same_bits():
    """One cached layer called again with new inputs, the same input twice, and the first input once more
    after the others: every result is the reference's, bit for bit."""
    rng = np.random.default_rng(7)
    c = conv_case(rng, c=16, h=9, w=9, m=16, kh=3, pads=(1, 1, 1, 1))
    inputs = [c["x"]] + [rng.integers(0, 256, c["x"].shape).astype(np.uint8) for _ in range(3)]
    for x in [*inputs, inputs[-1], inputs[0]]:
        want = ops.qlinear_conv(**{**c, "x": x}, device="reference")
        got = ops.qlinear_conv(**{**c, "x": x})
        assert got.dtype == want.dtype == np.uint8 and got.shape == want.shape == (1, 16, 9, 9)
        np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_args())
def test_random_shapes(case):
    np.testing.assert_array_equal(ops.qlinear_conv(**case), ops.qlinear_conv(**case, device="reference"))


def test_concurrent_callers_get_their_own_answers():
    """Threads sharing one cached layer (and one queue) never see each other's data."""
    import concurrent.futures

    rng = np.random.default_rng(12)
    base = conv_case(rng, c=16, h=15, w=15, m=24, kh=3, pads=(1, 1, 1, 1))
    inputs = [rng.integers(0, 256, base["x"].shape).astype(np.uint8) for _ in range(24)]
    other = conv_case(rng, c=8, h=9, w=9, m=8, kh=1)

    def call(i):
        if i % 3 == 0:
            return ops.qlinear_conv(**other)
        return ops.qlinear_conv(**{**base, "x": inputs[i]})

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(call, range(len(inputs))))
    for i, y in enumerate(results):
        want = other if i % 3 == 0 else {**base, "x": inputs[i]}
        np.testing.assert_array_equal(y, ops.qlinear_conv(**want, device="reference"))
