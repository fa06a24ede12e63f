"""Calibration profiles: what each device costs, as a small, documented JSON document.

A profile is a list of device entries. Each entry is one device at one thread count (the CPU is calibrated at
every useful thread count, since small layers often run faster on one thread), with:

    {"schema": "vkinfer-profile/1", "vkinfer": "0.1.0",
     "devices": [
       {"device": "cpu",          # "cpu", "vulkan:<index>" or "host" (the numpy interpreter)
        "kind": "cpu",            # cpu | vulkan | host
        "threads": 1,             # CPU threads (1 for the others)
        "identity": {...},        # what the numbers are valid for (below)
        "segment_ns": 2100,       # per segment and run: one native call (cpu); submit + wait (vulkan)
        "upload":   {"fixed_ns": 300, "ns_per_byte": 0.05},   # a host array into the device's form, per tensor
        "download": {"fixed_ns": 300, "ns_per_byte": 0.05},   # and back
        "tile": [1, 1],           # rows x output channels a GEMM-like kernel computes at once (GPU grids,
                                  # CPU register tiles); a class may give its own "tile"
        "tail": 1.08,             # p90 / p50 of the calibration runs: objective="p90" scales by it
        "classes": {              # one linear model per op class (vkinfer/dispatch/costs.py), every class
          "gemm": {"fixed_ns": 900, "ns_per_mac": 0.004, "ns_per_byte": 0.02, "samples": 6, "error": 0.05},
          ...},
        # Optional, CPU entries since kernel paths (absent: every node by its class):
        "paths": {"gemm/i16": {...the class model's fields...}, "conv/u8s8/grouped": {...}, ...},
        "u8s8": {"igemm": [-128, 127], "depthwise": [-128, 127]},   # the u8s8 kernels' weight ranges
        "links": {"upload:float32": {"fixed_ns": 0, "ns_per_byte": 0}, "upload:int8": {...}, ...}},
       ...],
     "calibration": {"mode": "quick", "seconds": 3.1, "date": "2026-11-22T10:00:00"}}

A node's predicted time is `fixed_ns + ns_per_mac * tiled MACs + ns_per_byte * bytes` (costs.Work) of its most
specific kernel path's model (costs.path_keys; the u8s8 ranges decide a node's weight path), else its class's;
a tensor's upload/download is its dtype's link where the entry has one;
`samples` and `error` (median relative error of the fit; of a CPU class, that of its predictions through its
kernel paths) say how far it can be trusted: a class whose error is
above UNTRUSTED_ERROR is not weighed against another device (`with_fallbacks`). Identity: for "cpu", the CPU model
name, the ISA variant and the architecture; for "vulkan:<n>", the device's name, type, vendor and device ids,
driver version and device/driver UUIDs; for "host", the CPU model and numpy's version. A cached entry is
valid only for the same identity, thread count, vkinfer version and schema; anything else recalibrates.
Profiles for devices this machine does not have (a phone GPU, say) plan without running:
`vkinfer info MODEL --profile FILE`.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import warnings
from pathlib import Path

import numpy as np

from .. import _cache
from .costs import CLASSES, Work, path_keys

SCHEMA = "vkinfer-profile/1"
KINDS = ("cpu", "vulkan", "host")
# A fit whose median relative error is above this is not trusted. The trusted fits here stay under it: 5-42% for
# the CPU at 1 and 2 threads, 7-39% for lavapipe (quick calibrations, this 2-core VM); lavapipe's gemv once came
# out at 100% (4 samples of 5 us to 0.6 ms whose noise the 3-term fit followed, 10303 GMAC/s), which would have
# predicted a 1280->1000 classifier at microseconds where it takes 0.6 ms.
UNTRUSTED_ERROR = 0.5
#: A profile file (`load_profile`) and a calibration cache file are refused above these sizes: a profile of every
#: device of a large fleet is a few hundred KiB, a cached entry about 3 KiB.
PROFILE_MAX_BYTES = 64 << 20
CACHE_ENTRY_MAX_BYTES = 1 << 20


def _version() -> str:
    from .. import _version as v  # read at call time: tests stand in another version

    return v.__version__


@dataclasses.dataclass(frozen=True)
class ClassModel:
    """time = fixed_ns + ns_per_mac * tiled MACs + ns_per_byte * bytes (+ ns_per_out * output elements: a CPU
    kernel path's requantization and store per output, fitted where it explains the path better)."""

    fixed_ns: float
    ns_per_mac: float
    ns_per_byte: float
    samples: int = 0
    error: float = 0.0
    tile: tuple[int, int] | None = None  # this class's own tile, else the device's
    ns_per_out: float = 0.0

    def ns(self, work: Work, tile: tuple[int, int]) -> float:
        return (self.fixed_ns + self.ns_per_mac * work.tiled_macs(self.tile or tile) + self.ns_per_byte * work.bytes
                + self.ns_per_out * work.out_elems)

    def to_json(self) -> dict:
        d = {"fixed_ns": self.fixed_ns, "ns_per_mac": self.ns_per_mac, "ns_per_byte": self.ns_per_byte,
             "samples": self.samples, "error": self.error}
        if self.tile is not None:
            d["tile"] = list(self.tile)
        if self.ns_per_out:
            d["ns_per_out"] = self.ns_per_out
        return d


@dataclasses.dataclass(frozen=True)
class Link:
    """Moving one tensor between a host array and the device: fixed_ns + ns_per_byte * bytes."""

    fixed_ns: float
    ns_per_byte: float

    def ns(self, nbytes: int) -> float:
        return self.fixed_ns + self.ns_per_byte * nbytes


@dataclasses.dataclass
class DeviceProfile:
    """One device (at one thread count) in a profile (module docstring)."""

    device: str
    kind: str
    threads: int
    identity: dict
    segment_ns: float
    upload: Link
    download: Link
    tile: tuple[int, int]
    tail: float
    classes: dict[str, ClassModel]
    # Per kernel path (costs.path_keys: "gemm/i16", "conv/u8s8/grouped", "elementwise/QLinearAdd", ...): a model
    # where the calibration had samples of that path; a node's most specific path with a model predicts it, else
    # its class's. Empty in profiles made before paths (their class fits predict everything).
    paths: dict[str, ClassModel] = dataclasses.field(default_factory=dict)
    # The CPU's u8s8 weight ranges as the calibration found them ({"igemm": (lo, hi), "depthwise": (lo, hi)}, a
    # kind absent where the variant has none), None where not measured (no weight paths then).
    u8s8: dict[str, tuple[int, int]] | None = None
    # Per tensor dtype ("upload:int8", "download:float32", ...): a link that differs from upload/download by the
    # tensor's type (the CPU converts 8-bit tensors at its edges, reads and writes the others in place).
    links: dict[str, Link] = dataclasses.field(default_factory=dict)

    def model_for(self, work: Work) -> ClassModel:
        """The model predicting `work`: its most specific kernel path's (paths), else its class's."""
        if self.paths:
            for k in path_keys(work, self.u8s8):
                m = self.paths.get(k)
                if m is not None:
                    return m
        return self.classes[work.op_class]

    def node_ns(self, work: Work) -> float:
        """Predicted time of one node on this device."""
        return self.model_for(work).ns(work, self.tile)

    def link(self, way: str, dtype) -> Link:
        """The `way` ("upload" or "download") link for a tensor of `dtype`: its own where calibrated, else the
        device's."""
        if self.links:
            own = self.links.get(f"{way}:{np.dtype(dtype).name}")
            if own is not None:
                return own
        return self.upload if way == "upload" else self.download

    def untrusted(self) -> list[str]:
        """The op classes whose fit's error is above UNTRUSTED_ERROR, in CLASSES order."""
        return [c for c, m in self.classes.items() if m.error > UNTRUSTED_ERROR]

    def to_json(self) -> dict:
        d = {"device": self.device, "kind": self.kind, "threads": self.threads, "identity": self.identity,
                "segment_ns": self.segment_ns, "upload": dataclasses.asdict(self.upload),
                "download": dataclasses.asdict(self.download), "tile": list(self.tile), "tail": self.tail,
                "classes": {c: m.to_json() for c, m in self.classes.items()}}
        if self.paths:
            d["paths"] = {k: m.to_json() for k, m in self.paths.items()}
        if self.u8s8 is not None:
            d["u8s8"] = {k: list(v) for k, v in self.u8s8.items()}
        if self.links:
            d["links"] = {k: dataclasses.asdict(v) for k, v in self.links.items()}
        return d


@dataclasses.dataclass(frozen=True)
class RelativeModel:
    """Stands in for an untrusted fit on a device: the CPU's prediction of the node times `factor`, the device's
    speed relative to the CPU on the classes both fitted well (relative_speed). `error` is the fit's it replaces."""

    cpu: ClassModel
    cpu_tile: tuple[int, int]
    factor: float
    error: float
    samples: int = 0
    tile: tuple[int, int] | None = None
    cpu_entry: DeviceProfile | None = None  # where given, the CPU's prediction through its kernel paths

    def ns(self, work: Work, tile: tuple[int, int]) -> float:  # noqa: ARG002 - the CPU's tile, not the device's
        if self.cpu_entry is not None:
            return self.cpu_entry.node_ns(work) * self.factor
        return self.cpu.ns(work, self.cpu_tile) * self.factor


def relative_speed(entry: DeviceProfile, cpu: DeviceProfile) -> tuple[float, list[str]]:
    """(median over op classes of entry's time / the CPU's on costs.REFERENCE's MobileNetV2 layer, the classes it
    was taken over): those both fitted within UNTRUSTED_ERROR, or every class where there are none."""
    from .costs import REFERENCE

    bad = set(entry.untrusted()) | set(cpu.untrusted())
    used = [c for c in REFERENCE if c not in bad] or list(REFERENCE)
    ratios = sorted(entry.node_ns(REFERENCE[c][1]) / max(cpu.node_ns(REFERENCE[c][1]), 1e-9) for c in used)
    mid = len(ratios) // 2
    return (ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2), used


def with_fallbacks(entry: DeviceProfile, cpu: DeviceProfile) -> tuple[DeviceProfile, dict[str, float]]:
    """`entry` (a device the dispatcher weighs against `cpu`) with every op class whose fit is untrusted here or on
    the CPU predicted as the CPU's time times the device's relative speed (RelativeModel), and {class: factor}.

    Why: the dispatcher compares the two predictions node by node, so one bad fit moves nodes. A relative speed is
    what both devices' good fits agree on; for that class the choice then follows the device's speed elsewhere
    (lavapipe: 10-200x slower than the CPU, so the class stays on the CPU) rather than a fit's noise."""
    bad = [c for c in CLASSES if c in set(entry.untrusted()) | set(cpu.untrusted())]
    if not bad:
        return entry, {}
    factor, _ = relative_speed(entry, cpu)
    classes = dict(entry.classes)
    for c in bad:
        classes[c] = RelativeModel(cpu.classes[c], cpu.tile, factor, entry.classes[c].error, entry.classes[c].samples,
                                   cpu_entry=cpu)
    return dataclasses.replace(entry, classes=classes), dict.fromkeys(bad, factor)


def _num(where: str, v, *, lo: float = 0.0) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise ValueError(f"{where}: expected a finite number, got {v!r}")
    if v < lo:
        raise ValueError(f"{where}: negative time or rate {v!r}" if lo == 0 else f"{where}: {v!r} is below {lo}")
    return float(v)


def _obj(where: str, v, keys: tuple[str, ...]) -> dict:
    if not isinstance(v, dict):
        raise ValueError(f"{where}: expected an object, got {type(v).__name__}")
    missing = [k for k in keys if k not in v]
    if missing:
        raise ValueError(f"{where}: missing field {missing[0]!r}")
    return v


def _tile(where: str, tile) -> tuple[int, int]:
    if not (isinstance(tile, list | tuple) and len(tile) == 2 and all(
            isinstance(t, int) and not isinstance(t, bool) and t >= 1 for t in tile)):
        raise ValueError(f"{where}: expected [rows, channels] of positive integers, got {tile!r}")
    return int(tile[0]), int(tile[1])


def device_from_json(d, where: str = "device") -> DeviceProfile:
    """A validated DeviceProfile; ValueError names the first bad field."""
    _obj(where, d, ("device", "kind", "threads", "identity", "segment_ns", "upload", "download", "tile", "tail",
                    "classes"))
    kind = d["kind"]
    if kind not in KINDS:
        raise ValueError(f"{where}.kind: {kind!r} is not one of {', '.join(KINDS)}")
    dev = d["device"]
    if not isinstance(dev, str) or (dev.partition(":")[0] != kind):
        raise ValueError(f"{where}.device: {dev!r} does not name a {kind} device (\"cpu\", \"vulkan:<n>\", "
                         f"\"host\")")
    where = f"{where} ({dev})"
    threads = d["threads"]
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"{where}.threads: expected a positive integer, got {threads!r}")
    if not isinstance(d["identity"], dict):
        raise ValueError(f"{where}.identity: expected an object")
    links = {}
    for name in ("upload", "download"):
        o = _obj(f"{where}.{name}", d[name], ("fixed_ns", "ns_per_byte"))
        links[name] = Link(_num(f"{where}.{name}.fixed_ns", o["fixed_ns"]),
                           _num(f"{where}.{name}.ns_per_byte", o["ns_per_byte"]))
    tile = _tile(f"{where}.tile", d["tile"])
    classes = _obj(f"{where}.classes", d["classes"], CLASSES)
    unknown = [c for c in classes if c not in CLASSES]
    if unknown:
        raise ValueError(f"{where}.classes: unknown op class {unknown[0]!r} (known: {', '.join(CLASSES)})")
    models = {c: _class_model(f"{where}.classes.{c}", classes[c]) for c in CLASSES}
    # Optional (profiles before kernel paths have none): per-path models, the u8s8 ranges, per-dtype links.
    paths = d.get("paths", {})
    if not isinstance(paths, dict):
        raise ValueError(f"{where}.paths: expected an object")
    path_models = {}
    for k, o in paths.items():
        if not isinstance(k, str) or k.partition("/")[0] not in CLASSES or not k.partition("/")[2]:
            raise ValueError(f"{where}.paths: {k!r} is not \"<op class>/<path>\"")
        path_models[k] = _class_model(f"{where}.paths.{k}", o)
    u8s8 = d.get("u8s8")
    if u8s8 is not None:
        if not isinstance(u8s8, dict) or any(k not in ("igemm", "depthwise") for k in u8s8):
            raise ValueError(f"{where}.u8s8: expected an object with \"igemm\" and \"depthwise\" ranges")
        ranges = {}
        for k, v in u8s8.items():
            if not (isinstance(v, list | tuple) and len(v) == 2 and all(
                    isinstance(x, int) and not isinstance(x, bool) for x in v) and v[0] <= v[1]):
                raise ValueError(f"{where}.u8s8.{k}: expected [low, high] integers, got {v!r}")
            ranges[k] = (int(v[0]), int(v[1]))
        u8s8 = ranges
    extra = d.get("links", {})
    if not isinstance(extra, dict):
        raise ValueError(f"{where}.links: expected an object")
    dlinks = {}
    for k, o in extra.items():
        way, _, dt = k.partition(":") if isinstance(k, str) else ("", "", "")
        if way not in ("upload", "download") or not dt:
            raise ValueError(f"{where}.links: {k!r} is not \"upload:<dtype>\" or \"download:<dtype>\"")
        o = _obj(f"{where}.links.{k}", o, ("fixed_ns", "ns_per_byte"))
        dlinks[k] = Link(_num(f"{where}.links.{k}.fixed_ns", o["fixed_ns"]),
                         _num(f"{where}.links.{k}.ns_per_byte", o["ns_per_byte"]))
    return DeviceProfile(dev, kind, threads, dict(d["identity"]), _num(f"{where}.segment_ns", d["segment_ns"]),
                         links["upload"], links["download"], tile,
                         _num(f"{where}.tail", d["tail"], lo=1.0), models, path_models, u8s8, dlinks)


def _class_model(w: str, o) -> ClassModel:
    o = _obj(w, o, ("fixed_ns", "ns_per_mac", "ns_per_byte"))
    return ClassModel(_num(f"{w}.fixed_ns", o["fixed_ns"]), _num(f"{w}.ns_per_mac", o["ns_per_mac"]),
                      _num(f"{w}.ns_per_byte", o["ns_per_byte"]), int(o.get("samples", 0) or 0),
                      _num(f"{w}.error", o.get("error", 0.0)),
                      _tile(f"{w}.tile", o["tile"]) if o.get("tile") is not None else None,
                      _num(f"{w}.ns_per_out", o.get("ns_per_out", 0.0)))


@dataclasses.dataclass
class Profile:
    """Device entries (one per device and CPU thread count) and how they were made."""

    devices: list[DeviceProfile]
    calibration: dict = dataclasses.field(default_factory=dict)

    def entry(self, device: str, threads: int = 1) -> DeviceProfile | None:
        """The entry of `device` at `threads` (CPU: the nearest calibrated count not above it, else the
        smallest); None when the profile has no such device."""
        same = [e for e in self.devices if e.device == device]
        if not same:
            return None
        if len(same) == 1 or same[0].kind != "cpu":
            return same[0]
        below = [e for e in same if e.threads <= threads]
        return max(below, key=lambda e: e.threads) if below else min(same, key=lambda e: e.threads)

    def names(self) -> list[str]:
        return list(dict.fromkeys(e.device for e in self.devices))

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "vkinfer": _version(), "devices": [e.to_json() for e in self.devices],
                "calibration": self.calibration}

    def save(self, path: str | os.PathLike) -> None:
        """Write the profile as JSON (atomically: a temporary file, then a rename)."""
        write_json_atomic(Path(path), self.to_json())


def profile_from_json(d, source: str = "profile") -> Profile:
    """A validated Profile from parsed JSON; ValueError names the bad field."""
    _obj(source, d, ("schema", "devices"))
    if d["schema"] != SCHEMA:
        raise ValueError(f"{source}.schema: {d['schema']!r} is not {SCHEMA!r}")
    if not isinstance(d["devices"], list) or not d["devices"]:
        raise ValueError(f"{source}.devices: expected a non-empty list of device entries")
    entries = [device_from_json(e, f"{source}.devices[{i}]") for i, e in enumerate(d["devices"])]
    seen = set()
    for i, e in enumerate(entries):
        if (e.device, e.threads) in seen:
            raise ValueError(f"{source}.devices[{i}] ({e.device}): a second entry for {e.threads} thread(s)")
        seen.add((e.device, e.threads))
    cal = d.get("calibration", {})
    return Profile(entries, dict(cal) if isinstance(cal, dict) else {})


def load_profile(path: str | os.PathLike) -> Profile:
    """Read and validate a profile file (ValueError naming the file and field on anything wrong)."""
    p = Path(path)
    try:
        # A regular file of bounded size (a FIFO or /dev/zero named as the profile is refused, never read).
        d = json.loads(_cache.read_file(p, PROFILE_MAX_BYTES, follow_symlinks=True))
    except FileNotFoundError:
        raise ValueError(f"profile {p}: no such file") from None
    except _cache.UnsafeFileError as e:
        raise ValueError(f"profile {p}: not a readable JSON file ({e.strerror})") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"profile {p}: not a readable JSON file ({e})") from None
    return profile_from_json(d, f"profile {p}")


def check_identity(entry: DeviceProfile, actual: dict, where: str = "profile") -> None:
    """ValueError naming the field when `entry` was calibrated on another device or driver than `actual`."""
    for k, v in actual.items():
        if k in entry.identity and entry.identity[k] != v:
            raise ValueError(f"{where} entry {entry.device}: identity.{k} is {entry.identity[k]!r}, but this "
                             f"machine's {entry.device} has {v!r} (calibrated on another device; run "
                             f"`vkinfer calibrate` here)")
    missing = [k for k in actual if k not in entry.identity]
    if missing:
        raise ValueError(f"{where} entry {entry.device}: identity.{missing[0]} is missing")


# --- identities -----------------------------------------------------------------------------------------------

def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "processor\t: arm")) and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_identity(variant: str | None = None) -> dict:
    """What a CPU entry is valid for: model name, ISA variant (the default one unless named), architecture."""
    from .. import cpu

    return {"cpu": cpu_model_name(), "variant": variant or cpu.default_variant(), "machine": platform.machine()}


def host_identity() -> dict:
    import numpy as np

    return {"cpu": cpu_model_name(), "machine": platform.machine(), "numpy": np.__version__}


# --- the cache ------------------------------------------------------------------------------------------------

def cache_root() -> Path:
    """`calibration/` beside the SPIR-V and pipeline caches ($VKINFER_CACHE, else ~/.cache/vkinfer)."""
    return _cache.root() / "calibration"


# The calibration cache's format: part of every entry's key, so a cache written before a change of what an entry
# holds is ignored (recalibrated), never misread. 2: per-path models, u8s8 ranges and per-dtype links.
CACHE_FORMAT = 2


def _entry_key(device: str, identity: dict, threads: int) -> str:
    """The full key of a cached entry (`_cache.key_of`), carried in the file's stamp."""
    return _cache.key_of(json.dumps([SCHEMA, CACHE_FORMAT, _version(), device.partition(":")[0], identity, threads],
                                    sort_keys=True))


def cache_key(device: str, identity: dict, threads: int) -> str:
    """The cache file name of an entry: the device, the thread count and the key's first 16 hex digits."""
    slug = "".join(ch if ch.isalnum() else "-" for ch in device)
    return f"{slug}-t{threads}-{_entry_key(device, identity, threads)[:16]}.json"


def write_json_atomic(path: Path, data: dict) -> None:
    """Write `data` as JSON atomically (`_cache.write_file`: a mkstemp temp file, then os.replace)."""
    _cache.write_file(path, json.dumps(data, indent=1, sort_keys=True).encode())


def cached_entry(device: str, identity: dict, threads: int) -> DeviceProfile | None:
    """The cached entry for (device, identity, threads, this vkinfer), or None. A corrupt or mismatched file is
    removed with a RuntimeWarning (never trusted), so the caller recalibrates. Only a regular file of at most
    CACHE_ENTRY_MAX_BYTES is read (never a symlink, FIFO or device), and its stamp (`_cache.stamp_json`: the
    entry's key and a checksum) must match."""
    path = cache_root() / cache_key(device, identity, threads)
    data, unreadable = _cache.fetch(path, CACHE_ENTRY_MAX_BYTES)  # in memory when the folder cannot be written
    if data is None:
        if unreadable:
            warnings.warn(f"vkinfer: cannot read calibration cache {path} ({unreadable}); recalibrating",
                          RuntimeWarning, stacklevel=2)
        return None
    try:
        raw, why = _cache.unstamp_json(data, _entry_key(device, identity, threads))
        if raw is None:
            raise ValueError(f"calibration cache {path}: {why}")
        prof = profile_from_json(raw, f"calibration cache {path}")
        if raw.get("vkinfer") != _version():
            raise ValueError(f"calibration cache {path}: made by another vkinfer version")
        [e] = [e for e in prof.devices if e.device == device and e.threads == threads] or [None]
        if e is None:
            raise ValueError(f"calibration cache {path}: no entry for {device} at {threads} thread(s)")
        check_identity(e, identity, f"calibration cache {path}")
    except (ValueError, json.JSONDecodeError, UnicodeDecodeError) as e:
        warnings.warn(f"vkinfer: ignoring corrupt calibration cache ({e}); recalibrating", RuntimeWarning,
                      stacklevel=2)
        try:
            path.unlink()
        except OSError:
            pass
        return None
    return e


def store_entry(entry: DeviceProfile, calibration: dict) -> Path:
    """Write one calibrated entry to the cache (atomically: an interrupted calibration leaves the previous file).
    A cache folder that cannot be written keeps the entry in memory for this process (one RuntimeWarning)."""
    path = cache_root() / cache_key(entry.device, entry.identity, entry.threads)
    key = _entry_key(entry.device, entry.identity, entry.threads)
    _cache.store(path, _cache.stamp_json(Profile([entry], calibration).to_json(), key), what="calibration cache")
    return path
