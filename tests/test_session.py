"""vkinfer.InferenceSession on hand-built QOperator models: every device gives the same bits, equal to ONNX Runtime,
and bad models and bad inputs give the same clear errors on every device."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from agree import DEVICES, refused_devices, run_sessions
from onnx import TensorProto, helper, numpy_helper

import vkinfer
from vkinfer.model.onnx_import import UnsupportedModelError


def _small_qmodel(seed: int = 0) -> bytes:
    """uint8 input -> QLinearConv 3x3 (per-channel s8) -> QLinearConv 1x1 -> Flatten -> QLinearMatMul.

    7-bit weights: ORT's x86 u8 x s8 kernels saturate int16 pair sums on full-range weights (README).
    """
    rng = np.random.default_rng(seed)
    c0, c1, c2, hw, classes = 3, 8, 16, 9, 10
    init = {
        "xs": np.array(0.02, np.float32), "xzp": np.array(128, np.uint8),
        "w1": rng.integers(-64, 64, (c1, c0, 3, 3)).astype(np.int8),
        "w1s": rng.uniform(0.002, 0.01, c1).astype(np.float32), "w1zp": np.zeros(c1, np.int8),
        "y1s": np.array(0.05, np.float32), "y1zp": np.array(0, np.uint8),
        "b1": rng.integers(-500, 500, c1).astype(np.int32),
        "w2": rng.integers(-64, 64, (c2, c1, 1, 1)).astype(np.int8),
        "w2s": np.array(0.004, np.float32), "w2zp": np.array(0, np.int8),
        "y2s": np.array(0.08, np.float32), "y2zp": np.array(128, np.uint8),
        "shape": np.array([1, -1], np.int64),
        "w3": rng.integers(-64, 64, (c2 * hw * hw, classes)).astype(np.int8),
        "w3s": np.array(0.001, np.float32), "w3zp": np.array(0, np.int8),
        "y3s": np.array(0.2, np.float32), "y3zp": np.array(128, np.uint8),
    }
    nodes = [
        helper.make_node("QLinearConv", ["x", "xs", "xzp", "w1", "w1s", "w1zp", "y1s", "y1zp", "b1"], ["a"],
                         pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("QLinearConv", ["a", "y1s", "y1zp", "w2", "w2s", "w2zp", "y2s", "y2zp"], ["b"], name="conv2"),
        helper.make_node("Reshape", ["b", "shape"], ["f"], name="flat"),
        helper.make_node("QLinearMatMul", ["f", "y2s", "y2zp", "w3", "w3s", "w3zp", "y3s", "y3zp"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c0, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, classes])],
                              initializer=[numpy_helper.from_array(v, k) for k, v in init.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


def _ort(model: bytes, feed: dict) -> list:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"]).run(None, feed)


def test_small_model_equals_onnxruntime():
    """Three inputs through one session per device (buffers reused from the previous run hold nothing stale), all
    outputs and by name: the same bits everywhere, equal to ONNX Runtime."""
    model = _small_qmodel()
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
    sess = vkinfer.InferenceSession(_small_qmodel(), device=device)
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
    good = _small_qmodel()
    for bad in (b"\x00\x01garbage" * 10, good[: len(good) // 2]):
        refused_devices(bad, exc=ValueError, match="ONNX model")
    refused_devices("/nonexistent/model.onnx", exc=FileNotFoundError)


def test_unsupported_ops_are_all_listed_and_float_models_rejected():
    m = onnx.load_model_from_string(_small_qmodel())
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
        vkinfer.InferenceSession(_small_qmodel(), device="tpu")
