"""What vkinfer trusts a Vulkan driver with, decided without opening a device: the blocklist of known-bad driver and
feature combinations, the self-test's verdict records (vkinfer/vulkan/selftest.py runs the test and writes them),
and the choice of shader path a device is opened with (the integer-dot-product shaders, the float32
requantization). It sits beside vkinfer._vk, which asks it when it opens a device, below the self-test, which
imports from it; vkinfer/vulkan/selftest.py's docstring describes the test, the records and the overrides.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import time
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from . import _cache

#: Bump when the cases change: older verdicts are then at other keys (never read, never warned about).
SELFTEST_FORMAT = 1
#: The shaders the cases reach (vkinfer/vulkan/qlinear_conv.py KERNELS); their code is part of the record's key.
KERNEL_SHADERS = ("qlinear_conv", "qlinear_dwconv", "qlinear_dwconv3x3", "qlinear_gemm", "qlinear_gemv")
RECORD_MAX_BYTES = 1 << 16


# --- the blocklist --------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class BlockEntry:
    """A known-bad driver (and feature) combination.

    `driver`: a regular expression searched (case-insensitively) in "<device name> | <driver name> | <driver
    info>" (e.g. "llvmpipe (LLVM 15.0.6, 256 bits) | llvmpipe | Mesa 22.3.6 (LLVM 15.0.6)"). `versions`: the
    driver versions it applies to, [low, high) as tuples (`driver_version`), None for an open end.
    `vendor_id`: the PCI vendor (None: any). `feature`: "device" (the whole device is not used), "dot" (the
    integer-dot-product shaders are not used on it) or "frq" (nor is the float32 requantization). `reason`: what
    is wrong, with a reference."""

    driver: str
    feature: str
    reason: str
    versions: tuple[tuple[int, ...] | None, tuple[int, ...] | None] = (None, None)
    vendor_id: int | None = None


FEATURES = ("device", "dot", "frq")

#: Known-bad combinations. Empty: no documented, specific driver version range computing vkinfer's kernels wrong is
#: known yet (an entry needs one: a guessed entry would take a working device away from its users).
BLOCKLIST: list[BlockEntry] = []


def _facts(x: Any) -> dict:
    """name, driver, driver_info, vendor_id, driver_version of a Device, a DeviceInfo, a device-list entry
    (vkinfer/dispatch/machine.py vulkan_devices) or an identity dict (vulkan_identity)."""
    info = getattr(x, "info", x)  # a Device's DeviceInfo
    if isinstance(info, dict):
        ident = info.get("identity", info)
        return {"name": info.get("name", ident.get("name", "")), "driver": info.get("driver", ""),
                "driver_info": info.get("driver_info", ""), "vendor_id": ident.get("vendor_id"),
                "driver_version": ident.get("driver_version")}
    ident = getattr(x, "identity", None) or {}
    return {"name": info.name, "driver": info.driver, "driver_info": info.driver_info, "vendor_id": info.vendor_id,
            "driver_version": ident.get("driver_version")}


def driver_version(facts: dict) -> tuple[int, ...] | None:
    """The driver's version as a tuple: the first dotted number in the driver info ("Mesa 23.1.2" -> (23, 1, 2),
    NVIDIA's "535.104.05"), else the packed driverVersion decoded by the vendor's convention (NVIDIA 10.8.8.6 bits,
    Intel on Windows 18.14, others Vulkan's 10.10.12); None when neither is known."""
    m = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", facts.get("driver_info") or "")
    if m:
        return tuple(int(g) for g in m.groups() if g is not None)
    v = facts.get("driver_version")
    if not isinstance(v, int):
        return None
    if facts.get("vendor_id") == 0x10DE:
        return (v >> 22, (v >> 14) & 0xFF, (v >> 6) & 0xFF, v & 0x3F)
    if facts.get("vendor_id") == 0x8086 and os.name == "nt":
        return (v >> 14, v & 0x3FFF)
    return (v >> 22, (v >> 12) & 0x3FF, v & 0xFFF)


def blocked(device: Any, feature: str = "device") -> str | None:
    """Why `feature` ("device": the whole device; "dot": the integer-dot-product shaders; "frq": the float32
    requantization) must not be used on
    `device` (a vkinfer._vk.Device or DeviceInfo, a `vulkan_devices()` entry or a `vulkan_identity` dict), or
    None. An entry whose version range cannot be checked (the version is unknown) does not apply."""
    if feature not in FEATURES:
        raise ValueError(f"feature must be one of {', '.join(map(repr, FEATURES))}, got {feature!r}")
    facts = _facts(device)
    text = f"{facts['name']} | {facts['driver']} | {facts['driver_info']}"
    for e in BLOCKLIST:
        if e.feature != feature or (e.vendor_id is not None and e.vendor_id != facts["vendor_id"]):
            continue
        if not re.search(e.driver, text, flags=re.I):
            continue
        lo, hi = e.versions
        if lo is not None or hi is not None:
            v = driver_version(facts)
            if v is None or (lo is not None and v < tuple(lo)) or (hi is not None and v >= tuple(hi)):
                continue
        return e.reason
    return None



# --- verdicts and their cache ---------------------------------------------------------------------------------

@dataclasses.dataclass
class CaseResult:
    """One case's outcome: `ok` when the Vulkan result equals the C path's bit for bit; `why` otherwise."""

    name: str
    kernel: str
    ok: bool
    ms: float
    why: str = ""



@dataclasses.dataclass
class Verdict:
    """A device's self-test result on one shader path. `source`: "run" (measured now), "cached", "blocklist"
    (not run: `BLOCKLIST` says why, in `reason`)."""

    passed: bool
    path: str
    cases: list[CaseResult]
    source: str
    seconds: float = 0.0
    reason: str = ""
    record: str = ""  # the cache file

    @property
    def failing(self) -> CaseResult | None:
        """The first case that failed, if any."""
        return next((c for c in self.cases if not c.ok), None)


def enabled() -> bool:
    """False when $VKINFER_SELFTEST is 0/off/no/false (module docstring); raises ValueError for another value
    than those and 1/on/yes/true."""
    env = os.environ.get("VKINFER_SELFTEST", "").strip().lower()
    if env in ("", "1", "on", "yes", "true"):
        return True
    if env in ("0", "off", "no", "false"):
        return False
    raise ValueError(f"$VKINFER_SELFTEST must be 0 or 1, got {env!r}")


#: The shader paths a verdict may be recorded for: the integer-dot-product shaders or the scalar ones ("plain"),
#: each with the float32 requantization ("+frq") or the integer one.
PATHS = ("plain", "dot", "plain+frq", "dot+frq")


@functools.cache
def code_tag() -> str:
    """What the verdict is valid for on vkinfer's side: its version and the kernels' code (the shader sources
    with their includes, or the packaged SPIR-V's checksums), hashed."""
    from . import _glsl  # noqa: PLC0415
    from ._version import __version__  # noqa: PLC0415

    parts: list[str] = [__version__]
    pkg = _glsl.packaged()
    for name in KERNEL_SHADERS:
        if pkg is not None:
            parts.append(repr(sorted((k, v) for k, v in pkg._variants.items() if k[0] == name)))
        else:
            src = _glsl.SHADER_DIR / f"{name}.comp"
            parts.append(_glsl._source_with_includes(src) if src.exists() else f"{name}: missing")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def _record_key(identity: dict) -> str:
    core = [identity.get(k) for k in ("name", "vendor_id", "device_id", "driver_version", "device_uuid",
                                      "driver_uuid")]
    return _cache.key_of("vulkan-selftest", SELFTEST_FORMAT, core, code_tag())


def record_path(identity: dict) -> Path:
    """The self-test record of a device identity (`identity_of`, vulkan_identity) for this vkinfer's kernels."""
    vid, did = identity.get("vendor_id"), identity.get("device_id")
    head = f"{vid:04x}-{did:04x}" if isinstance(vid, int) and isinstance(did, int) else "device"
    return _cache.root() / "selftest" / f"{head}-{_record_key(identity)[:24]}.json"


def _record_problem(d: dict) -> str:
    paths = d.get("paths")
    if not isinstance(paths, dict):
        return "no verdicts"
    for p, v in paths.items():
        if p not in PATHS or not isinstance(v, dict) or not isinstance(v.get("passed"), bool):
            return f"a malformed verdict for path {p!r}"
        cases = v.get("cases")
        if not isinstance(cases, list) or not all(
                isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("ok"), bool)
                for c in cases):
            return f"malformed cases for path {p!r}"
    if d.get("last") not in paths:
        return "no last path"
    return ""


def read_record(identity: dict) -> dict | None:
    """The device's stamped record ({"paths": {path: verdict}, "last": path}), or None: missing (silently), or
    damaged, for another key or malformed (a RuntimeWarning naming the file; the self-test then reruns)."""
    path = record_path(identity)
    blob, unreadable = _cache.fetch(path, RECORD_MAX_BYTES)
    if blob is None and not unreadable:
        return None
    why = f"unreadable ({unreadable})"
    if blob is not None:
        d, why = _cache.unstamp_json(blob, _record_key(identity))
        why = why or _record_problem(d)
        if not why:
            return d
    warnings.warn(f"vkinfer: ignoring self-test record {path}: {why}; the self-test reruns", RuntimeWarning,
                  stacklevel=3)
    return None


def _verdict_of(rec: dict, path: str, where: Path) -> Verdict | None:
    v = rec["paths"].get(path)
    if v is None:
        return None
    cases = [CaseResult(c["name"], str(c.get("kernel", "")), c["ok"], float(c.get("ms", 0.0)), str(c.get("why", "")))
             for c in v["cases"]]
    return Verdict(v["passed"], path, cases, "cached", float(v.get("seconds", 0.0)), record=str(where))


def cached_verdict(identity: dict, path: str) -> Verdict | None:
    """The cached verdict of a device identity (`identity_of`, vulkan_identity) on shader `path` ("plain" or
    "dot"), or None when it has not been tested (e.g. for choosing the plain path where "dot" failed)."""
    rec = read_record(identity)
    return _verdict_of(rec, path, record_path(identity)) if rec is not None else None


def _write_record(identity: dict, verdict: Verdict) -> None:
    path = record_path(identity)
    with warnings.catch_warnings():  # a damaged record was warned about when read; rewritten now
        warnings.simplefilter("ignore", RuntimeWarning)
        rec = read_record(identity) or {"paths": {}}
    rec["identity"] = identity
    rec["paths"][verdict.path] = {"passed": verdict.passed, "seconds": round(verdict.seconds, 4),
                                  "when": time.time(), "cases": [dataclasses.asdict(c) for c in verdict.cases]}
    rec["last"] = verdict.path
    _cache.store(path, _cache.stamp_json(rec, _record_key(identity)), what="self-test cache")



def feature_problem(info: Any, identity: Callable[[], dict], feature: str) -> str | None:
    """Why a device about to be opened (`vkinfer._vk.DeviceInfo`) should not use `feature` ("dot": the integer-
    dot-product shaders, "frq": the float32 requantization): the blocklist's reason, or a cached self-test verdict
    of a path with that feature failed (no device is opened; `identity()` gives Instance.identity's dict)."""
    reason = blocked(info, feature)
    if reason or not enabled():
        return reason
    ident = identity()
    ident = {"name": info.name, "type": info.type, "vendor_id": info.vendor_id, "device_id": info.device_id,
             "driver_version": ident["driver_version"], "device_uuid": bytes(ident["device_uuid"]).hex(),
             "driver_uuid": bytes(ident["driver_uuid"]).hex()}
    with warnings.catch_warnings():  # a damaged record is warned about (and rewritten) by the device's check
        warnings.simplefilter("ignore", RuntimeWarning)
        rec = read_record(ident)
    if rec is None:
        return None
    for path in rec["paths"]:
        if feature in path.split("+"):
            v = _verdict_of(rec, path, record_path(ident))
            if not v.passed:
                bad = v.failing
                return f"it failed the self-test on this driver (case {bad.name if bad else '?'}, {v.record})"
    return None


# --- the shader path a device is opened with ------------------------------------------------------------------

def dot_choice(info: Any, identity: Callable[[], dict], env: Mapping[str, str] = os.environ) -> tuple[bool, str]:
    """Whether a device opened now uses the integer-dot-product shaders, and why.

    $VKINFER_VK_DOT=0 keeps the scalar shaders; unset (or 1) the dot shaders run wherever the device has
    shaderIntegerDotProduct, accelerated or not: lavapipe, which accelerates no form, ran MobileNetV2 1.0/224 in
    0.97x the scalar shaders' time with them (one thread, 120 vs 124 ms), so the driver's own lowering is no
    worse than our unpacking. A device without the feature never gets them (=1 then warns), and neither does
    one the driver blocklist names or whose cached self-test failed on a dot path. `identity`: the device's
    identity (vkinfer._vk Instance.identity), asked for only when a verdict is looked up."""
    dot = info.integer_dot_product or {}
    fast = any(dot.get(k) for k in ("signed_accelerated", "unsigned_accelerated", "mixed_accelerated"))
    return _choice("VKINFER_VK_DOT", "dot", bool(dot.get("supported")), "not supported by the device",
                   "has no shaderIntegerDotProduct: using the scalar shaders",
                   "on (accelerated by the driver)" if fast else "on (the driver's unaccelerated form)",
                   info, identity, env)


def float_rq_choice(info: Any, identity: Callable[[], dict], env: Mapping[str, str] = os.environ) -> tuple[bool, str]:
    """Whether a device opened now requantizes in float32 (shaders/qcommon.glsl VK_FRQ), and why.

    The contract's requantization is fl32(fl32(acc) * m), rounded half to even. The shaders emulate both float32
    roundings with integer arithmetic (about 60 operations an output), because Vulkan leaves the rounding mode
    of float arithmetic to the driver; where the device offers shaderRoundingModeRTEFloat32, the float variant
    declares RoundingModeRTE (SPV_KHR_float_controls) and computes it in three float operations, the product
    marked NoContraction (`precise`). lavapipe: MobileNetV2 1.0/224 in 0.81x the time (one thread, 97 vs 120 ms).
    $VKINFER_VK_FLOAT_RQ=0 keeps the integer emulation; =1 asks for the float form (a warning where the device
    cannot guarantee RTE). A layer whose multiplier is not a normal float32 keeps the integer form (a device may
    flush denormals)."""
    return _choice("VKINFER_VK_FLOAT_RQ", "frq", bool((info.float_controls or {}).get("rte32")),
                   "off (no shaderRoundingModeRTEFloat32)", "cannot guarantee float32 round-to-nearest-even "
                   "(shaderRoundingModeRTEFloat32): using the integer requantization",
                   "on (the device guarantees float32 RTE)", info, identity, env)


def _choice(var: str, feature: str, has: bool, lacking: str, warning: str, on: str, info: Any,
            identity: Callable[[], dict], env: Mapping[str, str]) -> tuple[bool, str]:
    """A shader feature's choice: $`var` 0 keeps it off, 1 asks for it (a warning naming the device and `warning`
    where the device lacks it, `has` False); unset it is on where the device has it (`on` says why), unless the
    blocklist or a failed self-test verdict names `feature` (`feature_problem`), which 1 overrides."""
    want = env.get(var, "").strip().lower()
    if want not in ("", "0", "1"):
        raise ValueError(f"${var} must be 0 or 1, got {want!r}")
    if want == "0":
        return False, f"off (${var}=0)"
    if not has:
        if want == "1":
            warnings.warn(f"vkinfer: ${var}=1 but {info.name} {warning}", RuntimeWarning, stacklevel=5)
        return False, lacking
    reason = feature_problem(info, identity, feature)
    if reason:
        return (True, f"on (${var}=1, although {reason})") if want == "1" else (False, f"off: {reason}")
    return True, f"on (${var}=1)" if want == "1" else on


def open_choices(info: Any, integer_dot: bool | None, float_rq: bool | None, identity: Callable[[], dict]
                 ) -> tuple[tuple[bool, str], tuple[bool, str]]:
    """((use the dot shaders, why), (use the float requantization, why)) for a device opened with these
    arguments (vkinfer._vk.Device): None chooses (`dot_choice`, `float_rq_choice`); True asks for it, and a device
    without the feature refuses it with ValueError."""
    def asked(v: bool) -> tuple[bool, str]:
        return bool(v), f"{'on' if v else 'off'} (asked for)"

    if integer_dot and not (info.integer_dot_product or {}).get("supported"):
        raise ValueError(f"integer_dot=True: {info.name} has no shaderIntegerDotProduct")
    if float_rq and not (info.float_controls or {}).get("rte32"):
        raise ValueError(f"float_rq=True: {info.name} has no shaderRoundingModeRTEFloat32")
    return (dot_choice(info, identity) if integer_dot is None else asked(integer_dot),
            float_rq_choice(info, identity) if float_rq is None else asked(float_rq))
