"""Whole-model benchmark: vkinfer.InferenceSession on the CPU and on Vulkan against ONNX Runtime on the zoo models.

    .venv/bin/python bench/models.py [--repeat N] [--warmup W] [--only NAME] [--quick] [--no-vulkan] [--threads T]

Models: vkinfer.models.zoo's mobilenet_v2 (width 1.0, 224x224, 1000 classes), mobilenet_v1 (the zoo's tiny
default), shufflenet_like, resnext_like, dilated_net and mlp, built with seed 0 and statically quantized twice,
QOperator and QDQ: uint8 activations, per-channel symmetric int8 weights, reduce_range=True. The 7-bit weights
are what make a bit-for-bit comparison possible: ORT's uint8 x int8 kernels on x86 without VNNI (AVX2
vpmaddubsw) saturate pairs of products at int16, so with full-range per-channel weights ORT itself is not
exact; with 7-bit weights no pair can saturate and ORT's output is the exact integer result. The quantized
models are cached under build/models/bench/ (built once; delete that folder to rebuild them).

For every model and format, with the same seeded float input:
- onnxruntime: CPUExecutionProvider, default graph optimizations (QDQ is fused into integer kernels),
  inter-op 1 thread, intra-op 1 and T threads (T: --threads, default vkinfer.cpu.default_threads()).
- vkinfer cpu: the public vkinfer.InferenceSession(model, device="cpu") with $VKINFER_CPU_THREADS set to 1
  and to T (the C library reads it on every layer run; the session has no threads argument). Each thread
  count is timed interleaved A/B with ORT at the same count.
- vkinfer vulkan: InferenceSession(model, device="vulkan") against ORT on 1 thread, interleaved, with
  min(repeat, 5) timed runs after min(warmup, 2) warm-ups, because lavapipe (a CPU Vulkan driver) is slow.
Times are the wall time of `session.run(None, feed)`: median and p90 in ms over the timed runs after the
warm-ups. `exact`: the vkinfer output equals ORT's (np.array_equal), checked once per runtime and thread count
before timing. The exit status is 1 if any output is not exact. Results go to
bench/results/models-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import platform
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from _common import cpu_model, interleaved

import vkinfer
from vkinfer import cpu
from vkinfer.models import zoo

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
CACHE = ROOT / "build" / "models" / "bench"
MODELS = ("mobilenet_v2", "mobilenet_v1", "shufflenet_like", "resnext_like", "dilated_net", "mlp")
QUICK = ("mlp", "mobilenet_v1")
FORMATS = ("qoperator", "qdq")
MODEL_SEED = 0
INPUT_SEED = 20240601  # the calibration data uses seeds 0..7 (zoo.quantize); the timed input is another draw
QUANT = {"per_channel": True, "activation_type": "uint8", "weight_type": "int8", "reduce_range": True,
         "seed": 0, "num_calib": 8}
VK_MAX_REPEAT = 5
VK_MAX_WARMUP = 2
THREADS_ENV = "VKINFER_CPU_THREADS"


def model_path(name: str, fmt: str) -> Path:
    """Where the quantized model `name` in format `fmt` is cached; the name records the quantization settings."""
    return CACHE / f"{name}-seed{MODEL_SEED}-{fmt}-u8s8-perchannel-reducerange.onnx"


def quantized_model(name: str, fmt: str) -> tuple[bytes, bool]:
    """The serialized quantized model (built and cached on first use) and whether it was built now."""
    path = model_path(name, fmt)
    if path.exists():
        return path.read_bytes(), False
    logging.disable(logging.WARNING)  # quantize_static suggests pre-processing on every call
    try:
        q = zoo.quantize(zoo.BUILDERS[name](seed=MODEL_SEED), fmt=fmt, **QUANT)
    finally:
        logging.disable(logging.NOTSET)
    data = q.SerializeToString()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(path)  # atomic: a half-written file is never taken for a cached model
    return data, True


def ort_session(model: bytes, threads: int) -> ort.InferenceSession:
    """ORT CPU session with `threads` intra-op threads, 1 inter-op thread and default graph optimizations."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


@contextlib.contextmanager
def cpu_threads(n: int) -> Iterator[None]:
    """Set $VKINFER_CPU_THREADS to `n` for the block (the C library reads it on each run), then restore it."""
    old = os.environ.get(THREADS_ENV)
    os.environ[THREADS_ENV] = str(n)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(THREADS_ENV, None)
        else:
            os.environ[THREADS_ENV] = old


def _row(model: str, fmt: str, runtime: str, threads: int, t: np.ndarray, ort_t: np.ndarray | None,
         exact: bool | None, warmup: int) -> dict:
    """One table/JSON row: median and p90 ms of `t`, and its ratio to the paired ORT times `ort_t`."""
    med = 1e3 * float(np.median(t))
    row = {"model": model, "format": fmt, "runtime": runtime, "threads": threads, "ms_median": med,
           "ms_p90": 1e3 * float(np.percentile(t, 90)), "repeat": len(t), "warmup": warmup, "exact": exact,
           "ms": [round(1e3 * v, 4) for v in t]}
    if ort_t is not None:
        row["ort_ms_median_paired"] = 1e3 * float(np.median(ort_t))
        row["ratio_vs_ort"] = med / row["ort_ms_median_paired"]
    return row


def bench_model(name: str, fmt: str, model: bytes, args: argparse.Namespace, vulkan: bool) -> list[dict]:
    """Check and time one quantized model on every runtime; rows in table order (ORT first)."""
    feed = zoo.random_inputs(onnx.load_from_string(model), seed=INPUT_SEED)
    rows: list[dict] = []
    threads = sorted({1, args.threads})
    ort_rows: list[dict] = []
    vk_rows: list[dict] = []
    ref = None
    for t in threads:
        o = ort_session(model, t)
        y_ort = o.run(None, feed)
        if ref is None:
            ref = y_ort
        with cpu_threads(t):
            s = vkinfer.InferenceSession(model, device="cpu")
            y = s.run(None, feed)
            exact = len(y) == len(ref) and all(np.array_equal(a, b) for a, b in zip(y, ref, strict=True))
            tv, to = interleaved(lambda s=s: s.run(None, feed), lambda o=o: o.run(None, feed), args.warmup,
                                 args.repeat)
        ort_rows.append(_row(name, fmt, "onnxruntime", t, to, None, None, args.warmup))
        vk_rows.append(_row(name, fmt, "vkinfer-cpu", t, tv, to, exact, args.warmup))
        del s, o
    rows += ort_rows + vk_rows
    if vulkan:
        o = ort_session(model, 1)
        s = vkinfer.InferenceSession(model, device="vulkan")
        y = s.run(None, feed)  # also the first (pipeline-building) run
        exact = len(y) == len(ref) and all(np.array_equal(a, b) for a, b in zip(y, ref, strict=True))
        warm, rep = min(args.warmup, VK_MAX_WARMUP), min(args.repeat, VK_MAX_REPEAT)
        tv, to = interleaved(lambda: s.run(None, feed), lambda: o.run(None, feed), warm, rep)
        rows.append(_row(name, fmt, "vkinfer-vulkan", 1, tv, to, exact, warm))
        del s, o
    return rows


HEADER = (f"{'model':<16} {'format':<10} {'runtime':<15} {'threads':>7} {'median ms':>10} {'p90 ms':>9} "
          f"{'vs ORT':>7} exact")


def format_row(r: dict) -> str:
    """One result as a line of the table under HEADER."""
    ratio = f"{r['ratio_vs_ort']:7.2f}" if "ratio_vs_ort" in r else f"{'-':>7}"
    exact = "-" if r["exact"] is None else ("yes" if r["exact"] else "NO")
    return (f"{r['model']:<16} {r['format']:<10} {r['runtime']:<15} {r['threads']:>7} {r['ms_median']:10.3f} "
            f"{r['ms_p90']:9.3f} {ratio} {exact}")


def vulkan_device(args: argparse.Namespace) -> tuple[dict | None, str | None]:
    """The Vulkan device's description (None with --no-vulkan or without one) and why there is none."""
    if args.no_vulkan:
        return None, "--no-vulkan"
    try:
        from vkinfer._vk import get_device

        info = get_device().info
    except Exception as e:  # no loader, no device: time the CPU side only
        return None, f"no Vulkan device: {e}"
    return {"name": info.name, "type": info.type, "driver": info.driver, "driver_info": info.driver_info,
            "api_version": info.api_version}, None


def conditions(args: argparse.Namespace, vk: dict | None, vk_why: str | None, now: datetime) -> dict:
    """Everything a reader needs to reproduce or discount these numbers."""
    return {
        "date_utc": now.isoformat(timespec="seconds"),
        "host_cpu": cpu_model(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(), "numpy": np.__version__, "onnx": onnx.__version__,
        "onnxruntime": ort.__version__, "vkinfer": getattr(vkinfer, "__version__", None),
        "cpu_variant": cpu.default_variant(), "cpu_variants_available": cpu.available_variants(),
        "threads": sorted({1, args.threads}), "threads_T": args.threads,
        "threads_how": f"vkinfer cpu: ${THREADS_ENV}; ORT: intra_op_num_threads (inter_op 1, sequential)",
        "vulkan_device": vk, "vulkan_skipped": vk_why,
        # lavapipe runs its shaders on CPU threads (LP_NUM_THREADS, default: all cores).
        "lp_num_threads": os.environ.get("LP_NUM_THREADS"),
        "repeat": args.repeat, "warmup": args.warmup,
        "vulkan_repeat": min(args.repeat, VK_MAX_REPEAT), "vulkan_warmup": min(args.warmup, VK_MAX_WARMUP),
        "vulkan_repeat_note": f"lavapipe is slow: Vulkan gets min(repeat, {VK_MAX_REPEAT}) timed runs after "
                              f"min(warmup, {VK_MAX_WARMUP}) warm-ups, paired with ORT on 1 thread",
        "ort_graph_optimization": "default (ORT_ENABLE_ALL)",
        "models": args.models, "quick": args.quick, "only": args.only,
        "model_seed": MODEL_SEED, "input_seed": INPUT_SEED, "model_cache": str(CACHE.relative_to(ROOT)),
        "quantization": {**QUANT, "formats": list(FORMATS), "calibration": "MinMax, seeded standard-normal inputs",
                         "weights": "symmetric", "activations": "asymmetric"},
        "reduce_range_note": "7-bit weights: ORT's x86 u8 x s8 kernels (AVX2 vpmaddubsw) saturate pairs of products "
                             "at int16 with full-range weights; with reduce_range they cannot, so ORT is exact and "
                             "outputs are compared bit for bit",
        "timing": "wall time of session.run(None, feed), interleaved A/B with ORT at the same thread count; "
                  "ratio_vs_ort = vkinfer median / paired ORT median (< 1: vkinfer is faster)",
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options, with --quick's smaller defaults filled in."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per model and runtime (default 50, --quick 5)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 5, --quick 2)")
    ap.add_argument("--only", choices=MODELS, default=None, help="only this model")
    ap.add_argument("--quick", action="store_true", help=f"smoke check: {', '.join(QUICK)} only, few runs")
    ap.add_argument("--no-vulkan", action="store_true", help="time vkinfer's CPU backend and ORT only")
    ap.add_argument("--threads", type=int, default=None, help="the multi-threaded count T (default: detected)")
    args = ap.parse_args(argv)
    args.repeat = args.repeat if args.repeat is not None else (5 if args.quick else 50)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    # Read before this script sets $VKINFER_CPU_THREADS itself (default_threads() honours a value set by the user).
    args.threads = args.threads if args.threads is not None else cpu.default_threads()
    if args.repeat < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--repeat and --threads must be >= 1 and --warmup >= 0")
    args.models = [args.only] if args.only else list(QUICK if args.quick else MODELS)
    return args


def geomean(values: list[float]) -> float:
    """Geometric mean of positive values."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every vkinfer output equals ORT's, 1 otherwise."""
    args = parse_args(argv)
    now = datetime.now(UTC)
    vk, vk_why = vulkan_device(args)
    cond = conditions(args, vk, vk_why, now)
    print(f"onnxruntime {ort.__version__} (CPU provider) against vkinfer cpu ({cond['cpu_variant']}, 1 and "
          f"T={args.threads} threads) and vulkan ({vk['name'] if vk else vk_why}; 1-thread ORT column)")
    print(f"host: {cond['host_cpu']}, {cond['cpu_count']} cores; repeat {args.repeat}, warmup {args.warmup} "
          f"(vulkan: {cond['vulkan_repeat']}, {cond['vulkan_warmup']}); ms per session.run; "
          "'vs ORT' < 1 means vkinfer is faster")
    print("models: seed 0, QOperator and QDQ, uint8 activations, per-channel int8 weights, reduce_range=True")
    built = []
    models = {}
    for name in args.models:
        for fmt in FORMATS:
            models[name, fmt], new = quantized_model(name, fmt)
            if new:
                built.append(str(model_path(name, fmt).relative_to(ROOT)))
    if built:
        print(f"built and cached {len(built)} quantized model(s) under {CACHE.relative_to(ROOT)}/")
    cond["models_built_this_run"] = built
    print(HEADER)
    rows: list[dict] = []
    for (name, fmt), data in models.items():
        for r in bench_model(name, fmt, data, args, vk is not None):
            rows.append(r)
            print(format_row(r), flush=True)
    all_exact = all(r["exact"] for r in rows if r["exact"] is not None)
    summary: dict = {"all_exact": all_exact, "geomean_ratio_vs_ort": {}}
    for runtime, t in sorted({(r["runtime"], r["threads"]) for r in rows if "ratio_vs_ort" in r}):
        g = geomean([r["ratio_vs_ort"] for r in rows if r["runtime"] == runtime and r["threads"] == t])
        summary["geomean_ratio_vs_ort"][f"{runtime}/{t}"] = g
        print(f"geomean {runtime} on {t} thread(s) / ORT on {t}: {g:.2f}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"models-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps({"conditions": cond, "summary": summary, "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    if not all_exact:
        print("some vkinfer outputs differ from ORT's", file=sys.stderr)
    # A benchmark of wrong answers is worthless: fail loudly.
    return 0 if all_exact else 1


if __name__ == "__main__":
    raise SystemExit(main())
