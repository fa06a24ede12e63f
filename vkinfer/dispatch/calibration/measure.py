"""Calibration's measurements: running the grid's graphs (calibration/grid.py) on each device and timing them.

**What is timed.**
- cpu: the native graph's per-operator timers (NativeGraph.profile), reset before each run. A node's time is
  its own operators (which operators belong to which layer is found by replaying each layer's emitter into a
  recorder, `_op_split`) plus its share of the run loop outside the operators (about 35 ns per operator here).
  The conversions the segment adds at its edges (8-bit host NCHW arrays into the NHWC arena and back, int8
  XOR 0x80) are the `upload`/`download` links, fitted on every sample's edge operators; `segment_ns` is what
  remains of the wall time of `run_arrays` (Python, ctypes, argument checks, output allocation: 3-8 us here).
  The tile is picked among CPU_TILES by the fit (`pick_tile`; 4x32 or 1x32 here: avx512vnni's
  microkernel computes 4 rows x 32 channels).
- vulkan: the device time (timestamps) of the one-node segment's commands with the node dispatched CHAIN
  times, less the same with it dispatched once, over CHAIN - 1 (`_measure_vulkan`); `segment_ns` the wall
  time of submit-and-wait of the one-dispatch sequence less the node; `upload`/`download` the wall time of
  Buffer.write_nchw/read_nchw (plus the recorded copy where the device is not zero-copy) over several sizes.
  The tile is qlinear_gemm's workgroup tile, 32 rows x 32 output channels (shaders/qlinear_gemm.comp TM, TN).
- host (the numpy interpreter, for nodes no device runs): the wall time of a HostSegment running the node
  (QuantizeLinear/DequantizeLinear through its fast path, the rest through the interpreter's kernels);
  segment and transfers cost nothing there.

Every time is the median over rounds (`_rounds`: quick at least 7, full at least 21, more within the mode's time
budget), after warm-ups; `tail` is the median over shapes of p90/p50. The CPU runs at the entry's thread count.

Whole field models timed operator by operator (`model_samples`) add per-node samples measured inside real
models on the CPU; the calling layer may choose them (`workload`: name, 8-bit type -> a graph or a model file),
by default calibration's own (calibration/workload.py).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable

import numpy as np

from ...model.graph import Graph
from ..costs import node_work
from ..profile import Link
from .fit import Sample, _fit_link
from .grid import Shape
from .workload import field_workload

# Per mode: (minimum rounds, maximum rounds, time budget of the timed rounds in ns, warm-up runs per shape).
_REPEATS = {"quick": (7, 40, 60_000_000, 2), "full": (21, 400, 2_000_000_000, 3)}


# --- timing helpers -------------------------------------------------------------------------------------------

def _rounds(probes: list[Callable[[], float]], mode: str, burst: int = 2) -> list[list[float]]:
    """Each probe (a callable running one measurement and returning its time in ns) after warm-ups, in rounds:
    every round runs every probe `burst` times in a row and keeps the last, so a slow spell of this shared
    machine (medians of one shape moved by up to 40% between minutes here) falls on all shapes alike instead of
    on one class, while each kept run finds its code and data in the caches as a node inside a model does (the
    first run after another shape's was 2-10x slower for sub-microsecond nodes: 1.5 us instead of 0.2 us for a
    64->12 fully connected layer). Rounds: the mode's minimum, more while the budget allows, at most its
    maximum."""
    lo, hi, budget, warm = _REPEATS[mode]
    per_round = 0
    for p in probes:
        for _ in range(warm):
            t0 = time.perf_counter_ns()
            p()
            dt = time.perf_counter_ns() - t0
        per_round += dt * burst
    n = int(min(hi, max(lo, budget // max(per_round, 1))))
    out: list[list[float]] = [[] for _ in probes]
    enabled = gc.isenabled()
    gc.disable()  # a collection inside a 10 us run would be its p90
    try:
        for _ in range(n):
            for i, p in enumerate(probes):
                for _ in range(burst - 1):
                    p()
                out[i].append(p())
    finally:
        if enabled:
            gc.enable()
    return out


def _repeat(fn: Callable[[], float], mode: str) -> list[float]:
    """One probe's measurements (see _rounds)."""
    return _rounds([fn], mode)[0]


def _tail(ts: list[float]) -> float:
    p50 = float(np.median(ts))
    return max(1.0, float(np.percentile(ts, 90)) / p50) if p50 > 0 else 1.0


class _Recorder:
    """Stands in for a NativeGraph while a layer's emitter runs: records the operators' names only."""

    def __init__(self):
        self.names: list[str] = []

    def add(self, op: str, *args) -> None:
        self.names.append(op)

    def add_form(self, op: str, form: tuple, *refs) -> None:  # NativeGraph.add_form: one operator as well
        self.names.append(op)

    def write(self, offset, data) -> None:
        pass


def _op_split(runner) -> tuple[int, list[int], int]:
    """(input edge operators, operators of each of runner.layers, output edge operators) of a CpuSegment.

    A segment's native operators are its input conversions, then each live layer's, then its output conversions
    (vkinfer/cpu/segment.py); each layer's count comes from replaying its emitter into a recorder, and the edges
    split what is left (at most one conversion per 8-bit input and per 8-bit output)."""
    from ...cpu.graph import Ref
    from ...layout import is_8bit

    names = [n.split(":")[0] for n in runner.ops()]
    counts = []
    for lay in runner.layers:
        if lay.alias:
            counts.append(0)
            continue
        rec = _Recorder()
        refs = [Ref(0, 0, 1) for _ in lay.acts]
        # (A quantize whose output a move took over emits its `plain` form instead: one operator as well.)
        lay.build()(rec, refs, Ref(0, 0, 1), Ref(0, 0, lay.scratch) if lay.scratch else None)
        counts.append(len(rec.names))
    body = sum(counts)
    edges = len(names) - body
    max_in = sum(1 for _, _, dt in runner.in_specs if is_8bit(dt))
    max_out = sum(1 for _, _, dt in runner.out_specs if is_8bit(dt))
    for n_in in range(0, min(edges, max_in) + 1):
        n_out = edges - n_in
        if n_out <= max_out and all(n == "transpose" for n in names[:n_in] + names[n_in + body:]):
            return n_in, counts, n_out
    raise RuntimeError(f"internal: cannot tell the edge operators of {names} (layers emit {counts})")


def _nbytes(info: dict, t: str) -> int:
    shape, dt = info[t]
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize


# --- CPU ------------------------------------------------------------------------------------------------------

def probe_u8s8() -> dict[str, tuple[int, int]]:
    """The CPU's u8s8 weight ranges (cpu_fallback/src/conv.c use_u8s8), found by asking the C library which kernel
    small convolutions get: {"igemm": (lo, hi), "depthwise": (lo, hi)}, the lowest and highest (weight - zero
    point) its u8s8 kernels take, a kind absent where the default variant has no u8s8 kernel for it (or
    $VKINFER_CPU_U8S8=0). A weight range of 256 values is never u8s8 (every variant's range is narrower), so a
    kernel unlike that one's is the u8s8 path. Binary searches over [0, 255] and [-255, 0]: about 30 ms."""
    import types

    from ...cpu import _Conv

    out = types.SimpleNamespace(zero_point=0, lo=0, hi=255)

    def kernel(lo: int, hi: int, dw: bool) -> str:
        c = 16
        g, k = (c, 3) if dw else (1, 1)
        w = np.zeros((c, c // g, k, k), np.uint8)
        w.flat[0] = hi - lo  # weights [0, hi - lo] with zero point -lo: (w - zp) spans [lo, hi]
        cv = _Conv(n=1, h=4, w=4, c=c, m=c, kh=k, kw=k, strides=(1, 1), dilations=(1, 1), pads=(k // 2,) * 4,
                   groups=g, weights=w, w_zp=np.full(c, -lo, np.int32), bias=np.zeros(c, np.int32),
                   scale=np.ones(c, np.float32), x_zp=0, out=out, isa=None)
        return cv.kernel

    def last(ok, lo: int, hi: int) -> int:  # the largest v in [lo, hi] with ok(v) (ok monotone, ok(lo) true)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
        return lo

    ranges = {}
    for kind, dw in (("igemm", False), ("depthwise", True)):
        wide = kernel(0, 255, dw)
        if kernel(0, 0, dw) == wide:
            continue  # no u8s8 kernel for this kind
        hi = last(lambda v, dw=dw, wide=wide: kernel(0, v, dw) != wide, 0, 255)
        lo = -last(lambda v, dw=dw, wide=wide: kernel(-v, 0, dw) != wide, 0, 255)
        ranges[kind] = (lo, hi)
    return ranges


_CPU_PLANS: dict[tuple, object] = {}  # (shape, variant) -> Plan, shared by the entries of every thread count


def _cpu_plan(shape: Shape):
    from ...compiler.plan import CpuBackend, Plan

    key = (shape, None)
    plan = _CPU_PLANS.get(key)
    if plan is None:
        g, feed, name = shape.graph()
        plan = Plan(g, feed, CpuBackend(None))
        if len(plan.segments) != 1 or not plan.segments[0].device.startswith("cpu"):
            raise RuntimeError(f"calibration shape {shape.label!r} does not compile to one CPU segment: "
                               f"{[s.device for s in plan.segments]} ({plan.why_host})")
        _CPU_PLANS[key] = plan = (plan, feed, name)
    return plan


def _cpu_probe(shape: Shape, threads: int):
    """(probe, its per-run records, the plan's pieces) for one shape on the CPU: the probe runs the one-node
    segment once with fresh operator timers and returns the node's time (its operators plus its share of the
    run loop); each record is (node, wall minus every operator and the loop, input edges, output edges)."""
    plan, feed, name = _cpu_plan(shape)
    runner = plan.segments[0].runner
    n_in, counts, _ = _op_split(runner)
    body = sum(counts)
    arrays = [feed[t] for t, _, _ in runner.in_specs]
    graph = runner.graph
    runs: list[tuple[float, float, list, list]] = []

    def once() -> float:
        graph.profile(True)  # resets the timers
        t0 = time.perf_counter_ns()
        runner.run_arrays(arrays, threads)
        wall = time.perf_counter_ns() - t0
        ns, loop = graph.times_ns()
        node = sum(ns[n_in:n_in + body]) + loop * body / max(len(ns), 1)
        runs.append((node, wall - sum(ns) - loop, ns[:n_in], ns[n_in + body:]))
        return node
    return once, runs


def _measure_cpu(shapes: list[Shape], threads: int, mode: str) -> tuple[list[Sample], dict]:
    """Samples of `shapes` on the CPU at `threads`, and the edge measurements: "overhead" (per shape, ns),
    "upload"/"download" ((bytes, ns) per converted tensor)."""
    probes = [_cpu_probe(s, threads) for s in shapes]
    try:
        times = _rounds([p for p, _ in probes], mode)
    finally:
        for s in shapes:
            _cpu_plan(s)[0].segments[0].runner.graph.profile(False)
    samples, edges = [], {"overhead": [], "upload": [], "download": []}
    # Per dtype ("upload:int8", ...): the 8-bit conversions (int8 adds the XOR 0x80 to the transpose), and the
    # inputs and outputs of other types, which the segment reads and writes in place (vkinfer/cpu/segment.py):
    # no operator, 0 ns.
    for s, (_, runs), ts in zip(shapes, probes, times, strict=True):
        plan, _, name = _cpu_plan(s)
        runner = plan.segments[0].runner
        runs = runs[-len(ts):]
        n_in, _, n_out = _op_split(runner)
        edges["overhead"].append(statistics.median(r[1] for r in runs))
        ins8 = [t for t, _, dt in runner.in_specs if np.dtype(dt).itemsize == 1]
        outs8 = [t for t, _, dt in runner.out_specs if np.dtype(dt).itemsize == 1]
        if n_in == len(ins8):
            for k, t in enumerate(ins8):
                e = (_nbytes(plan.info, t), statistics.median(r[2][k] for r in runs))
                edges["upload"].append(e)
                edges.setdefault(f"upload:{np.dtype(plan.info[t][1]).name}", []).append(e)
        if n_out == len(outs8):
            for k, t in enumerate(outs8):
                e = (_nbytes(plan.info, t), statistics.median(r[3][k] for r in runs))
                edges["download"].append(e)
                edges.setdefault(f"download:{np.dtype(plan.info[t][1]).name}", []).append(e)
        for way, specs in (("upload", runner.in_specs), ("download", runner.out_specs)):
            for t, _, dt in specs:
                if np.dtype(dt).itemsize != 1:
                    edges.setdefault(f"{way}:{np.dtype(dt).name}", []).append((_nbytes(plan.info, t), 0.0))
        node = next(n for n in plan.g.nodes if n.name == name)
        samples.append(Sample(s, node_work(plan.g, plan.info, node), float(np.median(ts)), _tail(ts)))
    return samples, edges


# --- Vulkan ---------------------------------------------------------------------------------------------------

CHAIN = 3  # dispatches of the node in the long sequence (_measure_vulkan)


def _vk_sequence(dev, runner, repeats: int):
    """The one-node segment's commands as VulkanSegment records them (barrier, uploads, barrier + dispatch per
    program, barrier, downloads, barrier), with the node's dispatches `repeats` times (0: none), each after a
    barrier."""
    from ...model.lowering import alias_roots
    from ...vulkan.segment import _bind

    root = alias_roots(runner.layers)
    bufs = dict(runner.const_bufs)
    bufs.update({root.get(t, t): b for t, b in runner.in_buffers.items()})
    bufs.update({root.get(t, t): b for t, b in runner.out_buffers.items()})
    [lay] = [lay for lay in runner.layers if not lay.alias]
    progs = _bind(lay.build(), [bufs.get(a) or bufs[root.get(a, a)] for a in lay.acts], bufs[root.get(lay.out,
                                                                                                     lay.out)])
    seq = dev.sequence()
    seq.barrier()
    ups = list(dict.fromkeys(runner.in_buffers.values()))
    if ups:
        seq.upload(*ups)
    for _ in range(repeats):
        for prog in progs:
            seq.barrier()
            seq.dispatch(prog)
    seq.barrier()
    seq.download(*dict.fromkeys(runner.out_buffers.values()))
    seq.barrier()
    return seq


def _measure_vulkan(dev, shapes: list[Shape], mode: str) -> tuple[list[Sample], float]:
    """(samples, segment_ns) on a Vulkan device.

    A node's time is the difference between the device times (timestamps before the first and after the last
    command) of two sequences of its one-node segment, one dispatching it CHAIN times and one once, measured
    back to back in each round, divided by CHAIN - 1: a dispatch and the barrier before it, as inside a longer
    segment, without the submit's own cost. That cost is not small and not steady on lavapipe: the device time
    of a sequence without any dispatch was 0-70 us from one round to the next (its queue thread's wake-ups),
    which made a one-dispatch measurement less a copy-only one swing between 0 and 100 us for the same 10 us
    node. segment_ns is the wall time of submit-and-wait of the same sequence without the dispatch, run as a
    session runs it (no timestamps): the fixed cost of one segment, 17-87 us on lavapipe here from one
    calibration to the next (the wall time of the one-dispatch sequence less the chained node time came out 2-4x
    higher: repeated dispatches find warm caches). Without timestamps, wall times stand in for device times."""
    from ...compiler.plan import Plan, VulkanBackend

    be = VulkanBackend(dev)
    built = []
    for s in shapes:  # build every plan first: pipelines compile on worker threads meanwhile
        g, feed, name = s.graph()
        plan = Plan(g, feed, be)
        segs = [seg for seg in plan.segments if seg.device.startswith("vulkan")]
        if len(segs) != 1 or plan.placement.get(name, "").partition(":")[0] != "vulkan":
            raise RuntimeError(f"calibration shape {s.label!r} does not run on {be.name}: {plan.why_host}")
        runner = segs[0].runner
        runner.run(dict(feed))  # the inputs into their buffers
        built.append((s, plan, name, [_vk_sequence(dev, runner, k) for k in (0, 1, CHAIN)]))
    dev.wait_pipelines()
    timed = dev.timestamps

    def run(seq, with_timestamps: bool = timed) -> tuple[float, float]:
        """(device ns, wall ns) of one submit-and-wait."""
        t0 = time.perf_counter_ns()
        with dev.lock:  # as VulkanSegment.run holds it
            ns = seq.run(timed=with_timestamps)
        wall = float(time.perf_counter_ns() - t0)
        return (float(ns) if with_timestamps else wall), wall

    probes, walls = [], []
    for _, _, _, (zero, one, chain) in built:
        mine: list[float] = []
        walls.append(mine)

        def once(zero=zero, one=one, chain=chain, mine=mine) -> float:
            mine.append(run(zero, False)[1])  # as a session runs it: no timestamps
            t1, _ = run(one)
            tk, _ = run(chain)
            return max((tk - t1) / (CHAIN - 1), 1.0)
        probes.append(once)
    times = _rounds(probes, mode, burst=1)
    out = []
    for (s, plan, name, _), ts in zip(built, times, strict=True):
        node = next(n for n in plan.g.nodes if n.name == name)
        out.append(Sample(s, node_work(plan.g, plan.info, node), float(np.median(ts)), _tail(ts)))
    segment = [float(np.median(w[-len(ts):])) for w, ts in zip(walls, times, strict=True)]
    return out, max(0.0, float(np.median(segment)))


def _vulkan_links(dev, mode: str) -> tuple[Link, Link]:
    """(upload, download) of a Vulkan device: the wall time of Buffer.write_nchw / read_nchw, plus the recorded
    copy's device time where the device is not zero-copy, over several tensor sizes."""
    from ...layout import packed_words

    rng = np.random.default_rng(0)
    sizes = [(1, 16, 8, 8), (1, 32, 28, 28), (1, 24, 56, 56), (1, 3, 224, 224)]
    if mode == "full":
        sizes += [(1, 64, 1, 1), (1, 96, 14, 14), (1, 16, 112, 112), (1, 1280, 7, 7)]
    up, down = [], []
    for shape in sizes:
        x = rng.integers(0, 256, shape).astype(np.uint8)
        b = dev.buffer(4 * packed_words(shape), staged=True)
        cu = cd = 0.0
        if not b.direct:
            su, sd = dev.sequence(), dev.sequence()
            su.upload(b)
            su.barrier()
            sd.barrier()
            sd.download(b)
            sd.barrier()
            if dev.timestamps:
                cu = float(np.median(_repeat(lambda s=su: float(s.run(timed=True)), "quick")))
                cd = float(np.median(_repeat(lambda s=sd: float(s.run(timed=True)), "quick")))

        def w(b=b, x=x) -> float:
            t0 = time.perf_counter_ns()
            b.write_nchw(x)
            return float(time.perf_counter_ns() - t0)

        def r(b=b, shape=shape) -> float:
            t0 = time.perf_counter_ns()
            b.read_nchw(shape, np.uint8)
            return float(time.perf_counter_ns() - t0)
        nbytes = int(np.prod(shape))
        up.append((nbytes, float(np.median(_repeat(w, mode))) + cu))
        down.append((nbytes, float(np.median(_repeat(r, mode))) + cd))
    return _fit_link(up), _fit_link(down)


# --- host -----------------------------------------------------------------------------------------------------

def _measure_host(shapes: list[Shape], mode: str) -> list[Sample]:
    """Wall time of a HostSegment running each shape's node on values prepared once."""
    from ...compiler.plan import HostSegment, interpret, trace

    probes, works = [], []
    for s in shapes:
        g, feed, name = s.graph()
        info = trace(g, feed)
        node = next(n for n in g.nodes if n.name == name)
        seg = HostSegment(g, [node])
        values = dict(g.consts)
        values.update(feed)
        interpret(g, values, g.nodes[:g.nodes.index(node)])  # what the node reads (a shuffle's reshape)

        def once(seg=seg, values=values) -> float:
            t0 = time.perf_counter_ns()
            seg.run(values)
            return float(time.perf_counter_ns() - t0)
        probes.append(once)
        works.append(node_work(g, info, node))
    times = _rounds(probes, mode)
    return [Sample(s, w, float(np.median(ts)), _tail(ts)) for s, w, ts in zip(shapes, works, times, strict=True)]




# --- whole models on the CPU ----------------------------------------------------------------------------------

# Whole small models timed operator by operator (their native graph's timers): each node inside a model is a
# sample measured in the conditions a prediction is for, its inputs just written by the node before it and
# every other node's code and data competing for the caches. Isolated microbenchmarks alone predicted the
# nodes of real models 25-50% low (a 13 us tiny_cnn run predicted at 9 us; MobileNetV1 0.25/32 41 us at 31
# us). The default models are calibration's own data (calibration/workload.py), built in milliseconds.
# float_mlp: the per-run cost of a float-input model (workload.py), against the field models' 8-bit inputs.
# mobilenet_v2 (1.0/224): large layers inside a model whose weights leave the caches between runs; quick times its
# int8 form only (0.2 s per thread count; both forms 0.4 s).
MODEL_SAMPLES = {"quick": ("ds_cnn_kws", "mobilenet_v2_kws", "resnet8", "mobilenet_v1_vww", "float_mlp",
                           "mobilenet_v2"),
                 "full": ("ds_cnn_kws", "mobilenet_v2_kws", "resnet8", "mobilenet_v1_vww", "tiny_conv",
                          "mobilenet_v2", "float_mlp")}
_QUICK_INT8_ONLY = ("mobilenet_v2",)
# Timed runs per model and mode: at most the first, at least the second, within the third's seconds.
_MODEL_RUNS = {"quick": (30, 7, 0.05), "full": (100, 15, 0.5)}

# (a name of MODEL_SAMPLES, "int8" or "uint8") -> (the model: a vkinfer Graph, or TFLite or ONNX bytes; its feed)
Workload = Callable[[str, str], tuple[Graph | bytes, dict[str, np.ndarray]]]


def _whole_model(blob: Graph | bytes, threads: int):
    """(plan, [(input, dtype, shape)], its one CPU segment's runner, the public run(feed)) of a model (a fresh
    Graph, or a file's bytes) compiled for the CPU as InferenceSession(blob, device="cpu", threads=threads)
    compiles it (the import where bytes, static layers, a Plan on zeros of the declared shapes), or None when the
    plan is not one native CPU call. The public run is the call the session's `run` makes for a feed of exactly
    its inputs: the _planrun Runner (input checks and output list included), else the segment's run_arrays."""
    from ...compiler.plan import CpuBackend, Plan
    from ...model.onnx_import import import_onnx
    from ...model.op_table import OPS
    from ...model.tflite_import import import_tflite, is_tflite

    supported = {name: None for name in OPS}
    if isinstance(blob, Graph):
        g = blob
    else:
        g = import_tflite(blob, supported) if is_tflite(blob) else import_onnx(blob, supported)
    for node in g.nodes:
        node.attrs["_static"] = all(not n or n in g.consts for n in node.inputs[1:])
    ins = [(t.name, np.dtype(t.dtype), tuple(t.shape)) for t in g.inputs]
    plan = Plan(g, {t.name: np.zeros(t.shape, t.dtype) for t in g.inputs}, CpuBackend(None))
    [seg0, *rest] = plan.segments
    if rest or not seg0.device.startswith("cpu") or seg0.runner.inputs != [t[0] for t in ins] or \
            seg0.runner.outputs != [t.name for t in g.outputs] or getattr(g, "variables", ()):
        return None  # not one native call: nothing to attribute
    runner = seg0.runner
    native = runner.native_runner(threads)
    if native is None:
        names = [t for t, _, _ in ins]

        def native(feed: dict) -> list:
            return runner.run_arrays([feed[t] for t in names], threads)
    return plan, ins, runner, native


def model_samples(threads: int, mode: str,
                  workload: Workload = field_workload) -> tuple[list[Sample], list[tuple[str, float]]]:
    """Per-node samples from whole field models on the CPU (MODEL_SAMPLES, int8 and uint8: uint8 models' weights
    take the int16 kernels where the int8 models' take u8s8, so both paths are sampled), and per model
    (its input's dtype, the per-run cost outside the native operators) when run through the session's public call
    (its input checks and output list cost 1-2 us more than the runner's own call, a fifth of a 7 us MLP run).

    Each timed run of a model follows a run of a second copy of it (its own weights and arena): a run finds in the
    caches what survives as much other data as the model touches, as where a session alternates with other work
    (bench/dispatch.py's round robin of a "cpu" and an "auto" session). Small models are unaffected (both copies
    fit); MobileNetV2 1.0/224 took 2.32 ms run after run and 2.50 ms alternating with a copy, 7.5% more."""
    out: list[Sample] = []
    overheads: list[tuple[str, float]] = []  # (the model's input dtype, ns)
    most, least, budget = _MODEL_RUNS[mode]
    for name in MODEL_SAMPLES[mode]:
        for dtype in ("int8",) if mode == "quick" and name in _QUICK_INT8_ONLY else ("int8", "uint8"):
            blob, feed = workload(name, dtype)
            whole = _whole_model(blob, threads)
            if whole is None:
                continue  # not one native call: nothing to attribute
            plan, ins, runner, public = whole
            other = _whole_model(workload(name, dtype)[0], threads)
            other = other[3] if other is not None else (lambda feed: None)
            arrays = [feed[t] for t, _, _ in ins]
            n_in, counts, _ = _op_split(runner)
            t0 = time.perf_counter()
            for _ in range(3):
                runner.run_arrays(arrays, threads)
                other(feed)
            runs = int(min(most, max(least, budget / max((time.perf_counter() - t0) / 6, 1e-9))))
            if type(public(feed)) is not list:
                raise RuntimeError(f"calibration model {name!r} ({dtype}): its one native call refused the feed")
            per_run: list[list[float]] = []
            outside: list[float] = []
            for _ in range(runs):
                other(feed)
                runner.graph.profile(True)  # resets the timers
                t0 = time.perf_counter_ns()
                public(feed)  # the public path: this runner, one native call
                wall = time.perf_counter_ns() - t0
                ns, loop = runner.graph.times_ns()
                outside.append(wall - sum(ns) - loop)
                share = loop / max(len(ns), 1)
                at, row = n_in, []
                for k in counts:
                    row.append(sum(ns[at:at + k]) + share * k)
                    at += k
                per_run.append(row)
            runner.graph.profile(False)
            overheads.append((np.dtype(ins[0][1]).name, float(np.median(outside))))
            for i, lay in enumerate(runner.layers):
                if lay.alias or not counts[i]:
                    continue
                ts = [r[i] for r in per_run]
                out.append(Sample(None, node_work(plan.g, plan.info, lay.node), float(np.median(ts)), _tail(ts)))
    return out, overheads
