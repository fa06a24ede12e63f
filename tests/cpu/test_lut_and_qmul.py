"""The byte lookup (`lut1`: AVX-512 VBMI where the CPU has it, bytes otherwise) and QLinearMul's arithmetic in the
`qadd` operator (`mul`: AVX-512, AVX2 or scalar) against numpy and the reference, on every code path this CPU
runs: each check runs here (the best path) and in subprocesses with VKINFER_CPU_ISA=avx2 and =scalar."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vkinfer.cpu.graph import NativeGraph, Ref
from vkinfer.reference.qlinear_mul import qlinear_mul

TESTS = Path(__file__).resolve().parents[1]
# Around the 64-byte vector and the 65536-byte work item, and past several items (threads split them).
LUT_SIZES = (1, 63, 64, 65, 127, 1000, 65535, 65536, 65537, 300_001)


def _lut1(x: np.ndarray, table: np.ndarray, threads: int) -> np.ndarray:
    y = np.full(x.size, 0xA5, np.uint8)
    g = NativeGraph(0, [x.nbytes, y.nbytes])
    g.add("lut1", x.size, table, Ref(1, 0, x.nbytes), Ref(2, 0, y.nbytes))
    g.run([x, y], threads)
    return y


def check_lut1() -> None:
    rng = np.random.default_rng(3)
    for n in LUT_SIZES:
        table = rng.integers(0, 256, 256, dtype=np.uint8)
        x = rng.integers(0, 256, n, dtype=np.uint8)
        x[: min(n, 256)] = np.arange(min(n, 256), dtype=np.uint8)  # every index, incl. 127/128 across the halves
        for threads in (1, 2):
            got = _lut1(x, table, threads)
            assert np.array_equal(got, table[x]), (n, threads, np.flatnonzero(got != table[x])[:5])


def _qmul(a: np.ndarray, b: np.ndarray, dtype, za: int, zb: int, ratio: np.float32, zc: int,
          threads: int) -> np.ndarray:
    """The qadd operator in QLinearMul mode on canonical bytes (int8 as value ^ 0x80), one axis."""
    signed = np.dtype(dtype) == np.int8
    lo, hi = (-128, 127) if signed else (0, 255)
    ca, cb = (np.ascontiguousarray(v).view(np.uint8) ^ np.uint8(0x80 if signed else 0) for v in (a, b))
    y = np.full(a.size, 0xA5, np.uint8)
    g = NativeGraph(0, [ca.nbytes, cb.nbytes, y.nbytes])
    shape, strides = np.asarray([a.size], np.uint32), np.asarray([1], np.uint64)
    g.add("qadd", 1, shape, strides, strides, int(signed), 1, za, zb, float(ratio), 0.0, float(np.float32(zc)),
          lo, hi, None, Ref(1, 0, ca.nbytes), Ref(2, 0, cb.nbytes), Ref(3, 0, y.nbytes))
    g.run([ca, cb, y], threads)
    return (y ^ np.uint8(0x80 if signed else 0)).view(dtype)


def check_qmul() -> None:
    """Every byte pair (65536 values: every vector tail too), for scales that round on ties, tiny ones, ones whose
    products pass 2**31 (CVTPS2DQ's INT32_MIN, then the low clamp, as ORT), and extreme zero points."""
    codes = np.arange(256)
    for dtype in (np.uint8, np.int8):
        lo = -128 if dtype == np.int8 else 0
        a = (np.repeat(codes, 256) + lo).astype(dtype)
        b = (np.tile(codes, 256) + lo).astype(dtype)
        for sa, sb, sc, za, zb, zc in [(0.02, 0.004, 0.05, 100, 3, 128), (0.5, 0.5, 0.25, 0, 255, 0),
                                       (1e-3, 2e-3, 7.3e-5, 17, 200, 255), (1.0, 1.0, 3e-6, 128, 128, 0),
                                       (3e4, 3e4, 1e-3, 0, 0, 10)]:
            if dtype == np.int8:
                za, zb, zc = za - 128, zb - 128, zc - 128
            sa, sb, sc = (np.float32(v) for v in (sa, sb, sc))
            want = qlinear_mul(a, sa, dtype(za), b, sb, dtype(zb), sc, dtype(zc))
            ratio = (sa * sb) / sc
            for threads in (1, 2):
                got = _qmul(a, b, dtype, za, zb, ratio, zc, threads)
                bad = np.flatnonzero(got != want)
                assert bad.size == 0, (np.dtype(dtype).name, sa, sb, sc, threads, bad[:5], got[bad[:5]], want[bad[:5]])


def test_lut1_equals_numpy():
    check_lut1()


def test_qlinear_mul_arithmetic_equals_the_reference():
    check_qmul()


@pytest.mark.parametrize("isa", ["avx2", "scalar"])
def test_other_code_paths(isa):
    """The same checks with the vector paths switched off (VKINFER_CPU_ISA is read once per process)."""
    code = ("import sys; sys.path.insert(0, sys.argv[1])\n"
            "from cpu.test_lut_and_qmul import check_lut1, check_qmul\ncheck_lut1(); check_qmul(); print('ok')")
    r = subprocess.run([sys.executable, "-c", code, str(TESTS)], env=dict(os.environ, VKINFER_CPU_ISA=isa),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stderr[-3000:]
