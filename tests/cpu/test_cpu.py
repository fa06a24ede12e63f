"""device="cpu": the C fallback equals the reference exactly, for every ISA variant this CPU runs
(vkinfer.cpu.variants(), the same list the benchmark iterates) and for 1, 2 and 3 threads."""

import concurrent.futures
import ctypes

import numpy as np
import pytest
from hypothesis import given, settings
from support.cases import MM_SHAPES, conv_args, conv_case, conv_table, mm_case
from support.cpu_vectors import limit_weights, seven_bit_cases

from vkinfer import cpu, ops
from vkinfer.reference._spec import conv_spec, matmul_spec

TABLE = conv_table()
VARIANTS = cpu.available_variants()


def test_variants_listed_and_best_is_default(monkeypatch):
    names = [n for n, _ in cpu.variants()]
    assert names[0] == "scalar" and "scalar" in VARIANTS
    assert cpu.default_variant() == VARIANTS[-1]
    monkeypatch.setenv("VKINFER_CPU_ISA", "scalar")
    assert cpu.default_variant() == "scalar"
    monkeypatch.setenv("VKINFER_CPU_ISA", "no-such-isa")
    with pytest.raises(ValueError, match="no-such-isa"):
        cpu.default_variant()


@pytest.mark.parametrize("isa", VARIANTS)
def test_table_every_variant_and_thread_count(isa):
    bad = []
    for name, case in TABLE:
        ref = ops.qlinear_conv(**case, device="reference")
        for threads in (1, 2, 3):
            y = ops.qlinear_conv(**case, device=f"cpu:{isa}", threads=threads)
            if y.dtype != ref.dtype or not np.array_equal(y, ref):
                bad.append((name, threads, int(np.count_nonzero(y != ref))))
    assert not bad, bad[:10]


@pytest.mark.parametrize("isa", VARIANTS)
def test_matmul_every_variant(isa):
    rng = np.random.default_rng(3)
    for sa, sb in MM_SHAPES:
        for at, bt in [("u8", "s8"), ("u8", "u8"), ("s8", "s8"), ("s8", "u8")]:
            c = mm_case(rng, sa, sb, at, bt, per_column=True)
            np.testing.assert_array_equal(ops.qlinear_matmul(**c, device=f"cpu:{isa}", threads=2),
                                          ops.qlinear_matmul(**c, device="reference"))


@settings(max_examples=80, deadline=None)
@given(conv_args())
def test_random_shapes(case):
    ref = ops.qlinear_conv(**case, device="reference")
    for isa in VARIANTS:
        np.testing.assert_array_equal(ops.qlinear_conv(**case, device=f"cpu:{isa}", threads=3), ref)


def test_env_forces_variant_and_threads(monkeypatch):
    rng = np.random.default_rng(4)
    case = conv_case(rng, c=8, h=9, w=9, m=8, kh=3, pads=(1, 1, 1, 1))
    monkeypatch.setenv("VKINFER_CPU_ISA", "scalar")
    monkeypatch.setenv("VKINFER_CPU_THREADS", "3")
    assert cpu.default_threads() == 3
    op = cpu.QLinearConv(conv_spec(**case))
    assert op.isa == "scalar"
    np.testing.assert_array_equal(op.run(case["x"]), ops.qlinear_conv(**case, device="reference"))


def test_bad_cpu_arguments():
    case = conv_case(np.random.default_rng(5), c=4, h=5, w=5, m=4, kh=3)
    with pytest.raises(ValueError, match="not in this build"):
        ops.qlinear_conv(**case, device="cpu:sse9")
    with pytest.raises(ValueError, match="threads must be a positive integer"):
        ops.qlinear_conv(**case, device="cpu", threads=0)
    with pytest.raises(ValueError, match="device must be"):
        ops.qlinear_conv(**case, device="reference:1")


def test_concurrent_callers_share_layers_safely():
    rng = np.random.default_rng(6)
    base = conv_case(rng, c=16, h=15, w=15, m=24, kh=3, pads=(1, 1, 1, 1))
    inputs = [rng.integers(0, 256, base["x"].shape).astype(np.uint8) for _ in range(16)]
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(lambda x: ops.qlinear_conv(**{**base, "x": x}, device="cpu", threads=2), inputs))
    for x, y in zip(inputs, outs, strict=True):
        np.testing.assert_array_equal(y, ops.qlinear_conv(**{**base, "x": x}, device="reference"))


def test_qlinear_add_in_c_equals_reference():
    """The C QLinearAdd (residual adds off the reference device) equals the reference, which equals ORT."""
    from vkinfer.reference.qlinear_add import qlinear_add

    rng = np.random.default_rng(8)
    for i in range(300):
        dt = (np.uint8, np.int8)[i % 2]
        info = np.iinfo(dt)
        shape = [(1, 16, 7, 7), (2, 3, 5, 1), (1, 1), (37,)][i % 4]  # (.., 1) innermost swaps the operands
        a, b = (rng.integers(info.min, info.max + 1, shape).astype(dt) for _ in range(2))
        scales = [np.float32(2.0 ** rng.integers(-8, 0)) if i % 3 == 0 else np.float32(rng.uniform(1e-3, 0.1))
                  for _ in range(3)]
        zps = [dt(rng.integers(info.min, info.max + 1)) for _ in range(3)]
        args = (a, scales[0], zps[0], b, scales[1], zps[1], scales[2], zps[2])
        np.testing.assert_array_equal(cpu.qlinear_add(*args), qlinear_add(*args))


@pytest.mark.parametrize("isa", ["default", "scalar"])
def test_qlinear_add_in_c_every_pair_of_values(isa, monkeypatch):
    """Every (a, b) byte pair through the C QLinearAdd, the AVX2+FMA body (when the CPU has it) and the
    scalar loop ($VKINFER_CPU_ISA=scalar), against the reference: ties (power-of-two scales) included."""
    from vkinfer.reference.qlinear_add import qlinear_add

    if isa == "scalar":
        monkeypatch.setenv("VKINFER_CPU_ISA", "scalar")
    rng = np.random.default_rng(9)
    for dt in (np.uint8, np.int8):
        a = np.repeat(np.arange(256, dtype=np.uint8), 256).view(dt)
        b = np.tile(np.arange(256, dtype=np.uint8), 256).view(dt)
        info = np.iinfo(dt)
        for i in range(6):
            scales = [np.float32(2.0 ** rng.integers(-8, 1)) if i % 2 else np.float32(rng.uniform(1e-3, 0.2))
                      for _ in range(3)]
            zps = [dt(rng.integers(info.min, info.max + 1)) for _ in range(3)]
            args = (a[: 65536 - i], scales[0], zps[0], b[: 65536 - i], scales[1], zps[1], scales[2], zps[2])
            np.testing.assert_array_equal(cpu.qlinear_add(*args), qlinear_add(*args))


def _kernel(conv) -> str:
    """vki_conv_kernel of a prepared C convolution: the variant, or e.g. "avx2-u8s8" (7-bit weights)."""
    so = cpu.lib()
    so.vki_conv_kernel.argtypes = [ctypes.c_void_p]
    so.vki_conv_kernel.restype = ctypes.c_char_p
    return so.vki_conv_kernel(conv.handle).decode()


# Which variants have u8s8 kernels (internal.h), for which exact weight range and layer kinds: written from the
# kernel files' comments (as cpu_fallback/tests/conv_driver.c's table), not read from the library.
U8S8 = {"avx2": (-64, 64, {"gemm"}), "avx512vnni": (-128, 127, {"gemm", "dw"}), "neon_dot": (-128, 127, {"gemm", "dw"})}


def _u8s8_expected(isa: str, case: dict) -> bool:
    """Whether a convolution `case` must run on the variant's u8s8 kernel: every (w - w_zp) in its range."""
    if isa not in U8S8:
        return False
    lo, hi, kinds = U8S8[isa]
    w = case["w"].astype(np.int32)
    zp = np.asarray(case["w_zero_point"], np.int32)
    d = w - (zp.reshape(-1, *([1] * (w.ndim - 1))) if zp.ndim else zp)
    group = case.get("group", 1)
    depthwise = group > 1 and w.shape[1] == 1 and w.shape[0] == group
    return ("dw" if depthwise else "gemm") in kinds and bool(d.min() >= lo and d.max() <= hi)


@pytest.mark.parametrize("isa", VARIANTS)
def test_seven_bit_weights_fast_path_and_fallback(isa, monkeypatch):
    """Layers whose every |w - w_zp| <= 64 take AVX2's u8s8 kernel (VPMADDUBSW), 65 falls back to the
    int16 kernel, and both equal the reference for 1-3 threads: odd K, M not a multiple of 16, uint8
    weights with per-channel zero points, int8 activations, the largest pair sums. $VKINFER_CPU_U8S8=0
    turns the fast path off. Variants with full-range u8s8 kernels (VPDPBUSD, SDOT) take theirs for both."""
    monkeypatch.delenv("VKINFER_CPU_U8S8", raising=False)
    rng = np.random.default_rng(11)
    cases = seven_bit_cases()
    for kh, c, m, xt, wt in [(1, 9, 5, "s8", "u8"), (1, 51, 33, "u8", "u8"), (3, 6, 17, "s8", "s8")]:
        base = conv_case(rng, c=c, h=5, w=4, m=m, kh=kh, pads=(1, 1, 1, 1) if kh == 3 else (0, 0, 0, 0),
                         xt=xt, wt=wt)
        cases += [(f"py-w7-k{kh}-c{c}", limit_weights(rng, base)),
                  (f"py-w7over-k{kh}-c{c}", limit_weights(rng, base, over=True))]
    seen = set()
    for name, case in cases:
        ref = ops.qlinear_conv(**case, device="reference")
        op = cpu.QLinearConv(conv_spec(**case), isa)
        kernel = _kernel(op.conv)
        assert kernel == (f"{isa}-u8s8" if _u8s8_expected(isa, case) else isa), (name, kernel)
        seen.add(kernel)
        for threads in (1, 2, 3):
            np.testing.assert_array_equal(op.run(case["x"], threads), ref, err_msg=f"{name} threads={threads}")
    if isa == "avx2":
        assert seen == {"avx2", "avx2-u8s8"}, seen
        monkeypatch.setenv("VKINFER_CPU_U8S8", "0")
        name, case = cases[0]
        op = cpu.QLinearConv(conv_spec(**case), isa)
        assert _kernel(op.conv) == "avx2"
        np.testing.assert_array_equal(op.run(case["x"], 2), ops.qlinear_conv(**case, device="reference"))


def test_seven_bit_matmul():
    """QLinearMatMul (a 1x1 convolution per B) with 7-bit B takes the same fast path on AVX2."""
    rng = np.random.default_rng(12)
    for (sa, sb), bt in [(((7, 45), (45, 19)), "s8"), (((3, 130), (130, 40)), "u8")]:
        c = mm_case(rng, sa, sb, "u8", bt, per_column=True)
        info = np.iinfo(c["b"].dtype)
        zp = rng.integers(info.min + 64, info.max - 63, sb[-1])
        d = rng.integers(-64, 65, sb)
        d[0, 0], d[-1, -1] = 64, -64
        c = {**c, "b": (zp + d).astype(c["b"].dtype), "b_zero_point": zp.astype(c["b"].dtype)}
        op = cpu.QLinearMatMul(matmul_spec(**c))
        if op.isa == "avx2":
            assert _kernel(op.convs[0]) == "avx2-u8s8"
        np.testing.assert_array_equal(ops.qlinear_matmul(**c, device="cpu", threads=3),
                                      ops.qlinear_matmul(**c, device="reference"))
