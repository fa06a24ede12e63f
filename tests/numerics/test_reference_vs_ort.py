"""The numpy reference equals ONNX Runtime's QLinearConv and QLinearMatMul bit for bit.

ORT implements (x, w, y) in {(u8, u8, u8), (u8, s8, u8), (s8, s8, s8)}. Its u8 x s8 kernels are exact int32
arithmetic on ARM and on x86 with VNNI, but on x86 with AVX2 and no VNNI they add pairs of products in saturating
int16 (vpmaddubsw), so with full-range operands they are not exact; vkinfer keeps exact int32 (the ONNX definition)
everywhere. `ort_oracle.u8s8_behaviour()` measures which kind of ORT this machine has: where it is exact, u8 x s8 is
compared at full range; where it saturates, with 7-bit weights (ORT's own `reduce_range` remedy). The full-range
deviation is pinned down for both behaviours on every machine (ORT's own on this one, the other computed in numpy),
and for real under an emulated AVX2-only CPU (qemu).
"""

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import ort_oracle as oo
from support.cases import conv_case, mm_case, qrand

from vkinfer import ops
from vkinfer.reference.requant import multiplier, requantize

ORT_TYPES = [("u8", "u8"), ("u8", "s8"), ("s8", "s8")]


def _seven_bit(case: dict, key: str, zp_key: str) -> None:
    """Where this machine's ORT saturates, restrict u8 x s8 weights to [-64, 63] so its int16 pair sums cannot."""
    if oo.u8s8_behaviour() == oo.EXACT:
        return
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


def _full_range_u8s8_matmul() -> tuple[dict, np.ndarray, np.ndarray]:
    """Full-range u8 x s8 QLinearMatMul operands (both zero points nonzero, odd K) and its exact and int16-pair
    saturated outputs."""
    rng = np.random.default_rng(5)
    a, b = qrand(rng, (16, 65), np.uint8), qrand(rng, (65, 24), np.int8)
    args = dict(a=a, a_scale=np.float32(0.02), a_zero_point=np.uint8(10), b=b, b_scale=np.float32(0.003),
                b_zero_point=np.int8(-3), y_scale=np.float32(0.3), y_zero_point=np.uint8(128))
    m = multiplier(np.float32(0.02), np.float32(0.003), np.float32(0.3))
    exact, saturated = (requantize(acc.astype(np.int32), m, 128, 0, 255).astype(np.uint8)
                        for acc in (oo.u8s8_exact(a, b, 10, -3), oo.u8s8_pair_saturated(a, b, 10, -3)))
    return args, exact, saturated


@pytest.mark.parametrize("source", oo.SOURCES)
def test_ort_u8s8_full_range_is_exact_or_int16_saturated(source):
    """ORT's full-range u8 x s8 QLinearMatMul is the exact result (ARM, VNNI) or exactly that of saturating int16
    pair sums (x86 AVX2 without VNNI), nothing else; vkinfer gives the exact one on every device. `source` runs the
    same check on ORT's result here and on both behaviours computed in numpy."""
    args, exact, saturated = _full_range_u8s8_matmul()
    np.testing.assert_array_equal(ops.qlinear_matmul(**args, device="reference"), exact)
    behaviour, got = oo.u8s8_check(source, lambda: _ort_mm(args), exact, saturated)
    assert behaviour == oo.EXACT or not np.array_equal(got, exact)
    for device in ["cpu", "vulkan"]:
        np.testing.assert_array_equal(ops.qlinear_matmul(**args, device=device), exact, err_msg=device)


def test_u8s8_check_fails_on_anything_else():
    """The classification cannot pass vacuously: a result one step off both behaviours, and operands that never
    saturate, are failures."""
    args, exact, saturated = _full_range_u8s8_matmul()
    off = exact.copy()
    off[3, 5] ^= 1
    with pytest.raises(AssertionError, match="neither exact nor"):
        oo.u8s8_behaviour_of(off, exact, saturated)
    with pytest.raises(AssertionError, match="tell nothing"):
        oo.u8s8_behaviour_of(exact, exact, exact)
    with pytest.raises(AssertionError, match="where this machine"):
        other = "numpy-saturating" if oo.u8s8_behaviour() == oo.EXACT else "numpy-exact"
        oo.u8s8_check("onnxruntime", lambda: {"numpy-exact": exact, "numpy-saturating": saturated}[other], exact,
                      saturated)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="emulates an x86 CPU for an x86 Python")
def test_ort_saturates_for_real_on_an_avx2_only_cpu():
    """The saturating branch against the real thing on any x86 host: ORT under qemu's user-mode emulation of a
    Haswell (AVX2, no VNNI: MLAS dispatches on CPUID) gives exactly the int16-pair saturated MatMulInteger, and its
    QLinearMatMul on the full-range operands above equals `saturated`."""
    qemu = shutil.which("qemu-x86_64-static") or shutil.which("qemu-x86_64")
    assert qemu, "qemu-user-static is missing: apt-get install qemu-user-static (make setup installs it)"
    code = ("import numpy as np\nfrom support import ort_oracle as oo\n"
            "from numerics import test_reference_vs_ort as t\n"
            "args, exact, saturated = t._full_range_u8s8_matmul()\n"
            "print(oo.probe_u8s8(), oo.u8s8_behaviour_of(t._ort_mm(args), exact, saturated))")
    tests = str(Path(__file__).parents[1])  # holds the support package
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([qemu, "-cpu", "Haswell", sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == [oo.SATURATING, oo.SATURATING], r.stdout
