"""Whole-model benchmark: vkinfer.InferenceSession on the CPU and on Vulkan against ONNX Runtime (ONNX models)
and the TFLite interpreter (.tflite models).

    .venv/bin/python bench/models.py [--repeat N] [--warmup W] [--vulkan-repeat N] [--only NAME[/FORMAT]]...
                                     [--quick] [--field] [--no-vulkan] [--threads T]

ONNX models: vkinfer.testing.zoo's mobilenet_v2 (width 1.0, 224x224, 1000 classes), mobilenet_v1 (the zoo's tiny
default), shufflenet_like, resnext_like, dilated_net and mlp, built with seed 0 and statically quantized twice,
formats qoperator and qdq: uint8 activations, per-channel symmetric int8 weights, reduce_range=True. The 7-bit
weights are what make a bit-for-bit comparison possible: ORT's uint8 x int8 kernels on x86 without VNNI (AVX2
vpmaddubsw) saturate pairs of products at int16, so with full-range per-channel weights ORT itself is not
exact; with 7-bit weights no pair can saturate and ORT's output is the exact integer result.

TFLite models (vkinfer.testing.tflite_zoo, seed 0, MEAN pooling): mobilenet_v2, format tflite-i8 (int8
MobileNetV2 1.0/224, 1000 classes, per-axis int8 weights), and tiny_cnn (16x16x3 input: CONV_2D, DEPTHWISE_CONV_2D,
ADD, MEAN, FULLY_CONNECTED, SOFTMAX), formats tflite-i8 and tflite-u8. Every model is cached under
build/models/bench/ (built once; delete that folder to rebuild them).

Field group (vkinfer.testing.field_zoo, seed 0, formats tflite-i8 and tflite-u8; part of the default set, alone
with --field): ds_cnn_kws (DS-CNN-S keyword spotter, 49x10 MFCC), mobilenet_v2_kws (59x49 spectrogram),
mobilenet_v1_vww (MobileNetV1 0.25, 96x96x3, visual wake words), resnet8 (MLPerf Tiny ResNet-8, 32x32x3). Their
inputs are the 8-bit features themselves (no QUANTIZE in the graph), fed as seeded uniform integers over the
type (field_zoo.field_inputs' distribution). They are rebuilt on every run (well under a second; never stale),
timed on 1 thread only (MCU-class models, where threads only add synchronisation), and get their own geometric
mean of the vkinfer/litert ratios and a markdown table (model, MACs, ops, litert and vkinfer medians, ratio).

For every model and format, with one seeded input (ONNX: zoo.random_inputs; TFLite: uniform(-1, 1) float32):
- the peer: onnxruntime for ONNX (CPUExecutionProvider, default graph optimizations, so QDQ is fused into
  integer kernels; inter-op 1 thread, intra-op 1 and T threads), ai-edge-litert's Interpreter for .tflite
  (its default CPU path, the XNNPACK delegate; num_threads 1 and T). T: --threads, default
  vkinfer.cpu.default_threads() (the process's CPUs within the fastest cluster, the big cores, capped by
  its cgroup quota).
- vkinfer cpu: the public vkinfer.InferenceSession(model, device="cpu") with $VKINFER_CPU_THREADS set to 1
  and to T (the C library reads it on every layer run; the session has no threads argument). Each thread
  count is timed interleaved A/B with the peer at the same count.
- vkinfer vulkan: InferenceSession(model, device="vulkan") ($VKINFER_CPU_THREADS=1 for any host-side op)
  against the peer on 1 thread, interleaved. Its first run (which builds the pipelines) is the correctness
  check, then the same warm-ups as the CPU rows and --vulkan-repeat timed runs, by default --repeat (50).
  50 runs are wanted, as for the other rows; but on this machine the Vulkan device is lavapipe, a CPU
  emulation of a GPU (its shaders run on its own LP_NUM_THREADS threads, default all cores), about 0.3 s per
  MobileNetV2 1.0/224 run, so these rows take most of the time: --vulkan-repeat 5 (say) gives a quicker,
  noisier look.
Times are the wall time of one inference with the inputs set and all outputs read back
(`session.run(None, feed)`; for TFLite set_tensor, invoke, get_tensor of every output): median and p90 in ms
over the timed runs after the warm-ups; `ratio_vs_peer` is vkinfer's median over the paired peer median
(< 1: vkinfer is faster).

Correctness, checked once per runtime and thread count before timing, against the peer at the same thread
count; every row records `max_abs_diff` (of the compared outputs, in steps for integer tensors) and
`frac_diff` (the fraction of compared values that differ):
- ONNX: every output must equal ORT's (bound 0: bit-exact).
- TFLite: the int8/uint8 ``logits`` may differ from TFLite's by at most 1 step (bound 1). TFLite requantizes
  with fixed-point multipliers, vkinfer (like ONNX Runtime) with float32 multipliers rounding half to even,
  so a value at a rounding tie may land one step apart; with MEAN pooling (these models) the outputs have been
  identical. The other outputs (DEQUANTIZE or SOFTMAX of the logits) are recorded per output, not bounded.
The exit status is 1 if any row is beyond its bound or vkinfer failed on it (an ERROR row). Results
(conditions, rows with every timed run, and the printed table) go to bench/results/models-<UTC time>.json.
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from _common import cpu_model, git_revision, interleaved, markdown_table, package_version

import vkinfer
from vkinfer import cpu
from vkinfer.testing import field_zoo, tflite_zoo, zoo

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
CACHE = ROOT / "build" / "models" / "bench"
MODELS = ("mobilenet_v2", "mobilenet_v1", "shufflenet_like", "resnext_like", "dilated_net", "mlp")
FORMATS = ("qoperator", "qdq")
MODEL_SEED = 0
INPUT_SEED = 20240601  # the calibration data uses seeds 0..7 (zoo.quantize); the timed input is another draw
QUANT = {"per_channel": True, "activation_type": "uint8", "weight_type": "int8", "reduce_range": True,
         "seed": 0, "num_calib": 8}
# (name, format) -> (cache file stem, builder keyword arguments, builder) for the .tflite models; the field
# group's stems are only names (those models are not cached).
TFLITE: dict[tuple[str, str], tuple[str, dict, Callable[..., bytes]]] = {
    ("mobilenet_v2", "tflite-i8"): ("mobilenet_v2-seed0-int8-224-w1.0-1000",
                                    {"seed": MODEL_SEED, "size": 224, "width": 1.0, "num_classes": 1000},
                                    tflite_zoo.mobilenet_v2),
    ("tiny_cnn", "tflite-i8"): ("tiny_cnn-seed0-int8-mean-softmax", {"seed": MODEL_SEED, "dtype": "int8"},
                                tflite_zoo.tiny_cnn),
    ("tiny_cnn", "tflite-u8"): ("tiny_cnn-seed0-uint8-mean-softmax", {"seed": MODEL_SEED, "dtype": "uint8"},
                                tflite_zoo.tiny_cnn),
}
TFLITE_FORMATS = {"int8": "tflite-i8", "uint8": "tflite-u8"}
TFLITE.update({(name, fmt): (f"field-{name}-seed{MODEL_SEED}-{d}", {"seed": MODEL_SEED, "dtype": d}, builder)
               for name, builder in field_zoo.FIELD_MODELS.items() for d, fmt in TFLITE_FORMATS.items()})
TFLITE_COMPARED = ("logits",)  # the tensor whose difference from TFLite is bounded
TFLITE_BOUND = 1  # steps of the int8/uint8 logits (fixed-point vs float32 requantization; see the docstring)
ONNX_BOUND = 0
QUICK = ("mlp", "mobilenet_v1", "tiny_cnn")
THREADS_ENV = "VKINFER_CPU_THREADS"


@dataclass(frozen=True)
class Case:
    """One model in one format: the unit of the table."""

    name: str
    fmt: str

    @property
    def tflite(self) -> bool:
        return self.fmt.startswith("tflite")

    @property
    def key(self) -> str:
        return f"{self.name}/{self.fmt}"

    @property
    def path(self) -> Path:
        """Where the model is cached; the name records how it was built."""
        if self.tflite:
            return CACHE / f"{TFLITE[self.name, self.fmt][0]}.tflite"
        return CACHE / f"{self.name}-seed{MODEL_SEED}-{self.fmt}-u8s8-perchannel-reducerange.onnx"

    @property
    def peer(self) -> str:
        return "litert" if self.tflite else "onnxruntime"

    @property
    def group(self) -> str:
        """"field" for field_zoo's models (1 thread, uncached, their own summary), else "main"."""
        return "field" if self.name in field_zoo.FIELD_MODELS else "main"


CASES = [Case(n, f) for n in MODELS for f in FORMATS] + [Case(n, f) for n, f in TFLITE]


def _build(case: Case) -> bytes:
    if case.tflite:
        _, kw, builder = TFLITE[case.name, case.fmt]
        return builder(**kw)
    logging.disable(logging.WARNING)  # quantize_static suggests pre-processing on every call
    try:
        q = zoo.quantize(zoo.BUILDERS[case.name](seed=MODEL_SEED), fmt=case.fmt, **QUANT)
    finally:
        logging.disable(logging.NOTSET)
    return q.SerializeToString()


def cached_model(case: Case) -> tuple[bytes, bool]:
    """The serialized model (built and cached on first use) and whether it was built now and cached. The field
    group is built every time instead: each takes well under a second, and a cache would outlive builder edits."""
    if case.group == "field":
        return _build(case), False
    path = case.path
    if path.exists():
        return path.read_bytes(), False
    data = _build(case)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(data)
    tmp.replace(path)  # atomic: a half-written file is never taken for a cached model
    return data, True


# A runner: (a callable doing one inference and returning every output, the outputs' names in that order).
Runner = tuple[Callable[[], list[np.ndarray]], list[str]]


def ort_runner(model: bytes, feed: dict[str, np.ndarray], threads: int) -> Runner:
    """ORT CPU session with vkinfer bench's peer options (vkinfer.benchmark.engines.onnxruntime.ort_session_options:
    `threads` intra-op threads, 1 inter-op thread, default graph optimizations, spinning off, with the
    measurement)."""
    from vkinfer.benchmark.engines.onnxruntime import ort_session_options

    o = ort.InferenceSession(model, ort_session_options(threads), providers=["CPUExecutionProvider"])
    return (lambda: o.run(None, feed)), [x.name for x in o.get_outputs()]


def litert_runner(model: bytes, feed: dict[str, np.ndarray], threads: int) -> Runner:
    """ai-edge-litert's Interpreter on `threads` threads: set the inputs, invoke, copy every output out."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=model, num_threads=threads)
    it.allocate_tensors()
    ins = [(d["index"], feed[d["name"]]) for d in it.get_input_details()]
    outs = it.get_output_details()
    idx = [d["index"] for d in outs]

    def run() -> list[np.ndarray]:
        for i, x in ins:
            it.set_tensor(i, x)
        it.invoke()
        return [it.get_tensor(i) for i in idx]  # get_tensor returns a copy

    return run, [d["name"] for d in outs]


def vkinfer_runner(model: bytes, feed: dict[str, np.ndarray], device: str) -> Runner:
    """The public vkinfer.InferenceSession on `device`, all outputs."""
    s = vkinfer.InferenceSession(model, device=device)
    return (lambda: s.run(None, feed)), [o.name for o in s.get_outputs()]


def tflite_feed(model: bytes) -> dict[str, np.ndarray]:
    """Seeded data for every input of the .tflite model: float32 inputs uniform(-1, 1) (the range tflite_zoo's
    calibration used), 8-bit inputs (field_zoo's) uniform over the type (field_zoo.field_inputs' distribution)."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=model)
    rng = np.random.default_rng(INPUT_SEED)
    feed = {}
    for d in it.get_input_details():
        dt, shape = np.dtype(d["dtype"]), tuple(d["shape"])
        if np.issubdtype(dt, np.integer):
            info = np.iinfo(dt)
            feed[d["name"]] = rng.integers(info.min, info.max, shape, endpoint=True, dtype=dt)
        else:
            feed[d["name"]] = rng.uniform(-1.0, 1.0, shape).astype(dt)
    return feed


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


def _diff(g: np.ndarray, w: np.ndarray) -> np.ndarray:
    """|g - w| elementwise (int64 for integer tensors, float64 otherwise; NaN against NaN counts as equal)."""
    if np.issubdtype(w.dtype, np.integer) or w.dtype == np.bool_:
        return np.abs(g.astype(np.int64) - w.astype(np.int64))
    g, w = g.astype(np.float64), w.astype(np.float64)
    same = (g == w) | (np.isnan(g) & np.isnan(w))
    return np.where(same, 0.0, np.nan_to_num(np.abs(g - w), nan=np.inf))


def check(got: Runner, want: Runner, compared: tuple[str, ...] | None, bound: float) -> dict:
    """Compare one run of `got` with one of `want`: per output max |difference| and fraction differing; over the
    `compared` outputs (None: all of `want`'s) whether they are exact and within `bound`."""
    g = dict(zip(got[1], got[0](), strict=True))
    w = dict(zip(want[1], want[0](), strict=True))
    per: dict[str, dict] = {}
    for name, b in w.items():
        a = g.get(name)
        if a is None or a.shape != b.shape or a.dtype != b.dtype:
            per[name] = {"max_abs_diff": None, "frac_diff": None,
                         "mismatch": "missing" if a is None else f"{a.dtype}{a.shape} vs {b.dtype}{b.shape}"}
            continue
        d = _diff(a, b)
        mx = (int(d.max()) if d.dtype.kind == "i" else float(d.max())) if d.size else 0
        per[name] = {"max_abs_diff": mx, "frac_diff": float(np.mean(d > 0)) if d.size else 0.0, "size": int(d.size)}
    names = list(w) if compared is None else list(compared)
    stats = [per.get(n, {"max_abs_diff": None}) for n in names]
    valid = all(s["max_abs_diff"] is not None for s in stats)
    mx = frac = None
    if valid:
        mx = max((s["max_abs_diff"] for s in stats), default=0)
        total = sum(s["size"] for s in stats)
        frac = sum(s["frac_diff"] * s["size"] for s in stats) / total if total else 0.0
    return {"compared": names, "diff_bound": bound, "exact": valid and mx == 0, "max_abs_diff": mx,
            "frac_diff": frac, "ok": valid and mx <= bound, "outputs": per}


def _row(case: Case, runtime: str, threads: int, t: np.ndarray, warmup: int, peer_t: np.ndarray | None = None,
         peer_threads: int | None = None, chk: dict | None = None) -> dict:
    """One table/JSON row: median and p90 ms of `t`, its ratio to the paired peer times, and the check."""
    med = 1e3 * float(np.median(t))
    row = {"model": case.name, "format": case.fmt, "group": case.group, "runtime": runtime, "threads": threads,
           "ms_median": med,
           "ms_p90": 1e3 * float(np.percentile(t, 90)), "repeat": len(t), "warmup": warmup}
    if peer_t is not None:
        row["peer"] = f"{case.peer}/{peer_threads}"
        row["peer_ms_median_paired"] = 1e3 * float(np.median(peer_t))
        row["peer_ms_p90_paired"] = 1e3 * float(np.percentile(peer_t, 90))
        row["ratio_vs_peer"] = med / row["peer_ms_median_paired"]
    if chk is not None:
        row.update(chk)
    row["ms"] = [round(1e3 * v, 4) for v in t]
    return row


def _paired(case: Case, model: bytes, feed: dict[str, np.ndarray], device: str, threads: int, peer: Runner,
            compared: tuple[str, ...] | None, bound: float, warmup: int, repeat: int) -> tuple[dict, np.ndarray]:
    """vkinfer on `device` with $VKINFER_CPU_THREADS=`threads`, checked against `peer` and timed interleaved with
    it: (the vkinfer row, the peer's times). A vkinfer error (a model it cannot load, a failed run) becomes a
    failing row, and the peer is then timed alone; an error of the peer itself ends the benchmark."""
    runtime = f"vkinfer-{device}"
    with cpu_threads(threads):
        try:
            vk = vkinfer_runner(model, feed, device)
            chk = check(vk, peer, compared, bound)  # for Vulkan also the first (pipeline-building) run
            tv, tp = interleaved(vk[0], peer[0], warmup, repeat)
        except Exception as e:
            _, tp = interleaved(lambda: None, peer[0], warmup, repeat)
            return {"model": case.name, "format": case.fmt, "group": case.group, "runtime": runtime,
                    "threads": threads,
                    "ms_median": None, "ms_p90": None, "repeat": 0, "warmup": warmup, "peer": f"{case.peer}/{threads}",
                    "exact": False, "ok": False, "error": f"{type(e).__name__}: {e}"}, tp
    return _row(case, runtime, threads, tv, warmup, tp, threads, chk), tp


def bench_case(case: Case, model: bytes, args: argparse.Namespace, vulkan: bool) -> list[dict]:
    """Check and time one model in one format on every runtime; rows in table order (the peer first)."""
    if case.tflite:
        feed = tflite_feed(model)
        peer_of, compared, bound = (lambda t: litert_runner(model, feed, t)), TFLITE_COMPARED, TFLITE_BOUND
    else:
        feed = zoo.random_inputs(onnx.load_from_string(model), seed=INPUT_SEED)
        peer_of, compared, bound = (lambda t: ort_runner(model, feed, t)), None, ONNX_BOUND
    peer_rows: list[dict] = []
    vk_rows: list[dict] = []
    for t in [1] if case.group == "field" else sorted({1, args.threads}):
        row, tp = _paired(case, model, feed, "cpu", t, peer_of(t), compared, bound, args.warmup, args.repeat)
        peer_rows.append(_row(case, case.peer, t, tp, args.warmup))
        vk_rows.append(row)
    rows = peer_rows + vk_rows
    if vulkan:
        row, _ = _paired(case, model, feed, "vulkan", 1, peer_of(1), compared, bound, args.warmup,
                         args.vulkan_repeat)
        rows.append(row)
    return rows


HEADER = (f"{'model':<16} {'format':<10} {'runtime':<15} {'threads':>7} {'median ms':>10} {'p90 ms':>9} "
          f"{'vs peer':>7} exact/diff")


def verdict(r: dict) -> str:
    """The table's exact/diff column: '-' for a peer row, 'exact', 'diff N (x%)' within the bound, else FAIL."""
    if "ok" not in r:
        return "-"
    if "error" in r:
        return "ERROR " + r["error"][:100]
    if r["exact"]:
        return "exact"
    if r["max_abs_diff"] is None:
        bad = [f"{n}: {r['outputs'][n]['mismatch'] if n in r['outputs'] else 'missing'}" for n in r["compared"]
               if "mismatch" in r["outputs"].get(n, {"mismatch": ""})]
        return "FAIL " + "; ".join(bad)
    text = f"{r['max_abs_diff']:g} ({100 * r['frac_diff']:.1f}%)"
    return ("diff " if r["ok"] else "FAIL ") + text + ("" if r["ok"] else f" > bound {r['diff_bound']}")


def format_row(r: dict) -> str:
    """One result as a line of the table under HEADER."""
    ratio = f"{r['ratio_vs_peer']:7.2f}" if "ratio_vs_peer" in r else f"{'-':>7}"
    med = f"{r['ms_median']:10.3f}" if r["ms_median"] is not None else f"{'-':>10}"
    p90 = f"{r['ms_p90']:9.3f}" if r["ms_p90"] is not None else f"{'-':>9}"
    return (f"{r['model']:<16} {r['format']:<10} {r['runtime']:<15} {r['threads']:>7} {med} {p90} {ratio} "
            f"{verdict(r)}")


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


def litert_missing() -> str | None:
    """Why the TFLite interpreter cannot be used, or None when it can."""
    try:
        from ai_edge_litert.interpreter import Interpreter  # noqa: F401
    except Exception as e:
        return f"ai-edge-litert not importable: {e}"
    return None


def conditions(args: argparse.Namespace, vk: dict | None, vk_why: str | None, now: datetime) -> dict:
    """Everything a reader needs to reproduce or discount these numbers."""
    return {
        "date_utc": now.isoformat(timespec="seconds"),
        "host_cpu": cpu_model(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(), "numpy": np.__version__, "onnx": onnx.__version__,
        "onnxruntime": ort.__version__, "ai_edge_litert": package_version("ai-edge-litert"),
        "tflite_schema_package": package_version("tflite"),
        "vkinfer": getattr(vkinfer, "__version__", None), "vkinfer_git": git_revision(ROOT),
        "cpu_variant": cpu.default_variant(), "cpu_variants_available": cpu.available_variants(),
        "threads": sorted({1, args.threads}), "threads_T": args.threads,
        "threads_how": f"vkinfer cpu: ${THREADS_ENV}; ORT: intra_op_num_threads (inter_op 1, sequential, "
                       "session.intra_op.allow_spinning=0); "
                       "litert: Interpreter(num_threads=...)",
        "vulkan_device": vk, "vulkan_device_name": vk["name"] if vk else None, "vulkan_skipped": vk_why,
        # lavapipe runs its shaders on CPU threads (LP_NUM_THREADS, default: all cores).
        "lp_num_threads": os.environ.get("LP_NUM_THREADS"),
        "repeat": args.repeat, "warmup": args.warmup,
        "vulkan_repeat": args.vulkan_repeat, "vulkan_warmup": args.warmup,
        "vulkan_note": f"vkinfer vulkan with ${THREADS_ENV}=1 for host-side ops, paired with the peer on 1 thread; "
                       "lavapipe is a slow CPU emulation, so --vulkan-repeat can lower its timed runs",
        "peers": {"onnx": "onnxruntime CPUExecutionProvider, default graph optimizations (ORT_ENABLE_ALL)",
                  "tflite": "ai-edge-litert Interpreter(model_content, num_threads), default op resolver "
                            "(XNNPACK delegate for CPU)"},
        "cases": [c.key for c in args.cases], "quick": args.quick, "field_only": args.field, "only": args.only,
        "tflite_skipped": args.tflite_skipped,
        "model_seed": MODEL_SEED, "input_seed": INPUT_SEED, "model_cache": str(CACHE.relative_to(ROOT)),
        "quantization": {**QUANT, "formats": list(FORMATS), "calibration": "MinMax, seeded standard-normal inputs",
                         "weights": "symmetric", "activations": "asymmetric"},
        "reduce_range_note": "7-bit weights: ORT's x86 u8 x s8 kernels (AVX2 vpmaddubsw) saturate pairs of products "
                             "at int16 with full-range weights; with reduce_range they cannot, so ORT is exact and "
                             "outputs are compared bit for bit",
        "tflite_models": {f"{n}/{f}": {"builder": f"vkinfer.testing.tflite_zoo.{b.__name__}", "kwargs": kw}
                          for (n, f), (_, kw, b) in TFLITE.items()},
        "tflite_input": "uniform(-1, 1) float32 from numpy default_rng(input_seed)",
        "bounds": {"onnx": f"every output bit-exact against ORT (max |diff| <= {ONNX_BOUND})",
                   "tflite": f"int8/uint8 {', '.join(TFLITE_COMPARED)} within {TFLITE_BOUND} step of TFLite's "
                             "(TFLite requantizes with fixed-point multipliers, vkinfer with float32 ones, round "
                             "half to even); other outputs recorded, not bounded"},
        "timing": "wall time of one inference (session.run(None, feed); litert: set_tensor, invoke, get_tensor "
                  "of every output), interleaved A/B with the peer at the same thread count; ratio_vs_peer = "
                  "vkinfer median / paired peer median (< 1: vkinfer is faster)",
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options, with --quick's smaller defaults filled in and the cases selected."""
    names = sorted({c.name for c in CASES})
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per model and runtime (default 50, --quick 5)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 5, --quick 2)")
    ap.add_argument("--vulkan-repeat", type=int, default=None,
                    help="timed runs of the Vulkan rows (default: --repeat); lavapipe is slow, fewer for a quick look")
    ap.add_argument("--only", action="append", default=None, metavar="NAME[/FORMAT]",
                    help=f"only this model (every format) or model/format; repeatable. Models: {', '.join(names)}; "
                         f"formats: {', '.join(sorted({c.fmt for c in CASES}))}")
    ap.add_argument("--quick", action="store_true", help=f"smoke check: {', '.join(QUICK)} only, few runs")
    ap.add_argument("--field", action="store_true",
                    help=f"the field group only: {', '.join(field_zoo.FIELD_MODELS)} (1 thread)")
    ap.add_argument("--no-vulkan", action="store_true", help="time vkinfer's CPU backend and the peers only")
    ap.add_argument("--threads", type=int, default=None, help="the multi-threaded count T (default: detected)")
    args = ap.parse_args(argv)
    args.repeat = args.repeat if args.repeat is not None else (5 if args.quick else 50)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    args.vulkan_repeat = args.vulkan_repeat if args.vulkan_repeat is not None else args.repeat
    # Read before this script sets $VKINFER_CPU_THREADS itself (default_threads() honours a value set by the user).
    args.threads = args.threads if args.threads is not None else cpu.default_threads()
    if args.repeat < 1 or args.vulkan_repeat < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--repeat, --vulkan-repeat and --threads must be >= 1 and --warmup >= 0")
    if args.only:
        cases = []
        for sel in args.only:
            hit = [c for c in CASES if sel in (c.name, c.key)]
            if not hit:
                ap.error(f"--only {sel}: not one of {', '.join(names)} or of {', '.join(c.key for c in CASES)}")
            cases += [c for c in hit if c not in cases]
    else:
        cases = [c for c in CASES if (not args.quick or c.name in QUICK) and (not args.field or c.group == "field")]
    args.tflite_skipped = litert_missing() if any(c.tflite for c in cases) else None
    if args.tflite_skipped:
        if args.only and all(c.tflite for c in cases):
            ap.error(args.tflite_skipped)
        cases = [c for c in cases if not c.tflite]
    args.cases = cases
    return args


def geomean(values: list[float]) -> float:
    """Geometric mean of positive values."""
    return math.exp(sum(math.log(v) for v in values) / len(values))


def field_markdown(rows: list[dict], models: dict[Case, bytes]) -> str:
    """The field group as a markdown table, one line per model and format (litert's median is the one paired with
    vkinfer's CPU row), then the geometric means of the ratios; "" without field rows."""
    if not models:
        return ""
    header = ["model", "format", "input", "MACs", "ops", "litert ms", "vkinfer cpu ms", "cpu / litert",
              "vkinfer vulkan ms", "vulkan / litert", "vs litert"]
    lines, ratios = [], {"cpu": [], "vulkan": []}

    def fmt(v: float | None, spec: str) -> str:
        return "-" if v is None else format(v, spec)

    for case, blob in models.items():
        d = field_zoo.describe(blob)
        got = {r["runtime"]: r for r in rows if (r["model"], r["format"]) == (case.name, case.fmt)}
        cpu_r, vk_r = got.get("vkinfer-cpu", {}), got.get("vkinfer-vulkan", {})
        for key, r in (("cpu", cpu_r), ("vulkan", vk_r)):
            if r.get("ratio_vs_peer") is not None:
                ratios[key].append(r["ratio_vs_peer"])
        lines.append([case.name, case.fmt, "x".join(map(str, d["input_shape"])) + " " + d["input_type"],
                      f"{d['macs'] / 1e6:.2f} M", str(d["ops"]), fmt(cpu_r.get("peer_ms_median_paired"), ".3f"),
                      fmt(cpu_r.get("ms_median"), ".3f"), fmt(cpu_r.get("ratio_vs_peer"), ".2f"),
                      fmt(vk_r.get("ms_median"), ".3f"), fmt(vk_r.get("ratio_vs_peer"), ".2f"),
                      "; ".join(f"{k} {verdict(r)}" for k, r in (("cpu", cpu_r), ("vulkan", vk_r)) if r)])
    lines.append(["**geomean**", "", "", "", "", "", "", fmt(geomean(ratios["cpu"]) if ratios["cpu"] else None, ".2f"),
                  "", fmt(geomean(ratios["vulkan"]) if ratios["vulkan"] else None, ".2f"), ""])
    return markdown_table(header, lines)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every vkinfer output is within its bound of the peer's, 1 otherwise."""
    args = parse_args(argv)
    now = datetime.now(UTC)
    vk, vk_why = vulkan_device(args)
    cond = conditions(args, vk, vk_why, now)
    print(f"vkinfer {cond['vkinfer']} cpu ({cond['cpu_variant']}, 1 and T={args.threads} threads) and vulkan "
          f"({vk['name'] if vk else vk_why}; paired with the peer on 1 thread) against onnxruntime "
          f"{ort.__version__} (ONNX) and ai-edge-litert {cond['ai_edge_litert']} (TFLite)")
    print(f"host: {cond['host_cpu']}, {cond['cpu_count']} cores; repeat {args.repeat}, warmup {args.warmup} "
          f"(vulkan: {args.vulkan_repeat}, {args.warmup}); ms per inference; 'vs peer' < 1 means vkinfer is faster; "
          f"bounds: ONNX bit-exact, TFLite logits within {TFLITE_BOUND} step")
    if args.tflite_skipped:
        print(f"TFLite models skipped: {args.tflite_skipped}")
    built = []
    models = {}
    for case in args.cases:
        models[case], new = cached_model(case)
        if new:
            built.append(str(case.path.relative_to(ROOT)))
    if built:
        print(f"built and cached {len(built)} model(s) under {CACHE.relative_to(ROOT)}/")
    cond["models_built_this_run"] = built
    table = [HEADER]
    print(HEADER)
    rows: list[dict] = []
    for case, data in models.items():
        for r in bench_case(case, data, args, vk is not None):
            rows.append(r)
            table.append(format_row(r))
            print(table[-1], flush=True)
    all_ok = all(r["ok"] for r in rows if "ok" in r)
    summary: dict = {"all_within_bound": all_ok,
                     "all_exact": all(r["exact"] for r in rows if "exact" in r),
                     "geomean_ratio_vs_peer": {}}
    # One geometric mean per group: the field models' own, apart from (and not diluting) the main set's.
    groups = sorted({(r["group"], r["peer"].split("/")[0], r["runtime"], r["threads"]) for r in rows
                     if "ratio_vs_peer" in r}, key=lambda k: (k[0] != "main", k))
    for grp, peer, runtime, t in groups:
        g = geomean([r["ratio_vs_peer"] for r in rows if "ratio_vs_peer" in r and r["group"] == grp
                     and r["runtime"] == runtime and r["threads"] == t and r["peer"].startswith(peer + "/")])
        prefix = "" if grp == "main" else f"{grp}: "
        summary["geomean_ratio_vs_peer"][f"{prefix}{runtime}/{t} vs {peer}"] = g
        table.append(f"geomean {prefix}{runtime} on {t} thread(s) / {peer} on {t}: {g:.2f}")
        print(table[-1])
    field = field_markdown(rows, {c: m for c, m in models.items() if c.group == "field"})
    if field:
        print("\n" + field)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"models-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps({"conditions": cond, "summary": summary, "table": table, "field_markdown": field,
                               "rows": rows}, indent=1) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    if not all_ok:
        print("some vkinfer rows failed or differ from the peer's by more than the bound", file=sys.stderr)
    # A benchmark of wrong answers is worthless: fail loudly.
    return 0 if all_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
