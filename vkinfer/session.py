"""InferenceSession: ONNX Runtime's API over vkinfer's backends.

    sess = vkinfer.InferenceSession("model.onnx", device="cpu")
    [y] = sess.run(None, {"input": x})

Creating a session imports and checks the whole model once and, on "vulkan" and "cpu", compiles it
(vkinfer/compiler/plan.py): one trace gives every tensor's shape, each node is placed on the device or the
host, weights are packed, pipelines built, device buffers planned by lifetime and, on Vulkan, every run of
device nodes recorded into one command sequence. A model whose nodes all run on the device (every zoo
model, MobileNetV2 in ONNX or TFLite form) is then one upload, one submit and one download per `run`;
only its float edges (QuantizeLinear, DequantizeLinear, Softmax) run on the host. Models with symbolic
input dimensions are compiled on the first run of each input shape.
`device="auto"` lets the dispatcher (vkinfer/dispatch) put each node on the device where it is predicted to
finish first: the CPU or a Vulkan device, from a cost model calibrated on this machine (the first auto session
on a new machine runs a quick calibration and says so on stderr; later ones read it from the cache).
`sess.placement` is where each node runs, `sess.explain()` why. "reference" interprets every node in numpy
(its plan is one host segment). Every run takes one path: the plan's, in one native call where it has one
(compiler/plan.py `Plan.run`, `Plan.feed_runner`), else segment by segment.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from . import _cache, ops
from .compiler.native import NativePlan
from .compiler.plan import HOST, CpuBackend, Plan, VulkanBackend
from .cpu import threads_for_run
from .dispatch.placement import OBJECTIVES
from .errors import HostNodeWarning, PlacementError, VulkanDeviceError, VulkanUnavailableError
from .model.graph import Graph, TensorInfo, gc_paused
from .model.onnx_import import MAX_MODEL_BYTES, import_onnx, read_model_file
from .model.op_table import OPS
from .model.sizes import Limits, SizeLimitError, check_inputs
from .model.tflite_import import import_tflite, is_tflite
from .model.value_shapes import value_inputs

if TYPE_CHECKING:
    from .dispatch.profile import Profile


MAX_PLANS = 16  # compiled plans a session keeps by default (input signatures; the least recently used goes first)




_FAULT_LOCK = threading.Lock()  # a device="auto" session's switch to the CPU after a Vulkan fault


def _positive(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def _import_model(model, max_model_bytes: int, external_data_dir: str | os.PathLike | None) -> Graph:
    """The model's graph: a path is read once, as a regular file of at most `max_model_bytes` (never a FIFO or a
    device: vkinfer.model.onnx_import.read_model_file), then imported as TFLite or ONNX."""
    supported = {name: None for name in OPS}
    if isinstance(model, str | os.PathLike):
        if external_data_dir is None:  # an ONNX model's external data lies beside it
            external_data_dir = os.path.dirname(os.path.abspath(os.fspath(model)))
        model = read_model_file(model, max_model_bytes)
    if is_tflite(model):
        return import_tflite(model, supported)
    return import_onnx(model, supported, external_data_dir, max_model_bytes)


class Compiled(NamedTuple):
    """A session's plan for its static input shapes, compiled at creation, and what the common call checks."""

    plan: Plan
    inputs: list[tuple[str, np.dtype, tuple[int, ...]]]  # (name, dtype, shape) of each graph input
    outputs: list[str]


class NodeArg:
    """ONNX Runtime's NodeArg: name, shape and type of a model input or output; vkinfer adds `quantization`, an
    8-bit tensor's (scale, zero point) where the model defines them (QDQ: its QuantizeLinear / DequantizeLinear;
    QOperator: the QLinear op writing or reading it; TFLite: the tensor's parameters), else None."""

    def __init__(self, info: TensorInfo, quantization: tuple[float, int] | None = None):
        self.name, self.shape, self.type = info.name, list(info.shape) if info.shape else None, info.type
        self.quantization = quantization

    def __repr__(self) -> str:
        q = f", quantization={self.quantization}" if self.quantization is not None else ""
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape}{q})"


def _auto_devices() -> list[str]:
    """The devices `device="auto"` weighs: the CPU, then each GPU (or, with none, the default Vulkan device, a
    CPU implementation such as lavapipe: the calibrated costs, not an assumption, then keep work on the CPU).
    No usable Vulkan at all leaves the CPU alone, with a warning saying why; any other error propagates."""
    from .dispatch.machine import auto_candidates, vulkan_devices

    try:
        found = vulkan_devices()
    except VulkanUnavailableError as e:
        found = []
        warnings.warn(f'device="auto": Vulkan is unavailable ({e}); falling back to the CPU', RuntimeWarning,
                      stacklevel=3)
    return ["cpu", *(d["device"] for d in auto_candidates(found))]


CALIBRATING = ('vkinfer: device="auto" on a machine not calibrated yet: measuring {devices} (quick calibration, '
               'once; cached, `vkinfer calibrate --full` refines it)')


def _check_output_types(g: Graph, info: dict) -> None:
    """A graph output whose declared type differs from what its node makes (`info`: the plan's trace):
    ValueError naming the node (ONNX Runtime refuses such a model; tests/ops found one running)."""
    makers = {o: n for n in g.nodes for o in n.outputs if o}
    for t in g.outputs:
        got = info[t.name][1] if t.name in info else None
        if t.dtype is not None and got is not None and got != t.dtype:
            by = f"node {makers[t.name].name} ({makers[t.name].op})" if t.name in makers else "its producer"
            raise ValueError(f"graph output {t.name!r} is declared {np.dtype(t.dtype)}, but {by} makes {got}")


class InferenceSession:
    """Run a quantized model like onnxruntime.InferenceSession.

    model: a path or the bytes of an .onnx file (or an onnx.ModelProto), or of an int8/uint8 .tflite file
    (recognised by its "TFL3" file identifier; see vkinfer.model.tflite_import). device: "vulkan",
    "vulkan:<which>", "cpu", "cpu:<variant>", "reference" or "auto" (module docstring).
    """

    _vk_fault: str | None = None  # device="auto": why its Vulkan device was dropped (`_cpu_after_fault`)

    # The cyclic collector off for the whole construction (graph.gc_paused), not only inside import and planning:
    # between them it still ran full passes over the graph's objects (100k-node QLinearAdd chain 9.93 -> 9.19 s).
    @gc_paused()
    def __init__(self, model: str | os.PathLike | bytes, device: str = "auto",
                 placement: dict[str, str] | None = None, threads: int | None = None, objective: str = "median",
                 profile: str | os.PathLike | Profile | None = None, max_plans: int = MAX_PLANS,
                 max_model_bytes: int = MAX_MODEL_BYTES, external_data_dir: str | os.PathLike | None = None,
                 max_tensor_bytes: int | None = None, max_session_bytes: int | None = None):
        """`placement`: node name -> "cpu", "cpu:<variant>", "vulkan", "vulkan:<which>" or "host", overriding
        where those nodes run (the rest follow `device`); a name or device that does not exist, or a node the
        device cannot run, raises ValueError naming the node and the reason. `threads`: CPU threads per run
        (None: $VKINFER_CPU_THREADS as set when the session is created, else vkinfer.cpu.default_threads(); fixed
        for the session's life, as ONNX Runtime's intra_op_num_threads is).

        Thread safety: `run` may be called from several threads at once. Each CPU segment's native graph and
        each Vulkan segment's buffers serve one run at a time (a lock each), so concurrent runs on one
        session are correct and take turns segment by segment; use one session per thread for parallel
        throughput.

        `max_tensor_bytes` (default 2 GiB) and `max_session_bytes` (default 8 GiB, the live activations of a run):
        every tensor's size is checked against them before it is allocated, when the session is made and for
        each new input shape fed (vkinfer/model/sizes.py); past them, `vkinfer.model.sizes.SizeLimitError` (a
        ValueError) names the node, its output shape and the limit.

        `device="auto"`: `objective` is what the dispatcher minimises, "median" latency or "p90" (tail);
        `profile`: a calibration profile (a path or vkinfer.dispatch.Profile) to plan from instead of this
        machine's cached calibration; its entries must have been measured on this machine's devices.

        `max_plans`: compiled plans kept for input signatures (symbolic shapes: one per shape fed), the least
        recently used evicted first. `max_model_bytes`: a model path must be a regular file of at most this many
        bytes (a FIFO or a device is refused; its external data counts too). `external_data_dir`: the folder an
        ONNX model's external-data tensors are read from (default: the model file's folder; a model given as
        bytes or a ModelProto has none, and such tensors are refused: stricter than ONNX Runtime)."""
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(map(repr, OBJECTIVES))}, got {objective!r}")
        self.device = device
        if device != "auto":
            ops._backend(self.device, None)  # checks the device name and that it exists
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        self.threads = threads
        # Resolved once: reading $VKINFER_CPU_THREADS took 1.3 us per run, twice a tiny model's compute.
        self._run_threads = threads if threads is not None else threads_for_run()
        self._limits = Limits.of(max_tensor_bytes, max_session_bytes)
        self.max_plans = _positive("max_plans", max_plans)
        self.graph: Graph = _import_model(model, _positive("max_model_bytes", max_model_bytes), external_data_dir)
        # Streaming TFLite models: resource variables carried between runs (vkinfer.model.tflite_import.StateVariable).
        self._variables = list(getattr(self.graph, "variables", ()))
        self._user_outputs = getattr(self.graph, "user_outputs", len(self.graph.outputs))
        self._state_names = frozenset(v.input for v in self._variables)
        self._all_outs = [t.name for t in self.graph.outputs]
        self._outs = self._all_outs[:self._user_outputs]
        self._carried = [v for v in self._variables if v.output is not None]
        self._assigned = [v for v in self._variables if v.assigned is not None]
        self._state_lock = threading.Lock()
        self._state: dict[str, np.ndarray] = {}
        self.reset_state()
        self._given = self._check_placement(placement)
        self._plans: OrderedDict[tuple, Plan] = OrderedDict()  # least recently used first
        self._plans_lock = threading.Lock()
        self._latest: Plan | None = None
        self._host_warned = False  # HostNodeWarning: once per session
        # For static shapes: the plan compiled at creation and what the common call checks against it.
        self._fast: Compiled | None = None
        # The common call in one native call (Plan.feed_runner): returns the outputs, None for a feed the checked
        # path must take, or a CPU graph's status (`_native_failed` raises its error); None where the plan has none.
        self._native = None
        self._native_failed = None
        # A streaming model's common call in one native call, its state kept in the runner's memory between runs
        # (compiler.native.NativePlan with `state`); None where the plan has no native form.
        self._stateful = None
        self._backends: dict[str, object] = {}
        kind, _, which = self.device.partition(":")
        self._dispatcher = None
        self.auto_devices: list[str] = []
        if kind == "auto":
            self.auto_devices = _auto_devices()
            if len(self.auto_devices) > 1:
                try:
                    self._dispatcher = self._make_dispatcher(objective, profile)
                except RuntimeError as e:  # VkInferError included
                    if profile is not None:
                        raise
                    # A device that cannot be measured (a driver failing mid-calibration) is not a reason to
                    # refuse the model: the CPU runs it, and the warning says why auto chose nothing else.
                    warnings.warn(f'device="auto": calibrating {", ".join(self.auto_devices[1:])} failed ({e}); '
                                  f"running on the CPU", RuntimeWarning, stacklevel=2)
                    self.auto_devices = ["cpu"]
        if self._given and kind == "reference":
            raise ValueError('placement needs a device: device "reference" interprets every node on the host')
        # The default device's backend; the reference device's plan is one host segment.
        self._backend = None if kind == "reference" else self._resolve("cpu" if kind == "auto" else self.device)
        # Inputs whose values decide shapes key the plans by value too (model/value_shapes.py).
        self._value_inputs = value_inputs(self.graph)
        # What `run` may name as outputs, read once: the graph's, and (a debugging aid) any tensor a node makes.
        self._out_names = frozenset(self._all_outs)
        self._made = frozenset(o for n in self.graph.nodes for o in n.outputs if o)
        shapes = [t.shape for t in self.graph.inputs]
        if not self._value_inputs and all(s is not None and all(isinstance(d, int) and d > 0 for d in s)
                                          for s in shapes):
            # Static input shapes: compile now (trace, placement, packing, buffers, recording).
            check_inputs(self.graph.inputs, self._limits)  # before zeros of them are made
            try:
                # Zeros broadcast to the inputs' shapes (read-only, no memory): np.zeros of a legal 1 GiB input held
                # 1 GiB of address space through the whole build, arena included (fuzz memory/e4986fdbbe).
                plan = self.plan({t.name: np.broadcast_to(np.zeros((), t.dtype), t.shape) for t in self.graph.inputs},
                                 trial=True)
                ins = [(t.name, np.dtype(t.dtype), tuple(t.shape)) for t in self.graph.inputs]
                self._fast = Compiled(plan, ins, [t.name for t in self.graph.outputs])
                if not self._variables:
                    feed_runner = plan.feed_runner(self._run_threads)
                    if feed_runner is not None:
                        self._native, self._native_failed = feed_runner
                elif plan.one_call and not plan._host:
                    # micro_wakeword's streaming models (pymicro-wakeword's wheel, 1 thread): 18 us per call through
                    # the state dict and the general path against 2.9 us for litert; the runner keeps the state.
                    self._stateful = NativePlan.build(plan, self._run_threads, self._variables, self._outs)
            except (PlacementError, SizeLimitError):
                raise
            except (ValueError, TypeError):
                pass  # zeros are not valid for some input (a scale, say): compile on the first run instead
            except VulkanDeviceError as e:  # device="auto": the CPU's plan from the first run (one warning)
                if not self._cpu_after_fault(e):
                    raise

    def _check_placement(self, placement: dict[str, str] | None) -> dict[str, str]:
        if placement is None:
            return {}
        if not isinstance(placement, dict):
            raise TypeError(f"placement must be a dict of node name -> device, got {type(placement).__name__}")
        names = {n.name for n in self.graph.nodes}
        out = {}
        for node, dev in placement.items():
            if node not in names:
                raise ValueError(f"placement names node {node!r}, which the model does not have (after import; "
                                 f"`vkinfer info MODEL` lists the nodes)")
            if not isinstance(dev, str):
                raise ValueError(f"placement of node {node!r}: device must be a string, got {dev!r}")
            if dev != HOST:
                try:
                    ops._backend(dev, None)
                except ValueError as e:
                    raise ValueError(f"placement of node {node!r}: {e}") from None
                if dev.partition(":")[0] == "reference":
                    raise ValueError(f'placement of node {node!r}: use "host" for the interpreter, not {dev!r}')
            out[node] = dev
        return out

    def _resolve(self, name: str):
        """The backend of a device name ("cpu", "cpu:<variant>", "vulkan", "vulkan:<which>")."""
        if name not in self._backends:
            kind, _, which = name.partition(":")
            if kind == "vulkan":
                from ._vk import get_device
                from .vulkan import selftest

                # selftest.require: a device that failed its self-test (run at its first use unless cached) or that
                # the blocklist names raises DeviceUntrustedError, a VulkanDeviceError: auto then runs on the CPU.
                if self.device == "auto" and which:  # opened only if the dispatcher puts a node there
                    be = VulkanBackend(name=name, opener=lambda: selftest.require(get_device(which)))
                else:
                    be = VulkanBackend(selftest.require(get_device(which or None)))
            elif kind == "cpu":
                be = CpuBackend(which or None)
            else:
                raise ValueError(f"no device {name!r}")
            self._backends[name] = be
        return self._backends[name]

    def plan(self, feed: dict[str, np.ndarray], trial: bool = False, extra: tuple[str, ...] = ()) -> Plan:
        """The compiled plan for the feed's input signature (made on first use); `extra`: intermediate tensors it
        also outputs, after the graph's. The trace that gives the plan its shapes runs on `feed` (`trial`: zeros
        of the declared shapes at creation)."""
        sig = (tuple((k, v.shape, v.dtype.str, v.tobytes() if k in self._value_inputs else b"")
                     for k, v in sorted(feed.items())), extra)
        with self._plans_lock:
            plan = self._plans.get(sig)
            if plan is not None:
                self._plans.move_to_end(sig)
        if plan is None:
            g = self.graph
            if extra:
                g = dataclasses.replace(g, outputs=[*g.outputs, *(TensorInfo(n, None, None) for n in extra)])
            # Vulkan pipelines keep compiling on worker threads (through the on-disk pipeline cache, saved at
            # exit); the first run waits for the ones it needs.
            # A streaming model's carried state stays in the CPU graph's own form (Plan.state_forms).
            plan = Plan(g, feed, self._backend, self._given, self._resolve,
                        self._dispatcher.place if self._dispatcher else None,
                        [(v.input, v.output) for v in self._carried if v.assigned is None], limits=self._limits)
            _check_output_types(g, plan.info)
            evicted = 0
            with self._plans_lock:  # a shape fed at run time may take new values every run: bounded, LRU
                self._plans[sig] = plan
                while len(self._plans) > self.max_plans:
                    self._plans.popitem(last=False)  # its native memory goes with its last reference
                    evicted += 1
            if evicted:  # and the C heaps' freed pages go back to the system (RSS climbed with each new shape)
                _cache.release_freed_memory()
            self._warn_host(plan)
        self._latest = plan
        return plan

    def _warn_host(self, plan: Plan) -> None:
        """HostNodeWarning, once per session, when `plan` runs nodes on the host that nobody placed there by hand
        (the "reference" device runs everything on the host by definition: no warning)."""
        if self._host_warned or self._backend is None:
            return
        ops_on_host: dict[str, int] = {}
        for n in plan.g.nodes:
            if plan.placement.get(n.name) == HOST and self._given.get(n.name) != HOST:
                ops_on_host[n.op] = ops_on_host.get(n.op, 0) + 1
        if not ops_on_host:
            return
        self._host_warned = True
        # Point the warning at the caller's line: the first frame outside the vkinfer package.
        pkg, frame, level = os.path.dirname(os.path.abspath(__file__)) + os.sep, sys._getframe(), 1
        while frame is not None and frame.f_code.co_filename.startswith(pkg):
            frame, level = frame.f_back, level + 1
        count = sum(ops_on_host.values())
        listed = ", ".join(f"{op} x{k}" for op, k in sorted(ops_on_host.items(), key=lambda kv: (-kv[1], kv[0])))
        warnings.warn(f"{count} node(s) of this model run on the host (numpy, not native code; each run returns to "
                      f"Python for them) on device={self.device!r}: {listed}. `vkinfer info MODEL` lists each node "
                      f"with the reason", HostNodeWarning, stacklevel=level)

    def _make_dispatcher(self, objective: str, profile):
        from .dispatch import Dispatcher, load_profile
        from .dispatch.calibrate import ensure_profile
        from .dispatch.machine import vulkan_devices
        from .dispatch.profile import Profile, check_identity, cpu_identity

        threads = self._threads()
        if profile is None:
            prof = ensure_profile(self.auto_devices, [threads], "quick", announce=CALIBRATING)
            return Dispatcher(self.auto_devices, prof, threads, objective)
        prof = profile if isinstance(profile, Profile) else load_profile(profile)
        idents = {d["device"]: d["identity"] for d in vulkan_devices()}
        idents["cpu"] = cpu_identity()
        devices = [d for d in self.auto_devices if prof.entry(d, threads) is not None]
        if "cpu" not in devices:
            raise ValueError("profile: no entry for device 'cpu' (run `vkinfer calibrate` on this machine)")
        for d in devices:
            check_identity(prof.entry(d, threads), idents[d])
        return Dispatcher(devices, prof, threads, objective)

    @property
    def placement(self) -> dict[str, str]:
        """Where each node runs (node name -> "cpu", "vulkan:<n>" or "host") in the compiled plan (the one made at
        creation for static input shapes, else the latest run's); before any plan, the nodes placed by hand."""
        plan = self._fast.plan if self._fast is not None else self._latest
        return dict(plan.placement) if plan is not None else dict(self._given)

    def explain(self) -> str:
        """Why each node runs where it does: for device="auto", the dispatcher's table (per node: the device,
        the predicted time on each candidate, the reason; then the predicted total against each single
        device); otherwise the placement the device rule gave."""
        plan = self._fast.plan if self._fast is not None else self._latest
        if plan is None:
            return "no plan compiled yet (the model's input shapes are symbolic: run it once)"
        if plan.auto is not None:
            return plan.auto.table()
        if self.device == "auto":
            head = f"device=\"auto\" with only {', '.join(self.auto_devices)} available: every node the CPU runs"
        else:
            head = f"device={self.device!r}: every node the device runs"
        lines = [head + " goes there (no dispatcher)"]
        lines += [f"{n.name}  {n.op}  {plan.placement[n.name]}" + (f"  ({plan.why_host[n.name]})"
                  if n.name in plan.why_host else "") for n in self.graph.nodes]
        return "\n".join(lines)

    def _threads(self) -> int:
        return self._run_threads

    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs (a streaming model's state excluded)."""
        q = self.graph.meta.get("quantization", {})
        return [NodeArg(t, q.get(t.name)) for t in self.graph.inputs if t.name not in self._state_names]

    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs."""
        q = self.graph.meta.get("quantization", {})
        return [NodeArg(t, q.get(t.name)) for t in self.graph.outputs[:self._user_outputs]]

    def reset_state(self) -> None:
        """Streaming (stateful) models: restore every resource variable to the value the model's CALL_ONCE init
        subgraph assigns, as before the first run. A no-op for stateless models."""
        with self._state_lock:
            self._state = {v.input: v.initial.copy() for v in self._variables}
            self._push_state()

    def _push_state(self) -> None:
        """Copy `_state` into the native runner's state memory (the caller holds `_state_lock`)."""
        stateful = getattr(self, "_stateful", None)
        if stateful is not None:
            for name, mem in stateful.state.items():
                form = stateful.forms.get(name)  # the CPU graph's form (Plan.state_forms), else the host's
                value = self._state[name] if form is None else form.to_form(self._state[name])
                mem[:] = np.ascontiguousarray(value).view(np.uint8).reshape(-1)

    def _pull_state(self) -> None:
        """Read the native runner's state memory into `_state` (the caller holds `_state_lock`)."""
        stateful = self._stateful
        if stateful is not None:
            for name, mem in stateful.state.items():
                old, form = self._state[name], stateful.forms.get(name)
                self._state[name] = (mem.view(old.dtype).reshape(old.shape).copy() if form is None
                                     else form.to_host(mem).reshape(old.shape))

    def run(self, output_names: list[str] | None, input_feed: dict[str, np.ndarray],
            run_options=None) -> list[np.ndarray]:
        """Outputs named by `output_names` (all when None or empty, as in ONNX Runtime) for the inputs in
        `input_feed`. `run_options`: a vkinfer.RunOptions (its `terminate` flag set refuses the run).

        A streaming TFLite model's resource variables persist from one `run` to the next of this session (state
        per session; `reset_state()` restarts them): each run reads their values and stores the ones it assigns.
        Concurrent `run` calls on one stateful session are serialised by a lock (each sees the state the previous
        one left, in the order they take the lock); stateless sessions run concurrently as described in
        `__init__`."""
        try:
            return self._run(output_names, input_feed, run_options)
        except VulkanDeviceError as e:  # device lost or out of memory: device="auto" reruns on the CPU
            if not self._cpu_after_fault(e):
                raise
        return self._run(output_names, input_feed, run_options)

    def _cpu_after_fault(self, e: VulkanDeviceError) -> bool:
        """device="auto" after a Vulkan device was lost or ran out of memory: warn (once), drop every plan and
        every Vulkan placement, and run on the CPU for the rest of the session (the failed run is rerun by the
        caller); True. Any other device: False (the caller raises `e`)."""
        if self.device != "auto":
            return False
        with _FAULT_LOCK:
            if self._vk_fault is not None:  # another thread's run switched already
                return True
            self._vk_fault = str(e)
            with self._state_lock:  # a streaming model's state: from the runner's memory (a failed run left it)
                self._pull_state()
                self._stateful = None
            self._native = self._native_failed = None
            self._fast, self._latest, self._dispatcher = None, None, None
            self._plans.clear()  # their Vulkan objects go with the last reference
            self.auto_devices = ["cpu"]
            self._given = {k: v for k, v in self._given.items() if not v.startswith("vulkan")}
            self._backends = {k: v for k, v in self._backends.items() if not k.startswith("vulkan")}
        warnings.warn(f'device="auto": {e}; this session runs on the CPU from now on', RuntimeWarning, stacklevel=3)
        return True

    def _run(self, output_names: list[str] | None, input_feed: dict[str, np.ndarray],
             run_options=None) -> list[np.ndarray]:
        """`run` on the session's plans (a Vulkan device's failure raised)."""
        native = self._native
        try:  # free when nothing is raised; names that are arrays make == ambiguous: the checks below name them
            common = run_options is None and (output_names is None or output_names == self._outs)
        except (ValueError, TypeError):
            common = False
        if native is not None and common:
            out = native(input_feed)  # None: a feed the general path must check (and name what is wrong)
            if type(out) is list:
                return out
            if out is not None:  # a CPU graph's status: raise its error
                self._native_failed(out, input_feed)
        stateful = self._stateful
        if stateful is not None and common:
            with self._state_lock:  # a failed run leaves the state as it was (the runner copies after success)
                out = stateful.raw.run_feed(input_feed)
            if type(out) is list:
                return out
            if out is not None:
                stateful._failed(out, input_feed)
        if not isinstance(input_feed, Mapping):  # ONNX Runtime takes a dict only (a list gave an ambiguous truth)
            raise TypeError(f"input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        if output_names is not None and (not isinstance(output_names, list | tuple)
                                         or not all(isinstance(n, str) for n in output_names)):
            kinds = sorted({type(n).__name__ for n in output_names}) if isinstance(output_names, list | tuple) else []
            raise TypeError(f"output_names must be None or a list of output names (str), got "
                            f"{type(output_names).__name__}" + (f" of {', '.join(kinds)}" if kinds else ""))
        if run_options is not None and getattr(run_options, "terminate", False):
            raise RuntimeError("run refused: the RunOptions' terminate flag is set")
        if not output_names:
            output_names = None
        if not self._variables:
            return self._run_graph(output_names, input_feed)
        if not isinstance(input_feed, dict):
            raise TypeError(f"input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        users = [t.name for t in self.graph.inputs if t.name not in self._state_names]
        hidden = [k for k in input_feed if k not in users]  # the state's names included
        if hidden:
            raise ValueError(f"unknown input(s) {hidden}; the model's inputs: {users}")
        names = self._outs if output_names is None else list(output_names)
        unknown = [n for n in names if n not in self._outs]
        if unknown:
            raise ValueError(f"unknown output(s) {unknown}; the model's outputs: {self._outs}")
        with self._state_lock:
            self._pull_state()
            # Every graph output (the carried state among them): the plan's fast path, compiled at creation.
            values = dict(zip(self._all_outs, self._run_graph(None, {**input_feed, **self._state}), strict=True))
            for v in self._carried:
                self._state[v.input] = np.array(values[v.output], copy=True)  # the run's buffers are reused
            for v in self._assigned:
                self._state[v.input] = v.assigned.copy()
            self._push_state()
        return [values[n] for n in names]

    def _run_graph(self, output_names: list[str] | None, input_feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """`run` on the graph itself (its state inputs and outputs included)."""
        fast = self._fast
        if (fast is not None and output_names is None and type(input_feed) is dict
                and len(input_feed) == len(fast.inputs)):
            # The common call (every input at its declared static shape): checks as below, at a fraction of the
            # cost, on the plan compiled at creation. Anything else takes the general path, which also
            # produces the errors.
            arrays = []
            for name, dt, shape in fast.inputs:
                v = input_feed.get(name)
                if type(v) is not np.ndarray or v.dtype != dt or v.shape != shape:
                    break
                arrays.append(v)
            else:
                return fast.plan.run(dict(zip((f[0] for f in fast.inputs), arrays, strict=True)), fast.outputs,
                                     self._threads())
        g = self.graph
        if not isinstance(input_feed, Mapping):
            raise TypeError(f"input_feed must be a dict of input name -> array, got {type(input_feed).__name__}")
        unknown = [k for k in input_feed if k not in {t.name for t in g.inputs}]
        if unknown:
            raise ValueError(f"unknown input(s) {unknown}; the model's inputs: {[i.name for i in g.inputs]}")
        values: dict[str, np.ndarray] = dict(g.consts)
        for t in g.inputs:
            if t.name not in input_feed:
                raise ValueError(f"missing input {t.name!r} (the model's inputs: {[i.name for i in g.inputs]})")
            v = input_feed[t.name]
            if isinstance(v, np.generic):  # a numpy scalar for a 0-d input
                v = np.asarray(v)
            if not isinstance(v, np.ndarray) or v.dtype != t.dtype:
                raise TypeError(f"input {t.name!r} must be a numpy array of {t.dtype}, got "
                                f"{getattr(v, 'dtype', type(v).__name__)}")
            if t.shape is not None and (v.ndim != len(t.shape) or any(
                    isinstance(d, int) and d > 0 and d != s for d, s in zip(t.shape, v.shape, strict=True))):
                raise ValueError(f"input {t.name!r} must have shape {list(t.shape)}, got {list(v.shape)}")
            values[t.name] = v
        names = output_names if output_names is not None else [t.name for t in g.outputs]
        outs, made = self._out_names, self._made
        missing = [n for n in names if n not in outs and n not in made and n not in values]
        if missing:
            raise ValueError(f"unknown output(s) {missing}; the model's outputs: {[t.name for t in g.outputs]}")
        feed = {t.name: values[t.name] for t in g.inputs}
        # Intermediate tensors (a debugging aid ONNX Runtime lacks): a plan with them as extra graph outputs.
        extra = tuple(dict.fromkeys(n for n in names if n not in outs and n in made))
        got = dict(zip([t.name for t in g.outputs] + list(extra),
                       self.plan(feed, extra=extra).run(feed, [t.name for t in g.outputs] + list(extra),
                                                         self._threads()), strict=True))
        return [got[n] if n in got else values[n] for n in names]
