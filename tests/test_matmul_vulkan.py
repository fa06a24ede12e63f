"""qlinear_matmul on Vulkan equals the numpy reference exactly (2-D, batched, broadcast, per column)."""

import zlib

import numpy as np
import pytest
from cases import QT, qrand
from hypothesis import given, settings
from hypothesis import strategies as st

from vkinfer import ops
from vkinfer._vk import get_device
from vkinfer.reference._spec import matmul_spec
from vkinfer.vulkan import QLinearMatMul


def mm_case(rng, a_shape, b_shape, at="u8", bt="s8", per_column=True, mode="random"):
    adt, bdt = QT[at], QT[bt]
    k, n = b_shape[-2], b_shape[-1]
    a, b = qrand(rng, a_shape, adt), qrand(rng, b_shape, bdt)
    azp = adt(qrand(rng, (), adt))
    bzp = qrand(rng, (n,), bdt) if per_column else bdt(qrand(rng, (), bdt))
    a_scale = np.float32(rng.uniform(0.005, 0.05))
    b_scale = rng.uniform(0.001, 0.02, n).astype(np.float32) if per_column else np.float32(0.01)
    typical = np.sqrt(k) * 128 * 100 * float(a_scale) * float(np.mean(b_scale))
    y_scale = np.float32(typical / (64 if mode == "random" else 4096))
    ydt = QT[at]
    return dict(a=a, a_scale=a_scale, a_zero_point=azp, b=b, b_scale=b_scale, b_zero_point=bzp,
                y_scale=y_scale, y_zero_point=ydt(qrand(rng, (), ydt)))


SHAPES = [
    ((1, 1), (1, 1)), ((1, 3), (3, 1)), ((5, 7), (7, 9)), ((17, 33), (33, 15)), ((33, 64), (64, 17)),
    ((64, 5), (5, 64)), ((4, 1280), (1280, 1000)), ((2, 3, 8, 16), (16, 4)),  # batch, shared b
    ((3, 9, 20), (3, 20, 11)),  # batched b
    ((2, 1, 6, 7), (1, 3, 7, 5)),  # broadcast both ways
    ((40, 2100), (2100, 6)),  # |acc| can pass 2**24
]


@pytest.mark.parametrize("at,bt", [("u8", "s8"), ("u8", "u8"), ("s8", "s8"), ("s8", "u8")])
@pytest.mark.parametrize("sa,sb", SHAPES, ids=[f"{a}x{b}" for a, b in SHAPES])
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
    for sa, sb in SHAPES:
        for at, bt in [("u8", "s8"), ("s8", "u8")]:
            c = mm_case(rng, sa, sb, at, bt, per_column=True)
            np.testing.assert_array_equal(ops.qlinear_matmul(**c), ops.qlinear_matmul(**c, device="reference"))


def test_table_covers_both_matmul_kernels():
    rng = np.random.default_rng(0)
    kernels = {QLinearMatMul(matmul_spec(**mm_case(rng, sa, sb)), get_device()).kernel for sa, sb in SHAPES}
    assert kernels == {"qlinear_gemv", "qlinear_gemm"}


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 40), st.integers(1, 70), st.integers(1, 40), st.booleans(),
       st.sampled_from([("u8", "s8"), ("u8", "u8"), ("s8", "s8"), ("s8", "u8")]), st.integers(0, 2**32 - 1))
def test_random_shapes(batch, m, k, n, batched_b, types, seed):
    rng = np.random.default_rng(seed)
    c = mm_case(rng, (batch, m, k), (batch, k, n) if batched_b else (k, n), *types, per_column=seed % 2 == 0)
    np.testing.assert_array_equal(ops.qlinear_matmul(**c), ops.qlinear_matmul(**c, device="reference"))
