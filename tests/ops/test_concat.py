"""Concat of 8-bit tensors against ONNX Runtime on every device. Along the channel axis (axis 1 of a 4-D tensor,
the last of others) the devices copy channel runs (vkinfer/cpu/qlinear_concat.py, vulkan/qlinear_concat.py, odd
channel counts ending mid-word); along any other axis it is a byte gather (model/moves.py). Negative axes, 2-5
inputs, ranks 1-5, and YOLO's route / SPPF concatenations. Every case runs on the session's device."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check_vs_ort, model, node, refused


def _table() -> list[tuple]:
    """(id, input shapes, axis, dtype)."""
    cases = []
    for i, chans in enumerate([(1, 3), (5, 4, 7), (3, 1, 1, 2, 9)]):  # the channel axis: odd widths, many inputs
        for axis in (1, -3):
            cases.append((f"c4d_{'_'.join(map(str, chans))}_ax{axis}",
                          [(1 + i % 2, c, 3, 5) for c in chans], axis, QTYPES[(i + axis) % 2]))
    cases += [
        ("r2_last", [(3, 5), (3, 2)], -1, np.uint8),
        ("r3_last", [(2, 3, 1), (2, 3, 6)], 2, np.int8),
        ("r1", [(5,), (3,)], 0, np.uint8),
        ("r4_batch", [(1, 3, 4, 5), (2, 3, 4, 5)], 0, np.int8),
        ("r4_height", [(1, 3, 2, 5), (1, 3, 4, 5), (1, 3, 1, 5)], -2, np.uint8),
        ("r4_width", [(1, 3, 4, 2), (1, 3, 4, 3)], 3, np.int8),
        ("r3_mid", [(2, 1, 4), (2, 3, 4)], -2, np.uint8),
        ("r5_channels", [(1, 2, 3, 2, 2), (1, 3, 3, 2, 2)], 1, np.int8),
        ("yolo_route", [(1, 128, 13, 13), (1, 256, 13, 13)], 1, np.uint8),
        ("yolo_sppf", [(1, 32, 13, 13)] * 4, 1, np.int8),
    ]
    return cases


TABLE = _table()


def _concat(shapes, axis, dt) -> bytes:
    names = [f"x{k}" for k in range(len(shapes))]
    return model([node("Concat", names, axis=axis)], {n: (dt, s) for n, s in zip(names, shapes, strict=True)})


@pytest.mark.parametrize("cid,shapes,axis,dt", TABLE, ids=[c[0] for c in TABLE])
def test_concat_equals_ort_on_every_device(cid, shapes, axis, dt):
    check_vs_ort(_concat(shapes, axis, dt))


@pytest.mark.parametrize("shapes,axis,culprit", [
    ([(1, 3, 4, 5), (1, 3, 4, 5)], 4, "axis"),
    ([(1, 3, 4, 5), (1, 3, 5, 5)], 1, "dimension"),
    ([(1, 3, 4, 5), (3, 4, 5)], 0, "dimension"),
], ids=["axis_range", "other_axis_differs", "ranks_differ"])
def test_bad_concat_refused_naming_the_node(shapes, axis, culprit):
    blob = _concat(shapes, axis, np.uint8)
    refused(blob, {f"x{k}": np.zeros(s, np.uint8) for k, s in enumerate(shapes)}, culprit)
