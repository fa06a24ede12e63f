"""Cache files are verified, never trusted (issue 26, vkinfer/_cache.py): every poisoned cache an attack tried
gives correct answers on cpu and vulkan (and auto), with RuntimeWarnings only, and never hangs or reads without
bound.

- SPIR-V entries: truncated, garbage, two valid entries swapped (each header carries its key), a pre-header bare
  SPIR-V file, a symlink to /dev/zero or to a file outside the cache, a FIFO, a directory in place of a file;
- every cache folder unwritable, or the cache root a regular file: an in-memory cache, one warning per folder;
- a symlink planted at any name the temp file could take is never followed (mkstemp, O_EXCL), nor one at the
  entry's own name (os.replace replaces the link);
- the pipeline cache, the calibration entries and the Vulkan device list refuse a symlink, a FIFO, a directory and
  (for the JSON ones) a bad stamp; a profile file that is a FIFO or /dev/zero is a ValueError.
Answers are compared with ONNX Runtime's. Each check runs under a deadline (SIGALRM), so a hang fails the test.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import os
import signal
import tempfile
import uuid
import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from support.agree import run_devices
from support.small_model import small_qmodel

import vkinfer
from vkinfer import _cache, _glsl, _vk
from vkinfer.dispatch import calibrate as calibrate_mod
from vkinfer.dispatch import machine as machine_mod
from vkinfer.dispatch.costs import CLASSES
from vkinfer.dispatch.profile import (
    ClassModel,
    DeviceProfile,
    Link,
    cache_key,
    cache_root,
    cached_entry,
    cpu_identity,
    host_identity,
    load_profile,
    store_entry,
)

MODEL = small_qmodel(3)
FEED = {"x": np.random.default_rng(3).integers(0, 256, (1, 3, 9, 9), dtype=np.uint8)}
DEADLINE_S = 60


def _ort_outputs() -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(MODEL, opts, providers=["CPUExecutionProvider"]).run(None, FEED)


WANT = _ort_outputs()


@contextlib.contextmanager
def deadline(seconds: int = DEADLINE_S):
    """Fail (TimeoutError) instead of hanging: a FIFO read or an unbounded read is interrupted by SIGALRM."""
    def expired(signum, frame):
        raise TimeoutError(f"still running after {seconds} s: a cache file was read without bound or blocked")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def _forget_spirv() -> None:
    """This process's SPIR-V memo (so the next session reads the disk cache again, as a fresh process would)."""
    _glsl.spirv.cache_clear()
    _glsl._futures.clear()


@pytest.fixture(autouse=True, scope="module")
def no_selftest():
    """These tests count the SPIR-V entries a model reads; the Vulkan self-test would compile every kernel's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("VKINFER_SELFTEST", "0")
        yield


@pytest.fixture(scope="module")
def cold_spirv(tmp_path_factory) -> dict[str, bytes]:
    """The SPIR-V cache entries of MODEL on vulkan, as a cold cache makes them (compiled once per module)."""
    root = tmp_path_factory.mktemp("cold") / "cache"
    old = os.environ.get("VKINFER_CACHE")
    os.environ["VKINFER_CACHE"] = str(root)
    _forget_spirv()
    try:
        assert _glsl.packaged() is None, "these tests poison the development path's SPIR-V cache"
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            run_devices(MODEL, FEED, want=WANT, devices=("vulkan",))
    finally:
        if old is None:
            os.environ.pop("VKINFER_CACHE", None)
        else:
            os.environ["VKINFER_CACHE"] = old
        _forget_spirv()
    entries = {p.name: p.read_bytes() for p in (root / "spirv").glob("*.spv")}
    assert len(entries) >= 2, f"the vulkan session cached {len(entries)} SPIR-V entries"
    return entries


@pytest.fixture
def cache(tmp_path, monkeypatch, cold_spirv) -> Path:
    """A private $VKINFER_CACHE holding the SPIR-V cache of MODEL on vulkan."""
    root = tmp_path / "cache"
    (root / "spirv").mkdir(parents=True)
    for name, data in cold_spirv.items():
        (root / "spirv" / name).write_bytes(data)
    monkeypatch.setenv("VKINFER_CACHE", str(root))
    monkeypatch.delenv("VKINFER_DEVICE", raising=False)
    _forget_spirv()
    yield root
    _forget_spirv()


def _entries(root: Path) -> list[Path]:
    return sorted((root / "spirv").glob("*.spv"))


def _run_with_warnings_only(devices=("cpu", "vulkan")) -> list[warnings.WarningMessage]:
    """MODEL on `devices` equals ONNX Runtime, under the deadline; returns the warnings (all RuntimeWarnings)."""
    with deadline(), warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        run_devices(MODEL, FEED, want=WANT, devices=devices)
    assert all(issubclass(w.category, RuntimeWarning) for w in rec), [str(w.message) for w in rec]
    return rec


def _truncate(p: Path, good: dict[Path, bytes]) -> None:
    p.write_bytes(good[p][: len(good[p]) // 2])


def _garbage(p: Path, good: dict[Path, bytes]) -> None:
    p.write_bytes(np.random.default_rng(len(p.name)).integers(0, 256, len(good[p]), np.uint8).tobytes())


def _bare_spirv(p: Path, good: dict[Path, bytes]) -> None:
    """The format before headers: raw SPIR-V words of *another* shader (what a swap did then)."""
    names = sorted(good)
    other = names[(names.index(p) + 1) % len(names)]
    p.write_bytes(good[other].split(b"\n", 1)[1])


def _dev_zero(p: Path, good: dict[Path, bytes]) -> None:
    p.unlink()
    p.symlink_to("/dev/zero")


def _outside(p: Path, good: dict[Path, bytes]) -> None:
    """A symlink to a file outside the cache (holding the entry's own good bytes: refused all the same)."""
    target = p.parent.parent.parent / f"outside-{p.name}"
    target.write_bytes(good[p])
    p.unlink()
    p.symlink_to(target)


def _fifo(p: Path, good: dict[Path, bytes]) -> None:
    p.unlink()
    os.mkfifo(p)


def _directory(p: Path, good: dict[Path, bytes]) -> None:
    p.unlink()
    p.mkdir()
    (p / "x").write_bytes(b"a directory where a cache entry should be")


POISONS = {"truncated": _truncate, "garbage": _garbage, "bare-spirv-of-another-shader": _bare_spirv,
           "symlink-to-dev-zero": _dev_zero, "symlink-outside": _outside, "fifo": _fifo, "directory": _directory}


# Each run poisons every entry, each with one of these in turn (MODEL has 4 SPIR-V variants on vulkan): two runs
# cover every poison, at 2 s a run on a 2-core machine, where one run per poison took 7.
MIXES = [("truncated", "garbage", "bare-spirv-of-another-shader", "symlink-to-dev-zero"),
         ("symlink-outside", "fifo", "directory", "truncated")]


@pytest.mark.parametrize("mix", MIXES, ids=["-".join(m[:2]) + "-..." for m in MIXES])
def test_poisoned_spirv_entries_give_correct_answers_with_warnings(cache, mix):
    entries = _entries(cache)
    assert len(entries) >= len(mix), f"MODEL has {len(entries)} SPIR-V variants: fewer poisons per run (MIXES)"
    good = {p: p.read_bytes() for p in entries}
    poisoned = {p: mix[i % len(mix)] for i, p in enumerate(entries)}
    for p, poison in poisoned.items():
        POISONS[poison](p, good)
    rec = _run_with_warnings_only()
    named = [str(w.message) for w in rec if "ignoring spirv cache file" in str(w.message)]
    assert {Path(m.split("spirv cache file ", 1)[1].split(":", 1)[0]) for m in named} == set(entries), named
    assert len(named) == len(entries)
    dirs = {p for p, poison in poisoned.items() if poison == "directory"}
    # A directory cannot be replaced: its entry is kept in memory, with one more warning for the folder.
    assert len(rec) == len(entries) + bool(dirs)
    assert bool(dirs) == any("cannot write spirv cache file" in str(w.message) for w in rec)
    # Every other entry was rebuilt and rewritten: a regular file holding what a cold compile wrote.
    assert {p: p.read_bytes() for p in entries if p.is_file() and not p.is_symlink()} == \
        {p: b for p, b in good.items() if p not in dirs}
    for p in entries:  # the symlinks' targets are untouched
        target = cache.parent / f"outside-{p.name}"
        assert not target.exists() or target.read_bytes() == good[p]
    _forget_spirv()
    assert _run_with_warnings_only(("vulkan",)) == []  # sound files now (or the in-memory entries)


def test_two_swapped_entries_are_caught_by_their_keys(cache):
    a, b = _entries(cache)[:2]
    da, db = a.read_bytes(), b.read_bytes()
    a.write_bytes(db)
    b.write_bytes(da)
    rec = _run_with_warnings_only()
    msgs = [str(w.message) for w in rec]
    for p in (a, b):
        assert any(str(p) in m and "another key (a renamed or swapped entry)" in m for m in msgs), msgs
    assert a.read_bytes() == da and b.read_bytes() == db  # rebuilt in place


def test_the_header_check_catches_every_kind_of_damage():
    payload = b"\x03\x02\x23\x07" + bytes(range(60))
    key, other = _cache.key_of("shader a", ()), _cache.key_of("shader b", ())
    blob = _cache.pack("spirv", key, payload)
    assert _cache.unpack(blob, "spirv", key) == (payload, "")
    cases = {
        "another key (a renamed or swapped entry)": _cache.pack("spirv", other, payload),
        "truncated or padded": blob[:-4],
        "truncated or padded (payload of 65": blob + b"\0",
        "checksum mismatch": blob[:-1] + bytes([blob[-1] ^ 1]),
        "no header": blob[:20],
        "bad header": b"vkinfer-cachX" + blob[13:],
        "not a spirv one": _cache.pack("pipelines", key, payload),
        "cache format 2": blob.replace(b"vkinfer-cache 1 ", b"vkinfer-cache 2 ", 1),
    }
    for why, bad in cases.items():
        got, reason = _cache.unpack(bad, "spirv", key)
        assert got is None and why in reason, (why, reason)
    assert _cache.unpack(payload, "spirv", key)[0] is None  # a bare payload (the old format) is refused
    assert "magic" in _glsl._check_spirv(b"\0" * 64) and "words" in _glsl._check_spirv(payload[:-1])
    assert _glsl._check_spirv(payload) == ""


def test_an_unwritable_cache_folder_becomes_an_in_memory_cache_with_one_warning(tmp_path, monkeypatch):
    """Every write refused (as a read-only folder does for a user; root ignores chmod, so mkstemp is made to
    refuse): cpu and vulkan work, one warning for the SPIR-V folder, and the entries are served from memory."""
    monkeypatch.setenv("VKINFER_CACHE", str(tmp_path / "ro"))
    (tmp_path / "ro" / "spirv").mkdir(parents=True)

    def refuse(**kw):
        raise PermissionError(errno.EACCES, "Permission denied", kw.get("dir"))
    monkeypatch.setattr(_cache, "_mkstemp", refuse)
    _forget_spirv()
    try:
        rec = _run_with_warnings_only()
        folder = [str(w.message) for w in rec if "cannot write spirv cache file" in str(w.message)]
        assert len(folder) == 1, [str(w.message) for w in rec]
        assert not list((tmp_path / "ro" / "spirv").iterdir())
        _forget_spirv()  # the next sessions find the SPIR-V in memory: no compile, no warning

        def no_compile(*a, **k):
            raise AssertionError("compiled again: the in-memory cache was not used")
        monkeypatch.setattr(_glsl, "_compile", no_compile)
        assert _run_with_warnings_only(("vulkan",)) == []
    finally:
        _forget_spirv()


def _fake_calibration(calls: list):
    """Stands in for calibrate_device (a real one takes seconds): an entry with this machine's identity."""
    def calibrate(device, threads=1, mode="quick", log=None):
        calls.append((device, threads))
        kind = device.partition(":")[0]
        if device == "cpu":
            ident = cpu_identity()
        elif kind == "vulkan":
            ident = next(d["identity"] for d in machine_mod.vulkan_devices() if d["device"] == device)
        else:
            ident = host_identity()
        models = {c: ClassModel(1000.0, 0.01, 0.01, 6, 0.05) for c in CLASSES}
        return DeviceProfile(device, kind, threads, ident, 2000.0, Link(300.0, 0.05), Link(300.0, 0.05), (1, 1),
                             1.1, models)
    return calibrate


def test_a_cache_root_that_is_a_file_leaves_cpu_vulkan_and_auto_working(tmp_path, monkeypatch):
    root = tmp_path / "not-a-folder"
    root.write_bytes(b"a file where $VKINFER_CACHE should be a folder")
    monkeypatch.setenv("VKINFER_CACHE", str(root))
    monkeypatch.delenv("VKINFER_DEVICE", raising=False)
    calls: list = []
    monkeypatch.setattr(calibrate_mod, "calibrate_device", _fake_calibration(calls))
    _forget_spirv()
    try:
        rec = _run_with_warnings_only(("cpu", "vulkan", "auto"))
        msgs = [str(w.message) for w in rec]
        assert sum("cannot write spirv cache file" in m for m in msgs) == 1, msgs
        assert sum("cannot write calibration cache file" in m for m in msgs) == 1, msgs
        assert calls, "auto calibrated nothing"
        first = len(calls)
        with warnings.catch_warnings(record=True) as rec2:  # the calibration is kept in memory
            warnings.simplefilter("always")
            with deadline():
                run_devices(MODEL, FEED, want=WANT, devices=("auto",))
        assert len(calls) == first and all(issubclass(w.category, RuntimeWarning) for w in rec2)
        assert root.read_bytes().startswith(b"a file where")
        with warnings.catch_warnings(record=True) as rec3:  # a fresh device: the pipeline cache cannot be used
            warnings.simplefilter("always")
            dev = _vk.Device(_vk._pick(None), pipeline_threads=0)
            assert dev.save_pipeline_cache() is None
        assert rec3 and all(issubclass(w.category, RuntimeWarning) for w in rec3)
    finally:
        _forget_spirv()


def test_a_symlink_planted_at_any_temp_name_is_never_followed(cache, monkeypatch):
    """mkstemp's candidate names are made predictable here and a symlink to a victim file is planted at each:
    the writes skip them (O_EXCL) and the victim is untouched. A symlink at the entry's own name is replaced, not
    written through."""
    victim = cache.parent / "victim"
    victim.write_bytes(b"precious")
    planted = ["planted0", "planted1", "planted2"]
    monkeypatch.setattr(tempfile, "_get_candidate_names",
                        lambda: itertools.chain(planted, (uuid.uuid4().hex for _ in range(100))))
    real = _cache._mkstemp

    def planting(dir, prefix, suffix):  # noqa: A002 - mkstemp's name
        for n in planted:
            link = Path(dir) / f"{prefix}{n}{suffix}"
            if not link.is_symlink():
                link.symlink_to(victim)
        return real(dir=dir, prefix=prefix, suffix=suffix)
    monkeypatch.setattr(_cache, "_mkstemp", planting)
    entries = _entries(cache)
    for p in entries:
        p.unlink()
        p.symlink_to(victim)
    rec = _run_with_warnings_only()
    assert all("symbolic link" in str(w.message) for w in rec) and len(rec) == len(entries)
    assert victim.read_bytes() == b"precious"
    for p in entries:
        assert p.is_file() and not p.is_symlink()
    # The pipeline cache and the calibration cache write through the same code.
    dev = _vk.Device(_vk._pick(None), pipeline_threads=0)
    assert dev.save_pipeline_cache() == dev.pipeline_cache_path
    store_entry(_fake_calibration([])("cpu"), {"mode": "quick"})
    assert victim.read_bytes() == b"precious"
    assert cached_entry("cpu", cpu_identity(), 1) is not None


def _pipeline_poison(path: Path, poison: str) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    if poison == "fifo":
        os.mkfifo(path)
        return "a FIFO"
    if poison == "directory":
        path.mkdir()
        return "a directory"
    path.symlink_to("/dev/zero")
    return "symbolic link"


@pytest.mark.parametrize("poison", ["symlink-to-dev-zero", "fifo", "directory"])
def test_a_pipeline_cache_that_is_no_regular_file_is_refused(tmp_path, monkeypatch, poison):
    monkeypatch.setenv("VKINFER_CACHE", str(tmp_path))
    monkeypatch.delenv("VKINFER_PIPELINE_CACHE", raising=False)
    info = _vk._pick(None)
    path = _vk._pipeline_cache_file(_vk._instance().identity(info.index))
    why = _pipeline_poison(path, poison)
    with deadline(), pytest.warns(RuntimeWarning, match="ignoring pipeline cache") as rec:
        dev = _vk.Device(info, pipeline_threads=0)
    assert why in str(rec[0].message) and dev.stats["pipeline_cache_initial_bytes"] == 0
    if poison == "directory":  # cannot be replaced: a warning, and the device works on
        with pytest.warns(RuntimeWarning, match="could not write pipeline cache"):
            assert dev.save_pipeline_cache() is None
    else:
        assert dev.save_pipeline_cache() == path and path.is_file() and not path.is_symlink()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert _vk.Device(info, pipeline_threads=0).pipeline_cache_status == "loaded"


@pytest.fixture
def calib(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("VKINFER_CACHE", str(tmp_path))
    return cache_root()


def _calibration_poison(path: Path, poison: str, other: Path) -> None:
    if poison == "swapped":
        a, b = path.read_bytes(), other.read_bytes()
        path.write_bytes(b)
        other.write_bytes(a)
        return
    path.unlink()
    if poison == "fifo":
        os.mkfifo(path)
    elif poison == "directory":
        path.mkdir()
    elif poison == "symlink-to-dev-zero":
        path.symlink_to("/dev/zero")
    else:  # unstamped: valid JSON of the right shape without the stamp
        path.write_text('{"schema": "vkinfer-profile/1", "devices": []}')


@pytest.mark.parametrize("poison", ["swapped", "fifo", "directory", "symlink-to-dev-zero", "unstamped"])
def test_poisoned_calibration_entries_are_ignored_with_a_warning(calib, poison):
    fake = _fake_calibration([])
    for t in (1, 2):
        store_entry(fake("cpu", t), {"mode": "quick"})
    path, other = calib / cache_key("cpu", cpu_identity(), 1), calib / cache_key("cpu", cpu_identity(), 2)
    _calibration_poison(path, poison, other)
    with deadline(), pytest.warns(RuntimeWarning, match="calibration cache") as rec:
        assert cached_entry("cpu", cpu_identity(), 1) is None
    assert str(path) in str(rec[0].message)
    if poison == "swapped":
        assert "swapped" in str(rec[0].message)
    if poison != "directory":  # the caller recalibrates and stores: a sound file again
        store_entry(fake("cpu", 1), {"mode": "quick"})
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert cached_entry("cpu", cpu_identity(), 1).threads == 1


def test_an_unwritable_calibration_folder_keeps_entries_in_memory(calib, monkeypatch):
    calib.parent.mkdir(parents=True, exist_ok=True)
    calib.write_text("a file where the calibration folder should be")
    fake = _fake_calibration([])
    with pytest.warns(RuntimeWarning, match="cannot write calibration cache file") as rec:
        store_entry(fake("cpu", 1), {"mode": "quick"})
        store_entry(fake("cpu", 2), {"mode": "quick"})
    assert len(rec) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cached_entry("cpu", cpu_identity(), 2).threads == 2


@pytest.mark.parametrize("poison", ["fifo", "symlink-to-dev-zero", "directory", "bad-entry", "unstamped"])
def test_a_poisoned_vulkan_device_list_is_enumerated_again(calib, poison):
    good = machine_mod.vulkan_devices()
    path = calib / "vulkan-devices.json"
    if poison == "bad-entry":  # a sound stamp over entries of the wrong shape
        doc = _cache.unstamp_json(path.read_bytes(), machine_mod._DEVICES_KEY)[0]
        doc["devices"] = [{"device": "vulkan:x"}]
        path.write_bytes(_cache.stamp_json(doc, machine_mod._DEVICES_KEY))
    elif poison == "unstamped":  # an older vkinfer's file: enumerated again silently
        path.write_text(json.dumps({"fingerprint": machine_mod.vulkan_fingerprint(), "devices": []}))
    else:
        _calibration_poison(path, poison, path)
    with deadline(), warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert machine_mod.vulkan_devices() == good
    msgs = [str(w.message) for w in rec]
    if poison == "unstamped":
        assert msgs == []
    else:  # a directory cannot be replaced: one more warning, and the list is kept in memory
        assert len(msgs) == 1 + (poison == "directory"), msgs
        assert "ignoring Vulkan device list cache" in msgs[0] and str(path) in msgs[0], msgs
        assert all(issubclass(w.category, RuntimeWarning) for w in rec)


@pytest.mark.parametrize("what", ["fifo", "dev-zero", "directory"])
def test_a_profile_that_is_no_regular_file_is_a_value_error(tmp_path, what):
    path = tmp_path / "profile.json"
    if what == "fifo":
        os.mkfifo(path)
    elif what == "directory":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")  # a profile named by the user may be a symlink; its target is checked
    with deadline(), pytest.raises(ValueError, match=r"profile .*profile\.json: not a readable JSON file \(a "):
        load_profile(path)


def test_read_file_bounds_and_kinds(tmp_path):
    f = tmp_path / "f"
    f.write_bytes(b"x" * 100)
    assert _cache.read_file(f, 100) == b"x" * 100
    with pytest.raises(_cache.UnsafeFileError, match="over the 99-byte limit"):
        _cache.read_file(f, 99)
    link = tmp_path / "link"
    link.symlink_to(f)
    with pytest.raises(_cache.UnsafeFileError, match="symbolic link"):
        _cache.read_file(link, 100)
    assert _cache.read_file(link, 100, follow_symlinks=True) == b"x" * 100
    with deadline(), pytest.raises(_cache.UnsafeFileError, match="a character device"):
        _cache.read_file("/dev/zero", 1 << 20, follow_symlinks=True)
    with pytest.raises(FileNotFoundError):
        _cache.read_file(tmp_path / "missing", 100)
    with pytest.raises(NotADirectoryError):
        _cache.read_file(f / "below-a-file", 100)
    assert vkinfer  # the package imports (the cache module stays importable without numpy: build_spirv.py)
