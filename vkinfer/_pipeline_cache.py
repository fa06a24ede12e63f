"""vkinfer's pipeline cache file: the driver's VkPipelineCache blob behind a header naming the device, the driver
and vkinfer, checked before the driver ever sees it (a mismatch or a damaged file is ignored with a warning).
The file is read and written through vkinfer/_cache.py (`read_pipeline_cache`, `write_pipeline_cache`): only a
regular file of at most _PC_MAX_BYTES is read (never a symlink, a FIFO or a device), and it is written by a
mkstemp temp file and a rename."""

from __future__ import annotations

import hashlib
import os
import struct
from pathlib import Path

from . import _cache

# --- the pipeline cache file -------------------------------------------------------------------------
# <cache>/pipelines/<vendor>-<device>-<key>.vkpc, next to <cache>/spirv (see _glsl.cache_dir). The key
# hashes everything the blob is valid for; the same fields are repeated in our own header and checked on
# load, because a file can be copied, truncated or half-written by a crashed older vkinfer:
#   magic 8s | vkinfer version 16s | vendorID I | deviceID I | driverVersion I | reserved I |
#   pipelineCacheUUID 16s | deviceUUID 16s | driverUUID 16s | payload length Q | payload SHA-256 32s
# followed by the payload: exactly what vkGetPipelineCacheData returned, which must itself start with a
# VkPipelineCacheHeaderVersionOne for this device (checked before the driver ever sees it).
_PC_MAGIC = b"VKIPLC\x00\x01"
_PC_HEADER = struct.Struct("<8s16sIIII16s16s16sQ32s")
_VK_PC_HEADER = struct.Struct("<IIII16s")  # VkPipelineCacheHeaderVersionOne
_PC_MAX_BYTES = 1 << 30


def _vkinfer_version() -> str:
    from ._version import __version__

    return __version__


def pipeline_cache_dir() -> Path | None:
    """Where pipeline caches live: `pipelines/` beside the SPIR-V cache ($VKINFER_CACHE, else
    $XDG_CACHE_HOME/vkinfer or ~/.cache/vkinfer); None when $VKINFER_PIPELINE_CACHE is 0/off/no/false."""
    if os.environ.get("VKINFER_PIPELINE_CACHE", "").strip().lower() in ("0", "off", "no", "false"):
        return None
    return _cache.root() / "pipelines"


def _pipeline_cache_file(ident: dict) -> Path | None:
    d = pipeline_cache_dir()
    if d is None:
        return None
    key = hashlib.sha256(repr((ident["vendor_id"], ident["device_id"], ident["driver_version"],
                               ident["pipeline_cache_uuid"], ident["device_uuid"], ident["driver_uuid"],
                               _vkinfer_version())).encode()).hexdigest()[:20]
    return d / f"{ident['vendor_id']:04x}-{ident['device_id']:04x}-{key}.vkpc"


def read_pipeline_cache(path: Path) -> bytes:
    """The file's bytes (`_cache.read_file`: FileNotFoundError when missing; an OSError whose strerror says why
    for a symlink, FIFO, device, directory or a file over _PC_MAX_BYTES)."""
    return _cache.read_file(path, _PC_MAX_BYTES)


def write_pipeline_cache(path: Path, ident: dict, payload: bytes) -> None:
    """Write the cache file for `payload` atomically (mkstemp beside it, then os.replace); OSError when it
    cannot be written."""
    _cache.write_file(path, _pack_pipeline_cache(ident, payload))


def _pack_pipeline_cache(ident: dict, payload: bytes) -> bytes:
    head = _PC_HEADER.pack(_PC_MAGIC, _vkinfer_version().encode()[:16], ident["vendor_id"], ident["device_id"],
                           ident["driver_version"], 0, ident["pipeline_cache_uuid"], ident["device_uuid"],
                           ident["driver_uuid"], len(payload), hashlib.sha256(payload).digest())
    return head + payload


def _check_pipeline_cache(blob: bytes, ident: dict) -> tuple[bytes | None, str]:
    """(payload, "") when `blob` is a cache file for this device, driver and vkinfer, else (None, why)."""
    if len(blob) < _PC_HEADER.size:
        return None, f"truncated ({len(blob)} bytes, shorter than the {_PC_HEADER.size}-byte header)"
    (magic, version, vendor, device, driver, _, pc_uuid, dev_uuid, drv_uuid, n,
     digest) = _PC_HEADER.unpack_from(blob)
    if magic != _PC_MAGIC:
        return None, "not a vkinfer pipeline cache (bad magic)"
    theirs = version.rstrip(b"\0").decode(errors="replace")
    if theirs != _vkinfer_version():
        return None, f"written by vkinfer {theirs}, this is {_vkinfer_version()}"
    mine = (ident["vendor_id"], ident["device_id"], ident["driver_version"], ident["pipeline_cache_uuid"],
            ident["device_uuid"], ident["driver_uuid"])
    names = ("vendorID", "deviceID", "driverVersion", "pipelineCacheUUID", "deviceUUID", "driverUUID")
    for name, theirs, ours in zip(names, (vendor, device, driver, pc_uuid, dev_uuid, drv_uuid), mine, strict=True):
        if theirs != ours:
            return None, f"for another device or driver ({name} {_show(theirs)}, this device has {_show(ours)})"
    payload = blob[_PC_HEADER.size:]
    if len(payload) != n:
        return None, f"truncated or padded (payload of {len(payload)} bytes, header says {n})"
    if hashlib.sha256(payload).digest() != digest:
        return None, "corrupt (payload checksum mismatch)"
    # The driver's own header (VkPipelineCacheHeaderVersionOne), checked so that no driver ever parses a
    # blob meant for another device, whatever our header says.
    if len(payload) < _VK_PC_HEADER.size:
        return None, f"Vulkan pipeline cache header truncated ({len(payload)} bytes)"
    length, hversion, vvendor, vdevice, vuuid = _VK_PC_HEADER.unpack_from(payload)
    if length < _VK_PC_HEADER.size or length > len(payload):
        return None, f"Vulkan pipeline cache header length {length} is invalid for a {len(payload)}-byte payload"
    if hversion != 1:  # VK_PIPELINE_CACHE_HEADER_VERSION_ONE
        return None, f"Vulkan pipeline cache header version {hversion}, expected 1"
    for name, theirs, ours in (("vendorID", vvendor, ident["vendor_id"]), ("deviceID", vdevice, ident["device_id"]),
                               ("pipelineCacheUUID", vuuid, ident["pipeline_cache_uuid"])):
        if theirs != ours:
            return None, f"Vulkan pipeline cache header is for another device ({name} {_show(theirs)}, " \
                         f"this device has {_show(ours)})"
    return payload, ""


def _echoes(payload: bytes, on_disk: bytes | None) -> bool:
    """True when `payload` is a Vulkan header followed by exactly the data the cache was created with:
    SwiftShader's vkGetPipelineCacheData returns that (its compiled pipelines are never serialized), and
    saving it would grow the file by 32 bytes per process."""
    if on_disk is None or len(payload) < _VK_PC_HEADER.size:
        return False
    length = _VK_PC_HEADER.unpack_from(payload)[0]
    return len(payload) == length + len(on_disk) and payload[length:] == on_disk


def _show(v: int | bytes) -> str:
    return v.hex() if isinstance(v, bytes) else f"{v:#x}"
