"""The numpy reference equals ONNX Runtime's QLinearConv and QLinearMatMul bit for bit.

ORT implements (x, w, y) in {(u8, u8, u8), (u8, s8, u8), (s8, s8, s8)}. Its x86 u8 x s8 kernels
(without VNNI) add pairs of products in saturating int16 (vpmaddubsw), so with full-range operands
they are not exact int32 arithmetic; vkinfer keeps exact int32 (the ONNX definition, and ORT's
own result on ARM and VNNI). Exactness against ORT is therefore tested for u8 x s8 with 7-bit
weights (ORT's own `reduce_range` remedy), and the full-range deviation is pinned down separately.
"""

import numpy as np
import ort_oracle as oo
from cases import conv_case, qrand
from hypothesis import given, settings
from hypothesis import strategies as st
from test_matmul_vulkan import mm_case

from vkinfer import ops
from vkinfer.reference.requant import multiplier, requantize

ORT_TYPES = [("u8", "u8"), ("u8", "s8"), ("s8", "s8")]


def _seven_bit(case: dict, key: str, zp_key: str) -> None:
    """Restrict u8 x s8 weights to [-64, 63] so ORT's int16 pair sums cannot saturate."""
    if case[key].dtype == np.int8 and (case.get("x", case.get("a")).dtype == np.uint8):
        case[key] = np.clip(case[key], -64, 63).astype(np.int8)
        case[zp_key] = np.clip(case[zp_key], -64, 63).astype(np.int8)


def _ort_conv(c):
    return oo.qlinear_conv(c["x"], c["x_scale"], c["x_zero_point"], c["w"], c["w_scale"], c["w_zero_point"],
                           c["y_scale"], c["y_zero_point"], c["bias"], c["strides"], c["pads"], c["dilations"],
                           c["group"])


@st.composite
def ort_conv_case(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    g = draw(st.sampled_from([1, 1, 2, 3, "dw"]))
    cg = draw(st.integers(1, 8))
    if g == "dw":
        g = c = m = draw(st.integers(1, 20))
    else:
        c, m = g * cg, g * draw(st.integers(1, 8))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    d = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, (kh - 1) * d[0] + 1 - pads[0] - pads[2]), 12))
    w = draw(st.integers(max(1, (kw - 1) * d[1] + 1 - pads[1] - pads[3]), 12))
    xt, wt = draw(st.sampled_from(ORT_TYPES))
    case = conv_case(rng, n=draw(st.integers(1, 2)), c=c, h=h, w=w, m=m, kh=kh, kw=kw,
                     strides=(draw(st.integers(1, 3)), draw(st.integers(1, 3))), pads=pads, dilations=d, group=g,
                     xt=xt, wt=wt, per_channel=draw(st.booleans()),
                     mode=draw(st.sampled_from(["random", "saturate", "ties"])))
    _seven_bit(case, "w", "w_zero_point")
    return case


@settings(max_examples=150, deadline=None)
@given(ort_conv_case())
def test_conv_reference_equals_ort(case):
    np.testing.assert_array_equal(ops.qlinear_conv(**case, device="reference"), _ort_conv(case))


def test_conv_reference_equals_ort_on_large_accumulators():
    rng = np.random.default_rng(11)
    for xt, wt in [("u8", "u8"), ("s8", "s8")]:
        for kh, c in [(1, 600), (3, 64)]:
            case = conv_case(rng, c=c, h=5, w=5, m=6, kh=kh, xt=xt, wt=wt, mode="bigacc")
            np.testing.assert_array_equal(ops.qlinear_conv(**case, device="reference"), _ort_conv(case))


def _ort_mm(c):
    return oo.qlinear_matmul(c["a"], c["a_scale"], c["a_zero_point"], c["b"], c["b_scale"], c["b_zero_point"],
                             c["y_scale"], c["y_zero_point"])


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 3), st.integers(1, 30), st.integers(1, 80), st.integers(1, 30), st.booleans(),
       st.sampled_from(ORT_TYPES), st.booleans(), st.integers(0, 2**32 - 1))
def test_matmul_reference_equals_ort(batch, m, k, n, batched_b, types, per_column, seed):
    rng = np.random.default_rng(seed)
    c = mm_case(rng, (batch, m, k), (batch, k, n) if batched_b else (k, n), *types, per_column=per_column,
                mode="random" if seed % 3 else "saturate")
    _seven_bit(c, "b", "b_zero_point")
    np.testing.assert_array_equal(ops.qlinear_matmul(**c, device="reference"), _ort_mm(c))


def test_ort_u8s8_full_range_is_exact_or_int16_saturated():
    """Document ORT's deviation: on full-range u8 x s8, ORT gives either the exact result (ARM,
    VNNI) or exactly the result of saturating int16 pair sums; vkinfer always gives the exact one."""
    rng = np.random.default_rng(5)
    a, b = qrand(rng, (16, 64), np.uint8), qrand(rng, (64, 24), np.int8)
    args = dict(a=a, a_scale=np.float32(0.02), a_zero_point=np.uint8(10), b=b, b_scale=np.float32(0.003),
                b_zero_point=np.int8(0), y_scale=np.float32(0.3), y_zero_point=np.uint8(128))
    exact = ops.qlinear_matmul(**args, device="reference")
    p = a.astype(np.int64)[:, :, None] * b.astype(np.int64)[None]
    acc = np.clip(p[:, 0::2] + p[:, 1::2], -32768, 32767).sum(1) - 10 * b.astype(np.int64).sum(0)[None]
    saturated = requantize(acc.astype(np.int32), multiplier(np.float32(0.02), np.float32(0.003), np.float32(0.3)),
                           128, 0, 255).astype(np.uint8)
    assert not np.array_equal(exact, saturated)  # the operands really are in the saturating range
    got = _ort_mm(args)
    assert np.array_equal(got, exact) or np.array_equal(got, saturated)
