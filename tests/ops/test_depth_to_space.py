"""DepthToSpace on 8-bit tensors (a byte gather, model/moves.py) against ONNX Runtime on every device, which must
run the node itself: DCR and CRD modes x block sizes 1-4 x odd spatial sizes and batches, and a super-resolution
head's shape (ESPCN: 9 channels -> 1 at 3x)."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check_vs_ort, cross, one_node, refused

TABLE = [(f"{c['mode']}_b{c['b']}_n{c['n']}", (c["n"], c["b"] * c["b"] * (1 + i % 3), 3 + i % 2, 5), c["b"],
          c["mode"], QTYPES[i % 2])
         for i, c in enumerate(cross(mode=["DCR", "CRD"], b=[1, 2, 3, 4], n=[1, 2]))
         if c["b"] > 1 or c["n"] == 1]
TABLE.append(("espcn_x3", (1, 9, 24, 24), 3, "CRD", np.uint8))


@pytest.mark.parametrize("cid,shape,b,mode,dt", TABLE, ids=[c[0] for c in TABLE])
def test_depth_to_space_equals_ort_on_every_device(cid, shape, b, mode, dt):
    check_vs_ort(one_node("DepthToSpace", [shape], dt, blocksize=b, mode=mode))


@pytest.mark.parametrize("shape,attrs,culprit", [
    ((1, 6, 2, 2), dict(blocksize=2), "blocksize|divisible|channels"),
    ((1, 8, 2, 2), dict(blocksize=0), "blocksize"),
    ((1, 8, 2, 2), dict(blocksize=2, mode="XYZ"), "mode"),
    ((8, 2, 2), dict(blocksize=2), "4-D|rank"),
], ids=["channels_not_divisible", "block0", "mode", "rank3"])
def test_bad_depth_to_space_refused_naming_the_node(shape, attrs, culprit):
    refused(one_node("DepthToSpace", [shape], **attrs), {"x0": np.zeros(shape, np.uint8)}, culprit)
