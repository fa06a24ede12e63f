"""Pad of 8-bit tensors against ONNX Runtime on every device, which must run the node itself: constant mode with
non-negative pads (cpu/pad.py; Vulkan's byte gather), and every other form as a byte gather (model/moves.py):
reflect, edge, wrap (opset 19), negative pads (cropping), a constant value, the axes input (opset 18), ranks 1-5.
Generated: each mode x a pad pattern per rank; then the pads of real models (a TFLite-style SAME pad in front of
a strided convolution, YOLO's asymmetric (0, 1))."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check_vs_ort, i64, one_node, refused


def _table() -> list[tuple]:
    """(id, shape, pads, value or None, axes or None, mode, dtype)."""
    cases = []
    for i, mode in enumerate(["constant", "reflect", "edge", "wrap"]):
        for r in (1, 3, 4, 5):
            shape = tuple(2 + (k + r + i) % 3 for k in range(r))  # sizes 2-4: reflect needs pad < size
            before = [(k + i) % 2 for k in range(r)]
            after = [(k + r) % 3 % 2 if mode != "constant" else (k + r) % 3 for k in range(r)]
            cases.append((f"{mode}_r{r}", shape, i64(*before, *after), None, None, mode, QTYPES[(i + r) % 2]))
    cases += [
        ("constant_value", (1, 3, 4, 5), i64(0, 0, 1, 2, 0, 0, 2, 1), "value", None, "constant", np.uint8),
        ("negative_crop", (1, 5, 3, 3), i64(0, 2, -1, 0, 0, 1, 0, -1), None, None, "constant", np.int8),
        ("axes_hw", (1, 3, 4, 5), i64(1, 2, 2, 1), None, i64(2, -1), "constant", np.uint8),
        ("tflite_same_s2", (1, 16, 15, 15), i64(0, 0, 0, 0, 0, 0, 1, 1), None, None, "constant", np.int8),
        ("yolo_01", (1, 32, 13, 13), i64(0, 0, 0, 0, 0, 0, 1, 1), None, None, "edge", np.uint8),
    ]
    return cases


TABLE = _table()


@pytest.mark.parametrize("cid,shape,pads,value,axes,mode,dt", TABLE, ids=[c[0] for c in TABLE])
def test_pad_equals_ort_on_every_device(cid, shape, pads, value, axes, mode, dt):
    v = np.array(np.iinfo(dt).max - 3, dt) if value else None
    ins = [shape, pads] + ([v] if v is not None or axes is not None else []) + ([axes] if axes is not None else [])
    check_vs_ort(one_node("Pad", ins, dt, opset=19, mode=mode))


@pytest.mark.parametrize("ins,attrs,culprit", [
    ([(3, 4), i64(1, 1, 1)], {}, "pads"),
    ([(3, 4), i64(0, 5, 0, 0)], {"mode": "reflect"}, "reflect|pad"),
    ([(3, 4), i64(1, 1, 1, 1)], {"mode": "mirror"}, "mode"),
    ([(3, 4), i64(0, -5, 0, 0)], {}, "pad|negative|size"),
], ids=["pads_length", "reflect_past_size", "bad_mode", "crop_past_size"])
def test_bad_pad_refused_naming_the_node(ins, attrs, culprit):
    refused(one_node("Pad", ins, opset=19, **attrs), {"x0": np.zeros((3, 4), np.uint8)}, culprit)
