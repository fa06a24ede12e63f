"""The built-in zoo of `vkinfer bench --zoo`: small quantized models built on first use and cached."""

from __future__ import annotations

import os
from pathlib import Path

from .load import BadInput, Model, load_model

# The built-in zoo: name -> (cache file name, builder). ONNX models are vkinfer.testing.zoo's float models
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
        from ..testing import tflite_zoo

        return tflite_zoo.tiny_cnn(seed=0, dtype="int8")
    import logging

    from ..testing import zoo

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
