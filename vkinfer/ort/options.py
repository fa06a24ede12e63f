"""ONNX Runtime's options, providers and model metadata, checked as ONNX Runtime checks them."""

from __future__ import annotations

import copy
import enum
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import VulkanUnavailableError

VULKAN_PROVIDER = "VulkanExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"
PROVIDERS = (VULKAN_PROVIDER, CPU_PROVIDER)
_PROVIDER_KEYS = {VULKAN_PROVIDER: ("device_id", "device"), CPU_PROVIDER: ("variant",)}
_VKINFER_KEYWORDS = ("device", "placement", "threads", "objective", "profile", "max_plans", "max_model_bytes",
                     "external_data_dir", "max_tensor_bytes", "max_session_bytes")
# Session config entries vkinfer reads (SessionOptions.add_session_config_entry), each the keyword it sets.
CONFIG_KEYWORDS = {f"vkinfer.{k}": k for k in ("max_plans", "max_model_bytes", "external_data_dir",
                                               "max_tensor_bytes", "max_session_bytes")}


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
        """Set a session config entry (strings; kept, as ONNX Runtime keeps entries it does not read). vkinfer
        reads "vkinfer.max_plans" (compiled plans kept per session), "vkinfer.max_model_bytes" (the model file's
        size limit), "vkinfer.max_tensor_bytes", "vkinfer.max_session_bytes" (positive integers) and
        "vkinfer.external_data_dir" (vkinfer.session.InferenceSession's keywords of those names); a bad value
        raises ValueError naming the entry when the session is made."""
        self._add_entry(key, value)

    def _keywords(self) -> dict[str, Any]:
        """The vkinfer keywords the config entries set (CONFIG_KEYWORDS), their values checked."""
        out: dict[str, Any] = {}
        for key, kw in CONFIG_KEYWORDS.items():
            if key not in self._config:
                continue
            value = self._config[key]
            if kw == "external_data_dir":
                out[kw] = value
                continue
            try:
                out[kw] = int(value)
            except ValueError:
                raise ValueError(f"session config entry {key!r} must be a positive integer, got {value!r}") from None
            if out[kw] < 1:
                raise ValueError(f"session config entry {key!r} must be a positive integer, got {value!r}")
        return out

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
        for key in CONFIG_KEYWORDS:  # onnxruntime's options list no entries: vkinfer's are asked for by name
            try:
                new._config[key] = str(other.get_session_config_entry(key))
            except Exception:  # noqa: BLE001 - onnxruntime raises for a key never set
                pass
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
        from .._vk import devices

        try:
            found = devices()
        except VulkanUnavailableError:
            found = []
        _AVAILABLE = [VULKAN_PROVIDER, CPU_PROVIDER] if found else [CPU_PROVIDER]
    return list(_AVAILABLE)


def get_device() -> str:
    """"GPU" where a Vulkan device other than a CPU implementation (lavapipe, SwiftShader) is found, else "CPU"."""
    from .._vk import devices

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
