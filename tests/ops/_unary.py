"""The shared table of the 8-bit unary com.microsoft ops QLinearLeakyRelu and QLinearSigmoid
(tests/ops/test_qlinear_leaky_relu.py, test_qlinear_sigmoid.py): 256-entry tables of the reference on the devices
(cpu/qlinear_lut.py, vulkan/qlinear_lut.py), so every byte value is checked, under several seeded parameter sets
(small and large scales, zero points at the ends), ranks 1-5, uint8 and int8."""

from __future__ import annotations

import numpy as np

from ._build import QTYPES, check, model, node, ort_run, qrange

SHAPES = [(256,), (16, 16), (4, 8, 8), (1, 4, 8, 8), (1, 2, 4, 4, 8)]
TABLE = [(f"r{len(s)}_{np.dtype(QTYPES[i % 2]).name}_p{i}", s, QTYPES[i % 2], i) for i, s in enumerate(SHAPES)]
TABLE += [(f"r4_{np.dtype(dt).name}_p{5 + j}", (1, 4, 8, 8), dt, 5 + j) for j, dt in enumerate(QTYPES)]


def params(dt, k: int) -> dict:
    """Seeded parameters; k 0, 5 put the zero points at the type's ends, k 3 uses a large input scale."""
    rng = np.random.default_rng(k)
    lo, hi = qrange(dt)
    xz = {0: lo, 5: hi}.get(k, int(rng.integers(lo, hi + 1)))
    yz = {0: hi, 5: lo}.get(k, int(rng.integers(lo, hi + 1)))
    xs = 0.5 if k == 3 else float(rng.uniform(0.005, 0.1))
    return {"xs": np.float32(xs), "xz": np.asarray(xz, dt), "ys": np.float32(rng.uniform(0.003, 0.05)),
            "yz": np.asarray(yz, dt)}


def unary_model(op: str, shape, dt, k: int, change: dict | None = None, **attrs) -> tuple[bytes, dict]:
    """The one-node com.microsoft `op` model and a feed holding every byte value (shapes of 256 elements)."""
    consts = params(dt, k) | (change or {})
    blob = model([node(op, ["x", "xs", "xz", "ys", "yz"], domain="com.microsoft", **attrs)], {"x": (dt, shape)},
                 consts, {"y": dt})
    x = np.random.default_rng(k).permutation(np.arange(256, dtype=np.uint8)).view(dt)
    return blob, {"x": np.resize(x, shape)}


def check_unary(op: str, k: int, **attrs) -> None:
    _, shape, dt, seed = TABLE[k]
    blob, feed = unary_model(op, shape, dt, seed, **attrs)
    check(blob, feed, ort_run(blob, feed))
