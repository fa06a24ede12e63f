"""Real int8 TFLite models from public PyPI wheels (issue 25): vkinfer against LiteRT, model by model.

    .venv/bin/python bench/real_tflite.py [--only NAME]... [--repeat N] [--calls C] [--frames F] [--fetch] [--list]

The set and the cache are vkinfer.testing.real_tflite (pymicro-wakeword 2.5.0's four streaming micro_wakeword
models, pinned by package, version and sha256; cache $VKINFER_REAL_MODELS or build/real-models). The network is used
only with --fetch (pip download of the wheel the cache lacks).

Per model, one thread, the process pinned to one core:
- **Exactness:** F frames (default 300) streamed through a fresh LiteRT interpreter and a fresh vkinfer session
  (device="cpu"), every output compared byte for byte; at frame F*2/3 both restart (vkinfer's reset_state, a new
  interpreter), and every 7th vkinfer run asks for its outputs by name (the checked path). The state carries over
  between calls, so one wrong step shows in every later frame.
- **Time:** a block of C calls (default 2000) of each, A/B interleaved R times (default 7, _common.interleaved):
  LiteRT timed as a user calls it (set_tensor + invoke + get_tensor), vkinfer as `run(None, feed)`; the frames
  cycle, so the state keeps moving. Per-call microseconds are the block's time / C; the ratio is of the medians
  (< 1: vkinfer is faster). LiteRT's invoke alone is reported too.
- Where vkinfer's nodes run (cpu / vulkan / host) and its native calls per run.
Results go to bench/results/real_tflite-<UTC time>.json; the table is printed. Exit status 1 when a model failed
to run or an output differed.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from _common import cpu_model, git_revision, interleaved, markdown_table, package_version
from real_models import pin_cores, where

import vkinfer
from vkinfer.testing import real_tflite as rt

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
FRAME_SEED = 20240601


def _interpreter(path: Path):
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(str(path), num_threads=1)
    it.allocate_tensors()
    return it, it.get_input_details()[0]["index"], it.get_output_details()[0]["index"]


def exactness(name: str, count: int) -> dict:
    """Stream `count` frames through LiteRT and vkinfer from a fresh state; compare every output."""
    path = rt.model_path(name)
    xs = rt.frames(name, count, seed=FRAME_SEED + 1)
    it, i_in, i_out = _interpreter(path)
    sess = vkinfer.InferenceSession(str(path), device="cpu", threads=1)
    iname, oname = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    restart, bad, distinct = (2 * count) // 3, [], set()
    for k, x in enumerate(xs):
        if k == restart:
            sess.reset_state()
            it, i_in, i_out = _interpreter(path)
        it.set_tensor(i_in, x)
        it.invoke()
        want = it.get_tensor(i_out)
        got = sess.run([oname] if k % 7 == 3 else None, {iname: x})[0]
        distinct.add(want.tobytes())
        if got.dtype != want.dtype or got.shape != want.shape or got.tobytes() != want.tobytes():
            bad.append(k)
    return {"frames": count, "mismatched_frames": bad[:20], "mismatches": len(bad), "distinct_outputs": len(distinct),
            "stateful": bool(getattr(sess, "_stateful", None) is not None), **where(sess)}


def timing(name: str, calls: int, repeat: int) -> dict:
    """Per-call microseconds of LiteRT (set_tensor + invoke + get_tensor) and vkinfer run, interleaved blocks."""
    path = rt.model_path(name)
    xs = rt.frames(name, 64, seed=FRAME_SEED)
    it, i_in, i_out = _interpreter(path)
    sess = vkinfer.InferenceSession(str(path), device="cpu", threads=1)
    iname = sess.get_inputs()[0].name

    def litert_block():
        for k in range(calls):
            it.set_tensor(i_in, xs[k & 63])
            it.invoke()
            it.get_tensor(i_out)

    def vkinfer_block():
        for k in range(calls):
            sess.run(None, {iname: xs[k & 63]})

    tl, tv = interleaved(litert_block, vkinfer_block, warmup=1, repeat=repeat)
    it.set_tensor(i_in, xs[0])
    t0 = time.perf_counter()
    for _ in range(calls):
        it.invoke()
    invoke_us = (time.perf_counter() - t0) / calls * 1e6
    lit, vk = float(np.median(tl)) / calls * 1e6, float(np.median(tv)) / calls * 1e6
    return {"litert_us": lit, "vkinfer_us": vk, "ratio": vk / lit, "litert_invoke_only_us": invoke_us,
            "litert_runs_us": [round(float(t) / calls * 1e6, 3) for t in tl],
            "vkinfer_runs_us": [round(float(t) / calls * 1e6, 3) for t in tv]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", choices=list(rt.MODELS), default=None, help="only this model")
    ap.add_argument("--repeat", type=int, default=7, help="interleaved timed blocks per side (default 7)")
    ap.add_argument("--calls", type=int, default=2000, help="calls per timed block (default 2000)")
    ap.add_argument("--frames", type=int, default=300, help="frames streamed for the exactness check (default 300)")
    ap.add_argument("--fetch", action="store_true", help="pip download the wheel the cache lacks (network)")
    ap.add_argument("--list", action="store_true", help="list the cached models, then stop")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.calls < 1 or args.frames < 3:
        ap.error("--repeat and --calls must be >= 1, --frames >= 3")
    args.names = args.only or list(rt.MODELS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        have = set(rt.cached())
        print(f"cache {rt.cache_dir()}:")
        for name in rt.MODELS:
            print(f"  {name:16s} {'present' if name in have else '-'}")
        return 0
    if args.fetch:
        rt.fetch(args.names)
    now = datetime.now(UTC)
    cores = pin_cores(1)
    cond = {"date_utc": now.isoformat(timespec="seconds"), "host_cpu": cpu_model(), "pinned_cores": cores,
            "platform": platform.platform(), "python": platform.python_version(),
            "ai_edge_litert": package_version("ai-edge-litert"), "vkinfer_git": git_revision(ROOT),
            "repeat": args.repeat, "calls": args.calls, "frames": args.frames, "frame_seed": FRAME_SEED,
            "set": {n: {"package": rt.MODELS[n].wheel, "version": rt.WHEELS[rt.MODELS[n].wheel].version,
                        "member": rt.MODELS[n].member, "sha256": rt.MODELS[n].sha256} for n in args.names},
            "note": "other processes may share the machine: medians are the figures to read"}
    print(f"vkinfer cpu vs ai-edge-litert {cond['ai_edge_litert']}; {cond['host_cpu']}, pinned to core "
          f"{cores[0]}, 1 thread, {args.repeat} x {args.calls} calls interleaved")
    rows = []
    for name in args.names:
        row = {"model": name, "package": f"{rt.MODELS[name].wheel}=={rt.WHEELS[rt.MODELS[name].wheel].version}"}
        missing = rt.missing_reason(name)
        try:
            if missing:
                raise RuntimeError(missing)
            row.update(exactness(name, args.frames))
            row.update(timing(name, args.calls, args.repeat))
        except Exception as e:  # reported in the table; the exit status says so
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        rows.append(row)
        print(f"  {name}: " + (row["error"][:120] if "error" in row else
              f"LiteRT {row['litert_us']:.2f} us, vkinfer {row['vkinfer_us']:.2f} us, ratio {row['ratio']:.2f}, "
              f"{row['mismatches']} of {row['frames']} frames differ"), flush=True)
    lines = []
    for r in rows:
        if "error" in r:
            lines.append([r["model"], "-", "-", "-", "-", "-", "-", "ERROR " + r["error"][:160]])
            continue
        n = r["nodes"]
        lines.append([r["model"], f"{r['litert_us']:.2f}", f"{r['litert_invoke_only_us']:.2f}",
                      f"{r['vkinfer_us']:.2f}", f"{r['ratio']:.2f}", f"{n['cpu']}/{n['vulkan']}/{n['host']}",
                      str(r["native_calls"]),
                      "bit-identical" if not r["mismatches"] else f"{r['mismatches']} frames differ"])
    ran = [r for r in rows if "error" not in r]
    geo = math.exp(sum(math.log(r["ratio"]) for r in ran) / len(ran)) if ran else None
    text = ("real TFLite models (1 thread; us per call; ratio = vkinfer cpu / LiteRT set+invoke+get; calls: native "
            f"calls per run; frames: {args.frames} streamed, state carried)\n\n"
            + markdown_table(["model", "LiteRT us", "LiteRT invoke us", "vkinfer us", "ratio", "cpu/vk/host",
                              "calls", f"{args.frames} frames vs LiteRT"], lines)
            + (f"\n\n{len(ran)} of {len(rows)} ran: geomean vkinfer/LiteRT {geo:.2f}" if ran else "\n\nnone ran"))
    print("\n" + text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"real_tflite-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps({"conditions": cond, "geomean_ratio": geo, "tables": text, "rows": rows}, indent=1,
                              default=str) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    failed = len(rows) - len(ran) + sum(r["mismatches"] > 0 for r in ran)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
