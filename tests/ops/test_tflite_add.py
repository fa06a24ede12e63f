"""TFLite's 8-bit ADD, imported as vkinfer:TFLiteAdd (XNNPACK's fixed-point arithmetic; vkinfer/cpu/tflite_add.py,
the table lookups of cpu/qlinear_lut.py and vulkan/qlinear_lut.py), against ai-edge-litert on every device.
Models from vkinfer.testing.tflite_zoo.op_model. Equal shapes with every fused activation, the broadcasts the
lowerings take (a row of dimension 1 of a 4-D tensor, the last axis of a 2-D one) on the session's device, and the
NHWC channel row (1, 1, 1, C), which the CPU lowering does not take: the host there (a performance gap, not an
error), Vulkan's general broadcast lookup. Every input
pair and many parameter sets: tests/importers/test_tflite.py::test_add_all_pairs_matches_litert."""

from __future__ import annotations

import numpy as np
import pytest
import tflite

from vkinfer.testing import tflite_zoo

from ._build import check_vs_litert, qrand, refused

TABLE = [  # (id, x shape, y shape, activation, dtype, where)
    ("equal_none", (1, 5, 7, 9), (1, 5, 7, 9), None, "int8", "device"),
    ("equal_relu", (1, 5, 7, 9), (1, 5, 7, 9), "relu", "uint8", "device"),
    ("equal_relu6", (2, 3, 4, 5), (2, 3, 4, 5), "relu6", "int8", "device"),
    ("equal_relu_n1_to_1", (1, 4, 4, 3), (1, 4, 4, 3), "relu_n1_to_1", "uint8", "device"),
    ("equal_r2", (7, 13), (7, 13), None, "int8", "device"),
    ("row_dim1_r4", (1, 4, 5, 8), (1, 4, 1, 1), None, "uint8", "device"),
    ("row_last_r2", (3, 11), (11,), "relu", "int8", "device"),
    ("nhwc_channel_row", (1, 4, 4, 8), (1, 1, 1, 8), None, "int8", "host"),
    ("mobilenet_residual", (1, 14, 14, 64), (1, 14, 14, 64), None, "int8", "device"),
    ("row_last_r5", (1, 2, 3, 2, 4), (1, 1, 1, 1, 4), None, "int8", "host"),
]
@pytest.mark.parametrize("k", [pytest.param(k, id=c[0]) for k, c in enumerate(TABLE)])
def test_tflite_add_equals_litert_on_every_device(k):
    _, sx, sy, act, dt, where = TABLE[k]
    blob = tflite_zoo.op_model("add", k, dtype=dt, shape=sx, y_shape=sy, activation=act)
    rng = np.random.default_rng(k)
    feeds = [{"x": qrand(rng, sx, np.dtype(dt)), "y": qrand(rng, sy, np.dtype(dt))} for _ in range(2)]
    # The CPU's TFLite ADD takes no general broadcast yet: the host. Vulkan's table lookup reads any broadcast at
    # strides (qlinear_lut.comp's GENERAL mode; row_last_r5 was once taken as a row lookup, 44 of 48 values wrong).
    check_vs_litert(blob, feeds, where=None if where == "device" else where,
                    on_vulkan=None if where == "device" else "vulkan")


def _add(sx, sy, x_scale=0.1) -> bytes:
    m = tflite_zoo.ModelBuilder()
    B, A = tflite.BuiltinOperator, tflite.BuiltinOptions
    x = m.tensor("x", sx, np.int8, scale=x_scale, zero_point=0)
    y = m.tensor("y", sy, np.int8, scale=0.1, zero_point=0)
    o = m.tensor("out", sx, np.int8, scale=0.2, zero_point=0)
    m.op(B.ADD, [x, y], [o], A.AddOptions, FusedActivationFunction=0)
    return m.finish([x, y], [o])


@pytest.mark.parametrize("sy,x_scale,culprit", [((1, 4, 4, 3), 0.1, "broadcast"), ((1, 4, 4, 8), 0.0, "x_scale")],
                         ids=["shapes", "scale_zero"])
def test_bad_tflite_add_refused_naming_the_op(sy, x_scale, culprit):
    feed = {"x": np.zeros((1, 4, 4, 8), np.int8), "y": np.zeros(sy, np.int8)}
    refused(_add((1, 4, 4, 8), sy, x_scale), feed, culprit, name="op 0 (ADD)")
