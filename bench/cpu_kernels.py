"""Issue 12's targets side by side: MobileNetV2 1.0/224 on vkinfer's CPU fallback against ONNX Runtime, and the
machine's int8 multiply-accumulate peak the kernels are measured against.

    .venv/bin/python bench/cpu_kernels.py [--repeat N] [--warmup W] [--isa V] [--threads 1,2] [--weight-bits 8]

1. peak: bench/peak.c (built here with the system C compiler) runs 12 independent chains of VPDPBUSD (AVX-512
   VNNI) and of VPMADDWD + VPADDD (AVX2 int16) on one pinned core, best of 7: the ceiling in GOPS (2 ops per MAC).
2. model: vkinfer.testing.zoo.mobilenet_v2() quantized by ORT's quantize_static (zoo.quantize: per-channel,
   symmetric int8 weights, full range unless --weight-bits 7, uint8 activations), formats QOperator and QDQ,
   cached under build/models/bench/. vkinfer.InferenceSession(device="cpu", threads=T) against an ORT CPU
   session (intra-op T threads, inter-op 1, spinning off), interleaved A/B (_common.interleaved); T=1 runs with
   the process pinned to one core, T=2 on two. Every output must equal ORT's bit for bit (checked first): on
   AVX-512 VNNI ORT's u8 x s8 kernels are exact; on AVX2 without VNNI they saturate int16 pairs with full-range
   weights, so there a difference is reported, not failed, and the 7-bit rows are the exact comparison.
   Also reported: the native graph's per-kind time split (convolutions by kernel, everything else) from its
   profiling timers on T=1.
3. scaling: vkinfer on 2 threads against 1 (see scaling()), interleaved and back to back.
The per-layer table (1x1 GEMM and depthwise GOPS against ORT) is bench/ops.py's: run
`bench/ops.py --no-vulkan --threads 1`. Results go to bench/results/cpu_kernels-<UTC time>.json and the
tables are printed as markdown.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_model, git_revision, interleaved, markdown_table, package_version  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CACHE = ROOT / "build" / "models" / "bench"


def peak() -> dict[str, float | None]:
    """GOPS of bench/peak.c per ISA on one pinned core (None where the CPU or the compiler cannot run it)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        return {}
    out: dict[str, float | None] = {}
    with tempfile.TemporaryDirectory(prefix="vkinfer_peak_") as tmp:
        exe = Path(tmp) / "peak"
        subprocess.run([cc, "-O2", "-o", str(exe), str(ROOT / "bench" / "peak.c")], check=True, timeout=120)
        for isa in ("avx512vnni", "avx2-int16"):
            r = subprocess.run([str(exe), isa, "0.5"], capture_output=True, text=True, timeout=120)
            words = r.stdout.split()
            out[isa] = float(words[1]) if r.returncode == 0 and len(words) == 2 and words[1] != "unavailable" else None
    return out


def model(fmt: str, weight_bits: int) -> bytes:
    """MobileNetV2 1.0/224 quantized by ORT (cached): per-channel int8 weights, uint8 activations."""
    import onnx

    from vkinfer.testing import zoo

    path = CACHE / f"mobilenet_v2-{fmt}-perchannel-w{weight_bits}.onnx"
    if not path.exists():
        q = zoo.quantize(zoo.mobilenet_v2(), fmt=fmt, per_channel=True, reduce_range=weight_bits == 7)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        onnx.save(q, str(tmp))
        tmp.replace(path)
    return path.read_bytes()


def profile_split(sess, feed, runs: int) -> dict[str, float]:
    """ms per run by native operator kind ("conv:<kernel>", other ops, the run loop) over `runs` profiled runs."""
    plan = sess.plan(feed)
    runners = [s.runner for s in plan.segments if s.device.startswith("cpu")]
    for r in runners:
        r.graph.profile(True)
    for _ in range(runs):
        sess.run(None, feed)
    split: dict[str, float] = {}
    for r in runners:
        ns, loop = r.graph.times_ns()
        for name, t in zip(r.ops(), ns, strict=True):
            key = name if name.startswith("conv") else "other ops"
            split[key] = split.get(key, 0.0) + t / runs / 1e6
        split["run loop"] = split.get("run loop", 0.0) + loop / runs / 1e6
        r.graph.profile(False)
    return split


def scaling(sess1, sess2, feed: dict, warmup: int, repeat: int) -> dict[str, float]:
    """vkinfer on 1 thread against 2 threads, two ways. `interleaved`: one run of each in turn, so the
    2-thread session's worker has gone to sleep (its spin lasts about 100 us) and the other session has
    replaced the caches before every run, as in the peer rows. `back_to_back`: blocks of 20 runs of one
    session, then 20 of the other (first 2 of each block untimed), which is how a model serving a stream
    runs. Median ms of each, and the ratio 1-thread / 2-thread."""
    t1, t2 = interleaved(lambda: sess1.run(None, feed), lambda: sess2.run(None, feed), warmup, repeat)
    out = {"interleaved_1t_ms": float(np.median(t1)) * 1e3, "interleaved_2t_ms": float(np.median(t2)) * 1e3}
    b1, b2 = [], []
    for _ in range(max(1, repeat // 20)):
        for sess, acc in ((sess1, b1), (sess2, b2)):
            for i in range(22):
                t0 = time.perf_counter()
                sess.run(None, feed)
                if i >= 2:
                    acc.append(time.perf_counter() - t0)
    out["back_to_back_1t_ms"], out["back_to_back_2t_ms"] = float(np.median(b1)) * 1e3, float(np.median(b2)) * 1e3
    for k in ("interleaved", "back_to_back"):
        out[f"{k}_scaling"] = out[f"{k}_1t_ms"] / out[f"{k}_2t_ms"]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=100, help="timed runs per row (default 100)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed runs first (default 10)")
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    ap.add_argument("--isa", default=None, help="force a CPU variant ($VKINFER_CPU_ISA), e.g. avx2")
    ap.add_argument("--weight-bits", type=int, choices=[7, 8], default=8,
                    help="8: full-range int8 weights (default); 7: reduce_range=True")
    args = ap.parse_args()
    if args.isa:
        os.environ["VKINFER_CPU_ISA"] = args.isa
    import onnx
    import onnxruntime as ort

    import vkinfer
    from vkinfer.testing import zoo

    cpus = sorted(os.sched_getaffinity(0))
    pk = peak()
    rows, table = [], []
    for threads in [int(t) for t in args.threads.split(",")]:
        os.sched_setaffinity(0, cpus[:threads])
        for fmt in ("qoperator", "qdq"):
            blob = model(fmt, args.weight_bits)
            feed = zoo.random_inputs(onnx.load_from_string(blob), seed=1)
            so = ort.SessionOptions()
            so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
            peer = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
            sess = vkinfer.InferenceSession(blob, device="cpu", threads=threads)
            ours, theirs = sess.run(None, feed), peer.run(None, feed)
            diff = max(int(np.abs(a.astype(np.int64) - b.astype(np.int64)).max()) if a.dtype.kind in "iu"
                       else float(np.abs(a - b).max()) for a, b in zip(ours, theirs, strict=True))
            t_v, t_o = interleaved(lambda s=sess, f=feed: s.run(None, f),
                                   lambda p=peer, f=feed: p.run(None, f), args.warmup, args.repeat)
            split = profile_split(sess, feed, 30) if threads == 1 else {}
            row = {"model": "mobilenet_v2", "format": fmt, "threads": threads, "weight_bits": args.weight_bits,
                   "vkinfer_ms": float(np.median(t_v)) * 1e3, "vkinfer_p90_ms": float(np.percentile(t_v, 90)) * 1e3,
                   "ort_ms": float(np.median(t_o)) * 1e3, "ort_p90_ms": float(np.percentile(t_o, 90)) * 1e3,
                   "max_abs_diff": diff, "split_ms": split,
                   "runs_vkinfer_ms": (t_v * 1e3).tolist(), "runs_ort_ms": (t_o * 1e3).tolist()}
            row["ratio"] = row["vkinfer_ms"] / row["ort_ms"]
            rows.append(row)
            table.append([fmt, str(threads), f"{row['vkinfer_ms']:.3f}", f"{row['vkinfer_p90_ms']:.3f}",
                          f"{row['ort_ms']:.3f}", f"{row['ort_p90_ms']:.3f}", f"{row['ratio']:.2f}", str(diff)])
    scal, scal_table = {}, []
    if len(cpus) >= 2:
        os.sched_setaffinity(0, cpus[:2])
        for fmt in ("qoperator", "qdq"):
            blob = model(fmt, args.weight_bits)
            feed = zoo.random_inputs(onnx.load_from_string(blob), seed=1)
            s1 = vkinfer.InferenceSession(blob, device="cpu", threads=1)
            s2 = vkinfer.InferenceSession(blob, device="cpu", threads=2)
            scal[fmt] = sc = scaling(s1, s2, feed, args.warmup, args.repeat)
            for k in ("interleaved", "back_to_back"):
                scal_table.append([fmt, k.replace("_", "-"), f"{sc[k + '_1t_ms']:.3f}", f"{sc[k + '_2t_ms']:.3f}",
                                   f"{sc[k + '_scaling']:.2f}"])
    os.sched_setaffinity(0, cpus)
    isa = vkinfer.cpu.default_variant()
    print(f"CPU {cpu_model()}; vkinfer variant {isa}; onnxruntime {ort.__version__}; "
          f"{args.weight_bits}-bit per-channel weights; repeat {args.repeat}, warmup {args.warmup}")
    print("peak GOPS (one core): " + ", ".join(f"{k} {v:.0f}" if v else f"{k} -" for k, v in pk.items()))
    print()
    print(markdown_table(["format", "threads", "vkinfer ms", "p90", "ORT ms", "p90", "vkinfer/ORT", "max diff"], table))
    if scal_table:
        print("\nvkinfer 2 threads against 1 (same process, two cores):")
        print(markdown_table(["format", "order", "1 thread ms", "2 threads ms", "scaling"], scal_table))
    for row in rows:
        if row["split_ms"]:
            parts = ", ".join(f"{k} {v:.3f}" for k, v in sorted(row["split_ms"].items(), key=lambda kv: -kv[1]))
            print(f"\n{row['format']} 1 thread, ms per run by native operator kind: {parts}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"cpu_kernels-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps({"conditions": {"cpu": cpu_model(), "cpus": len(cpus), "isa": isa,
                                              "onnxruntime": ort.__version__, "vkinfer": package_version("vkinfer"),
                                              "git": git_revision(ROOT), "peak_gops": pk},
                               "rows": rows, "scaling": scal}, indent=1))
    print(f"\nwrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
