"""Where a run's time goes: the native CPU graph's per-operator timers on MobileNetV2 1.0/224, and Vulkan's
fixed costs (session creation cold and warm, host-side cost per inference beside the device's own time).

    .venv/bin/python bench/overhead.py [--repeat N] [--cpu-only] [--vulkan-only]

CPU (1 thread, pinned to one core): each model runs interleaved with its peer (ONNX Runtime, 1 intra-op thread,
or ai-edge-litert, 1 thread) for --repeat runs after warm-ups; then --repeat profiled runs give each native
operator's time. "outside convolutions" is the share of those profiled runs' wall time not spent in the
convolutions: the graph's other operators (edges, pools, tables), its run loop, the timers themselves and the
Python call. "outside native operators" is the session's run less the bare native graph run on the same arrays,
alternated --repeat times, the median of the paired differences: the Python call, the input checks, the output
arrays (not the run loop, which is in both).
Vulkan (the default device): a fresh process creates the session with empty SPIR-V and pipeline caches (cold),
then others with the caches it left (warm), each timing creation and its first run (which waits for the
pipelines), then a second session of the same model in that process; then --repeat untimed runs give the wall
time and the calling thread's CPU time per run (all the host does: Python, checks, CPU segments, packing,
submit; the wait excluded), and --repeat timed runs the host-side cost per inference paired per run (wall less
the device's execution from Vulkan timestamp queries, where the driver has them). Last, the driver's own floor
beside it: a bare pre-recorded sequence of as many 1x1 convolutions as the model's dispatches, sized to about
the model's device time, replayed with nothing of vkinfer's around the submit (no quantize, packing, Python
session call): its wall less its timestamps.
Results go to bench/results/overhead-<UTC time>.json; the tables are printed as markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_model, interleaved, markdown_table  # noqa: E402
from models import Case, cached_model  # noqa: E402

import vkinfer  # noqa: E402
from vkinfer.testing import zoo  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CPU_CASES = [Case("mobilenet_v2", "qoperator"), Case("mobilenet_v2", "qdq"), Case("mobilenet_v2", "tflite-i8")]


def _feed(case: Case, blob: bytes) -> dict[str, np.ndarray]:
    if case.tflite:
        return {"input": np.random.default_rng(1).uniform(-1, 1, (1, 224, 224, 3)).astype(np.float32)}
    import onnx

    return zoo.random_inputs(onnx.load_from_string(blob), seed=1)


def _peer(case: Case, blob: bytes, feed):
    if case.tflite:
        from ai_edge_litert.interpreter import Interpreter

        it = Interpreter(model_content=blob, num_threads=1)
        it.allocate_tensors()
        ins = {d["name"]: d["index"] for d in it.get_input_details()}
        outs = [d["index"] for d in it.get_output_details()]

        def run():
            for k, v in feed.items():
                it.set_tensor(ins[k], v)
            it.invoke()
            return [it.get_tensor(i) for i in outs]
        return run
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = 1, 1
    s = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
    return lambda: s.run(None, feed)


def cpu_rows(repeat: int) -> list[dict]:
    rows = []
    for case in CPU_CASES:
        blob, _ = cached_model(case)
        feed = _feed(case, blob)
        sess = vkinfer.InferenceSession(blob, device="cpu", threads=1)
        plan = sess.plan(feed)
        peer = _peer(case, blob, feed)
        ours = lambda s=sess, f=feed: s.run(None, f)  # noqa: E731
        t_ours, t_peer = interleaved(ours, peer, warmup=5, repeat=repeat)
        segs = [s.runner for s in plan.segments if s.device.startswith("cpu")]
        for r in segs:
            r.graph.profile(True)
        t0 = time.perf_counter()
        for _ in range(repeat):
            ours()
        profiled = (time.perf_counter() - t0) / repeat * 1e3
        conv_ns = other_ns = loop_ns = 0
        for r in segs:
            ns, loop = r.graph.times_ns()
            for name, t in zip(r.ops(), ns, strict=True):
                if name.startswith("conv"):
                    conv_ns += t
                else:
                    other_ns += t
            loop_ns += loop
            r.graph.profile(False)
        total = float(np.median(t_ours)) * 1e3
        kernels = conv_ns / repeat / 1e6
        # Outside every native operator, measured A/B: the session's run against the bare graph run on the same
        # arrays (preallocated outputs), alternated, the median of the paired differences. Total less the
        # operators' profiled time mixes runs interleaved with the peer (cold caches) with back-to-back ones.
        outside_ops = None
        if plan.native_calls == 1 and len(plan.segments) == 1 and segs[0].graph._fast is not None:
            from vkinfer import _planrun

            seg, gf = segs[0], segs[0].graph._fast
            ext = tuple([feed[k] for k, _, _ in seg.in_specs] + [np.empty(sh, dt) for _, sh, dt in seg.out_specs])
            diffs = []
            for i in range(repeat + 5):
                t0 = time.perf_counter()
                ours()
                t1 = time.perf_counter()
                _planrun.run(gf[0], gf[1], ext, gf[2], 1)
                t2 = time.perf_counter()
                if i >= 5:
                    diffs.append((t1 - t0) - (t2 - t1))
            outside_ops = float(np.median(diffs)) * 1e3
        rows.append({"model": case.key, "segments": [s.device for s in plan.segments],
                     "native_calls": plan.native_calls, "vkinfer_ms": total, "peer": case.peer,
                     "peer_ms": float(np.median(t_peer)) * 1e3, "kernels_ms": kernels,
                     "other_ops_ms": other_ns / repeat / 1e6, "run_loop_ms": loop_ns / repeat / 1e6,
                     "profiled_ms": profiled, "outside_kernels_ms": profiled - kernels,
                     "outside_pct": 100 * (profiled - kernels) / profiled,
                     "outside_ops_ms": outside_ops,
                     "outside_ops_pct": None if outside_ops is None else 100 * outside_ops / total})
    return rows


_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import vkinfer
t1 = time.perf_counter()
sess = vkinfer.InferenceSession(open(sys.argv[1], "rb").read(), device="vulkan")
t2 = time.perf_counter()
i = sess.get_inputs()[0]
import numpy as np
sess.run(None, {i.name: np.zeros(i.shape, np.float32)})
t3 = time.perf_counter()
again = vkinfer.InferenceSession(open(sys.argv[1], "rb").read(), device="vulkan")
t4 = time.perf_counter()
again.run(None, {i.name: np.zeros(i.shape, np.float32)})
t5 = time.perf_counter()
print(json.dumps({"import_s": t1 - t0, "create_s": t2 - t1, "first_run_s": t3 - t2,
                  "second_in_process_create_s": t4 - t3, "second_in_process_first_run_s": t5 - t4}))
"""


def vulkan_rows(repeat: int) -> list[dict]:
    case = Case("mobilenet_v2", "qoperator")
    blob, _ = cached_model(case)
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        model = Path(cache) / "m.onnx"
        model.write_bytes(blob)
        env = {**os.environ, "VKINFER_CACHE_DIR": cache, "XDG_CACHE_HOME": cache}
        for label in ("cold", "warm", "warm"):
            r = subprocess.run([sys.executable, "-c", _CHILD, str(model)], env=env, capture_output=True, text=True,
                               timeout=600)
            if r.returncode != 0:
                raise RuntimeError(r.stderr[-3000:])
            rows.append({"what": f"session creation ({label} caches)", **json.loads(r.stdout.strip().splitlines()[-1])})
    feed = _feed(case, blob)
    sess = vkinfer.InferenceSession(blob, device="vulkan", threads=1)
    plan = sess.plan(feed)
    [vseg] = [s.runner for s in plan.segments if s.device.startswith("vulkan")]
    for _ in range(3):
        sess.run(None, feed)
    # Untimed runs (as users run): wall time and the calling thread's CPU time (everything the host does for a
    # run, device waits excluded). Then timed runs: wall less the device's own time (Vulkan timestamps), paired
    # per run; the timestamps themselves add to both.
    untimed, cpu = [], []
    for _ in range(repeat):
        c0, t0 = time.thread_time(), time.perf_counter()
        sess.run(None, feed)
        untimed.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
    vseg.timed = True
    wall, dev, host = [], [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        sess.run(None, feed)
        wall.append(time.perf_counter() - t0)
        ns = vseg.last_device_ns
        dev.append(None if ns is None else ns * 1e-9)
        host.append(None if ns is None else wall[-1] - ns * 1e-9)
    w = float(np.median(wall)) * 1e3
    d = None if any(v is None for v in dev) else float(np.median(dev)) * 1e3
    rows.append({"what": "run", "wall_ms": w, "untimed_wall_ms": float(np.median(untimed)) * 1e3,
                 "device_ms": d, "host_side_us": None if d is None else float(np.median(host)) * 1e6,
                 "host_thread_cpu_us": float(np.median(cpu)) * 1e6, "native_plan": plan.native(1) is not None,
                 "segments": [s.device for s in plan.segments]})
    if d is not None:
        rows.append(driver_floor(vseg.dev, vseg.seq.dispatches, d, repeat))
    return rows


def driver_floor(dev, dispatches: int, device_ms: float, repeat: int) -> dict:
    """The driver's host-side cost for a bare sequence of `dispatches` 1x1 convolutions (32 channels) whose
    device time is near `device_ms`: lavapipe's grows with the device's work on the same core (66 dispatches
    took 23 us beside 1.5 ms of device time, 104 us beside 110 ms, Zen 5)."""
    from vkinfer.reference._spec import conv_spec
    from vkinfer.vulkan import Chain

    rng = np.random.default_rng(0)

    def chain(side: int) -> Chain:
        x = rng.integers(0, 256, (1, 32, side, side)).astype(np.uint8)
        w = rng.integers(-20, 21, (32, 32, 1, 1)).astype(np.int8)
        spec = conv_spec(x, 0.02, np.uint8(128), w, 0.01, np.int8(0), 0.05, np.uint8(128))
        return Chain([spec] * dispatches, dev)

    def timed(ch: Chain, n: int) -> tuple[float, float]:
        host, ns = [], []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            v = ch.seq.run(timed=True)
            host.append(time.perf_counter_ns() - t0 - v)
            ns.append(v)
        return float(np.median(ns)) / 1e6, float(np.median(host)) / 1e3
    side = 16
    probe = chain(side)
    timed(probe, 2)
    ms, _ = timed(probe, 3)
    side = max(4, int(round(side * (device_ms / max(ms, 1e-3)) ** 0.5)))  # device time ~ pixels
    ch = chain(side)
    timed(ch, 3)
    ms, host_us = timed(ch, repeat)
    return {"what": "driver floor (bare sequence)", "dispatches": dispatches, "side": side, "device_ms": ms,
            "host_side_us": host_us}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--cpu-only", action="store_true")
    ap.add_argument("--vulkan-only", action="store_true")
    args = ap.parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # pinned: one core for everything
    out = {"cpu": cpu_model(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if not args.vulkan_only:
        out["cpu_rows"] = cpu_rows(args.repeat)
        print(markdown_table(
            ["model", "segments", "vkinfer ms", "peer", "peer ms", "ratio", "conv kernels ms", "other ops ms",
             "run loop ms", "outside convolutions (profiled)", "outside native operators"],
            [[r["model"], " ".join(r["segments"]), f"{r['vkinfer_ms']:.2f}", r["peer"], f"{r['peer_ms']:.2f}",
              f"{r['vkinfer_ms'] / r['peer_ms']:.2f}", f"{r['kernels_ms']:.2f}", f"{r['other_ops_ms']:.3f}",
              f"{r['run_loop_ms']:.4f}", f"{r['outside_pct']:.1f}%",
              "-" if r["outside_ops_ms"] is None
              else f"{r['outside_ops_ms'] * 1e3:.0f} us ({r['outside_ops_pct']:.1f}%)"]
             for r in out["cpu_rows"]]))
    if not args.cpu_only:
        out["vulkan_rows"] = vulkan_rows(args.repeat)
        for r in out["vulkan_rows"]:
            print(r)
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"overhead-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    path.write_text(json.dumps(out, indent=1))
    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
