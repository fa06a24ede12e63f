"""`vkinfer bench MODEL...`: vkinfer beside its peers on the same models and inputs, as JSON-lines records.

    vkinfer bench MODEL... [--device cpu,vulkan,auto] [--peer onnxruntime,litert,ncnn|none] [--threads 1,2]
                           [--runs N] [--warmup N] [--out FILE.jsonl] [--pin CPUS]

For each model and thread count every engine is created (vkinfer once per --device; each peer on the CPU) and
then run interleaved: each round runs every engine once, the order rotated by one each round (A B C, B C A,
C A B, ...), so no engine always runs first after a pause or always with another's data freshly evicted from
cache. The first --warmup rounds are not timed. A time is the wall time of one inference with the inputs set
and every output read back.

- vkinfer: ``vkinfer.InferenceSession(model, device=D, threads=T)``.
- onnxruntime (.onnx models): CPUExecutionProvider, default graph optimizations, intra-op T threads, inter-op 1,
  sequential, spinning off (an idle spinning ORT pool takes the cores from the engine that runs next).
- litert (.tflite models): ai-edge-litert's Interpreter, num_threads T (its default XNNPACK CPU path).
- ncnn: reported as missing (running it needs a model converted to ncnn's format, not supported yet).

Default peers: onnxruntime for .onnx models, litert for .tflite; ``--peer none`` for vkinfer alone. A peer that is
not installed, a device this machine does not have and an engine that fails on a model each give a record with
status "missing" or "error" and the reason; the other engines still run.

Session creation: ``create_cold_ms`` is the first creation of the engine's session for that (model, threads)
in the process plus its first inference (vkinfer compiles its plan, and Vulkan its pipelines, on the first run:
the time to the first answer is what compares across engines); ``create_warm_ms`` the same for a second
session, which is the one timed. The first run's outputs, on a seeded random input (8-bit inputs uniform over
their type; float inputs standard normal for ONNX, uniform(-1, 1) for TFLite, the range tflite_zoo calibrates
on), are compared with the reference engine's (vkinfer on the first device, or the first engine that ran):
``agreement`` (the reference's own record has none).

MACs and peak activation memory are vkinfer's analysis of the model, as ``vkinfer info`` prints them. Records
go to --out (default ``vkinfer-bench.jsonl``), appended one at a time as they finish (an interrupted run leaves
the finished ones), and a table to stdout. The record schema: vkinfer.benchmark.records.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from . import records
from .conditions import conditions, git_commit, vulkan_devices

DEFAULT_OUT = "vkinfer-bench.jsonl"
DEVICE_KINDS = ("cpu", "vulkan", "auto")
PEERS = ("onnxruntime", "litert", "ncnn")
INPUT_SEED = 20240601


class BadInput(ValueError):
    """A command line, model or option that cannot be benchmarked (one line, naming the culprit)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(message)


# --------------------------------------------------------------------------------------------- statistics


def _summary(latencies_ms: list[float]) -> dict[str, float]:
    """min, p50, p90, p99, max, mean, std (sample, ddof=1) and cv of the latencies (numpy's linear quantiles)."""
    try:
        from .stats import summary
    except ImportError:
        summary = None
    if summary is not None:
        return summary(latencies_ms)
    a = np.asarray(latencies_ms, np.float64)
    p50, p90, p99 = (float(v) for v in np.quantile(a, [0.5, 0.9, 0.99]))
    mean = float(a.mean())
    std = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return {"min_ms": float(a.min()), "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "max_ms": float(a.max()),
            "mean_ms": mean, "std_ms": std, "cv": std / mean if mean > 0 else 0.0}


def agreement(ref: list[np.ndarray], out: list[np.ndarray], reference: str) -> dict[str, Any]:
    """How far `out` is from `ref` (outputs in the same order): the fraction of identical values over all
    outputs, and the largest absolute difference (in steps for integer outputs). Outputs of different counts
    or shapes: identical_fraction 0 and max_abs_diff null, with a note."""
    rec: dict[str, Any] = {"reference": reference}
    if len(ref) != len(out) or any(np.shape(a) != np.shape(b) for a, b in zip(ref, out, strict=False)):
        rec.update(identical_fraction=0.0, max_abs_diff=None,
                   note=f"outputs differ in count or shape: {[np.shape(a) for a in ref]} vs "
                        f"{[np.shape(b) for b in out]}")
        return rec
    total = same = 0
    worst = 0.0
    for a, b in zip(ref, out, strict=True):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        total += a64.size
        same += int(np.count_nonzero((a64 == b64) | (np.isnan(a64) & np.isnan(b64))))
        if a64.size:
            d = np.abs(a64 - b64)
            d = d[~np.isnan(d)]
            worst = max(worst, float(d.max()) if d.size else 0.0)
    rec.update(identical_fraction=same / total if total else 1.0, max_abs_diff=worst if math.isfinite(worst) else None)
    return rec


# --------------------------------------------------------------------------------------------- models and inputs


@dataclass
class Model:
    """A model file to benchmark: its bytes, format and seeded inputs."""

    path: str
    data: bytes
    tflite: bool
    feed: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def default_peer(self) -> str:
        return "litert" if self.tflite else "onnxruntime"


def _random(rng: np.random.Generator, dtype: np.dtype, shape: list[int], tflite: bool) -> np.ndarray:
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dtype)
    if np.issubdtype(dtype, np.bool_):
        return rng.integers(0, 2, shape).astype(bool)
    if tflite:
        return rng.uniform(-1.0, 1.0, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def _static(shape) -> list[int]:
    return [int(d) if isinstance(d, int | np.integer) and d > 0 else 1 for d in (shape or [])]


def load_model(path: str) -> Model:
    """The model at `path` with a seeded input for every graph input; BadInput naming the file when it is missing
    or is neither a readable ONNX model nor a .tflite flatbuffer."""
    from ..model.tflite_import import is_tflite

    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise BadInput(f"{path}: cannot read model: {e.strerror or e}") from None
    rng = np.random.default_rng(INPUT_SEED)
    if is_tflite(data):
        return Model(path, data, True, _tflite_feed(path, data, rng))
    import onnx

    try:
        proto = onnx.load_model_from_string(data)
        if not proto.graph.node:
            raise ValueError("the graph has no nodes")
        inits = {t.name for t in proto.graph.initializer}
        feed = {}
        for vi in proto.graph.input:
            if vi.name in inits:
                continue
            tt = vi.type.tensor_type
            dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
            shape = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else 1 for d in tt.shape.dim]
            feed[vi.name] = _random(rng, dtype, shape, False)
    except Exception as e:  # noqa: BLE001 - protobuf raises several types for garbage
        raise BadInput(f"{path}: not a readable ONNX or .tflite model ({type(e).__name__}: {e})") from None
    return Model(path, data, False, feed)


def _tflite_feed(path: str, data: bytes, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """From the TFLite interpreter's input details (vkinfer's importer where ai-edge-litert is missing)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError:
        Interpreter = None
    try:
        if Interpreter is not None:
            it = Interpreter(model_content=data)
            return {d["name"]: _random(rng, np.dtype(d["dtype"]), _static(list(d["shape"])), True)
                    for d in it.get_input_details()}
        from ..model.session import InferenceSession

        s = InferenceSession(data, device="reference")
        types = {"tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(int32)": np.int32}
        return {i.name: _random(rng, np.dtype(types.get(i.type, np.float32)), _static(i.shape), True)
                for i in s.get_inputs()}
    except Exception as e:  # noqa: BLE001
        raise BadInput(f"{path}: not a loadable .tflite model ({type(e).__name__}: {e})") from None


def analysis(sess, feed: dict[str, np.ndarray]) -> tuple[int | None, int | None]:
    """(MACs of one inference, peak bytes of live activations) of a vkinfer session's graph, as `vkinfer info`
    counts them: convolutions and matrix products; tensors alive from their producer to their last reader."""
    from ..model.plan import trace

    g = sess.graph
    plan = sess.plan(feed)
    info = plan.info if plan is not None else trace(g, feed)

    def nbytes(name: str) -> int:
        shape, dtype = info.get(name, ((), np.dtype(np.uint8)))
        return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize

    macs, last_use = 0, {}
    for i, n in enumerate(g.nodes):
        for name in n.inputs:
            last_use[name] = i
        out = info.get(n.outputs[0], ((),))[0] if n.outputs else ()
        w = g.consts.get(n.inputs[3]) if len(n.inputs) > 3 else None
        if n.op in ("QLinearConv", "vkinfer:QLinearConvClamp") and w is not None:
            macs += int(np.prod(out)) * int(np.prod(w.shape[1:]))
        elif n.op in ("ConvInteger",) and n.inputs[1] in g.consts:
            macs += int(np.prod(out)) * int(np.prod(g.consts[n.inputs[1]].shape[1:]))
        elif n.op in ("QLinearMatMul", "com.microsoft:QGemm", "vkinfer:QGemmClamp", "MatMulInteger"):
            a = info.get(n.inputs[0], ((),))[0]
            if a:
                macs += int(np.prod(out)) * int(a[-2] if n.attrs.get("transA", 0) else a[-1])
    outputs = {o.name for o in g.outputs}
    live = {t.name: nbytes(t.name) for t in g.inputs}
    peak = sum(live.values())
    for i, n in enumerate(g.nodes):
        for name in n.outputs:
            live[name] = nbytes(name)
        peak = max(peak, sum(live.values()))
        for name in [k for k in live if last_use.get(k, -1) <= i and k not in outputs]:
            del live[name]
    return macs, peak


# --------------------------------------------------------------------------------------------- engines


@dataclass
class Engine:
    """One engine on one device for one (model, threads): its runner once created, else why not."""

    name: str
    device: str
    status: str = "ok"
    error: str | None = None
    run: Callable[[], list[np.ndarray]] | None = None
    outputs: list[np.ndarray] | None = None
    create_cold_ms: float | None = None
    create_warm_ms: float | None = None
    session: Any = None
    latencies: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        return f"{self.name}/{self.device}"


def _vkinfer_factory(model: Model, device: str, threads: int) -> Callable[[], tuple[Callable, Any]]:
    from ..model.session import InferenceSession

    def make():
        s = InferenceSession(model.data, device=device, threads=threads)
        feed = model.feed
        return (lambda: s.run(None, feed)), s

    return make


def _ort_factory(model: Model, threads: int) -> Callable[[], tuple[Callable, Any]]:
    import onnxruntime as ort

    def make():
        opts = ort.SessionOptions()
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        o = ort.InferenceSession(model.data, opts, providers=["CPUExecutionProvider"])
        feed = model.feed
        return (lambda: o.run(None, feed)), o

    return make


def _litert_factory(model: Model, threads: int) -> Callable[[], tuple[Callable, Any]]:
    from ai_edge_litert.interpreter import Interpreter

    def make():
        it = Interpreter(model_content=model.data, num_threads=threads)
        it.allocate_tensors()
        ins = [(d["index"], model.feed[d["name"]]) for d in it.get_input_details()]
        idx = [d["index"] for d in it.get_output_details()]

        def run() -> list[np.ndarray]:
            for i, x in ins:
                it.set_tensor(i, x)
            it.invoke()
            return [it.get_tensor(i) for i in idx]  # get_tensor returns a copy

        return run, it

    return make


def _missing_module(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def _why_missing(name: str, device: str, model: Model) -> str | None:
    """Why engine `name` cannot run on `device` for `model` here (None: it can be tried)."""
    if name == "vkinfer":
        if device == "auto":
            return None
        from .. import ops

        try:
            ops._backend(device, None)  # the device exists (a Vulkan driver, that variant on this CPU)
        except Exception as e:  # noqa: BLE001 - VulkanUnavailableError, ValueError, a driver failure
            return f"device {device} is not available here: {e}"
        return None
    if name == "onnxruntime":
        if _missing_module("onnxruntime"):
            return "onnxruntime is not installed (pip install onnxruntime)"
        if model.tflite:
            return "onnxruntime does not run .tflite models"
        return None
    if name == "litert":
        if _missing_module("ai_edge_litert"):
            return "ai-edge-litert is not installed (pip install ai-edge-litert)"
        if not model.tflite:
            return "litert runs .tflite models only"
        return None
    if _missing_module("ncnn"):
        return "ncnn is not installed (pip install ncnn)"
    return "ncnn needs a model converted to ncnn's .param/.bin format, which vkinfer bench does not do yet"


def _create(engine: Engine, make: Callable[[], tuple[Callable, Any]]) -> None:
    """Create the session twice (cold, then warm), each time up to its first outputs; keep the second."""
    try:
        for attempt in range(2):
            t0 = time.perf_counter()
            run, sess = make()
            outs = [np.asarray(o) for o in run()]
            ms = (time.perf_counter() - t0) * 1e3
            if attempt == 0:
                engine.create_cold_ms = ms
                del run, sess
            else:
                engine.create_warm_ms = ms
                engine.run, engine.session, engine.outputs = run, sess, outs
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - any engine failure is that engine's record
        engine.status, engine.error, engine.run = "error", f"{type(e).__name__}: {e}".strip(), None


def make_engines(model: Model, devices: list[str], peers: list[str], threads: int) -> list[Engine]:
    """vkinfer on each device, then each peer on the CPU: created (or marked missing/error), in record order."""
    engines = [Engine("vkinfer", d) for d in devices] + [Engine(p, "cpu") for p in peers]
    for e in engines:
        why = _why_missing(e.name, e.device, model)
        if why is not None:
            e.status, e.error = "missing", why
            continue
        try:
            make = (_vkinfer_factory(model, e.device, threads) if e.name == "vkinfer" else
                    _ort_factory(model, threads) if e.name == "onnxruntime" else _litert_factory(model, threads))
        except ImportError as err:
            e.status, e.error = "missing", f"{e.name}: {err}"
            continue
        _create(e, make)
    return engines


def interleave(engines: list[Engine], runs: int, warmup: int) -> None:
    """Run the ok engines in rotating order, `warmup` untimed rounds and `runs` timed ones (ms in .latencies).
    An engine that raises is marked "error" and leaves the rotation."""
    for r in range(warmup + runs):
        live = [e for e in engines if e.status == "ok"]
        if not live:
            return
        k = r % len(live)
        for e in live[k:] + live[:k]:
            try:
                t0 = time.perf_counter()
                e.run()
                dt = (time.perf_counter() - t0) * 1e3
            except KeyboardInterrupt:
                raise
            except Exception as err:  # noqa: BLE001
                e.status, e.error, e.run = "error", f"{type(err).__name__}: {err}", None
                e.latencies = []
                continue
            if r >= warmup:
                e.latencies.append(dt)


def bench_model(model: Model, devices: list[str], peers: list[str], threads: int, runs: int, warmup: int,
                cond: dict[str, Any]) -> list[dict[str, Any]]:
    """Every engine's record for one model at one thread count."""
    engines = make_engines(model, devices, peers, threads)
    interleave(engines, runs, warmup)
    macs = peak = None
    for e in engines:  # the analysis of the first vkinfer session that was made
        if e.name == "vkinfer" and e.session is not None:
            try:
                macs, peak = analysis(e.session, model.feed)
            except Exception:  # noqa: BLE001 - the numbers are optional, the timing is not
                pass
            break
    ref = next((e for e in engines if e.outputs is not None), None)
    out = []
    for e in engines:
        rec = records.new_record(model.path, e.name, e.device, threads, status=e.status, error=e.error,
                                 runs=runs, warmup=warmup, create_cold_ms=e.create_cold_ms,
                                 create_warm_ms=e.create_warm_ms, macs=macs, model_bytes=len(model.data),
                                 peak_activation_bytes=peak, conditions=cond)
        if e.status == "ok":
            rec["latencies_ms"] = list(e.latencies)
            rec.update(_summary(e.latencies))
            if macs is not None and rec["p50_ms"] > 0:
                rec["gops"] = 2 * macs / (rec["p50_ms"] * 1e-3) / 1e9
            if ref is not None and e is not ref:
                rec["agreement"] = agreement(ref.outputs, e.outputs, ref.name)
                rec["agreement"]["reference_device"] = ref.device
        out.append(rec)
    return out


# --------------------------------------------------------------------------------------------- command line


def _parse_list(spec: str, what: str) -> list[str]:
    items = [s.strip() for s in spec.split(",")]
    if not spec.strip() or any(not s for s in items):
        raise BadInput(f"{what} takes a comma-separated list, got {spec!r}")
    return list(dict.fromkeys(items))


def _parse_threads(spec: str) -> list[int]:
    out = []
    for s in _parse_list(spec, "--threads"):
        try:
            t = int(s)
        except ValueError:
            t = 0
        if t < 1:
            raise BadInput(f"--threads takes positive integers, got {s!r} in {spec!r}")
        out.append(t)
    return out


def _parse_cpus(spec: str) -> list[int]:
    """"0,2-3" -> [0, 2, 3]."""
    cpus: set[int] = set()
    for s in _parse_list(spec, "--pin"):
        lo, sep, hi = s.partition("-")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise BadInput(f"--pin takes CPU numbers and ranges like 0,2-3, got {s!r}") from None
        if a < 0 or b < a:
            raise BadInput(f"--pin takes CPU numbers and ranges like 0,2-3, got {s!r}")
        cpus.update(range(a, b + 1))
    return sorted(cpus)


def _parse_devices(spec: str) -> list[str]:
    devs = _parse_list(spec, "--device")
    for d in devs:
        kind, _, which = d.partition(":")
        if kind not in DEVICE_KINDS or (kind == "auto" and which):
            raise BadInput(f"unknown device {d!r} (cpu, cpu:<variant>, vulkan, vulkan:<index|name|type> or auto)")
    return devs


def _parse_peers(spec: str | None) -> list[str] | None:
    if spec is None:
        return None
    if spec.strip() == "none":
        return []
    peers = _parse_list(spec, "--peer")
    for p in peers:
        if p not in PEERS:
            raise BadInput(f"unknown engine {p!r} for --peer (one of {', '.join(PEERS)}, or none)")
    return peers


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The options, checked; BadInput naming the culprit."""
    ap = _Parser(prog="vkinfer bench", description="benchmark vkinfer beside ONNX Runtime and LiteRT")
    ap.add_argument("models", nargs="+", metavar="MODEL", help=".onnx or .tflite files")
    ap.add_argument("--device", default="cpu", help="vkinfer devices, e.g. cpu,vulkan,auto (default cpu)")
    ap.add_argument("--peer", help="onnxruntime,litert,ncnn or none (default: onnxruntime for .onnx, litert for "
                                   ".tflite)")
    ap.add_argument("--threads", default="1", help="CPU thread counts, e.g. 1,2 (default 1)")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per engine (default 50)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed rounds first (default 5)")
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"JSON-lines file to append to (default {DEFAULT_OUT})")
    ap.add_argument("--pin", help="pin the process to these CPUs, e.g. 0 or 0-1")
    a = ap.parse_args(argv)
    if a.runs < 1:
        raise BadInput(f"--runs must be at least 1, got {a.runs}")
    if a.warmup < 0:
        raise BadInput(f"--warmup must be 0 or more, got {a.warmup}")
    a.devices = _parse_devices(a.device)
    a.peers = _parse_peers(a.peer)
    a.thread_counts = _parse_threads(a.threads)
    a.cpus = _parse_cpus(a.pin) if a.pin is not None else None
    return a


def _fmt(v: float | None, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def table(recs: list[dict[str, Any]]) -> str:
    """A plain-text table of records: one line each."""
    head = ("model", "engine", "device", "thr", "status", "p50 ms", "p90 ms", "p99 ms", "cv", "GOPS", "identical")
    rows = []
    for r in recs:
        ag = r.get("agreement") or {}
        ok = r["status"] == "ok"
        rows.append((Path(r["model"]).name, r["engine"], r["device"], str(r["threads"]),
                     r["status"] if ok else f"{r['status']}: {r['error']}"[:60],
                     _fmt(r["p50_ms"]), _fmt(r["p90_ms"]), _fmt(r["p99_ms"]), _fmt(r["cv"], ".1%"),
                     _fmt(r["gops"], ".2f"), _fmt(ag.get("identical_fraction"), ".4f")))
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in (head, *rows))


def main(argv: list[str] | None = None) -> int:
    """`vkinfer bench MODEL... [options]`; 0 when done, 2 on bad input, 130 when interrupted."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a = parse_args(argv)
        models = [load_model(p) for p in a.models]
        old_affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
        if a.cpus is not None:
            try:
                os.sched_setaffinity(0, a.cpus)
            except (OSError, AttributeError) as e:
                raise BadInput(f"--pin {a.pin}: cannot pin to CPUs {a.cpus}: {e}") from None
        existed = Path(a.out).exists()
        try:
            writer = records.Writer(a.out)
        except OSError as e:
            raise BadInput(f"--out {a.out}: cannot open for appending: {e.strerror or e}") from None
    except BadInput as e:
        print(f"vkinfer bench: error: {e}", file=sys.stderr)
        return 2
    done: list[dict[str, Any]] = []
    vk, commit = vulkan_devices(), git_commit()
    try:
        for m in models:
            peers = [m.default_peer] if a.peers is None else a.peers
            for t in a.thread_counts:
                cond = conditions(t, a.cpus, vulkan=vk, commit=commit)
                for rec in bench_model(m, a.devices, peers, t, a.runs, a.warmup, cond):
                    writer.write(rec)
                    done.append(rec)
    except KeyboardInterrupt:
        print(f"vkinfer bench: interrupted; {len(done)} finished record(s) in {a.out}", file=sys.stderr)
        return 130
    finally:
        writer.close()
        if not done and not existed:  # nothing finished: leave no empty results file behind
            Path(a.out).unlink(missing_ok=True)
        if a.cpus is not None and old_affinity is not None:
            os.sched_setaffinity(0, old_affinity)
        if done:
            print(table(done))
    print(f"wrote {len(done)} record(s) to {a.out}")
    return 0
