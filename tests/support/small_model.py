"""A small QOperator ONNX model (conv, conv, reshape, matmul) for API, CLI and benchmark tests."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def small_qmodel(seed: int = 0) -> bytes:
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
