"""onnxruntime.InferenceSession's API over vkinfer.session.InferenceSession."""

from __future__ import annotations

import copy
import os
import sys
import time
import warnings
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..session import InferenceSession as _Session
from ..session import NodeArg
from .iobinding import IOBinding
from .options import (
    _VKINFER_KEYWORDS,
    CPU_PROVIDER,
    VULKAN_PROVIDER,
    ModelMetadata,
    RunOptions,
    SessionOptions,
    _providers,
)
from .profiling import _instrument, _Profiler


class InferenceSession(_Session):
    """onnxruntime.InferenceSession's API over vkinfer.session.InferenceSession (see the module docstring).

    path_or_bytes: an .onnx or int8/uint8 .tflite file, its bytes, or an onnx.ModelProto. sess_options: a
    SessionOptions (or, as before, a device string). providers / provider_options: ONNX Runtime's execution
    providers, mapped onto vkinfer's devices. kwargs: vkinfer's own `device`, `placement`, `threads`, `objective`,
    `profile`, `max_plans`, `max_model_bytes`, `external_data_dir` (vkinfer.session.InferenceSession; the last
    three also as session config entries, SessionOptions.add_session_config_entry); `device` and `providers` may
    not both be given, nor `threads` and a different intra_op_num_threads."""

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
        for kw, value in opts._keywords().items():  # vkinfer's session config entries (options.CONFIG_KEYWORDS)
            if kwargs.get(kw, value) != value:
                raise ValueError(f"{kw}={kwargs[kw]!r} and the session config entry for it ({value!r}) disagree")
            kwargs[kw] = value
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
        self._prof_plans: weakref.WeakSet = weakref.WeakSet()  # plans instrumented (evicted ones drop out)
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
            self._stateful = None
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
                    from .._vk import get_device as vulkan_device

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
        """The model in the plan's one native call (the same runner as run's), writing straight into the bound
        arrays; None where the session or the feed is not that case (the caller takes the general path)."""
        fast = self._fast
        native = fast.plan.native(self._threads()) if fast is not None else None
        if native is None or self._variables or len(feed) != len(fast.inputs) or len(set(names)) != len(names):
            return None
        for name, dt, shape in fast.inputs:
            v = feed.get(name)
            if type(v) is not np.ndarray or v.dtype != dt or v.shape != shape:
                return None
        specs = {t: (shape, dt) for t, shape, dt in native.out_specs}
        for n in names:
            buf = bound[n]
            if n not in specs or (buf is not None and (type(buf) is not np.ndarray or not buf.flags.c_contiguous
                                                       or not buf.flags.writeable
                                                       or (buf.shape, buf.dtype) != specs[n]
                                                       or any(np.may_share_memory(buf, v) for v in feed.values()))):
                return None  # the general path copies: a bound output over an input would be read after writes
        return native.run(feed, names, bound)

    # ---- profiling ----
    def plan(self, feed: dict[str, np.ndarray], trial: bool = False, extra: tuple[str, ...] = ()):
        """As vkinfer.session.InferenceSession.plan; a profiling session also instruments the plan's
        segments (their runs are timed) the first time it sees the plan."""
        plan = super().plan(feed, trial, extra)
        if getattr(self, "_profiling", False) and plan not in self._prof_plans:
            self._prof_plans.add(plan)
            _instrument(self, plan)
        return plan

    def _profiled_run(self, output_names: list[str] | None, input_feed: dict[str, np.ndarray],
                      run_options: RunOptions | None = None) -> list[np.ndarray]:
        prof = self._profiler
        if prof is None:
            return _Session.run(self, output_names, input_feed, run_options)
        with prof.lock:
            prof.current = []
            state = dict(self._state)  # the feed a Vulkan segment is timed on (a streaming model: its state too)
            t0 = time.perf_counter_ns()
            try:
                out = _Session.run(self, output_names, input_feed, run_options)
            finally:
                events, prof.current = prof.current, None
            t1 = time.perf_counter_ns()
            prof.run_done(self, events, t0, t1, run_options, {**state, **input_feed})
        return out
