"""Resize of 8-bit tensors against ONNX Runtime on every device. Nearest is a move (a byte gather, model/moves.py)
that must run on the session's device; linear computes (ORT's float32 bilinear arithmetic, model/resize.py) and
runs on the host, the documented fallback. The table crosses every coordinate transformation mode with the
nearest modes and with up- and down-scales (odd sizes), scales vs sizes, opsets 10/11/13/19, the axes attribute
and keep_aspect_ratio_policy (19), tf_crop_and_resize with an extrapolation value, YOLO's 2x upsample."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check_vs_ort, f32, i64, one_node, refused

CTMS = ["half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn", "align_corners",
        "half_pixel_symmetric"]
NEAREST = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]
SCALES = [f32(1, 1, 2, 2), f32(1, 1, 1.5, 0.6), f32(1, 1, 0.5, 3.0), f32(1, 1, 2.7, 0.34)]
ROI = f32()


def _table() -> list[tuple]:
    """(id, ins after x, attrs, opset)."""
    cases = [(f"{ctm}_{NEAREST[i % 4]}", [(1, 3, 5, 7), ROI, SCALES[i % 4]],
              {"coordinate_transformation_mode": ctm, "nearest_mode": NEAREST[i % 4]}, 19)
             for i, ctm in enumerate(CTMS)]
    cases += [
        ("sizes_r3", [(2, 5, 6), ROI, None, i64(2, 9, 4)], {"nearest_mode": "round_prefer_ceil"}, 19),
        ("r1_scale", [(6,), ROI, f32(1.7)], {"nearest_mode": "floor"}, 19),
        ("axes_not_larger", [(1, 2, 5, 8), ROI, None, i64(7, 7)], {"axes": [2, 3],
                                                                    "keep_aspect_ratio_policy": "not_larger"}, 19),
        ("crop_extrapolate", [(1, 2, 4, 5), f32(0, 0, -0.2, 0.1, 1, 1, 1.3, 0.8), f32(1, 1, 1.5, 1.4)],
         {"coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": 7.0}, 19),
        ("opset10", [(1, 2, 3, 4), f32(1, 1, 2.5, 0.5)], {}, 10),
        ("opset11_sizes", [(1, 3, 4, 4), ROI, f32(), i64(1, 3, 7, 9)], {}, 11),
        ("yolo_2x_asym_floor", [(1, 64, 13, 13), ROI, f32(1, 1, 2, 2)],
         {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"}, 13),
    ]
    return cases


TABLE = _table()
LINEAR = [  # on the host on every device
    ("linear_half_pixel", [(1, 3, 5, 7), ROI, f32(1, 1, 1.7, 0.6)], {}),
    ("linear_align_corners", [(2, 2, 4, 3), ROI, f32(1, 1, 2, 3)], {"coordinate_transformation_mode": "align_corners"}),
]


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[c[0] for c in TABLE])
def test_nearest_resize_equals_ort_on_every_device(k):
    _, ins, attrs, opset = TABLE[k]
    check_vs_ort(one_node("Resize", ins, QTYPES[k % 2], opset=opset, mode="nearest", **attrs))


@pytest.mark.parametrize("k", range(len(LINEAR)), ids=[c[0] for c in LINEAR])
def test_linear_resize_equals_ort_on_the_host(k):
    _, ins, attrs = LINEAR[k]
    check_vs_ort(one_node("Resize", ins, QTYPES[k % 2], opset=19, mode="linear", **attrs), where="host")


@pytest.mark.parametrize("ins,attrs,culprit", [
    ([(1, 2, 3, 4), ROI, f32(1, 1, 2)], {"mode": "nearest"}, "scales"),
    ([(1, 2, 3, 4), ROI, f32(1, 1, 2, 2)], {"mode": "cubicle"}, "mode"),
    ([(1, 2, 3, 4), ROI, f32(1, 1, -2, 2)], {"mode": "nearest"}, "scale"),
    ([(1, 2, 3, 4), ROI, f32(1, 1, 2, 2)], {"mode": "nearest", "nearest_mode": "sideways"}, "nearest_mode"),
], ids=["scales_length", "bad_mode", "negative_scale", "bad_nearest_mode"])
def test_bad_resize_refused_naming_the_node(ins, attrs, culprit):
    refused(one_node("Resize", ins, opset=19, **attrs), {"x0": np.zeros((1, 2, 3, 4), np.uint8)}, culprit)
