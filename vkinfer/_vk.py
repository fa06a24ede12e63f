"""The one internal module that talks to Kompute (through our native `_vkcore` binding).

Everything else in vkinfer uses `Device`, `Buffer`, `Program` and `Sequence` from here:
buffers are raw bytes on the device (with a host staging copy when they cross to the host),
programs are compute pipelines bound to buffers with shapes as specialization constants and
scalars as push constants, and a sequence records uploads, dispatches, barriers and downloads
once and replays them with one submit per `run()`.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _glsl
from .errors import VulkanUnavailableError

_TYPE_RANK = {"discrete": 0, "integrated": 1, "virtual": 2, "cpu": 3, "other": 4}

# Among CPU implementations (all of type "cpu"), known speed decides, not the loader's enumeration
# order (which puts VK_ADD_DRIVER_FILES drivers first). Measured on a 2-core AMD EPYC (shared, so ranges
# over 3 runs of medians of 10): SwiftShader (Subzero, Debian's chromium-common) vs lavapipe (Mesa 22.3.6,
# LLVM 15): a 3x3 32->32 convolution on 56x56 took 79-157 vs 6-12 ms (13x), a seeded MobileNetV2
# 0.35/64 41-69 vs 5.5-6.3 ms per run (7-11x), and creating its session 2.4 vs 0.75 s (warm SPIR-V cache).
# Unknown CPU implementations sit between the two. Matched against the device name, lowercase.
_CPU_SPEED_RANK = {"llvmpipe": 0, "swiftshader": 2}
_CPU_SPEED_UNKNOWN = 1
# Names people use for a device that reports another one ("vulkan:lavapipe" finds llvmpipe).
_NAME_ALIASES = {"lavapipe": "llvmpipe"}

# SwiftShader's Vulkan driver as Debian's chromium-common ships it: outside the loader's search path
# (/usr/share/vulkan/icd.d), so it is added explicitly (see _add_swiftshader).
SWIFTSHADER_ICD = "/usr/lib/chromium/vk_swiftshader_icd.json"


@functools.cache
def _native() -> Any:
    try:
        from . import _vkcore
    except ImportError as e:
        if "libvulkan" in str(e):
            raise VulkanUnavailableError(
                "the Vulkan loader (libvulkan.so.1) is missing: install libvulkan1 and a driver, e.g. "
                "`apt-get install libvulkan1 mesa-vulkan-drivers` (lavapipe, a CPU Vulkan device)") from e
        raise VulkanUnavailableError(f"vkinfer's native Vulkan module is not built ({e}); run `make setup`") from e
    return _vkcore


def _add_swiftshader(env: MutableMapping[str, str] = os.environ) -> bool:
    """Append SwiftShader's ICD to $VK_ADD_DRIVER_FILES when Debian's chromium-common installed it and
    the user has not chosen drivers; True when it was added.

    Why: a second CPU implementation with a different compiler (Subzero), subgroup size (4, lavapipe 8)
    and workgroup limit (256 invocations, lavapipe 1024) catches shader code that only works by luck
    on one driver, and the tests run on every device listed. $VK_ICD_FILENAMES / $VK_DRIVER_FILES mean
    the user picked the drivers, and the loader then ignores $VK_ADD_DRIVER_FILES anyway (1.3.239).
    Loaders older than 1.3.207 ignore the variable: SwiftShader is then just not listed.
    """
    if env.get("VK_ICD_FILENAMES") or env.get("VK_DRIVER_FILES") or not os.path.isfile(SWIFTSHADER_ICD):
        return False
    have = env.get("VK_ADD_DRIVER_FILES", "")
    if SWIFTSHADER_ICD in have.split(os.pathsep):
        return False
    env["VK_ADD_DRIVER_FILES"] = f"{have}{os.pathsep}{SWIFTSHADER_ICD}" if have else SWIFTSHADER_ICD
    return True


@functools.cache
def _instance() -> Any:
    # The loader reads its driver variables when the instance is created: set them first.
    _add_swiftshader()
    try:
        return _native().Instance()
    except RuntimeError as e:
        raise VulkanUnavailableError(
            f"cannot create a Vulkan instance ({e}): install a Vulkan driver, e.g. mesa-vulkan-drivers") from e


@dataclass(frozen=True)
class DeviceInfo:
    """One Vulkan physical device as vkinfer sees it."""

    index: int
    name: str
    type: str  # discrete, integrated, virtual, cpu, other
    api_version: str
    driver: str
    driver_info: str
    vendor_id: int
    device_id: int
    limits: dict

    def __str__(self) -> str:
        return f"[{self.index}] {self.name} ({self.type}, Vulkan {self.api_version}, driver {self.driver})"


def _cpu_speed_rank(info: DeviceInfo) -> int:
    name = info.name.lower()
    return next((r for k, r in _CPU_SPEED_RANK.items() if k in name), _CPU_SPEED_UNKNOWN)


def _preference(info: DeviceInfo) -> tuple[int, int, int]:
    return (_TYPE_RANK.get(info.type, 9), _cpu_speed_rank(info) if info.type == "cpu" else 0, info.index)


def devices() -> list[DeviceInfo]:
    """All Vulkan devices, in vkinfer's order of preference: discrete, integrated, virtual, then CPU
    implementations, the faster first (lavapipe before SwiftShader); the first one is the default."""
    infos = [DeviceInfo(**d) for d in _instance().devices()]
    return sorted(infos, key=_preference)


def _pick(spec: int | str | None) -> DeviceInfo:
    infos = devices()
    if not infos:
        raise VulkanUnavailableError("no Vulkan device found: install a driver (mesa-vulkan-drivers gives lavapipe)")
    if spec is None:
        spec = os.environ.get("VKINFER_DEVICE") or None
    if spec is None:
        return infos[0]
    if isinstance(spec, int) or (isinstance(spec, str) and spec.isdigit()):
        for d in infos:
            if d.index == int(spec):
                return d
        raise ValueError(f"no Vulkan device with index {spec}; have: {', '.join(map(str, infos))}")
    want = str(spec).lower()
    want = _NAME_ALIASES.get(want, want)
    for d in infos:  # in order of preference: "vulkan:cpu" is the fastest CPU implementation
        if want in d.name.lower() or want == d.type:
            return d
    raise ValueError(f"no Vulkan device matches {spec!r}; have: {', '.join(map(str, infos))}")


class Buffer:
    """Device memory of `nbytes`; `staged` buffers can be written from and read back to the host."""

    def __init__(self, raw: Any, staged: bool):
        self.raw, self.staged, self.nbytes = raw, staged, raw.nbytes

    def write(self, data: np.ndarray, offset: int = 0) -> None:
        """Copy `data` into the host staging memory at byte `offset` (uploaded by the next recorded upload)."""
        self.raw.write(np.ascontiguousarray(data), offset)

    def read(self, dtype: np.dtype, count: int, offset: int = 0) -> np.ndarray:
        """`count` values of `dtype` from the host staging memory (filled by the last recorded download)."""
        out = np.empty(count, dtype)
        self.raw.read_into(out, offset)
        return out


class Program:
    """A compute pipeline bound to its buffers, with its dispatch size fixed at creation."""

    def __init__(self, raw: Any, name: str):
        self.raw, self.name = raw, name


class Sequence:
    """Commands recorded once, replayed with one submit per run()."""

    def __init__(self, raw: Any, lock: threading.RLock, dispatched: set[str]):
        self.raw, self.lock, self.dispatched = raw, lock, dispatched

    def upload(self, *bufs: Buffer) -> None:
        """Record staging -> device copies of `bufs`."""
        self.raw.upload([b.raw for b in bufs])

    def download(self, *bufs: Buffer) -> None:
        """Record device -> staging copies of `bufs`."""
        self.raw.download([b.raw for b in bufs])

    def dispatch(self, prog: Program) -> None:
        """Record one dispatch of `prog` (bind, push constants, dispatch)."""
        self.raw.dispatch(prog.raw)
        self.dispatched.add(prog.name)

    def barrier(self) -> None:
        """All earlier transfer/shader writes become visible to all later transfers, shaders, host reads."""
        self.raw.barrier()

    def run(self) -> None:
        """Submit the recorded commands once and wait for them."""
        # vkQueueSubmit needs external synchronization of the queue, and run() releases the GIL.
        with self.lock:
            self.raw.run()


class Device:
    """An open Vulkan device. Get one with `get_device()`."""

    def __init__(self, info: DeviceInfo):
        self.info = info
        self.limits = info.limits
        self.raw = _native().Device(_instance(), info.index)
        # Held around every submit, and by callers around write -> run -> read of shared buffers.
        self.lock = threading.RLock()
        # Names of the shaders recorded into this device's sequences: the tests check that the cases
        # they run on each device reach every shader in shaders/.
        self.dispatched: set[str] = set()

    def buffer(self, nbytes: int, staged: bool = True) -> Buffer:
        """A buffer of `nbytes` (rounded up to 4); `staged=False` gives device-only memory for intermediates."""
        max_range = self.limits["max_storage_buffer_range"]
        if nbytes > max_range:
            raise ValueError(f"a {nbytes}-byte buffer exceeds this device's maxStorageBufferRange ({max_range})")
        return Buffer(self.raw.buffer(int(nbytes), staged), staged)

    def program(self, shader: str, buffers: list[Buffer], groups: tuple[int, int, int],
                spec: list[int] = (), push: list[int] = (), defines: dict[str, Any] | None = None) -> Program:
        """Pipeline for shaders/<shader>.comp over `buffers` (bindings 0..n-1), dispatching `groups`."""
        limit = self.limits["max_compute_workgroup_count"]
        if any(g < 1 or g > lim for g, lim in zip(groups, limit, strict=True)):
            raise ValueError(f"{shader}: dispatch of {groups} workgroups exceeds this device's limit {limit}")
        code = _glsl.spirv(shader, tuple(sorted((k, str(v)) for k, v in (defines or {}).items())))
        spec_u = [int(v) & 0xFFFFFFFF for v in spec]
        push_u = [int(v) & 0xFFFFFFFF for v in push]
        if 4 * len(push_u) > self.limits["max_push_constants_size"]:
            raise ValueError(f"{shader}: {4 * len(push_u)} bytes of push constants exceed the device limit")
        return Program(self.raw.program(code, [b.raw for b in buffers], tuple(groups), spec_u, push_u), shader)

    def sequence(self) -> Sequence:
        """An empty command sequence on this device's compute queue."""
        return Sequence(self.raw.sequence(), self.lock, self.dispatched)


_open: dict[int, Device] = {}


def get_device(spec: int | str | None = None) -> Device:
    """The Vulkan device to use: `spec` (index, name substring or type), else $VKINFER_DEVICE,
    else the most preferred one. Devices are opened once and shared."""
    info = _pick(spec)
    if info.index not in _open:
        _open[info.index] = Device(info)
    return _open[info.index]
