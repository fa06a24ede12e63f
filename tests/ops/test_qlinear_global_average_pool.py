"""com.microsoft QLinearGlobalAveragePool against ONNX Runtime on every device: NCHW 4-D inputs run on the
session's device (cpu/qlinear_global_average_pool.py, vulkan/qlinear_global_average_pool.py: ORT's integer sum
and one float32 multiply); channels_last and other ranks run on the host. Odd channel counts and sizes, 1x1 and
large windows, saturating scales, both 8-bit types, MobileNetV2's and ResNet's heads."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check, model, node, ort_run, qrand, qrange, refused

TABLE = [  # (id, x shape as given, channels_last, x_scale / y_scale ratio, where)
    ("c1_1x1", (1, 1, 1, 1), 0, 1.0, "device"),
    ("c3_odd", (1, 3, 5, 7), 0, 1.0, "device"),
    ("c5_batch2", (2, 5, 9, 3), 0, 0.7, "device"),
    ("c17_saturating", (1, 17, 4, 4), 0, 40.0, "device"),
    ("c64_window_56", (1, 64, 56, 56), 0, 1.3, "device"),
    ("mobilenet_head", (1, 1280, 7, 7), 0, 1.0, "device"),
    ("resnet_head", (1, 512, 7, 7), 0, 0.5, "device"),
    ("channels_last", (1, 5, 6, 7), 1, 1.0, "host"),
    ("r3", (2, 6, 10), 0, 1.0, "host"),
]


def _gap(shape, cl, ratio, dt, change=None):
    rng = np.random.default_rng(sum(shape))
    lo, hi = qrange(dt)
    consts = {"xs": np.float32(0.02), "xz": np.asarray(rng.integers(lo, hi + 1), dt),
              "ys": np.float32(0.02 / ratio), "yz": np.asarray(rng.integers(lo + 50, hi - 50), dt)} | (change or {})
    blob = model([node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], domain="com.microsoft",
                       channels_last=cl)], {"x": (dt, shape)}, consts, {"y": dt})
    return blob, {"x": qrand(rng, shape, dt)}


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[c[0] for c in TABLE])
def test_qlinear_global_average_pool_equals_ort(k):
    _, shape, cl, ratio, where = TABLE[k]
    blob, feed = _gap(shape, cl, ratio, QTYPES[k % 2])
    check(blob, feed, ort_run(blob, feed), where=None if where == "device" else where)


@pytest.mark.parametrize("change,culprit", [(dict(xs=np.float32(0)), "scale"), (dict(ys=np.float32(-1)), "scale")],
                         ids=["x_scale_zero", "y_scale_negative"])
def test_bad_qlinear_global_average_pool_refused_naming_the_node(change, culprit):
    blob, feed = _gap((1, 3, 4, 4), 0, 1.0, np.uint8, change)
    refused(blob, feed, culprit)
