"""Execution plans: a graph compiled once per input signature into segments, each on one device.

    file -> importer -> passes -> trace -> placement (node -> device) -> segments -> memory plan -> runners

- **Trace**: one run of the interpreter (on the CPU) on zeros of the declared shapes (or, when zeros are not
  valid input, on the first run's inputs) gives every tensor's shape and dtype, so every op's own shape rules
  apply and nothing is guessed.
- **Placement**: each node goes to a device: "cpu" (the native C graph), "vulkan:<index>" or "host" (numpy,
  the interpreter's kernels, for what no device runs). By default everything the session's device can run
  goes there, the rest to the native CPU graph where it can run it, and only what neither runs to the host;
  `placement={node name: device}` overrides it node by node (the dispatcher will fill it from a cost model).
  A device "can run" a node when a lowering registered for the op takes it (vkinfer/model/lowering.py; each
  op's lowering lives in the op's file).
- **Segments**: maximal runs of consecutive nodes on one device. Tensors cross between segments as host
  arrays in ONNX layout: each segment reads its inputs from the run's values and writes the outputs others
  need (`Transfer`s, with their byte counts, are listed for `vkinfer info` and the dispatcher's costs).
- **Runners**: one per device kind. CPU: the segment compiled into one native graph over one arena, one C
  call per run (vkinfer/cpu/segment.py). Vulkan: one recorded command sequence, one submit per run
  (vkinfer/vulkan/segment.py). Host: the interpreter, node by node. Both device runners take their storage
  from the one memory planner (vkinfer/model/memory.py).
Any placement gives the reference's bits: every lowering is bit-exact with the interpreter's kernel for the
same node (tests/compiler/test_plan.py, tests/compiler/test_placement.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections import ChainMap
from collections.abc import Callable

import numpy as np

from ..errors import PlacementError
from ..model.graph import Graph, Node, gc_paused
from ..model.interpreter import Memo, interpret, trace  # noqa: F401 (also vkinfer.compiler.plan API)
from ..model.lowering import EIGHT_BIT, Ctx, Layer, lower_node, lowerings
from ..model.op_table import OPS  # noqa: F401 (vkinfer.compiler.plan API)
from ..model.sizes import Limits

HOST = "host"




class CpuBackend:
    """The native CPU graph, with an ISA variant (None: the best available)."""

    kind = "cpu"

    def __init__(self, variant: str | None):
        self.variant = variant
        self.name = "cpu" if variant is None else f"cpu:{variant}"


class VulkanBackend:
    """A Vulkan device (vkinfer._vk.Device), or one opened on first use of `dev` (`name` "vulkan:<index>" and
    `opener`): asking whether a device runs a node never opens it (0.3 s for lavapipe), so an auto session that
    keeps everything on the CPU never pays for Vulkan."""

    kind = "vulkan"

    def __init__(self, dev=None, *, name: str | None = None, opener: Callable[[], object] | None = None):
        if dev is None and (name is None or opener is None):
            raise ValueError("VulkanBackend needs a device, or a name and an opener")
        self._dev, self._opener = dev, opener
        self.name = name or f"vulkan:{dev.info.index}"

    @property
    def dev(self):
        if self._dev is None:
            self._dev = self._opener()
        return self._dev


@dataclasses.dataclass
class Transfer:
    """Tensor `tensor` (`nbytes` bytes) crossing from device `src` to `dst` through a host array."""

    tensor: str
    src: str
    dst: str
    nbytes: int


class HostSegment:
    """Nodes run by the interpreter on host arrays (numpy)."""

    kind = HOST

    def __init__(self, g: Graph, nodes: list[Node]):
        self.g, self.nodes, self.memo = g, nodes, Memo()
        self.fast = [_fast_host(g, n) for n in nodes]

    def run(self, values, threads: int = 0, timings: list | None = None) -> None:
        """Run the nodes in order; with a `timings` list, append (node, start ns, duration ns) per node (the
        profilers: vkinfer.ort's enable_profiling, `vkinfer bench --per-layer`)."""
        for node, fast in zip(self.nodes, self.fast, strict=True):
            t0 = time.perf_counter_ns() if timings is not None else 0
            if fast is not None:
                fast(values)
            else:
                interpret(self.g, values, [node], self.memo)
            if timings is not None:
                timings.append((node, t0, time.perf_counter_ns() - t0))


@dataclasses.dataclass
class Segment:
    """Consecutive nodes on one device, their input and output tensors, and the runner."""

    device: str
    nodes: list[Node]
    inputs: list[str]
    outputs: list[str]
    runner: object = None


def _fast_host(g: Graph, node: Node) -> Callable | None:
    """The model's edges, QuantizeLinear / DequantizeLinear with constant parameters, with the parameter
    checks done once (the interpreter's kernels check them on every call; that dominated small models)."""
    from ..reference.quantize_linear import _params, quantize_values

    if node.op not in ("QuantizeLinear", "DequantizeLinear") or not all(
            not n or n in g.consts for n in node.inputs[1:]) or len(node.inputs) < 2:
        return None
    if any(k in node.attrs for k in ("output_dtype", "block_size")):
        return None  # opset 21's output type or blocked parameters: the interpreter's kernel
    scale = g.consts[node.inputs[1]]
    zp = g.consts[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    axis = int(node.attrs.get("axis", 1))
    x_name, y_name = node.inputs[0], node.outputs[0]
    dtype = np.dtype(zp.dtype) if zp is not None else np.dtype(np.uint8)
    if scale.size != 1 or dtype not in EIGHT_BIT:
        return None  # per-axis parameters: the interpreter's kernel
    try:
        s, z = _params(np.zeros(1, np.float32), scale, zp, axis, dtype)
    except (ValueError, TypeError):
        return None  # the interpreter's kernel reports it

    def quantize(values):
        x = values[x_name]
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or np.isnan(x).any():
            return interpret(g, values, [node])  # the kernel's own error
        values[y_name] = quantize_values(x, s, z, dtype)

    def dequantize(values):
        x = values[x_name]
        if x.dtype not in EIGHT_BIT or (zp is not None and x.dtype != dtype):
            return interpret(g, values, [node])
        values[y_name] = (x.astype(np.int32) - z).astype(np.float32) * s
    return quantize if node.op == "QuantizeLinear" else dequantize


class Plan:
    """A graph compiled for one input signature (module docstring).

    `backend`: the default device's backend (CpuBackend or VulkanBackend), or None for everything on the host
    (the "reference" device: its plan is one host segment, the numpy interpreter); `placement`: node name ->
    device name ("cpu", "cpu:<variant>", "vulkan", "vulkan:<index>", "host"), overriding the default for those
    nodes; `resolve(name)` gives the backend of a device name; `auto_place`: the dispatcher's `place`
    (device="auto").
    """

    def __init__(self, g: Graph, feed: dict[str, np.ndarray], backend, placement: dict[str, str] | None = None,
                 resolve: Callable[[str], object] | None = None, auto_place: Callable | None = None,
                 state: list[tuple[str, str]] | None = None, limits: Limits | None = None):
        """`state`: a streaming model's (state input, output carrying its next value) pairs: where one CPU segment
        reads the input and makes the output (and no other segment touches them), the graph keeps that state in
        its own form (`state_forms`; `run` converts host arrays at its edges, the stateful runner never does).
        `limits`: the session's size limits (vkinfer/model/sizes.py; default sizes.DEFAULT), checked by the trace
        before any tensor is allocated: past them, SizeLimitError names the node, its output shape and the limit."""
        with gc_paused():
            self._build(g, feed, backend, placement, resolve, auto_place, state, limits)

    def _build(self, g, feed, backend, placement, resolve, auto_place, state, limits) -> None:
        """__init__'s work (see there)."""
        self.g, self.backend = g, backend
        self._state_pairs = list(state or [])
        self.info = trace(g, feed, limits)
        ctx = Ctx(g, self.info)
        backends = {} if backend is None else {backend.name: backend}
        self.placement: dict[str, str] = {}
        self.why_host: dict[str, str] = {}
        self.given = dict(placement or {})
        layers: dict[str, Layer] = {}
        lowered: dict[tuple[str, str], tuple[Layer | None, str]] = {}

        # Memoised for the dispatcher, which asks each device about a node before the loop below; without it
        # the loop lowers each (node, device) once and calls _lower directly (the memo's key and lookups were
        # ~1 us a node of a 100k-node chain).
        def lower_on(node: Node, be) -> tuple[Layer | None, str]:
            key = (node.name, be.name)
            if key not in lowered:
                lowered[key] = self._lower(ctx, node, be)
            return lowered[key]

        # The dispatcher (device="auto") chooses every node's device from predicted costs; it asks each candidate
        # device whether it runs a node (lowering is cheap: Vulkan layers are built only when used).
        self.auto = None  # device="auto": the dispatcher's AutoPlacement (its decisions and predictions)
        chosen: dict[str, str] = {}
        if auto_place is not None:
            by_name = {n.name: n for n in g.nodes}

            def can(name: str, dev: str) -> Layer | None:
                return lower_on(by_name[name], resolve(dev))[0]
            self.auto = auto_place(g, self.info, can, self.given)
            chosen = self.auto.placement
        # What the session's device does not run goes to the native CPU graph when that can run it (a Vulkan
        # session's float edges: QuantizeLinear of a 224x224 image is 0.04 ms there, 0.4 ms in numpy), and to
        # the host only when nothing else can.
        fallback = resolve("cpu") if backend is not None and backend.kind != "cpu" and resolve is not None else None
        for node in g.nodes:
            want = self.given.get(node.name) or chosen.get(node.name)
            if want is None:
                be = backend
            elif want == HOST:
                be = None
            else:
                be = resolve(want) if resolve is not None else None
                if be is None:
                    raise PlacementError(f"placement of node {node.name!r}: no device {want!r}")
                backends.setdefault(be.name, be)
            layer = None
            if be is not None:
                layer, why = lower_on(node, be) if auto_place is not None else self._lower(ctx, node, be)
                if layer is None and want is not None:
                    raise PlacementError(f"placement of node {node.name!r} ({node.op}) on {want!r}: {why}")
                if layer is None and fallback is not None:
                    layer, why_cpu = lower_on(node, fallback) if auto_place is not None else \
                        self._lower(ctx, node, fallback)
                    if layer is not None:
                        be = fallback
                        backends.setdefault(be.name, be)
                    else:
                        why = f"{why}; {why_cpu}"
                if layer is None:
                    self.why_host[node.name] = why
            elif self.auto is not None and node.name not in self.given:
                self.why_host[node.name] = "; ".join(w for d in self.auto.devices
                                                     if (w := lower_on(node, resolve(d))[1]))
            if layer is not None:
                layers[node.name] = layer
                self.placement[node.name] = be.name
            else:
                self.placement[node.name] = HOST
        self.backends = backends
        self.segments = self._segments(layers)
        form_io = self._form_handoffs()
        packed_io = self._packed_handoffs(layers, form_io)
        self.state_forms: dict[str, object] = {}  # graph tensor -> vkinfer.cpu.segment.StateForm
        for seg in self.segments:
            seg.runner = self._runner(seg, layers, form_io, packed_io)
            self.state_forms.update(getattr(seg.runner, "state_forms", {}))
        self._host = any(seg.device == HOST for seg in self.segments)
        self._natives: dict[int, object] = {}  # threads -> its NativePlan or None
        # False: every run goes segment by segment through the runners' `run` (a profiler wraps them).
        self.one_call = True

    @staticmethod
    def _lower(ctx: Ctx, node: Node, be) -> tuple[Layer | None, str]:
        """(the node's layer on backend `be`, or None and why not)."""
        try:
            layer = lower_node(be.kind, ctx, node, be)
        except ValueError as e:  # e.g. a device limit
            return None, f"{be.name}: {e}"
        if layer is not None:
            return layer, ""
        # The activations only: a quantized op's float32 scales are constants, not what it computes on.
        acts = [t for t in node.inputs + node.outputs if t and t in ctx.info and t not in ctx.g.consts]
        floats = sorted({str(ctx.info[t][1]) for t in acts if ctx.info[t][1].kind == "f"})
        if floats and node.op not in ("QuantizeLinear", "DequantizeLinear"):  # a float op: host_float.py
            return None, (f"{node.op} on {'/'.join(floats)} tensors: {be.kind} has no kernel for float ops (numpy "
                          f"on the host, ONNX Runtime's float32 numerics where reproducible: model/host_float.py)")
        if lowerings(be.kind, node.op):
            shapes = ", ".join(f"{list(ctx.info[t][0])} {ctx.info[t][1]}" for t in acts)
            return None, (f"{be.kind}'s {node.op} lowering does not take this node ({shapes}; a broadcast, layout or "
                          f"non-constant parameter it has no form for)")
        return None, f"{be.kind} has no lowering for {node.op}"

    def _segments(self, layers: dict[str, Layer]) -> list[Segment]:
        g = self.g
        # (device, nodes, their layers or None on the host): each node's placement and layer looked up once (the
        # lookups in dicts of 100k names were most of a 100k-node chain's 0.4 s here)
        runs: list[tuple[str, list[Node], list[Layer] | None]] = []
        placement, get_layer = self.placement, layers.__getitem__
        dev, nodes, lays = None, None, None
        one = set(placement.values())
        if len(one) == 1 and HOST not in one and len(layers) == len(g.nodes):
            # every node on one device (the usual plan): one run, its layers already in node order (built in
            # the order of g.nodes), without a lookup per node (0.03 s of a 100k-node chain)
            runs.append((next(iter(one)), list(g.nodes), list(layers.values())))
        for node in (g.nodes if not runs else ()):
            d = placement[node.name]
            if d != dev:
                dev, nodes = d, []
                lays = None if d == HOST else []
                runs.append((dev, nodes, lays))
            nodes.append(node)
            if lays is not None:
                lays.append(get_layer(node.name))
        # Who reads each tensor (segment index), so a segment outputs only what a later one or the caller needs.
        graph_outs = {t.name for t in g.outputs}
        last_reader: dict[str, int] = {}  # the last segment reading each tensor (runs in order: the last seen)
        for i, (_, nodes, lays) in enumerate(runs if len(runs) > 1 else ()):  # (one: no later reader; 0.05 s/100k)
            for acts in ((n.inputs for n in nodes) if lays is None else (lay.acts for lay in lays)):
                for t in acts:
                    if t:
                        last_reader[t] = i
        segs = []
        for i, (dev, nodes, lays) in enumerate(runs):
            made: dict[str, None] = {}  # ordered sets: a segment of 20k nodes was quadratic in lists
            ins: dict[str, None] = {}
            if lays is None:
                for n in nodes:
                    for t in n.inputs:
                        if t and t not in made:
                            ins.setdefault(t)
                    for o in n.outputs:
                        if o:
                            made[o] = None
            else:
                for lay in lays:
                    for t in lay.acts:
                        if t not in made:
                            ins.setdefault(t)
                    if lay.out:
                        made[lay.out] = None
            outs = [t for t in made if t in graph_outs or last_reader.get(t, -1) > i]
            segs.append(Segment(dev, nodes, list(ins), outs))
        return segs

    def _form_handoffs(self) -> frozenset[str]:
        """8-bit tensors that pass only between device segments (made by one, read by others, neither the host's
        nor a model output): they cross in the CPU graph's form, which is the Vulkan layout without its padding,
        rather than in the model's NCHW, which costs a transpose on each side."""
        graph_outs = {t.name for t in self.g.outputs}
        made: dict[str, str] = {}
        read: dict[str, list[str]] = {}
        for seg in self.segments:
            for t in seg.inputs:
                read.setdefault(t, []).append(seg.device)
            for t in seg.outputs:
                made[t] = seg.device
        return frozenset(t for t, dev in made.items()
                         if dev != HOST and t not in graph_outs and t in read and HOST not in read[t]
                         and self.info[t][1].itemsize == 1)

    def _packed_handoffs(self, layers: dict[str, Layer], form_io: frozenset[str]) -> frozenset[str]:
        """Handoffs a CPU layer with a `packed` emitter makes for Vulkan segments only (no reader in its own
        segment): written in the device's layout, so the Vulkan side copies nothing (the model's quantized
        input above all)."""
        if not any(self.backends[s.device].kind == "vulkan" for s in self.segments if s.device != HOST):
            return frozenset()  # no Vulkan segment reads anything
        out = set()
        read_by: dict[str, list[str]] = {}
        for s in self.segments:
            for t in s.inputs:
                read_by.setdefault(t, []).append(s.device)
        for seg in self.segments:
            if seg.device == HOST or self.backends[seg.device].kind != "cpu":
                continue
            inner = {a for n in seg.nodes for a in layers[n.name].acts}
            for n in seg.nodes:
                lay = layers[n.name]
                t = lay.out
                if t not in form_io or lay.packed is None or lay.alias or t in inner or t not in seg.outputs:
                    continue
                readers = read_by.get(t, [])
                if readers and all(d != HOST and self.backends[d].kind == "vulkan" for d in readers):
                    out.add(t)
        return frozenset(out)

    def _runner(self, seg: Segment, layers: dict[str, Layer], form_io: frozenset[str] = frozenset(),
                packed_io: frozenset[str] = frozenset()):
        if seg.device == HOST:
            return HostSegment(self.g, seg.nodes)
        lays = [layers[n.name] for n in seg.nodes]
        be = self.backends[seg.device]
        if be.kind == "cpu":
            from ..cpu.segment import CpuSegment

            state_io = {}
            if self._state_pairs:
                touched = {t for s in self.segments if s is not seg for t in (*s.inputs, *s.outputs)}
                state_io = {i: o for i, o in self._state_pairs
                            if i in seg.inputs and o in seg.outputs and i not in touched and o not in touched}
            return CpuSegment(lays, seg.inputs, seg.outputs, self.info, self.g.consts, form_io, packed_io, state_io)
        from ..vulkan.segment import VulkanSegment

        return VulkanSegment(be.dev, lays, seg.inputs, seg.outputs, self.info, self.g.consts, form_io, packed_io)

    @property
    def transfers(self) -> list[Transfer]:
        """Tensors that cross between devices per run (the model's own inputs and outputs included)."""
        where: dict[str, str] = {t.name: HOST for t in self.g.inputs}
        out = []
        for seg in self.segments:
            for t in seg.inputs:
                if t in self.g.consts:
                    continue
                src = where.get(t, HOST)
                if src != seg.device:
                    shape, dt = self.info[t]
                    out.append(Transfer(t, src, seg.device, int(np.prod(shape, dtype=np.int64)) * dt.itemsize))
            for t in seg.outputs:
                where[t] = seg.device
        for t in self.g.outputs:
            if where.get(t.name, HOST) != HOST:
                shape, dt = self.info[t.name]
                out.append(Transfer(t.name, where[t.name], HOST, int(np.prod(shape, dtype=np.int64)) * dt.itemsize))
        return out

    @property
    def submits(self) -> int:
        """Vulkan submissions per run: one per Vulkan segment."""
        return sum(1 for s in self.segments if s.device.startswith("vulkan"))

    @property
    def native_calls(self) -> int:
        """C graph runs per inference: one per CPU segment."""
        return sum(1 for s in self.segments if s.device.startswith("cpu"))

    def native(self, threads: int = 0):
        """The whole plan in one native call (compiler.native.NativePlan, vkinfer._planrun) on `threads` CPU
        threads, where no segment is the host's; None otherwise."""
        if not self.one_call:
            return None
        if threads not in self._natives:
            self._natives[threads] = None
            if not self._host and self.segments:
                from .native import NativePlan

                self._natives[threads] = NativePlan.build(self, threads)
        return self._natives[threads]

    def feed_runner(self, threads: int = 0) -> tuple[Callable, Callable] | None:
        """(run_feed, failed) for the session's common call, or None: `run_feed(feed dict)` runs the whole plan
        in one native call and returns the list of outputs, None for a feed the checked path must take, or a
        CPU graph's nonzero status, which `failed(status, feed)` turns into its error."""
        nplan = self.native(threads)
        return None if nplan is None else (nplan.raw.run_feed, nplan._failed)

    def run(self, feed: dict[str, np.ndarray], names: list[str], threads: int = 0) -> list[np.ndarray]:
        """The graph outputs `names` for `feed` (every graph input, checked by the caller): in one native call
        where the plan has one, else segment by segment."""
        sf = self.state_forms
        if sf:  # state kept in the CPU graph's form: host arrays converted at the edges
            feed = {(sf[k].key if k in sf else k): (sf[k].to_form(v) if k in sf else v) for k, v in feed.items()}
            outs = self._run(feed, [sf[n].key if n in sf else n for n in names], threads)
            return [sf[n].to_host(o) if n in sf else o for n, o in zip(names, outs, strict=True)]
        return self._run(feed, names, threads)

    def _run(self, feed: dict[str, np.ndarray], names: list[str], threads: int) -> list[np.ndarray]:
        native = self.native(threads)
        if native is not None:
            return native.run(feed, names)
        # Outputs go to the first map; the constants (which host nodes read) are not copied.
        values = ChainMap(dict(feed), self.g.consts) if self._host else dict(feed)
        for seg in self.segments:
            seg.runner.run(values, threads)
        return [values[n] for n in names]


__all__ = ["Plan", "CpuBackend", "VulkanBackend", "HostSegment", "Segment", "Transfer", "interpret",
           "trace", "HOST", "EIGHT_BIT", "OPS"]
