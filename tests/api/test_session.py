"""vkinfer.InferenceSession on hand-built QOperator models: every device gives the same bits, equal to ONNX Runtime,
and bad models and bad inputs give the same clear errors on every device."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from support.agree import DEVICES, refused_devices, run_sessions
from support.small_model import small_qmodel

import vkinfer
from vkinfer.model.onnx_import import UnsupportedModelError


def _ort(model: bytes, feed: dict) -> list:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"]).run(None, feed)


def test_small_model_equals_onnxruntime():
    """Three inputs through one session per device (buffers reused from the previous run hold nothing stale), all
    outputs and by name: the same bits everywhere, equal to ONNX Runtime."""
    model = small_qmodel()
    sessions = {d: vkinfer.InferenceSession(model, device=d) for d in DEVICES}
    for sess in sessions.values():
        assert [i.name for i in sess.get_inputs()] == ["x"] and sess.get_inputs()[0].type == "tensor(uint8)"
        assert sess.get_outputs()[0].shape == [1, 10]
    rng = np.random.default_rng(1)
    for _ in range(3):
        x = rng.integers(0, 256, (1, 3, 9, 9)).astype(np.uint8)
        want = _ort(model, {"x": x})
        run_sessions(sessions, {"x": x}, want=want)
        run_sessions(sessions, {"x": x}, want=want, output_names=["y"])


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_are_clear_errors(device):
    """The same errors on every device: the compiled devices' fast paths hand a bad feed to the checked path."""
    sess = vkinfer.InferenceSession(small_qmodel(), device=device)
    x = np.zeros((1, 3, 9, 9), np.uint8)
    with pytest.raises(ValueError, match="missing input 'x'"):
        sess.run(None, {})
    with pytest.raises(TypeError, match="input 'x' must be a numpy array of uint8"):
        sess.run(None, {"x": x.astype(np.float32)})
    with pytest.raises(ValueError, match=r"input 'x' must have shape \[1, 3, 9, 9\]"):
        sess.run(None, {"x": x[:, :, :8]})
    with pytest.raises(ValueError, match="unknown input"):
        sess.run(None, {"x": x, "z": x})
    with pytest.raises(ValueError, match="unknown output"):
        sess.run(["nope"], {"x": x})


def test_corrupt_and_truncated_models():
    good = small_qmodel()
    for bad in (b"\x00\x01garbage" * 10, good[: len(good) // 2]):
        refused_devices(bad, exc=ValueError, match="ONNX model")
    refused_devices("/nonexistent/model.onnx", exc=FileNotFoundError)


def test_unsupported_ops_are_all_listed_and_float_models_rejected():
    m = onnx.load_model_from_string(small_qmodel())
    m.graph.node.append(helper.make_node("Gelu", ["y"], ["g"], name="g1", domain="com.example"))
    m.graph.node.append(helper.make_node("GlobalLpPool", ["y"], ["h"], name="n1"))
    for device in DEVICES:
        with pytest.raises(UnsupportedModelError) as e:
            vkinfer.InferenceSession(m.SerializeToString(), device=device)
        assert "g1 (com.example:Gelu)" in str(e.value) and "n1 (GlobalLpPool)" in str(e.value), device
    fm = helper.make_model(helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "f",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])]))
    refused_devices(fm, exc=UnsupportedModelError, match="quantize it first")


def test_unknown_device():
    with pytest.raises(ValueError, match="device must be"):
        vkinfer.InferenceSession(small_qmodel(), device="tpu")
