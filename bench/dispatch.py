"""The dispatcher's targets, measured side by side: device="auto" against each single device, predicted against
measured latency, session creation and planning cost.

    .venv/bin/python bench/dispatch.py [--repeat N] [--vulkan-repeat N] [--threads T] [--only NAME[/FORMAT]]...
                                       [--no-vulkan] [--calibration] [--quick] [--full] [--cached]

Models: bench/models.py's cases (the zoo in QOperator and QDQ form, the TFLite zoo, the field models). For each,
three sessions of the public API on the same input: device="cpu", device="vulkan" (the default Vulkan device)
and device="auto" (the dispatcher, from a calibration made by this process first, pinned as the timed runs
are; --full for a full one, --cached to use the cache as it is). They are timed round-robin (cpu, vulkan,
auto, then rotated), after warm-up; the process is pinned to one CPU when T is 1. Printed per model: the
measured medians, auto over the best single device, the dispatcher's predicted latency of each (the auto
session's plan knows all three: `plan.auto.single` and `.predicted`) and the prediction error, then the
targets:
- auto over the best single device: geometric mean <= 1.00, worst <= 1.05;
- predicted within +-10% of measured for >= 90% of (model, device) pairs;
- on a machine whose only Vulkan device is a CPU implementation: auto places every node on the CPU (or the host)
  and its latency is <= 1.02x the CPU session's;
- warm auto session creation <= CPU session creation + 20 ms (medians of 5, interleaved);
- planning a 500-node graph (Dispatcher.place) <= 10 ms;
- --calibration: quick calibration <= 5 s and full <= 60 s (cold: an empty cache folder).
Results go to bench/results/dispatch-<UTC time>.json; the exit status is 1 when an auto session's outputs differ
from the CPU session's.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import models as bm  # noqa: E402
from _common import cpu_model, git_revision, markdown_table  # noqa: E402

import vkinfer  # noqa: E402
from vkinfer.model.graph import Graph, Node, TensorInfo  # noqa: E402

RESULTS = HERE / "results"


def _feed(case, blob: bytes) -> dict[str, np.ndarray]:
    if case.tflite:
        return bm.tflite_feed(blob)
    import onnx

    from vkinfer.testing import zoo

    return zoo.random_inputs(onnx.load_from_string(blob), seed=bm.INPUT_SEED)


def _round_robin(fns: dict[str, callable], warmup: int, repeat: dict[str, int]) -> dict[str, np.ndarray]:
    """Seconds per call of each function, in rotating order (each sees the others' cache effects equally)."""
    names = list(fns)
    times: dict[str, list[float]] = {n: [] for n in names}
    rounds = warmup + max(repeat.values())
    for i in range(rounds):
        order = names[i % len(names):] + names[:i % len(names)]
        for n in order:
            if i >= warmup + repeat[n]:
                continue
            t0 = time.perf_counter()
            fns[n]()
            dt = time.perf_counter() - t0
            if i >= warmup:
                times[n].append(dt)
    return {n: np.array(v) for n, v in times.items()}


def _creation(blob: bytes, devices: list[str], n: int = 5) -> dict[str, float]:
    """Median seconds to create a session on each device (interleaved; caches warm: one untimed round first)."""
    out: dict[str, list[float]] = {d: [] for d in devices}
    for i in range(n + 1):
        for d in devices:
            t0 = time.perf_counter()
            vkinfer.InferenceSession(blob, device=d)
            if i:
                out[d].append(time.perf_counter() - t0)
    return {d: float(np.median(v)) for d, v in out.items()}


def planning_graph(n_nodes: int = 500) -> tuple[Graph, dict]:
    """A 500-node residual stack of 1x1 QLinearConv + QLinearAdd (shapes only matter: the planner's input)."""
    u8 = np.dtype(np.uint8)
    consts = {"s": np.float32(0.05), "z": np.uint8(128), "ws": np.float32(0.01), "wz": np.int8(0),
              "w": np.ones((32, 32, 1, 1), np.int8)}
    info = {"x": ((1, 32, 28, 28), u8)}
    nodes, prev = [], "x"
    for i in range(n_nodes):
        out = f"t{i}"
        if i % 2 == 0:
            nodes.append(Node("QLinearConv", f"conv{i}", [prev, "s", "z", "w", "ws", "wz", "s", "z"], [out]))
        else:
            nodes.append(Node("com.microsoft:QLinearAdd", f"add{i}", [prev, "s", "z", f"t{i - 1}" if i > 1 else
                                                                       "x", "s", "z", "s", "z"], [out]))
        info[out] = ((1, 32, 28, 28), u8)
        prev = out
    g = Graph(nodes, [TensorInfo("x", (1, 32, 28, 28), u8)], [TensorInfo(prev, (1, 32, 28, 28), u8)], consts)
    return g, info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--vulkan-repeat", type=int, default=5, help="timed runs of the Vulkan session (lavapipe is slow)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--no-vulkan", action="store_true")
    ap.add_argument("--quick", action="store_true", help="the small models only")
    ap.add_argument("--calibration", action="store_true", help="also time quick and full calibration, cold")
    ap.add_argument("--full", action="store_true", help="predict from a full calibration (default: quick)")
    ap.add_argument("--cached", action="store_true", help="predict from the cached calibration instead of one "
                                                          "made in this process (pinned as the runs are)")
    args = ap.parse_args(argv)
    os.environ["VKINFER_CPU_THREADS"] = str(args.threads)
    if args.threads == 1:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    from vkinfer.dispatch import Dispatcher
    from vkinfer.dispatch.calibrate import ensure_profile
    from vkinfer.dispatch.machine import auto_candidates, vulkan_devices

    report: dict = {"conditions": {"cpu": cpu_model(), "threads": args.threads, "commit": git_revision(HERE.parent),
                                   "date": datetime.now(UTC).isoformat(timespec="seconds"),
                                   "vkinfer": vkinfer.__version__}}
    lines: list[str] = []

    def say(s: str = "") -> None:
        print(s, flush=True)
        lines.append(s)

    if args.calibration:
        cal = {}
        for mode in ("quick", "full"):
            with tempfile.TemporaryDirectory() as d:
                env = {**os.environ, "VKINFER_CACHE": d}
                t0 = time.perf_counter()
                r = subprocess.run([sys.executable, "-m", "vkinfer.cli", "calibrate", f"--{mode}"], env=env,
                                   capture_output=True, text=True)
                cal[mode] = time.perf_counter() - t0
                if r.returncode:
                    say(f"calibrate --{mode} failed: {r.stderr[-2000:]}")
        say(f"calibration wall time, cold (including interpreter start): quick {cal['quick']:.1f} s (target <= 5), "
            f"full {cal['full']:.1f} s (target <= 60)")
        report["calibration_s"] = cal

    vk = [] if args.no_vulkan else auto_candidates(vulkan_devices())
    vk_name = vk[0]["device"] if vk else None
    cpu_only_vulkan = bool(vk) and all(d["type"] == "cpu" for d in vk)
    # Calibrated here, pinned as the timed runs are: lavapipe's threads inherit the process's CPU set, so a
    # profile measured on both cores predicted its pinned runs 45% low.
    devices = ["cpu", *([vk_name] if vk_name else [])]
    prof = ensure_profile(devices, [args.threads], "full" if args.full else "quick", force=not args.cached,
                          announce="calibrating {devices} before the benchmark, pinned as it runs")

    # Planning cost alone: a 500-node graph, every node runnable on both devices.
    g, info = planning_graph()
    disp = Dispatcher(devices, prof, args.threads)
    plan_t = []
    for _ in range(7):
        t0 = time.perf_counter()
        disp.place(g, info, lambda n, d: True)
        plan_t.append(time.perf_counter() - t0)
    say(f"planning a {len(g.nodes)}-node graph: median {np.median(plan_t) * 1e3:.2f} ms (target <= 10 ms)")
    report["planning_ms"] = float(np.median(plan_t) * 1e3)

    cases = [c for c in bm.CASES if not args.only or c.name in args.only or f"{c.name}/{c.fmt}" in args.only]
    if args.quick:
        cases = [c for c in cases if c.name in (*bm.QUICK, "ds_cnn_kws", "resnet8")]
    rows, pairs, ratios, create = [], [], [], []
    bad = False
    for case in cases:
        blob, _ = bm.cached_model(case)
        feed = _feed(case, blob)
        sessions = {"cpu": vkinfer.InferenceSession(blob, device="cpu")}
        if vk_name:
            sessions["vulkan"] = vkinfer.InferenceSession(blob, device=vk_name)
        sessions["auto"] = vkinfer.InferenceSession(blob, device="auto")
        outs = {k: s.run(None, feed) for k, s in sessions.items()}
        same = all(np.array_equal(a, b) for a, b in zip(outs["cpu"], outs["auto"], strict=True))
        bad |= not same
        plan = sessions["auto"]._fast[0] if sessions["auto"]._fast else sessions["auto"]._latest
        d = plan.auto
        predicted = {"auto": d.predicted.total_ns / 1e6 if d else None}
        if d:
            predicted["cpu"] = d.single["cpu"] / 1e6
            if vk_name:
                predicted["vulkan"] = d.single.get(vk_name, math.nan) / 1e6
        reps = {k: (args.vulkan_repeat if k == "vulkan" else args.repeat) for k in sessions}
        runs = {k: (lambda s=s, feed=feed: s.run(None, feed)) for k, s in sessions.items()}
        t = _round_robin(runs, args.warmup, reps)
        med = {k: float(np.median(v) * 1e3) for k, v in t.items()}
        best = min(v for k, v in med.items() if k != "auto")
        ratio = med["auto"] / best
        ratios.append(ratio)
        where = sorted(set(sessions["auto"].placement.values()))
        all_cpu = set(where) <= {"cpu", "host"}
        c_times = _creation(blob, ["cpu", "auto"])
        create.append(c_times["auto"] - c_times["cpu"])
        row = {"model": case.name, "format": case.fmt, "ms": med, "predicted_ms": predicted, "auto_over_best": ratio,
               "auto_devices": where, "identical_to_cpu": same, "create_s": c_times,
               "p90_ms": {k: float(np.percentile(v, 90) * 1e3) for k, v in t.items()}}
        for k in med:
            if predicted.get(k) is not None and not math.isnan(predicted[k]):
                err = predicted[k] / med[k] - 1
                pairs.append((case.name, case.fmt, k, err))
                row.setdefault("prediction_error", {})[k] = err
        rows.append(row)
        say(f"{case.name}/{case.fmt}: " + ", ".join(f"{k} {med[k]:.3f} ms (pred {predicted.get(k) or math.nan:.3f})"
                                                   for k in med) + f"; auto/best {ratio:.3f}; auto on {where}"
            + ("" if same else "  OUTPUTS DIFFER") + (f"; lavapipe rule: {'ok' if all_cpu else 'NOT all CPU'}"
                                                       if cpu_only_vulkan else ""))
    say()
    header = ["model", "format", "cpu ms", "vulkan ms", "auto ms", "auto / best", "auto on", "pred cpu", "pred vulkan",
              "pred auto", "create auto - cpu"]
    table = []
    for r in rows:
        m, p = r["ms"], r["predicted_ms"]

        def f(v):
            return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.3f}"
        errs = r.get("prediction_error", {})
        table.append([r["model"], r["format"], f(m.get("cpu")), f(m.get("vulkan")), f(m.get("auto")),
                      f"{r['auto_over_best']:.3f}", "+".join(r["auto_devices"]),
                      f"{f(p.get('cpu'))} ({errs.get('cpu', math.nan):+.0%})",
                      f"{f(p.get('vulkan'))} ({errs.get('vulkan', math.nan):+.0%})" if "vulkan" in m else "-",
                      f"{f(p.get('auto'))} ({errs.get('auto', math.nan):+.0%})",
                      f"{(r['create_s']['auto'] - r['create_s']['cpu']) * 1e3:+.1f} ms"])
    say(markdown_table(header, table))
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else math.nan
    within = sum(1 for *_, e in pairs if abs(e) <= 0.10)
    say()
    say(f"auto / best single device: geomean {geo:.3f} (target <= 1.00), worst {max(ratios, default=math.nan):.3f} "
        f"(target <= 1.05)")
    say(f"predicted within +-10% of measured: {within} of {len(pairs)} (model, device) pairs "
        f"({within / max(len(pairs), 1):.0%}; target >= 90%)")
    say(f"warm auto session creation over cpu: median {np.median(create) * 1e3:+.1f} ms, worst "
        f"{max(create) * 1e3:+.1f} ms (target <= +20 ms)")
    report.update(rows=rows, auto_over_best_geomean=geo, prediction_within_10pct=[within, len(pairs)], text=lines)
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"dispatch-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(report, indent=1, default=str))
    print(f"wrote {out}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
