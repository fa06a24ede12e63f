"""com.microsoft QLinearSigmoid against ONNX Runtime on every device, which must run the node itself (a 256-entry
table of the reference, which reproduces MLAS's logistic): every byte value under the parameter sets of
tests/ops/_unary.py, ranks 1-5, uint8 and int8; bad parameters refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import refused
from ._unary import TABLE, check_unary, unary_model


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[c[0] for c in TABLE])
def test_qlinear_sigmoid_equals_ort_on_every_device(k):
    check_unary("QLinearSigmoid", k)


@pytest.mark.parametrize("change,culprit,exc", [(dict(xs=np.float32(np.inf)), "scale", ValueError),
                                                (dict(yz=np.int8(0)), "zero", (TypeError, ValueError))],
                         ids=["x_scale_inf", "zero_point_type"])
def test_bad_qlinear_sigmoid_refused_naming_the_node(change, culprit, exc):
    blob, feed = unary_model("QLinearSigmoid", (1, 4, 8, 8), np.uint8, 1, change)
    refused(blob, feed, culprit, exc=exc)
