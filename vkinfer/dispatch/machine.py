"""This machine's devices as the dispatcher sees them, without paying for a Vulkan instance when nothing changed.

Creating a Vulkan instance loads every installed driver: 0.29 s here (lavapipe and SwiftShader, both LLVM
based), against 1-5 ms for a CPU session of a small model. A warm `device="auto"` session must cost at most
20 ms more than a CPU one, so the device list (names, types, identities) is cached beside the calibration,
keyed by a fingerprint of everything the Vulkan loader reads to find drivers: its environment variables, the
driver manifests in the standard directories and the libraries they name (path, size, mtime), the GPUs the
kernel lists (/sys/class/drm, /dev/nvidia*) and vkinfer's native module. A driver update, a new GPU, or a
changed $VK_ICD_FILENAMES changes the fingerprint, and the next auto session enumerates again (and, since
the driver version is part of each device's identity, recalibrates what changed). The file is verified like
every cache file (vkinfer/_cache.py): a regular file of at most DEVICES_MAX_BYTES, stamped with a checksum, its
entries' fields checked; anything off is ignored with a RuntimeWarning and enumerated again.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import warnings
from pathlib import Path

from .. import _cache

_LOADER_ENV = ("VK_ICD_FILENAMES", "VK_DRIVER_FILES", "VK_ADD_DRIVER_FILES", "VK_LOADER_DRIVERS_SELECT",
               "VK_LOADER_DRIVERS_DISABLE", "VK_INSTANCE_LAYERS", "XDG_DATA_DIRS", "XDG_CONFIG_DIRS",
               "VKINFER_DEVICE", "VKINFER_VK_DOT", "VKINFER_VK_FLOAT_RQ")
_ICD_DIRS = ("/etc/vulkan/icd.d", "/usr/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d",
             "~/.local/share/vulkan/icd.d")


def _stat(path: str) -> list:
    try:
        st = os.stat(path)
    except OSError:
        return [path, None]
    return [path, st.st_size, st.st_mtime_ns]


def _manifests() -> list[str]:
    out = []
    for var in ("VK_ICD_FILENAMES", "VK_DRIVER_FILES", "VK_ADD_DRIVER_FILES"):
        out.extend(p for p in os.environ.get(var, "").split(os.pathsep) if p)
    dirs = [os.path.expanduser(d) for d in _ICD_DIRS]
    for var in ("XDG_DATA_DIRS", "XDG_CONFIG_DIRS"):
        dirs.extend(os.path.join(p, "vulkan", "icd.d") for p in os.environ.get(var, "").split(os.pathsep) if p)
    for d in dict.fromkeys(dirs):
        out.extend(sorted(glob.glob(os.path.join(d, "*.json"))))
    from .._vk import SWIFTSHADER_ICD

    out.append(SWIFTSHADER_ICD)  # added by vkinfer itself when present (vkinfer._vk._add_swiftshader)
    return list(dict.fromkeys(out))


def vulkan_fingerprint() -> str:
    """A hash of what decides which Vulkan devices and drivers an instance would find (module docstring)."""
    parts: list = [[k, os.environ.get(k)] for k in _LOADER_ENV]
    for m in _manifests():
        parts.append(_stat(m))
        try:
            lib = json.loads(Path(m).read_text()).get("ICD", {}).get("library_path", "")
        except (OSError, ValueError, AttributeError):
            lib = ""
        if lib:
            parts.append(_stat(lib if os.path.isabs(lib) else os.path.join(os.path.dirname(m), lib)))
    for dev in sorted(glob.glob("/sys/class/drm/card*/device")):
        parts.append([dev, *(Path(dev, f).read_text().strip() if os.path.exists(os.path.join(dev, f)) else None
                             for f in ("vendor", "device"))])
    parts.append(sorted(glob.glob("/dev/nvidia*")))
    parts.extend(_stat(p) for p in sorted(glob.glob(str(Path(__file__).resolve().parent.parent / "_vkcore*"))))
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]


DEVICES_MAX_BYTES = 1 << 20
_DEVICES_KEY = _cache.key_of("vulkan-devices")
_ENTRY_FIELDS = (("device", str), ("name", str), ("type", str), ("default", bool), ("identity", dict))


def _device_list_problem(d: dict) -> str:
    """Why a stamped device list cannot be used as is (empty when it can)."""
    if not isinstance(d.get("devices"), list):
        return "no device list"
    if "unavailable" in d and not isinstance(d["unavailable"], str):
        return "a non-string reason for Vulkan being unavailable"
    for i, e in enumerate(d["devices"]):
        if not isinstance(e, dict):
            return f"devices[{i}] is not an object"
        for field, typ in _ENTRY_FIELDS:
            if not isinstance(e.get(field), typ):
                return f"devices[{i}].{field} is missing or not a {typ.__name__}"
        if not e["device"].startswith("vulkan:") or not e["device"][7:].isdigit():
            return f"devices[{i}].device is {e['device']!r}, not vulkan:<index>"
    return ""


def _cached_device_list(path: Path, fp: str) -> dict | None:
    """The cached device list for fingerprint `fp`, or None: missing, from an older vkinfer (no stamp) or for
    another fingerprint (silently); damaged or malformed (a RuntimeWarning naming the file)."""
    data, unreadable = _cache.fetch(path, DEVICES_MAX_BYTES)
    if data is None:
        if unreadable:
            warnings.warn(f"vkinfer: ignoring Vulkan device list cache {path}: unreadable ({unreadable})",
                          RuntimeWarning, stacklevel=3)
        return None
    d, why = _cache.unstamp_json(data, _DEVICES_KEY)
    if d is not None and d.get("fingerprint") != fp:
        return None
    why = why or _device_list_problem(d)
    if why:
        if not why.startswith("no cache stamp"):
            warnings.warn(f"vkinfer: ignoring Vulkan device list cache {path}: {why}", RuntimeWarning, stacklevel=3)
        return None
    if any(not isinstance(e.get(f), str) for e in d["devices"] for f in ("driver", "driver_info")):
        return None  # listed by an older vkinfer, without the drivers the blocklist matches: enumerated again
    return d


def vulkan_identity(index: int) -> dict:
    """What a Vulkan device's calibration is valid for: name, type, ids, driver version and UUIDs, and the shader
    path a device opened now takes ("shaders": vkinfer/vulkan/selftest.py PATHS, from vkinfer._vk.dot_choice and
    float_rq_choice: those shaders time differently, so a calibration of one path is not used for another)."""
    from .. import _vk

    info = next(d for d in _vk.devices() if d.index == index)
    ident = _vk._instance().identity(index)
    with warnings.catch_warnings():  # the choices' warnings are the device opening's to give
        warnings.simplefilter("ignore", RuntimeWarning)
        dot, frq = _vk.dot_choice(info)[0], _vk.float_rq_choice(info)[0]
    return {"name": info.name, "type": info.type, "vendor_id": info.vendor_id, "device_id": info.device_id,
            "driver_version": ident["driver_version"], "device_uuid": bytes(ident["device_uuid"]).hex(),
            "driver_uuid": bytes(ident["driver_uuid"]).hex(),
            "shaders": ("dot" if dot else "plain") + ("+frq" if frq else "")}


def vulkan_devices(refresh: bool = False) -> list[dict]:
    """[{"device": "vulkan:<i>", "name", "type", "default", "identity", "driver", "driver_info"}] in vkinfer's
    order of preference, from
    the fingerprint cache when nothing changed. Raises VulkanUnavailableError (with the reason, cached too)
    when there is no usable Vulkan."""
    from ..errors import VulkanUnavailableError
    from .profile import cache_root

    fp = vulkan_fingerprint()
    path = cache_root() / "vulkan-devices.json"
    if not refresh:
        d = _cached_device_list(path, fp)
        if d is not None:
            if d.get("unavailable"):
                raise VulkanUnavailableError(d["unavailable"])
            return d["devices"]
    from .. import _vk

    def remember(record: dict) -> None:
        # An unwritable cache folder keeps the list in memory (one warning): it costs the enumeration next time.
        _cache.store(path, _cache.stamp_json({"fingerprint": fp, **record}, _DEVICES_KEY), what="calibration cache")

    try:
        infos = _vk.devices()
    except VulkanUnavailableError as e:
        remember({"devices": [], "unavailable": str(e)})
        raise
    try:
        default = _vk._pick(None).index if infos else None
    except ValueError:  # $VKINFER_DEVICE names no device: no default
        default = None
    devs = [{"device": f"vulkan:{i.index}", "name": i.name, "type": i.type, "default": i.index == default,
             "identity": vulkan_identity(i.index), "driver": getattr(i, "driver", ""),
             "driver_info": getattr(i, "driver_info", "")} for i in infos]  # (stand-in DeviceInfos may lack them)
    remember({"devices": devs})
    return devs


_left_out_warned: set[str] = set()  # devices auto left out, warned about once per process


def auto_candidates(devs: list[dict]) -> list[dict]:
    """The Vulkan devices `device="auto"` weighs against the CPU: every GPU (discrete, integrated, virtual);
    when there is none, the default Vulkan device (a CPU implementation such as lavapipe), so that the choice
    is still made from measured costs rather than assumed.

    A device whose cached self-test verdict failed, or that the blocklist names, is left out (one RuntimeWarning
    per device and process saying why). Only cached verdicts are read here, so a warm auto session opens no
    device; one with no verdict yet is tested when auto first opens it (vkinfer/vulkan/selftest.py)."""
    from ..vulkan.selftest import auto_problem

    trusted = []
    for d in devs:
        why = auto_problem(d)
        if why is None:
            trusted.append(d)
            continue
        if d["device"] + why not in _left_out_warned:
            _left_out_warned.add(d["device"] + why)
            warnings.warn(f'device="auto": leaving {d["device"]} ({d["name"]}) out: {why}; `vkinfer selftest '
                          f'--device {d["device"]}` reruns the self-test', RuntimeWarning, stacklevel=3)
    gpus = [d for d in trusted if d["type"] in ("discrete", "integrated", "virtual")]
    return gpus or [d for d in trusted if d["default"]][:1]
