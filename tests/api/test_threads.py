"""The CPU fallback's default thread count (vkinfer/cpu/threads.py): affinity, fastest cluster, cgroup
v2 quota, $VKINFER_CPU_THREADS, and the C library taking its default from Python.

Every expectation comes from a fake sysfs / cgroup tree built here, or from the policy applied to
this process's own state, so the tests hold on any machine (1, 2 or many cores, with or without
cpufreq or a cgroup quota)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vkinfer import cpu
from vkinfer.cli import main
from vkinfer.cpu import threads as th

ROOT = Path(__file__).resolve().parents[2]
NO_FILE = "/nonexistent/vkinfer-test"


def fake_sysfs(root: Path, cores: list[tuple[int, int | str | None, str | None]]) -> str:
    """cpu<i>/cpufreq/cpuinfo_max_freq (None: no cpufreq dir) and cpu<i>/online (None: no file)."""
    for i, khz, online in cores:
        d = root / f"cpu{i}"
        d.mkdir(parents=True)
        if khz is not None:
            (d / "cpufreq").mkdir()
            (d / "cpufreq" / "cpuinfo_max_freq").write_text(f"{khz}\n")
        if online is not None:
            (d / "online").write_text(online + "\n")
    (root / "cpufreq").mkdir(exist_ok=True)  # not a core
    (root / "online").write_text("0-7\n")  # not a core either
    return str(root)


def fake_cgroup(root: Path, path: str, files: dict[str, str]) -> tuple[str, str]:
    """A cgroup2 mount at root/cg with cpu.max files {relative dir: content}, and a /proc/self/cgroup
    naming `path`. Returns (proc_cgroup, cgroup_root)."""
    mount = root / "cg"
    mount.mkdir(parents=True)
    for rel, text in files.items():
        d = mount / rel
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.max").write_text(text)
    proc = root / "proc_cgroup"
    proc.write_text(f"12:cpu,cpuacct:/ignored/v1\n0::{path}\n")
    return str(proc), str(mount)


# big.LITTLE: cpu0-3 little (1.8 GHz), cpu4-7 big (2.8 GHz), cpu7 offline.
BIG_LITTLE = [(0, 1800000, None), (1, 1800000, "1"), (2, 1800000, "1"), (3, 1800000, "1"),
              (4, 2800000, "1"), (5, 2800000, "1"), (6, 2800000, "1"), (7, 2800000, "0")]


@pytest.fixture
def big_little(tmp_path) -> str:
    return fake_sysfs(tmp_path / "sys", BIG_LITTLE)


def no_quota(**kw):
    return th.machine_default(proc_cgroup=NO_FILE, mountinfo=NO_FILE, **kw)


# --- core clusters -------------------------------------------------------------------------------

def test_clusters_big_little_offline(big_little):
    assert th.core_clusters(big_little) == [(2800000, [4, 5, 6]), (1800000, [0, 1, 2, 3])]
    assert cpu.core_clusters is th.core_clusters  # one implementation, re-exported


def test_clusters_without_cpufreq_and_malformed(tmp_path):
    plain = fake_sysfs(tmp_path / "a", [(0, None, None), (1, None, "1"), (2, None, "0")])
    assert th.core_clusters(plain) == [(0, [0, 1])]
    # A malformed clock joins the clock-0 group rather than raising.
    bad = fake_sysfs(tmp_path / "b", [(0, "fast", None), (1, 2000000, "1"), (2, "", "1")])
    assert th.core_clusters(bad) == [(2000000, [1]), (0, [0, 2])]


def test_clusters_missing_or_unreadable(tmp_path):
    assert th.core_clusters(str(tmp_path / "missing")) == []
    root = Path(fake_sysfs(tmp_path / "s", [(0, 1000000, None), (1, 1000000, "1")]))
    root.chmod(0)
    try:
        readable = os.access(root, os.R_OK | os.X_OK)  # root ignores the mode
        assert th.core_clusters(str(root)) == ([(1000000, [0, 1])] if readable else [])
        td = no_quota(sysfs=str(root), cpus={0, 1})
        assert td.count == 2
    finally:
        root.chmod(0o755)


# --- affinity x fastest cluster ------------------------------------------------------------------

@pytest.mark.parametrize("aff, expected, cpus", [
    ({0, 1, 2, 3, 4, 5, 6, 7}, 3, (4, 5, 6)),  # big cores only; the offline one is not counted
    ({0, 4}, 1, (4,)),                          # one big core allowed
    ({0}, 1, (0,)),                             # taskset -c 0 on a little core: not the big cluster's 3
    ({1, 2, 3}, 3, (1, 2, 3)),                  # no big core allowed: the affinity
    ({4, 5, 6, 7, 8}, 3, (4, 5, 6)),
])
def test_affinity_within_fastest_cluster(big_little, aff, expected, cpus):
    td = no_quota(sysfs=big_little, cpus=aff)
    assert (td.count, td.cpus, td.fastest, td.fastest_khz, td.quota) == (expected, cpus, (4, 5, 6), 2800000, None)
    assert td.online == (0, 1, 2, 3, 4, 5, 6)
    assert ("none in the affinity" in td.reason) == (not set(aff) & {4, 5, 6})


def test_affinity_from_sched_getaffinity(big_little, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {2, 5, 6})
    td = no_quota(sysfs=big_little)
    assert (td.count, td.affinity, td.cpus) == (2, (2, 5, 6), (5, 6))
    assert td.reason.startswith("affinity {2,5,6} of 7 online; fastest cluster {4-6} at 2.80 GHz; ")


def test_no_cpufreq_is_one_cluster(tmp_path):
    sysfs = fake_sysfs(tmp_path, [(0, None, None), (1, None, "1")])
    td = no_quota(sysfs=sysfs, cpus={0})
    assert td.count == 1
    assert td.reason == "affinity {0} of 2 online; fastest cluster {0,1} (no cpufreq: all online cores); " \
                        "no cgroup CPU quota"


def test_no_sysfs_uses_affinity(tmp_path):
    td = no_quota(sysfs=str(tmp_path / "missing"), cpus={0, 1, 2})
    assert (td.count, td.online, td.fastest) == (3, (), ())
    assert td.reason == "affinity {0-2}; no core clusters in sysfs; no cgroup CPU quota"


# --- cgroup v2 quota -----------------------------------------------------------------------------

def test_quota_150_percent_is_2(tmp_path, big_little):
    proc, root = fake_cgroup(tmp_path, "/a/b", {"a": "max 100000\n", "a/b": "150000 100000\n"})
    q = th.cgroup_quota(proc, root)
    assert (q.quota, q.period, q.cpus, Path(q.path)) == (150000, 100000, 2, Path(root) / "a" / "b")
    td = th.machine_default(sysfs=big_little, proc_cgroup=proc, cgroup_root=root, cpus=range(8))
    assert td.count == 2  # 3 big cores allowed, quota 1.5 CPUs -> 2 threads
    assert td.reason.endswith("; cgroup cpu.max 150000/100000 -> 2")
    assert th.machine_default(sysfs=big_little, proc_cgroup=proc, cgroup_root=root, cpus={4}).count == 1


def test_quota_one_cpu_reason(tmp_path):
    sysfs = fake_sysfs(tmp_path / "sys", [(0, 2000000, None), (1, 2000000, "1")])
    proc, root = fake_cgroup(tmp_path, "/svc", {"svc": "100000 100000"})
    td = th.machine_default(sysfs=sysfs, proc_cgroup=proc, cgroup_root=root, cpus={0, 1})
    assert td.count == 1
    assert td.reason == "affinity {0,1} of 2 online; fastest cluster {0,1} at 2.00 GHz; " \
                        "cgroup cpu.max 100000/100000 -> 1"


@pytest.mark.parametrize("files, path, expected", [
    ({"a": "50000 100000", "a/b": "300000 100000"}, "a", 1),    # the parent is tighter: it binds
    ({"a": "400000 100000", "a/b": "250000 100000"}, "a/b", 3),
    ({"": "200000 100000", "a": "max 100000"}, "", 2),           # the mount itself (a cgroup namespace's root)
    ({"a/b": "1000 100000"}, "a/b", 1),                          # tiny quota: at least 1
    ({"a/b": "250000 50000"}, "a/b", 5),                         # another period
])
def test_quota_tightest_along_the_path(tmp_path, files, path, expected):
    proc, root = fake_cgroup(tmp_path, "/a/b", files)
    q = th.cgroup_quota(proc, root)
    assert q.cpus == expected and Path(q.path) == Path(root, path)
    assert th.machine_default(sysfs=NO_FILE, proc_cgroup=proc, cgroup_root=root, cpus=range(64)).count == expected


@pytest.mark.parametrize("text", ["max 100000", "max", "", "abc", "100000", "0 100000", "-5 100000", "100000 0",
                                  "1 2 3", "1.5 100000", "\x00\x01"])
def test_no_or_malformed_quota_falls_back_to_affinity(tmp_path, text):
    proc, root = fake_cgroup(tmp_path, "/a", {"a": text})
    assert th.cgroup_quota(proc, root) is None
    td = th.machine_default(sysfs=NO_FILE, proc_cgroup=proc, cgroup_root=root, cpus={0, 1, 2})
    assert (td.count, td.quota) == (3, None)
    assert td.reason.endswith("no cgroup CPU quota")


def test_malformed_level_does_not_hide_a_valid_one(tmp_path):
    proc, root = fake_cgroup(tmp_path, "/a/b", {"a": "200000 100000", "a/b": "garbage"})
    assert th.cgroup_quota(proc, root).cpus == 2


def test_missing_cgroup_files(tmp_path):
    proc, root = fake_cgroup(tmp_path, "/a/b", {})
    assert th.cgroup_quota(proc, root) is None                               # no cpu.max anywhere
    assert th.cgroup_quota(NO_FILE, root) is None                            # no /proc/self/cgroup
    assert th.cgroup_quota(proc, str(tmp_path / "nomount")) is None          # no mount
    v1 = tmp_path / "v1"
    v1.write_text("4:cpu,cpuacct:/x\n1:name=systemd:/x\n")                   # cgroup v1 only
    assert th.cgroup_quota(str(v1), root) is None
    empty = tmp_path / "empty"
    empty.write_text("")
    assert th.cgroup_quota(str(empty), root) is None
    td = th.machine_default(sysfs=NO_FILE, proc_cgroup=NO_FILE, cgroup_root=root, cpus={3})
    assert td.count == 1 and td.quota is None


def test_unreadable_cgroup(tmp_path):
    proc, root = fake_cgroup(tmp_path, "/a/b", {"a/b": "100000 100000"})
    # cpu.max that cannot be read as a file (a directory): skipped.
    (Path(root) / "a" / "cpu.max").mkdir()
    assert th.cgroup_quota(proc, root).cpus == 1
    # An unreadable directory: no quota from it (unless we are root, which ignores the mode).
    d = Path(root) / "a" / "b"
    d.chmod(0)
    try:
        readable = os.access(d / "cpu.max", os.R_OK)
        q = th.cgroup_quota(proc, root)
        assert (q.cpus if q else None) == (1 if readable else None)
        assert th.machine_default(sysfs=NO_FILE, proc_cgroup=proc, cgroup_root=root,
                                  cpus={0, 1}).count == (1 if readable else 2)
    finally:
        d.chmod(0o755)
    # An unreadable /proc/self/cgroup (a directory here): no quota, no exception.
    assert th.cgroup_quota(str(tmp_path), root) is None


def test_cgroup_mount_from_mountinfo(tmp_path):
    """The cgroup2 mount comes from mountinfo (hybrid systems put it at /sys/fs/cgroup/unified; a
    container without a cgroup namespace sees a subtree whose root is its own cgroup)."""
    proc, root = fake_cgroup(tmp_path, "/docker/abc/app", {"app": "300000 100000", "": "max 100000"})
    mi = tmp_path / "mountinfo"
    mi.write_text(f"31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
                  f"32 31 0:29 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
                  f"41 31 0:38 /docker/abc {root} rw,relatime - cgroup2 cgroup2 rw\n")
    assert th.cgroup2_mount(str(mi)) == (root, "/docker/abc")
    assert th.cgroup_quota(proc, mountinfo=str(mi)).cpus == 3
    # A path outside the visible subtree ("/../.." in a cgroup namespace): the mount's own cpu.max.
    (Path(root) / "cpu.max").write_text("100000 100000\n")
    outside = tmp_path / "outside"
    outside.write_text("0::/../../other\n")
    assert th.cgroup_quota(str(outside), mountinfo=str(mi)).cpus == 1
    # Escaped mount points (a space is \040).
    spaced = tmp_path / "with space"
    spaced.mkdir()
    mi.write_text("41 31 0:38 / " + str(spaced).replace(" ", "\\040") + " rw - cgroup2 cgroup2 rw\n")
    assert th.cgroup2_mount(str(mi)) == (str(spaced), "/")
    mi.write_text("41 31 0:38 / /x rw - tmpfs tmpfs rw\n")
    assert th.cgroup2_mount(str(mi)) is None
    assert th.cgroup2_mount(NO_FILE) is None


# --- $VKINFER_CPU_THREADS ------------------------------------------------------------------------

def test_env_override():
    assert th.env_threads({}) is None
    assert th.env_threads({"VKINFER_CPU_THREADS": ""}) is None  # empty = unset, as in C
    assert th.env_threads({"VKINFER_CPU_THREADS": " 4\n"}) == 4
    assert th.env_threads({"VKINFER_CPU_THREADS": "1024"}) == 1024
    machine = th.machine_default(sysfs=NO_FILE, proc_cgroup=NO_FILE, mountinfo=NO_FILE, cpus={0})
    td = th.resolve({"VKINFER_CPU_THREADS": "3"}, machine)
    assert (td.count, td.env, td.machine_count) == (3, 3, 1)
    assert td.reason.startswith("$VKINFER_CPU_THREADS=3; otherwise 1: affinity {0}")
    assert th.resolve({}, machine) is machine


@pytest.mark.parametrize("bad", ["0", "-1", "abc", "2.5", "1e3", "1025", "3 threads", "0x4"])
def test_env_bad_values(bad, monkeypatch):
    with pytest.raises(ValueError, match=r"\$VKINFER_CPU_THREADS .*" + repr(bad).replace(".", r"\.")):
        th.env_threads({"VKINFER_CPU_THREADS": bad})
    monkeypatch.setenv("VKINFER_CPU_THREADS", bad)
    with pytest.raises(ValueError, match="VKINFER_CPU_THREADS"):
        cpu.default_threads()


def test_env_bad_value_fails_a_cpu_run(monkeypatch):
    """A run without an explicit count goes through the same check; an explicit count does not need it."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, 4, 5, 5), dtype=np.uint8)
    w = rng.integers(-128, 128, (4, 4, 3, 3), dtype=np.int8)
    args = dict(x=x, x_scale=np.float32(0.1), x_zero_point=np.uint8(0), w=w, w_scale=np.float32(0.1),
                w_zero_point=np.int8(0), y_scale=np.float32(0.5), y_zero_point=np.uint8(0))
    from vkinfer import ops

    ref = ops.qlinear_conv(**args, device="reference")
    monkeypatch.setenv("VKINFER_CPU_THREADS", "many")
    with pytest.raises(ValueError, match="VKINFER_CPU_THREADS"):
        ops.qlinear_conv(**args, device="cpu")
    np.testing.assert_array_equal(ops.qlinear_conv(**args, device="cpu", threads=2), ref)
    monkeypatch.setenv("VKINFER_CPU_THREADS", "2")
    np.testing.assert_array_equal(ops.qlinear_conv(**args, device="cpu"), ref)


# --- the C library and the CLI -------------------------------------------------------------------

def test_c_library_takes_the_python_default(monkeypatch):
    monkeypatch.delenv("VKINFER_CPU_THREADS", raising=False)
    so = cpu.lib()
    machine = th.machine_default()
    assert so.vki_get_default_threads() == machine.count == cpu.default_threads()
    assert so.vki_default_threads() == machine.count
    monkeypatch.setenv("VKINFER_CPU_THREADS", "5")  # C still honours the variable (its header's contract)
    assert so.vki_default_threads() == 5 and so.vki_get_default_threads() == machine.count
    assert so.vki_set_default_threads(0) == 1 and "default threads" in so.vki_last_error().decode()
    assert so.vki_set_default_threads(1025) == 1
    assert so.vki_get_default_threads() == machine.count  # rejected values leave it alone


def _python_in(cpus: set[int], code: str) -> str:
    taskset = shutil.which("taskset")
    if taskset is None:
        pytest.fail("taskset is missing: apt-get install util-linux (Essential on Debian)", pytrace=False)
    env = {k: v for k, v in os.environ.items() if k != "VKINFER_CPU_THREADS"}
    r = subprocess.run([taskset, "-c", ",".join(map(str, sorted(cpus))), sys.executable, "-c", code], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


def test_taskset_one_cpu_gives_one_thread():
    """`taskset -c N python`: 1 thread in Python and in the C library, whatever the machine has."""
    first = min(os.sched_getaffinity(0))
    out = _python_in({first}, "import vkinfer.cpu as c; print(c.default_threads(), c.lib().vki_get_default_threads(),"
                              " c.lib().vki_default_threads())")
    assert out == ["1", "1", "1"]


def test_subprocess_matches_the_policy():
    """Without taskset limits beyond ours, a fresh process gets what the policy computes here."""
    aff = os.sched_getaffinity(0)
    out = _python_in(aff, "import vkinfer.cpu as c; print(c.default_threads(), c.lib().vki_get_default_threads())")
    expected = th.machine_default().count
    assert out == [str(expected), str(expected)]


def test_devices_shows_count_and_reason(capsys, monkeypatch):
    monkeypatch.delenv("VKINFER_CPU_THREADS", raising=False)
    td = cpu.thread_default()
    assert main(["devices"]) == 0
    assert f"default threads {td.count} ({td.reason})" in capsys.readouterr().out
    monkeypatch.setenv("VKINFER_CPU_THREADS", "lots")
    assert main(["devices"]) == 0
    assert "default threads: $VKINFER_CPU_THREADS must be" in capsys.readouterr().out
