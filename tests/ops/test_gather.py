"""Gather on 8-bit tensors (a byte gather, model/moves.py) against ONNX Runtime on every device, which must run
the node itself: every axis (negative ones too), negative indices, scalar indices (the axis goes), 2-D indices,
int32 and int64 indices, and an embedding lookup's shape."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check_vs_ort, i64, one_node, refused


def _table() -> list[tuple]:
    """(id, data shape, indices, axis, dtype)."""
    cases = []
    shape = (2, 5, 3, 7)
    for axis in range(-4, 4):
        n = shape[axis]
        idx = [i64(n - 1, 0, -1, -n), np.array(n // 2, np.int64), i64([1, -2], [0, n - 1])][axis % 3]
        cases.append((f"r4_axis{axis}_{['list', 'scalar', '2d'][axis % 3]}", shape, idx, axis, QTYPES[axis % 2]))
    cases += [
        ("r1", (9,), i64(8, 0, 4, 4), 0, np.uint8),
        ("r2_int32", (4, 6), np.array([5, 0, 3], np.int32), 1, np.int8),
        ("r3_last_scalar", (2, 3, 4), np.array(-1, np.int64), -1, np.uint8),
        ("embedding", (50, 16), i64([3, 49, 0, 7, 7]), 0, np.int8),
    ]
    return cases


TABLE = _table()


@pytest.mark.parametrize("cid,shape,idx,axis,dt", TABLE, ids=[c[0] for c in TABLE])
def test_gather_equals_ort_on_every_device(cid, shape, idx, axis, dt):
    check_vs_ort(one_node("Gather", [shape, idx], dt, axis=axis))


@pytest.mark.parametrize("idx,axis,culprit", [
    (i64(1, 4), 1, "out of range"),
    (i64(-4), 0, "out of range"),
    (i64(0), 2, "axis"),
], ids=["index_past_end", "index_before_start", "axis_range"])
def test_bad_gather_refused_naming_the_node(idx, axis, culprit):
    refused(one_node("Gather", [(3, 4), idx], axis=axis), {"x0": np.zeros((3, 4), np.uint8)}, culprit)
