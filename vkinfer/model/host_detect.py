"""Detector and image host kernels of vkinfer's own (issue 25: ONNX's evaluator is an oracle in tests only):
NonMaxSuppression with ONNX Runtime's semantics, Upsample (opset 7-9, through the Resize kernel of
vkinfer/model/resize.py) and CenterCropPad.

NonMaxSuppression follows ORT's CPU kernel: per batch and class, the boxes scoring strictly above
score_threshold are visited by descending score (equal scores: lower box index first); a box is kept unless its
IoU with a kept box, computed in float32 as ORT computes it (corners from min/max of the coordinates, or from the
centre +- half the size; no overlap or a non-positive area means no suppression), exceeds iou_threshold; at most
max_output_boxes_per_class are kept. The output lists (batch, class, box) in that order.
"""

from __future__ import annotations

import numpy as np

from .attrs import _text
from .graph import Node
from .host_elementwise import own_op as _op
from .op_table import OPS, REQUIRED_INPUTS

F32 = np.float32


def _corners(b: np.ndarray, center: bool) -> np.ndarray:
    """(N, 4) boxes as float32 (x_min, y_min, x_max, y_max)."""
    if center:
        half_w, half_h = b[:, 2] / F32(2), b[:, 3] / F32(2)
        return np.stack([b[:, 0] - half_w, b[:, 1] - half_h, b[:, 0] + half_w, b[:, 1] + half_h], 1)
    return np.stack([np.minimum(b[:, 1], b[:, 3]), np.minimum(b[:, 0], b[:, 2]),
                     np.maximum(b[:, 1], b[:, 3]), np.maximum(b[:, 0], b[:, 2])], 1)


def _suppress(a: np.ndarray, b: np.ndarray, thr: np.float32) -> bool:
    """ORT's SuppressByIOU on two corner boxes."""
    ix0, iy0 = max(a[0], b[0]), max(a[1], b[1])
    ix1, iy1 = min(a[2], b[2]), min(a[3], b[3])
    if ix1 <= ix0 or iy1 <= iy0:
        return False
    inter = F32(ix1 - ix0) * F32(iy1 - iy0)
    if inter <= 0:
        return False
    area_a = F32(a[2] - a[0]) * F32(a[3] - a[1])
    area_b = F32(b[2] - b[0]) * F32(b[3] - b[1])
    union = F32(F32(area_a + area_b) - inter)
    if area_a <= 0 or area_b <= 0 or union <= 0:
        return False
    return bool(F32(inter / union) > thr)


@_op("NonMaxSuppression")
def _nms(node, x, memo):
    """boxes (B, N, 4), scores (B, C, N), optional max_output_boxes_per_class (int64, absent or 0: none kept),
    iou_threshold and score_threshold (float32 scalars): int64 (K, 3) selected indices (module docstring)."""
    boxes, scores = np.asarray(x[0]), np.asarray(x[1])
    if boxes.dtype != F32 or scores.dtype != F32:
        raise TypeError(f"NonMaxSuppression boxes and scores must be float32, got {boxes.dtype}, {scores.dtype}")
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or \
            scores.shape[2] != boxes.shape[1]:
        raise ValueError(f"NonMaxSuppression shapes: boxes {list(boxes.shape)} must be (B, N, 4) and scores "
                         f"{list(scores.shape)} (B, C, N)")

    def scalar(i, dtype, default):
        if len(x) <= i or x[i] is None or np.size(x[i]) == 0:
            return default
        v = np.asarray(x[i])
        if v.size != 1:
            raise ValueError(f"NonMaxSuppression input {i} must be a scalar, got shape {list(v.shape)}")
        return dtype(v.reshape(-1)[0])
    max_out = scalar(2, int, 0)
    iou = scalar(3, F32, F32(0))
    score_thr = scalar(4, F32, None)
    if not 0 <= iou <= 1:
        raise ValueError(f"NonMaxSuppression iou_threshold must be in [0, 1], got {iou}")
    center = int(node.attrs.get("center_point_box", 0))
    if center not in (0, 1):
        raise ValueError(f"NonMaxSuppression center_point_box must be 0 or 1, got {center}")
    out = []
    if max_out > 0:
        for bi in range(boxes.shape[0]):
            corners = _corners(boxes[bi], bool(center))
            for ci in range(scores.shape[1]):
                s = scores[bi, ci]
                cand = np.arange(len(s)) if score_thr is None else np.nonzero(s > score_thr)[0]
                order = cand[np.lexsort((cand, -s[cand].astype(np.float64)))]
                kept: list[int] = []
                for i in order:
                    if len(kept) >= max_out:
                        break
                    if not any(_suppress(corners[i], corners[j], iou) for j in kept):
                        kept.append(int(i))
                out += [(bi, ci, i) for i in kept]
    return [np.asarray(out, np.int64).reshape(-1, 3)]


@_op("Upsample")
def _upsample(node, x, memo):
    """Upsample-7 (scales attribute) and -9 (scales input): ORT runs it as Resize-10 (asymmetric coordinates,
    its nearest rounding or linear), so it goes through the Resize kernel with two inputs."""
    if int(node.attrs.get("_opset") or 9) >= 10:
        raise ValueError("Upsample was removed in opset 10 (use Resize)")
    if len(x) > 1 and x[1] is not None:
        scales = np.asarray(x[1])
    elif node.attrs.get("scales") is not None:
        scales = np.asarray(node.attrs["scales"], F32)
    else:
        raise ValueError("Upsample needs scales (an attribute before opset 9, an input from 9)")
    if scales.dtype != F32:
        raise TypeError(f"Upsample scales must be float32, got {scales.dtype}")
    if np.any(scales < 1):
        raise ValueError(f"Upsample scales must be >= 1, got {scales.tolist()}")
    mode = _text(node.attrs.get("mode"), "nearest")
    if mode == "bilinear":
        mode = "linear"
    attrs = {"mode": mode, "_opset": 10}
    rnode = Node("Resize", node.name, [node.inputs[0], "_upsample_scales"], list(node.outputs), attrs)
    return OPS["Resize"](rnode, [x[0], scales], memo)


@_op("CenterCropPad")
def _center_crop_pad(node, x, memo):
    """Each listed axis (default all) cropped to, or zero-padded to, the wanted size around the centre: a crop
    starts at (in - out) // 2, a pad puts (out - in) // 2 before (ONNX's function body)."""
    v = np.asarray(x[0])
    shape = np.asarray(x[1])
    if shape.dtype.kind not in "iu":
        raise TypeError(f"CenterCropPad shape must be integers, got {shape.dtype}")
    shape = [int(s) for s in shape.reshape(-1)]
    axes = node.attrs.get("axes")
    axes = list(range(v.ndim)) if axes is None else [int(a) % max(v.ndim, 1) for a in axes]
    if len(axes) != len(shape) or any(s < 0 for s in shape):
        raise ValueError(f"CenterCropPad shape {shape} does not fit axes {axes}")
    out = v
    for a, want in zip(axes, shape, strict=True):
        have = out.shape[a]
        if want < have:
            st = (have - want) // 2
            out = np.take(out, range(st, st + want), axis=a)
        elif want > have:
            before = (want - have) // 2
            pads = [(0, 0)] * out.ndim
            pads[a] = (before, want - have - before)
            out = np.pad(out, pads)
    return [np.ascontiguousarray(out)]


REQUIRED_INPUTS.setdefault("NonMaxSuppression", (2, (0, 1)))
REQUIRED_INPUTS.setdefault("Upsample", (1, (0,)))
REQUIRED_INPUTS.setdefault("CenterCropPad", (2, (0, 1)))
