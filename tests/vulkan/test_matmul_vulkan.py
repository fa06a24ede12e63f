"""qlinear_matmul on Vulkan equals the numpy reference exactly (2-D, batched, broadcast, per column)."""

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cases import MM_SHAPES, mm_case

from vkinfer import ops
from vkinfer._vk import get_device
from vkinfer.reference._spec import matmul_spec
from vkinfer.vulkan import QLinearMatMul


@pytest.mark.parametrize("at,bt", [("u8", "s8"), ("u8", "u8"), ("s8", "s8"), ("s8", "u8")])
@pytest.mark.parametrize("sa,sb", MM_SHAPES, ids=[f"{a}x{b}" for a, b in MM_SHAPES])
def test_table(sa, sb, at, bt):
    # A seed that is the same in every process (hash() of a str changes with PYTHONHASHSEED).
    rng = np.random.default_rng(zlib.crc32(repr((sa, sb, at, bt)).encode()))
    for per_column, mode in [(True, "random"), (False, "saturate")]:
        c = mm_case(rng, sa, sb, at, bt, per_column, mode)
        ref = ops.qlinear_matmul(**c, device="reference")
        assert ref.shape == np.broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
        np.testing.assert_array_equal(ops.qlinear_matmul(**c), ref)


@pytest.mark.parametrize("tile", ["shared", "direct"])
def test_each_gemm_tile_variant(tile, monkeypatch):
    monkeypatch.setenv("VKINFER_GEMM_TILE", tile)
    rng = np.random.default_rng(9)
    for sa, sb in MM_SHAPES:
        for at, bt in [("u8", "s8"), ("s8", "u8")]:
            c = mm_case(rng, sa, sb, at, bt, per_column=True)
            np.testing.assert_array_equal(ops.qlinear_matmul(**c), ops.qlinear_matmul(**c, device="reference"))


def test_table_covers_both_matmul_kernels():
    rng = np.random.default_rng(0)
    kernels = {QLinearMatMul(matmul_spec(**mm_case(rng, sa, sb)), get_device()).kernel for sa, sb in MM_SHAPES}
    assert kernels == {"qlinear_gemv", "qlinear_gemm"}


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 40), st.integers(1, 70), st.integers(1, 40), st.booleans(),
       st.sampled_from([("u8", "s8"), ("u8", "u8"), ("s8", "s8"), ("s8", "u8")]), st.integers(0, 2**32 - 1))
def test_random_shapes(batch, m, k, n, batched_b, types, seed):
    rng = np.random.default_rng(seed)
    c = mm_case(rng, (batch, m, k), (batch, k, n) if batched_b else (k, n), *types, per_column=seed % 2 == 0)
    np.testing.assert_array_equal(ops.qlinear_matmul(**c), ops.qlinear_matmul(**c, device="reference"))
