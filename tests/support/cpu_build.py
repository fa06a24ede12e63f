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


ASAN_LIB = ROOT / "build" / "cpu" / "libvkinfer_cpu-asan.so"


def asan_env(preload_extra: str = "") -> dict:
    """The environment of a subprocess that loads the library's AddressSanitizer + UBSan build (built here first):
    libasan preloaded (and `preload_extra`, e.g. libstdc++ for a C++ module), aborting on the first error."""
    import os

    build_cpu("asan-lib")
    cc = os.environ.get("CC", "cc")
    libasan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    assert Path(libasan).is_absolute(), f"no libasan.so from the C compiler: {libasan!r}"
    return {**os.environ, "LD_PRELOAD": f"{libasan} {preload_extra}".strip(),
            "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1", "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
            "VKINFER_CPU_LIB": str(ASAN_LIB)}


def run_sanitized(args: list[str], ok: str, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """Runs `args` under asan_env() (keywords as subprocess.run's: cwd, env additions via `env`); fails the test on
    any sanitizer report, a nonzero exit, or stdout without `ok`. Returns the process."""
    env = {**asan_env(), **kw.pop("env", {})}
    r = subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, **kw)
    where = f"exit {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-8000:]}"
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, where
    assert r.returncode == 0 and ok in r.stdout, where
    return r
