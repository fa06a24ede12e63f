"""The float32 unary ops whose ORT kernels are longer formulas, native in the CPU graph (cpu_fallback/src/ops/
float_unary.c, lowered by vkinfer/cpu/float_elementwise.py): HardSigmoid, HardSwish and MLAS's Sigmoid, Tanh and
Erf, against ONNX Runtime's CPU EP (one thread, nodes as written) bit for bit on every device (the reference device
runs vkinfer/model/host_float.py's numpy version), asserting that the node runs on the cpu device in cpu and
Vulkan sessions.

The values: edge values (signed zeros, NaN, infinities, denormals, the largest floats), every formula's breakpoints
with their float32 neighbours (the clamps of Sigmoid at +-18, Tanh at +-9, Erf at 3.925 and its polynomial switch
at 0.921875, HardSigmoid's 0 and 1 crossings), 2^16 evenly spread values over [-20, 20] and 2^16 bit patterns spread
over all of float32 (every exponent). NaN payloads are not compared (tests/support/agree.py)."""

from __future__ import annotations

import numpy as np
import pytest
from support.agree import run_devices

import vkinfer

from ._build import NAME, model, node, ort_run

F32 = np.float32
EDGE = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -1e-45, 1.2e-38, -3e-39, 3.4028235e38,
        -3.4028235e38, 0.5, -0.5, 1e-8, -1e-8]
# Where a formula switches: clamps, the polynomial split, HardSigmoid's crossings (alpha 0.2 / beta 0.5 at +-2.5,
# HardSwish's at +-3, alpha 0.5 / beta 0 at 0 and 2, alpha -0.3 / beta 0.4 at 4/3 and -2).
BREAKS = [18.0, 9.0, 3.925, 0.921875, 2.5, 3.0, 2.0, 4 / 3, 88.0, 1.0]


def _values() -> np.ndarray:
    b = F32(BREAKS)
    near = np.concatenate([b, np.nextafter(b, F32(np.inf)), np.nextafter(b, F32(0))])
    spread = np.linspace(-20, 20, 1 << 16, dtype=F32)
    bits = (np.arange(1 << 16, dtype=np.uint64) * 65537).astype(np.uint32).view(F32)
    return np.concatenate([F32(EDGE), near, -near, spread, bits]).astype(F32)


VALUES = _values()
CASES = [("HardSigmoid", {}, 13), ("HardSigmoid", {"alpha": 0.5, "beta": 0.0}, 13),
         ("HardSigmoid", {"alpha": -0.3, "beta": 0.4}, 13), ("HardSwish", {}, 14), ("Sigmoid", {}, 13),
         ("Tanh", {}, 13), ("Erf", {}, 13)]


def _blob(op: str, attrs: dict, opset: int, shape) -> bytes:
    """The op over float32 input x, plus an unrelated DequantizeLinear branch so vkinfer takes the model."""
    return model([node(op, ["x"], ["y"], **attrs), node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, shape), "q": (np.uint8, (4,))}, {"s": F32(0.5)}, {"y": F32, "qf": F32}, opset=opset)


def _check(blob: bytes, x: np.ndarray) -> None:
    feed = {"x": x, "q": np.arange(4, dtype=np.uint8)}
    run_devices(blob, feed, want=ort_run(blob, feed))
    for d in ("cpu", "vulkan"):
        placement = vkinfer.InferenceSession(blob, device=d).placement
        assert placement[NAME] == "cpu", (d, placement)


@pytest.mark.parametrize("case", CASES, ids=[f"{o}{a or ''}" for o, a, _ in CASES])
def test_unary_formula_equals_ort_bit_for_bit(case):
    op, attrs, opset = case
    _check(_blob(op, attrs, opset, VALUES.shape), VALUES)


@pytest.mark.parametrize("op", ["HardSwish", "Sigmoid", "Tanh", "Erf"])
@pytest.mark.parametrize("shape", [(1,), (13,), (1, 3, 7, 5)])
def test_small_shapes(op, shape):
    """Short tensors (a vectorised loop's remainder only), ranks 1 to 4."""
    rng = np.random.default_rng(len(shape))
    n = int(np.prod(shape))
    x = np.where(rng.random(n) < 0.5, rng.choice(F32(EDGE), n), rng.uniform(-10, 10, n)).astype(F32).reshape(shape)
    _check(_blob(op, {}, 14 if op == "HardSwish" else 13, shape), x)
