"""com.microsoft QLinearAdd against ONNX Runtime on every device: the broadcast table of tests/ops/_binary.py
(equal shapes, a channel row, ranks 1-5, ResNet's residual add, and the broadcasts left to the host), every byte
pair, uint8 and int8; bad parameters refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from ._binary import binary_model, check_binary, every_pair, params
from ._build import QTYPES, refused


@pytest.mark.parametrize("k", params())
def test_qlinear_add_equals_ort_on_every_device(k):
    check_binary("QLinearAdd", k, QTYPES[k % 2])


@pytest.mark.parametrize("dt", QTYPES)
def test_qlinear_add_every_byte_pair_equals_ort(dt):
    every_pair("QLinearAdd", dt, 3)


@pytest.mark.parametrize("change,culprit,exc", [
    (dict(as_=np.float32(0)), "scale", ValueError),
    (dict(ys=np.float32(np.nan)), "scale", ValueError),
    (dict(bz=np.int8(0)), "zero", (TypeError, ValueError)),
], ids=["a_scale_zero", "y_scale_nan", "zero_point_type"])
def test_bad_qlinear_add_refused_naming_the_node(change, culprit, exc):
    change = {("as" if k == "as_" else k): v for k, v in change.items()}
    blob, feed = binary_model("QLinearAdd", (1, 3, 4, 4), (1, 3, 4, 4), np.uint8, 0, change)
    refused(blob, feed, culprit, exc=exc)


def test_shapes_that_do_not_broadcast_refused_naming_the_node():
    blob, feed = binary_model("QLinearAdd", (1, 3, 4, 4), (1, 2, 4, 4), np.uint8, 0)
    refused(blob, feed, "broadcast")
