"""The `qmatmul` operator (two-activation QLinearMatMul, cpu_fallback/src/ops/qmatmul.c) on every code path this
CPU runs, against numpy's exact definition: the blocked path's u8s8 kernel (B's every b - b_zp inside the variant's
int8 range, checked per run on the data), its int16 kernel (any other B, and the fall back after a block out of
range), the direct path (m <= 4 on x86: B read unpacked), the interleaved path (heads innermost in every
operand). Shapes cross the tiles' edges (m, n, k around 1, 7, 16, 32, 64), operands sit at any
byte strides (heads interleaved as the NHWC form lays out attention, transposed B, broadcast batch axes). Each check
runs here (the best variant) and in subprocesses with VKINFER_CPU_ISA=avx2, =scalar and VKINFER_CPU_U8S8=0.
ORT's bits for these cases are tests/ops/test_qlinear_matmul.py's (the same arithmetic on every device)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vkinfer.cpu as vcpu
from vkinfer.cpu.graph import NativeGraph, Ref

TESTS = Path(__file__).resolve().parents[1]

# (m, k, n, batch, a_bcast, b_bcast, B distribution): distributions "full" (every byte: int16 kernel on AVX-512),
# "fit" (b - b_zp spans exactly [-128, 127]: u8s8), "small" (softmax-like, zero point 0), "over_last" (fits but
# one byte 128 above b_zp in the last column block: u8s8 abandoned after packing the others), "mixed" (batch 0
# fits, the others not).
CASES = [
    (1, 1, 1, (), False, False, "fit"),
    (7, 16, 31, (), False, False, "full"),
    (16, 31, 32, (), False, False, "fit"),
    (31, 32, 33, (2,), False, False, "small"),
    (32, 33, 64, (3,), False, True, "fit"),
    (33, 64, 65, (2,), True, False, "full"),
    (64, 65, 7, (2, 2), False, False, "fit"),
    (65, 7, 16, (), False, False, "over_last"),
    (57, 5, 100, (3,), False, False, "over_last"),
    (14, 64, 16, (2,), False, False, "small"),
    (15, 3, 17, (), False, False, "fit"),
    (60, 40, 70, (4,), False, False, "mixed"),
    (400, 32, 40, (2,), False, False, "mixed"),
    # the interleaved path's (every operand heads-innermost, "heads" below): 4 heads (SSE2 / NEON split and join,
    # lengths past and short of 16), 3 heads (the byte loop), rows over QMM_CHUNK
    (100, 37, 45, (4,), False, False, "mixed"),
    (7, 19, 3, (4,), False, False, "fit"),
    (60, 16, 33, (3,), False, False, "full"),
    (1, 1, 1, (4,), False, False, "small"),
    (120, 64, 48, (4,), False, False, "small"),
    # k past 256: the SSE2 packing's uint16 column sums flushed (bytes up to 255)
    (9, 530, 64, (2,), False, False, "fit"),
    (5, 300, 40, (4,), False, False, "mixed"),
    # m <= 4: the direct path on x86 (B unpacked; contiguous per batch, or heads-interleaved at 2 and 4 heads):
    # k odd / 1 / past 256, column tails short of a strip (32 AVX-512, 16 AVX2), broadcast batch axes
    (1, 400, 100, (4,), False, False, "small"),
    (2, 33, 37, (2,), False, False, "full"),
    (3, 5, 64, (4,), False, False, "fit"),
    (4, 64, 65, (), False, False, "full"),
    (1, 1, 7, (2,), False, False, "fit"),
    (3, 17, 9, (2, 2), True, False, "full"),
    (4, 2, 48, (3,), False, True, "full"),
    (2, 301, 40, (4,), False, False, "fit"),
    # heads-interleaved with B past 2^17 bytes: at 2 threads each pack item splits its own head (SSE2 at 4 heads)
    (9, 300, 121, (4,), False, False, "mixed"),
    (9, 520, 130, (2,), False, False, "fit"),
]


def _store(x: np.ndarray, perm: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
    """x laid out in memory in axis order `perm`: (the contiguous storage, x's byte strides in it)."""
    store = np.ascontiguousarray(np.transpose(x, perm))
    return store, np.transpose(store, np.argsort(perm)).strides


def _b_values(rng, shape, bz: int, dist: str) -> np.ndarray:
    if dist == "full":
        return rng.integers(0, 256, shape).astype(np.uint8)
    if dist == "small":
        return rng.integers(0, 24, shape).astype(np.uint8)
    lo, hi = max(0, bz - 128), min(255, bz + 127)
    b = rng.integers(lo, hi + 1, shape).astype(np.uint8)
    b.reshape(-1, *shape[-2:])[:, 0, 0], b.reshape(-1, *shape[-2:])[:, -1, 0] = lo, hi
    if dist == "over_last" and bz + 128 <= 255:
        b[..., -1, -1] = bz + 128
    if dist == "mixed" and bz + 128 <= 255 and b.ndim > 2:
        b.reshape(-1, *shape[-2:])[1:, 0, -1] = bz + 128
    return b


def _want(a, b, az, bz, scale, yz, lo, hi):
    acc = np.einsum("...mk,...kn->...mn", a.astype(np.int64) - az, b.astype(np.int64) - bz)
    acc = ((acc + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
    f = np.clip(acc.astype(np.float32) * np.float32(scale), np.float32(lo - yz), np.float32(hi - yz))
    return (np.rint(f).astype(np.int32) + yz).astype(np.uint8)


def _run(case, seed: int, threads: int, interleave: bool | str) -> tuple[np.ndarray, np.ndarray, str]:
    m, k, n, batch, a_bc, b_bc, dist = case
    rng = np.random.default_rng(seed)
    nb = len(batch)
    az, yz = int(rng.integers(0, 256)), int(rng.integers(0, 256))
    bz = 0 if dist == "small" else int(rng.integers(60, 128)) if dist in ("over_last", "mixed") else \
        int(rng.integers(0, 256))
    ab = tuple(1 if a_bc and i == 0 else d for i, d in enumerate(batch))
    bb = tuple(1 if b_bc and i == nb - 1 else d for i, d in enumerate(batch))
    a = rng.integers(0, 256, (*ab, m, k)).astype(np.uint8)
    b = _b_values(rng, (*bb, k, n), bz, dist)
    lo, hi = int(rng.integers(0, 30)), int(rng.integers(220, 256))
    scale = np.float32(1.0 / (16.0 * max(k, 1) * 4)) if dist != "small" else np.float32(0.37)
    want = _want(a, b, az, bz, scale, yz, lo, hi)
    r = lambda x: tuple(range(x.ndim))  # noqa: E731
    # interleave: batch axes innermost in memory (NHWC attention: heads interleaved), B transposed; "heads": B's
    # batch axes innermost too (every operand in the NHWC form: qmatmul.c's interleaved path at one batch axis)
    pa = (*r(a)[nb:], *r(a)[:nb]) if interleave else r(a)
    pb = (*r(b)[nb:], *r(b)[:nb]) if interleave == "heads" else (*r(b)[:nb], nb + 1, nb) if interleave else r(b)
    py = (*r(want)[nb:], *r(want)[:nb]) if interleave else r(want)
    sa_, sa = _store(a, pa)
    sb_, sb = _store(b, pb)
    ys = np.full(want.size, 0xA5, np.uint8)
    _, sy = _store(np.zeros_like(want), py)
    strides = [sa[-2], sa[-1], sb[-2], sb[-1], sy[-2], sy[-1]]
    for i in range(nb):
        strides += [0 if a.shape[i] == 1 else sa[i], 0 if b.shape[i] == 1 else sb[i], sy[i]]
    g = NativeGraph(0, [max(sa_.size, 1), max(sb_.size, 1), ys.size])
    g.add("qmatmul", nb, np.asarray(batch or (1,), np.uint32), np.asarray(strides, np.uint64), m, k, n, az, bz,
          float(scale), yz, lo, hi, Ref(1, 0, sa_.size), Ref(2, 0, sb_.size), Ref(3, 0, ys.size))
    g.run([sa_.reshape(-1) if sa_.size else np.zeros(1, np.uint8),
           sb_.reshape(-1) if sb_.size else np.zeros(1, np.uint8), ys], threads)
    got = np.transpose(ys.reshape(np.transpose(want, py).shape), np.argsort(py))
    return got, want, g.ops()[0]


def check_paths(expect: str) -> None:
    """Every case, contiguous and interleaved, 1 and 2 threads; the blocked path runs `expect`'s variant."""
    for i, case in enumerate(CASES):
        for interleave in (False, True, "heads"):
            for threads in (1, 2):
                got, want, name = _run(case, 100 + i, threads, interleave)
                bad = np.argwhere(got != want)
                assert bad.size == 0, (case, interleave, threads, bad[:5], got[tuple(bad[0])], want[tuple(bad[0])])
                assert name == f"qmatmul:{expect}", (case, name)


def test_best_variant_equals_numpy():
    check_paths(vcpu.default_variant())


# The variants this CPU runs, chosen when the tests are collected (a variant it cannot run is not a test here: the
# NEON kernels run under qemu in the microkernel tests); the u8s8 kernel switched off on the best variant too, so
# every machine runs the int16 path.
PATHS = sorted({("avx2", "1"), ("scalar", "1"), ("avx512vnni", "0"), ("neon_dot", "0"),
                (vcpu.default_variant(), "0")} & {(v, u) for v in vcpu.available_variants() for u in ("0", "1")})


@pytest.mark.parametrize("isa,u8s8", PATHS)
def test_other_code_paths(isa, u8s8):
    """The same checks on another variant (VKINFER_CPU_ISA is read when the operator is added), or with the u8s8
    kernel switched off (VKINFER_CPU_U8S8=0: the int16 kernel for every B)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            f"from cpu.test_qmatmul_paths import check_paths\ncheck_paths({isa!r}); print('ok')")
    r = subprocess.run([sys.executable, "-c", code, str(TESTS)],
                       env=dict(os.environ, VKINFER_CPU_ISA=isa, VKINFER_CPU_U8S8=u8s8), capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]


def test_paths_under_asan_and_ubsan():
    """check_paths on the AddressSanitizer + UBSan build of the library, for the best variant and AVX2 (the
    interleaved path's SSE2 split and join, the SSE2 packing of both layouts, the byte loops at 3 heads)."""
    from support.cpu_build import run_sanitized

    for isa in sorted({vcpu.default_variant(), "avx2"} & set(vcpu.available_variants())):
        code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
                f"from cpu.test_qmatmul_paths import check_paths\ncheck_paths({isa!r}); print('ok')")
        run_sanitized([sys.executable, "-c", code, str(TESTS)], "ok", cwd=TESTS.parent,
                      env={"VKINFER_CPU_ISA": isa, "PYTHONPATH": str(TESTS.parent)})


# qmatmul_f32 (com.microsoft MatMulIntegerToFloat, cpu_fallback/src/ops/qmatmul_f32.c): (rows, k, n, bias, bytes).
# k odd and even around the pair grouping, n around the 16-column blocks and the 64-column work items, one k past
# 33,000 at the extreme bytes (the int32 sums wrap), "edge": only 0 and 255.
F32_CASES = [
    (1, 1, 1, False, "random"), (1, 2, 2, True, "random"), (3, 7, 17, True, "edge"), (2, 64, 15, False, "random"),
    (5, 300, 33, True, "random"), (4, 37, 64, False, "edge"), (2, 33, 65, True, "random"), (1, 1024, 2, True, "random"),
    (9, 16, 130, True, "edge"), (1, 40001, 3, False, "wrap"),
]


def _f32_run(case, seed: int, threads: int) -> tuple[np.ndarray, np.ndarray, str]:
    rows, k, n, bias, dist = case
    rng = np.random.default_rng(seed)
    if dist == "wrap":
        a, b, az, bz = np.full((rows, k), 255, np.uint8), np.zeros((k, n), np.uint8), 0, np.full(n, 255, np.uint32)
    else:
        pick = (lambda s: np.where(rng.random(s) < 0.5, 0, 255)) if dist == "edge" else (
            lambda s: rng.integers(0, 256, s))
        a, b = pick((rows, k)).astype(np.uint8), pick((k, n)).astype(np.uint8)
        az, bz = int(rng.integers(0, 256)), pick(n).astype(np.uint32)
    scale = rng.uniform(1e-4, 1e-2, n).astype(np.float32)
    bv = (rng.standard_normal(n) * 3).astype(np.float32) if bias else None
    # QGemm's int32 C on the cases of odd k (the full int32 range: the start wraps with the sums)
    cv = rng.integers(-2 ** 31, 2 ** 31, n).astype(np.int32) if k % 2 else None
    acc = (a.astype(np.int64) - az) @ (b.astype(np.int64) - bz.astype(np.int64))
    if cv is not None:
        acc = acc + cv
    want = ((acc + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32).astype(np.float32) * scale
    if bias:
        want = (want + bv).astype(np.float32)
    raw_y = np.zeros(rows * n * 4 + 1, np.uint8)  # the output at an odd address
    g = NativeGraph(0, [a.nbytes, rows * n * 4])
    g.add("qmatmul_f32", rows, k, n, az, b, bz, scale, bv, cv, Ref(1, 0, a.nbytes), Ref(2, 0, rows * n * 4))
    g.run([a.reshape(-1), raw_y[1:]], threads)
    return np.frombuffer(raw_y[1:].tobytes(), np.float32).reshape(rows, n), want, g.ops()[0]


def check_f32(expect: str) -> None:
    """Every qmatmul_f32 case at 1 and 2 threads equals the exact arithmetic bit for bit, on body `expect`."""
    for i, case in enumerate(F32_CASES):
        for threads in (1, 2):
            got, want, name = _f32_run(case, 300 + i, threads)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (case, threads)
            assert name == expect, (case, name)


def _f32_name(isa: str) -> str:
    return f"qmatmul_f32:{isa}" if isa in ("avx2", "avx512vnni") else "qmatmul_f32"


def test_qmatmul_f32_bodies_equal_exact_arithmetic():
    """Each body (this CPU's best, and AVX2 / the loop forced through VKINFER_CPU_ISA in a subprocess) gives the
    exact sums' bits: VPDPWSSD / VPMADDWD pairs, one float32 multiply, then the bias."""
    check_f32(_f32_name(vcpu.default_variant()))
    for isa in sorted({"avx2", "scalar", "neon"} & set(vcpu.available_variants())):
        code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
                f"from cpu.test_qmatmul_paths import check_f32\ncheck_f32({_f32_name(isa)!r}); print('ok')")
        r = subprocess.run([sys.executable, "-c", code, str(TESTS)], env=dict(os.environ, VKINFER_CPU_ISA=isa),
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0 and r.stdout.strip().endswith("ok"), (isa, r.stderr[-3000:])


def test_qmatmul_f32_under_asan_and_ubsan():
    """The qmatmul_f32 bodies this CPU runs, on the AddressSanitizer + UBSan build."""
    from support.cpu_build import run_sanitized

    for isa in sorted({vcpu.default_variant(), "avx2", "scalar"} & set(vcpu.available_variants())):
        code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
                f"from cpu.test_qmatmul_paths import check_f32\ncheck_f32({_f32_name(isa)!r}); print('ok')")
        run_sanitized([sys.executable, "-c", code, str(TESTS)], "ok", cwd=TESTS.parent,
                      env={"VKINFER_CPU_ISA": isa, "PYTHONPATH": str(TESTS.parent)})
