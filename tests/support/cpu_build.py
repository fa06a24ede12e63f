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


def run_both_builds(driver: str, tmp_path: Path, ok: str, args: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """`driver`, a script that writes its results to the .npz named by argv[1] (then `args`) and prints `ok` and
    "library: <path>", under the AddressSanitizer + UBSan build and under the normal one: (sanitized, normal)
    arrays by name. Fails the test on a sanitizer report, a nonzero exit or the wrong library."""
    import os
    import sys

    import numpy as np

    (tmp_path / "drive.py").write_text(driver)
    out = {}
    for tag, env, lib in (("asan", {"PYTHONPATH": str(ROOT)}, ASAN_LIB), ("plain", None, None)):
        dest = tmp_path / f"{tag}.npz"
        cmd = [sys.executable, str(tmp_path / "drive.py"), str(dest), *args]
        if env is not None:
            r = run_sanitized(cmd, ok, cwd=ROOT, env=env)
        else:
            r = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                               text=True, timeout=600)
            assert r.returncode == 0 and ok in r.stdout, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
            lib = ROOT / "vkinfer" / "libvkinfer_cpu.so"
        assert f"library: {lib}" in r.stdout, r.stdout[-2000:]
        with np.load(dest) as z:
            out[tag] = {k: z[k] for k in z.files}
    return out["asan"], out["plain"]
