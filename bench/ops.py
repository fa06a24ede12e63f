"""Per-op benchmark: vkinfer's CPU fallback and Vulkan against ONNX Runtime on MobileNetV2's layers.

    .venv/bin/python bench/ops.py [--repeat N] [--warmup W] [--only SUBSTR] [--quick] [--gemm-tile T]
                                  [--threads T] [--isa V] [--no-vulkan]

For every distinct layer shape in bench/mobilenet_v2_shapes.json each side runs the same quantized
op on the same seeded data, interleaved A/B run by run:
- cpu1 / cpuT: the C fallback (`--isa`, default the best variant) on 1 thread and on T threads (default
  vkinfer.cpu.default_threads(): the process's CPUs within the fastest cluster, capped by its cgroup quota)
  against ORT with the same intra-op thread count. The CPU time is the
  C operator on NHWC bytes, as a model run pays it (a model converts layouts once, at its edges).
- vk: the Vulkan op as a caller sees it (host packing, upload, one submit, download, unpacking)
  against ORT on 1 thread.
ORT's time is `session.run` of a single-node model. `exact` compares every vkinfer output with the
numpy reference, not with ORT: ORT's uint8 x int8 kernels on x86 saturate pairwise int16 sums, so
ORT itself is not exact. Results go to bench/results/ops-<device type>-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from _common import cpu_model, interleaved
from onnx import helper

from vkinfer import cpu, reference
from vkinfer._vk import Device, get_device
from vkinfer.reference._spec import ConvSpec, MatMulSpec, conv_spec, matmul_spec
from vkinfer.testing.onnx_builder import make_model
from vkinfer.vulkan import Executable, QLinearConv, QLinearMatMul, choose_kernel, choose_matmul_kernel, gemm_shared_tile

HERE = Path(__file__).resolve().parent
SHAPES = HERE / "mobilenet_v2_shapes.json"
RESULTS = HERE / "results"
# --quick: one shape per kernel that MobileNetV2 reaches (generic conv, gemm, depthwise 3x3, matmul).
QUICK = ("conv_first_3to32_224", "expand_64to384_14", "dw_s2_144_56", "classifier_1280to1000")
SEED = 20240601


@dataclass
class Case:
    """One layer ready to time: the validated spec, its vkinfer executable and its ORT session."""

    entry: dict
    spec: ConvSpec | MatMulSpec
    kernel: str
    shape: str
    vk: Executable | None
    ort: ort.InferenceSession      # 1 thread
    ort_t: ort.InferenceSession    # T threads
    cpu_run: Callable[[int], np.ndarray]  # the C operator on prepared NHWC bytes, for `threads`
    cpu_full: Callable[[], np.ndarray]    # the same through the ops-level path (NCHW in and out)
    feed: dict[str, np.ndarray]
    cpu_kernel: str = ""  # the C microkernel family (vki_conv_kernel), e.g. "avx2" or "avx2-u8s8"


def quant_weights(rng: np.random.Generator, shape: tuple[int, ...], fan_in: int,
                  axis: int, qmax: int = 127) -> tuple[np.ndarray, np.ndarray]:
    """He-initialised float weights quantized to int8 symmetrically, one scale per output channel
    along `axis`: the shape of weights a real quantizer produces (bell-shaped, not uniform). qmax 63
    gives 7-bit weights (onnxruntime.quantization's reduce_range), which the C library's AVX2 u8 x s8
    kernels take (exact: no pair of products can saturate)."""
    wf = rng.normal(0.0, math.sqrt(2.0 / fan_in), size=shape)
    other = tuple(i for i in range(len(shape)) if i != axis)
    scale = (np.abs(wf).max(axis=other) / qmax).astype(np.float32)
    w = np.clip(np.rint(wf / np.expand_dims(scale, other)), -qmax, qmax).astype(np.int8)
    return w, scale


def quant_params(rng: np.random.Generator, post_relu6: bool, fan_in: int, w_scale: np.ndarray,
                 n_out: int) -> tuple[np.float32, int, np.int32, np.float32, int]:
    """x_scale, x_zero_point, bias (int32), y_scale, y_zero_point for uniform uint8 inputs.

    Inputs after ReLU6 are [0, 6] with zero point 0; other inputs are linear with zero point 128.
    y_scale spreads roughly +-4 sigma of the output over the uint8 range, so outputs neither pile
    up at the clamp nor collapse to a few values.
    """
    x_scale, x_zp = (np.float32(6.0 / 255.0), 0) if post_relu6 else (np.float32(0.05), 128)
    x_rms = float(x_scale) * math.sqrt(np.mean((np.arange(256) - x_zp) ** 2.0))
    w_std = math.sqrt(2.0 / fan_in)
    y_scale = np.float32(4.0 * math.sqrt(fan_in) * x_rms * w_std / 127.0)
    bias_f = rng.normal(0.0, 0.1, size=n_out)
    bias = np.rint(bias_f / (float(x_scale) * w_scale.astype(np.float64))).astype(np.int32)
    return x_scale, x_zp, bias, y_scale, 128


def ort_session(node: onnx.NodeProto, x: np.ndarray, consts: dict[str, np.ndarray],
                threads: int = 1) -> ort.InferenceSession:
    """A single-node model on the CPU provider with `threads` intra-op threads and default graph
    optimizations (so ORT may pre-pack constant weights, as it would in a real model)."""
    model = make_model([node], {"x": (np.uint8, x.shape)}, {"y": np.uint8}, consts)  # opset 13, IR 8
    opts = ort.SessionOptions()
    # Idle intra-op threads would otherwise spin after each run and take the cores from the interleaved peer.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def conv_case(e: dict, rng: np.random.Generator, dev: Device | None, args: argparse.Namespace) -> Case:
    """A conv layer: uint8 activations, per-channel symmetric int8 weights, int32 bias."""
    c, h, w, m, k, s, p, g = (e[f] for f in ("c", "h", "w", "m", "k", "stride", "pad", "group"))
    fan_in = c // g * k * k
    x = rng.integers(0, 256, size=(1, c, h, w), dtype=np.uint8)
    wq, w_scale = quant_weights(rng, (m, c // g, k, k), fan_in, axis=0, qmax=2 ** (args.weight_bits - 1) - 1)
    # Depthwise and project layers read a ReLU6 output; expand, first and last convs do not.
    post_relu6 = e["name"].startswith(("dw_", "project_"))
    x_scale, x_zp, bias, y_scale, y_zp = quant_params(rng, post_relu6, fan_in, w_scale, m)
    w_zp = np.zeros(m, np.int8)
    spec = conv_spec(x, x_scale, np.uint8(x_zp), wq, w_scale, w_zp, y_scale, np.uint8(y_zp), bias,
                     strides=(s, s), pads=(p, p, p, p), group=g)
    consts = {"xs": np.array(x_scale, np.float32), "xzp": np.array(x_zp, np.uint8), "w": wq,
              "ws": w_scale, "wzp": w_zp, "ys": np.array(y_scale, np.float32),
              "yzp": np.array(y_zp, np.uint8), "b": bias}
    node = helper.make_node("QLinearConv", ["x", *consts], ["y"], strides=[s, s], pads=[p] * 4,
                            group=g, kernel_shape=[k, k])
    shape = f"{c}x{h}x{w}>{m} k{k}s{s}" + (" dw" if g == c else "")
    op = cpu.QLinearConv(spec, args.isa)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    return Case(e, spec, choose_kernel(spec), shape, Executable(QLinearConv(spec, dev), dev) if dev else None,
                ort_session(node, x, consts), ort_session(node, x, consts, args.threads),
                lambda t: op.conv.run(nhwc, t), lambda: op.run(x, args.threads), {"x": x}, op.conv.kernel)


def matmul_case(e: dict, rng: np.random.Generator, dev: Device | None, args: argparse.Namespace) -> Case:
    """The classifier: uint8 rows (after ReLU6 and pooling) times per-column int8 weights."""
    rows, k, n = e["m_rows"], e["k"], e["n"]
    a = rng.integers(0, 256, size=(rows, k), dtype=np.uint8)
    b, b_scale = quant_weights(rng, (k, n), k, axis=1, qmax=2 ** (args.weight_bits - 1) - 1)
    a_scale, a_zp, _, y_scale, y_zp = quant_params(rng, True, k, b_scale, n)
    b_zp = np.zeros(n, np.int8)
    spec = matmul_spec(a, a_scale, np.uint8(a_zp), b, b_scale, b_zp, y_scale, np.uint8(y_zp))
    consts = {"as": np.array(a_scale, np.float32), "azp": np.array(a_zp, np.uint8), "b": b,
              "bs": b_scale, "bzp": b_zp, "ys": np.array(y_scale, np.float32),
              "yzp": np.array(y_zp, np.uint8)}
    node = helper.make_node("QLinearMatMul", ["x", *consts], ["y"])
    ex = Executable(QLinearMatMul(spec, dev), dev) if dev else None
    op = cpu.QLinearMatMul(spec, args.isa)
    return Case(e, spec, choose_matmul_kernel(spec), f"{rows}x{k} @ {k}x{n}", ex, ort_session(node, a, consts),
                ort_session(node, a, consts, args.threads), lambda t: op.convs[0].run(a, t),
                lambda: op.run(a, args.threads), {"x": a}, op.convs[0].kernel)


def _stats(prefix: str, t: np.ndarray, macs: int) -> dict:
    med = float(np.median(t))
    return {f"{prefix}_ms_median": 1e3 * med, f"{prefix}_ms_p90": 1e3 * float(np.percentile(t, 90)),
            f"{prefix}_gops": 2 * macs / med / 1e9, f"{prefix}_ms": [round(1e3 * v, 4) for v in t]}


def measure(case: Case, warmup: int, repeat: int, threads: int) -> dict:
    """Check every vkinfer output against the reference once, then time each pair A/B interleaved."""
    s, x = case.spec, case.feed["x"]
    y_ref = reference.qlinear_conv(s) if isinstance(s, ConvSpec) else reference.qlinear_matmul(s)
    y_ort = case.ort.run(None, case.feed)[0]
    exact = {"cpu": bool(np.array_equal(case.cpu_full(), y_ref))}
    run_ort1 = lambda: case.ort.run(None, case.feed)  # noqa: E731
    run_ortt = lambda: case.ort_t.run(None, case.feed)  # noqa: E731
    cpu1, ort1 = interleaved(lambda: case.cpu_run(1), run_ort1, warmup, repeat)
    cput, ortt = interleaved(lambda: case.cpu_run(threads), run_ortt, warmup, repeat)
    row = {"name": case.entry["name"], "op": case.entry["op"], "kernel": case.kernel, "cpu_kernel": case.cpu_kernel,
           "shape": case.shape,
           "count": case.entry["count"], "macs": s.macs, **_stats("cpu1", cpu1, s.macs), **_stats("ort1", ort1, s.macs),
           **_stats("cput", cput, s.macs), **_stats("ortt", ortt, s.macs)}
    row["cpu1_ratio"] = row["cpu1_ms_median"] / row["ort1_ms_median"]
    row["cput_ratio"] = row["cput_ms_median"] / row["ortt_ms_median"]
    if case.vk is not None:
        exact["vk"] = bool(np.array_equal(case.vk.run(x), y_ref))
        vk, ort1b = interleaved(lambda: case.vk.run(x), run_ort1, warmup, repeat)
        row.update(_stats("vk", vk, s.macs))
        row["vk_ratio"] = row["vk_ms_median"] / float(1e3 * np.median(ort1b))
    row["exact"] = all(exact.values())
    row["exact_by_backend"] = exact
    # Not a pass/fail: how far ORT's saturating x86 kernels land from the exact result.
    row["ort_values_differing_from_reference"] = int(np.count_nonzero(y_ort.reshape(y_ref.shape) != y_ref))
    return row


HEADER = (f"{'layer':<24} {'kernel':<18} {'cpu1 ms':>8} {'p90':>7} {'GOPS':>6} {'ort1 ms':>8} {'p90':>7} "
          f"{'GOPS':>6} {'cpu1/ort1':>9} {'cpuT ms':>8} {'ortT ms':>8} {'cpuT/ortT':>9} {'vk ms':>8} {'vk/ort1':>8} "
          "exact")


def format_row(r: dict) -> str:
    """One result as a line of the table under HEADER."""
    vk = f"{r['vk_ms_median']:8.3f} {r['vk_ratio']:8.2f}" if "vk_ms_median" in r else f"{'-':>8} {'-':>8}"
    return (f"{r['name']:<24} {r['kernel']:<18} {r['cpu1_ms_median']:8.3f} {r['cpu1_ms_p90']:7.3f} "
            f"{r['cpu1_gops']:6.1f} {r['ort1_ms_median']:8.3f} {r['ort1_ms_p90']:7.3f} {r['ort1_gops']:6.1f} "
            f"{r['cpu1_ratio']:9.2f} {r['cput_ms_median']:8.3f} {r['ortt_ms_median']:8.3f} {r['cput_ratio']:9.2f} "
            f"{vk} {'yes' if r['exact'] else 'NO'}")


def conditions(dev: Device | None, args: argparse.Namespace, now: datetime) -> dict:
    """Everything a reader needs to reproduce or discount these numbers."""
    cond = {
        "date_utc": now.isoformat(timespec="seconds"),
        "host_cpu": cpu_model(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
        "python": platform.python_version(), "numpy": np.__version__, "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
        "cpu_variants_available": cpu.available_variants(),
        "threads_big_cores": args.threads, "vulkan_device": None,
        "repeat": args.repeat, "warmup": args.warmup,
        "ort_graph_optimization": "default (ORT_ENABLE_ALL)", "quick": args.quick, "only": args.only,
        "seed": SEED, "weight_bits": args.weight_bits,
    }
    if dev is not None:
        info = dev.info
        cond["vulkan_device"] = {"name": info.name, "type": info.type, "driver": info.driver,
                                 "driver_info": info.driver_info, "api_version": info.api_version}
        # lavapipe runs its shaders on CPU threads (LP_NUM_THREADS, default: all cores).
        cond["lp_num_threads"] = os.environ.get("LP_NUM_THREADS")
        cond["gemm_tile"] = "shared" if gemm_shared_tile(dev) else "direct"
    return cond


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options, with --quick's smaller defaults filled in."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=None, help="timed runs per shape (default 50, --quick 5)")
    ap.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 5, --quick 2)")
    ap.add_argument("--only", default=None, help="only layers whose name contains SUBSTR")
    ap.add_argument("--quick", action="store_true", help=f"smoke check: {len(QUICK)} shapes, few runs")
    ap.add_argument("--gemm-tile", choices=["auto", "shared", "direct"], default="auto",
                    help="qlinear_gemm variant (default: the device's own choice)")
    ap.add_argument("--threads", type=int, default=None, help="the 'all big cores' thread count (default: detected)")
    ap.add_argument("--isa", default=None,
                    help="CPU variant, or 'all' for every one this CPU runs (default: the best available)")
    ap.add_argument("--no-vulkan", action="store_true", help="time the CPU fallback and ORT only")
    ap.add_argument("--model", default=None, metavar="ONNX",
                    help="the distinct QLinearConv shapes of this QOperator model (static input shapes) instead of "
                         "MobileNetV2's, e.g. build/real-models/models/orinet/orinet.qop.onnx")
    ap.add_argument("--weight-bits", type=int, choices=[7, 8], default=8,
                    help="8: weights in [-127, 127]; 7: [-63, 63] (reduce_range; the CPU's u8 x s8 kernels)")
    args = ap.parse_args(argv)
    if args.gemm_tile != "auto":
        os.environ["VKINFER_GEMM_TILE"] = args.gemm_tile
    args.repeat = args.repeat if args.repeat is not None else (5 if args.quick else 50)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    args.threads = args.threads if args.threads is not None else cpu.default_threads()
    if args.repeat < 1 or args.warmup < 0 or args.threads < 1:
        ap.error("--repeat and --threads must be >= 1 and --warmup >= 0")
    return args


def model_shapes(path: str) -> list[dict]:
    """The distinct QLinearConv layers of a QOperator model as shape entries (square kernels, strides and
    symmetric pads; others are skipped with a note), each with its count, in the model's order."""
    import vkinfer

    m = onnx.load(path)
    inits = {i.name: i for i in m.graph.initializer}
    info = vkinfer.InferenceSession(path, device="reference")._fast.plan.info
    out: dict[tuple, dict] = {}
    for n in m.graph.node:
        if n.op_type != "QLinearConv":
            continue
        a = {at.name: onnx.helper.get_attribute_value(at) for at in n.attribute}
        _, c, h, w = info[n.input[0]][0]
        wd = list(inits[n.input[3]].dims)
        k, s, pads, g = wd[2:], a.get("strides", [1, 1]), a.get("pads", [0] * 4), int(a.get("group", 1))
        if len(set(k)) != 1 or len(set(s)) != 1 or len(set(pads)) != 1 or any(d != 1 for d in a.get("dilations", [1])):
            print(f"skipped {n.name}: kernel {k}, strides {s}, pads {pads}", file=sys.stderr)
            continue
        key = (c, h, w, wd[0], k[0], s[0], pads[0], g)
        if key in out:
            out[key]["count"] += 1
            continue
        kind = "dw" if g == c == wd[0] and g > 1 else "conv"
        out[key] = {"name": f"{kind}_{c}to{wd[0]}_k{k[0]}s{s[0]}_{h}x{w}", "op": "conv", "c": c, "h": h, "w": w,
                    "m": wd[0], "k": k[0], "stride": s[0], "pad": pads[0], "group": g, "count": 1}
    return list(out.values())


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every vkinfer output equals the reference, 1 otherwise."""
    args = parse_args(argv)
    every = model_shapes(args.model) if args.model else json.loads(SHAPES.read_text())
    entries = every
    if args.quick:
        entries = [e for e in entries if e["name"] in QUICK]
    if args.only:
        entries = [e for e in entries if args.only in e["name"]]
    if not entries:
        print("no layer matches", file=sys.stderr)
        return 2
    dev = None if args.no_vulkan else get_device()
    now = datetime.now(UTC)
    cond = conditions(dev, args, now)
    # --isa all: the same table for every variant this CPU runs (the list the tests iterate too).
    isas = cpu.available_variants() if args.isa == "all" else [args.isa or cpu.default_variant()]
    runs = []
    for i, isa in enumerate(isas):
        runs.append(run_table(entries, dev if i == 0 else None, args, isa, cond, len(entries) < len(every)))
    RESULTS.mkdir(parents=True, exist_ok=True)
    kind = "cpu-only" if dev is None else dev.info.type
    out = RESULTS / f"ops-{kind}-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps({"conditions": cond, "runs": runs}, indent=1) + "\n")
    print(f"wrote {out.relative_to(HERE.parent)}")
    # A benchmark of wrong answers is worthless: fail loudly.
    return 0 if all(r["summary"]["all_exact"] for r in runs) else 1


def run_table(entries: list[dict], dev: Device | None, args: argparse.Namespace, isa: str, cond: dict,
              subset: bool) -> dict:
    """Time every entry with CPU variant `isa` (and Vulkan when `dev` is given); print the table."""
    args.isa = isa
    print(f"\nCPU fallback: variant {isa}, 1 and T={args.threads} threads, against onnxruntime "
          f"{ort.__version__} with the same thread count")
    if dev is not None:
        print(f"Vulkan: {dev.info} (gemm tile: {cond['gemm_tile']}) against onnxruntime on 1 thread")
    print(f"host: {cond['host_cpu']}, {cond['cpu_count']} cores; repeat {args.repeat}, warmup {args.warmup}; "
          "times are ms per call (median, p90); a ratio < 1 means vkinfer is faster")
    print(HEADER)
    rows = []
    for e in entries:
        # Each layer gets its own generator so a shape's data does not depend on --only/--quick.
        rng = np.random.default_rng([SEED, zlib.crc32(e["name"].encode())])
        case = conv_case(e, rng, dev, args) if e["op"] == "conv" else matmul_case(e, rng, dev, args)
        rows.append(measure(case, args.warmup, args.repeat, args.threads))
        print(format_row(rows[-1]), flush=True)
        del case  # free this layer's buffers before the next one
    summary = {"all_exact": all(r["exact"] for r in rows), "layers": len(rows)}
    for key, label in [("cpu1", "ort1"), ("cput", "ortt")] + ([("vk", "ort1")] if dev else []):
        g = geomean([r[f"{key}_ratio"] for r in rows])
        mine = sum(r["count"] * r[f"{key}_ms_median"] for r in rows)
        theirs = sum(r["count"] * r[f"{label}_ms_median"] for r in rows)
        summary[key] = {"geomean_ratio": g, "total_ms": mine, f"{label}_total_ms": theirs}
        print(f"{key}: geomean {key}/{label} {g:.2f}; per inference, weighted by count"
              f"{' (selected layers only)' if subset else ''}: vkinfer {mine:.2f} ms, ORT {theirs:.2f} ms")
    return {"cpu_variant": isa, "summary": summary, "rows": rows}


if __name__ == "__main__":
    raise SystemExit(main())
