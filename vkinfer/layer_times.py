"""`vkinfer bench --per-layer`: time per node of a vkinfer session beside the dispatcher's prediction.

CPU segments: the native executor's timers, one entry per native operator mapped back to its node; Vulkan
segments: timestamp queries per node; host nodes: wall time. Predictions: the dispatcher's costs for
``device="auto"``, else the cached calibration's cost model (nothing is calibrated here), null without one.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

PROFILE_ROUNDS = 20  # inferences whose per-node times are averaged (--per-layer)
VK_CHAIN = 3  # a Vulkan node's dispatches recorded this many times in the long sequence (as the calibration does)


class _OpCounter:
    """Wraps a CPU layer's emitter: records (node, first op index, op count) as the segment adds its operators."""

    def __init__(self, spans: list[tuple[str, int, int]], node: str, emit):
        self.spans, self.node, self.emit = spans, node, emit

    def __call__(self, g, *args, **kw):
        n0 = g._so.vki_graph_op_count(g.handle)
        self.emit(g, *args, **kw)
        self.spans.append((self.node, n0, g._so.vki_graph_op_count(g.handle) - n0))


def _cpu_op_nodes(plan, seg) -> list[str | None]:
    """The node of each native operator of CPU segment `seg` (None: an edge conversion of the segment's inputs or
    outputs), found by building the segment again from freshly lowered layers whose emitters are watched: the
    same construction gives the same operators (checked; all None when not)."""
    import dataclasses

    from .cpu.segment import CpuSegment
    from .model.lowering import Ctx

    be = plan.backends[seg.device]
    ctx = Ctx(plan.g, plan.info)
    spans: list[tuple[str, int, int]] = []
    lays = []
    for n in seg.nodes:
        lay, _ = plan._lower(ctx, n, be)
        if lay is None:
            return [None] * len(seg.runner.ops())
        lay.build()
        lays.append(dataclasses.replace(
            lay, impl=_OpCounter(spans, n.name, lay.impl) if lay.impl is not None else None,
            plain=_OpCounter(spans, n.name, lay.plain) if lay.plain is not None else None,
            packed=_OpCounter(spans, n.name, lay.packed) if lay.packed is not None else None))
    twin = CpuSegment(lays, seg.inputs, seg.outputs, plan.info, plan.g.consts, *_edge_forms(seg.runner))
    ops = seg.runner.ops()
    if twin.ops() != ops:
        return [None] * len(ops)
    owner: list[str | None] = [None] * len(ops)
    for node, first, count in spans:
        for i in range(first, first + count):
            owner[i] = node
    return owner


def _edge_forms(runner) -> tuple[frozenset[str], frozenset[str]]:
    """(form_io, packed_io) a segment's runner was built with (vkinfer/compiler/plan.py Plan._runner): the tensors
    it exchanges with a neighbouring device segment in the CPU graph's form or the device's packed layout. A twin
    built without them reads and writes plain NCHW tensors under the plain names, which the plan's run never
    stores for such handoffs: every quantized model with a float input (QuantizeLinear on the CPU handing
    `input_quantized` to Vulkan, packed) failed `--per-layer` on Vulkan with KeyError: 'input_quantized'."""
    if hasattr(runner, "form_io"):  # CpuSegment keeps them
        return frozenset(runner.form_io), frozenset(runner.packed_io)
    from .cpu.segment import form_key, packed_key

    form, packed = set(), set()
    for key in [e[0] for e in (*runner.ups, *runner.downs)]:  # VulkanSegment: read back from its edges' keys
        t = key.partition("\x00")[0]
        if key == form_key(t):
            form.add(t)
        elif key == packed_key(t):
            packed.add(t)
    return frozenset(form), frozenset(packed)


class _SeqRecorder:
    """A Vulkan command sequence that forwards every call and remembers each dispatch's program."""

    def __init__(self, seq, log: list):
        self._seq, self._log = seq, log

    def dispatch(self, prog) -> None:
        self._log.append(("dispatch", prog))
        self._seq.dispatch(prog)

    def __getattr__(self, name):
        return getattr(self._seq, name)


class _DevRecorder:
    """A Vulkan device whose sequences are _SeqRecorders (everything else is the device's own)."""

    def __init__(self, dev, log: list):
        self._dev, self._log = dev, log

    def sequence(self):
        return _SeqRecorder(self._dev.sequence(), self._log)

    def __getattr__(self, name):
        return getattr(self._dev, name)


def _vulkan_node_times(plan, seg, rounds: int) -> dict[str, float]:
    """Device ms per node of Vulkan segment `seg`: the segment is built again with its dispatches recorded (the
    twin owns its own buffers, filled by one run), then each node's dispatches are timed with Vulkan timestamp
    queries as the dispatcher's calibration does: a sequence with them `VK_CHAIN` times against one with them
    once, divided by VK_CHAIN - 1 (a dispatch and the barrier before it, without the submit's own cost); the
    median over `rounds`. Wall times stand in where the queue has no timestamps."""
    from .model.lowering import Ctx, Layer
    from .vulkan.segment import VulkanSegment

    be = plan.backends[seg.device]
    dev = be.dev
    ctx = Ctx(plan.g, plan.info)
    log: list = []

    class Tagged(Layer):
        def build(self):
            log.append(("node", self.node.name))
            return super().build()

    lays = []
    for n in seg.nodes:
        lay, _ = plan._lower(ctx, n, be)
        if lay is None:
            return {}
        t = Tagged.__new__(Tagged)
        t.__dict__.update(lay.__dict__)
        lays.append(t)
    twin = VulkanSegment(_DevRecorder(dev, log), lays, seg.inputs, seg.outputs,
                         plan.info, plan.g.consts, *_edge_forms(seg.runner))
    values = _segment_inputs(plan, seg)
    twin.run(values)
    progs: dict[str, list] = {}
    node = None
    for kind, v in log:
        if kind == "node":
            node = v
        elif node is not None:
            progs.setdefault(node, []).append(v)
    timed = dev.timestamps

    def sequence(ps, repeats):
        s = dev.sequence()
        s.barrier()
        for _ in range(repeats):
            for p in ps:
                s.barrier()
                s.dispatch(p)
        s.barrier()
        return s

    def once(s) -> float:
        t0 = time.perf_counter_ns()
        with dev.lock:
            ns = s.run(timed=timed)
        return float(ns) if timed and ns is not None else float(time.perf_counter_ns() - t0)

    out = {}
    for name, ps in progs.items():
        one, chain = sequence(ps, 1), sequence(ps, VK_CHAIN)
        ts = [max(once(chain) - once(one), 0.0) / (VK_CHAIN - 1) for _ in range(rounds)]
        out[name] = float(np.median(ts)) / 1e6
    return out


_SEGMENT_VALUES: dict[int, dict] = {}


def _segment_inputs(plan, seg) -> dict:
    """The values a run of the plan left for `seg`'s inputs (recorded by _replay)."""
    return dict(_SEGMENT_VALUES.get(id(seg), {}))


def _replay(plan, feed: dict[str, np.ndarray], threads: int, host_ns: dict[str, float], keep: bool = False) -> None:
    """One inference as Plan.run does it, with the host nodes' wall times added to `host_ns` and (`keep`) each
    segment's inputs remembered for _vulkan_node_times."""
    from collections import ChainMap

    from .compiler.plan import HOST

    host = any(s.device == HOST for s in plan.segments)
    values = ChainMap(dict(feed), plan.g.consts) if host else dict(feed)
    for seg in plan.segments:
        if keep:  # under the keys the runner reads: plain names, or form_key/packed_key of handoffs
            wanted = set(seg.inputs)
            _SEGMENT_VALUES[id(seg)] = {k: values[k] for k in list(values.keys())
                                        if k.partition("\x00")[0] in wanted}
        r = seg.runner
        if seg.device == HOST:
            timings: list = []
            r.run(values, timings=timings)
            for node, _, ns in timings:
                host_ns[node.name] = host_ns.get(node.name, 0.0) + ns
        else:
            r.run(values, threads)


def _predictions(sess, plan, threads: int) -> dict[str, dict[str, float]]:
    """Node -> {device: predicted ms}: the dispatcher's costs for an auto session, else the calibrated cost model
    of the session's devices where this machine has a calibration cached (nothing is calibrated here)."""
    from .dispatch.costs import node_work

    if plan.auto is not None:
        return {d.node: {k: v / 1e6 for k, v in d.costs.items() if math.isfinite(v)}
                for d in plan.auto.decisions}
    from .dispatch.profile import cached_entry, cpu_identity

    entries = {}
    for seg in plan.segments:
        d = seg.device
        if d in entries:
            continue
        try:
            if d.startswith("cpu"):
                entries[d] = cached_entry("cpu", cpu_identity(), threads)
            elif d.startswith("vulkan"):
                from .dispatch.machine import vulkan_devices as listed

                ident = {x["device"]: x["identity"] for x in listed()}.get(d)
                entries[d] = cached_entry(d, ident, 1) if ident is not None else None
        except Exception:  # noqa: BLE001 - no prediction is a null, not a failure
            entries[d] = None
    out: dict[str, dict[str, float]] = {}
    for seg in plan.segments:
        e = entries.get(seg.device)
        if e is None:
            continue
        for n in seg.nodes:
            try:
                out[n.name] = {seg.device: e.node_ns(node_work(plan.g, plan.info, n)) / 1e6}
            except (KeyError, ValueError, IndexError):
                pass
    return out


def per_layer(sess, feed: dict[str, np.ndarray], threads: int, rounds: int = PROFILE_ROUNDS) -> list[dict[str, Any]]:
    """Per node of a vkinfer session's plan, in order: ``{"node", "device", "op", "measured_ms",
    "predicted_ms"}``, measured over `rounds` inferences after the timed ones.

    CPU segments: the native executor's per-operator timers (one entry per native operator; the conversions at
    a segment's edges have node ``"<edge>"``); Vulkan segments: each node's device time from timestamp queries
    (_vulkan_node_times); host nodes: their wall time. predicted_ms: the dispatcher's predicted time of the node
    on the device it runs on (_predictions), null where there is none."""
    plan = sess.plan(feed)
    if plan is None:
        return []
    host_ns: dict[str, float] = {}
    cpu = [(seg, _cpu_op_nodes(plan, seg)) for seg in plan.segments if seg.runner.kind == "cpu"]
    _replay(plan, feed, threads, {}, keep=True)
    for seg, _ in cpu:
        seg.runner.graph.profile(True)
    try:
        for _ in range(rounds):
            _replay(plan, feed, threads, host_ns)
        cpu_ns = {id(seg): seg.runner.graph.times_ns()[0] for seg, _ in cpu}
    finally:
        for seg, _ in cpu:
            seg.runner.graph.profile(False)
    owners = {id(seg): own for seg, own in cpu}
    pred = _predictions(sess, plan, threads)

    def predicted(node: str | None, device: str) -> float | None:
        costs = pred.get(node or "", {})
        return costs.get(device, costs.get(device.partition(":")[0]))

    out: list[dict[str, Any]] = []
    try:
        for seg in plan.segments:
            kind = seg.runner.kind
            if kind == "cpu":
                own, ns = owners[id(seg)], cpu_ns[id(seg)]
                seen: set[str] = set()
                for op, node, t in zip(seg.runner.ops(), own, ns, strict=True):
                    first = node is not None and node not in seen
                    seen.add(node or "")
                    out.append({"node": node or "<edge>", "device": seg.device, "op": op,
                                "measured_ms": t / rounds / 1e6, "predicted_ms": predicted(node, seg.device)
                                if first else None})
            elif kind == "vulkan":
                vk = _vulkan_node_times(plan, seg, rounds)
                for n in seg.nodes:
                    if n.name in vk:
                        out.append({"node": n.name, "device": seg.device, "op": n.op, "measured_ms": vk[n.name],
                                    "predicted_ms": predicted(n.name, seg.device)})
            else:
                for n in seg.nodes:
                    out.append({"node": n.name, "device": seg.device, "op": n.op,
                                "measured_ms": host_ns.get(n.name, 0.0) / rounds / 1e6,
                                "predicted_ms": predicted(n.name, seg.device)})
    finally:
        _SEGMENT_VALUES.clear()
    return out


