"""Expand on 8-bit tensors (a byte gather, model/moves.py) against ONNX Runtime on every device, which must run
the node itself: numpy broadcasting of each axis in turn, to a higher rank, target dims of 1 that keep the
input's size, and a no-op expand."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import check_vs_ort, i64, one_node, refused

TABLE = [
    ("r4_batch_and_h", (1, 3, 1, 4), i64(2, 1, 3, 1), np.uint8),
    ("rank_up", (3, 1), i64(2, 1, 3, 5), np.int8),
    ("r1_to_r3", (5,), i64(4, 1, 5), np.uint8),
    ("ones_keep_size", (2, 3, 4), i64(1, 1, 1), np.int8),
    ("same_shape", (2, 3), i64(2, 3), np.uint8),
    ("scalar_like", (1, 1, 1, 1), i64(1, 7, 3, 5), np.int8),
    ("r5_channels", (1, 1, 2, 1, 3), i64(2, 3, 1, 4, 1), np.uint8),
]


@pytest.mark.parametrize("cid,shape,to,dt", TABLE, ids=[c[0] for c in TABLE])
def test_expand_equals_ort_on_every_device(cid, shape, to, dt):
    check_vs_ort(one_node("Expand", [shape, to], dt))


@pytest.mark.parametrize("to,culprit", [(i64(3, 5), "broadcast"), (i64(2, -1), "broadcast|negative|shape")],
                         ids=["incompatible", "negative"])
def test_bad_expand_refused_naming_the_node(to, culprit):
    refused(one_node("Expand", [(3, 4), to]), {"x0": np.zeros((3, 4), np.uint8)}, culprit)
