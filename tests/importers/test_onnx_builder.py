"""vkinfer.testing.onnx_builder, the one ONNX graph builder of the tests, zoos and benches: declarations, IR
versions, bad input, and its quantized-op helpers against ONNX Runtime and every device."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from support import ort_oracle as oo
from support.agree import run_devices

from vkinfer.testing.onnx_builder import MS, GraphBuilder, ir_version, make_model, tensor_info


def test_declarations_and_ir_versions():
    x = tensor_info("x", np.zeros((2, 3), np.int8))
    assert x.type.tensor_type.elem_type == onnx.TensorProto.INT8
    assert [d.dim_value for d in x.type.tensor_type.shape.dim] == [2, 3]
    sym = tensor_info("s", (np.float32, ["N", 4]))
    assert [d.dim_param or d.dim_value for d in sym.type.tensor_type.shape.dim] == ["N", 4]
    assert not tensor_info("y", np.uint8).type.tensor_type.HasField("shape")
    # ORT 1.31's Python API loads IR 8 for opsets up to 18; newer opsets need a newer IR.
    assert [ir_version(o) for o in (11, 13, 18, 19, 21)] == [8, 8, 8, 9, 10]
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (np.float32, [1, 4])}, {"y": np.float32},
                   opset=21, domains=MS, check=True, infer_shapes=True)
    assert m.ir_version == 10 and {(o.domain, o.version) for o in m.opset_import} == {("", 21), ("com.microsoft", 1)}
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [1, 4]


def test_bad_input_is_refused_naming_the_culprit():
    with pytest.raises(TypeError, match="'x'.*complex128"):
        tensor_info("x", np.complex128)
    g = GraphBuilder()
    g.input("x", np.uint8, [1, 4])
    with pytest.raises(ValueError, match="'x' is already defined"):
        g.initializer("x", np.zeros(1))
    with pytest.raises(ValueError, match="shape inference left \\['y'\\] without a shape"):
        make_model([helper.make_node("Identity", ["x"], ["t"])], {"x": (np.float32, [2])}, {"y": np.float32},
                   infer_shapes=True)


def test_fresh_names_count_across_helpers():
    g = GraphBuilder()
    assert g.const("w", np.zeros(2, np.float32)) == "w_1"
    assert g.node("Relu", ["x"]) == "relu_2"
    assert g.nodes_out("Split", ["relu_2"], 2, axis=0) == ["split_3_0", "split_3_1"]
    assert [n.name for n in g.nodes] == ["relu_2_node", "split_3_node"]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_quantized_helpers_equal_onnxruntime_on_every_device(dtype):
    rng = np.random.default_rng(4)
    lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
    x = rng.integers(lo, hi + 1, (1, 6, 5, 5)).astype(dtype)
    w = rng.integers(-60, 61, (8, 6, 3, 3)).astype(np.int8)
    ws, bias = rng.uniform(0.002, 0.006, 8).astype(np.float32), rng.integers(-900, 900, 8).astype(np.int32)
    xz, yz = (128, 120) if dtype == np.uint8 else (3, -5)
    g = GraphBuilder()
    xq, yq = g.quant("x", 0.05, xz, dtype), g.quant("y", 0.08, yz, dtype)
    y = g.qlinear_conv(g.input("x", dtype, x.shape), xq, w, ws, np.zeros(8, np.int8), yq, bias, pads=[1, 1, 1, 1],
                       kernel_shape=[3, 3])
    b = rng.integers(-60, 61, (8, 4)).astype(np.int8)
    r = g.node("Reshape", [y, g.i64("shape", [25, 8])])
    z = g.qlinear_matmul(r, yq, b, 0.004, 0, g.quant("z", 0.1, yz, dtype))
    g.rename({z: "z"})
    m = g.build("q", {"z": (dtype, [25, 4])})
    t = np.dtype(dtype).type
    want_y = oo.qlinear_conv(x, 0.05, xz, w, ws, np.zeros(8, np.int8), 0.08, t(yz), bias, (1, 1), (1, 1, 1, 1),
                             (1, 1), 1)
    want = oo.qlinear_matmul(want_y.reshape(25, 8), 0.08, yz, b, 0.004, np.int8(0), 0.1, t(yz))
    run_devices(m, {"x": x}, want=[want])
