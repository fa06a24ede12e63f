"""TFLite's 8-bit SOFTMAX, imported as vkinfer:TFLiteSoftmax (TFLite's float32 exp table over the last axis;
cpu/tflite_softmax.py), against ai-edge-litert on every device. Rows stored in order (ranks 1-3) run on the cpu,
in a Vulkan session too (Vulkan has no form of it: the documented fallback); a 4-D input, whose last axis is not
the CPU form's, runs on the host. Row lengths 1 to 1001, input scales, betas, tie-heavy inputs, int8 and uint8.
Randomised shapes: tests/importers/test_tflite.py."""

from __future__ import annotations

import numpy as np
import pytest
import tflite

from vkinfer.testing import tflite_zoo

from ._build import check_vs_litert, qrand, refused

TABLE = [  # (id, shape, input scale, beta, dtype, where)
    ("r2_10", (4, 10), 0.1, 1.0, "int8", "cpu"),
    ("r2_1001_classifier", (2, 1001), 0.02, 1.0, "uint8", "cpu"),
    ("r2_one_column", (1, 1), 0.05, 1.0, "int8", "cpu"),
    ("r1", (33,), 0.3, 0.5, "uint8", "cpu"),
    ("r3_beta2", (3, 5, 64), 0.004, 2.0, "int8", "cpu"),
    ("r2_scale_1_16", (64, 33), 0.0625, 1.0, "uint8", "cpu"),
    ("r4_last_axis", (2, 3, 5, 17), 0.3, 0.5, "int8", "host"),
]


@pytest.mark.parametrize("cid,shape,scale,beta,dt,where", TABLE, ids=[c[0] for c in TABLE])
def test_tflite_softmax_equals_litert(cid, shape, scale, beta, dt, where):
    blob = tflite_zoo.op_model("softmax", len(cid), dtype=dt, shape=shape, scale=scale, beta=beta)
    rng = np.random.default_rng(len(cid))
    info = np.iinfo(np.dtype(dt))
    ties = (info.max - 3 + rng.integers(0, 4, shape)).astype(np.dtype(dt))  # near-equal rows: quotients on ties
    check_vs_litert(blob, [{"x": qrand(rng, shape, np.dtype(dt))}, {"x": ties}], where=where)


def test_bad_softmax_beta_refused_naming_the_node():
    m = tflite_zoo.ModelBuilder()
    x = m.tensor("x", (2, 10), np.int8, scale=0.1, zero_point=0)
    y = m.tensor("out", (2, 10), np.int8, scale=1 / 256, zero_point=-128)
    m.op(tflite.BuiltinOperator.SOFTMAX, [x], [y], tflite.BuiltinOptions.SoftmaxOptions, Beta=float("nan"))
    refused(m.finish([x], [y]), {"x": np.zeros((2, 10), np.int8)}, "beta", name="TFLiteSoftmax_0")
