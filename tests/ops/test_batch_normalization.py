"""Inference BatchNormalization on float32 in the native CPU graph (vkinfer/cpu/batch_normalization.py,
cpu_fallback/src/ops/batch_norm.c) against ONNX Runtime's CPU EP (one thread, nodes as written): the per-channel
fold in float32 as ORT does it, then a multiply and an add per element. The node runs on the cpu device in cpu and
Vulkan sessions; the model carries an unrelated DequantizeLinear branch so vkinfer takes it (8-bit models only)."""

from __future__ import annotations

import numpy as np
import pytest
from support.agree import run_devices

import vkinfer

from ._build import NAME, check, model, node, ort_run

F32 = np.float32
EDGE = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-45, 3.4028235e38, -3.4028235e38], F32)


def _blob(shape, params, opset: int = 15, **attrs) -> bytes:
    return model([node("BatchNormalization", ["x", "sc", "b", "m", "v"], ["y"], **attrs),
                  node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, shape), "q": (np.uint8, (4,))},
                 dict(zip(("sc", "b", "m", "v"), params, strict=True)) | {"s": F32(0.5)},
                 {"y": F32, "qf": F32}, opset=opset)


def _params(rng, c: int) -> list[np.ndarray]:
    v = rng.uniform(0, 3, c).astype(F32)
    v[0] = 0.0  # variance 0: 1 / sqrt(eps)
    return [rng.uniform(-2, 2, c).astype(F32), rng.uniform(-1, 1, c).astype(F32), rng.uniform(-1, 1, c).astype(F32), v]


SHAPES = [(2, 3), (1, 4, 5, 5), (2, 3, 7), (1, 5, 3, 2, 3), (3, 1, 9, 1)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("eps", [1e-5, 1e-3, 0.0])
def test_edge_values(shape, eps):
    rng = np.random.default_rng(len(shape))
    blob = _blob(shape, _params(rng, shape[1]), epsilon=eps)
    n = int(np.prod(shape))
    x = np.where(rng.random(n) < 0.4, rng.choice(EDGE, n), rng.uniform(-5, 5, n)).astype(F32).reshape(shape)
    feed = {"x": x, "q": np.arange(4, dtype=np.uint8)}
    run_devices(blob, feed, want=ort_run(blob, feed), devices=("cpu", "vulkan"))
    for d in ("cpu", "vulkan"):
        assert vkinfer.InferenceSession(blob, device=d).placement[NAME] == "cpu"


@pytest.mark.parametrize("opset", [10, 14, 15])
def test_random_all_devices(opset):
    rng = np.random.default_rng(opset)
    shape = (2, 6, 5, 7)
    blob = _blob(shape, _params(rng, 6), opset=opset, epsilon=1e-3)
    feed = {"x": rng.uniform(-4, 4, shape).astype(F32), "q": np.arange(4, dtype=np.uint8)}
    check(blob, feed, ort_run(blob, feed), where="cpu", nodes=[NAME])


def test_non_constant_scale_stays_on_the_host():
    rng = np.random.default_rng(0)
    sc, b, m, v = _params(rng, 3)
    blob = model([node("BatchNormalization", ["x", "sc", "b", "m", "v"], ["y"]),
                  node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, (1, 3, 4, 4)), "sc": (F32, (3,)), "q": (np.uint8, (4,))},
                 {"b": b, "m": m, "v": v, "s": F32(0.5)}, {"y": F32, "qf": F32}, opset=15)
    feed = {"x": rng.uniform(-2, 2, (1, 3, 4, 4)).astype(F32), "sc": sc, "q": np.arange(4, dtype=np.uint8)}
    sess = check(blob, feed, ort_run(blob, feed), where={NAME: "host"}, nodes=[NAME])
    assert "non-constant" in sess["cpu"].plan(feed).why_host[NAME]
