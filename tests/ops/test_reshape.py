"""Reshape of 8-bit tensors against ONNX Runtime on every device. The one rule (vkinfer/layout.py) decides
between an alias (the device's element order is the same) and a copy into the output's form (cpu/reshape.py,
vulkan/repack.py); both must run on the session's device. The table: the targets that once returned NHWC order
([-1, C], [N*H*W, C], [1, -1, C] of a 4-D tensor, 2026-11), a classifier's flatten, 0 (copy a dimension) and -1,
ranks 1-6, row paddings that differ on Vulkan (widths not multiples of 4)."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import NAME, QTYPES, check, check_vs_ort, i64, model, node, one_node, ort_run, refused

TABLE = [  # (id, input shape, target)
    ("nchw_to_rows_c", (1, 5, 3, 2), (-1, 5)),
    ("nchw_to_nhw_c", (2, 3, 2, 2), (8, 3)),
    ("nchw_to_1_rows_c", (1, 6, 3, 3), (1, -1, 6)),
    ("classifier_flatten", (1, 7, 1, 1), (1, -1)),
    ("classifier_flatten_hw", (1, 3, 5, 5), (0, -1)),
    ("r2_to_r4", (6, 10), (1, 6, 2, 5)),
    ("r4_to_r4_regroup", (1, 8, 3, 5), (1, 2, 12, 5)),
    ("r3_to_r5_copy_dims", (2, 6, 5), (0, 2, 3, 5, 1)),
    ("r5_to_r3", (1, 2, 3, 4, 5), (2, -1, 5)),
    ("r6", (2, 1, 3, 1, 2, 2), (3, 4, 2)),
    ("r1_to_r2_same_rows", (12,), (3, 4)),
    ("yolo_head", (1, 18, 13, 13), (1, 3, 6, 13, 13)),
]


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[c[0] for c in TABLE])
def test_reshape_equals_ort_on_every_device(k):
    _, shape, to = TABLE[k]
    check_vs_ort(one_node("Reshape", [shape, i64(*to)], QTYPES[k % 2]))


def test_reshape_to_a_runtime_shape_follows_its_values():
    blob = model([node("Reshape", ["x", "s"])], {"x": (np.uint8, (2, 3, 4)), "s": (np.int64, (2,))})
    x = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    feeds = [{"x": x, "s": i64(6, 4)}, {"x": x, "s": i64(4, 6)}, {"x": x, "s": i64(-1, 2)}]
    check(blob, feeds, lambda f: ort_run(blob, f), nodes=[])


@pytest.mark.parametrize("to,culprit", [(i64(5, -1), "reshape|shape"), (i64(-1, -1), "unknown dimension"),
                                        (i64(2, 3, 4, 1), "reshape|shape")],
                         ids=["not_divisible", "two_minus_ones", "size_differs"])
def test_bad_reshape_refused_naming_the_node(to, culprit):
    refused(one_node("Reshape", [(3, 4), to]), {"x0": np.zeros((3, 4), np.uint8)}, culprit, NAME)
