"""Tile on 8-bit tensors (a byte gather, model/moves.py) against ONNX Runtime on every device, which must run the
node itself: ranks 1-5, repeats of 1 (a copy) and more on each axis in turn."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check_vs_ort, i64, one_node, refused


def _table() -> list[tuple]:
    cases = []
    for r in range(1, 6):
        shape = tuple(1 + (k + r) % 3 for k in range(r))
        cases.append((f"r{r}_copy", shape, i64(*[1] * r), QTYPES[r % 2]))
        cases.append((f"r{r}_reps", shape, i64(*[(k + r) % 3 + 1 for k in range(r)]), QTYPES[(r + 1) % 2]))
    cases.append(("r4_channels_x3", (1, 5, 3, 3), i64(1, 3, 1, 1), np.uint8))
    return cases


TABLE = _table()


@pytest.mark.parametrize("cid,shape,reps,dt", TABLE, ids=[c[0] for c in TABLE])
def test_tile_equals_ort_on_every_device(cid, shape, reps, dt):
    check_vs_ort(one_node("Tile", [shape, reps], dt))


@pytest.mark.parametrize("reps,culprit", [(i64(2, 2, 2), "repeats"), (i64(2, -1), "repeats|negative")],
                         ids=["length", "negative"])
def test_bad_tile_refused_naming_the_node(reps, culprit):
    refused(one_node("Tile", [(3, 4), reps]), {"x0": np.zeros((3, 4), np.uint8)}, culprit)
