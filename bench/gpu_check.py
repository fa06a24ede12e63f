"""The model half of `make gpu-check`: whole models on the Vulkan device beside the peers, written to JSON.

    python bench/gpu_check.py --out DIR [--junit DIR/junit.xml] [--repeat N] [--budget S] [--threads T]

On whatever Vulkan device vkinfer picks ($VKINFER_DEVICE), for MobileNetV2 1.0/224 (ONNX QOperator and QDQ,
TFLite int8) and the small field models (field_zoo's TFLite keyword spotters and wake-word net, field_onnx's
MobileNetV3-small, YOLOv8n, DB text detector and CRNN, quantized by ONNX Runtime u8/s8 per channel):
- vkinfer vulkan: session creation and first run (pipelines built; the SPIR-V cache is whatever $VKINFER_CACHE
  holds), then the median wall time of `run` and the median device time from Vulkan timestamps (every Vulkan
  segment's `last_device_ns`, summed);
- vkinfer cpu and vkinfer auto (with auto's placement: nodes per device) on T threads;
- the peer on the CPU on the same T threads: ONNX Runtime (CPUExecutionProvider, spinning off) or litert;
- ncnn's int8 Vulkan on the same device and ncnn's int8 CPU, for MobileNetV2 (bench/ncnn_export.py writes the
  ncnn model from the same float network; ncnn's own int8 scheme, so its outputs are not compared bit for bit).
Engines are timed round-robin (one block of runs each per round) so that drift hits all of them alike.
Exactness: vulkan's and auto's outputs must equal cpu's bit for bit (one contract on every device), and cpu's
must equal ONNX Runtime's (bound 0) or litert's logits within 1 step (fixed-point vs float32 requantization).

Writes DIR/gpu_check.json (device and driver, the tests' pass/fail counts from --junit, per model and engine:
times, exactness, placement) and DIR/gpu_check.md (the table, also printed). Exit 1 when a model is not exact
or an engine of vkinfer failed; 0 otherwise. A model that does not fit in --budget seconds is recorded as
skipped, never silently dropped.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import cpu_model, git_revision, markdown_table, package_version  # noqa: E402

import vkinfer  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _device() -> dict:
    """The Vulkan device vkinfer uses, with its driver, or why there is none."""
    try:
        from vkinfer._vk import get_device

        d = get_device()
        i = d.info
        out = {"name": i.name, "type": i.type, "driver": i.driver, "driver_info": i.driver_info,
               "api_version": i.api_version, "vendor_id": i.vendor_id, "device_id": i.device_id,
               "timestamps": bool(getattr(d, "timestamps", False))}
        for k in ("use_dot", "dot_reason", "use_float_rq", "float_rq_reason", "push_shapes", "unified_memory",
                  "zero_copy"):
            v = getattr(d, k, None)
            if v is not None and not callable(v):
                out[k] = v if isinstance(v, bool | int | float | str) else str(v)
        return out
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def junit_counts(path: Path | None) -> dict:
    """passed/failed/errors/skipped and the failed tests' names from a pytest junit XML (missing: say so)."""
    if path is None or not path.is_file():
        return {"missing": str(path) if path else "no --junit given"}
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:  # pytest stopped while writing it
        return {"missing": f"{path}: {e}"}
    counts = Counter()
    failed: list[str] = []
    for case in root.iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {c.tag for c in case}
        if "failure" in kinds:
            counts["failed"] += 1
            failed.append(name)
        elif "error" in kinds:
            counts["errors"] += 1
            failed.append(name)
        elif "skipped" in kinds:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return {**{k: counts.get(k, 0) for k in ("passed", "failed", "errors", "skipped")}, "failed_names": failed}


# ---------------------------------------------------------------------------------------------------- models
class Model:
    """One model to time: its bytes, a feed, the peer, and (for MobileNetV2) the float ONNX ncnn is made from."""

    def __init__(self, name: str, fmt: str, blob: bytes, feed: dict[str, np.ndarray], float_onnx=None):
        self.name, self.fmt, self.blob, self.feed, self.float_onnx = name, fmt, blob, feed, float_onnx

    @property
    def tflite(self) -> bool:
        return self.fmt.startswith("tflite")

    @property
    def peer(self) -> str:
        return "litert" if self.tflite else "onnxruntime"


def _models(quick: bool) -> list[tuple[str, str, Callable[[], Model]]]:
    """(name, format, builder) in the order they are timed: MobileNetV2 first, then the field models."""
    import models as bm  # bench/models.py: its cases, model cache and feeds

    from vkinfer.testing import field_onnx, field_zoo, zoo

    def zoo_case(name: str, fmt: str) -> Callable[[], Model]:
        def build() -> Model:
            case = bm.Case(name, fmt)
            blob, _ = bm.cached_model(case)
            if case.tflite:
                return Model(name, fmt, blob, bm.tflite_feed(blob))
            import onnx

            feed = zoo.random_inputs(onnx.load_from_string(blob), seed=bm.INPUT_SEED)
            return Model(name, fmt, blob, feed, zoo.BUILDERS[name](seed=bm.MODEL_SEED))
        return build

    def field_tflite(name: str) -> Callable[[], Model]:
        def build() -> Model:
            blob = field_zoo.FIELD_MODELS[name](seed=0, dtype="int8")
            return Model(name, "tflite-i8", blob, field_zoo.field_inputs(name, seed=0, dtype="int8"))
        return build

    def field_onnx_case(name: str) -> Callable[[], Model]:
        def build() -> Model:
            import logging

            logging.disable(logging.WARNING)
            try:
                q = zoo.quantize(field_onnx.preprocess(field_onnx.BUILDERS[name]()), fmt="qdq", seed=7, num_calib=4,
                                 activation_type="uint8", per_channel=True, reduce_range=True)
            finally:
                logging.disable(logging.NOTSET)
            return Model(name, "qdq", q.SerializeToString(), field_onnx.float_inputs(q, seed=11))
        return build

    out = [("mobilenet_v2", "qoperator", zoo_case("mobilenet_v2", "qoperator"))]
    if not quick:
        out += [("mobilenet_v2", "qdq", zoo_case("mobilenet_v2", "qdq")),
                ("mobilenet_v2", "tflite-i8", zoo_case("mobilenet_v2", "tflite-i8"))]
    out += [(n, "tflite-i8", field_tflite(n)) for n in field_zoo.FIELD_MODELS]
    out += [(n, "qdq", field_onnx_case(n)) for n in field_onnx.BUILDERS]
    return out


# --------------------------------------------------------------------------------------------------- engines
class Engine:
    """A named way to run one model: `run()` returns the outputs; `device_ms()` the last run's device time."""

    def __init__(self, name: str, run: Callable[[], list[np.ndarray]], names: list[str], threads: int,
                 device_ms: Callable[[], float | None] | None = None):
        self.name, self.run, self.names, self.threads = name, run, names, threads
        self.device_ms = device_ms or (lambda: None)
        self.wall: list[float] = []
        self.dev: list[float] = []


def _vk_segments(sess, feed) -> list:
    plan = sess.plan(feed)
    return [] if plan is None else [s.runner for s in plan.segments if str(s.device).startswith("vulkan")]


def _scalar_session(blob: bytes, threads: int):
    """A device="vulkan" session on the default device opened without the integer-dot-product shaders and the
    float requantization (the scalar path vkinfer had before issue 27), for the side-by-side row; other sessions
    keep the default device."""
    from vkinfer import _vk

    dev = _vk.get_device()
    scalar = _vk.Device(dev.info, integer_dot=False, float_rq=False)
    _vk._open[dev.info.index] = scalar
    try:
        return vkinfer.InferenceSession(blob, device="vulkan", threads=threads)
    finally:
        _vk._open[dev.info.index] = dev


def vkinfer_engine(m: Model, device: str, threads: int, info: dict) -> Engine:
    t0 = time.perf_counter()
    if device == "vulkan-scalar":
        sess = _scalar_session(m.blob, threads)
    else:
        sess = vkinfer.InferenceSession(m.blob, device=device, threads=threads)
    t1 = time.perf_counter()
    out = sess.run(None, m.feed)
    t2 = time.perf_counter()
    info.update(create_s=t1 - t0, first_run_s=t2 - t1)
    if device == "auto":
        info["placement"] = dict(Counter(v.split(":")[0] for v in sess.placement.values()))
    segs = _vk_segments(sess, m.feed) if device != "cpu" else []
    for s in segs:
        s.timed = True

    def device_ms() -> float | None:
        ns = [s.last_device_ns for s in segs]
        return None if not ns or any(v is None for v in ns) else sum(ns) * 1e-6

    names = [o.name for o in sess.get_outputs()]
    eng = Engine(f"vkinfer {device}", lambda: sess.run(None, m.feed), names, threads, device_ms)
    eng.first = out  # type: ignore[attr-defined]
    return eng


def peer_engine(m: Model, threads: int) -> Engine:
    import models as bm

    run, names = (bm.litert_runner if m.tflite else bm.ort_runner)(m.blob, m.feed, threads)
    return Engine(m.peer, run, names, threads)


def ncnn_engines(m: Model, threads: int, workdir: Path, vk_index: int | None) -> list[Engine]:
    """ncnn's int8 MobileNetV2 on the Vulkan device and on the CPU (same float network, ncnn's int8 scheme)."""
    import ncnn
    import ncnn_export  # bench/ncnn_export.py

    x = next(iter(m.feed.values()))
    calib = [np.random.default_rng(s).standard_normal(x.shape).astype(np.float32) for s in range(4)]
    param, binf = ncnn_export.export(m.float_onnx, workdir, m.name, int8=True, calib=calib)
    out = []
    for vulkan in (True, False):
        if vulkan and ncnn.get_gpu_count() == 0:
            continue
        once, info = ncnn_export.ncnn_runner(param, binf, x, vulkan, threads, device=vk_index if vulkan else None)
        name = "ncnn int8 vulkan" if info["vulkan"] else "ncnn int8 cpu" if not vulkan else "ncnn int8 (fell back)"
        out.append(Engine(name, lambda once=once: [once()], ["output"], threads))
    return out


def _ncnn_vk_index(dev: dict) -> int | None:
    """ncnn's index of the device vkinfer uses (matched by name), or None for ncnn's default."""
    try:
        import ncnn

        for i in range(ncnn.get_gpu_count()):
            if ncnn.get_gpu_info(i).device_name() == dev.get("name"):
                return i
    except Exception:
        pass
    return None


# ------------------------------------------------------------------------------------------------- exactness
def compare(got: Engine, want: Engine, bound: int, only: tuple[str, ...] | None = None) -> dict:
    """Max difference (steps for integers, absolute for floats) over the outputs both have (`only` if given)."""
    g = dict(zip(got.names, got.run(), strict=True))
    w = dict(zip(want.names, want.run(), strict=True))
    names = [n for n in w if (only is None or n in only)]
    worst, exact, detail = 0.0, True, {}
    for n in names:
        a, b = g.get(n), w[n]
        if a is None or a.shape != b.shape or a.dtype != b.dtype:
            detail[n] = "missing" if a is None else f"{a.dtype}{a.shape} vs {b.dtype}{b.shape}"
            exact, worst = False, float("inf")
            continue
        if a.dtype.kind in "iub":
            d = float(np.abs(a.astype(np.int64) - b.astype(np.int64)).max(initial=0))
        else:
            same = (a.view(np.uint8) == b.view(np.uint8)).all()
            d = 0.0 if same else float(np.nan_to_num(np.abs(a.astype(np.float64) - b.astype(np.float64)),
                                                     nan=np.inf).max(initial=0))
        detail[n] = d
        worst = max(worst, d)
        exact &= d == 0
    return {"against": want.name, "exact": bool(exact), "max_diff": worst, "bound": bound,
            "ok": bool(worst <= bound), "outputs": detail}


# ---------------------------------------------------------------------------------------------------- timing
def round_robin(engines: list[Engine], repeat: int, rounds: int, deadline: float) -> None:
    """`repeat` timed runs per engine, in `rounds` blocks taken in turn (after one warm-up run each)."""
    for e in engines:
        e.run()
    per = max(1, repeat // rounds)
    for _ in range(rounds):
        for e in engines:
            for _ in range(per):
                t0 = time.perf_counter()
                e.run()
                e.wall.append(time.perf_counter() - t0)
                d = e.device_ms()
                if d is not None:
                    e.dev.append(d)
        if time.monotonic() > deadline:
            break


def _ms(v: list[float], scale: float = 1e3) -> float | None:
    return None if not v else round(float(np.median(v)) * scale, 4)


def time_model(m: Model, threads: int, repeat: int, deadline: float, workdir: Path, dev: dict) -> dict:
    rec: dict = {"model": m.name, "format": m.fmt, "peer": m.peer, "threads": threads, "engines": {}}
    engines: list[Engine] = []
    from vkinfer._vk import get_device

    # The scalar shaders beside the default ones (dot, float requantization) on MobileNetV2: the A/B.
    d = get_device()
    scalar = ("vulkan-scalar",) if m.name == "mobilenet_v2" and (d.use_dot or d.use_float_rq) else ()
    for device in ("vulkan", *scalar, "cpu", "auto"):
        info: dict = {}
        rec["engines"][f"vkinfer {device}"] = info
        try:
            engines.append(vkinfer_engine(m, device, threads, info))
        except Exception as e:
            info["error"] = f"{type(e).__name__}: {e}"
            info["traceback"] = traceback.format_exc(limit=6)
    try:
        peer = peer_engine(m, threads)
        engines.append(peer)
        rec["engines"][peer.name] = {}
    except Exception as e:
        peer = None
        rec["engines"][m.peer] = {"error": f"{type(e).__name__}: {e}"}
    if m.float_onnx is not None:
        try:
            for e in ncnn_engines(m, threads, workdir, _ncnn_vk_index(dev)):
                engines.append(e)
                rec["engines"][e.name] = {}
        except Exception as e:
            rec["engines"]["ncnn int8"] = {"error": f"{type(e).__name__}: {e}"}
    by = {e.name: e for e in engines}
    # exactness before timing: every device equals cpu bit for bit; cpu equals the peer
    cpu = by.get("vkinfer cpu")
    checks: dict = {}
    for name in ("vkinfer vulkan", "vkinfer vulkan-scalar", "vkinfer auto"):
        if name in by and cpu is not None:
            checks[name] = compare(by[name], cpu, 0)
    if cpu is not None and peer is not None:
        only = ("logits",) if m.tflite and "logits" in peer.names else None
        checks["vkinfer cpu"] = compare(cpu, peer, 1 if m.tflite else 0, only)
    rec["exact"] = checks
    rec["ok"] = all(c["ok"] for c in checks.values()) and all(
        "error" not in rec["engines"].get(f"vkinfer {d}", {}) for d in ("vulkan", "cpu", "auto"))
    round_robin(engines, repeat, rounds=5, deadline=deadline)
    for e in engines:
        r = rec["engines"][e.name]
        r.update(median_ms=_ms(e.wall), p90_ms=None if not e.wall else round(float(np.percentile(e.wall, 90)) * 1e3, 4),
                 runs=len(e.wall), threads=e.threads)
        if e.dev:
            r["device_ms"] = _ms(e.dev, 1.0)
    return rec


# ------------------------------------------------------------------------------------------- kernels, tuning
#: Packed int8 dot-product ceilings (TOPS), derived from public specifications, by a part of the device's name:
#: H100, as issue 27 derives it, 132 SMs x 64 a clock x 8 ops x 1.98 GHz = 134 TOPS.
CEILING_TOPS = {"H100": 134.0}


def tune_and_selftest(out: dict, budget: float) -> None:
    """The device's GEMM tile autotune (each candidate's time, the choice) and its self-test (each case), rerun
    now whatever is cached, into `out`."""
    from vkinfer._vk import get_device
    from vkinfer.vulkan import gemm_tiles, selftest

    dev = get_device()
    out["integer_dot"] = {"use_dot": dev.use_dot, "why": dev.dot_reason, **(dev.info.integer_dot_product or {})}
    out["float_rq"] = {"use_float_rq": dev.use_float_rq, "why": dev.float_rq_reason, **(dev.info.float_controls or {})}
    try:
        r = gemm_tiles.autotune(dev, budget_s=budget)
        out["tune"] = {"choice": f"{r.config.tile.name}/{'shared' if r.config.shared else 'direct'}",
                       "times_us": r.times_us, "elapsed_s": round(r.elapsed_s, 3), "timer": r.timer}
    except Exception as e:
        out["tune"] = {"error": f"{type(e).__name__}: {e}"}
    try:
        v = selftest.run(dev)
        out["selftest"] = {"passed": v.passed, "path": v.path, "seconds": round(v.seconds, 3),
                           "failed": [f"{c.name}: {c.why}" for c in v.cases if not c.ok]}
    except Exception as e:
        out["selftest"] = {"error": f"{type(e).__name__}: {e}"}
    print(f"integer dot: {out['integer_dot']}\nfloat requantization: {out['float_rq']}\ntune: {out['tune']}\n"
          f"selftest: {out['selftest']}", flush=True)


def pointwise_batch8(budget: float, batch: int = 8, repeat: int = 5) -> dict:
    """MobileNetV2 1.0/224's 1x1 convolutions (bench/mobilenet_v2_shapes.json, each shape once, weighted by its
    count) at batch `batch` on the Vulkan device, by device timestamps (minimum of `repeat` runs): on the
    device's default shaders (integer dot product and float requantization where it has them) and on the scalar
    shaders with the integer requantization, each with the tuned tile and the others while `budget` seconds last.
    Returns per (path, tile) the summed time, MACs, TOPS and the fraction
    of the device's packed int8 ceiling (CEILING_TOPS) where known."""
    from vkinfer import _vk
    from vkinfer.reference._spec import conv_spec
    from vkinfer.vulkan import TILES, Executable, GemmConfig, QLinearConv, gemm_tiles

    t0 = time.monotonic()
    shapes = [s for s in json.loads((ROOT / "bench" / "mobilenet_v2_shapes.json").read_text())
              if s["op"] == "conv" and s["k"] == 1 and s["group"] == 1]
    rng = np.random.default_rng(8)
    specs = []
    for s in shapes:
        x = rng.integers(0, 256, (batch, s["c"], s["h"], s["w"]), dtype=np.uint8)
        w = rng.integers(-127, 128, (s["m"], s["c"], 1, 1), dtype=np.int8)
        specs.append((conv_spec(x, 0.02, np.uint8(128), w, 0.01, np.int8(0), 0.3, np.uint8(120),
                                strides=(s["stride"],) * 2), s["count"]))
    macs = sum(cnt * batch * sp.out_shape[2] * sp.out_shape[3] * sp.w.shape[0] * sp.w.shape[1] for sp, cnt in specs)
    default = _vk.get_device()
    if not default.timestamps:
        return {"error": "the queue has no timestamps"}
    paths = [("default", default)] if default.use_dot or default.use_float_rq else []
    paths.append(("scalar", _vk.Device(default.info, integer_dot=False, float_rq=False) if paths else default))
    ceiling = next((v for k, v in CEILING_TOPS.items() if k in default.info.name), None)
    res: dict = {"batch": batch, "layers": sum(c for _, c in specs), "macs": macs, "ceiling_tops": ceiling,
                 "runs": {}}
    for path, dev in paths:
        tuned = gemm_tiles.gemm_config(dev)
        cands = [tuned] + [GemmConfig(t, sh, "sweep") for t in TILES.values() for sh in (True, False)
                           if (t, sh) != (tuned.tile, tuned.shared)]
        for cfg in cands:
            if time.monotonic() - t0 > budget:
                break
            label = f"{path} {cfg.tile.name}/{'shared' if cfg.shared else 'direct'}"
            total = 0.0
            for sp, cnt in specs:
                ex = Executable(QLinearConv(sp, dev, gemm=cfg), dev)
                ex.x.write(rng.integers(0, 2**32, ex.op.in_words, dtype=np.uint32))
                seq = dev.sequence()
                seq.dispatch(ex.prog)
                seq.run()
                total += cnt * min(seq.run(timed=True) for _ in range(repeat)) / 1e3
            tops = 2 * macs / (total * 1e-6) / 1e12
            res["runs"][label] = {"us": round(total, 1), "tops": round(tops, 3),
                                  "of_ceiling": None if ceiling is None else round(tops / ceiling, 4)}
            print(f"  1x1 batch {batch} {label}: {total:.1f} us, {tops:.3f} TOPS"
                  + (f" ({100 * tops / ceiling:.1f}% of {ceiling} TOPS)" if ceiling else ""), flush=True)
    return res


# ----------------------------------------------------------------------------------------------------- table
COLUMNS = ["vkinfer vulkan", "vkinfer cpu", "vkinfer auto", "onnxruntime", "litert", "ncnn int8 vulkan",
           "ncnn int8 cpu"]


def table(records: list[dict], threads: int) -> str:
    head = ["model", "format", "vulkan ms (device ms)", f"cpu ms ({threads}t)", "auto ms [placement]",
            f"peer ms ({threads}t)", "ncnn int8 vulkan ms", "ncnn int8 cpu ms", "exact"]
    rows = []
    for r in records:
        if "skipped" in r:
            rows.append([r["model"], r["format"], *(["-"] * 6), r["skipped"]])
            continue
        e = r["engines"]

        def cell(k: str, e=e) -> str:
            v = e.get(k, {})
            if "error" in v:
                return "error"
            return "-" if v.get("median_ms") is None else f"{v['median_ms']:.3f}"

        vk = cell("vkinfer vulkan")
        if e.get("vkinfer vulkan", {}).get("device_ms") is not None:
            vk += f" ({e['vkinfer vulkan']['device_ms']:.3f})"
        if "vkinfer vulkan-scalar" in e:
            sc = e["vkinfer vulkan-scalar"]
            vk += f"; scalar {cell('vkinfer vulkan-scalar')}" + (
                f" ({sc['device_ms']:.3f})" if sc.get("device_ms") is not None else "")
        auto = cell("vkinfer auto")
        pl = e.get("vkinfer auto", {}).get("placement")
        if pl:
            auto += " [" + " ".join(f"{k}:{v}" for k, v in sorted(pl.items())) + "]"
        exact = "yes" if r.get("ok") else "NO: " + ", ".join(
            f"{k} {c['max_diff']}" for k, c in r.get("exact", {}).items() if not c["ok"])
        rows.append([r["model"], r["format"], vk, cell("vkinfer cpu"), auto, cell(r["peer"]),
                     cell("ncnn int8 vulkan"), cell("ncnn int8 cpu"), exact])
    return markdown_table(head, rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="folder for gpu_check.json and gpu_check.md")
    ap.add_argument("--junit", help="pytest's junit XML of the Vulkan test subset (its counts go in the JSON)")
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per engine and model (default 20)")
    ap.add_argument("--threads", type=int, help="CPU threads for vkinfer cpu/auto and the peers (default: "
                    "vkinfer.cpu.default_threads())")
    ap.add_argument("--budget", type=float, default=240.0, help="seconds for all models; later ones are skipped")
    ap.add_argument("--quick", action="store_true", help="MobileNetV2 QOperator and the field models only")
    ap.add_argument("--kernel-budget", type=float, default=30.0, help="seconds for the 1x1 batch-8 kernel sweep "
                    "(0: skip it)")
    ap.add_argument("--merge-junit", action="store_true", help="only put --junit's counts into an existing "
                    "DIR/gpu_check.json and rewrite the table (the tests run after the models)")
    args = ap.parse_args(argv)
    if args.repeat < 1 or (args.threads is not None and args.threads < 1) or args.budget <= 0:
        ap.error("--repeat, --threads and --budget must be positive")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.merge_junit:
        result = json.loads((out / "gpu_check.json").read_text())
        result["tests"] = junit_counts(Path(args.junit) if args.junit else None)
        return finish(result, out)
    from vkinfer import cpu

    threads = args.threads or cpu.default_threads()
    start = time.monotonic()
    dev = _device()
    result = {"date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "device": dev,
              "host": {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "platform": platform.platform(),
                       "python": platform.python_version()},
              "versions": {p: package_version(p) for p in ("numpy", "onnx", "onnxruntime", "ai-edge-litert", "ncnn")},
              "git": git_revision(ROOT), "threads": threads, "repeat": args.repeat,
              "tests": junit_counts(Path(args.junit) if args.junit else None), "models": []}
    print(f"device: {json.dumps(dev)}\nthreads {threads}, {args.repeat} runs per engine", flush=True)
    if "error" not in dev:
        tune_and_selftest(result, budget=2.0)
        if args.kernel_budget > 0:
            try:
                result["pointwise_batch8"] = pointwise_batch8(args.kernel_budget)
            except Exception as e:
                result["pointwise_batch8"] = {"error": f"{type(e).__name__}: {e}"}
    work = Path(tempfile.mkdtemp(prefix="gpu-check-ncnn-"))  # not under --out: only the results go there
    for name, fmt, build in _models(args.quick):
        left = args.budget - (time.monotonic() - start)
        if left < 5:
            result["models"].append({"model": name, "format": fmt, "skipped": "over --budget"})
            continue
        t0 = time.monotonic()
        try:
            rec = time_model(build(), threads, args.repeat, time.monotonic() + left * 0.5, work, dev)
        except Exception as e:
            rec = {"model": name, "format": fmt, "ok": False, "error": f"{type(e).__name__}: {e}",
                   "traceback": traceback.format_exc(limit=8), "engines": {}, "peer": "?"}
        rec["seconds"] = round(time.monotonic() - t0, 2)
        result["models"].append(rec)
        print(f"  {name}/{fmt}: {rec['seconds']} s, ok={rec.get('ok')}", flush=True)
        (out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str))  # partial results survive
    return finish(result, out)


def finish(result: dict, out: Path) -> int:
    """Write gpu_check.json and gpu_check.md, print the table; 1 when a model is not exact or vkinfer failed."""
    dev, tests, threads = result["device"], result["tests"], result["threads"]
    md = table(result["models"], threads)
    head = (f"GPU check: {dev.get('name', dev.get('error'))} (driver {dev.get('driver', '?')} "
            f"{dev.get('driver_info', '')}); host {result['host']['cpu']}, {threads} CPU thread(s)\n"
            f"tests: " + (", ".join(f"{k} {tests[k]}" for k in ("passed", "failed", "errors", "skipped"))
                          if "passed" in tests else tests.get("missing", "?")) + "\n\n")
    extra = ""
    if "tune" in result:
        extra += (f"integer dot product: {result.get('integer_dot', {}).get('why', '?')}; float requantization: "
                  f"{result.get('float_rq', {}).get('why', '?')}; GEMM tile: "
                  f"{result['tune'].get('choice', result['tune'].get('error'))}; self-test: "
                  f"{'passed' if result.get('selftest', {}).get('passed') else result.get('selftest')}\n\n")
    pw = result.get("pointwise_batch8") or {}
    if pw.get("runs"):
        extra += markdown_table(["1x1 layers, batch 8: path tile/staging", "device us", "TOPS", "of ceiling"],
                                [[k, f"{v['us']:.1f}", f"{v['tops']:.3f}",
                                  "-" if v["of_ceiling"] is None else f"{100 * v['of_ceiling']:.1f}%"]
                                 for k, v in pw["runs"].items()]) + "\n\n"
    md = extra + md
    (out / "gpu_check.md").write_text(head + md + "\n")
    (out / "gpu_check.json").write_text(json.dumps(result, indent=1, default=str))
    print(head + md)
    bad = [r for r in result["models"] if "skipped" not in r and not r.get("ok")]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
