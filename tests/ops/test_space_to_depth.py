"""SpaceToDepth on 8-bit tensors (a byte gather, model/moves.py) against ONNX Runtime on every device, which must
run the node itself: block sizes 1-4 x channel counts (odd ones) x batches, and YOLOv2's reorg (26x26x64, 2)."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check_vs_ort, cross, one_node, refused

TABLE = [(f"b{c['b']}_c{c['c']}_n{c['n']}", (c["n"], c["c"], c["b"] * (2 + i % 3), c["b"] * (1 + i % 2)), c["b"],
          QTYPES[i % 2])
         for i, c in enumerate(cross(b=[1, 2, 3, 4], c=[1, 3, 8], n=[1, 2])) if i % 2 == 0 or c["b"] == 2]
TABLE.append(("yolov2_reorg", (1, 64, 26, 26), 2, np.int8))


@pytest.mark.parametrize("cid,shape,b,dt", TABLE, ids=[c[0] for c in TABLE])
def test_space_to_depth_equals_ort_on_every_device(cid, shape, b, dt):
    check_vs_ort(one_node("SpaceToDepth", [shape], dt, blocksize=b))


@pytest.mark.parametrize("shape,b,culprit", [
    ((1, 3, 5, 4), 2, "blocksize|divisible"),
    ((1, 3, 4, 4), 0, "blocksize"),
    ((3, 4, 4), 2, "4-D|rank"),
], ids=["height_not_divisible", "block0", "rank3"])
def test_bad_space_to_depth_refused_naming_the_node(shape, b, culprit):
    refused(one_node("SpaceToDepth", [shape], blocksize=b), {"x0": np.zeros(shape, np.uint8)}, culprit)
