"""Malformed graphs end as a clean error naming the node, the tensor or the feed, at load where possible (issue 26,
"clean errors"), or, where ONNX Runtime runs the model, as its answer on every device.

The attack's non-clean cases: a node listing one output too many (three spliced mutants of the zoo models in
tests/models/regressions/nonclean/, where the extra output came first, so the real one was never written: a
KeyError at a later node), two nodes with one name (the second failed at run time with a KeyError), a list as the
feed ("truth value of an array is ambiguous"), a QLinearConv kernel_shape contradicting its weights (silently
ignored), a declared dimension of 0 (taken as symbolic). The TFLite importer is checked for the same classes.
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import tflite
from onnx import TensorProto, helper, numpy_helper
from support.agree import outcome_devices, refused_devices, run_devices, sessions

import vkinfer
from vkinfer.testing.tflite_builder import ModelBuilder, litert_run

NONCLEAN = Path(__file__).parents[1] / "models" / "regressions" / "nonclean"
# (file, the node whose output list is one too long): mutants of mlp_qop, mnv2_qop (README in ../shared/regressions)
SPLICED = [("case_100965_cpu.onnx", "matmul_2_node_quant"), ("case_118909_cpu.onnx", "conv_165_node_quant"),
           ("case_126118_reference.onnx", "add_203_node_quant")]


def _ort(model: onnx.ModelProto, feed: dict[str, np.ndarray] | None = None):
    """ONNX Runtime's outputs for `feed`, or the exception it raises (at load or at run)."""
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return sess.run(None, feed or {})
    except Exception as e:  # noqa: BLE001 - any refusal is what is compared
        return e


def _consts(rng, k: int = 8, n: int = 4) -> dict[str, np.ndarray]:
    # 7-bit weights: ORT's x86 u8 x s8 kernels saturate int16 pair sums on full-range ones (tests/support/README)
    return {"xs": np.array(0.02, np.float32), "xzp": np.array(128, np.uint8),
            "w": rng.integers(-64, 64, (k, n)).astype(np.int8), "ws": np.array(0.01, np.float32),
            "wzp": np.array(0, np.int8), "ys": np.array(0.05, np.float32), "yzp": np.array(120, np.uint8),
            "w2": rng.integers(-64, 64, (n, n)).astype(np.int8)}


def _model(nodes, consts, x_shape=(1, 8), y_shape=(1, 4), opset: int = 13) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.UINT8, list(x_shape))],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, list(y_shape))],
                              initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def _matmul(name: str, x: str, w: str, outs: list[str]):
    return helper.make_node("QLinearMatMul", [x, "xs", "xzp", w, "ws", "wzp", "ys", "yzp"], outs, name=name)


def _feed(shape=(1, 8)) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(1).integers(0, 256, shape).astype(np.uint8)}


# ---- a node listing more outputs than its op makes ----------------------------------------------------------------

@pytest.mark.parametrize("path,node", SPLICED, ids=[s[0] for s in SPLICED])
def test_spliced_extra_output_refused_by_name(path, node):
    m = onnx.load(NONCLEAN / path)
    assert isinstance(_ort(m), Exception)  # ONNX Runtime refuses them too
    outcome = outcome_devices(NONCLEAN / path)
    assert isinstance(outcome, ValueError), outcome
    assert f"node {node!r}" in str(outcome) and "2 outputs" in str(outcome), outcome


@pytest.mark.parametrize("first", [True, False], ids=["extra_first", "extra_last"])
def test_extra_output_of_a_default_domain_op(first):
    rng = np.random.default_rng(0)
    outs = ["extra", "y"] if first else ["y", "extra"]
    m = _model([_matmul("mm", "x", "w", outs)], _consts(rng))
    assert isinstance(_ort(m, _feed()), Exception)
    refused_devices(m, match=r"node 'mm' \(QLinearMatMul\) lists 2 outputs .*at most 1")


@pytest.mark.parametrize("read", ["graph_output", "node", "unread"])
def test_an_output_the_kernel_does_not_compute(read):
    """MaxPool names Indices (ONNX allows it; ORT computes it): read by the graph or a node, every device refuses
    it naming the node and the output (the reader found no value: a KeyError the fuzzer found,
    nonclean/onnx-838c8bef); named and read by nothing, the model runs with ORT's bits."""
    x = (np.arange(64).reshape(1, 2, 4, 8) % 11).astype(np.uint8)
    nodes = [helper.make_node("MaxPool", ["x"], ["y", "idx"], name="pool", kernel_shape=[2, 2])]
    outs = [helper.make_tensor_value_info("y", TensorProto.UINT8, None)]
    if read == "graph_output":
        outs.append(helper.make_tensor_value_info("idx", TensorProto.INT64, None))
    elif read == "node":
        nodes.append(helper.make_node("Cast", ["idx"], ["idx32"], name="cast", to=TensorProto.INT32))
        outs.append(helper.make_tensor_value_info("idx32", TensorProto.INT32, None))
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 2, 4, 8])], outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    if read == "unread":
        run_devices(m, {"x": x}, want=want)
    else:
        refused_devices(m, {"x": x}, match=r"node 'pool' \(MaxPool\): output 1 \('idx'\) is not supported")


def test_extra_output_of_a_com_microsoft_op():
    rng = np.random.default_rng(0)
    c = _consts(rng)
    c.update(bs=np.array(0.03, np.float32), bzp=np.array(7, np.uint8), b=rng.integers(0, 256, (1, 4)).astype(np.uint8))
    add = helper.make_node("QLinearAdd", ["h", "ys", "yzp", "b", "bs", "bzp", "ys", "yzp"], ["extra", "y"],
                           name="add", domain="com.microsoft")
    m = _model([_matmul("mm", "x", "w", ["h"]), add], c)
    assert isinstance(_ort(m, _feed()), Exception)
    refused_devices(m, match=r"node 'add' \(QLinearAdd\) lists 2 outputs")


# ---- node names ---------------------------------------------------------------------------------------------------

def test_duplicate_node_names_refused():
    """ONNX Runtime refuses a model whose nodes share a name ('two nodes with same node name'); vkinfer ran the
    second node into a KeyError at run time. Now a ValueError at load, naming both."""
    rng = np.random.default_rng(0)
    c = _consts(rng, 8, 4)
    second = helper.make_node("QLinearMatMul", ["h", "ys", "yzp", "w2", "ws", "wzp", "ys", "yzp"], ["y"], name="mm")
    m = _model([_matmul("mm", "x", "w", ["h"]), second], c)
    assert "two nodes with same node name" in str(_ort(m, _feed()))
    refused_devices(m, match=r"nodes 0 and 1 \(QLinearMatMul\) are both named 'mm': node names must be unique")


def test_generated_names_do_not_collide_with_given_ones():
    """A node without a name is called '<op>_<index>'; a node of the model already called that keeps its name and
    the nameless one takes another."""
    rng = np.random.default_rng(0)
    c = _consts(rng, 8, 4)
    first = _matmul("", "x", "w", ["h"])
    second = helper.make_node("QLinearMatMul", ["h", "ys", "yzp", "w2", "ws", "wzp", "ys", "yzp"], ["y"],
                              name="QLinearMatMul_0")
    m = _model([first, second], c)
    sess = vkinfer.InferenceSession(m.SerializeToString(), device="cpu")
    names = [n.name for n in sess.graph.nodes]
    assert len(set(names)) == 2 and "QLinearMatMul_0" in names, names
    want = _ort(m, _feed())
    assert isinstance(want, list), want
    run_devices(m, _feed(), want=want)


# ---- the feed container -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("batch", ["static", "symbolic"])
@pytest.mark.parametrize("feed", ["list", "tuple", "array", "none", "str"])
def test_feed_must_be_a_dict(batch, feed):
    rng = np.random.default_rng(0)
    shape = (1, 8) if batch == "static" else ("n", 8)
    m = _model([_matmul("mm", "x", "w", ["y"])], _consts(rng), x_shape=shape, y_shape=(shape[0], 4))
    x = _feed()["x"]
    bad = {"list": [x], "tuple": (x,), "array": x, "none": None, "str": "x"}[feed]
    for device, sess in sessions(m).items():
        with pytest.raises(TypeError, match=r"input_feed must be a dict of input name -> array, got "):
            sess.run(None, bad)
        assert sess.run(None, {"x": x})[0].shape == (1, 4), device  # the session still runs
        # A read-only mapping is still a mapping: accepted as before.
        assert sess.run(None, types.MappingProxyType({"x": x}))[0].shape == (1, 4), device


def test_feed_must_be_a_dict_ort_api():
    rng = np.random.default_rng(0)
    m = _model([_matmul("mm", "x", "w", ["y"])], _consts(rng))
    sess = vkinfer.ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(TypeError, match="input_feed must be a dict"):
        sess.run(None, [_feed()["x"]])


# ---- kernel_shape against the weights -----------------------------------------------------------------------------

def _conv_model(kernel_shape, qdq: bool) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w = rng.integers(-64, 64, (4, 3, 3, 3)).astype(np.int8)
    c = {"xs": np.array(0.02, np.float32), "xzp": np.array(128, np.uint8), "w": w,
         "ws": np.array(0.01, np.float32), "wzp": np.array(0, np.int8), "ys": np.array(0.05, np.float32),
         "yzp": np.array(120, np.uint8)}
    if qdq:
        nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xzp"], ["xf"], name="dqx"),
                 helper.make_node("DequantizeLinear", ["w", "ws", "wzp"], ["wf"], name="dqw"),
                 helper.make_node("Conv", ["xf", "wf"], ["yf"], name="conv", kernel_shape=kernel_shape),
                 helper.make_node("QuantizeLinear", ["yf", "ys", "yzp"], ["y"], name="qy")]
    else:
        nodes = [helper.make_node("QLinearConv", ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp"], ["y"],
                                  name="conv", kernel_shape=kernel_shape)]
    return _model(nodes, c, x_shape=(1, 3, 6, 6), y_shape=(1, 4, 4, 4))


@pytest.mark.parametrize("qdq", [False, True], ids=["qoperator", "qdq"])
def test_kernel_shape_contradicting_the_weights_refused(qdq):
    """QOperator: vkinfer/model/attrs.py's check; QDQ (weights a DequantizeLinear of an initializer): the importer's
    (the pair became a QLinearConv that ignored the attribute)."""
    m = _conv_model([1, 1], qdq)
    feed = {"x": np.random.default_rng(2).integers(0, 256, (1, 3, 6, 6)).astype(np.uint8)}
    assert isinstance(_ort(m, feed), Exception)  # ORT: "kernel_shape is not compatible with W shape"
    refused_devices(m, match=r"node 'conv' \((QLinear)?Conv\): attribute 'kernel_shape' = \[1, 1\]: contradicts "
                             r"the weights 'wf?' of shape \[4, 3, 3, 3\]")
    good = _conv_model([3, 3], qdq)  # the consistent attribute runs, as ORT
    want = _ort(good, feed)
    assert isinstance(want, list), want
    run_devices(good, feed, want=want)


# ---- declared dimensions ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dim", [0, -2])
def test_declared_zero_or_negative_dimension_refused(dim):
    rng = np.random.default_rng(0)
    m = _model([_matmul("mm", "x", "w", ["y"])], _consts(rng), x_shape=(dim, 8), y_shape=(1, 4))
    what = "a 0-sized tensor" if dim == 0 else "negative"
    refused_devices(m, match=rf"graph input 'x' declares dimension {dim} on axis 0 \(shape \[{dim}, 8\]\): {what}")


# ---- the TFLite importer: the same classes ------------------------------------------------------------------------

def _tflite_mul(x_shape=(1, 4, 4, 2), extra: bool = False) -> bytes:
    m = ModelBuilder()
    x = m.tensor("x", x_shape, np.int8, scale=0.05, zero_point=3)
    y = m.tensor("y", (1, 4, 4, 2), np.int8, scale=0.04, zero_point=-2)
    out = m.tensor("out", (1, 4, 4, 2), np.int8, scale=0.1, zero_point=1)
    outs = [m.tensor("extra", (1, 4, 4, 2), np.int8, scale=0.1, zero_point=1), out] if extra else [out]
    m.op(tflite.BuiltinOperator.MUL, [x, y], outs, tflite.BuiltinOptions.MulOptions, FusedActivationFunction=0)
    return m.finish([x, y], [out])


def test_tflite_op_with_an_extra_output_refused():
    good = _tflite_mul()
    rng = np.random.default_rng(0)
    feed = {k: rng.integers(-128, 128, (1, 4, 4, 2)).astype(np.int8) for k in ("x", "y")}
    run_devices(good, feed, want=[litert_run(good, feed)["out"]])
    refused_devices(_tflite_mul(extra=True), match=r"op 0 \(MUL\) lists 2 output tensors \[\d+, \d+\]; the op "
                                                   r"writes one")


@pytest.mark.parametrize("dim", [0, -3])
def test_tflite_zero_or_negative_dimension_refused(dim):
    blob = _tflite_mul(x_shape=(1, dim, 4, 2))
    match = (r"subgraph input tensor 'x' declares dimension 0 on axis 1 \(shape \[1, 0, 4, 2\]\): a 0-sized"
             if dim == 0 else r"tensor 'x' has a negative dimension: shape \[1, -3, 4, 2\]")
    refused_devices(blob, match=match)

