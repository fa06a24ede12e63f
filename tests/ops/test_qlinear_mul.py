"""com.microsoft QLinearMul against ONNX Runtime on every device: the broadcast table of tests/ops/_binary.py
(equal shapes, a channel row: squeeze-excite's gate, ranks 1-5, and the broadcasts left to the host), every byte
pair, uint8 and int8; bad parameters refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from ._binary import binary_model, check_binary, every_pair, params
from ._build import QTYPES, refused


@pytest.mark.parametrize("k", params())
def test_qlinear_mul_equals_ort_on_every_device(k):
    check_binary("QLinearMul", k, QTYPES[(k + 1) % 2])


@pytest.mark.parametrize("dt", QTYPES)
def test_qlinear_mul_every_byte_pair_equals_ort(dt):
    every_pair("QLinearMul", dt, 4)


@pytest.mark.parametrize("change,culprit,exc", [
    (dict(bs=np.float32(-1)), "scale", ValueError),
    (dict(ys=np.float32(np.inf)), "scale", ValueError),
    (dict(yz=np.int8(0)), "zero", (TypeError, ValueError)),
], ids=["b_scale_negative", "y_scale_inf", "zero_point_type"])
def test_bad_qlinear_mul_refused_naming_the_node(change, culprit, exc):
    blob, feed = binary_model("QLinearMul", (2, 6), (6,), np.uint8, 0, change)
    refused(blob, feed, culprit, exc=exc)
