"""Slice on 8-bit tensors (a byte gather: vkinfer/model/moves.py, cpu/byte_gather.py, vulkan/byte_gather.py)
against ONNX Runtime on every device, which must run the node itself. Generated per rank 1-5 (odd sizes): a
forward slice with clamped starts/ends and negative axes, a backward one with negative steps; opset 9's attribute
form; the slices of real models (YOLOv5's Focus, a transformer's class token)."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check_vs_ort, i64, one_node, refused


def _table() -> list[tuple]:
    """(id, input shape, starts, ends, axes, steps, dtype); axes/steps None: left out."""
    cases = []
    for r in range(1, 6):
        shape = tuple(3 + (2 * k + r) % 5 for k in range(r))  # sizes 3..7
        last = -1 if r > 1 else 0
        cases.append((f"r{r}_fwd", shape, i64(1, -99)[:min(r, 2)], i64(99, -1)[:min(r, 2)],
                      i64(last, 0)[:min(r, 2)], i64(1, 2)[:min(r, 2)], QTYPES[r % 2]))
        cases.append((f"r{r}_back", shape, i64(-1), i64(-100), i64(-r), i64(-2), QTYPES[(r + 1) % 2]))
    cases += [
        ("r4_hw_both", (1, 3, 9, 8), i64(1, 7), i64(8, 0), i64(2, 3), i64(3, -2), np.uint8),
        ("r4_channels", (2, 7, 3, 5), i64(2), i64(6), i64(1), None, np.int8),
        ("no_axes", (5, 6), i64(1, 2), i64(4, 6), None, None, np.uint8),
        ("focus_yolov5", (1, 3, 32, 32), i64(1, 0), i64(32, 32), i64(2, 3), i64(2, 2), np.uint8),
        ("class_token", (1, 17, 24), i64(0), i64(1), i64(1), None, np.int8),
    ]
    return cases


TABLE = _table()


def _slice(shape, starts, ends, axes, steps, dt) -> bytes:
    if steps is not None and axes is None:
        axes = i64(*range(len(starts)))
    ins = [shape, starts, ends] + [v for v in (axes, steps) if v is not None]
    return one_node("Slice", ins, dt)


@pytest.mark.parametrize("cid,shape,starts,ends,axes,steps,dt", TABLE, ids=[c[0] for c in TABLE])
def test_slice_equals_ort_on_every_device(cid, shape, starts, ends, axes, steps, dt):
    check_vs_ort(_slice(shape, starts, ends, axes, steps, dt))


@pytest.mark.parametrize("dt", QTYPES)
def test_slice_opset9_attributes(dt):
    check_vs_ort(one_node("Slice", [(3, 7)], dt, opset=9, starts=[1, -5], ends=[3, 100], axes=[0, -1]))


@pytest.mark.parametrize("ins,culprit", [
    ([(3, 4), i64(0), i64(2), i64(2)], "axis 2 is out of range"),
    ([(3, 4), i64(0), i64(2), i64(1), i64(0)], "step"),
    ([(3, 4), i64(0, 1), i64(2), i64(1)], "one length"),
    ([(3, 4), i64(0, 0), i64(2, 2), i64(1, -1)], "repeat|twice|duplicate|more than once"),
], ids=["axis_range", "step0", "lengths", "axis_twice"])
def test_bad_slice_refused_naming_the_node(ins, culprit):
    refused(one_node("Slice", ins), {"x0": np.zeros((3, 4), np.uint8)}, culprit)
