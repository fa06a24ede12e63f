"""ORT's QDQ Gemm rule with a float output beyond MatMulIntegerToFloat: DequantizeLinear'd A and B (and an int32 C)
-> Gemm with no QuantizeLinear after it becomes com.microsoft QGemm with a float output in ORT 1.31 (C's raw int32
values join the integer sums; alpha folds into the multiplier). vkinfer folds the same Gemms (qdq_rules.py
`_qgemm_float_ok`) and computes ORT's bits (reference/qgemm.py `qgemm_float`) on every device; the Gemms ORT leaves
in float (alpha != 1 or beta != 1 with C) stay float Gemms."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto
from onnx import helper as h
from onnx import numpy_helper as nh
from support.agree import run_devices

import vkinfer


def _model(m: int, k: int, n: int, *, alpha=1.0, beta=None, trans_a=0, trans_b=1, per_col=True, with_c=True,
           c_scale_factor=1.0, b_type=np.int8, seed=0, c_range=20000):
    rng = np.random.default_rng(seed)
    a_s, a_z = np.float32(0.02), np.uint8(128)
    lo, hi = (-127, 128) if b_type == np.int8 else (0, 256)
    b = rng.integers(lo, hi, (n, k) if trans_b else (k, n)).astype(b_type)
    b_s = rng.uniform(0.001, 0.01, n if per_col else 1).astype(np.float32)
    b_z = (np.zeros(b_s.shape, b_type) if b_type == np.int8
           else rng.integers(100, 150, b_s.shape).astype(np.uint8))
    if not per_col:
        b_s, b_z = b_s.reshape(()), b_z.reshape(())
    c = rng.integers(-c_range, c_range + 1, n).astype(np.int32)
    c_s = (a_s * b_s * np.float32(c_scale_factor)).astype(np.float32)
    inits = [nh.from_array(np.array(a_s), "as"), nh.from_array(np.array(a_z), "az"), nh.from_array(b, "B"),
             nh.from_array(b_s, "bs"), nh.from_array(b_z, "bz")]
    nodes = [h.make_node("DequantizeLinear", ["a", "as", "az"], ["af"]),
             h.make_node("DequantizeLinear", ["B", "bs", "bz"], ["bf"], axis=0 if trans_b else 1)]
    gin = ["af", "bf"]
    if with_c:
        inits += [nh.from_array(c, "C"), nh.from_array(c_s, "cs"), nh.from_array(np.zeros(c_s.shape, np.int32), "cz")]
        nodes.append(h.make_node("DequantizeLinear", ["C", "cs", "cz"], ["cf"], axis=0))
        gin.append("cf")
    attrs = {"transA": trans_a, "transB": trans_b, "alpha": alpha} | ({} if beta is None else {"beta": beta})
    nodes.append(h.make_node("Gemm", gin, ["y"], name="gemm", **attrs))
    a_shape = [k, m] if trans_a else [m, k]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("a", TensorProto.UINT8, a_shape)],
                     [h.make_tensor_value_info("y", TensorProto.FLOAT, [m, n])], inits)
    feed = {"a": rng.integers(0, 256, a_shape, dtype=np.uint8)}
    return h.make_model(g, opset_imports=[h.make_opsetid("", 13)], ir_version=9).SerializeToString(), feed


def _ort(blob: bytes, feed: dict) -> tuple[np.ndarray, list[str]]:
    """ORT's output (ORT_ENABLE_ALL, one thread) and the op types of its optimized graph."""
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads, o.log_severity_level = 1, 3
    fd, path = tempfile.mkstemp(suffix=".onnx")
    os.close(fd)
    try:
        o.optimized_model_filepath = path
        y = ort.InferenceSession(blob, o, providers=["CPUExecutionProvider"]).run(None, feed)[0]
        return y, [nd.op_type for nd in onnx.load(path).graph.node]
    finally:
        os.unlink(path)


CASES = [
    ("int32_c", {}), ("int32_c_b_untransposed", {"trans_b": 0}), ("int32_c_per_tensor", {"per_col": False}),
    ("int32_c_scale_not_read", {"c_scale_factor": 1.5}), ("int32_c_uint8_b", {"b_type": np.uint8}),
    ("int32_c_wraps", {"c_range": 2**31 - 1, "seed": 3}), ("no_c_alpha", {"with_c": False, "alpha": 0.7}),
    ("no_c_trans_a", {"with_c": False, "trans_a": 1}), ("int32_c_trans_a", {"trans_a": 1}),
    ("int32_c_beta_1", {"beta": 1.0}),
]


@pytest.mark.parametrize("kw", [c[1] for c in CASES], ids=[c[0] for c in CASES])
@pytest.mark.parametrize("mkn", [(5, 300, 7), (1, 17, 3), (9, 64, 33)], ids=str)
def test_float_qgemm_equals_ort_on_every_device(kw, mkn):
    blob, feed = _model(*mkn, **kw)
    want, ort_ops = _ort(blob, feed)
    assert ort_ops == ["QGemm"], ort_ops  # the rule fires in ORT as the table says
    run_devices(blob, feed, want=[want])
    ops = [nd.op for nd in vkinfer.InferenceSession(blob, device="reference").graph.nodes]
    # transA: an 8-bit Transpose first (quant_ops.split_transposed_a), as for every QGemm
    assert ops == ["Transpose"] * int(kw.get("trans_a", 0)) + ["com.microsoft:QGemm"], ops
    for device in ("cpu", "vulkan"):  # the native qmatmul_f32 (cpu/matmul_integer_to_float.py), cpu on both
        assert vkinfer.InferenceSession(blob, device=device).placement["gemm"] == "cpu", device


def test_float_qgemm_with_a_full_c_runs_on_the_host_exact():
    """C of shape (M, N): not a per-column start, so the host runs the definition (ORT's bits still)."""
    blob, feed = _model(4, 20, 5)
    m = onnx.load_model_from_string(blob)
    c = next(t for t in m.graph.initializer if t.name == "C")
    c.CopyFrom(nh.from_array(np.arange(20, dtype=np.int32).reshape(4, 5) * 997 - 9000, "C"))
    cs = next(t for t in m.graph.initializer if t.name == "cs")
    cs.CopyFrom(nh.from_array(np.array(0.001, np.float32), "cs"))
    cz = next(t for t in m.graph.initializer if t.name == "cz")
    cz.CopyFrom(nh.from_array(np.array(0, np.int32), "cz"))
    blob = m.SerializeToString()
    want, ort_ops = _ort(blob, feed)
    assert ort_ops == ["QGemm"], ort_ops
    run_devices(blob, feed, want=[want])
    assert vkinfer.InferenceSession(blob, device="cpu").placement["gemm"] == "host"


@pytest.mark.parametrize("kw", [{"alpha": 0.7}, {"beta": 2.0}], ids=["alpha_with_c", "beta_with_c"])
def test_gemms_ort_keeps_in_float_stay_float(kw):
    blob, feed = _model(5, 40, 6, **kw)
    want, ort_ops = _ort(blob, feed)
    assert "QGemm" not in ort_ops and "Gemm" in ort_ops
    ops = [nd.op for nd in vkinfer.InferenceSession(blob, device="reference").graph.nodes]
    assert "com.microsoft:QGemm" not in ops and "Gemm" in ops
    got = run_devices(blob, feed)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)  # float Gemm: inexact.py's bound


def test_float_qgemm_bad_c_named():
    from vkinfer.model.graph import Node
    from vkinfer.reference.qgemm import qgemm_float

    nd = Node("com.microsoft:QGemm", "g", [], ["y"], {})
    a, b = np.zeros((2, 3), np.uint8), np.zeros((3, 4), np.int8)
    args = [a, np.float32(0.1), np.uint8(0), b, np.float32(0.1), np.int8(0)]
    with pytest.raises(TypeError, match="C must be int32"):
        qgemm_float(nd, [*args, np.zeros(4, np.float32)])
    with pytest.raises(ValueError, match="does not broadcast"):
        qgemm_float(nd, [*args, np.zeros(5, np.int32)])
