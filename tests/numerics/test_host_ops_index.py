"""vkinfer/model/host_index.py and host_detect.py against ONNX Runtime 1.31 (CPU EP, one thread), each op alone on
the host and the one-node model on every device (numerics/test_host_float.py's _both): shape-subgraph ops, index
and selection ops, NonMaxSuppression, Upsample, CenterCropPad. All exact (they move, select or count; CumSum and
Range add in ORT's order); negative indices, empty tensors, ties and random shapes; onnx.reference as a second
oracle for the shape ops."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from .test_host_float import _bits_equal, _both, _float_model, _host, _ort

F32 = np.float32
I64 = np.int64


def _x(seed: int):
    rng = np.random.default_rng(seed)
    shape = tuple(int(d) for d in rng.integers(1, 6, 4))
    return rng, (rng.standard_normal(shape) * 3).astype(F32), rng.integers(-5, 5, shape).astype(I64)


def _cases(seed: int) -> list:
    rng, x, xi = _x(seed)
    s = x.shape
    r = len(s)
    ax = int(rng.integers(-r, r))
    return [
        (helper.make_node("Shape", ["x"], ["y"]), [x], 13),
        (helper.make_node("Shape", ["x"], ["y"], start=1, end=-1), [x], 15),
        (helper.make_node("Shape", ["x"], ["y"], start=-10, end=10), [x], 15),
        (helper.make_node("Size", ["x"], ["y"]), [x], 13),
        (helper.make_node("ConstantOfShape", ["s"], ["y"], value=numpy_helper.from_array(np.array([3], I64))),
         [np.array(s[:2], I64)], 20),
        (helper.make_node("ConstantOfShape", ["s"], ["y"]), [np.array([2, 0], I64)], 20),
        (helper.make_node("EyeLike", ["x"], ["y"], k=int(rng.integers(-2, 3)), dtype=TensorProto.INT32),
         [x[0, 0]], 9),
        (helper.make_node("CastLike", ["x", "t"], ["y"]), [np.clip(x, -100, 100), np.array([1], np.int32)], 21),
        (helper.make_node("CumSum", ["x", "a"], ["y"]), [x, np.array(ax, I64)], 14),
        (helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=1, reverse=1), [x, np.array(ax, I64)], 14),
        (helper.make_node("CumSum", ["x", "a"], ["y"], exclusive=1), [xi, np.array(ax, np.int32)], 14),
        (helper.make_node("ArgMax", ["x"], ["y"], axis=ax, keepdims=0), [xi.astype(F32)], 13),
        (helper.make_node("ArgMin", ["x"], ["y"], axis=ax, select_last_index=1), [xi.astype(F32)], 13),
        (helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=ax), [np.round(x), np.array([min(3, s[ax])], I64)], 11),
        (helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=ax, largest=0), [xi, np.array([s[ax]], I64)], 11),
        (helper.make_node("TopK", ["x"], ["v", "i"], axis=-1, k=1), [x], 1),
        (helper.make_node("NonZero", ["x"], ["y"]), [xi], 13),
        (helper.make_node("NonZero", ["x"], ["y"]), [np.zeros((2, 0), F32)], 13),
        (helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=int(rng.integers(-3, 3))),
         [np.array([[0, 3, -1], [5, -7, 2]], I64), np.array(5, I64), np.array([0.0, 2.0], F32)], 11),
        (helper.make_node("Trilu", ["x", "k"], ["y"], upper=0), [x, np.array(int(rng.integers(-2, 3)), I64)], 14),
        (helper.make_node("Trilu", ["x"], ["y"]), [x], 14),
        (helper.make_node("GatherElements", ["x", "i"], ["y"], axis=ax),
         [x, rng.integers(-s[ax], s[ax], tuple(max(1, d - 1) if i != ax % r else d + 1 for i, d in enumerate(s)))],
         13),
        (helper.make_node("GatherND", ["x", "i"], ["y"]), [x, np.stack([rng.integers(-d, d, 3) for d in s[:2]], 1)],
         13),
        (helper.make_node("GatherND", ["x", "i"], ["y"], batch_dims=1),
         [x, rng.integers(0, s[1], (s[0], 2, 1))], 13),
        (helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=ax, reduction="add"),
         [x, rng.integers(-s[ax], s[ax], s), np.ones(s, F32)], 18),
        (helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=ax, reduction="max"),
         [x, rng.integers(0, s[ax], s), x[::-1].copy()], 18),
        (helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=ax),
         [x, np.tile(rng.permutation(s[ax]).reshape([-1 if i == ax % r else 1 for i in range(r)]),
                     [1 if i == ax % r else d for i, d in enumerate(s)]), x * F32(2)], 18),
        (helper.make_node("ScatterND", ["x", "i", "u"], ["y"]),
         [x, np.array([[s[0] - 1], [0]], I64)[:min(2, s[0])], np.ones((min(2, s[0]), *s[1:]), F32)], 18),
        (helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="mul"),
         [x, np.array([[0, s[1] - 1], [0, s[1] - 1]], I64), np.full((2, *s[2:]), 3, F32)], 18),
        (helper.make_node("Compress", ["x", "c"], ["y"], axis=ax), [x, rng.random(s[ax]) < 0.5], 11),
        (helper.make_node("Compress", ["x", "c"], ["y"]), [x, rng.random(min(7, x.size)) < 0.5], 11),
        (helper.make_node("ReverseSequence", ["x", "l"], ["y"], batch_axis=0, time_axis=1),
         [x[..., 0], rng.integers(0, s[1] + 1, s[0])], 10),
        (helper.make_node("ReverseSequence", ["x", "l"], ["y"]), [x[..., 0], rng.integers(0, s[0] + 1, s[1])], 10),
        (helper.make_node("CenterCropPad", ["x", "s"], ["y"], axes=[2, 3]),
         [x, np.array([s[2] + int(rng.integers(-1, 3)), max(1, s[3] - 1)], I64)], 18),
        (helper.make_node("CenterCropPad", ["x", "s"], ["y"]), [x, np.array([d + (i % 3) - 1 for i, d in
                                                                              enumerate(s)], I64).clip(1)], 18),
    ]


@pytest.mark.parametrize("seed", range(5))
def test_index_ops_exact(seed):
    for node, inputs, opset in _cases(seed):
        got, want = _both(node, [np.asarray(v) for v in inputs], opset)
        for g, w in zip(got, want, strict=True):
            _bits_equal(g, w)


def test_range_accumulates_in_ort_order():
    """float Range: start + delta + delta + ... in float32 (ORT's loop), not start + i * delta; integer Range."""
    cases = [(0.1, 7.3, 0.37), (5.0, -3.3, -0.7), (1e7, 1e7 + 40, 3.3), (0.0, 1.0, 0.1), (3.0, 3.0, 1.0)]
    for a, b, d in cases:
        inputs = [np.array(a, F32), np.array(b, F32), np.array(d, F32)]
        got, want = _both(helper.make_node("Range", ["a", "b", "c"], ["y"]), inputs, 11)
        _bits_equal(got[0], want[0])
    for a, b, d in ((10, -3, -4), (0, 0, 1), (-7, 20, 3)):
        inputs = [np.array(a, I64), np.array(b, I64), np.array(d, I64)]
        got, want = _both(helper.make_node("Range", ["a", "b", "c"], ["y"]), inputs, 11)
        _bits_equal(got[0], want[0])


def test_shape_ops_against_onnx_reference():
    """onnx.reference as a second oracle for the ops of shape subgraphs."""
    _, x, _ = _x(11)
    for node, inputs, opset in _cases(11)[:11]:
        feed = {n: np.asarray(v) for n, v in zip(node.input, inputs, strict=True)}
        want = ReferenceEvaluator(_float_model(node, list(feed.values()), opset)).run(None, feed)
        for g, w in zip(_host(node, list(feed.values()), opset), want, strict=True):
            _bits_equal(g, np.asarray(w))


def _boxes(rng, b: int, n: int, center: bool) -> np.ndarray:
    if center:
        return np.concatenate([rng.uniform(0, 10, (b, n, 2)), rng.uniform(0.5, 4, (b, n, 2))], 2).astype(F32)
    c = rng.uniform(0, 10, (b, n, 4)).astype(F32)  # corners in either order (ORT takes min/max)
    return np.round(c, 1).astype(F32)


@pytest.mark.parametrize("seed", range(6))
def test_non_max_suppression_exact(seed):
    """ORT's NonMaxSuppression: score order with ties by index, strict thresholds, IoU in float32, corner or
    centre boxes, several batches and classes, optional inputs absent."""
    rng = np.random.default_rng(seed)
    b, c, n = int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 60))
    center = bool(seed % 2)
    boxes = _boxes(rng, b, n, center)
    scores = np.round(rng.uniform(0, 1, (b, c, n)), 1).astype(F32)  # many ties
    full = ["b", "s", "m", "i", "t"]
    for k, extra in ((5, [np.array([int(rng.integers(0, 8))], I64), np.array([0.3], F32), np.array([0.25], F32)]),
                     (4, [np.array([n], I64), np.array([0.0], F32)]), (3, [np.array([2], I64)]), (2, [])):
        node = helper.make_node("NonMaxSuppression", full[:k], ["y"], center_point_box=int(center))
        got, want = _both(node, [boxes, scores, *extra], 11)
        _bits_equal(got[0], want[0])


def test_non_max_suppression_degenerate_boxes():
    """Zero-area boxes, identical boxes and IoU exactly at the threshold (kept: ORT suppresses above it)."""
    boxes = np.array([[[0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 0, 5], [0, 0, 1, 2], [5, 5, 5, 5], [0, 0, 1, 1]]], F32)
    scores = np.array([[[0.9, 0.9, 0.8, 0.7, 0.6, 0.5]]], F32)
    for iou in (0.5, 0.49, 1.0, 0.0):
        node = helper.make_node("NonMaxSuppression", ["b", "s", "m", "i"], ["y"])
        got, want = _both(node, [boxes, scores, np.array([10], I64), np.array([iou], F32)], 11)
        _bits_equal(got[0], want[0])


@pytest.mark.parametrize("opset,mode", [(9, "nearest"), (9, "linear"), (7, "nearest"), (7, "linear")])
def test_upsample_as_resize_10(opset, mode):
    _, x, _ = _x(3)
    for scales in ([1, 1, 2, 3], [1, 1, 1.5, 2.5], [1, 1, 1, 1]):
        sc = np.array(scales, F32)
        if opset >= 9:
            node, inputs = helper.make_node("Upsample", ["x", "s"], ["y"], mode=mode), [x, sc]
        else:
            node, inputs = helper.make_node("Upsample", ["x"], ["y"], mode=mode, scales=[float(v) for v in scales]), [x]
        if opset < 9:  # onnx's shape inference leaves Upsample-7's output untyped: the host kernel against ORT
            feed = {"x": x}
            got, want = _host(node, inputs, opset), _ort(_float_model(node, inputs, opset), feed)
        else:
            got, want = _both(node, inputs, opset)
        _bits_equal(got[0], want[0])


def test_refusals_name_the_problem():
    x = np.ones((2, 3), F32)
    with pytest.raises(ValueError, match="sorted=0"):
        _host(helper.make_node("TopK", ["x", "k"], ["v", "i"], sorted=0), [x, np.array([1], I64)], 11)
    with pytest.raises(ValueError, match="NaN"):
        _host(helper.make_node("TopK", ["x", "k"], ["v", "i"]), [np.array([1, np.nan], F32), np.array([1], I64)], 11)
    with pytest.raises(ValueError, match=r"TopK k=4 is outside \[0, 3\]"):
        _host(helper.make_node("TopK", ["x", "k"], ["v", "i"]), [x, np.array([4], I64)], 11)
    with pytest.raises(ValueError, match="GatherElements index out of range"):
        _host(helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1), [x, np.array([[3, 0, 0]] * 2)], 13)
    with pytest.raises(ValueError, match="ScatterND index out of range"):
        _host(helper.make_node("ScatterND", ["x", "i", "u"], ["y"]), [x, np.array([[2]], I64), np.ones((1, 3), F32)],
              13)
    with pytest.raises(ValueError, match="Range delta must not be zero"):
        _host(helper.make_node("Range", ["a", "b", "c"], ["y"]), [np.array(0, I64)] * 3, 11)
    with pytest.raises(ValueError, match="iou_threshold"):
        _host(helper.make_node("NonMaxSuppression", ["b", "s", "m", "i"], ["y"]),
              [np.ones((1, 1, 4), F32), np.ones((1, 1, 1), F32), np.array([1], I64), np.array([1.5], F32)], 11)
    with pytest.raises(ValueError, match="reduction"):
        _host(helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="avg"),
              [x, np.array([[0]], I64), np.ones((1, 3), F32)], 18)
    with pytest.raises(ValueError, match="Upsample was removed"):
        _host(helper.make_node("Upsample", ["x", "s"], ["y"]), [x, np.ones(2, F32)], 10)
