"""Per-ISA microkernel unit tests in C (cpu_fallback/tests/*_kernel_check.c): every igemm/dw kernel
against exact scalar sums and vki_requant_scalar on random tiles, tails, ties and clamps.
x86 kernels run natively under ASan/UBSan (the AVX-512 VNNI kernel through the test's scalar
emulation of its intrinsics, since this CPU has no AVX-512); NEON kernels are cross-compiled and
run under qemu for AArch64 and ARMv7, with guard pages around every buffer. No skips: a missing
toolchain fails with the packages to install."""

import platform
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SRC, TESTS, BUILD = ROOT / "cpu_fallback" / "src", ROOT / "cpu_fallback" / "tests", ROOT / "build" / "cpu"
CFLAGS = ["-O2", "-std=c11", "-ffp-contract=off", f"-I{SRC}"]


def _need(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.fail(f"{tool} not found: apt-get install {package}", pytrace=False)
    return path


def _build_and_run(cc: list[str], flags: list[str], sources: list[Path], out: Path, runner: list[str]) -> str:
    out.parent.mkdir(parents=True, exist_ok=True)
    b = subprocess.run([*cc, *CFLAGS, *flags, *map(str, sources), "-lm", "-o", str(out)], capture_output=True,
                       text=True, timeout=300)
    assert b.returncode == 0, b.stderr[-4000:]
    r = subprocess.run([*runner, str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return r.stdout


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86 kernels run on x86-64 hosts only")
def test_x86_kernels_under_asan():
    out = _build_and_run([_need("gcc", "gcc")], ["-mavx2", "-fsanitize=address,undefined"],
                         [TESTS / "x86_kernel_check.c", SRC / "kernels_avx2.c"], BUILD / "x86_kernel_check", [])
    assert out.strip().splitlines()[-1].endswith(" passed, 0 failed"), out[-2000:]


@pytest.mark.parametrize("cc,qemu,flags", [
    ("aarch64-linux-gnu-gcc", "qemu-aarch64-static", []),
    ("arm-linux-gnueabihf-gcc", "qemu-arm-static", ["-mfpu=neon", "-mfloat-abi=hard"]),
], ids=["aarch64", "armv7"])
def test_neon_kernels_under_qemu(cc, qemu, flags):
    compiler = _need(cc, f"gcc-{cc.removesuffix('-gcc')}")
    runner = _need(qemu, "qemu-user-static")
    out = _build_and_run([compiler], ["-static", *flags], [TESTS / "neon_kernel_check.c", SRC / "kernels_neon.c"],
                         BUILD / f"neon_kernel_check-{cc.split('-')[0]}", [runner])
    assert out.strip().splitlines()[-1].endswith(" passed, 0 failed"), out[-2000:]
    assert "neon: mr=" in out
