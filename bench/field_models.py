"""The in-tree field models and ops of issue 11 side by side with their oracles: vkinfer against ONNX Runtime and
ai-edge-litert (the real pretrained CNNs of issue 25 are bench/real_models.py).

    .venv/bin/python bench/field_models.py [--repeat N] [--warmup W] [--vulkan-repeat N] [--windows N]
                                           [--only NAME]... [--quick] [--no-vulkan]

Three tables, all on 1 thread with the process pinned to one core (os.sched_setaffinity; lavapipe's shader
threads inherit the pin), A/B interleaved (_common.interleaved), median and p90 over the timed runs after the
warm-ups; "vs ORT" / "vs litert" is vkinfer's median over the paired peer's median (< 1: vkinfer is faster):

1. models: vkinfer.testing.field_onnx's four builders (seed 0, default sizes), quantized as a user would
   (field_onnx.quantize: quant_pre_process, then quantize_static) in QDQ and QOperator: uint8 activations,
   per-channel int8 weights, reduce_range=True (7-bit weights: ORT's AVX2 u8 x s8 kernels cannot saturate).
   Input zoo.random_inputs(model, INPUT_SEED). Rows: ORT (CPU EP, ORT_ENABLE_ALL, intra/inter-op 1 thread,
   spinning off), vkinfer device="cpu" (threads=1) and device="vulkan" (threads=1 for host nodes; on this machine
   lavapipe, a CPU emulation: fewer runs). Each vkinfer row: where its nodes run (sess.placement: cpu / vulkan /
   host), native graph calls and Vulkan submits per run (the compiled Plan's), and the max |difference| of each
   output from ORT's (recorded, not asserted: these outputs are float, and ORT's float kernels between the
   quantized ops are not always reproducible bit for bit; tests/models/test_field_onnx.py pins the bounds).
2. kws: tflite_zoo.streaming_kws(0) (int8, state in resource variables) against one ai-edge-litert Interpreter
   (num_threads=1) kept across calls; --windows consecutive frames (seeded uniform(-1.2, 1.2)), each runtime
   fed every frame once, the order rotated per window; per-window latency (the first --warmup windows untimed)
   and the windows whose outputs all equal litert's.
3. ops: single-node 8-bit models built here (onnx_builder.make_model) at the field models' shapes (HardSwish and SiLU
   tables, channel Split, nearest Resize x2, Concat on axis 2 as in the YOLOv8 head, QDQ ConvTranspose 2x2/2,
   com.microsoft QLinearSoftmax over the last axis as in the YOLOv8 DFL), vkinfer cpu against ORT.
Results (conditions, rows with every timed run, the tables) go to bench/results/field_models-<UTC time>.json.
The exit status is 1 only when a row failed to run (an ERROR row); differences are reported, not judged.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from _common import cpu_model, git_revision, interleaved, markdown_table, package_version
from onnx import helper

import vkinfer
from vkinfer.testing import field_onnx, tflite_zoo, zoo
from vkinfer.testing.onnx_builder import MS, make_model

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
FORMATS = ("qdq", "qoperator")
INPUT_SEED = 20240601  # calibration uses seeds 0..num_calib-1; the timed input is another draw
QUANT = {"per_channel": True, "activation_type": "uint8", "weight_type": "int8", "reduce_range": True}
QUICK_MODELS = ("mobilenet_v3_small",)


def pin_one_core() -> int:
    """Pin this process (and the threads it starts later) to its last allowed core; returns the core."""
    core = sorted(os.sched_getaffinity(0))[-1]
    os.sched_setaffinity(0, {core})
    return core


def ort_session(model: bytes) -> ort.InferenceSession:
    """ORT CPU EP, ORT_ENABLE_ALL, 1 intra-op and 1 inter-op thread, no spinning (it would steal the core from
    the interleaved vkinfer run)."""
    o = ort.SessionOptions()
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    o.intra_op_num_threads = o.inter_op_num_threads = 1
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    o.log_severity_level = 3
    return ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])


def max_diff(a: np.ndarray, b: np.ndarray) -> float | str:
    """max |a - b| (integers exactly, floats in float64), or why the arrays cannot be compared."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return f"{a.dtype}{list(a.shape)} vs {b.dtype}{list(b.shape)}"
    if a.size == 0:
        return 0
    if np.issubdtype(a.dtype, np.integer):
        return int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max())
    return float(np.nan_to_num(np.abs(a.astype(np.float64) - b.astype(np.float64)), nan=np.inf).max())


def split(sess: vkinfer.InferenceSession) -> dict:
    """Where the session's nodes run and the per-run native calls / Vulkan submits of its compiled plan."""
    kinds = Counter(d.split(":")[0] for d in sess.placement.values())
    plan = sess._fast[0] if sess._fast is not None else sess._latest  # the plan the last run used
    return {"nodes": {k: kinds.get(k, 0) for k in ("cpu", "vulkan", "host")},
            "host_ops": dict(Counter(n.op for n in sess.graph.nodes if sess.placement.get(n.name) == "host")),
            "native_calls": plan.native_calls if plan is not None else None,
            "submits": plan.submits if plan is not None else None}


def stats(t: np.ndarray) -> dict:
    return {"ms_median": float(np.median(t) * 1e3), "ms_p90": float(np.percentile(t, 90) * 1e3),
            "ms_runs": [round(float(x) * 1e3, 4) for x in t]}


def paired(model: bytes, feed: dict, device: str, warmup: int, repeat: int) -> tuple[dict, dict]:
    """(ORT's timing, vkinfer's row) for one model on one vkinfer device, interleaved."""
    o = ort_session(model)
    want = o.run(None, feed)
    sess = vkinfer.InferenceSession(model, device=device, threads=1)
    got = sess.run(None, feed)  # the first run builds what is left (pipelines) and is the comparison
    row = {"runtime": f"vkinfer-{device}", **split(sess),
           "max_abs_diff": {x.name: max_diff(g, w) for x, g, w in zip(o.get_outputs(), got, want, strict=True)}}
    tp, tv = interleaved(lambda: o.run(None, feed), lambda: sess.run(None, feed), warmup, repeat)
    row.update(stats(tv))
    peer = stats(tp)
    row["ratio_vs_ort"] = row["ms_median"] / peer["ms_median"]
    return peer, row


def guarded(fn, *a) -> tuple[dict | None, dict]:
    """`fn(*a)`, or (None, an ERROR row) when it raises: one broken row must not hide the others."""
    try:
        return fn(*a)
    except Exception as e:  # reported in the table, the exit status says so
        return None, {"runtime": "?", "error": f"{type(e).__name__}: {e}"[:200]}


# ------------------------------------------------------------------------------------------------------ models

def bench_models(names: list[str], args: argparse.Namespace, vulkan: bool) -> list[dict]:
    rows = []
    logging.disable(logging.WARNING)  # quantize_static suggests pre-processing on every call
    for name in names:
        for fmt in FORMATS:
            try:
                q = field_onnx.quantize(field_onnx.BUILDERS[name](), fmt=fmt, **QUANT)
            except Exception as e:
                rows.append({"model": name, "format": fmt, "runtime": "build", "error": f"{type(e).__name__}: {e}"})
                continue
            model, feed = q.SerializeToString(), zoo.random_inputs(q, INPUT_SEED)
            base = {"model": name, "format": fmt, "nodes_in_model": len(q.graph.node)}
            devices = [("cpu", args.repeat)] + ([("vulkan", args.vulkan_repeat)] if vulkan else [])
            for device, repeat in devices:
                peer, row = guarded(paired, model, feed, device, args.warmup, repeat)
                if device == "cpu" and peer is not None:
                    rows.append({**base, "runtime": "onnxruntime", **peer})
                rows.append({**base, **row, "runtime": f"vkinfer-{device}"})
                print_row(rows[-1])
    logging.disable(logging.NOTSET)
    return rows


def print_row(r: dict) -> None:
    what = r.get("error") or f"{r['ms_median']:.3f} ms"
    print(f"  {r.get('model') or r.get('op')} {r.get('format', '')} {r['runtime']}: {what}", flush=True)


def fmt_diff(d: dict | None) -> str:
    if not d:
        return "-"
    return "; ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in d.values())


def fmt_split(r: dict) -> tuple[str, str, str]:
    if "nodes" not in r:
        return "-", "-", "-"
    n = r["nodes"]
    host = ", ".join(f"{op} {c}" for op, c in sorted(r["host_ops"].items()))
    return f"{n['cpu']}/{n['vulkan']}/{n['host']}", f"{r['native_calls']}/{r['submits']}", host or "-"


def models_markdown(rows: list[dict]) -> str:
    header = ["model", "format", "runtime", "median ms", "p90 ms", "vs ORT", "nodes cpu/vk/host",
              "calls/submits", "host ops", "max abs diff"]
    lines = []
    for r in rows:
        if "error" in r:
            lines.append([r["model"], r["format"], r["runtime"], "-", "-", "-", "-", "-", "-", "ERROR " + r["error"]])
            continue
        nodes, calls, host = fmt_split(r)
        ratio = f"{r['ratio_vs_ort']:.2f}" if "ratio_vs_ort" in r else "-"
        lines.append([r["model"], r["format"], r["runtime"], f"{r['ms_median']:.3f}", f"{r['ms_p90']:.3f}", ratio,
                      nodes, calls, host, fmt_diff(r.get("max_abs_diff"))])
    return markdown_table(header, lines)


# --------------------------------------------------------------------------------------------------------- kws

def bench_kws(args: argparse.Namespace, vulkan: bool) -> list[dict]:
    """The streaming keyword spotter, window by window: litert, vkinfer cpu (and vulkan) on the same frames."""
    from ai_edge_litert.interpreter import Interpreter

    blob = tflite_zoo.streaming_kws(0)
    it = Interpreter(model_content=blob, num_threads=1)
    it.allocate_tensors()
    (inp,) = it.get_input_details()
    outs = it.get_output_details()

    def litert(frame: np.ndarray) -> list[np.ndarray]:
        it.set_tensor(inp["index"], frame)
        it.invoke()
        return [it.get_tensor(d["index"]) for d in outs]  # copies

    names = [d["name"] for d in outs]
    runners = {"litert": litert}
    sessions = {}
    for device in ["cpu"] + (["vulkan"] if vulkan else []):
        s = vkinfer.InferenceSession(blob, device=device, threads=1)
        sessions[device] = s
        runners[f"vkinfer-{device}"] = lambda f, s=s: s.run(names, {inp["name"]: f})
    rng = np.random.default_rng(11)
    frames = [rng.uniform(-1.2, 1.2, tuple(inp["shape"])).astype(np.float32) for _ in range(args.windows)]
    keys = list(runners)
    times: dict[str, list[float]] = {k: [] for k in keys}
    equal = {k: 0 for k in keys[1:]}
    worst = {k: 0.0 for k in keys[1:]}
    for i, f in enumerate(frames):
        order = keys[i % len(keys):] + keys[:i % len(keys)]  # rotate who goes first
        got = {}
        for k in order:
            t0 = time.perf_counter()
            got[k] = runners[k](f)
            times[k].append(time.perf_counter() - t0)
        for k in keys[1:]:
            d = [max_diff(g, w) for g, w in zip(got[k], got["litert"], strict=True)]
            num = [x for x in d if not isinstance(x, str)]
            equal[k] += len(num) == len(d) and max(num) == 0
            worst[k] = max(worst[k], max(num, default=np.inf) if len(num) == len(d) else np.inf)
    rows = []
    peer = stats(np.array(times["litert"][args.warmup:]))
    rows.append({"model": "streaming_kws", "runtime": "litert", **peer})
    for k in keys[1:]:
        r = stats(np.array(times[k][args.warmup:]))
        r.update(model="streaming_kws", runtime=k, ratio_vs_litert=r["ms_median"] / peer["ms_median"],
                 windows_equal=equal[k], windows=len(frames), max_abs_diff=worst[k],
                 **split(sessions[k.split("-", 1)[1]]))
        rows.append(r)
    for r in rows:
        print_row(r)
    return rows


def kws_markdown(rows: list[dict]) -> str:
    header = ["model", "runtime", "median ms/window", "p90 ms", "vs litert", "nodes cpu/vk/host", "calls/submits",
              "windows equal", "max abs diff"]
    lines = []
    for r in rows:
        nodes, calls, _ = fmt_split(r)
        lines.append([r["model"], r["runtime"], f"{r['ms_median']:.3f}", f"{r['ms_p90']:.3f}",
                      f"{r['ratio_vs_litert']:.2f}" if "ratio_vs_litert" in r else "-", nodes, calls,
                      f"{r['windows_equal']}/{r['windows']}" if "windows" in r else "-",
                      f"{r['max_abs_diff']:.3g}" if "max_abs_diff" in r else "-"])
    return markdown_table(header, lines)


# --------------------------------------------------------------------------------------------------------- ops

def _model(nodes: list, inputs: dict[str, tuple], outputs: list[str], consts: dict[str, np.ndarray],
           opset: int = 13) -> bytes:
    """A uint8-in, uint8-out model: `inputs` name -> shape."""
    return make_model(nodes, {k: (np.uint8, s) for k, s in inputs.items()}, dict.fromkeys(outputs, np.uint8), consts,
                      opset=opset, domains=MS, name="op").SerializeToString()


def _qdq_unary(ops: list, shape: tuple, ys: float, yz: int, opset: int) -> bytes:
    """DQ(x) -> `ops` (xf -> yf) -> Q, x uint8 over (-6.4, 6.35)."""
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]), *ops,
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    return _model(nodes, {"x": shape}, ["y"], {"xs": np.float32(0.05), "xz": np.uint8(128),
                                                "ys": np.float32(ys), "yz": np.uint8(yz)}, opset)


def _conv_transpose(shape: tuple, cout: int) -> bytes:
    """QDQ ConvTranspose 2x2 stride 2 as ORT's quantizer leaves it: per-channel 7-bit int8 weights (axis 1),
    int32 bias at x_scale * w_scale."""
    rng = np.random.default_rng(3)
    cin = shape[1]
    ws = (rng.uniform(0.5, 1.5, cout) * 0.01).astype(np.float32)
    consts = {"xs": np.float32(0.05), "xz": np.uint8(128), "wq": rng.integers(-63, 64, (cin, cout, 2, 2), np.int8),
              "ws": ws, "wz": np.zeros(cout, np.int8), "bq": rng.integers(-2000, 2000, cout).astype(np.int32),
              "bs": (np.float32(0.05) * ws).astype(np.float32), "bz": np.zeros(cout, np.int32),
              "ys": np.float32(0.02), "yz": np.uint8(128)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], axis=1),
             helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bf"], axis=0),
             helper.make_node("ConvTranspose", ["xf", "wf", "bf"], ["yf"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    return _model(nodes, {"x": shape}, ["y"], consts)


def op_cases() -> dict[str, tuple[str, bytes]]:
    """op line -> (input shape(s) as text, model)."""
    hs = (1, 16, 48, 48)
    silu = (1, 32, 40, 40)
    up = (1, 32, 20, 20)
    cat = [(1, 72, 400), (1, 72, 100), (1, 72, 25)]  # the three YOLOv8 levels at 160x160 (20^2, 10^2, 5^2 cells)
    dfl = (1, 16, 4, 525)
    return {
        "HardSwish table (DQ-HardSwish-Q)": (
            "x".join(map(str, hs)),
            _qdq_unary([helper.make_node("HardSwish", ["xf"], ["yf"])], hs, 6.75 / 255, 14, 14)),
        "SiLU table (DQ-Sigmoid-Mul-Q)": (
            "x".join(map(str, silu)),
            _qdq_unary([helper.make_node("Sigmoid", ["xf"], ["sf"]), helper.make_node("Mul", ["xf", "sf"], ["yf"])],
                       silu, 6.63 / 255, 11, 13)),
        # Explicit sizes, as the YOLOv8 C2f export writes them (an even Split without sizes stays on the host).
        "Split channels [16, 16]": (
            "x".join(map(str, silu)),
            _model([helper.make_node("Split", ["x", "split"], ["y0", "y1"], axis=1)], {"x": silu}, ["y0", "y1"],
                   {"split": np.array([16, 16], np.int64)})),
        "Resize nearest x2": (
            "x".join(map(str, up)),
            _model([helper.make_node("Resize", ["x", "roi", "scales"], ["y"], mode="nearest",
                                     coordinate_transformation_mode="asymmetric", nearest_mode="floor")],
                   {"x": up}, ["y"], {"roi": np.zeros(0, np.float32),
                                      "scales": np.array([1, 1, 2, 2], np.float32)})),
        "Concat axis 2": (
            " + ".join("x".join(map(str, s)) for s in cat),
            _model([helper.make_node("Concat", ["a", "b", "c"], ["y"], axis=2)],
                   dict(zip("abc", cat, strict=True)), ["y"], {})),
        "QDQ ConvTranspose 2x2/2": ("1x16x32x32 -> 16 ch", _conv_transpose((1, 16, 32, 32), 16)),
        "QLinearSoftmax last axis": (
            "x".join(map(str, dfl)),
            _model([helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                                     axis=-1, opset=13)], {"x": dfl}, ["y"],
                   {"xs": np.float32(0.1), "xz": np.uint8(128), "ys": np.float32(1 / 256), "yz": np.uint8(0)})),
    }


def bench_ops(cases: dict[str, tuple[str, bytes]], args: argparse.Namespace) -> list[dict]:
    rows = []
    rng = np.random.default_rng(INPUT_SEED)
    for op, (shape, model) in cases.items():
        m = onnx.load_from_string(model)
        feed = {i.name: rng.integers(0, 256, [d.dim_value for d in i.type.tensor_type.shape.dim], np.uint8)
                for i in m.graph.input}
        peer, row = guarded(paired, model, feed, "cpu", args.warmup, args.op_repeat)
        row.update(op=op, shape=shape, ort=peer)
        rows.append(row)
        print_row(row)
    return rows


def ops_markdown(rows: list[dict]) -> str:
    header = ["op", "shape", "ORT ms", "vkinfer cpu ms", "vs ORT", "nodes cpu/vk/host", "calls", "max abs diff"]
    lines = []
    for r in rows:
        if "error" in r:
            lines.append([r["op"], r["shape"], "-", "-", "-", "-", "-", "ERROR " + r["error"]])
            continue
        nodes, calls, _ = fmt_split(r)
        lines.append([r["op"], r["shape"], f"{r['ort']['ms_median']:.3f}", f"{r['ms_median']:.3f}",
                      f"{r['ratio_vs_ort']:.2f}", nodes, calls.split("/")[0], fmt_diff(r["max_abs_diff"])])
    return markdown_table(header, lines)


# -------------------------------------------------------------------------------------------------------- main

def vulkan_name(args: argparse.Namespace) -> str | None:
    """The Vulkan device's name, or None (--no-vulkan, or no device)."""
    if args.no_vulkan:
        return None
    try:
        from vkinfer._vk import get_device

        return get_device().info.name
    except Exception as e:  # no loader or no device: CPU rows only
        print(f"no Vulkan device ({e}); CPU rows only")
        return None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    groups = [*field_onnx.BUILDERS, "kws", "ops"]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per model row (default 40, --quick 5)")
    ap.add_argument("--op-repeat", type=int, default=None, help="timed runs per op row (default 100, --quick 10)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs / windows first (default 5, --quick 2)")
    ap.add_argument("--vulkan-repeat", type=int, default=None,
                    help="timed runs of the lavapipe rows (default 10, --quick 3)")
    ap.add_argument("--windows", type=int, default=None, help="streaming KWS windows (default 200, --quick 30)")
    ap.add_argument("--only", action="append", choices=groups, default=None, help="only this model / group")
    ap.add_argument("--quick", action="store_true", help=f"smoke check: {', '.join(QUICK_MODELS)}, kws, ops, few runs")
    ap.add_argument("--no-vulkan", action="store_true", help="CPU rows only")
    args = ap.parse_args(argv)
    q = args.quick
    for k, full, quick in (("repeat", 40, 5), ("op_repeat", 100, 10), ("warmup", 5, 2), ("vulkan_repeat", 10, 3),
                           ("windows", 200, 30)):
        if getattr(args, k) is None:
            setattr(args, k, quick if q else full)
    if min(args.repeat, args.op_repeat, args.vulkan_repeat) < 1 or args.warmup < 0 or args.windows <= args.warmup:
        ap.error("repeat counts must be >= 1, --warmup >= 0 and --windows > --warmup")
    args.groups = args.only or [*(QUICK_MODELS if q else field_onnx.BUILDERS), "kws", "ops"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    now = datetime.now(UTC)
    core = pin_one_core()
    vk = vulkan_name(args)
    cond = {"date_utc": now.isoformat(timespec="seconds"), "host_cpu": cpu_model(), "cpu_count": os.cpu_count(),
            "pinned_core": core, "platform": platform.platform(), "python": platform.python_version(),
            "onnxruntime": ort.__version__, "onnx": onnx.__version__,
            "ai_edge_litert": package_version("ai-edge-litert"), "vkinfer_git": git_revision(ROOT),
            "vulkan_device": vk, "lp_num_threads": os.environ.get("LP_NUM_THREADS"),
            "repeat": args.repeat, "op_repeat": args.op_repeat, "warmup": args.warmup,
            "vulkan_repeat": args.vulkan_repeat, "windows": args.windows, "groups": args.groups,
            "quantization": {**QUANT, "formats": list(FORMATS), "how": "field_onnx.quantize (quant_pre_process, "
                             "quantize_static MinMax on seeded standard-normal inputs)"},
            "input_seed": INPUT_SEED,
            "threads": "1 everywhere: vkinfer threads=1; ORT intra/inter-op 1, no spinning; litert num_threads=1; "
                       "the process pinned to one core",
            "note": "other processes may share the machine: medians are the figures to read"}
    print(f"vkinfer cpu{' and vulkan (' + vk + ')' if vk else ''} vs onnxruntime {ort.__version__} / ai-edge-litert "
          f"{cond['ai_edge_litert']}; {cond['host_cpu']}, pinned to core {core}, 1 thread")
    rows: dict[str, list[dict]] = {}
    tables = []
    models = [g for g in args.groups if g in field_onnx.BUILDERS]
    if models:
        rows["models"] = bench_models(models, args, vk is not None)
        tables.append(f"models (ORT repeat {args.repeat}, vulkan repeat {args.vulkan_repeat}, warmup {args.warmup}; "
                      "max abs diff: per output, vs ORT)\n\n" + models_markdown(rows["models"]))
    if "kws" in args.groups:
        rows["kws"] = bench_kws(args, vk is not None)
        tables.append(f"streaming KWS ({args.windows} windows, the first {args.warmup} untimed)\n\n"
                      + kws_markdown(rows["kws"]))
    if "ops" in args.groups:
        rows["ops"] = bench_ops(op_cases(), args)
        tables.append(f"ops (uint8, repeat {args.op_repeat}, warmup {args.warmup})\n\n" + ops_markdown(rows["ops"]))
    text = "\n\n".join(tables)
    print("\n" + text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"field_models-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps({"conditions": cond, "tables": text, "rows": rows}, indent=1, default=str) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    errors = [r for group in rows.values() for r in group if "error" in r]
    if errors:
        print(f"{len(errors)} row(s) failed to run", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
