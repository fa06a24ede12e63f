"""ONNX Softmax and Flatten at the model's edges against ONNX Runtime: Softmax's axis rules of opset 11 (the input
read as 2-D from `axis` on, default 1) and 13 (one axis, default -1), float32 only; Flatten for every axis in
[-rank, rank] (rank gives (N, 1))."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from support.agree import DEVICES, run_devices

import vkinfer
from vkinfer.testing.onnx_builder import make_model

SHAPE = (2, 3, 4, 5)


def _model(node: helper.NodeProto, opset: int, out_type: int) -> bytes:
    """uint8 input -> DequantizeLinear -> `node` -> output (float), or `node` straight on the uint8 input."""
    nodes, consts = [], {}
    x = "x"
    if out_type == TensorProto.FLOAT:
        consts = {"s": np.array(0.05, np.float32), "z": np.array(128, np.uint8)}
        nodes.append(helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]))
        x = "xf"
    node.input[0] = x
    nodes.append(node)
    return make_model(nodes, {"x": (np.uint8, SHAPE)}, {"y": helper.tensor_dtype_to_np_dtype(out_type)}, consts,
                      opset=opset).SerializeToString()


def _both(blob: bytes, exact: bool) -> tuple[np.ndarray, np.ndarray]:
    """vkinfer's output (every device, the same bits; equal to ORT's too where `exact`) and ORT's."""
    x = np.random.default_rng(0).integers(0, 256, SHAPE, dtype=np.uint8)
    want = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    (got,) = run_devices(blob, {"x": x}, want=want if exact else None)
    return got, want[0]


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, 3, -1, -2, -4])
def test_softmax_axis_rules_match_onnxruntime(opset, axis):
    kw = {} if axis is None else {"axis": axis}
    got, want = _both(_model(helper.make_node("Softmax", ["x"], ["y"], **kw), opset, TensorProto.FLOAT), exact=False)
    assert got.shape == want.shape and got.dtype == np.float32
    # Same formula in float32 (x - max, exp, sum, divide); ORT's vectorised exp and summation order differ from
    # numpy's in the last bits, never more than a few units in the last place.
    np.testing.assert_allclose(got, want, rtol=4e-7, atol=0)
    # The axis rule itself: opset 11 normalises over every axis from `axis` on, 13 over one.
    a = (1 if opset < 13 else -1) if axis is None else axis
    a %= len(SHAPE)
    over = tuple(range(a, len(SHAPE))) if opset < 13 else (a,)
    np.testing.assert_allclose(got.sum(axis=over), 1.0, rtol=1e-5)


@pytest.mark.parametrize("axis", [-4, -3, -1, 0, 1, 2, 3, 4])
def test_flatten_every_axis_matches_onnxruntime(axis):
    got, want = _both(_model(helper.make_node("Flatten", ["x"], ["y"], axis=axis), 13, TensorProto.UINT8), exact=True)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


def test_bad_softmax_and_flatten_axes_are_refused():
    """On every device, naming the op and the axis."""
    x = np.zeros(SHAPE, np.uint8)
    for device in DEVICES:
        for node in (helper.make_node("Softmax", ["x"], ["y"], axis=4),
                     helper.make_node("Softmax", ["x"], ["y"], axis=-5)):
            with pytest.raises(ValueError, match="Softmax axis"):
                vkinfer.InferenceSession(_model(node, 13, TensorProto.FLOAT), device=device).run(None, {"x": x})
        with pytest.raises(ValueError, match="Flatten axis 5"):
            blob = _model(helper.make_node("Flatten", ["x"], ["y"], axis=5), 13, TensorProto.UINT8)
            vkinfer.InferenceSession(blob, device=device).run(None, {"x": x})
