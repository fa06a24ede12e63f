"""The C CPU fallback against the numpy reference, through the C driver (cpu_fallback/tests/conv_driver.c).

Three builds of the same driver run the same vectors: the host build with AddressSanitizer and UBSan
(scalar and the x86 SIMD variants), and static AArch64 and ARMv7 builds under qemu-user (scalar and
NEON). The cross toolchains and qemu are required: a missing one fails the test, naming the package,
because NEON code is otherwise never run on an x86 machine.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support.cpu_build import build_cpu
from support.cpu_vectors import default_cases, write_vectors

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "cpu_fallback" / "src"
BUILD = ROOT / "build" / "cpu"
SANITIZER_ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=1",
                 "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
                 "TSAN_OPTIONS": "halt_on_error=1"}


@pytest.fixture(scope="module")
def vectors(tmp_path_factory) -> tuple[Path, int]:
    path = tmp_path_factory.mktemp("cpu") / "vectors.bin"
    return path, write_vectors(path, default_cases())


def _require(tools: list[str], packages: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not found: the CPU fallback's cross tests need them. "
                    f"Install the Debian packages: apt-get install {packages}", pytrace=False)


def _build(target: str) -> None:
    build_cpu(target)


def _run_driver(cmd: list[str], vectors: tuple[Path, int]) -> tuple[list[str], dict[str, int]]:
    """Runs the driver; checks it passed every case; returns the variants it ran and how many runs
    each kernel family (vki_conv_kernel: "avx2", "avx2-u8s8", ...) took."""
    path, count = vectors
    env = {**os.environ, **SANITIZER_ENV}
    # The driver must see the library's own defaults.
    for name in ("VKINFER_CPU_ISA", "VKINFER_CPU_THREADS", "VKINFER_CPU_U8S8"):
        env.pop(name, None)
    r = subprocess.run([*cmd, str(path)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    out, err, rc = r.stdout, r.stderr, r.returncode
    report = "\n".join(line for line in out.splitlines() if not line.startswith("rejected "))
    where = f"{' '.join(cmd)} exited {rc}\n--- stdout (error-path lines omitted)\n{report[-12000:]}" \
            f"\n--- stderr\n{err[-12000:]}"
    assert "ERROR: AddressSanitizer" not in err and "runtime error" not in err, where
    assert "WARNING: ThreadSanitizer" not in err, where
    assert rc == 0, where
    summary = re.search(r"^cpu driver: (\d+) passed, (\d+) failed$", out, re.M)
    assert summary and int(summary[1]) > 0 and summary[2] == "0", where
    assert f"cases: {count} read, {count} run" in out, where
    variants = re.search(r"^variants:(.*)$", out, re.M)
    kernels = re.search(r"^kernels:(.*)$", out, re.M)
    assert variants and kernels, where
    return variants[1].split(), {k: int(v) for k, v in (item.split("=") for item in kernels[1].split())}


def _host_has(*flags: str) -> bool:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    line = re.search(r"^flags\s*:(.*)$", cpuinfo, re.M)
    return bool(line) and set(flags) <= set(line[1].split())


def test_host_asan_ubsan(vectors):
    _require(["make", "cc"], "build-essential")
    _build("asan-driver")  # objects rebuild when the set of kernel files changes (DEFS_STAMP)
    variants, kernels = _run_driver([str(BUILD / "driver-asan")], vectors)
    assert variants[0] == "scalar", variants
    # A SIMD variant that is compiled in and that this CPU runs must have been exercised.
    if platform.machine() == "x86_64":
        if (SRC / "kernels_avx2.c").exists() and _host_has("avx2"):
            assert "avx2" in variants, variants
            # Both AVX2 igemm forms ran: u8s8 on the 7-bit-weight cases, int16 on the others.
            assert kernels.get("avx2-u8s8", 0) > 0 and kernels.get("avx2", 0) > 0, kernels
        if (SRC / "kernels_avx512vnni.c").exists() and _host_has("avx512f", "avx512bw", "avx512vl", "avx512_vnni"):
            assert "avx512vnni" in variants, variants


def test_host_tsan_thread_pool(vectors):
    """The lock-free thread pool and per-layer locks under ThreadSanitizer (1, 2 and 3 threads per case)."""
    _require(["make", "cc"], "build-essential")
    _build("tsan-driver")
    variants, kernels = _run_driver([str(BUILD / "driver-tsan")], vectors)
    assert variants[0] == "scalar", variants
    if "avx2" in variants:
        assert kernels.get("avx2-u8s8", 0) > 0, kernels


@pytest.mark.parametrize("arch,cc,qemu,packages", [
    ("aarch64", "aarch64-linux-gnu-gcc", "qemu-aarch64-static", "gcc-aarch64-linux-gnu qemu-user-static"),
    ("armv7", "arm-linux-gnueabihf-gcc", "qemu-arm-static", "gcc-arm-linux-gnueabihf qemu-user-static"),
])
def test_neon_under_qemu(vectors, arch, cc, qemu, packages):
    """qemu's "-cpu max" has the ARMv8.2 dot product, so on AArch64 the driver runs neon_dot too (it runs
    every variant the CPU can): its SDOT u8s8 igemm on the layers whose weights fit int8, and its int16
    kernels (neon_a7x's) on the others and on depthwise layers."""
    _require([cc, qemu], packages)
    _build(f"{arch}-driver")
    variants, kernels = _run_driver([qemu, "-cpu", "max", str(BUILD / f"driver-{arch}")], vectors)
    assert "scalar" in variants and "neon" in variants, \
        f"the {arch} driver ran {variants}, not NEON (is cpu_fallback/src/kernels_neon.c there?)"
    if arch == "aarch64" and (SRC / "kernels_neon_dot.c").exists():
        assert "neon_dot" in variants, variants
        assert kernels.get("neon_dot-u8s8", 0) > 0 and kernels.get("neon_dot", 0) > 0, kernels
