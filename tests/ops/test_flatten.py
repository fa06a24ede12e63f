"""Flatten of 8-bit tensors against ONNX Runtime on every device, which must run the node itself (an alias where
the device's element order allows, else a copy: vkinfer/layout.py): every axis in [-rank, rank] of 4-D tensors
(NHWC-stored: only some flattens keep the bytes), 2-D, 3-D and 5-D tensors, the classifier's (1, C, 1, 1)."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check_vs_ort, one_node, refused

TABLE = [((2, 3, 5, 7), axis) for axis in range(-4, 5)]
TABLE += [((1, 1280, 1, 1), 1), ((6, 5), 0), ((6, 5), -1), ((3, 1, 6), 2), ((1, 2, 3, 2, 5), -2)]


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[f"{'x'.join(map(str, s))}_ax{a}" for s, a in TABLE])
def test_flatten_equals_ort_on_every_device(k):
    shape, axis = TABLE[k]
    check_vs_ort(one_node("Flatten", [shape], QTYPES[k % 2], axis=axis))


@pytest.mark.parametrize("axis", [5, -5])
def test_bad_flatten_axis_refused_naming_the_node(axis):
    refused(one_node("Flatten", [(1, 2, 3, 4)], axis=axis), {"x0": np.zeros((1, 2, 3, 4), np.uint8)}, "axis")
