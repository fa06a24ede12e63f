"""InferenceSession: ONNX Runtime's API over vkinfer's backends.

    sess = vkinfer.InferenceSession("model.onnx", device="cpu")
    [y] = sess.run(None, {"input": x})

Creating a session imports and checks the whole model once and, on "vulkan" and "cpu", compiles it
(vkinfer/model/plan.py): one trace gives every tensor's shape, each node is placed on the device or the
host, weights are packed, pipelines built, device buffers planned by lifetime and, on Vulkan, every run of
device nodes recorded into one command sequence. A model whose nodes all run on the device (every zoo
model, MobileNetV2 in ONNX or TFLite form) is then one upload, one submit and one download per `run`;
only its float edges (QuantizeLinear, DequantizeLinear, Softmax) run on the host. Models with symbolic
input dimensions are compiled on the first run of each input shape. $VKINFER_PLAN=0 turns compilation
off (every node through the interpreter, each convolution its own submit) for A/B comparisons.
`device="auto"` picks "vulkan" when a Vulkan device other than a CPU implementation exists, else "cpu"
(the dispatcher issue refines this). "reference" interprets every node in numpy.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from .. import ops
from ..errors import PlacementError, VulkanUnavailableError
from .graph import Graph, TensorInfo
from .kernels import OPS
from .onnx_import import import_onnx
from .plan import HOST, CpuBackend, Plan, VulkanBackend, interpret
from .tflite_import import import_tflite, is_tflite


class NodeArg:
    """ONNX Runtime's NodeArg: name, shape and type of a model input or output."""

    def __init__(self, info: TensorInfo):
        self.name, self.shape, self.type = info.name, list(info.shape) if info.shape else None, info.type

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape})"


def _pick_auto() -> str:
    """What device "auto" means: "vulkan" when a Vulkan device other than a CPU implementation exists, else "cpu".
    No usable Vulkan at all (VulkanUnavailableError) falls back to the CPU with a warning saying why; any other
    error propagates."""
    from .. import _vk

    try:
        found = _vk.devices()
    except VulkanUnavailableError as e:
        warnings.warn(f'device="auto": Vulkan is unavailable ({e}); falling back to the CPU', RuntimeWarning,
                      stacklevel=3)
        return "cpu"
    return "vulkan" if any(d.type in ("discrete", "integrated", "virtual") for d in found) else "cpu"


class InferenceSession:
    """Run a quantized model like onnxruntime.InferenceSession.

    model: a path or the bytes of an .onnx file (or an onnx.ModelProto), or of an int8/uint8 .tflite file
    (recognised by its "TFL3" file identifier; see vkinfer.model.tflite_import). device: "vulkan",
    "vulkan:<which>", "cpu", "cpu:<variant>", "reference" or "auto" (module docstring).
    """

    def __init__(self, model: str | os.PathLike | bytes, device: str = "auto",
                 placement: dict[str, str] | None = None, threads: int | None = None):
        """`placement`: node name -> "cpu", "cpu:<variant>", "vulkan", "vulkan:<which>" or "host", overriding
        where those nodes run (the rest follow `device`); a name or device that does not exist, or a node the
        device cannot run, raises ValueError naming the node and the reason. `threads`: CPU threads per run
        (None: $VKINFER_CPU_THREADS, else vkinfer.cpu.default_threads(), read on each run).

        Thread safety: `run` may be called from several threads at once. Each CPU segment's native graph and
        each Vulkan segment's buffers serve one run at a time (a lock each), so concurrent runs on one
        session are correct and take turns segment by segment; use one session per thread for parallel
        throughput."""
        self.device = _pick_auto() if device == "auto" else device
        ops._backend(self.device, None)  # checks the device name and that it exists
        if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
            raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
        self.threads = threads
        supported = {name: None for name in OPS}
        self.graph: Graph = import_tflite(model, supported) if is_tflite(model) else import_onnx(model, supported)
        for node in self.graph.nodes:
            # A layer can be prepared once only if everything but its activation is a model constant.
            node.attrs["_static"] = all(not n or n in self.graph.consts for n in node.inputs[1:])
        self.placement = self._check_placement(placement)
        self._plans: dict[tuple, Plan] = {}
        # For static shapes: (plan, [(input, dtype, shape)], output names, its CPU segment when that is all of it)
        self._fast: tuple | None = None
        self._backends: dict[str, object] = {}
        kind, _, which = self.device.partition(":")
        self._compile = kind in ("vulkan", "cpu") and os.environ.get("VKINFER_PLAN", "1") != "0"
        if self.placement and not self._compile:
            raise ValueError(f"placement needs a compiled plan: device {self.device!r} with $VKINFER_PLAN="
                             f"{os.environ.get('VKINFER_PLAN', '1')!r} interprets every node")
        if self._compile:
            self._backend = self._resolve(self.device)
            shapes = [t.shape for t in self.graph.inputs]
            if all(s is not None and all(isinstance(d, int) and d > 0 for d in s) for s in shapes):
                # Static input shapes: compile now (trace, placement, packing, buffers, recording).
                try:
                    plan = self.plan({t.name: np.zeros(t.shape, t.dtype) for t in self.graph.inputs}, trial=True)
                    ins = [(t.name, np.dtype(t.dtype), tuple(t.shape)) for t in self.graph.inputs]
                    outs = [t.name for t in self.graph.outputs]
                    [seg0, *rest] = plan.segments
                    whole = not rest and seg0.device.startswith("cpu") and seg0.runner.inputs == [
                        t[0] for t in ins] and seg0.runner.outputs == outs
                    self._fast = (plan, ins, outs, seg0.runner if whole else None)
                except PlacementError:
                    raise
                except (ValueError, TypeError):
                    pass  # zeros are not valid for some input (a scale, say): compile on the first run instead

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
                from .._vk import get_device

                be = VulkanBackend(get_device(which or None))
            elif kind == "cpu":
                be = CpuBackend(which or None)
            else:
                raise ValueError(f"no device {name!r}")
            self._backends[name] = be
        return self._backends[name]

    def plan(self, feed: dict[str, np.ndarray], trial: bool = False) -> Plan | None:
        """The compiled plan for the feed's input signature (made on first use), or None when this session
        interprets node by node (device "reference", or $VKINFER_PLAN=0). The trace that gives the plan its
        shapes runs on `feed` (`trial`: zeros of the declared shapes at creation)."""
        if not self._compile:
            return None
        sig = tuple((k, v.shape, v.dtype.str) for k, v in sorted(feed.items()))
        plan = self._plans.get(sig)
        if plan is None:
            # Vulkan pipelines keep compiling on worker threads (through the on-disk pipeline cache, saved at
            # exit); the first run waits for the ones it needs.
            plan = self._plans[sig] = Plan(self.graph, feed, self._backend, self.device, self.placement,
                                           self._resolve)
        return plan

    def _threads(self) -> int:
        if self.threads is not None:
            return self.threads
        from ..cpu import threads_for_run

        return threads_for_run()

    def get_inputs(self) -> list[NodeArg]:
        return [NodeArg(t) for t in self.graph.inputs]

    def get_outputs(self) -> list[NodeArg]:
        return [NodeArg(t) for t in self.graph.outputs]

    def run(self, output_names: list[str] | None, input_feed: dict[str, np.ndarray]) -> list[np.ndarray]:
        """Outputs named by `output_names` (all when None) for the inputs in `input_feed`."""
        fast = self._fast
        if fast is not None and output_names is None and type(input_feed) is dict and len(input_feed) == len(fast[1]):
            # The common call (every input at its declared static shape): checks as below, at a fraction of the
            # cost, on the plan compiled at creation. Anything else takes the general path, which also
            # produces the errors.
            feed = {}
            for name, dt, shape in fast[1]:
                v = input_feed.get(name)
                if type(v) is not np.ndarray or v.dtype != dt or v.shape != shape:
                    break
                feed[name] = v
            else:
                if fast[3] is not None:  # the whole model is one native call
                    return fast[3].run_arrays(list(feed.values()), self._threads())
                return fast[0].run(feed, fast[2], self._threads())
        g = self.graph
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
        unknown = [k for k in input_feed if k not in {t.name for t in g.inputs}]
        if unknown:
            raise ValueError(f"unknown input(s) {unknown}; the model's inputs: {[i.name for i in g.inputs]}")
        names = output_names if output_names is not None else [t.name for t in g.outputs]
        plan = self.plan({t.name: values[t.name] for t in g.inputs})
        if plan is not None and set(names) <= {t.name for t in g.outputs}:
            return plan.run({t.name: values[t.name] for t in g.inputs}, names, self._threads())
        interpret(g, values, self.device)
        missing = [n for n in names if n not in values]
        if missing:
            raise ValueError(f"unknown output(s) {missing}")
        return [values[n] for n in names]
