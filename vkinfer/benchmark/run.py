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
  the model has them, see _qparams), as an ncnn.Mat without the batch dimension (C-contiguous float32); each
  output comes back as numpy with the batch dimension put back. Without an ncnn model the row is "missing"
  (needs --ncnn-model ...), as it is where the ncnn package is not installed; a .param or .bin that ncnn cannot
  load is an "error" row.

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
- ``--zoo``: the built-in zoo (ZOO: MobileNetV2 224 and small CNNs and an MLP from vkinfer.models.zoo, quantized
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
over per_layer.PROFILE_ROUNDS inferences into the record's ``per_layer``: one entry per native operator of its CPU
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
from .per_layer import per_layer
from .stats import summary

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
    name: str | None = None  # the records' "model" (default: the path)
    ncnn: tuple[str, str] | None = None  # the ncnn peer's (.param, .bin), converted from the same float ONNX

    @property
    def label(self) -> str:
        return self.name or self.path

    @property
    def default_peer(self) -> str:
        return "litert" if self.tflite else "onnxruntime"

    @property
    def default_peers(self) -> list[str]:
        """The peers without --peer: the format's own, and ncnn where an ncnn model is given."""
        return [self.default_peer] + (["ncnn"] if self.ncnn is not None else [])


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


def load_model(path: str, name: str | None = None) -> Model:
    """The model at `path` with a seeded input for every graph input; BadInput naming the file when it is missing
    or is neither a readable ONNX model nor a .tflite flatbuffer. `name`: the records' name for it."""
    from ..model.tflite_import import is_tflite

    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise BadInput(f"{path}: cannot read model: {e.strerror or e}") from None
    rng = np.random.default_rng(INPUT_SEED)
    if is_tflite(data):
        return Model(path, data, True, _tflite_feed(path, data, rng), name)
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
    return Model(path, data, False, feed, name)


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
    from ..model.stats import macs_and_peak

    g = sess.graph
    plan = sess.plan(feed)
    info = plan.info if plan is not None else trace(g, feed)

    return macs_and_peak(g, info)


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
    cap: int | None = None  # timed runs when fewer than the job's (--vulkan-runs)

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


def ort_session_options(threads: int) -> Any:
    """ONNX Runtime's options for a peer on `threads` cores: intra-op `threads`, inter-op 1, sequential, quiet,
    spinning off (an idle spinning ORT pool takes the cores from the engine that runs next: on MobileNetV2,
    2 threads, 2 cores, vkinfer took 18.9 ms beside a spinning ORT and 9.0 ms beside a non-spinning one, while
    ORT itself took 5.9 and 5.6 ms)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return opts


def _ort_factory(model: Model, threads: int) -> Callable[[], tuple[Callable, Any]]:
    import onnxruntime as ort

    def make():
        o = ort.InferenceSession(model.data, ort_session_options(threads), providers=["CPUExecutionProvider"])
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


NCNN_NEEDS = "needs --ncnn-model (a model converted from the same float ONNX, e.g. with pnnx)"
NCNN_MAGIC = "7767517"  # the first line of a text .param


def ncnn_files(spec: str, where: str = "--ncnn-model", base: Path | None = None) -> tuple[str, str]:
    """The (.param, .bin) of ``FILE.param`` (FILE.bin next to it) or ``FILE.param:FILE.bin``, relative to `base`
    when given; BadInput naming the file when one is missing or unreadable."""
    def at(s: str) -> Path:
        return base / s if base is not None else Path(s)

    param, binf = spec, ""
    if not at(spec).is_file() and ":" in spec:
        param, _, binf = spec.rpartition(":")
    if not param:
        raise BadInput(f"{where}: expected FILE.param or FILE.param:FILE.bin, got {spec!r}")
    pp = at(param)
    bp = at(binf) if binf else pp.with_suffix(".bin")
    for what, f in (("ncnn .param", pp), ("ncnn .bin", bp)):
        try:
            with open(f, "rb") as fh:
                fh.read(1)
        except OSError as e:
            raise BadInput(f"{where}: {f}: cannot read the {what}: {e.strerror or e}") from None
    return str(pp), str(bp)


def ncnn_param_blobs(path: str) -> tuple[list[str], list[str], set[str]]:
    """(the Input layers' blobs in order, the last layer's output blobs, every blob) of a text ncnn .param;
    RuntimeError naming ncnn and the file when it is not one (checked before ncnn reads it)."""
    def bad(why: str) -> RuntimeError:
        return RuntimeError(f"ncnn model {path}: {why}")

    try:
        lines = [ln.split() for ln in Path(path).read_text(encoding="utf-8").splitlines() if ln.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise bad(f"not a readable text .param ({getattr(e, 'strerror', None) or e})") from None
    if not lines or lines[0] != [NCNN_MAGIC]:
        raise bad(f"not a text .param (the first line is not the magic {NCNN_MAGIC})")
    try:
        n_layers, _ = (int(v) for v in lines[1])
    except (IndexError, ValueError):
        raise bad("the second line is not 'layer_count blob_count'") from None
    if n_layers < 1 or len(lines) - 2 != n_layers:
        raise bad(f"declares {n_layers} layers but has {len(lines) - 2}")
    inputs: list[str] = []
    blobs: set[str] = set()
    outs: list[str] = []
    for i, tok in enumerate(lines[2:], 3):
        try:
            n_in, n_out = int(tok[2]), int(tok[3])
        except (IndexError, ValueError):
            raise bad(f"line {i} is not 'type name inputs outputs blobs... params...'") from None
        if n_in < 0 or n_out < 0 or len(tok) < 4 + n_in + n_out:
            raise bad(f"line {i} names fewer blobs than it declares")
        outs = tok[4 + n_in:4 + n_in + n_out]
        blobs.update(tok[4:4 + n_in + n_out])
        if tok[0] == "Input":
            inputs += outs
    if not outs:
        raise bad("its last layer has no output blob")
    return inputs, outs, blobs


def _graph_names(model: Model) -> tuple[list[str], list[str]]:
    """The model's input (as fed) and output names, in order."""
    if not model.tflite:
        import onnx

        g = onnx.load_model_from_string(model.data).graph
        return list(model.feed), [o.name for o in g.output]
    try:
        from ai_edge_litert.interpreter import Interpreter

        return list(model.feed), [d["name"] for d in Interpreter(model_content=model.data).get_output_details()]
    except Exception:  # noqa: BLE001 - names are a preference; the .param's own blobs stand in
        return list(model.feed), []


# (scale, zero point) input positions of the operators that make (_Q_OUT) or read (_Q_IN) an 8-bit tensor
_Q_OUT = {"QuantizeLinear": (1, 2), "QLinearConv": (6, 7), "QLinearMatMul": (6, 7), "QLinearAdd": (6, 7),
          "QLinearMul": (6, 7), "QGemm": (7, 8), "QLinearSigmoid": (3, 4), "QLinearLeakyRelu": (3, 4),
          "QLinearSoftmax": (3, 4), "QLinearGlobalAveragePool": (3, 4), "QLinearAveragePool": (3, 4),
          "QLinearConcat": (0, 1)}
_Q_IN = {"DequantizeLinear": (1, 2), **{op: (1, 2) for op in _Q_OUT if op not in ("QuantizeLinear", "QLinearConcat")}}
_Q_SHAPE = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity", "MaxPool")  # keep the scale


def _qparams(model: Model) -> tuple[dict[str, tuple[float, int]], list[tuple[float, int] | None]]:
    """The (scale, zero point) of the model's 8-bit inputs (by name) and of each output (None: not 8-bit or not
    found): ONNX from the operator that makes the output (through shape-only operators) or first reads the
    input, .tflite from the interpreter's quantization. Empty where it cannot be told."""
    ins: dict[str, tuple[float, int]] = {}
    outs: list[tuple[float, int] | None] = []
    try:
        if model.tflite:
            from ai_edge_litert.interpreter import Interpreter

            it = Interpreter(model_content=model.data)
            for d in it.get_input_details():
                s, z = d["quantization"]
                if s:
                    ins[d["name"]] = (float(s), int(z))
            outs = [(float(d["quantization"][0]), int(d["quantization"][1])) if d["quantization"][0] else None
                    for d in it.get_output_details()]
            return ins, outs
        import onnx
        from onnx import numpy_helper

        g = onnx.load_model_from_string(model.data).graph
        consts = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        made = {o: n for n in g.node for o in n.output}

        def pair(n, at: tuple[int, int]) -> tuple[float, int] | None:
            i, j = at
            if len(n.input) <= i or n.input[i] not in consts:
                return None
            s = consts[n.input[i]]
            z = consts.get(n.input[j]) if len(n.input) > j else None
            if s.size != 1 or (z is not None and z.size != 1):
                return None
            return float(s.reshape(())), int(z.reshape(())) if z is not None else 0

        for name in model.feed:
            reader = next((n for n in g.node if name in n.input[:1] and n.op_type in _Q_IN), None)
            q = pair(reader, _Q_IN[reader.op_type]) if reader is not None else None
            if q is not None:
                ins[name] = q
        for o in g.output:
            n, q = made.get(o.name), None
            while n is not None and n.op_type in _Q_SHAPE:
                n = made.get(n.input[0])
            if n is not None and n.op_type in _Q_OUT:
                q = pair(n, _Q_OUT[n.op_type])
            outs.append(q)
    except Exception:  # noqa: BLE001 - no scale known: compared (or fed) as integers, and said so
        return {}, []
    return ins, outs


def _ncnn_input(x: np.ndarray, q: tuple[float, int] | None) -> np.ndarray:
    """The float32 C-contiguous array ncnn is fed for input `x`: without its batch dimension, dequantized when
    `x` is 8-bit and `q` its (scale, zero point)."""
    if np.issubdtype(x.dtype, np.integer) and q is not None:
        x = (x.astype(np.float32) - q[1]) * np.float32(q[0])
    a = np.asarray(x, np.float32)
    if a.ndim > 1 and a.shape[0] == 1:
        a = a[0]
    return np.ascontiguousarray(a, np.float32)


def _ncnn_factory(model: Model, threads: int) -> Callable[[], tuple[Callable, Any]]:
    import ncnn

    param, binf = model.ncnn  # type: ignore[misc]

    def make():
        in_blobs, last, blobs = ncnn_param_blobs(param)
        in_names, out_names = _graph_names(model)
        if in_names and all(n in blobs for n in in_names):
            ins = list(in_names)
        elif len(in_blobs) >= len(in_names):
            ins = in_blobs[:len(in_names)]
        else:
            raise RuntimeError(f"ncnn model {param}: {len(in_blobs)} Input blob(s) for the model's "
                               f"{len(in_names)} input(s) {', '.join(in_names)}")
        outs = list(out_names) if out_names and all(n in blobs for n in out_names) else last[-1:]
        qin, _ = _qparams(model)
        xs = [(b, _ncnn_input(model.feed[n], qin.get(n))) for b, n in zip(ins, in_names, strict=True)]
        net = ncnn.Net()
        net.opt.num_threads = threads
        net.opt.use_vulkan_compute = False
        net.opt.openmp_blocktime = 0
        if net.load_param(param) != 0:
            raise RuntimeError(f"ncnn could not load {param} (load_param failed)")
        if net.load_model(binf) != 0:
            raise RuntimeError(f"ncnn could not load the weights {binf} for {param} (load_model failed)")

        def run() -> list[np.ndarray]:
            with net.create_extractor() as ex:
                for b, x in xs:
                    if ex.input(b, ncnn.Mat(x)) != 0:
                        raise RuntimeError(f"ncnn: no input blob {b!r} in {param}")
                got = []
                for b in outs:
                    r, m = ex.extract(b)
                    if r != 0:
                        raise RuntimeError(f"ncnn could not compute blob {b!r} of {param} (extract returned {r})")
                    got.append(np.array(m)[None])  # a copy, with the batch dimension
            return got

        return run, net

    return make


def _float_pair(model: Model, ref: Engine, e: Engine) -> tuple[list[np.ndarray], list[np.ndarray], str | None]:
    """The outputs of `ref` and `e` (one of them ncnn) made comparable in the float domain: the non-ncnn side's
    8-bit outputs dequantized (_qparams), ncnn's reshaped to the other's shape where they differ only by
    dimensions of size 1. The note says what was compared as integers, if anything."""
    _, qout = _qparams(model)
    raw: list[int] = []

    def deq(outs: list[np.ndarray]) -> list[np.ndarray]:
        res = []
        for i, a in enumerate(outs):
            q = qout[i] if i < len(qout) else None
            if np.issubdtype(a.dtype, np.integer):
                if q is None:
                    raw.append(i)
                else:
                    a = (a.astype(np.float64) - q[1]) * q[0]
            res.append(a)
        return res

    a = ref.outputs if ref.name == "ncnn" else deq(ref.outputs)  # type: ignore[arg-type]
    b = e.outputs if e.name == "ncnn" else deq(e.outputs)  # type: ignore[arg-type]
    nc, other = (b, a) if e.name == "ncnn" else (a, b)
    fixed = [x.reshape(o.shape) if x.shape != o.shape and x.size == o.size and
             [d for d in x.shape if d != 1] == [d for d in o.shape if d != 1] else x
             for x, o in zip(nc, other, strict=False)] + list(nc[len(other):])
    a, b = (a, fixed) if e.name == "ncnn" else (fixed, b)
    note = (f"float ncnn model against the quantized one; output(s) {sorted(set(raw))} are 8-bit with no scale "
            "found and compared as integers") if raw else None
    return a, b, note


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
    if model.ncnn is None:
        return NCNN_NEEDS
    return None


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
                    _ort_factory(model, threads) if e.name == "onnxruntime" else
                    _ncnn_factory(model, threads) if e.name == "ncnn" else _litert_factory(model, threads))
        except ImportError as err:
            e.status, e.error = "missing", f"{e.name}: {err}"
            continue
        _create(e, make)
    return engines


def _in_round(e: Engine, r: int, runs: int, warmup: int) -> bool:
    """Whether engine `e` runs in round `r`: every round, or for a capped one its last `cap` warm-up rounds and
    `cap` timed rounds spread evenly over the `runs`."""
    if e.cap is None or e.cap >= runs:
        return True
    if r < warmup:
        return r >= warmup - min(warmup, e.cap)
    t = r - warmup
    return (t + 1) * e.cap // runs > t * e.cap // runs


def interleave(engines: list[Engine], runs: int, warmup: int, tick: Callable[[int], None] | None = None) -> None:
    """Run the ok engines in rotating order, `warmup` untimed rounds and `runs` timed ones (ms in .latencies;
    an engine with a `cap` takes part in only that many of each, see _in_round). An engine that raises is marked
    "error" and leaves the rotation. `tick(n)` is told of each n rounds done (the progress bar)."""
    total = warmup + runs
    for r in range(total):
        if not any(e.status == "ok" for e in engines):
            if tick is not None:
                tick(total - r)
            return
        live = [e for e in engines if e.status == "ok" and _in_round(e, r, runs, warmup)]
        k = r % len(live) if live else 0
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
        if tick is not None:
            tick(1)


SOFT_VULKAN_RUNS = 10  # default --vulkan-runs on a CPU-emulated Vulkan device (lavapipe, SwiftShader)


def vulkan_cap(device: str, vk: list[dict[str, Any]] | str, runs: int, vulkan_runs: int | None) -> int | None:
    """The timed runs of a vkinfer row on `device` when fewer than `runs` (None: all): --vulkan-runs where given,
    else SOFT_VULKAN_RUNS on a Vulkan device of type "cpu" (vk: conditions.vulkan_devices(), preferred first)."""
    kind, _, which = device.partition(":")
    if kind != "vulkan":
        return None
    if vulkan_runs is not None:
        return vulkan_runs if vulkan_runs < runs else None
    if not isinstance(vk, list) or not vk:
        return None
    dev = vk[0]
    if which:
        dev = next((d for d in vk if which in (str(d.get("index")), d.get("name"), d.get("type"))), None)
        if dev is None:
            dev = vk[0] if not which.isdigit() else None
    soft = dev is not None and dev.get("type") == "cpu"
    return SOFT_VULKAN_RUNS if soft and SOFT_VULKAN_RUNS < runs else None


def bench_model(model: Model, devices: list[str], peers: list[str], threads: int, runs: int, warmup: int,
                cond: dict[str, Any], *, vulkan_runs: int | None = None, layers: bool = False,
                dataset: str | None = None, tick: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Every engine's record for one model at one thread count: timed interleaved (vkinfer's Vulkan rows capped
    as vulkan_cap says), then, outside the timed runs, `layers` (--per-layer) profiles each vkinfer session and
    `dataset` (--dataset) measures each engine's accuracy. `tick(n)`: n rounds done (the progress bar)."""
    engines = make_engines(model, devices, peers, threads)
    for e in engines:
        if e.name == "vkinfer":
            e.cap = vulkan_cap(e.device, cond.get("vulkan", []), runs, vulkan_runs)
    interleave(engines, runs, warmup, tick)
    macs = peak = None
    for e in engines:  # the analysis of the first vkinfer session that was made
        if e.name == "vkinfer" and e.session is not None:
            try:
                macs, peak = analysis(e.session, model.feed)
            except Exception:  # noqa: BLE001 - the numbers are optional, the timing is not
                pass
            break
    profiles: dict[int, Any] = {}
    if layers:
        for e in engines:
            if e.name == "vkinfer" and e.status == "ok" and e.session is not None:
                try:
                    profiles[id(e)] = per_layer(e.session, model.feed, threads)
                except KeyboardInterrupt:
                    raise
                except Exception as err:  # noqa: BLE001 - a profile that fails leaves the timing valid
                    print(f"vkinfer bench: warning: --per-layer of {model.label} on {e.device}: "
                          f"{type(err).__name__}: {err}", file=sys.stderr)
    accuracy = _accuracy(model, engines, threads, dataset) if dataset is not None else {}
    ref = next((e for e in engines if e.outputs is not None), None)
    out = []
    for e in engines:
        n = runs if e.cap is None else e.cap
        rec = records.new_record(model.label, e.name, e.device, threads, status=e.status, error=e.error,
                                 runs=n, warmup=warmup if e.cap is None else min(warmup, e.cap),
                                 create_cold_ms=e.create_cold_ms, create_warm_ms=e.create_warm_ms, macs=macs,
                                 model_bytes=len(model.data), peak_activation_bytes=peak, conditions=cond)
        if e.status == "ok":
            rec["latencies_ms"] = list(e.latencies)
            rec.update(summary(e.latencies))
            if macs is not None and rec["p50_ms"] > 0:
                rec["gops"] = 2 * macs / (rec["p50_ms"] * 1e-3) / 1e9
            if ref is not None and e is not ref:
                a, b, note = ref.outputs, e.outputs, None
                if "ncnn" in (e.name, ref.name):  # the float model against the quantized one (module docstring)
                    a, b, note = _float_pair(model, ref, e)
                rec["agreement"] = agreement(a, b, ref.name)
                rec["agreement"]["reference_device"] = ref.device
                if note is not None:
                    rec["agreement"]["note"] = "; ".join(filter(None, (rec["agreement"].get("note"), note)))
            if id(e) in profiles:
                rec["per_layer"] = profiles[id(e)]
        if dataset is not None and "accuracy" in rec:
            rec["accuracy"] = accuracy.get(id(e))
        out.append(rec)
    return out


def _accuracy(model: Model, engines: list[Engine], threads: int, dataset: str) -> dict[int, Any]:
    """Engine id -> vkinfer.benchmark.accuracy.evaluate's result for it (H-ACC's module): the vkinfer rows one
    device at a time, the peers together on the CPU. A failure is that engine's {"status": "error", ...}."""
    from . import accuracy as acc

    out: dict[int, Any] = {}
    groups: dict[str, list[Engine]] = {}
    for e in engines:
        if e.status == "ok":
            groups.setdefault(e.device if e.name == "vkinfer" else "#peers", []).append(e)
    for dev, es in groups.items():
        device = "cpu" if dev == "#peers" else dev
        try:
            res = acc.evaluate(model.path, dataset, [e.name for e in es], threads, device)
        except KeyboardInterrupt:
            raise
        except Exception as err:  # noqa: BLE001 - the accuracy of one group, not the run
            res = {e.name: {"top1": None, "n": 0, "status": "error", "error": f"{type(err).__name__}: {err}"}
                   for e in es}
        for e in es:
            out[id(e)] = res.get(e.name)
    return out


# --------------------------------------------------------------------------------------------- zoo and config

# The built-in zoo: name -> (cache file name, builder). ONNX models are vkinfer.models.zoo's float models
# quantized by ONNX Runtime as bench/models.py does (same recipe, same file names, same cache in a checkout).
ZOO_QUANT = {"per_channel": True, "activation_type": "uint8", "weight_type": "int8", "reduce_range": True,
             "seed": 0, "num_calib": 8}
ZOO_ONNX = ("mobilenet_v2", "mobilenet_v1", "shufflenet_like", "resnext_like", "dilated_net", "mlp")
ZOO = [f"{n}/qoperator" for n in ZOO_ONNX] + ["tiny_cnn/tflite-i8"]


def _zoo_file(name: str) -> str:
    model, fmt = name.split("/")
    if fmt == "tflite-i8":
        return f"{model}-seed0-int8-mean-softmax.tflite"
    return f"{model}-seed0-{fmt}-u8s8-perchannel-reducerange.onnx"


def zoo_dir() -> Path:
    """Where zoo models are cached: $VKINFER_BENCH_ZOO, else build/models/bench of the checkout vkinfer runs
    from, else vkinfer-bench-zoo in the temporary directory."""
    env = os.environ.get("VKINFER_BENCH_ZOO")
    if env:
        return Path(env)
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").exists() and (root / "vkinfer").is_dir():
        return root / "build" / "models" / "bench"
    import tempfile

    return Path(tempfile.gettempdir()) / "vkinfer-bench-zoo"


def _build_zoo(name: str) -> bytes:
    model, fmt = name.split("/")
    if fmt == "tflite-i8":
        from ..models import tflite_zoo

        return tflite_zoo.tiny_cnn(seed=0, dtype="int8")
    import logging

    from ..models import zoo

    logging.disable(logging.WARNING)  # quantize_static suggests pre-processing on every call
    try:
        return zoo.quantize(zoo.BUILDERS[model](seed=0), fmt=fmt, **ZOO_QUANT).SerializeToString()
    finally:
        logging.disable(logging.NOTSET)


def zoo_models(names: list[str] | None = None) -> list[Model]:
    """The zoo's models (built and cached on first use), named ``zoo:<name>/<format>``."""
    d = zoo_dir()
    out = []
    for name in names or ZOO:
        path = d / _zoo_file(name)
        if not path.exists():
            data = _build_zoo(name)
            try:
                d.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(f".tmp{os.getpid()}")
                tmp.write_bytes(data)
                tmp.replace(path)  # atomic: a half-written file is never taken for a cached model
            except OSError as e:
                raise BadInput(f"--zoo: cannot cache {name} in {d}: {e.strerror or e} (set $VKINFER_BENCH_ZOO)") \
                    from None
        out.append(load_model(str(path), f"zoo:{name}"))
    return out


CONFIG_KEYS = ("path", "name", "inputs", "ncnn")


def _load_inputs(where: str, path: Path, model: Model) -> dict[str, np.ndarray]:
    """The arrays of a .npz (by input name) or .npy (a one-input model), checked against the model's inputs."""
    want = model.feed
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise BadInput(f"{where}: cannot read inputs {path}: {e}") from None
    if isinstance(loaded, np.ndarray):  # a .npy
        if len(want) != 1:
            raise BadInput(f"{where}: {path} is one array but the model has {len(want)} inputs "
                           f"({', '.join(want)}): use a .npz")
        got = {next(iter(want)): loaded}
    else:
        try:
            with loaded as z:
                got = {k: np.asarray(z[k]) for k in z.files}
        except (OSError, ValueError, EOFError) as e:
            raise BadInput(f"{where}: cannot read inputs {path}: {e}") from None
    if set(got) != set(want):
        raise BadInput(f"{where}: {path} has arrays {sorted(got)}, the model's inputs are {sorted(want)}")
    for k, a in got.items():
        w = want[k]
        if a.dtype != w.dtype or a.ndim != w.ndim:
            raise BadInput(f"{where}: input {k!r} in {path} is {a.dtype} of shape {list(a.shape)}, the model "
                           f"takes {w.dtype} of rank {w.ndim} (like {list(w.shape)})")
    return {k: np.ascontiguousarray(got[k]) for k in want}


def load_config(path: str) -> list[Model]:
    """The models of a --config file (format: the module docstring); BadInput naming the file and entry."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise BadInput(f"--config {path}: cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        if p.suffix.lower() == ".toml":
            import tomllib

            doc = tomllib.loads(text)
        else:
            import json

            doc = json.loads(text)
    except ValueError as e:
        kind = "TOML" if p.suffix.lower() == ".toml" else "JSON"
        raise BadInput(f"--config {path}: not valid {kind} ({e})") from None
    if not isinstance(doc, dict) or set(doc) != {"models"}:
        raise BadInput(f"--config {path}: expected an object with one key, models (a list), got "
                       f"{sorted(doc) if isinstance(doc, dict) else type(doc).__name__}")
    entries = doc["models"]
    if not isinstance(entries, list) or not entries:
        raise BadInput(f"--config {path}: models must be a non-empty list")
    out = []
    for i, ent in enumerate(entries):
        where = f"--config {path}: models[{i}]"
        if isinstance(ent, str):
            ent = {"path": ent}
        if not isinstance(ent, dict):
            raise BadInput(f"{where}: expected a path or an object, got {type(ent).__name__}")
        extra = sorted(set(ent) - set(CONFIG_KEYS))
        if extra:
            raise BadInput(f"{where}: unknown key(s) {', '.join(extra)} (allowed: {', '.join(CONFIG_KEYS)})")
        if not isinstance(ent.get("path"), str) or not ent["path"]:
            raise BadInput(f"{where}: needs a path (a string)")
        for k in ("name", "inputs", "ncnn"):
            if k in ent and (not isinstance(ent[k], str) or not ent[k]):
                raise BadInput(f"{where}: {k} must be a non-empty string")
        mpath = p.parent / ent["path"]
        try:
            m = load_model(str(mpath), ent.get("name") or ent["path"])
        except BadInput as e:
            raise BadInput(f"{where}: {e}") from None
        if "inputs" in ent:
            m.feed = _load_inputs(where, p.parent / ent["inputs"], m)
        if "ncnn" in ent:
            m.ncnn = ncnn_files(ent["ncnn"], f"{where}: ncnn", p.parent)
        out.append(m)
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
    ap.add_argument("models", nargs="*", metavar="MODEL", help=".onnx or .tflite files")
    ap.add_argument("--zoo", action="store_true", help="the built-in zoo: " + ", ".join(ZOO))
    ap.add_argument("--config", help="a JSON or TOML file of models and their inputs (run.py's docstring)")
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
