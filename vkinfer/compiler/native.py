"""A plan of CPU and Vulkan segments run in one native call (vkinfer._planrun.Runner, vkinfer/_native/planrun.c)."""

from __future__ import annotations

import weakref

import numpy as np

from .plan import Plan


def _nbytes(shape, dt) -> int:
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize


class NativePlan:
    """A plan whose every segment is native (CPU graphs, Vulkan sequences) run in one native call
    (vkinfer._planrun.Runner): each CPU segment's graph and each Vulkan segment's pack, submit, wait and unpack,
    with the tensors between segments in host arrays made once. The runner takes the plan's Vulkan devices' locks
    and its own around each run; a plan of CPU segments only never loads the Vulkan module.

    `raw.run_feed(feed)` is the session's common call: the list of outputs for a dict of exactly the inputs as
    C-contiguous arrays of their dtype and shape, a CPU graph's nonzero status (`_failed` raises its error), or
    None for any other feed (the checked path takes it)."""

    def __init__(self, plan: Plan, raw, in_names: list[str], out_specs: list[tuple[str, tuple, np.dtype]],
                 nan_checked: list[str], vk_segments: list, state: dict[str, np.ndarray] | None = None):
        # The plan by weak reference: a strong one closed the cycle plan -> _natives -> NativePlan -> plan, so an
        # evicted plan (its buffers, CPU graphs, pipelines) lived on until the cyclic GC's next full collection,
        # and the session's malloc_trim at eviction found its memory still in use. The runner holds what it runs.
        self._plan, self.raw, self.in_names, self.out_specs = weakref.ref(plan), raw, in_names, out_specs
        self.nan_checked, self.vk_segments = nan_checked, vk_segments
        # A streaming model's state: graph input -> the runner's persistent bytes holding its value between runs.
        self.state = state or {}
        self.outputs = frozenset(t for t, _, _ in out_specs)
        info = plan.info
        sf = plan.state_forms
        # The state forms by graph input name (the session converts reset_state's values and the checked path's).
        self.forms = {t: sf[t] for t in self.state if t in sf}
        keyed = {f.key: (f.shape, np.uint8) for f in sf.values()}
        self.in_specs = [(t, np.dtype(keyed[t][1] if t in keyed else info[t][1]),
                          tuple(keyed[t][0] if t in keyed else info[t][0])) for t in in_names]
        raw.set_feed(in_names, [memoryview(np.empty(0, dt)).format for _, dt, _ in self.in_specs],
                     [list(shape) for _, _, shape in self.in_specs], [(shape, dt) for _, shape, dt in out_specs],
                     np.ndarray, np.empty, vk_segments)

    @property
    def plan(self) -> Plan | None:
        """The plan this runs (None once the plan is gone)."""
        return self._plan()

    @staticmethod
    def build(plan: Plan, threads: int, state: list | None = None, outputs: list[str] | None = None
              ) -> NativePlan | None:
        """The plan's NativePlan on `threads` CPU threads, or None where a segment has no native form (a host
        segment, or no vkinfer._planrun: a graph without the fast-run address) or a graph input is also an
        output.

        `state`: a streaming model's variables (vkinfer.model.tflite_import.StateVariable: graph input, the graph
        output that carries its next value or the constant `assigned`, the `initial` value). Their inputs are not
        fed: each lives in the runner's memory, starts at `initial` and takes, after every successful run, the
        value the run assigned (copied in C). `outputs`: the graph outputs a run returns (default: all)."""
        try:
            from .. import _planrun
        except ImportError:  # pragma: no cover - a package built without the plan runner: the Python path
            return None
        g, sf = plan.g, plan.state_forms
        # A state kept in the CPU graph's form (Plan.state_forms) is a slot of its stored bytes under its key.
        info = {**plan.info, **{f.key: (f.shape, np.dtype(np.uint8)) for f in sf.values()}}

        def key(t: str) -> str:
            return sf[t].key if t in sf else t

        def value(t: str, host: np.ndarray) -> np.ndarray:
            return sf[t].to_form(host) if t in sf else np.ascontiguousarray(host, info[t][1])
        if not plan.segments or any(s.runner.kind not in ("cpu", "vulkan") for s in plan.segments):
            return None
        state = state or []
        stated = {v.input for v in state}
        in_names = [key(t.name) for t in g.inputs if t.name not in stated]
        out_names = [key(t) for t in ([t.name for t in g.outputs] if outputs is None else list(outputs))]
        slots: dict[str, int] = {}
        sizes: list[int] = []
        for t in in_names + out_names:
            if t in slots or t in stated:
                return None  # an input that is also an output: the general path
            slots[t] = len(sizes)
            sizes.append(_nbytes(*info[t]))
        persistent: dict[int, np.ndarray] = {}
        state_bytes: dict[str, np.ndarray] = {}
        for v in state:
            n = _nbytes(*info[v.input])
            k = slots[key(v.input)] = len(sizes)
            sizes.append(n)
            persistent[k] = state_bytes[v.input] = np.empty(n, np.uint8)
            state_bytes[v.input][:] = value(v.input, v.initial).view(np.uint8).reshape(-1)

        def slot(key: str, n: int) -> int:
            if key not in slots:
                slots[key] = len(sizes)
                sizes.append(n)
                persistent[slots[key]] = np.empty(n, np.uint8)
            if sizes[slots[key]] != n:
                raise ValueError(f"internal: tensor {key!r} is {n} bytes here, {sizes[slots[key]]} elsewhere")
            return slots[key]

        steps, nan_checked, vk_segs, locks = [], [], [], []
        for seg in plan.segments:
            r = seg.runner
            if r.kind == "cpu":
                fast = r.graph._fast
                if fast is None:
                    return None
                ext = [slot(k, _nbytes(shape, dt)) for k, shape, dt in r.in_specs + r.out_specs]
                if [sizes[k] for k in ext] != list(fast[2]):
                    raise ValueError("internal: a CPU segment's buffers differ from its slots")
                nan_checked += [t for t in r.nan_checked if t and t in in_names]
                steps.append(("cpu", fast[0], fast[1], r.graph, ext, int(threads)))
            else:
                packs = [(slot(key, int(np.prod(rows or info[key][0]))), b.raw,
                          list(rows or info[key][0]), rows is None, xor) for key, rows, xor, _, b in r.ups]
                unpacks = [(slot(key, int(np.prod(rows or shape))), b.raw, list(rows or shape), rows is None, xor)
                           for key, rows, xor, _, b, shape, dtype in r.downs]
                steps.append(("vulkan", r.seq.raw, packs, unpacks))
                vk_segs.append(r)
                if all(lk is not r.dev.lock for lk in locks):
                    locks.append(r.dev.lock)
        carries = []
        for v in state:  # as the session's own path: the carried value, then an assigned constant over it
            if v.output is not None:
                if key(v.output) not in slots or (v.input in sf) != (v.output in sf):
                    return None  # a carried value no segment makes (a graph input passed through): general path
                carries.append((slots[key(v.output)], slots[key(v.input)]))
        for v in state:
            if v.assigned is not None:
                k = len(sizes)
                sizes.append(_nbytes(*info[v.input]))
                persistent[k] = value(v.input, v.assigned).view(np.uint8).reshape(-1).copy()
                carries.append((k, slots[key(v.input)]))
        raw = _planrun.Runner(len(in_names), len(out_names), sizes, persistent, steps, locks, carries)
        out_specs = [(t, tuple(info[t][0]), np.dtype(info[t][1])) for t in out_names]
        return NativePlan(plan, raw, in_names, out_specs, list(dict.fromkeys(nan_checked)), vk_segs, state_bytes)

    def _failed(self, status: int, feed: dict) -> None:
        """Raise the error of a run that returned CPU graph status `status` for `feed` (a refused NaN names its
        input)."""
        from ..cpu.segment import run_failed

        run_failed(status, self.nan_checked, [feed[t] for t in self.nan_checked])

    def run(self, feed: dict[str, np.ndarray], names: list[str],
            into: dict[str, np.ndarray | None] | None = None) -> list[np.ndarray]:
        """The outputs `names` (graph outputs) for `feed` (every graph input, checked by the caller). `into` maps
        output names to the arrays to write them into (C-contiguous, of the output's dtype and shape, checked by
        the caller: ONNX Runtime's IOBinding); an output it lacks or maps to None gets a new array."""
        ins = [feed[t] for t in self.in_names]
        ins = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in ins]
        into = into or {}
        outs = [into.get(t) if into.get(t) is not None else np.empty(shape, dt) for t, shape, dt in self.out_specs]
        timed = any(s.timed for s in self.vk_segments)
        status, ns = self.raw.run(ins, outs, timed)
        if status:
            self._failed(status, feed)
        if timed:
            for seg, v in zip(self.vk_segments, ns, strict=True):
                seg.last_device_ns = v
        by_name = dict(zip((t for t, _, _ in self.out_specs), outs, strict=True))
        return [by_name[n] for n in names]
