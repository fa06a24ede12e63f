"""Top-1 accuracy of each engine on a labelled data set: `vkinfer bench --dataset FILE` and

    python -m vkinfer.benchmark.accuracy MODEL DATASET [--engines vkinfer,onnxruntime] [--device cpu]
                                         [--threads 1] [--batch N] [--json]

DATASET is a NumPy ``.npz`` file with ``x`` (N, ...): the model's single input, already in its dtype and layout
(e.g. float32 (N, 1, 8, 8) NCHW for bench/digits.py's models), and ``y`` (N,): integer class labels. Every
image is run through every engine, in batches of the model's batch size when its first input dimension is
fixed (the last batch padded by repeating its final image, the padding's outputs dropped), else of ``--batch``
(default 1). An image's prediction is the argmax of the engine's first output (flattened per image; 8-bit
outputs compare as their integers, which order like their dequantized values); top-1 is the fraction of
predictions equal to ``y``.

Engines: ``vkinfer`` (on ``device``: "cpu", "vulkan", "vulkan:<n>", "auto", ...), ``onnxruntime`` (.onnx models:
CPU execution provider, ``threads`` intra-op threads, default graph optimizations, and the session option
``session.qdqisint8allowed=1`` so that int8 QDQ tensors get ORT's exact integer kernels on x86 as on ARM; it
changes nothing for uint8 activations: README), ``litert`` (.tflite models: ai-edge-litert's Interpreter) and
``ncnn`` (always missing). The result per engine::

    {"model": path, "dataset": path, "engine": name, "device": "cpu" | device, "status": "ok" | "missing" |
     "error", "error": None | why, "top1": float | None, "n": images, "correct": int | None,
     "agreement": None | {"reference": engine, "predictions_identical": fraction of images whose prediction
                          equals the reference's, "outputs_identical": bool (every output bit for bit),
                          "max_abs_diff": float | None (None: the shapes differ)}}

``agreement`` compares with the first engine that ran (the reference has none). An engine that is not
installed, a device this machine lacks, or a model an engine cannot run gives ``status`` "missing" (the first two)
or "error", never an exception; a data set that is missing, unreadable, lacks ``x`` or ``y`` or does not fit the
model raises ValueError naming the file and the culprit. `vkinfer bench` stores one engine's result as the
record field ``accuracy`` (vkinfer.benchmark.records).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .records import ENGINES

RunFn = Callable[[np.ndarray], np.ndarray]


class _Input:
    """The model's single input: name, shape (ints, or None where not fixed) and numpy dtype."""

    def __init__(self, name: str, shape: list[int | None], dtype: np.dtype):
        self.name, self.shape, self.dtype = name, shape, dtype


def _is_tflite(data: bytes) -> bool:
    from ..model.tflite_import import is_tflite

    return is_tflite(data)


def _model_input(path: str, data: bytes) -> _Input:
    """The input of the model at `path`; ValueError when it is unreadable or has several inputs."""
    try:
        if _is_tflite(data):
            from ..session import InferenceSession

            types = {"tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(int32)": np.int32,
                     "tensor(float)": np.float32}
            ins = [(i.name, list(i.shape), np.dtype(types.get(i.type, np.float32)))
                   for i in InferenceSession(data, device="reference").get_inputs()]
        else:
            import onnx

            proto = onnx.load_model_from_string(data)
            inits = {t.name for t in proto.graph.initializer}
            ins = []
            for vi in proto.graph.input:
                if vi.name in inits:
                    continue
                tt = vi.type.tensor_type
                ins.append((vi.name, [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
                                      for d in tt.shape.dim],
                            np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))))
    except Exception as e:  # noqa: BLE001 - protobuf and the importers raise several types for garbage
        raise ValueError(f"{path}: not a readable ONNX or .tflite model ({type(e).__name__}: {e})") from None
    if len(ins) != 1:
        raise ValueError(f"{path}: the model has {len(ins)} inputs; a data set feeds models with exactly one")
    name, shape, dtype = ins[0]
    return _Input(name, [d if isinstance(d, int | np.integer) and d > 0 else None for d in shape], dtype)


def load_dataset(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) of a labelled .npz data set; ValueError naming the file and the culprit when it cannot be read,
    lacks ``x`` or ``y``, or their shapes or types are wrong (x: (N, ...) numbers; y: (N,) integers, N > 0)."""
    p = Path(path)
    try:
        z = np.load(p, allow_pickle=False)
    except (OSError, EOFError) as e:
        raise ValueError(f"{p}: cannot read data set: {getattr(e, 'strerror', None) or e}") from None
    except Exception as e:  # noqa: BLE001 - a pickle (refused), a truncated file, ...
        raise ValueError(f"{p}: not a NumPy .npz data set ({type(e).__name__}: {e})") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise ValueError(f"{p}: a single .npy array, not a .npz data set with x (N, ...) and y (N,)")
    with z:
        missing = [k for k in ("x", "y") if k not in z.files]
        if missing:
            raise ValueError(f"{p}: no array {' or '.join(repr(k) for k in missing)} in the data set "
                             f"(has {', '.join(sorted(z.files)) or 'none'}; need x (N, ...) and y (N,))")
        try:
            x, y = z["x"], z["y"]
        except Exception as e:  # noqa: BLE001 - object arrays (pickles, refused), a corrupt member
            raise ValueError(f"{p}: cannot read x and y ({type(e).__name__}: {e})") from None
    if x.ndim < 1 or x.shape[0] == 0:
        raise ValueError(f"{p}: x must have shape (N, ...) with N > 0, not {x.shape}")
    if x.dtype.kind not in "fiub":
        raise ValueError(f"{p}: x must hold numbers, not {x.dtype}")
    if y.ndim != 1 or y.dtype.kind not in "iu":
        raise ValueError(f"{p}: y must be a 1-D array of integer labels, not {y.dtype} {y.shape}")
    if len(y) != x.shape[0]:
        raise ValueError(f"{p}: y has {len(y)} labels but x has {x.shape[0]} items")
    return x, y.astype(np.int64)


def _check_fits(x: np.ndarray, inp: _Input, model: str, dataset: str) -> None:
    want = inp.shape[1:]
    if len(inp.shape) != x.ndim or any(w is not None and w != g for w, g in zip(want, x.shape[1:], strict=True)):
        shown = ["N", *("?" if d is None else d for d in want)]
        raise ValueError(f"{dataset}: x has items of shape {tuple(x.shape[1:])} but {model}'s input "
                         f"{inp.name!r} is ({', '.join(map(str, shown))})")
    if x.dtype != inp.dtype:
        raise ValueError(f"{dataset}: x is {x.dtype} but {model}'s input {inp.name!r} is {inp.dtype}")


def _missing_module(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def _why_missing(engine: str, tflite: bool) -> str | None:
    if engine == "onnxruntime":
        if _missing_module("onnxruntime"):
            return "onnxruntime is not installed (pip install onnxruntime)"
        return "onnxruntime does not run .tflite models" if tflite else None
    if engine == "litert":
        if _missing_module("ai_edge_litert"):
            return "ai-edge-litert is not installed (pip install ai-edge-litert)"
        return None if tflite else "litert runs .tflite models only"
    if engine == "ncnn":
        if _missing_module("ncnn"):
            return "ncnn is not installed (pip install ncnn)"
        return "ncnn needs a model converted to ncnn's .param/.bin format, which is not supported yet"
    return None


def _runner(engine: str, data: bytes, inp: _Input, device: str, threads: int) -> RunFn:
    """A function from one batch to the engine's first output."""
    if engine == "vkinfer":
        from ..session import InferenceSession

        s = InferenceSession(data, device=device, threads=threads)
        return lambda xb: np.asarray(s.run(None, {inp.name: xb})[0])
    if engine == "onnxruntime":
        import onnxruntime as ort

        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        opts.add_session_config_entry("session.qdqisint8allowed", "1")
        o = ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])
        return lambda xb: np.asarray(o.run(None, {inp.name: xb})[0])
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=data, num_threads=threads)
    d_in = it.get_input_details()[0]
    out_index = it.get_output_details()[0]["index"]
    state = {"shape": tuple(d_in["shape"])}

    def run(xb: np.ndarray) -> np.ndarray:
        if tuple(xb.shape) != state["shape"]:
            it.resize_tensor_input(d_in["index"], list(xb.shape))
            it.allocate_tensors()
            state["shape"] = tuple(xb.shape)
        it.set_tensor(d_in["index"], xb)
        it.invoke()
        return it.get_tensor(out_index)

    it.allocate_tensors()
    return run


def _outputs(run: RunFn, x: np.ndarray, batch: int) -> np.ndarray:
    """The first output for every item of x, run `batch` items at a time, as (N, -1)."""
    outs = []
    for s in range(0, len(x), batch):
        xb = x[s:s + batch]
        k = len(xb)
        if k < batch:
            xb = np.concatenate([xb, np.repeat(xb[-1:], batch - k, axis=0)])
        o = run(np.ascontiguousarray(xb))
        outs.append(o.reshape(batch, -1)[:k])
    return np.concatenate(outs)


def _creation_failure(e: Exception) -> str:
    from ..errors import VulkanUnavailableError

    if isinstance(e, VulkanUnavailableError) or (isinstance(e, ValueError) and str(e).startswith("no Vulkan")):
        return "missing"
    return "error"


def evaluate(model_path: str, dataset_path: str, engines: list[str] | None = None, threads: int = 1,
             device: str = "cpu", batch: int | None = None) -> dict[str, dict[str, Any]]:
    """Top-1 of each engine on the labelled data set (module docstring): {engine: result}, in `engines` order
    (default: vkinfer and the model's peer, onnxruntime or litert). ValueError naming the culprit for an unknown
    engine, an unreadable model, or a data set that is unreadable, malformed or does not fit the model."""
    unknown = [e for e in (engines or []) if e not in ENGINES]
    if unknown:
        raise ValueError(f"unknown engine {unknown[0]!r} (one of {', '.join(ENGINES)})")
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, not {threads!r}")
    if batch is not None and batch < 1:
        raise ValueError(f"batch must be a positive integer, not {batch!r}")
    try:
        data = Path(model_path).read_bytes()
    except OSError as e:
        raise ValueError(f"{model_path}: cannot read model: {e.strerror or e}") from None
    inp = _model_input(model_path, data)
    x, y = load_dataset(dataset_path)
    _check_fits(x, inp, model_path, dataset_path)
    tflite = _is_tflite(data)
    if engines is None:
        engines = ["vkinfer", "litert" if tflite else "onnxruntime"]
    fixed = inp.shape[0] if inp.shape else None
    if fixed is not None and batch is not None and batch != fixed:
        raise ValueError(f"batch {batch}: {model_path}'s input {inp.name!r} has a fixed batch of {fixed}")
    bsz = fixed or batch or 1

    results: dict[str, dict[str, Any]] = {}
    ref: tuple[str, np.ndarray] | None = None
    for eng in dict.fromkeys(engines):
        r: dict[str, Any] = {"model": str(model_path), "dataset": str(dataset_path), "engine": eng,
                             "device": device if eng == "vkinfer" else "cpu", "status": "ok", "error": None,
                             "top1": None, "n": int(len(y)), "correct": None, "agreement": None}
        results[eng] = r
        why = None if eng == "vkinfer" else _why_missing(eng, tflite)
        if why is not None:
            r["status"], r["error"] = "missing", why
            continue
        try:
            run = _runner(eng, data, inp, device, threads)
        except KeyboardInterrupt:
            raise
        except ImportError as e:
            r["status"], r["error"] = "missing", f"{eng}: {e}"
            continue
        except Exception as e:  # noqa: BLE001 - a device this machine lacks, a model the engine rejects
            r["status"], r["error"] = _creation_failure(e), f"{type(e).__name__}: {e}".strip()
            continue
        try:
            out = _outputs(run, x, bsz)
        except KeyboardInterrupt:
            raise
        except Exception as e:  # noqa: BLE001 - any engine failure is that engine's result
            r["status"], r["error"] = "error", f"{type(e).__name__}: {e}".strip()
            continue
        pred = out.argmax(axis=1)
        r["correct"] = int((pred == y).sum())
        r["top1"] = r["correct"] / len(y)
        if ref is None:
            ref = (eng, out)
        else:
            ro = ref[1]
            same_shape = ro.shape == out.shape
            diff = (float(np.max(np.abs(ro.astype(np.float64) - out.astype(np.float64))))
                    if same_shape else None)
            r["agreement"] = {"reference": ref[0],
                              "predictions_identical": float((ro.argmax(axis=1) == pred).mean()),
                              "outputs_identical": bool(same_shape and ro.dtype == out.dtype
                                                        and np.array_equal(ro, out)),
                              "max_abs_diff": diff}
    return results


def format_table(results: dict[str, dict[str, Any]]) -> str:
    """A plain-text table of evaluate()'s results, one engine per line."""
    lines = [f"{'engine':<12} {'device':<10} {'status':<8} {'top1':>7} {'correct':>9}  agreement / error"]
    for r in results.values():
        top1 = f"{r['top1']:.4f}" if r["top1"] is not None else "-"
        correct = f"{r['correct']}/{r['n']}" if r["correct"] is not None else f"-/{r['n']}"
        if r["status"] != "ok":
            note = r["error"] or ""
        elif r["agreement"] is None:
            note = "(reference)"
        else:
            a = r["agreement"]
            outs = "bit-identical" if a["outputs_identical"] else f"max |diff| {a['max_abs_diff']}"
            note = f"vs {a['reference']}: predictions {a['predictions_identical']:.4f} identical, outputs {outs}"
        lines.append(f"{r['engine']:<12} {r['device']:<10} {r['status']:<8} {top1:>7} {correct:>9}  {note}")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(message)


def main(argv: list[str] | None = None) -> int:
    """`python -m vkinfer.benchmark.accuracy MODEL DATASET [options]`: prints the table (or JSON); 0 when every
    engine ran, 1 when one is missing or failed, 2 on bad input (one line on stderr)."""
    ap = _Parser(prog="python -m vkinfer.benchmark.accuracy",
                 description="Top-1 accuracy of each engine on a labelled .npz data set (x, y).")
    ap.add_argument("model")
    ap.add_argument("dataset")
    ap.add_argument("--engines", default=None, help="comma-separated (default: vkinfer and the model's peer)")
    ap.add_argument("--device", default="cpu", help="vkinfer's device (default cpu)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads per engine (default 1)")
    ap.add_argument("--batch", type=int, default=None, help="items per run when the model's batch is not fixed")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    try:
        a = ap.parse_args(sys.argv[1:] if argv is None else argv)
        engines = None if a.engines is None else [e.strip() for e in a.engines.split(",") if e.strip()]
        if engines is not None and not engines:
            raise ValueError("--engines: no engine given")
        results = evaluate(a.model, a.dataset, engines, a.threads, a.device, a.batch)
    except ValueError as e:
        print(f"accuracy: error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(results, indent=2) if a.json else format_table(results))
    return 0 if all(r["status"] == "ok" for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
