"""The conditions a `vkinfer bench` record was measured under: the machine, the threads and pinning, the Vulkan
devices, the versions of everything timed, the git commit, the date and the host.

Every field is always present; what cannot be known here is ``None`` (a package not installed, no git checkout)
or, for Vulkan, a string saying why it is unavailable.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

# The /proc/cpuinfo flags (x86) and features (Arm) that matter to 8-bit kernels.
SIMD_FLAGS = frozenset({
    "sse2", "ssse3", "sse4_1", "sse4_2", "avx", "avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512dq",
    "avx512vl", "avx512cd", "avx512_vnni", "avx512vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_tile",
    "neon", "asimd", "asimddp", "asimdhp", "i8mm", "sve", "sve2", "bf16",
})
# Distribution names of the engines and libraries whose versions a record carries.
PACKAGES = {"vkinfer": "vkinfer", "numpy": "numpy", "onnxruntime": "onnxruntime", "onnx": "onnx",
            "litert": "ai-edge-litert", "ncnn": "ncnn"}
ROOT = Path(__file__).resolve().parents[2]  # the checkout's root when vkinfer runs from one


def cpu_info() -> tuple[str, list[str]]:
    """The CPU's model name and its SIMD-relevant flags (sorted), from /proc/cpuinfo; platform's guess and no
    flags where there is no /proc/cpuinfo."""
    model, flags = None, set()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name in ("model name", "Model", "Hardware") and model is None:
            model = value.strip()
        elif name in ("flags", "Features") and not flags:
            flags = {f for f in value.split() if f in SIMD_FLAGS}
    return model or platform.processor() or platform.machine() or "unknown", sorted(flags)


def package_version(name: str) -> str | None:
    """The installed version of distribution `name` (e.g. "ai-edge-litert"), None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_commit(root: Path = ROOT) -> str | None:
    """The commit checked out at `root` with "-dirty" when tracked files differ from it; None when `root` is not
    a git checkout (an installed package) or git is missing or slow."""
    if not (root / ".git").exists():
        return None
    try:
        rev = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                             check=True, timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--"], capture_output=True,
                               timeout=5).returncode != 0
    except (OSError, subprocess.SubprocessError):
        return None
    return (rev + ("-dirty" if dirty else "")) or None


def vulkan_devices() -> list[dict[str, Any]] | str:
    """vkinfer's Vulkan devices (index, name, type, driver, driver info, API version), most preferred first, or
    a string saying why Vulkan is unavailable."""
    try:
        import vkinfer

        devs = vkinfer.devices()
    except Exception as e:  # noqa: BLE001 - any failure to reach Vulkan is a condition, not a crash
        return f"unavailable: {e}"
    if not devs:
        return "unavailable: no Vulkan devices"
    return [{"index": d.index, "name": d.name, "type": d.type, "driver": d.driver, "driver_info": d.driver_info,
             "api_version": d.api_version} for d in devs]


def _cpu_variant() -> str | None:
    try:
        from vkinfer import cpu

        return cpu.default_variant()
    except Exception:  # noqa: BLE001 - the native library may be missing; the record says so by None
        return None


def _versions() -> dict[str, str | None]:
    out = {"python": platform.python_version(), **{k: package_version(d) for k, d in PACKAGES.items()}}
    if out["vkinfer"] is None:  # run from a checkout that is not installed
        import vkinfer

        out["vkinfer"] = vkinfer.__version__
    return out


def conditions(threads: int, pinned_cpus: list[int] | None = None, *, vulkan: list | str | None = None,
               commit: str | None | bool = False) -> dict[str, Any]:
    """The conditions of one measurement on `threads` threads; `pinned_cpus`: the CPUs the process was pinned to
    (None: not pinned; ``affinity`` is the process's CPU set either way). `vulkan` and `commit`, when given, are
    used instead of asking again (they do not change within a run: vulkan_devices(), git_commit())."""
    model, flags = cpu_info()
    try:
        affinity = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {
        "cpu_model": model,
        "cpu_flags": flags,
        "logical_cpus": os.cpu_count(),
        "threads": int(threads),
        "pinned": pinned_cpus is not None,
        "pinned_cpus": sorted(pinned_cpus) if pinned_cpus is not None else None,
        "affinity": affinity,
        "cpu_variant": _cpu_variant(),
        "vulkan": vulkan_devices() if vulkan is None else vulkan,
        "versions": _versions(),
        "git_commit": git_commit() if commit is False else commit,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python_executable": sys.executable,
    }
