"""The models `vkinfer bench` measures: a model file with its seeded inputs (Model, load_model), the models and
inputs of a --config file (load_config) and the ncnn peer's files (ncnn_files). The formats and the seeded inputs:
vkinfer.benchmark.cli's docstring. BadInput: what cannot be benchmarked, one line naming the culprit (exit 2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

INPUT_SEED = 20240601



class BadInput(ValueError):
    """A command line, model or option that cannot be benchmarked (one line, naming the culprit)."""


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
        from ..session import InferenceSession

        s = InferenceSession(data, device="reference")
        types = {"tensor(uint8)": np.uint8, "tensor(int8)": np.int8, "tensor(int32)": np.int32}
        return {i.name: _random(rng, np.dtype(types.get(i.type, np.float32)), _static(i.shape), True)
                for i in s.get_inputs()}
    except Exception as e:  # noqa: BLE001
        raise BadInput(f"{path}: not a loadable .tflite model ({type(e).__name__}: {e})") from None


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
    """The models of a --config file (format: vkinfer.benchmark.cli's docstring); BadInput naming the file and entry."""
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
