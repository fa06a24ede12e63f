"""Timing and host description shared by the benchmarks."""

from __future__ import annotations

import platform
import time
from collections.abc import Callable
from importlib import metadata
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


def package_version(name: str) -> str | None:
    """The installed version of distribution `name` (e.g. "ai-edge-litert"), None when it is not installed."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def git_revision(root: Path) -> str | None:
    """The commit checked out in `root`, with "-dirty" when tracked files differ from it; None without git."""
    from vkinfer.benchmark.conditions import git_commit

    return git_commit(root)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured markdown table: columns padded to their widest cell, numbers right-aligned (a cell
    that parses as a float, ignoring a trailing unit word, e.g. "2.66 M")."""
    def numeric(cell: str) -> bool:
        try:
            float(cell.split()[0] if cell.strip() else "x")
        except ValueError:
            return False
        return True

    cols = list(zip(header, *rows, strict=True))
    widths = [max(len(c) for c in col) for col in cols]
    right = [all(numeric(c) or c in ("", "-") for c in col[1:]) and any(numeric(c) for c in col[1:]) for col in cols]

    def line(cells: list[str]) -> str:
        return "| " + " | ".join(c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right,
                                                                                    strict=True)) + " |"

    rule = "|" + "|".join(("-" * (w + 1) + ":") if r else "-" * (w + 2) for w, r in zip(widths, right, strict=True))
    return "\n".join([line(header), rule + "|", *(line(r) for r in rows)])
