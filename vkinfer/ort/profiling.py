"""enable_profiling: per-layer Chrome-trace events of a session's runs (the events are described in
vkinfer/ort/__init__.py)."""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from typing import TYPE_CHECKING

from .options import CPU_PROVIDER, VULKAN_PROVIDER

if TYPE_CHECKING:
    from ..session import InferenceSession


def _instrument(sess: InferenceSession, plan) -> None:
    """Wrap each segment runner's `run` of a profiling session's plan with timers (recorded while a profiled run
    is in progress), and keep the plan off its one-call native path."""

    plan.one_call = False
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
                _inner(values, threads, timings=nodes)
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
            from ..layer_times import _cpu_op_nodes

            try:
                self.cpu_owners[key] = _cpu_op_nodes(plan, seg)
            except Exception:  # noqa: BLE001 - without the mapping the segment's time still goes to its nodes
                self.cpu_owners[key] = [None] * len(seg.runner.ops())
        return self.cpu_owners[key]

    def _vulkan_times(self, plan, feed: dict) -> dict[str, float]:
        """Device ns per Vulkan node of `plan` (timestamp queries, as `vkinfer bench --per-layer`), measured once."""
        key = id(plan)
        if key not in self.vk_times:
            from ..layer_times import per_layer

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
        tag = run_options.logid if run_options is not None else ""
        out.append(self._event("Session", "model_run", t0, t1 - t0, {"run_tag": tag, "run": self.runs}))
        self.events += out
        self.runs += 1

    def write(self) -> str:
        """Write the events to `<prefix>_<date>_<time>_<ms>.json`; the path."""
        now = time.time()
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S", time.localtime(now)) + f"_{int(now * 1000) % 1000:03d}"
        path = f"{self.prefix}_{stamp}.json"
        with open(path, "w") as f:
            json.dump(self.events, f, indent=0)
        return path
