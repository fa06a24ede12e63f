"""com.microsoft QLinearLeakyRelu against ONNX Runtime on every device, which must run the node itself (a 256-entry
table): every byte value under the parameter sets of tests/ops/_unary.py, ranks 1-5, uint8 and int8, slopes
from 0 to above 1 and negative; bad parameters refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import refused
from ._unary import TABLE, check_unary, unary_model

ALPHAS = [0.01, 0.1, 0.2, 0.0, 1.5, -0.3, 0.5]


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[c[0] for c in TABLE])
def test_qlinear_leaky_relu_equals_ort_on_every_device(k):
    check_unary("QLinearLeakyRelu", k, alpha=ALPHAS[k % len(ALPHAS)])


@pytest.mark.parametrize("change,culprit", [(dict(xs=np.float32(0)), "scale"), (dict(ys=np.float32(-2)), "scale")],
                         ids=["x_scale_zero", "y_scale_negative"])
def test_bad_qlinear_leaky_relu_refused_naming_the_node(change, culprit):
    blob, feed = unary_model("QLinearLeakyRelu", (1, 4, 8, 8), np.uint8, 1, change, alpha=0.1)
    refused(blob, feed, culprit)
