"""The CPU fallback's default thread count: one policy, decided here and handed to the C library.

The default is the CPUs this process may run on (its affinity: `taskset`, `docker --cpuset-cpus`),
within the fastest core cluster (big.LITTLE clusters share no cache, so a layer split across them
runs at the little cores' pace), capped by the cgroup v2 CPU quota (`docker --cpus`, Kubernetes
limits): threads beyond the quota only get throttled. `$VKINFER_CPU_THREADS` overrides it.

Every reader takes its file paths as parameters so tests can point it at a fake tree, and none of
them raises on a missing, unreadable or malformed file: it reports "no information" instead, which
falls back to the affinity count. Only a bad `$VKINFER_CPU_THREADS` is an error (the user asked for
something we cannot do).
"""

from __future__ import annotations

import glob
import math
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

SYSFS_CPU = "/sys/devices/system/cpu"
PROC_CGROUP = "/proc/self/cgroup"
MOUNTINFO = "/proc/self/mountinfo"
DEFAULT_CGROUP_ROOT = "/sys/fs/cgroup"
ENV = "VKINFER_CPU_THREADS"
MAX_THREADS = 1024  # the C library's VKI_MAX_THREADS


def _read(path: str | Path) -> str | None:
    """A small text file's content, or None when it cannot be read (missing, permissions, a directory)."""
    try:
        with open(path) as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def env_threads(environ: Mapping[str, str] | None = None) -> int | None:
    """The count `$VKINFER_CPU_THREADS` asks for, or None when it is unset or empty (as the C library
    treats an empty value). Raises ValueError, naming the variable, for anything but a whole number
    in [1, 1024]: running with a different count than asked would be silently wrong."""
    raw = (os.environ if environ is None else environ).get(ENV)
    if raw is None or not raw.strip():
        return None
    text = raw.strip()
    if not re.fullmatch(r"\+?[0-9]+", text) or not 1 <= int(text) <= MAX_THREADS:
        raise ValueError(f"${ENV} must be a whole number of threads from 1 to {MAX_THREADS}, got {raw!r}")
    return int(text)


def core_clusters(sysfs: str = SYSFS_CPU) -> list[tuple[int, list[int]]]:
    """Online CPU cores grouped by maximum clock (big.LITTLE clusters), fastest first:
    [(max kHz, [cpu ids])]. Without cpufreq information (many VMs) every online core is one cluster
    with clock 0; a core whose cpuinfo_max_freq is malformed joins that clock-0 group. An empty list
    when the directory cannot be listed."""
    groups: dict[int, list[int]] = {}
    for path in glob.glob(f"{glob.escape(sysfs)}/cpu[0-9]*"):
        m = re.search(r"cpu(\d+)$", path)
        if not m:
            continue
        # cpu0 often has no "online" file: it is always online. Anything but "0" counts as online.
        online = _read(f"{path}/online")
        if online is not None and online.strip() == "0":
            continue
        try:
            khz = int((_read(f"{path}/cpufreq/cpuinfo_max_freq") or "").strip())
        except ValueError:
            khz = 0
        groups.setdefault(max(khz, 0), []).append(int(m.group(1)))
    return [(k, sorted(v)) for k, v in sorted(groups.items(), reverse=True)]


def affinity() -> frozenset[int]:
    """The CPUs this process may run on (`taskset`, cpusets); all CPUs where the OS cannot say."""
    try:
        return frozenset(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return frozenset(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class CpuQuota:
    """The tightest cgroup v2 `cpu.max` on the process's cgroup path: `quota` microseconds of CPU time
    per `period` microseconds, read from `path`."""

    quota: int
    period: int
    path: str

    @property
    def cpus(self) -> int:
        """Threads the quota can keep busy: ceil(quota / period), at least 1."""
        return max(1, math.ceil(Fraction(self.quota, self.period)))


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def cgroup2_mount(mountinfo: str = MOUNTINFO) -> tuple[str, str] | None:
    """(mount point, root of the hierarchy it shows) of the cgroup v2 filesystem, from mountinfo. The
    root is not "/" when a container sees only its own subtree without a cgroup namespace. None when
    there is no cgroup2 mount or the file cannot be read."""
    text = _read(mountinfo)
    for line in (text or "").splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if sep and right.split()[:1] == ["cgroup2"] and len(fields) >= 5:
            return _unescape(fields[4]), _unescape(fields[3])
    return None


def cgroup_path(proc_cgroup: str = PROC_CGROUP) -> str | None:
    """The process's cgroup v2 path (the "0::/path" line of /proc/self/cgroup), or None."""
    for line in (_read(proc_cgroup) or "").splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or None
    return None


def parse_cpu_max(text: str) -> tuple[int, int] | None:
    """A `cpu.max` line "quota period" -> (quota, period); None for "max period" (no quota) and for
    anything malformed."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return (quota, period) if quota > 0 and period > 0 else None


def cgroup_quota(proc_cgroup: str = PROC_CGROUP, cgroup_root: str | None = None,
                 mountinfo: str = MOUNTINFO) -> CpuQuota | None:
    """The tightest cgroup v2 CPU quota on the process's cgroup and its ancestors (the kernel throttles
    at every level, so the smallest quota/period along the path binds), or None when there is none or
    it cannot be read. `cgroup_root` is where the hierarchy's root is mounted; None finds the cgroup2
    mount in `mountinfo` (e.g. /sys/fs/cgroup/unified on hybrid systems), else /sys/fs/cgroup."""
    path = cgroup_path(proc_cgroup)
    if path is None:
        return None
    if cgroup_root is None:
        mount, mount_root = cgroup2_mount(mountinfo) or (DEFAULT_CGROUP_ROOT, "/")
    else:
        mount, mount_root = cgroup_root, "/"
    # The path relative to the mount. One outside the visible subtree (cgroup namespaces show
    # "/../..", a subtree mount shows only its own root): the mount itself, the closest ancestor we see.
    parts, root_parts = Path("/", path).parts[1:], Path("/", mount_root).parts[1:]
    if ".." in parts or parts[:len(root_parts)] != root_parts:
        parts = ()
    rel = Path(*parts[len(root_parts):])
    best: CpuQuota | None = None
    d = Path(mount, rel)
    while True:
        parsed = parse_cpu_max(_read(d / "cpu.max") or "")
        if parsed and (best is None or Fraction(*parsed) < Fraction(best.quota, best.period)):
            best = CpuQuota(parsed[0], parsed[1], str(d))
        if d == Path(mount) or d.parent == d:
            return best
        d = d.parent


def _cpus(ids: Iterable[int]) -> str:
    """{0-3,6}: CPU ids as ranges, as taskset and /sys print them."""
    ids, out = sorted(ids), []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        out.append(str(ids[i]) if j == i else f"{ids[i]},{ids[j]}" if j == i + 1 else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return "{" + ",".join(out) + "}"


@dataclass(frozen=True)
class ThreadDefault:
    """The default thread count and what it came from (`reason` says it in words).

    count: the threads used when a call gives none. env: $VKINFER_CPU_THREADS when it decided.
    affinity: CPUs the process may run on. online: online CPUs from sysfs (empty when unknown).
    fastest / fastest_khz: the fastest cluster (empty when sysfs says nothing; khz 0 without cpufreq).
    cpus: the affinity within the fastest cluster (the affinity when they do not meet).
    quota: the binding cgroup CPU quota, if any."""

    count: int
    affinity: tuple[int, ...]
    online: tuple[int, ...]
    fastest: tuple[int, ...]
    fastest_khz: int
    cpus: tuple[int, ...]
    quota: CpuQuota | None
    env: int | None = None

    @property
    def reason(self) -> str:
        """E.g. "affinity {0} of 2 online; fastest cluster {0,1}; cgroup cpu.max 100000/100000 -> 1"."""
        parts = [f"affinity {_cpus(self.affinity)}" + (f" of {len(self.online)} online" if self.online else "")]
        if not self.fastest:
            parts.append("no core clusters in sysfs")
        else:
            clock = f" at {self.fastest_khz / 1e6:.2f} GHz" if self.fastest_khz else " (no cpufreq: all online cores)"
            where = "" if set(self.cpus) & set(self.fastest) else ", none in the affinity: using the affinity"
            parts.append(f"fastest cluster {_cpus(self.fastest)}{clock}{where}")
        if self.quota:
            q = self.quota
            parts.append(f"cgroup cpu.max {q.quota}/{q.period} -> {q.cpus}")
        else:
            parts.append("no cgroup CPU quota")
        why = "; ".join(parts)
        return f"${ENV}={self.env}; otherwise {self.machine_count}: {why}" if self.env is not None else why

    @property
    def machine_count(self) -> int:
        """The count without $VKINFER_CPU_THREADS."""
        return max(1, min(len(self.cpus), self.quota.cpus if self.quota else len(self.cpus)))


def machine_default(sysfs: str = SYSFS_CPU, proc_cgroup: str = PROC_CGROUP, cgroup_root: str | None = None,
                    mountinfo: str = MOUNTINFO, cpus: Iterable[int] | None = None) -> ThreadDefault:
    """The default from the machine alone (no environment): the affinity (`cpus`, else
    os.sched_getaffinity) within the fastest cluster of `core_clusters(sysfs)` (the whole affinity when
    they do not meet or sysfs says nothing), capped by `cgroup_quota(...)`. Never raises."""
    aff = frozenset(affinity() if cpus is None else cpus)
    clusters = core_clusters(sysfs)
    online = sorted(i for _, ids in clusters for i in ids)
    fastest_khz, fastest = clusters[0] if clusters else (0, [])
    chosen = aff & set(fastest) or aff
    quota = cgroup_quota(proc_cgroup, cgroup_root, mountinfo)
    td = ThreadDefault(count=0, affinity=tuple(sorted(aff)), online=tuple(online), fastest=tuple(fastest),
                       fastest_khz=fastest_khz, cpus=tuple(sorted(chosen)), quota=quota)
    return replace(td, count=td.machine_count)


def resolve(environ: Mapping[str, str] | None = None, machine: ThreadDefault | None = None) -> ThreadDefault:
    """The default with `$VKINFER_CPU_THREADS` applied over `machine` (else `machine_default()`).
    Raises ValueError for a bad $VKINFER_CPU_THREADS."""
    env = env_threads(environ)
    m = machine_default() if machine is None else machine
    return m if env is None else replace(m, count=env, env=env)


__all__ = ["CpuQuota", "ThreadDefault", "affinity", "cgroup2_mount", "cgroup_path", "cgroup_quota", "core_clusters",
           "env_threads", "machine_default", "parse_cpu_max", "resolve"]
