"""Fixed cost per run: one tiny convolution through vkinfer against ai-edge-litert (TFLite) and ONNX Runtime (ONNX).

    .venv/bin/python bench/fixed_cost.py [--repeat N] [--warmup W] [--vulkan-repeat N] [--no-vulkan]

The model (vkinfer.testing.field_zoo, seed 0) does almost no work: one 3x3 convolution, 8 -> 8 channels on an 8x8
map + ReLU (36,864 MACs), so a run's time is what every inference pays whatever its size: the Python call, input
and output copies, graph dispatch, for Vulkan the submit and the wait.
- tflite-i8 / tflite-u8: field_zoo.tiny_conv (CONV_2D with fused RELU, 8-bit input and output, no QUANTIZE) against
  ai-edge-litert's Interpreter on 1 thread (its default XNNPACK delegate): set_tensor, invoke, get_tensor.
- onnx: field_zoo.tiny_conv_onnx (one QLinearConv, uint8 NCHW activations, 7-bit int8 per-channel weights, so
  ORT is exact) against ONNX Runtime's CPUExecutionProvider with intra-op and inter-op 1 thread, sequential,
  spinning off (bench/models.py's ort_runner): session.run.
vkinfer rows: vkinfer.InferenceSession(model, device="cpu") with $VKINFER_CPU_THREADS=1, and device="vulkan"
(--no-vulkan skips it), each checked once for bit-exact outputs against the peer, then timed interleaved A/B with
it (bench/_common.interleaved) over --repeat runs (default 2000) after --warmup (default 200). Reported: median and
p90 of one run in microseconds, and vkinfer's median over the paired peer median (< 1: vkinfer is faster).
Results (conditions, rows with every timed run, the markdown table) go to bench/results/fixed_cost-<UTC time>.json.
The exit status is 1 if any vkinfer output differs from its peer's or vkinfer failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnxruntime as ort
from _common import cpu_model, git_revision, interleaved, markdown_table, package_version
from models import Runner, check, cpu_threads, litert_runner, ort_runner, vkinfer_runner, vulkan_device

import vkinfer
from vkinfer import cpu
from vkinfer.testing import field_zoo

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
MODEL_SEED = 0
INPUT_SEED = 20240601


def cases() -> list[tuple[str, bytes, dict[str, np.ndarray], str]]:
    """(format, serialized model, feed, peer name) for each variant of the tiny convolution."""
    out = []
    for dtype, fmt in (("int8", "tflite-i8"), ("uint8", "tflite-u8")):
        out.append((fmt, field_zoo.tiny_conv(MODEL_SEED, dtype), field_zoo.field_inputs("tiny_conv", INPUT_SEED, dtype),
                    "litert"))
    out.append(("onnx", field_zoo.tiny_conv_onnx(MODEL_SEED).SerializeToString(),
                field_zoo.field_inputs("tiny_conv_onnx", INPUT_SEED), "onnxruntime"))
    return out


def _us(t: np.ndarray) -> tuple[float, float]:
    return 1e6 * float(np.median(t)), 1e6 * float(np.percentile(t, 90))


def bench(fmt: str, model: bytes, feed: dict[str, np.ndarray], peer_name: str, device: str, warmup: int,
          repeat: int) -> dict:
    """Check vkinfer on `device` against the 1-thread peer once, then time both interleaved: one row."""
    peer: Runner = litert_runner(model, feed, 1) if peer_name == "litert" else ort_runner(model, feed, 1)
    row: dict = {"format": fmt, "runtime": f"vkinfer-{device}", "peer": peer_name, "repeat": repeat, "warmup": warmup}
    with cpu_threads(1):
        try:
            vk = vkinfer_runner(model, feed, device)
            chk = check(vk, peer, None, 0)
            tv, tp = interleaved(vk[0], peer[0], warmup, repeat)
        except Exception as e:
            return {**row, "ok": False, "exact": False, "error": f"{type(e).__name__}: {e}"}
    (row["us_median"], row["us_p90"]), (row["peer_us_median"], row["peer_us_p90"]) = _us(tv), _us(tp)
    row["ratio_vs_peer"] = row["us_median"] / row["peer_us_median"]
    row.update(chk)
    row["us"] = [round(1e6 * v, 2) for v in tv]
    row["peer_us"] = [round(1e6 * v, 2) for v in tp]
    return row


def table(rows: list[dict]) -> str:
    """The markdown table: one line per format and vkinfer device."""
    header = ["model", "format", "peer", "peer median us", "peer p90 us", "vkinfer", "median us", "p90 us",
              "vkinfer / peer", "output"]
    lines = []
    for r in rows:
        if "error" in r:
            lines.append(["tiny_conv", r["format"], r["peer"], "-", "-", r["runtime"], "-", "-", "-",
                          "ERROR " + r["error"][:80]])
            continue
        lines.append(["tiny_conv", r["format"], r["peer"], f"{r['peer_us_median']:.1f}", f"{r['peer_us_p90']:.1f}",
                      r["runtime"], f"{r['us_median']:.1f}", f"{r['us_p90']:.1f}", f"{r['ratio_vs_peer']:.2f}",
                      "exact" if r["exact"] else f"FAIL diff {r['max_abs_diff']}"])
    return markdown_table(header, lines)


def main(argv: list[str] | None = None) -> int:
    """Run the fixed-cost benchmark; 0 when every vkinfer output equals its peer's, 1 otherwise."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2000, help="timed runs per row (default 2000)")
    ap.add_argument("--warmup", type=int, default=200, help="untimed runs first (default 200)")
    ap.add_argument("--vulkan-repeat", type=int, default=None, help="timed runs of the Vulkan rows (default --repeat)")
    ap.add_argument("--no-vulkan", action="store_true", help="vkinfer's CPU backend only")
    args = ap.parse_args(argv)
    if args.repeat < 1 or args.warmup < 0 or (args.vulkan_repeat is not None and args.vulkan_repeat < 1):
        ap.error("--repeat and --vulkan-repeat must be >= 1 and --warmup >= 0")
    vk, vk_why = vulkan_device(args)
    now = datetime.now(UTC)
    blob = field_zoo.tiny_conv(MODEL_SEED, "int8")
    cond = {"date_utc": now.isoformat(timespec="seconds"), "host_cpu": cpu_model(), "cpu_count": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
            "onnxruntime": ort.__version__, "ai_edge_litert": package_version("ai-edge-litert"),
            "vkinfer": vkinfer.__version__, "vkinfer_git": git_revision(ROOT), "cpu_variant": cpu.default_variant(),
            "vulkan_device": vk, "vulkan_skipped": vk_why, "lp_num_threads": os.environ.get("LP_NUM_THREADS"),
            "repeat": args.repeat, "warmup": args.warmup, "vulkan_repeat": args.vulkan_repeat or args.repeat,
            "model": {"builder": "vkinfer.testing.field_zoo.tiny_conv / tiny_conv_onnx", "seed": MODEL_SEED,
                      **{k: v for k, v in field_zoo.describe(blob).items() if k != "input_type"}},
            "input_seed": INPUT_SEED,
            "threads": "1 everywhere: $VKINFER_CPU_THREADS=1; litert num_threads=1; ORT intra_op 1, inter_op 1, "
                       "sequential, session.intra_op.allow_spinning=0",
            "timing": "wall time of one run with the input set and every output read back, interleaved A/B with "
                      "the peer; ratio_vs_peer = vkinfer median / paired peer median"}
    print(f"fixed cost per run: tiny_conv ({cond['model']['macs']} MACs) on {cond['host_cpu']}, vkinfer cpu "
          f"({cond['cpu_variant']}) and vulkan ({vk['name'] if vk else vk_why}) vs ai-edge-litert "
          f"{cond['ai_edge_litert']} and onnxruntime {ort.__version__}, 1 thread; {args.repeat} runs after "
          f"{args.warmup} warm-ups, microseconds per run", flush=True)
    rows = []
    for fmt, model, feed, peer in cases():
        for device in ["cpu"] + (["vulkan"] if vk else []):
            repeat = (args.vulkan_repeat or args.repeat) if device == "vulkan" else args.repeat
            rows.append(bench(fmt, model, feed, peer, device, args.warmup, repeat))
            r = rows[-1]
            print(f"  {fmt:<9} {r['runtime']:<15} " + (f"{r['us_median']:8.1f} us vs {peer} {r['peer_us_median']:8.1f}"
                                                       if "error" not in r else r["error"]), flush=True)
    md = table(rows)
    print("\n" + md)
    ok = all(r["ok"] for r in rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"fixed_cost-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps({"conditions": cond, "all_exact": ok, "table": md, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    if not ok:
        print("some vkinfer rows failed or differ from the peer's", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
