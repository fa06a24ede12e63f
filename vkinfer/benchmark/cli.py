"""`vkinfer bench MODEL...`: vkinfer beside its peers on the same models and inputs, as JSON-lines records.

    vkinfer bench [MODEL...] [--zoo] [--config FILE] [--device cpu,vulkan,auto] [--peer onnxruntime,litert,ncnn|none]
                  [--threads 1,2] [--runs N] [--warmup N] [--vulkan-runs N] [--out FILE.jsonl] [--pin CPUS]
                  [--plot DIR] [--per-layer] [--dataset FILE.npz] [--ray ADDRESS] [--ncnn-model FILE.param[:FILE.bin]]

For each model and thread count every engine is created (vkinfer once per --device; each peer on the CPU) and
then run interleaved: each round runs every engine once, the order rotated by one each round (A B C, B C A,
C A B, ...), so no engine always runs first after a pause or always with another's data freshly evicted from
cache. The first --warmup rounds are not timed. A time is the wall time of one inference with the inputs set
and every output read back. A progress bar (tqdm, rounds over the whole job) is drawn on stderr when stderr is a
terminal, and nothing otherwise.

- vkinfer: ``vkinfer.InferenceSession(model, device=D, threads=T)``.
- onnxruntime (.onnx models): CPUExecutionProvider, default graph optimizations, intra-op T threads, inter-op 1,
  sequential, spinning off (an idle spinning ORT pool takes the cores from the engine that runs next).
- litert (.tflite models): ai-edge-litert's Interpreter, num_threads T (its default XNNPACK CPU path).
- ncnn: the model the user converted to ncnn's format from the same float ONNX (with pnnx, say), given as
  ``--ncnn-model FILE.param`` (the weights in FILE.bin next to it) or ``--ncnn-model FILE.param:FILE.bin`` for a
  single-model run, or a config entry's ``ncnn`` (below). ncnn.Net with opt.num_threads T, use_vulkan_compute
  off (a peer runs on the CPU, as the others do), openmp_blocktime 0 (idle OpenMP workers do not spin, as ORT's
  do not), ncnn's other options at their defaults; load_param (a text .param) and load_model. Blobs: the model's
  input and output names where the .param has blobs of those names, else the .param's Input layers' blobs in
  order for the inputs (the first for a one-input model) and the last layer's last output blob for the one
  output. The input is the one the others get (an 8-bit input dequantized with its scale and zero point where
  the model has them, see engines.ncnn._qparams), as an ncnn.Mat without the batch dimension (C-contiguous
  float32); each output comes back as numpy with the batch dimension put back. Without an ncnn model the row is
  "missing" (needs --ncnn-model ...), as it is where the ncnn package is not installed; a .param or .bin that
  ncnn cannot load is an "error" row.

  Agreement of ncnn: it runs the float model while the others run the quantized one, so identical_fraction is
  expected below 1 and max_abs_diff is the float model's distance from the quantized one (no claim of
  exactness). It is measured in the float domain: a reference output that is 8-bit is dequantized first, with
  the scale and zero point of the quantized model's output (a DequantizeLinear or QuantizeLinear, or the QLinear
  operator, that makes it, seen through shape-only operators; a .tflite output's own quantization); where none
  is found the integers are compared as they are, and the agreement's ``note`` says so. An ncnn output whose
  shape differs from the reference's only by dimensions of size 1 (ncnn drops them) is compared in the
  reference's shape.

Default peers: onnxruntime for .onnx models, litert for .tflite, plus ncnn where an ncnn model is given;
``--peer none`` for vkinfer alone. A peer that is
not installed, a device this machine does not have and an engine that fails on a model each give a record with
status "missing" or "error" and the reason; the other engines still run. Each such reason is also printed in
full on stderr, one line naming the model, engine, device and cause (the table cuts it at 60 characters), and
an "error" record makes the exit status 1: a model vkinfer cannot run is a failure, not a result (exit status:
0 done, 1 an engine failed on a model, 2 bad input, 130 interrupted).

--vulkan-runs N: vkinfer's Vulkan rows (device vulkan or vulkan:<which>) take N timed runs instead of --runs,
spread evenly over the rounds (and at most N warm-up rounds). Default: --runs, except on a Vulkan device that is
a CPU emulation (type "cpu": Mesa's lavapipe/llvmpipe, SwiftShader), where it is min(--runs, 10): lavapipe runs
a MobileNetV2 in tenths of a second where the CPU backend takes milliseconds, and would dominate the job's time.
The record's ``runs`` is the row's own count.

Models: MODEL paths (.onnx, .tflite), and/or
- ``--zoo``: the built-in zoo (zoo.ZOO: MobileNetV2 224 and small CNNs and an MLP from vkinfer.testing.zoo, quantized
  as bench/models.py does, and tflite_zoo's tiny CNN), built on first use into build/models/bench of the checkout
  (the cache bench/models.py uses) or, for an installed vkinfer, the temporary directory ($VKINFER_BENCH_ZOO to
  choose). Records name them ``zoo:<name>/<format>``. Without --device, --zoo benchmarks cpu,vulkan.
- ``--config FILE``: the user's models and inputs, a JSON (or, for a .toml file, TOML) object::

      {"models": ["a.onnx",
                  {"path": "b.tflite", "name": "b-int8", "inputs": "b_inputs.npz"},
                  {"path": "c.onnx", "inputs": "c_input.npy"},
                  {"path": "d.onnx", "ncnn": "d-float.param"}]}

      # the same in TOML
      models = ["a.onnx"]
      [[models]]                 # (either a list of strings or of tables in one file)
      path = "b.tflite"
      name = "b-int8"            # the record's "model" (default: the path as written)
      inputs = "b_inputs.npz"    # arrays named by the model's inputs; a .npy for a one-input model
      ncnn = "b.param"           # the ncnn peer's model (as --ncnn-model: "FILE.param" or "FILE.param:FILE.bin")

  Paths are relative to the config file. Without ``inputs`` the seeded random input below is used. Inputs must
  name exactly the model's inputs, with its dtypes and ranks. Any other key, a missing file or a mismatch is
  bad input (exit 2, the message names the file and entry).

Session creation: ``create_cold_ms`` is the first creation of the engine's session for that (model, threads)
in the process plus its first inference (vkinfer compiles its plan, and Vulkan its pipelines, on the first run:
the time to the first answer is what compares across engines); ``create_warm_ms`` the same for a second
session, which is the one timed. The first run's outputs, on a seeded random input (8-bit inputs uniform over
their type; float inputs standard normal for ONNX, uniform(-1, 1) for TFLite, the range tflite_zoo calibrates
on), are compared with the reference engine's (vkinfer on the first device, or the first engine that ran):
``agreement`` (the reference's own record has none).

MACs and peak activation memory are vkinfer's analysis of the model, as ``vkinfer info`` prints them.

--per-layer: after the timed runs (so the timers do not perturb them), each vkinfer session's plan is profiled
over layer_times.PROFILE_ROUNDS inferences into the record's ``per_layer``: one entry per native operator of its CPU
segments (the native executor's per-operator timers; ``node`` is ``"<edge>"`` for a segment's layout
conversions), per node of its Vulkan segments (device time from Vulkan timestamp queries, as the dispatcher's
calibration measures a node) and per host node (wall time), each ``{"node", "device", "op", "measured_ms",
"predicted_ms"}``; predicted_ms is the dispatcher's predicted time of the node on that device (device auto: its
placement's costs; otherwise the calibrated cost model where one is cached on this machine), null where there
is none.

--dataset FILE.npz (x: inputs, y: labels): top-1 of each ok engine, from vkinfer.benchmark.accuracy.evaluate,
in the record's ``accuracy``. --ray ADDRESS: the (model, device, threads) jobs go to the nodes of a Ray cluster
(vkinfer.benchmark.fleet.run; ``pip install vkinfer[fleet]``), whose records are written to --out.

--plot DIR: PNGs (vkinfer.benchmark.plots): latency.png (a panel per model, the engines side by side) and,
with --per-layer, per_layer-*.png (measured beside predicted per node). ``vkinfer bench plot`` draws them from a
results file, and the A/B comparison of two.

Records go to --out (default ``vkinfer-bench.jsonl``), appended one at a time as they finish (an interrupted run
leaves the finished ones), and a table to stdout. The record schema: vkinfer.benchmark.records.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

from . import records
from .conditions import conditions, git_commit, vulkan_devices
from .engines import PEERS, _missing_module
from .load import BadInput, Model, load_config, load_model, ncnn_files
from .schedule import SOFT_VULKAN_RUNS, bench_model
from .zoo import ZOO, zoo_models

DEFAULT_OUT = "vkinfer-bench.jsonl"
DEVICE_KINDS = ("cpu", "vulkan", "auto")



class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(message)


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
    ap.add_argument("models", nargs="*", metavar="MODEL", help=".onnx or .tflite files")
    ap.add_argument("--zoo", action="store_true", help="the built-in zoo: " + ", ".join(ZOO))
    ap.add_argument("--config", help="a JSON or TOML file of models and their inputs (cli.py's docstring)")
    ap.add_argument("--device", help="vkinfer devices, e.g. cpu,vulkan,auto (default cpu; cpu,vulkan with --zoo)")
    ap.add_argument("--peer", help="onnxruntime,litert,ncnn or none (default: onnxruntime for .onnx, litert for "
                                   ".tflite)")
    ap.add_argument("--threads", default="1", help="CPU thread counts, e.g. 1,2 (default 1)")
    ap.add_argument("--runs", type=int, default=50, help="timed runs per engine (default 50)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed rounds first (default 5)")
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"JSON-lines file to append to (default {DEFAULT_OUT})")
    ap.add_argument("--pin", help="pin the process to these CPUs, e.g. 0 or 0-1")
    ap.add_argument("--vulkan-runs", type=int, help=f"timed runs of vkinfer's Vulkan rows (default --runs; "
                                                    f"min(--runs, {SOFT_VULKAN_RUNS}) on lavapipe/SwiftShader)")
    ap.add_argument("--plot", metavar="DIR", help="write PNG plots into DIR")
    ap.add_argument("--per-layer", action="store_true", help="time each node (after the timed runs)")
    ap.add_argument("--dataset", metavar="FILE.npz", help="labelled data (x, y): top-1 accuracy of every engine")
    ap.add_argument("--ray", metavar="ADDRESS", help="run the jobs on the nodes of this Ray cluster")
    ap.add_argument("--ncnn-model", metavar="FILE.param[:FILE.bin]",
                    help="the ncnn peer's model, converted from the same float ONNX (one MODEL only)")
    a = ap.parse_args(argv)
    if not a.models and not a.zoo and a.config is None:
        raise BadInput("no models: give MODEL paths, --zoo or --config FILE")
    if a.runs < 1:
        raise BadInput(f"--runs must be at least 1, got {a.runs}")
    if a.vulkan_runs is not None and a.vulkan_runs < 1:
        raise BadInput(f"--vulkan-runs must be at least 1, got {a.vulkan_runs}")
    if a.device is None:
        a.device = "cpu,vulkan" if a.zoo else "cpu"
    if a.dataset is not None:
        _check_dataset(a.dataset)
    if a.ncnn_model is not None:
        if len(a.models) != 1 or a.zoo or a.config is not None:
            raise BadInput("--ncnn-model goes with exactly one MODEL (with --config, give each model's ncnn entry)")
        a.ncnn = ncnn_files(a.ncnn_model)
    if a.ray is not None:
        _module("fleet", "--ray", "pip install vkinfer[fleet]")
        alone = [f for f, v in (("--per-layer", a.per_layer), ("--dataset", a.dataset),
                                ("--vulkan-runs", a.vulkan_runs), ("--ncnn-model", a.ncnn_model)) if v]
        if alone:
            raise BadInput(f"--ray does not take {', '.join(alone)} (the fleet runs timing jobs only)")
    if a.plot is not None:
        _module_plots()
    if a.warmup < 0:
        raise BadInput(f"--warmup must be 0 or more, got {a.warmup}")
    a.devices = _parse_devices(a.device)
    a.peers = _parse_peers(a.peer)
    a.thread_counts = _parse_threads(a.threads)
    a.cpus = _parse_cpus(a.pin) if a.pin is not None else None
    return a


def _module(name: str, flag: str, hint: str):
    """vkinfer.benchmark.<name>, imported now; BadInput saying it is not available here."""
    import importlib

    try:
        return importlib.import_module(f"{__package__}.{name}")
    except ImportError as e:
        raise BadInput(f"{flag} is not available: vkinfer.benchmark.{name} cannot be imported ({e}; {hint})") \
            from None


def _module_plots() -> None:
    if _missing_module("matplotlib"):
        raise BadInput("--plot needs matplotlib (pip install matplotlib)")


def _check_dataset(path: str) -> None:
    """--dataset: the accuracy module is there, records have the field, and the file has x and y."""
    _module("accuracy", "--dataset", "it comes with vkinfer's accuracy harness")
    if "accuracy" not in records.FIELDS:
        raise BadInput("--dataset is not available: the record schema has no accuracy field")
    try:
        with np.load(path, allow_pickle=False) as z:
            missing = [k for k in ("x", "y") if k not in z.files]
    except (OSError, ValueError, EOFError, AttributeError) as e:
        raise BadInput(f"--dataset {path}: not a readable .npz ({e})") from None
    if missing:
        raise BadInput(f"--dataset {path}: no array {' or '.join(missing)} (x: inputs, y: labels)")


def _fmt(v: float | None, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def table(recs: list[dict[str, Any]]) -> str:
    """A plain-text table of records: one line each."""
    head = ("model", "engine", "device", "thr", "status", "p50 ms", "p90 ms", "p99 ms", "cv", "GOPS", "identical")
    rows = []
    for r in recs:
        ag = r.get("agreement") or {}
        ok = r["status"] == "ok"
        name = r["model"][4:] if r["model"].startswith("zoo:") else Path(r["model"]).name
        rows.append((name, r["engine"], r["device"], str(r["threads"]),
                     r["status"] if ok else f"{r['status']}: {r['error']}"[:60],
                     _fmt(r["p50_ms"]), _fmt(r["p90_ms"]), _fmt(r["p99_ms"]), _fmt(r["cv"], ".1%"),
                     _fmt(r["gops"], ".2f"), _fmt(ag.get("identical_fraction"), ".4f")))
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in (head, *rows))


class _Progress:
    """A tqdm bar of rounds over the whole job on stderr, silent when stderr is not a terminal (or tqdm is
    missing)."""

    def __init__(self, total: int):
        self.bar = None
        if not sys.stderr.isatty():
            return
        try:
            from tqdm import tqdm
        except ImportError:
            return
        self.bar = tqdm(total=total, unit="round", file=sys.stderr, leave=False, dynamic_ncols=True)

    def describe(self, text: str) -> None:
        if self.bar is not None:
            self.bar.set_description_str(text, refresh=True)

    def __call__(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _models(a: argparse.Namespace) -> list[Model]:
    models = [load_model(p) for p in a.models]
    if a.ncnn_model is not None:
        models[0].ncnn = a.ncnn
    if a.config is not None:
        models += load_config(a.config)
    if a.zoo:
        models += zoo_models()
    return models


def _run_ray(a: argparse.Namespace, models: list[Model], writer: records.Writer, done: list) -> None:
    """--ray: the (model, device, threads) jobs to the cluster (vkinfer.benchmark.fleet), its records to --out."""
    fleet = _module("fleet", "--ray", "pip install vkinfer[fleet]")
    jobs = [{"model": m.label, "data": m.data, "device": list(a.devices), "threads": t,
             "peers": [m.default_peer] if a.peers is None else a.peers}
            for m in models for t in a.thread_counts]
    bench_args = {"runs": a.runs, "warmup": a.warmup, "pin": a.cpus}
    for rec in fleet.run(a.ray, jobs, bench_args):
        writer.write(rec)
        done.append(rec)


def write_plots(recs: list[dict[str, Any]], out_dir: str) -> list[Path]:
    """--plot: latency.png and (records with per_layer) per_layer-*.png in `out_dir`; the paths written."""
    from . import plots

    return plots.write_all(recs, out_dir)


def main(argv: list[str] | None = None) -> int:
    """`vkinfer bench MODEL... [options]`; 0 when done, 1 when an engine failed on a model (an "error" record) or
    the run failed, 2 on bad input, 130 when interrupted."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a = parse_args(argv)
        models = _models(a)
        if a.plot is not None:
            try:
                Path(a.plot).mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise BadInput(f"--plot {a.plot}: cannot create the directory: {e.strerror or e}") from None
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
    status = 0
    progress = _Progress(len(models) * len(a.thread_counts) * (a.warmup + a.runs))
    try:
        if a.ray is not None:
            _run_ray(a, models, writer, done)
        else:
            vk, commit = vulkan_devices(), git_commit()
            for m in models:
                peers = m.default_peers if a.peers is None else a.peers
                for t in a.thread_counts:
                    progress.describe(f"{Path(m.label).name} t{t}")
                    cond = conditions(t, a.cpus, vulkan=vk, commit=commit)
                    for rec in bench_model(m, a.devices, peers, t, a.runs, a.warmup, cond,
                                           vulkan_runs=a.vulkan_runs, layers=a.per_layer, dataset=a.dataset,
                                           tick=progress):
                        writer.write(rec)
                        done.append(rec)
    except KeyboardInterrupt:
        print(f"vkinfer bench: interrupted; {len(done)} finished record(s) in {a.out}", file=sys.stderr)
        status = 130
    except (records.RecordError, BadInput, ValueError, RuntimeError, ConnectionError) as e:
        msg = str(e) if a.ray is None or str(e).startswith(f"--ray {a.ray}") else f"--ray {a.ray}: {e}"
        print(f"vkinfer bench: error: {one_line(msg)}", file=sys.stderr)
        status = 2 if isinstance(e, BadInput) else 1  # an address or set-up refused: bad input
    except Exception as e:  # noqa: BLE001 - anything else still ends in one line and a failing status
        print(f"vkinfer bench: error: {type(e).__name__}: {one_line(str(e))}", file=sys.stderr)
        status = 1
    finally:
        progress.close()
        writer.close()
        if not done and not existed:  # nothing finished: leave no empty results file behind
            Path(a.out).unlink(missing_ok=True)
        if a.cpus is not None and old_affinity is not None:
            os.sched_setaffinity(0, old_affinity)
        if done:
            print(table(done))
    if a.plot is not None and done:
        for path in write_plots(done, a.plot):
            print(f"wrote {path}")
    failed = 0
    for r in done:  # the table cuts reasons at 60 characters: each in full here, one line
        if r["status"] != "ok":
            failed += r["status"] == "error"
            print(f"vkinfer bench: {'error' if r['status'] == 'error' else 'skipped'}: {r['model']}: "
                  f"{r['engine']} on {r['device']} ({r['threads']} thread(s)): {one_line(str(r['error']))}",
                  file=sys.stderr)
    if status:
        return status
    print(f"wrote {len(done)} record(s) to {a.out}")
    return 1 if failed else 0


def one_line(text: str) -> str:
    """`text` with its line breaks and runs of blanks made single spaces (an error message on one line)."""
    return " ".join(text.split())
