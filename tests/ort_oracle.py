"""ONNX Runtime as the independent oracle: single-node QLinearConv / QLinearMatMul models."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

_T = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}


def _run(node, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray], y_type) -> np.ndarray:
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(k, _T[v.dtype], v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info("y", y_type, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # ORT's Python API refuses the newest IR versions
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


def qlinear_conv(x, xs, xzp, w, ws, wzp, ys, yzp, bias, strides, pads, dilations, group) -> np.ndarray:
    consts = {"xs": np.array(xs, np.float32), "xzp": np.array(xzp, x.dtype), "w": w,
              "ws": np.array(ws, np.float32), "wzp": np.array(wzp, w.dtype),
              "ys": np.array(ys, np.float32), "yzp": np.array(yzp)}
    names = ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp"]
    if bias is not None:
        consts["b"] = bias
        names.append("b")
    node = helper.make_node("QLinearConv", names, ["y"], strides=list(strides), pads=list(pads),
                            dilations=list(dilations), group=group, kernel_shape=list(w.shape[2:]))
    return _run(node, {"x": x}, consts, _T[consts["yzp"].dtype])


def qlinear_matmul(a, as_, azp, b, bs, bzp, ys, yzp) -> np.ndarray:
    def col(v, dt):  # ORT wants per-column params shaped like b with K -> 1: (..., 1, N)
        v = np.array(v, dt)
        per_col = np.size(bs) > 1 or np.size(bzp) > 1
        if not per_col:
            return v
        return np.ascontiguousarray(np.broadcast_to(v.reshape(1, -1), (*b.shape[:-2], 1, b.shape[-1])))

    consts = {"as": np.array(as_, np.float32), "azp": np.array(azp, a.dtype), "b": b,
              "bs": col(bs, np.float32), "bzp": col(bzp, b.dtype),
              "ys": np.array(ys, np.float32), "yzp": np.array(yzp)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"], ["y"])
    return _run(node, {"a": a}, consts, _T[consts["yzp"].dtype])


__all__ = ["qlinear_conv", "qlinear_matmul", "onnx"]
