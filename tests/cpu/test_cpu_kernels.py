"""Per-ISA microkernel unit tests in C (cpu_fallback/tests/*_kernel_check.c): every igemm/dw kernel
against exact scalar sums and vki_requant_scalar on random tiles, tails, ties and clamps.
x86 kernels run natively under ASan/UBSan: AVX2, the AVX-512 VNNI kernel through the test's scalar
emulation of its intrinsics (on any AVX2 CPU), and the real VNNI kernel where the CPU has AVX-512 VNNI.
NEON kernels are cross-compiled and run under qemu for AArch64 and ARMv7, with guard pages around
every buffer. Each test requires the kernels the host must run to have reported "ok" and a positive
count of checks. No skips, except the x86 test on an x86-64 CPU without AVX2 (nothing there can run);
a missing toolchain fails with the packages to install."""

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from .test_cpu_native import _host_has  # /proc/cpuinfo: independent of the library's CPUID checks

ROOT = Path(__file__).resolve().parents[2]
SRC, TESTS, BUILD = ROOT / "cpu_fallback" / "src", ROOT / "cpu_fallback" / "tests", ROOT / "build" / "cpu"
CFLAGS = ["-O2", "-std=c11", "-ffp-contract=off", f"-I{SRC}"]


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} not found: apt-get install {package}", pytrace=False)
    return path


def _build_and_run(cc: list[str], flags: list[str], sources: list[Path], out: Path, runner: list[str],
                   args: tuple[str, ...] = ()) -> str:
    out.parent.mkdir(parents=True, exist_ok=True)
    b = subprocess.run([*cc, *CFLAGS, *flags, *map(str, sources), "-lm", "-o", str(out)], capture_output=True,
                       text=True, timeout=300)
    assert b.returncode == 0, b.stderr[-4000:]
    r = subprocess.run([*runner, str(out), *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return r.stdout


AVX512_FLAGS = ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"]


def _summary(out: str, what: str) -> int:
    """The number of passed checks from the check program's last line ("<what>: N passed, 0 failed")."""
    m = re.fullmatch(rf"{what}: (\d+) passed, 0 failed", out.strip().splitlines()[-1])
    assert m, out[-2000:]
    return int(m[1])


@pytest.mark.skipif(platform.machine() != "x86_64" or not _host_has("avx2"),
                    reason="the x86 kernels and the AVX-512 emulation need an x86-64 CPU with AVX2")
def test_x86_kernels_under_asan():
    """Which kernels must have run follows from the host's CPU flags: AVX2 natively and the AVX-512 VNNI kernel
    through its scalar emulation (which checks itself against AVX2) wherever AVX2 runs, and the real VNNI kernel
    too where the CPU has AVX-512 VNNI. Each must report "ok", and the total must be positive."""
    native_vnni = _host_has("avx512f", "avx512bw", "avx512vl", "avx512_vnni")
    gcc = _need("gcc", "gcc")
    sources, extra = [TESTS / "x86_kernel_check.c", SRC / "kernels_avx2.c"], []
    if native_vnni:  # the real kernel, compiled on its own with its own flags (as cpu_fallback/Makefile does)
        obj = BUILD / "kernels_avx512vnni-asan.o"
        obj.parent.mkdir(parents=True, exist_ok=True)
        b = subprocess.run([gcc, *CFLAGS, *AVX512_FLAGS, "-fsanitize=address,undefined", "-c",
                            str(SRC / "kernels_avx512vnni.c"), "-o", str(obj)], capture_output=True, text=True,
                           timeout=300)
        assert b.returncode == 0, b.stderr[-4000:]
        sources.append(obj)
        extra = ["-DVKI_X86_CHECK_AVX512_NATIVE"]
    out = _build_and_run([gcc], ["-mavx2", "-fsanitize=address,undefined", *extra], sources,
                         BUILD / "x86_kernel_check", [])
    ran = {line.split(": ")[0] for line in out.splitlines() if line.endswith(": ok")}
    want = {"avx2", "avx512vnni (emulated)"} | ({"avx512vnni"} if native_vnni else set())
    assert ran == want, out[-2000:]
    assert "not available on this CPU" not in out, out[-2000:]
    assert _summary(out, "x86 kernels") > 0


@pytest.mark.parametrize("cc,qemu,flags,variants", [
    ("aarch64-linux-gnu-gcc", "qemu-aarch64-static", [], {"neon", "neon_a7x", "neon_dot"}),
    ("arm-linux-gnueabihf-gcc", "qemu-arm-static", ["-mfpu=neon", "-mfloat-abi=hard"], {"neon"}),
], ids=["aarch64", "armv7"])
def test_neon_kernels_under_qemu(cc, qemu, flags, variants):
    """Every NEON variant of the architecture (cpu_fallback/src/isa.c: neon_a7x and neon_dot on AArch64 only) ran
    and checked a positive number of kernel calls. qemu's "-cpu max" has the ARMv8.2 dot product, so neon_dot's
    SDOT kernels run (the check program fails when a variant it is told to require is unavailable); on ARMv7
    kernels_neon_dot.c compiles to nothing."""
    compiler = _need(cc, f"gcc-{cc.removesuffix('-gcc')}")
    runner = _need(qemu, "qemu-user-static")
    sources = [TESTS / "neon_kernel_check.c", SRC / "kernels_neon.c", SRC / "kernels_neon_dot.c"]
    out = _build_and_run([compiler], ["-static", *flags], sources, BUILD / f"neon_kernel_check-{cc.split('-')[0]}",
                         [runner, "-cpu", "max"], ("20240611", "2000", ",".join(sorted(variants))))
    assert _summary(out, "neon kernels") > 0
    ran = {m[1] for m in re.finditer(r"^(\w+): mr=", out, re.M)}
    assert ran == variants and "not available on this CPU" not in out, out[-2000:]
    if "neon_dot" in variants:  # its u8s8 (SDOT) igemm was checked, over the full int8 weight range
        assert re.search(r"^neon_dot: .* u8s8: neon_dot-u8s8 .*w=\[-128, 127\] xoff=128", out, re.M), out[-2000:]
