"""Builds a target of cpu_fallback/Makefile from a test, one make at a time.

The suite runs on pytest-xdist: test_cpu_native (asan-driver) and test_native_graph (asan-lib) share the
objects under build/cpu/asan/, and two makes writing them at once linked a half-written object into the
ASan library in CI ("undefined symbol: vki_isa_avx2"). A file lock serialises the makes across workers.
"""
import fcntl
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "build" / "cpu" / ".make.lock"


def build_cpu(target: str, timeout: float = 300) -> None:
    """Runs `make -C cpu_fallback TARGET` under the build lock; fails the test with make's output."""
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    cmd = ["make", "-C", "cpu_fallback", target]
    with open(LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout[-4000:]}\n{r.stderr[-8000:]}"
