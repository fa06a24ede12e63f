"""ONNX Runtime's Python API over vkinfer: a script written for onnxruntime runs with `import vkinfer as ort`.

    import vkinfer as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession("model.onnx", opts, providers=["VulkanExecutionProvider", "CPUExecutionProvider"])
    [y] = sess.run(None, {sess.get_inputs()[0].name: x})

Execution providers name vkinfer's devices:

    providers                                               vkinfer device
    None or []                                              "auto" (the dispatcher places every node)
    ["VulkanExecutionProvider", "CPUExecutionProvider"]     "auto"
    ["VulkanExecutionProvider"]                             "vulkan" (provider option device_id: "vulkan:<index>",
                                                            device: "vulkan:<name, type or index>")
    ["CPUExecutionProvider", ...] (CPU first)               "cpu" (provider option variant: "cpu:<variant>")

A provider may be given as a name or as a (name, options) pair, or its options in `provider_options` (a list in the
providers' order), as in ONNX Runtime. vkinfer's own keywords (`device=`, `threads=`, `placement=`, `objective=`,
`profile=`) keep working, and a device string in the `sess_options` position is the device, as before.

SessionOptions: intra_op_num_threads (0: vkinfer's default) is the session's CPU thread count (`threads=`);
enable_profiling writes a per-layer Chrome trace (`end_profiling()` returns its path); log_severity_level 3 or 4
silences vkinfer's warnings while the session is made; the other fields are checked and kept (vkinfer always runs
its own import passes: they are part of its numerics, so graph_optimization_level does not change results).

Profiling records, per run, one "Node" event per node of the graph as vkinfer imported it (name
"<node>_kernel_time", args op_name, provider, device), one "Segment" event per device segment run, and a
"model_run" event, with times in microseconds from the session's creation (args "dur_ns" exact). CPU nodes:
the native graph's per-operator timers of that very run (the operators a node became, summed); host nodes: their
wall time; Vulkan nodes: device time from timestamp queries, measured once per compiled plan as
`vkinfer bench --per-layer` does (a plan's nodes share one submit, so a run has no per-node times of its own),
laid out in order from the segment's start. A profiling session runs each segment through Python (no one-call
native path) so that the timers can be read between segments.
"""

from __future__ import annotations

import copy
import enum
import json
import os
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np

from .errors import VkInferError, VulkanUnavailableError
from .session import InferenceSession as _Session
from .session import NodeArg

VULKAN_PROVIDER = "VulkanExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"
PROVIDERS = (VULKAN_PROVIDER, CPU_PROVIDER)
_PROVIDER_KEYS = {VULKAN_PROVIDER: ("device_id", "device"), CPU_PROVIDER: ("variant",)}
_VKINFER_KEYWORDS = ("device", "placement", "threads", "objective", "profile")


class GraphOptimizationLevel(enum.IntEnum):
    """ONNX Runtime's graph optimization levels (accepted and kept; vkinfer's import passes always run)."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(enum.IntEnum):
    """ONNX Runtime's execution modes (accepted and kept; vkinfer runs a plan's segments in order)."""

    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


def _enum(owner: str, field: str, cls: type[enum.IntEnum], value: Any) -> enum.IntEnum:
    if isinstance(value, cls):
        return value
    if isinstance(value, bool | float | str) or not hasattr(value, "__int__"):
        raise TypeError(f"{owner}.{field} must be a {cls.__name__}, got {type(value).__name__} {value!r}")
    try:
        return cls(int(value))
    except ValueError:
        raise ValueError(f"{owner}.{field} must be one of {', '.join(m.name for m in cls)}, got {value!r}") from None


def _int(owner: str, field: str, value: Any, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{owner}.{field} must be an int, got {type(value).__name__} {value!r}")
    if value < lo or (hi is not None and value > hi):
        rng = f"at least {lo}" if hi is None else f"from {lo} to {hi}"
        raise ValueError(f"{owner}.{field} must be {rng}, got {value}")
    return int(value)


def _bool(owner: str, field: str, value: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{owner}.{field} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def _str(owner: str, field: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{owner}.{field} must be a str, got {type(value).__name__} {value!r}")
    return value


def _field(kind: str, doc: str, lo: int = 0, hi: int | None = None, cls: type[enum.IntEnum] | None = None):
    """A checked attribute stored as `_<name>`: a wrong type raises TypeError, a value out of range ValueError, both
    naming the field (ONNX Runtime's options refuse them too, with less to go on)."""
    class Field:
        def __set_name__(self, owner, name):
            self.name, self.slot = name, f"_{name}"

        def __get__(self, obj, objtype=None):
            return self if obj is None else getattr(obj, self.slot)

        def __set__(self, obj, value):
            owner = type(obj).__name__
            if kind == "int":
                value = _int(owner, self.name, value, lo, hi)
            elif kind == "bool":
                value = _bool(owner, self.name, value)
            elif kind == "str":
                value = _str(owner, self.name, value)
            else:
                value = _enum(owner, self.name, cls, value)
            setattr(obj, self.slot, value)

    f = Field()
    f.__doc__ = doc
    return f


class _Options:
    """Shared by SessionOptions and RunOptions: checked fields, config entries, copy and repr."""

    __slots__ = ("_config",)
    _DEFAULTS: dict[str, Any] = {}

    def __init__(self) -> None:
        self._config: dict[str, str] = {}
        for name, value in self._DEFAULTS.items():
            setattr(self, name, value)

    def _add_entry(self, key: str, value: str) -> None:
        owner = type(self).__name__
        _str(owner, "config key", key)
        _str(owner, f"config entry {key!r}", value)
        self._config[key] = value

    def _get_entry(self, key: str, what: str) -> str:
        if key not in self._config:
            raise RuntimeError(f"{type(self).__name__} does not have {what} with key: {key}")
        return self._config[key]

    def __copy__(self):
        new = type(self)()
        for name in self._DEFAULTS:
            setattr(new, name, getattr(self, name))
        new._config = dict(self._config)
        return new

    def __repr__(self) -> str:
        changed = {k: getattr(self, k) for k, v in self._DEFAULTS.items() if getattr(self, k) != v}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in changed.items())})"


class SessionOptions(_Options):
    """ONNX Runtime's SessionOptions. Every field is checked when set (TypeError or ValueError naming it); unknown
    attributes raise AttributeError, as ONNX Runtime's do."""

    intra_op_num_threads = _field("int", "CPU threads per run (0: vkinfer's default); the session's `threads`.")
    inter_op_num_threads = _field("int", "Threads across nodes (kept; vkinfer runs segments in order).")
    graph_optimization_level = _field("enum", "Kept; vkinfer's import passes always run (they are exact).",
                                      cls=GraphOptimizationLevel)
    execution_mode = _field("enum", "Kept; vkinfer runs a plan's segments in order.", cls=ExecutionMode)
    log_severity_level = _field("int", "0 verbose .. 4 fatal; 3 and 4 silence vkinfer's warnings at creation.",
                                lo=0, hi=4)
    log_verbosity_level = _field("int", "Verbose log level (kept).")
    logid = _field("str", "A name for the session's log lines (kept).")
    enable_profiling = _field("bool", "Record per-layer times; `end_profiling()` writes them as JSON.")
    profile_file_prefix = _field("str", "The profile file's name up to its time stamp (a path prefix).")
    enable_cpu_mem_arena = _field("bool", "Kept; vkinfer's memory planner always runs.")
    enable_mem_pattern = _field("bool", "Kept; vkinfer's memory planner always runs.")
    enable_mem_reuse = _field("bool", "Kept; vkinfer's memory planner always runs.")
    use_deterministic_compute = _field("bool", "Kept; vkinfer is deterministic (bit-exact) on every device.")
    use_per_session_threads = _field("bool", "Kept.")
    optimized_model_filepath = _field("str", "Not written (vkinfer's imported graph is not an ONNX model): a "
                                      "non-empty value gives a warning when the session is made.")

    __slots__ = tuple(f"_{k}" for k in (
        "intra_op_num_threads", "inter_op_num_threads", "graph_optimization_level", "execution_mode",
        "log_severity_level", "log_verbosity_level", "logid", "enable_profiling", "profile_file_prefix",
        "enable_cpu_mem_arena", "enable_mem_pattern", "enable_mem_reuse", "use_deterministic_compute",
        "use_per_session_threads", "optimized_model_filepath"))
    _DEFAULTS = {"intra_op_num_threads": 0, "inter_op_num_threads": 0,
                 "graph_optimization_level": GraphOptimizationLevel.ORT_ENABLE_ALL,
                 "execution_mode": ExecutionMode.ORT_SEQUENTIAL, "log_severity_level": 2, "log_verbosity_level": 0,
                 "logid": "", "enable_profiling": False, "profile_file_prefix": "onnxruntime_profile_",
                 "enable_cpu_mem_arena": True, "enable_mem_pattern": True, "enable_mem_reuse": True,
                 "use_deterministic_compute": False, "use_per_session_threads": True, "optimized_model_filepath": ""}

    def add_session_config_entry(self, key: str, value: str) -> None:
        """Set a session config entry (strings; kept, as ONNX Runtime keeps entries it does not read)."""
        self._add_entry(key, value)

    def get_session_config_entry(self, key: str) -> str:
        """A config entry's value; RuntimeError for a key never set (ONNX Runtime's error)."""
        return self._get_entry(key, "configuration")

    @classmethod
    def _coerce(cls, other: Any) -> SessionOptions:
        """A copy of `other`: a SessionOptions, or onnxruntime's own (its fields read one by one and checked)."""
        if isinstance(other, SessionOptions):
            return copy.copy(other)
        if type(other).__name__ != "SessionOptions":
            raise TypeError(f"sess_options must be a vkinfer.SessionOptions (or a device string), got "
                            f"{type(other).__name__}")
        new = cls()
        for name in cls._DEFAULTS:
            if hasattr(other, name):
                value = getattr(other, name)
                if name == "log_severity_level" and value == -1:
                    continue  # onnxruntime's "not set"
                setattr(new, name, int(value) if isinstance(value, enum.Enum) or type(value).__module__.startswith(
                    "onnxruntime") else value)
        return new


class RunOptions(_Options):
    """ONNX Runtime's RunOptions: `terminate` set refuses a run (RuntimeError); `logid` (alias `run_tag`) is
    recorded in the profile's model_run event."""

    log_severity_level = _field("int", "0 verbose .. 4 fatal (kept).", lo=0, hi=4)
    log_verbosity_level = _field("int", "Verbose log level (kept).")
    logid = _field("str", "A tag for this run (the profile records it).")
    terminate = _field("bool", "Set: runs given these options are refused.")
    only_execute_path_to_fetches = _field("bool", "Kept.")

    __slots__ = ("_log_severity_level", "_log_verbosity_level", "_logid", "_terminate", "_only_execute_path_to_fetches")
    _DEFAULTS = {"log_severity_level": 2, "log_verbosity_level": 0, "logid": "", "terminate": False,
                 "only_execute_path_to_fetches": False}

    @property
    def run_tag(self) -> str:
        """The C API's name for `logid`."""
        return self.logid

    @run_tag.setter
    def run_tag(self, value: str) -> None:
        self.logid = value

    def add_run_config_entry(self, key: str, value: str) -> None:
        """Set a run config entry (strings; kept)."""
        self._add_entry(key, value)

    def get_run_config_entry(self, key: str) -> str:
        """A run config entry's value; RuntimeError for a key never set."""
        return self._get_entry(key, "configuration")


class ModelMetadata:
    """ONNX Runtime's ModelMetadata. ONNX: the model's producer_name, graph name, domain, doc strings,
    model_version (2**63 - 1 when unset, as ONNX Runtime reports it) and metadata_props. TFLite: the file's
    description (as producer_name and description), subgraph 0's name, the schema version and the metadata
    entries (values decoded as text where they are)."""

    def __init__(self, producer_name: str = "", graph_name: str = "", domain: str = "", description: str = "",
                 graph_description: str = "", version: int = 0, custom_metadata_map: dict[str, str] | None = None,
                 producer_version: str = ""):
        self.producer_name, self.graph_name, self.domain = producer_name, graph_name, domain
        self.description, self.graph_description, self.version = description, graph_description, version
        self.custom_metadata_map = dict(custom_metadata_map or {})
        self.producer_version = producer_version

    def __repr__(self) -> str:
        return (f"ModelMetadata(producer_name={self.producer_name!r}, graph_name={self.graph_name!r}, "
                f"domain={self.domain!r}, version={self.version}, custom_metadata_map={self.custom_metadata_map})")


_AVAILABLE: list[str] | None = None


def get_all_providers() -> list[str]:
    """Every execution provider vkinfer knows."""
    return list(PROVIDERS)


def get_available_providers() -> list[str]:
    """The providers this machine can run: VulkanExecutionProvider where a Vulkan device is found (lavapipe
    counts), and CPUExecutionProvider always."""
    global _AVAILABLE
    if _AVAILABLE is None:
        from ._vk import devices

        try:
            found = devices()
        except VulkanUnavailableError:
            found = []
        _AVAILABLE = [VULKAN_PROVIDER, CPU_PROVIDER] if found else [CPU_PROVIDER]
    return list(_AVAILABLE)


def get_device() -> str:
    """"GPU" where a Vulkan device other than a CPU implementation (lavapipe, SwiftShader) is found, else "CPU"."""
    from ._vk import devices

    try:
        found = devices()
    except VulkanUnavailableError:
        found = []
    return "GPU" if any(d.type in ("discrete", "integrated", "virtual") for d in found) else "CPU"


def _providers(providers: Sequence | None, provider_options: Sequence[dict] | None) -> tuple[str, list, list[str]]:
    """(vkinfer device, [(provider, options)] as given, warnings) for ONNX Runtime's providers argument."""
    if providers is None:
        providers = []
    if isinstance(providers, str) or not isinstance(providers, Sequence):
        raise TypeError(f"providers must be a list of provider names or (name, options) pairs, got "
                        f"{type(providers).__name__} {providers!r}")
    if provider_options is not None:
        if isinstance(provider_options, dict) or not isinstance(provider_options, Sequence):
            raise TypeError(f"provider_options must be a list of dicts (one per provider), got "
                            f"{type(provider_options).__name__}")
        if len(provider_options) != len(providers):
            raise ValueError(f"provider_options has {len(provider_options)} entries for {len(providers)} providers: "
                             f"give one dict per provider")
    given: list[tuple[str, dict]] = []
    for k, p in enumerate(providers):
        opts = dict(provider_options[k]) if provider_options is not None else {}
        if isinstance(p, tuple | list) and len(p) == 2 and isinstance(p[0], str):
            name, extra = p
            if not isinstance(extra, dict):
                raise TypeError(f"provider {name!r}: options must be a dict, got {type(extra).__name__}")
            opts.update(extra)
        elif isinstance(p, str):
            name = p
        else:
            raise TypeError(f"providers[{k}] must be a provider name or a (name, options) pair, got {p!r}")
        if name not in PROVIDERS:
            raise ValueError(f"unknown execution provider {name!r}; vkinfer's providers: "
                             f"{', '.join(map(repr, PROVIDERS))} (available here: "
                             f"{', '.join(get_available_providers())})")
        if any(name == g for g, _ in given):
            raise ValueError(f"execution provider {name!r} is listed twice")
        bad = [key for key in opts if key not in _PROVIDER_KEYS[name]]
        if bad:
            raise ValueError(f"{name}: unknown option(s) {bad}; its options: {list(_PROVIDER_KEYS[name])}")
        given.append((name, {key: str(v) for key, v in opts.items()}))
    notes = []
    names = [n for n, _ in given]
    if not names:
        return "auto", given, notes
    cpu_opts = dict(given[names.index(CPU_PROVIDER)][1]) if CPU_PROVIDER in names else {}
    vk_opts = dict(given[names.index(VULKAN_PROVIDER)][1]) if VULKAN_PROVIDER in names else {}
    if "device_id" in vk_opts and "device" in vk_opts:
        raise ValueError(f"{VULKAN_PROVIDER}: give device_id or device, not both")
    if "device_id" in vk_opts and not vk_opts["device_id"].isdigit():
        raise ValueError(f"{VULKAN_PROVIDER}: device_id must be a non-negative integer, got {vk_opts['device_id']!r}")
    if names[0] == CPU_PROVIDER:
        if vk_opts:
            notes.append(f"{CPU_PROVIDER} is listed first, so every node runs on the CPU: the {VULKAN_PROVIDER} "
                         f"options {vk_opts} are not used")
        return ("cpu:" + cpu_opts["variant"]) if "variant" in cpu_opts else "cpu", given, notes
    if CPU_PROVIDER in names:  # Vulkan first, CPU as its fallback: vkinfer's dispatcher
        if vk_opts or cpu_opts:
            notes.append(f'[{VULKAN_PROVIDER}, {CPU_PROVIDER}] is device="auto", which weighs every Vulkan device '
                         f"and the best CPU variant itself: the options {vk_opts or cpu_opts} are not used (list "
                         f"{VULKAN_PROVIDER} alone to pin a device)")
        return "auto", given, notes
    which = vk_opts.get("device_id", vk_opts.get("device"))
    return "vulkan" if which is None else f"vulkan:{which}", given, notes


class OrtValue:
    """ONNX Runtime's OrtValue for host (cpu) memory: a numpy array that `numpy()` returns without copying."""

    def __init__(self, array: np.ndarray):
        if not isinstance(array, np.ndarray):
            raise TypeError(f"OrtValue holds a numpy array, got {type(array).__name__}")
        self._array = array

    @staticmethod
    def ortvalue_from_numpy(numpy_obj: np.ndarray, device_type: str = "cpu", device_id: int = 0) -> OrtValue:
        """An OrtValue over `numpy_obj` (host memory, shared)."""
        _check_cpu("OrtValue", device_type, device_id)
        return OrtValue(np.asarray(numpy_obj))

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any, device_type: str = "cpu",
                                     device_id: int = 0) -> OrtValue:
        """A new host OrtValue of `shape` and `element_type` (a numpy type or an ONNX TensorProto type number)."""
        _check_cpu("OrtValue", device_type, device_id)
        return OrtValue(np.empty(tuple(shape), _np_type(element_type)))

    def numpy(self) -> np.ndarray:
        """The array itself (no copy)."""
        return self._array

    def shape(self) -> list[int]:
        """The array's shape."""
        return list(self._array.shape)

    def element_type(self) -> type:
        """The numpy scalar type (numpy.float32, ...)."""
        return self._array.dtype.type

    def data_type(self) -> str:
        """ONNX Runtime's type string, e.g. "tensor(float)"."""
        name = self._array.dtype.name
        return f"tensor({ {'float32': 'float', 'float64': 'double'}.get(name, name) })"

    def device_name(self) -> str:
        """Always "cpu": host memory."""
        return "cpu"

    def data_ptr(self) -> int:
        """The address of the array's data."""
        return int(self._array.ctypes.data)

    def tensor_size_in_bytes(self) -> int:
        """The array's size in bytes."""
        return int(self._array.nbytes)

    def is_tensor(self) -> bool:
        """Always True: vkinfer's values are tensors."""
        return True

    def has_value(self) -> bool:
        """Always True."""
        return True

    def update_inplace(self, np_arr: np.ndarray) -> None:
        """Copy `np_arr` into this value's memory (same shape and dtype)."""
        np.copyto(self._array, np_arr, casting="no")


def _check_cpu(what: str, device_type: Any, device_id: Any) -> None:
    if not isinstance(device_type, str) or device_type.lower() != "cpu" or device_id not in (0, None):
        raise ValueError(f"{what}: vkinfer binds host memory only (device_type 'cpu', device_id 0), got "
                         f"device_type {device_type!r}, device_id {device_id!r}")


def _np_type(element_type: Any) -> np.dtype:
    if isinstance(element_type, int | np.integer) and not isinstance(element_type, bool):
        from onnx import helper

        try:
            return np.dtype(helper.tensor_dtype_to_np_dtype(int(element_type)))
        except KeyError:
            raise ValueError(f"unknown ONNX element type {element_type}") from None
    try:
        return np.dtype(element_type)
    except TypeError:
        raise TypeError(f"element_type must be a numpy type or an ONNX TensorProto type number, got "
                        f"{element_type!r}") from None


def _wrap_pointer(what: str, ptr: Any, element_type: Any, shape: Any) -> np.ndarray:
    """A numpy array over host memory at address `ptr` (ONNX Runtime's buffer_ptr binding)."""
    import ctypes

    if isinstance(ptr, bool) or not isinstance(ptr, int | np.integer) or ptr <= 0:
        raise ValueError(f"{what}: buffer_ptr must be a host memory address (a positive int), got {ptr!r}")
    if element_type is None or shape is None:
        raise ValueError(f"{what}: buffer_ptr needs element_type and shape")
    dt = _np_type(element_type)
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    raw = (ctypes.c_char * n).from_address(int(ptr))
    return np.frombuffer(raw, dtype=dt).reshape(shape)


class IOBinding:
    """ONNX Runtime's IOBinding on host memory: inputs and outputs bound by name, run by
    `session.run_with_iobinding(binding)`. An output bound to a caller's array (`bind_output(name, buffer=arr)`,
    or buffer_ptr with element_type and shape, or an OrtValue) is written into that array at every run: on a
    session whose whole model is one native CPU graph, the graph writes it directly (no allocation); otherwise the
    run's result is copied into it."""

    def __init__(self, session: InferenceSession):
        self._sess = session
        self._inputs: dict[str, np.ndarray] = {}
        self._outputs: dict[str, np.ndarray | None] = {}
        self._results: list[np.ndarray] | None = None

    def _input_name(self, name: str) -> str:
        names = [i.name for i in self._sess.get_inputs()]
        if name not in names:
            raise ValueError(f"unknown input {name!r}; the model's inputs: {names}")
        return name

    def _output_arg(self, name: str) -> NodeArg:
        outs = self._sess.get_outputs()
        for o in outs:
            if o.name == name:
                return o
        raise ValueError(f"unknown output {name!r}; the model's outputs: {[o.name for o in outs]}")

    def bind_cpu_input(self, name: str, arr_on_cpu: np.ndarray) -> None:
        """Bind input `name` to a host array (read at each run; not copied here)."""
        self._input_name(name)
        if isinstance(arr_on_cpu, np.generic):
            arr_on_cpu = np.asarray(arr_on_cpu)
        if not isinstance(arr_on_cpu, np.ndarray):
            raise TypeError(f"input {name!r}: bind a numpy array, got {type(arr_on_cpu).__name__}")
        self._inputs[name] = arr_on_cpu

    def bind_input(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                   shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        """ONNX Runtime's bind_input: host memory only (device_type "cpu") at address `buffer_ptr` holding
        `shape` elements of `element_type`."""
        self._input_name(name)
        _check_cpu(f"input {name!r}", device_type, device_id)
        self._inputs[name] = _wrap_pointer(f"input {name!r}", buffer_ptr, element_type, shape)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        """Bind input `name` to an OrtValue's array."""
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"input {name!r}: bind a vkinfer.OrtValue, got {type(ortvalue).__name__}")
        self.bind_cpu_input(name, ortvalue.numpy())

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None,
                    shape: Sequence[int] | None = None, buffer_ptr: int | None = None, *,
                    buffer: np.ndarray | None = None) -> None:
        """Bind output `name`: to a fresh array each run (no buffer), or into a caller's memory that every run
        fills: `buffer` (a numpy array, vkinfer's addition) or `buffer_ptr` with `element_type` and `shape`
        (ONNX Runtime's). The memory must be a writeable C-contiguous array of the output's dtype and shape
        (ValueError naming the output otherwise)."""
        arg = self._output_arg(name)
        _check_cpu(f"output {name!r}", device_type, device_id)
        if buffer is not None and buffer_ptr is not None:
            raise ValueError(f"output {name!r}: give buffer or buffer_ptr, not both")
        if buffer_ptr is not None:
            buffer = _wrap_pointer(f"output {name!r}", buffer_ptr, element_type, shape)
        if buffer is not None:
            self._check_buffer(arg, buffer)
        self._outputs[name] = buffer

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """Bind output `name` into an OrtValue's array."""
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"output {name!r}: bind a vkinfer.OrtValue, got {type(ortvalue).__name__}")
        self.bind_output(name, buffer=ortvalue.numpy())

    def _check_buffer(self, arg: NodeArg, buf: Any) -> None:
        name = arg.name
        if not isinstance(buf, np.ndarray):
            raise ValueError(f"output {name!r}: buffer must be a numpy array, got {type(buf).__name__}")
        t = next(t for t in self._sess.graph.outputs if t.name == name)
        if buf.dtype != t.dtype:
            raise ValueError(f"output {name!r} is {t.dtype}, the buffer is {buf.dtype}")
        if t.shape is not None and (buf.ndim != len(t.shape) or any(
                isinstance(d, int) and d > 0 and d != s for d, s in zip(t.shape, buf.shape, strict=True))):
            raise ValueError(f"output {name!r} has shape {list(t.shape)}, the buffer {list(buf.shape)}")
        if not buf.flags.c_contiguous or not buf.flags.writeable:
            raise ValueError(f"output {name!r}: the buffer must be a writeable C-contiguous array")

    def get_outputs(self) -> list[OrtValue]:
        """The last run's outputs in binding order, as OrtValues over the bound arrays (no copy)."""
        if self._results is None:
            raise RuntimeError("no outputs yet: call session.run_with_iobinding(binding) first")
        return [OrtValue(a) for a in self._results]

    def copy_outputs_to_cpu(self) -> list[np.ndarray]:
        """Copies of the last run's outputs, in binding order."""
        return [v.numpy().copy() for v in self.get_outputs()]

    def clear_binding_inputs(self) -> None:
        """Forget every bound input."""
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        """Forget every bound output (and the last run's outputs)."""
        self._outputs.clear()
        self._results = None

    def synchronize_inputs(self) -> None:
        """Nothing to do: host memory."""

    def synchronize_outputs(self) -> None:
        """Nothing to do: host memory."""


class InferenceSession(_Session):
    """onnxruntime.InferenceSession's API over vkinfer.session.InferenceSession (see the module docstring).

    path_or_bytes: an .onnx or int8/uint8 .tflite file, its bytes, or an onnx.ModelProto. sess_options: a
    SessionOptions (or, as before, a device string). providers / provider_options: ONNX Runtime's execution
    providers, mapped onto vkinfer's devices. kwargs: vkinfer's own `device`, `placement`, `threads`, `objective`,
    `profile` (vkinfer.session.InferenceSession); `device` and `providers` may not both be given, nor
    `threads` and a different intra_op_num_threads."""

    def __init__(self, path_or_bytes: str | os.PathLike | bytes | Any, sess_options: SessionOptions | str | None = None,
                 providers: Sequence[str | tuple[str, dict]] | None = None,
                 provider_options: Sequence[dict] | None = None, **kwargs: Any):
        t0, wall0 = time.perf_counter_ns(), time.time_ns()
        unknown = [k for k in kwargs if k not in _VKINFER_KEYWORDS + ("disabled_optimizers",)]
        if unknown:
            raise TypeError(f"InferenceSession got unexpected keyword argument(s) {unknown}; ONNX Runtime's "
                            f"arguments: sess_options, providers, provider_options; vkinfer's: "
                            f"{', '.join(_VKINFER_KEYWORDS)}")
        kwargs.pop("disabled_optimizers", None)
        device = kwargs.pop("device", None)
        if isinstance(sess_options, str):  # vkinfer's positional device
            if device is not None:
                raise TypeError("InferenceSession got the device twice (positionally and as device=)")
            device, sess_options = sess_options, None
        opts = SessionOptions() if sess_options is None else SessionOptions._coerce(sess_options)
        mapped, given, notes = _providers(providers, provider_options)
        if device is not None and (providers or provider_options):
            raise ValueError(f"give device= or providers=, not both (device={device!r}, providers={providers!r})")
        if device is None:
            device = mapped
        threads = kwargs.pop("threads", None)
        if opts.intra_op_num_threads:
            if threads is not None and threads != opts.intra_op_num_threads:
                raise ValueError(f"threads={threads!r} and SessionOptions.intra_op_num_threads="
                                 f"{opts.intra_op_num_threads} disagree")
            threads = opts.intra_op_num_threads
        self._options = opts
        self._given_providers = given
        self._profiler: _Profiler | None = None
        self._profiling = opts.enable_profiling
        self._prof_plans: set[int] = set()
        quiet = opts.log_severity_level >= 3  # ONNX Runtime's "error" and "fatal": no warnings
        if opts.optimized_model_filepath:
            notes.append(f"SessionOptions.optimized_model_filepath={opts.optimized_model_filepath!r}: vkinfer writes "
                         f"no optimized ONNX model")
        for note in notes if not quiet else ():
            warnings.warn(note, RuntimeWarning, stacklevel=2)
        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                super().__init__(path_or_bytes, device=device, threads=threads, **kwargs)
        finally:
            # The session's warnings (auto's fallback to the CPU, say) point at the caller's line, as they do when
            # vkinfer.session.InferenceSession is made directly.
            for w in caught if not quiet else ():
                warnings.warn(w.message, w.category, stacklevel=2)
        if opts.log_severity_level == 0:
            print(self.explain(), file=sys.stderr)
        self._start_ns = wall0
        if self._profiling:
            self._profiler = _Profiler(self, opts.profile_file_prefix, t0, time.perf_counter_ns())
            # Every run through the segments (the one-call native paths skip the timers).
            self._native = None
            if self._fast is not None:
                self._fast = (*self._fast[:3], None)
            self.run = self._profiled_run  # type: ignore[method-assign]

    # ---- ONNX Runtime's session methods ----
    def get_providers(self) -> list[str]:
        """The providers the session uses: VulkanExecutionProvider (with CPUExecutionProvider, which runs the
        float edges) for a Vulkan session or an auto session that weighs a Vulkan device; CPUExecutionProvider
        alone otherwise."""
        kind = self.device.partition(":")[0]
        vulkan = kind == "vulkan" or (kind == "auto" and any(d.startswith("vulkan") for d in self.auto_devices))
        return [VULKAN_PROVIDER, CPU_PROVIDER] if vulkan else [CPU_PROVIDER]

    def get_provider_options(self) -> dict[str, dict[str, str]]:
        """Per provider in use, its options as strings: the Vulkan device's device_id and name, the CPU's thread
        count (and variant)."""
        out: dict[str, dict[str, str]] = {}
        kind, _, which = self.device.partition(":")
        if VULKAN_PROVIDER in self.get_providers():
            if kind == "vulkan":
                backend = getattr(self, "_backend", None)  # none where $VKINFER_PLAN=0 interprets every node
                if backend is not None:
                    info = backend.dev.info
                else:
                    from ._vk import get_device as vulkan_device

                    info = vulkan_device(which or None).info
                out[VULKAN_PROVIDER] = {"device_id": str(info.index), "device": info.name}
            else:
                ids = [d.partition(":")[2] for d in self.auto_devices if d.startswith("vulkan")]
                out[VULKAN_PROVIDER] = {"device_id": ",".join(ids)}
        cpu = {"intra_op_num_threads": str(self._threads())}
        if kind == "cpu" and which:
            cpu["variant"] = which
        out[CPU_PROVIDER] = cpu
        return out

    def get_session_options(self) -> SessionOptions:
        """A copy of the session's options (changing it does not change the session)."""
        return copy.copy(self._options)

    def get_modelmeta(self) -> ModelMetadata:
        """The model's metadata (ModelMetadata)."""
        return ModelMetadata(**self.graph.meta.get("model", {}))

    def get_overridable_initializers(self) -> list[NodeArg]:
        """None: vkinfer folds initializers into the compiled plan."""
        return []

    def get_profiling_start_time_ns(self) -> int:
        """When profiling started (the session's creation), in ns since the epoch."""
        return self._start_ns

    def disable_fallback(self) -> None:
        """Nothing to do: vkinfer places every node when the session is made."""

    def enable_fallback(self) -> None:
        """Nothing to do: vkinfer places every node when the session is made."""

    def end_profiling(self) -> str:
        """Stop profiling and write the events as a JSON array (Chrome trace format) to
        `<profile_file_prefix>_<date>_<time>.json`; its path, or "" when the session was not profiling."""
        prof, self._profiler = self._profiler, None
        if prof is None:
            return ""
        return prof.write()

    def io_binding(self) -> IOBinding:
        """A new IOBinding for this session."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: IOBinding, run_options: RunOptions | None = None) -> None:
        """Run on the binding's inputs; outputs as bound (all the model's outputs when none is bound)."""
        if not isinstance(iobinding, IOBinding) or iobinding._sess is not self:
            raise ValueError("run_with_iobinding needs an IOBinding made by this session's io_binding()")
        if run_options is not None and run_options.terminate:
            raise RuntimeError("run refused: the RunOptions' terminate flag is set")
        bound = dict(iobinding._outputs) or {o.name: None for o in self.get_outputs()}
        names = list(bound)
        feed = iobinding._inputs
        outs = self._run_into(feed, names, bound) if run_options is None else None
        if outs is None:
            results = self.run(names, dict(feed), run_options)
            outs = []
            for n, r in zip(names, results, strict=True):
                buf = bound[n]
                if buf is None:
                    outs.append(r)
                else:
                    np.copyto(buf, r, casting="no")
                    outs.append(buf)
        iobinding._results = outs

    def _run_into(self, feed: dict[str, np.ndarray], names: list[str],
                  bound: dict[str, np.ndarray | None]) -> list[np.ndarray] | None:
        """The whole model as one native CPU graph writing straight into the bound arrays; None where the session
        or the feed is not that case (the caller takes the general path)."""
        fast = self._fast
        if fast is None or fast[3] is None or self._variables or names != fast[2] or len(feed) != len(fast[1]):
            return None
        arrays = []
        for name, dt, shape in fast[1]:
            v = feed.get(name)
            if type(v) is not np.ndarray or v.dtype != dt or v.shape != shape:
                return None
            arrays.append(v if v.flags.c_contiguous else np.ascontiguousarray(v))
        seg = fast[3]
        outs = [bound[n] if bound[n] is not None else np.empty(shape, dt) for n, (_, shape, dt) in
                zip(names, seg.out_specs, strict=True)]
        try:
            seg.graph.run(arrays + outs, self._threads())
        except ValueError:
            from .cpu.segment import refuse_nan

            refuse_nan(seg.nan_checked, arrays)
            raise
        return outs

    # ---- profiling ----
    def plan(self, feed: dict[str, np.ndarray], trial: bool = False):
        """As vkinfer.session.InferenceSession.plan; a profiling session also instruments the plan's
        segments (their runs are timed) the first time it sees the plan."""
        plan = super().plan(feed, trial)
        if plan is not None and getattr(self, "_profiling", False) and id(plan) not in self._prof_plans:
            self._prof_plans.add(id(plan))
            _instrument(self, plan)
        return plan

    def _profiled_run(self, output_names: list[str] | None, input_feed: dict[str, np.ndarray],
                      run_options: RunOptions | None = None) -> list[np.ndarray]:
        prof = self._profiler
        if prof is None:
            return _Session.run(self, output_names, input_feed, run_options)
        with prof.lock:
            prof.current = []
            state = dict(self._state)  # what an interpreted run's replay starts from
            t0 = time.perf_counter_ns()
            try:
                out = _Session.run(self, output_names, input_feed, run_options)
            finally:
                events, prof.current = prof.current, None
            t1 = time.perf_counter_ns()
            prof.run_done(self, events, t0, t1, run_options, {**state, **input_feed})
        return out


def _instrument(sess: InferenceSession, plan) -> None:
    """Wrap each segment runner's `run` of a profiling session's plan with timers (recorded while a profiled run
    is in progress), and keep the plan off its one-call native path."""

    plan._natives[sess._threads()] = None
    for k, seg in enumerate(plan.segments):
        r = seg.runner
        inner = r.run

        def timed(values, threads=0, _seg=seg, _k=k, _r=r, _inner=inner):
            prof = sess._profiler
            events = prof.current if prof is not None else None
            if events is None:
                return _inner(values, threads)
            t0 = time.perf_counter_ns()
            if _r.kind == "host":
                nodes: list = []
                _r.run(values, timings=nodes)
                events.append(("host", plan, _seg, _k, t0, time.perf_counter_ns() - t0, nodes))
                return None
            if _r.kind == "cpu":
                _r.graph.profile(True)
                try:
                    _inner(values, threads)
                    ns = _r.graph.times_ns()[0]
                finally:
                    _r.graph.profile(False)
                events.append(("cpu", plan, _seg, _k, t0, time.perf_counter_ns() - t0, ns))
                return None
            _inner(values, threads)
            events.append(("vulkan", plan, _seg, _k, t0, time.perf_counter_ns() - t0,
                           {t.name: values[t.name] for t in plan.g.inputs if t.name in values}))
            return None

        r.run = timed


class _Profiler:
    """A profiling session's events (ONNX Runtime's Chrome trace format) and what it learned about each plan."""

    def __init__(self, sess: InferenceSession, prefix: str, t0: int, t1: int):
        self.prefix, self.origin = prefix, t0
        self.pid, self.tid = os.getpid(), threading.get_ident() % 2 ** 31
        self.lock = threading.Lock()
        self.current: list | None = None
        self.cpu_owners: dict[int, list[str | None]] = {}
        self.vk_times: dict[int, dict[str, float]] = {}
        self.events: list[dict] = [self._event("Session", "session_initialization", t0, t1 - t0, {})]
        self.sess = sess
        self.runs = 0

    def _event(self, cat: str, name: str, start_ns: int, dur_ns: float, args: dict) -> dict:
        return {"cat": cat, "pid": self.pid, "tid": self.tid, "dur": int(round(dur_ns / 1000)),
                "ts": int(round((start_ns - self.origin) / 1000)), "ph": "X", "name": name,
                "args": {**args, "dur_ns": int(dur_ns)}}

    @staticmethod
    def _provider(device: str) -> str:
        return VULKAN_PROVIDER if device.startswith("vulkan") else CPU_PROVIDER

    def _node_event(self, node, device: str, start_ns: int, dur_ns: float, extra: dict) -> dict:
        return self._event("Node", f"{node.name}_kernel_time", start_ns, dur_ns,
                           {"op_name": node.op, "provider": self._provider(device), "device": device,
                            "run": self.runs, **extra})

    def _cpu_owners(self, plan, seg) -> list[str | None]:
        key = id(seg)
        if key not in self.cpu_owners:
            from .layer_times import _cpu_op_nodes

            try:
                self.cpu_owners[key] = _cpu_op_nodes(plan, seg)
            except Exception:  # noqa: BLE001 - without the mapping the segment's time still goes to its nodes
                self.cpu_owners[key] = [None] * len(seg.runner.ops())
        return self.cpu_owners[key]

    def _vulkan_times(self, plan, feed: dict) -> dict[str, float]:
        """Device ns per Vulkan node of `plan` (timestamp queries, as `vkinfer bench --per-layer`), measured once."""
        key = id(plan)
        if key not in self.vk_times:
            from .layer_times import per_layer

            cur, self.current = self.current, None  # its runs are not the caller's
            try:
                rows = per_layer(self.sess, feed, self.sess._threads(), rounds=3)
            except Exception as e:  # noqa: BLE001 - a profile without Vulkan node times is still a profile
                warnings.warn(f"profiling: Vulkan per-node times unavailable ({type(e).__name__}: {e})",
                              RuntimeWarning, stacklevel=4)
                rows = []
            finally:
                self.current = cur
            self.vk_times[key] = {r["node"]: r["measured_ms"] * 1e6 for r in rows
                                  if r["device"].startswith("vulkan")}
        return self.vk_times[key]

    def run_done(self, sess: InferenceSession, events: list, t0: int, t1: int, run_options, feed) -> None:
        """Turn one run's segment records (from the instrumented runners) into trace events."""
        out = []
        for kind, plan, seg, k, s0, dur, data in events:
            edges = 0.0
            if kind == "host":
                for node, n0, nd in data:
                    out.append(self._node_event(node, seg.device, n0, nd, {}))
            elif kind == "cpu":
                owners = self._cpu_owners(plan, seg)
                ops = seg.runner.ops()
                per: dict[str, list] = {}
                at = s0
                starts: dict[str, int] = {}
                for op, owner, ns in zip(ops, owners, data, strict=False):
                    if owner is None:
                        edges += ns
                    else:
                        starts.setdefault(owner, at)
                        per.setdefault(owner, []).append((op, ns))
                    at += ns
                for node in seg.nodes:
                    ran = per.get(node.name, [])
                    out.append(self._node_event(node, seg.device, starts.get(node.name, s0),
                                                sum(ns for _, ns in ran), {"native_ops": [op for op, _ in ran]}))
            else:
                times = self._vulkan_times(plan, data)
                at = s0
                for node in seg.nodes:
                    nd = times.get(node.name, 0.0)
                    out.append(self._node_event(node, seg.device, at, nd, {"timing": "vulkan timestamps, per plan"}))
                    at += nd
            out.append(self._event("Segment", f"segment_{k}_{seg.device}", s0, dur,
                                   {"device": seg.device, "provider": self._provider(seg.device),
                                    "nodes": len(seg.nodes), "edge_ns": int(edges), "run": self.runs}))
        if not events:  # an interpreted session (device "reference", $VKINFER_PLAN=0): nodes timed on a replay
            out += self._replay_nodes(sess, feed, t1)
        tag = run_options.logid if run_options is not None else ""
        out.append(self._event("Session", "model_run", t0, t1 - t0, {"run_tag": tag, "run": self.runs}))
        self.events += out
        self.runs += 1

    def _replay_nodes(self, sess: InferenceSession, feed: dict, t1: int) -> list[dict]:
        """Per-node wall times of an interpreted session: the nodes run again, one by one, after the run, on its
        feed (a streaming model's state as the run found it); the outputs are the run's own."""
        from .model.interpreter import interpret

        g = sess.graph
        values = {**g.consts, **{k: np.asarray(v) for k, v in feed.items()}}
        out = []
        for node in g.nodes:
            n0 = time.perf_counter_ns()
            interpret(g, values, sess._host_device, [node])
            out.append(self._node_event(node, sess._host_device, n0, time.perf_counter_ns() - n0,
                                        {"timing": "replayed after the run"}))
        return out

    def write(self) -> str:
        """Write the events to `<prefix>_<date>_<time>_<ms>.json`; the path."""
        now = time.time()
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now)) + f"_{int(now * 1000) % 1000:03d}"
        path = f"{self.prefix}_{stamp}.json"
        with open(path, "w") as f:
            json.dump(self.events, f, indent=0)
        return path


__all__ = ["InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode",
           "ModelMetadata", "IOBinding", "OrtValue", "NodeArg", "get_available_providers", "get_all_providers",
           "get_device", "PROVIDERS", "VULKAN_PROVIDER", "CPU_PROVIDER", "VkInferError"]
