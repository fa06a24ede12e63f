"""The one internal module that talks to Kompute (through our native `_vkcore` binding).

Everything else in vkinfer uses `Device`, `Buffer`, `Program` and `Sequence` from here:
buffers are raw bytes on the device (host-visible device memory on unified-memory devices, else with a
host staging copy when they cross to the host; `Buffer.write_nchw`/`read_nchw` pack and unpack vkinfer's
device layout natively), programs are compute pipelines bound to buffers with shapes as specialization
constants (or push constants: `Device.push_shapes`) and scalars as push constants (created on worker
threads through an on-disk pipeline cache, one pipeline per distinct shader and specialization), and a
sequence records uploads, dispatches,
barriers and downloads once and replays them with one submit per `run()` (`run(timed=True)` also
returns the device time from Vulkan timestamps).

Measured on lavapipe (Mesa 22.3.6, 2-core EPYC), MobileNetV2 1.0/224 (64 programs, 37 distinct
pipelines): creating its pipelines took 770 ms with one Kompute pipeline per program, 415 ms shared,
210 ms shared on 2 worker threads (medians of 5). A warm pipeline cache changes nothing there: lavapipe
22.3's vkGetPipelineCacheData returns a 32-byte header and SwiftShader's echoes its initial data, so
neither keeps compiled pipelines across processes; drivers with a real cache (NVIDIA, RADV, ANV, newer
Mesa) skip their compiler on the second run. So on CPU implementations shapes are push constants: 7
pipelines instead of 37, and a cold session's first run (lavapipe compiles with LLVM at the first dispatch)
went from 4.45 to 0.96 s. Packing a 1x3x224x224 input: numpy 350-600 us, native 36 us.
"""

from __future__ import annotations

import atexit
import dataclasses
import functools
import os
import threading
import warnings
import weakref
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import _glsl, _trust
from ._pipeline_cache import (  # noqa: F401 (tests and Device read them here)
    _PC_HEADER,
    _PC_MAGIC,
    _PC_MAX_BYTES,
    _VK_PC_HEADER,
    _check_pipeline_cache,
    _echoes,
    _pack_pipeline_cache,
    _pipeline_cache_file,
    _show,
    _vkinfer_version,
    pipeline_cache_dir,
    read_pipeline_cache,
    write_pipeline_cache,
)
from .errors import VulkanUnavailableError
from .layout import packed_form

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
    """The Vulkan module, imported on first use: it links libvulkan.so.1, so `import vkinfer` and CPU sessions
    work on a machine without any Vulkan loader, and only asking for a Vulkan device fails, with this error."""
    try:
        from . import _vkcore
    except ImportError as e:
        if "libvulkan" in str(e):
            raise VulkanUnavailableError(
                f"the Vulkan loader (libvulkan.so.1) is missing or unusable ({e}): install libvulkan1 and a "
                "driver, e.g. `apt-get install libvulkan1 mesa-vulkan-drivers` (lavapipe, a CPU Vulkan device), "
                "or your GPU vendor's Vulkan driver") from e
        built = sorted(p.name for p in Path(__file__).resolve().parent.glob("_vkcore.*"))
        if built:  # a wheel carries one module per CPython it was built for (pybind11 has no stable ABI)
            raise VulkanUnavailableError(
                f"vkinfer's Vulkan module cannot load on this Python ({e}); this installation has "
                f"{', '.join(built)}: install vkinfer from its sdist for this interpreter "
                "(pip install --no-binary vkinfer vkinfer), or `make` in a checkout") from e
        raise VulkanUnavailableError(f"vkinfer's native Vulkan module is not built ({e}); run `make setup` in a "
                                     "checkout, or install the vkinfer wheel") from e
    # The packed form is defined once, in vkinfer.layout; the native packers take its parameters from there.
    _vkcore.set_packed_form(packed_form())
    timeout = os.environ.get("VKINFER_FENCE_TIMEOUT_S", "").strip()
    if timeout:  # how long a submit may take before its device is taken as hung (lost); default 120 s
        try:
            _vkcore.set_fence_timeout(float(timeout))
        except ValueError:
            raise ValueError(f"$VKINFER_FENCE_TIMEOUT_S must be a number of seconds > 0, got {timeout!r}") from None
    for spec in filter(None, os.environ.get("VKINFER_VK_FAULT", "").split(",")):  # the test hook, for subprocesses
        point, _, rest = spec.strip().partition(":")
        result, *counts = rest.split(":")
        _vkcore.set_fault(point, result, *(int(c) for c in counts[:2]))
    return _vkcore


def set_fault(point: str, result: str, after: int = 0, times: int = 1) -> None:
    """Test hook: make the native module's calls at `point` ("alloc": buffer allocation, "submit": vkQueueSubmit,
    "wait": the fence wait, "pipeline": pipeline creation) after the first `after` return `result`
    ("VK_ERROR_DEVICE_LOST", "VK_ERROR_OUT_OF_DEVICE_MEMORY", "VK_ERROR_OUT_OF_HOST_MEMORY"; "VK_TIMEOUT" at
    "wait": a hang), `times` times (0: every later call), as the driver would. $VKINFER_VK_FAULT arms the same
    when the module loads: comma-separated `point:result[:after[:times]]`. One relaxed atomic load per hooked call
    when nothing is armed (vkinfer/_native/vk_faults.cpp)."""
    _native().set_fault(point, result, int(after), int(times))


def clear_faults() -> None:
    """Disarm every fault `set_fault` armed."""
    _native().clear_faults()


def live_objects() -> dict[str, int]:
    """The native Vulkan objects alive now: devices, buffers, programs, pipelines, sequences (the leak tests)."""
    return dict(_native().live_objects())


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
    native = _native()  # its VulkanUnavailableError says what to install; raised as it is
    try:
        return native.Instance()
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
    #: {"supported", "signed_accelerated", "unsigned_accelerated", "mixed_accelerated"}: packed 4x8-bit dot products
    integer_dot_product: dict = dataclasses.field(default_factory=dict)
    #: VK_KHR_shader_float_controls: {"supported", "rte32"} (float32 round-to-nearest-even can be required)
    float_controls: dict = dataclasses.field(default_factory=dict)

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
    """Device memory of `nbytes` (a multiple of 4).

    `staged` buffers can be written from and read back to the host. On a device with unified memory
    (`Device.zero_copy`) they are `direct`: the host writes the very memory the shaders read, and
    `Sequence.upload`/`download` record no copies. Otherwise the host side is a staging copy that a
    recorded upload copies to the device and a recorded download copies back.
    """

    def __init__(self, raw: Any, staged: bool):
        self.raw, self.staged, self.nbytes = raw, staged, raw.nbytes
        self.direct: bool = raw.kind == "direct"

    def write(self, data: np.ndarray, offset: int = 0) -> None:
        """Copy `data` into the host-visible memory at byte `offset` (seen by the next run of a sequence
        that uploads this buffer)."""
        self.raw.write(np.ascontiguousarray(data), offset)

    def read(self, dtype: np.dtype, count: int, offset: int = 0) -> np.ndarray:
        """`count` values of `dtype` from the host-visible memory (filled by the last run of a sequence
        that downloads this buffer)."""
        out = np.empty(count, dtype)
        self.raw.read_into(out, offset)
        return out

    def write_nchw(self, x: np.ndarray) -> None:
        """Pack a uint8/int8 tensor straight into the buffer (native `layout.to_packed`): 4-D NCHW as NHWC
        rows of C, 5-D (N, A, B, H, W) as rows of A*B, any other rank as rows of its last axis; each row
        zero padded to a multiple of 4 bytes. Raises TypeError for another dtype or a non-array, ValueError
        when the packed tensor does not fit."""
        if not isinstance(x, np.ndarray):
            raise TypeError(f"write_nchw needs a numpy array, got {type(x).__name__}")
        self.raw.write_nchw(x if x.flags.c_contiguous else np.ascontiguousarray(x))

    def write_rows(self, x: np.ndarray, flip: int = 0) -> None:
        """Pack a uint8/int8 array as rows of its last axis, whatever its rank (native `rows_to_packed`), each
        byte XORed with `flip` (0x80: the CPU graph's canonical int8 bytes to raw int8)."""
        if not isinstance(x, np.ndarray):
            raise TypeError(f"write_rows needs a numpy array, got {type(x).__name__}")
        self.raw.write_rows(x if x.flags.c_contiguous else np.ascontiguousarray(x), flip)

    def read_nchw(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A new array of `shape` and `dtype` (uint8/int8) unpacked from the buffer (native
        `vkinfer.layout.from_packed`: NCHW for 4-D and 5-D shapes, rows of the last axis otherwise)."""
        return self.raw.read_nchw([int(d) for d in shape], np.dtype(dtype))

    def read_rows(self, shape: tuple[int, ...], dtype: np.dtype, flip: int = 0) -> np.ndarray:
        """A new array of `shape` and `dtype` unpacked from rows of its last axis, whatever its rank, each byte
        XORed with `flip`."""
        return self.raw.read_rows([int(d) for d in shape], np.dtype(dtype), flip)


class Program:
    """A compute pipeline bound to its buffers, with its dispatch size fixed at creation.

    The pipeline itself may still be compiling on a worker thread (see `Device`); a sequence waits for it
    when first run. Programs with equal SPIR-V, specialization constants and layout share one pipeline.
    """

    def __init__(self, raw: Any, name: str, pending: tuple[Any, Any] | None = None):
        self._raw, self.name, self._pending = raw, name, pending
        self._lock = threading.Lock() if pending is not None else None

    @property
    def raw(self) -> Any:
        """The native program; made here, once, for a program whose SPIR-V was still compiling (raises the
        compiler's ShaderCompileError then)."""
        if self._raw is None:
            with self._lock:
                if self._raw is None:
                    fut, make = self._pending
                    self._raw = make(fut.result())
                    self._pending = None
        return self._raw

    @property
    def ready(self) -> bool:
        """True once the pipeline exists (or its creation failed)."""
        return self.raw.ready

    def wait(self) -> None:
        """Wait for the pipeline; raises RuntimeError if the driver failed to create it."""
        self.raw.wait()


class Sequence:
    """Commands recorded once, replayed with one submit per run().

    The commands are handed to Vulkan on the first `run()`; recording more after it raises RuntimeError.
    """

    def __init__(self, raw: Any, lock: threading.RLock, dispatched: set[str]):
        self.raw, self.lock, self.dispatched = raw, lock, dispatched
        self.dispatches = 0  # recorded so far (bench/overhead.py sizes its driver-floor sequence by it)

    def upload(self, *bufs: Buffer) -> None:
        """Record staging -> device copies of `bufs` (nothing for direct buffers: the submit itself makes
        the host's writes visible to the device)."""
        self.raw.upload([b.raw for b in bufs])

    def download(self, *bufs: Buffer) -> None:
        """Record device -> staging copies of `bufs` (for direct buffers only a barrier making the shaders'
        writes visible to host reads)."""
        self.raw.download([b.raw for b in bufs])

    def dispatch(self, prog: Program) -> None:
        """Record one dispatch of `prog` (bind, push constants, dispatch)."""
        self.raw.dispatch(prog.raw)
        self.dispatched.add(prog.name)
        self.dispatches += 1

    def barrier(self) -> None:
        """All earlier transfer/shader writes become visible to all later transfers, shaders, host reads."""
        self.raw.barrier()

    @property
    def timestamps(self) -> bool:
        """Whether `run(timed=True)` can measure device time (the queue has timestampValidBits > 0)."""
        return self.raw.timestamps

    def run(self, timed: bool = False) -> int | None:
        """Submit the recorded commands once and wait for them. With `timed=True`, returns the device's
        execution time in ns between a timestamp written before the first command and one after the last
        (`timestampPeriod` applied), or None where the queue has no timestamps; else None."""
        # vkQueueSubmit needs external synchronization of the queue, and run() releases the GIL.
        with self.lock:
            return self.raw.run(timed)

    def run_io(self, ins: list[tuple[Buffer, np.ndarray, bool, int]],
               outs: list[tuple[Buffer, tuple[int, ...], np.dtype, bool, int]],
               timed: bool = False) -> tuple[list[np.ndarray], int | None]:
        """One inference in one native call: pack each input `(buffer, array, nchw, flip)` (nchw: as
        `write_nchw`, else as `write_rows` with XOR byte `flip`), `run(timed)`, and unpack each output
        `(buffer, shape, dtype, nchw, flip)` into a new array, with no Python between the wait and the unpacking.
        Returns (outputs, device ns as `run` gives it)."""
        with self.lock:
            return self.raw.run_io([(b.raw, x if x.flags.c_contiguous else np.ascontiguousarray(x), nchw, fl)
                                    for b, x, nchw, fl in ins],
                                   [(b.raw, [int(d) for d in shape], np.dtype(dt), nchw, fl)
                                    for b, shape, dt, nchw, fl in outs], timed)


def _default_pipeline_threads() -> int:
    env = os.environ.get("VKINFER_PIPELINE_THREADS")
    if env is not None and env.strip():
        try:
            n = int(env)
        except ValueError:
            raise ValueError(f"$VKINFER_PIPELINE_THREADS must be an integer >= 0, got {env!r}") from None
        if n < 0:
            raise ValueError(f"$VKINFER_PIPELINE_THREADS must be an integer >= 0, got {env!r}")
        return n
    return min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1))


def dot_choice(info: DeviceInfo, env: Mapping[str, str] = os.environ) -> tuple[bool, str]:
    """Whether a device opened now uses the integer-dot-product shaders, and why (vkinfer/_trust.py dot_choice)."""
    return _trust.dot_choice(info, lambda: _instance().identity(info.index), env)


def float_rq_choice(info: DeviceInfo, env: Mapping[str, str] = os.environ) -> tuple[bool, str]:
    """Whether a device opened now requantizes in float32, and why (vkinfer/_trust.py float_rq_choice)."""
    return _trust.float_rq_choice(info, lambda: _instance().identity(info.index), env)


def _push_shapes_default(info: DeviceInfo) -> bool:
    env = os.environ.get("VKINFER_PUSH_SHAPES", "").strip().lower()
    if env in ("1", "on", "yes", "true"):
        return True
    if env in ("0", "off", "no", "false"):
        return False
    if env:
        raise ValueError(f"$VKINFER_PUSH_SHAPES must be 0 or 1, got {env!r}")
    return info.type == "cpu"


class Device:
    """An open Vulkan device. Get one with `get_device()`.

    - Pipelines are created through a VkPipelineCache loaded from `pipeline_cache_path` (validated first:
      a truncated, corrupt or foreign file is ignored with a RuntimeWarning) and saved back by
      `save_pipeline_cache()` and at interpreter exit when new pipelines were made. They are created on
      `pipeline_threads` worker threads (0: in the calling thread), and programs with equal SPIR-V,
      specialization constants and layout share one pipeline.
    - `unified_memory`: the memory type for host-visible storage buffers is also device-local. Then
      (`zero_copy`, the default there) staged buffers are direct and uploads/downloads copy nothing.
    """

    def __init__(self, info: DeviceInfo, *, zero_copy: bool | None = None, pipeline_threads: int | None = None,
                 push_shapes: bool | None = None, integer_dot: bool | None = None, float_rq: bool | None = None):
        """Open device `info`. `zero_copy`: None decides from `unified_memory` (and $VKINFER_ZERO_COPY=0
        turns it off); False always uses staging copies; True always uses host-visible buffers.
        `pipeline_threads`: worker threads for pipeline creation (default $VKINFER_PIPELINE_THREADS, else
        the CPUs this process may use, at most 8). `push_shapes`: see the attribute (None: $VKINFER_PUSH_SHAPES
        as 0/1, else True exactly on CPU implementations). `integer_dot`: use the integer-dot-product shaders
        (None: `dot_choice`; True on a device without the feature is refused with ValueError). `float_rq`: the
        float32 requantization (None: `float_rq_choice`; True without shaderRoundingModeRTEFloat32: ValueError)."""
        self.info = info
        self.limits = info.limits
        #: Shapes go to shaders as push constants instead of specialization constants, so that one pipeline
        #: serves every shape of a shader (`_glsl.spirv(..., shapes_pushed=True)`). The default on CPU
        #: implementations: lavapipe 22.3 and SwiftShader keep no compiled pipeline across processes (their
        #: VkPipelineCache is a stub), so each distinct pipeline costs its compile in every new process, and
        #: lavapipe compiles again with LLVM at the first dispatch. GPUs keep specialized code (constant
        #: loop bounds, divisions by constants) and their drivers cache it on disk.
        self.push_shapes: bool = _push_shapes_default(info) if push_shapes is None else bool(push_shapes)
        inst = _instance()
        self.identity: dict = inst.identity(info.index)
        self.pipeline_cache_path: Path | None = _pipeline_cache_file(self.identity)
        #: "loaded", "missing", "disabled", or "rejected: <why>" (the file was ignored with a warning).
        self.pipeline_cache_status = "disabled"
        payload = self._load_pipeline_cache()
        threads = _default_pipeline_threads() if pipeline_threads is None else int(pipeline_threads)
        if threads < 0:
            raise ValueError(f"pipeline_threads must be >= 0, got {threads}")
        (want_dot, self.dot_reason), (want_frq, self.float_rq_reason) = _trust.open_choices(
            info, integer_dot, float_rq, lambda: inst.identity(info.index))
        self.raw = _native().Device(inst, info.index, payload or b"", threads, want_dot, want_frq)
        #: The integer-dot-product shaders run here (created with shaderIntegerDotProduct); `dot_reason`: why (not).
        self.use_dot: bool = bool(self.raw.integer_dot)
        #: The conv/GEMM shaders requantize in float32 under RoundingModeRTE; `float_rq_reason`: why (not).
        self.use_float_rq: bool = bool(self.raw.rte32)
        self._on_disk: bytes | None = payload  # what the file holds now, when valid
        self._saved_created = 0
        self._save_failed = False  # warn once per device
        self._save_lock = threading.Lock()
        self.unified_memory: bool = bool(self.raw.unified_memory)
        if zero_copy is None:
            zero_copy = self.unified_memory and os.environ.get("VKINFER_ZERO_COPY", "1").strip().lower() not in (
                "0", "off", "no", "false")
        self.zero_copy: bool = bool(zero_copy)
        self.timestamps: bool = self.raw.timestamp_valid_bits > 0
        # Held around every submit, and by callers around write -> run -> read of shared buffers.
        self.lock = threading.RLock()
        # Names of the shaders recorded into this device's sequences: the tests check that the cases
        # they run on each device reach every shader in shaders/.
        self.dispatched: set[str] = set()
        _ALL_DEVICES.add(self)

    def _load_pipeline_cache(self) -> bytes | None:
        path = self.pipeline_cache_path
        if path is None:
            return None
        try:
            blob = read_pipeline_cache(path)  # a regular file of bounded size only (never a FIFO or symlink)
        except FileNotFoundError:
            self.pipeline_cache_status = "missing"
            return None
        except OSError as e:
            why = f"unreadable ({e.strerror or e})"
        else:
            payload, why = (None, f"larger than {_PC_MAX_BYTES} bytes") if len(blob) > _PC_MAX_BYTES \
                else _check_pipeline_cache(blob, self.identity)
            if payload is not None:
                self.pipeline_cache_status = "loaded"
                return payload
        self.pipeline_cache_status = f"rejected: {why}"
        warnings.warn(f"vkinfer: ignoring pipeline cache {path}: {why}", RuntimeWarning, stacklevel=3)
        return None

    @property
    def lost(self) -> bool:
        """True once a call on this device returned VK_ERROR_DEVICE_LOST (or a submit outlived the fence timeout):
        it runs nothing more, and `get_device` opens the device afresh."""
        return bool(self.raw.lost)

    @property
    def stats(self) -> dict[str, int]:
        """Counters: pipelines_created (compiled by the driver in this process), pipelines_reused (programs
        that shared an existing pipeline), pipeline_create_ns (summed over worker threads),
        pipeline_cache_initial_bytes (what was handed to vkCreatePipelineCache)."""
        return dict(self.raw.stats())

    def save_pipeline_cache(self) -> Path | None:
        """Write the pipeline cache file (after waiting for pipelines still being created): temp file and
        os.replace, so readers never see half a file. Returns the path, or None when the cache is disabled,
        the file already holds the same data, or it cannot be written (a RuntimeWarning, once per device).
        Call it after building a session; it also runs at exit when new pipelines were created."""
        path = self.pipeline_cache_path
        if path is None:
            return None
        with self._save_lock:
            payload = self.raw.pipeline_cache_data()
            created = self.raw.stats()["pipelines_created"]
            if payload == self._on_disk or _echoes(payload, self._on_disk):
                self._saved_created = created
                return None
            try:
                write_pipeline_cache(path, self.identity, payload)  # mkstemp temp file, then os.replace
            except OSError as e:  # a read-only or full cache folder costs speed, never a session
                if not self._save_failed:
                    warnings.warn(f"vkinfer: could not write pipeline cache {path}: {e}", RuntimeWarning,
                                  stacklevel=2)
                self._save_failed = True
                return None
            self._on_disk, self._saved_created = payload, created
            return path

    def wait_pipelines(self) -> None:
        """Wait until every pipeline creation queued so far has finished."""
        self.raw.wait_pipelines()

    def buffer(self, nbytes: int, staged: bool = True) -> Buffer:
        """A buffer of `nbytes` (rounded up to 4). `staged=True` (inputs, outputs, constants) gives host
        access: direct memory when `zero_copy`, else device memory with a staging copy; `staged=False`
        gives device-only memory for intermediates."""
        max_range = self.limits["max_storage_buffer_range"]
        if nbytes > max_range:
            raise ValueError(f"a {nbytes}-byte buffer exceeds this device's maxStorageBufferRange ({max_range})")
        kind = ("direct" if self.zero_copy else "staged") if staged else "device"
        return Buffer(self.raw.buffer(int(nbytes), kind), staged)

    def program(self, shader: str, buffers: list[Buffer], groups: tuple[int, int, int],
                spec: list[int] = (), push: list[int] = (), defines: dict[str, Any] | None = None) -> Program:
        """Pipeline for shaders/<shader>.comp over `buffers` (bindings 0..n-1), dispatching `groups`.
        Returns at once; the pipeline is created on a worker thread (see `Program.wait`)."""
        limit = self.limits["max_compute_workgroup_count"]
        if any(g < 1 or g > lim for g, lim in zip(groups, limit, strict=True)):
            raise ValueError(f"{shader}: dispatch of {groups} workgroups exceeds this device's limit {limit}")
        code = _glsl.spirv_future(shader, tuple(sorted((k, str(v)) for k, v in (defines or {}).items())),
                                  self.push_shapes)
        if self.push_shapes:
            spec, push = _glsl.push_shapes(shader).push(list(spec), list(push))
        spec_u = [int(v) & 0xFFFFFFFF for v in spec]
        push_u = [int(v) & 0xFFFFFFFF for v in push]
        if 4 * len(push_u) > self.limits["max_push_constants_size"]:
            raise ValueError(f"{shader}: {4 * len(push_u)} bytes of push constants exceed the device limit")
        raws, groups = [b.raw for b in buffers], tuple(groups)

        def make(spv: bytes) -> Any:
            return self.raw.program(spv, raws, groups, spec_u, push_u)

        if code.done():  # cached SPIR-V (the usual case): made now, and compile errors raised here
            return Program(make(code.result()), shader)
        # Still compiling: the native program is made when first recorded (Sequence.dispatch), so a plan's
        # shader variants compile in parallel while it binds the rest.
        return Program(None, shader, (code, make))

    def sequence(self) -> Sequence:
        """An empty command sequence on this device's compute queue."""
        return Sequence(self.raw.sequence(), self.lock, self.dispatched)


_ALL_DEVICES: weakref.WeakSet[Device] = weakref.WeakSet()


@atexit.register
def _save_pipeline_caches_at_exit() -> None:
    for dev in list(_ALL_DEVICES):
        if dev.lost:  # nothing to save from a lost device
            continue
        try:
            dev.wait_pipelines()  # no driver call still running on a worker while the process tears down
            if dev.raw.stats()["pipelines_created"] > dev._saved_created:
                dev.save_pipeline_cache()
        except Exception as e:  # never fail interpreter exit over a cache
            warnings.warn(f"vkinfer: could not save the pipeline cache {dev.pipeline_cache_path}: {e}",
                          RuntimeWarning, stacklevel=1)


_open: dict[int, Device] = {}


def reopen(dev: Device, *, integer_dot: bool, float_rq: bool) -> Device:
    """`dev`'s physical device opened anew with the integer-dot-product shaders and the float requantization on or
    off; `get_device` returns the new one from now on where it returned `dev` (sessions holding `dev` keep it)."""
    new = Device(dev.info, integer_dot=integer_dot, float_rq=float_rq)
    if _open.get(dev.info.index) is dev:
        _open[dev.info.index] = new
    return new


def get_device(spec: int | str | None = None) -> Device:
    """The Vulkan device to use: `spec` (index, name substring or type), else $VKINFER_DEVICE,
    else the most preferred one. Devices are opened once and shared; a lost one (`Device.lost`) is opened anew
    (sessions holding the lost one keep it until they go)."""
    info = _pick(spec)
    if info.index not in _open or _open[info.index].lost:
        _open[info.index] = Device(info)
    return _open[info.index]
