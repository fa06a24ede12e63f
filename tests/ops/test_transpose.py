"""Transpose of 8-bit tensors against ONNX Runtime on every device, which must run the node itself. The lowerings
it may take: an alias (only size-1 axes move), a channel shuffle (5-D perm (0, 2, 1, 3, 4): cpu/reshape.py,
vulkan/channel_gather.py), a permutation of the form (cpu/reshape.py) or a byte gather (vulkan/byte_gather.py).
Every permutation of rank 3, the default (reversed) perm, NCHW <-> NHWC, ranks 2-6, ShuffleNet's shuffle."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ._build import QTYPES, check_vs_ort, one_node, refused

TABLE = [((3, 4, 5), p) for p in itertools.permutations(range(3))]
TABLE += [
    ((5, 7), None), ((2, 3, 4, 5), None),  # the default: axes reversed
    ((1, 5, 3, 4), (0, 2, 3, 1)), ((1, 3, 4, 5), (0, 3, 1, 2)),  # NCHW <-> NHWC
    ((2, 3, 4, 5), (3, 1, 0, 2)),
    ((1, 1, 5, 1), (0, 3, 2, 1)),  # only size-1 axes move: an alias
    ((1, 2, 3, 4, 5), (0, 4, 2, 1, 3)),
    ((1, 4, 6, 5, 3), (0, 2, 1, 3, 4)),  # ShuffleNet's channel shuffle (groups 4 x 6 channels)
    ((2, 1, 3, 2, 1, 2), (5, 0, 3, 1, 4, 2)),
]


def _id(shape, perm) -> str:
    return "x".join(map(str, shape)) + "_" + ("default" if perm is None else "".join(map(str, perm)))


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[_id(*c) for c in TABLE])
def test_transpose_equals_ort_on_every_device(k):
    shape, perm = TABLE[k]
    check_vs_ort(one_node("Transpose", [shape], QTYPES[k % 2], **({} if perm is None else {"perm": list(perm)})))


# The messages are numpy's (they name the node, not the attribute 'perm').
@pytest.mark.parametrize("perm,culprit", [([0, 1, 7, 2], "axis 7 is out of bounds"), ([0, 1, 1, 2], "repeated axis"),
                                          ([1, 0], "axes don't match")], ids=["out_of_range", "repeated", "short"])
def test_bad_transpose_refused_naming_the_node(perm, culprit):
    refused(one_node("Transpose", [(1, 4, 2, 2)], perm=perm), {"x0": np.zeros((1, 4, 2, 2), np.uint8)}, culprit)
