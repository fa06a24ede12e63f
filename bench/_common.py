"""Timing and host description shared by the benchmarks."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np


def cpu_model() -> str:
    """The host CPU's model name from /proc/cpuinfo (Linux), else what platform knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def interleaved(a: Callable[[], object], b: Callable[[], object], warmup: int,
                repeat: int) -> tuple[np.ndarray, np.ndarray]:
    """Seconds per call of `a` and `b`, alternating A-B and B-A so neither side always runs with
    the other's data freshly evicted from cache, or always first after a pause."""
    ta, tb = [], []
    for i in range(warmup + repeat):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        t0 = time.perf_counter()
        first()
        t1 = time.perf_counter()
        second()
        t2 = time.perf_counter()
        da, db = (t1 - t0, t2 - t1) if i % 2 == 0 else (t2 - t1, t1 - t0)
        if i >= warmup:
            ta.append(da)
            tb.append(db)
    return np.array(ta), np.array(tb)
