"""The ncnn peer: the user's ncnn model (a text .param and its .bin, converted from the same float ONNX) on the
CPU, its blobs found by a reader of the .param (ncnn_param_blobs), its input dequantized as the quantized model
would (_qparams), and its outputs compared with the quantized model's in the float domain (_float_pair). The
details: vkinfer.benchmark.cli's docstring."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..load import Model

if TYPE_CHECKING:
    from . import Engine

NCNN_NEEDS = "needs --ncnn-model (a model converted from the same float ONNX, e.g. with pnnx)"
NCNN_MAGIC = "7767517"  # the first line of a text .param


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
