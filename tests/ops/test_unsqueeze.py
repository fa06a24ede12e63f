"""Unsqueeze of 8-bit tensors against ONNX Runtime on every device, which must run the node itself (alias or copy:
vkinfer/layout.py): axes as an input (opset 13) and as an attribute (opset 11), negative axes, several at once,
rank 1 -> 4 (a bias row made an NCHW tensor) and 4 -> 5."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check, check_vs_ort, i64, model, node, one_node, ort_run, refused

TABLE = [  # (id, shape, axes)
    ("r1_to_nchw", (7,), (0, 2, 3)),
    ("r2_front", (3, 5), (0,)),
    ("r2_back_neg", (3, 5), (-1,)),
    ("r3_mid_neg", (2, 3, 5), (-2,)),
    ("r4_to_r5", (1, 6, 3, 3), (2,)),
    ("r2_to_r5_spread", (4, 6), (0, 2, 4)),
]


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[c[0] for c in TABLE])
@pytest.mark.parametrize("opset", [11, 13])
def test_unsqueeze_equals_ort_on_every_device(k, opset):
    _, shape, axes = TABLE[k]
    dt = QTYPES[(k + opset) % 2]
    if opset >= 13:
        blob = one_node("Unsqueeze", [shape, i64(*axes)], dt, opset=opset)
    else:
        blob = one_node("Unsqueeze", [shape], dt, opset=opset, axes=list(axes))
    check_vs_ort(blob)


def test_unsqueeze_runtime_axes_follow_their_values():
    blob = model([node("Unsqueeze", ["x", "a"])], {"x": (np.uint8, (2, 3, 4)), "a": (np.int64, (1,))})
    x = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    check(blob, [{"x": x, "a": i64(0)}, {"x": x, "a": i64(3)}], lambda f: ort_run(blob, f), nodes=[])


@pytest.mark.parametrize("axes,culprit", [(i64(4), "axis|range"), (i64(1, 1), "twice|repeat|dup")],
                         ids=["axis_range", "axis_twice"])
def test_bad_unsqueeze_refused_naming_the_node(axes, culprit):
    refused(one_node("Unsqueeze", [(3, 4), axes]), {"x0": np.zeros((3, 4), np.uint8)}, culprit)
