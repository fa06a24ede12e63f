"""Squeeze of 8-bit tensors against ONNX Runtime on every device, which must run the node itself (alias or copy:
vkinfer/layout.py): axes as an input (opset 13) and as an attribute (opset 11), negative axes, no axes (every
size-1 axis), the classifier's (1, C, 1, 1) -> (1, C), 5-D."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check, check_vs_ort, i64, model, node, one_node, ort_run, refused

TABLE = [  # (id, shape, axes or None)
    ("classifier", (1, 1000, 1, 1), (2, 3)),
    ("classifier_neg", (1, 7, 1, 1), (-1, -2)),
    ("all_ones_no_axes", (1, 5, 1, 3), None),
    ("batch", (1, 3, 4, 5), (0,)),
    ("r3_mid", (4, 1, 6), (1,)),
    ("r5_to_r4", (1, 2, 1, 3, 5), (2,)),
    ("r2_to_r1", (1, 9), (0,)),
]


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[c[0] for c in TABLE])
@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_equals_ort_on_every_device(k, opset):
    _, shape, axes = TABLE[k]
    dt = QTYPES[(k + opset) % 2]
    if opset >= 13:
        blob = one_node("Squeeze", [shape] + ([] if axes is None else [i64(*axes)]), dt, opset=opset)
    else:
        blob = one_node("Squeeze", [shape], dt, opset=opset, **({} if axes is None else {"axes": list(axes)}))
    check_vs_ort(blob)


def test_squeeze_runtime_axes_follow_their_values():
    blob = model([node("Squeeze", ["x", "a"])], {"x": (np.uint8, (1, 3, 1, 4)), "a": (np.int64, (1,))})
    x = np.arange(12, dtype=np.uint8).reshape(1, 3, 1, 4)
    check(blob, [{"x": x, "a": i64(0)}, {"x": x, "a": i64(2)}], lambda f: ort_run(blob, f), nodes=[])


@pytest.mark.parametrize("axes,culprit", [(i64(1), "size|1"), (i64(4), "axis|range"), (i64(0, -4), "twice|repeat|dup")],
                         ids=["not_size1", "axis_range", "axis_twice"])
def test_bad_squeeze_refused_naming_the_node(axes, culprit):
    refused(one_node("Squeeze", [(1, 3, 1, 4), axes]), {"x0": np.zeros((1, 3, 1, 4), np.uint8)}, culprit)
