"""ONNX Runtime 1.31's QDQ rewrites (its QDQSelectorActionTransformer registry, QDQ propagation and dropDQ), one case
per rule, against vkinfer's folds (vkinfer/model/passes.py fold_qdq, vkinfer/model/qdq_rules.py; the table is in
docs/numerics.md, "ORT's QDQ fusions and vkinfer's folds").

Each case is DQ -> op -> Q on 8-bit graph inputs and outputs, uint8 and int8 (int8 with session.qdqisint8allowed=1),
at ORT_ENABLE_ALL. It checks what ORT's optimized graph keeps (SessionOptions.optimized_model_filepath: the rule
still fires as the table says), that the reference, cpu and vulkan give ORT's bits, and where the op runs: `dev`
(on the device: cpu on "cpu", vulkan on "vulkan"), `cpu` (the native CPU graph on both devices), or `host`
(numpy on the host, 8-bit where ORT runs 8-bit). LeakyRelu and Sigmoid fold into a vkinfer:Table (exact: every entry
is the float path's value, which ORT's QLinearLeakyRelu/QLinearSigmoid tables hold too).
"""

from __future__ import annotations

import functools
import os
import tempfile

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import helper as h
from support import ort_oracle as oo
from support.agree import DEVICES, run_sessions

import vkinfer
from vkinfer.testing.onnx_builder import make_model


def f32(*v) -> np.ndarray:
    return np.array(v, np.float32)


def i64(*v) -> np.ndarray:
    return np.array(v, np.int64)


def A(*shape):
    return ("a", shape)


def R(v):
    return ("r", v)


# (id, op, inputs, attrs, build options, ORT's optimized graph, where vkinfer runs the op). Inputs: A(shape) an
# 8-bit activation through a DQ, R(array) a constant, None an empty input.
COND = np.array([[True, False, True, True, False]] * 2)
RULES = [
    # "dropSplitQDQ"
    ("split", "Split", [A(2, 6), R(i64(2, 4))], {"axis": 1}, {"n_out": 2}, "Split", "dev"),
    # "drop": Q/DQ dropped around pure moves
    ("expand", "Expand", [A(3, 1), R(i64(2, 3, 4))], {}, {}, "Expand", "dev"),
    ("flatten", "Flatten", [A(2, 3, 4)], {"axis": 1}, {}, "Flatten", "dev"),
    ("gather", "Gather", [A(4, 5), R(i64(3, 0))], {"axis": 1}, {}, "Gather", "dev"),
    ("gatherelements", "GatherElements", [A(3, 4), R(np.array([[0, 3], [1, 1], [2, 0]], np.int64))], {"axis": 1}, {},
     "GatherElements", "dev"),
    ("reshape", "Reshape", [A(2, 3, 4), R(i64(4, 6))], {}, {}, "Reshape", "dev"),
    ("slice", "Slice", [A(4, 5), R(i64(1)), R(i64(3)), R(i64(0))], {}, {}, "Slice", "dev"),
    ("squeeze", "Squeeze", [A(2, 1, 4), R(i64(1))], {}, {}, "Squeeze", "dev"),
    ("tile", "Tile", [A(2, 3), R(i64(2, 2))], {}, {}, "Tile", "dev"),
    ("transpose", "Transpose", [A(2, 3, 4)], {"perm": [2, 0, 1]}, {}, "Transpose", "dev"),
    ("unsqueeze", "Unsqueeze", [A(2, 3), R(i64(0))], {}, {}, "Unsqueeze", "dev"),
    ("depthtospace", "DepthToSpace", [A(1, 8, 2, 3)], {"blocksize": 2}, {}, "DepthToSpace", "dev"),
    # "drop_no_int16_support": Resize (nearest; ORT keeps linear in float, vkinfer runs ORT's float path natively:
    # ops/float_resize.c)
    ("resize_nearest", "Resize", [A(1, 2, 3, 4), None, R(f32(1, 1, 2, 2))], {"mode": "nearest"}, {}, "Resize", "dev"),
    ("resize_linear", "Resize", [A(1, 2, 3, 4), None, R(f32(1, 1, 2, 2))], {"mode": "linear"}, {},
     "DequantizeLinear,Resize,QuantizeLinear", "cpu"),
    # "drop_no_int16_support_and_positive_scale"
    ("maxpool", "MaxPool", [A(1, 3, 6, 6)], {"kernel_shape": [2, 2]}, {}, "MaxPool", "dev"),
    ("maxpool_opset12", "MaxPool", [A(1, 3, 6, 6)], {"kernel_shape": [2, 2]}, {"opset": 12}, "MaxPool", "dev"),
    ("reducemax", "ReduceMax", [A(2, 3, 4), R(i64(1))], {"keepdims": 1}, {"opset": 18}, "ReduceMax", "cpu"),
    ("reducemin", "ReduceMin", [A(2, 3, 4), R(i64(-1))], {"keepdims": 0}, {"opset": 18}, "ReduceMin", "cpu"),
    # "dropDQ"
    ("argmax", "ArgMax", [A(3, 5)], {"axis": 1}, {"q_out": False}, "ArgMax", "cpu"),
    # "1DQ" unary -> com.microsoft QLinear ops
    ("averagepool", "AveragePool", [A(1, 2, 5, 5)], {"kernel_shape": [3, 3]}, {"out_scale": 0.04},
     "QLinearAveragePool", "cpu"),
    ("leakyrelu", "LeakyRelu", [A(1, 2, 5, 5)], {"alpha": 0.1}, {"out_scale": 0.03}, "QLinearLeakyRelu", "dev@q0"),
    ("globalaveragepool", "GlobalAveragePool", [A(1, 3, 4, 4)], {}, {"out_scale": 0.02}, "QLinearGlobalAveragePool",
     "dev"),
    ("sigmoid", "Sigmoid", [A(2, 20)], {}, {"out_scale": 1 / 256, "out_zp": 0}, "QLinearSigmoid", "dev@q0"),
    ("softmax", "Softmax", [A(2, 20)], {}, {"out_scale": 1 / 256, "out_zp": 0}, "QLinearSoftmax", "dev"),
    # "2DQ" binary, "*DQ" variadic
    ("add", "Add", [A(2, 5), A(2, 5)], {}, {"out_scale": 0.07}, "QLinearAdd", "dev"),
    ("mul", "Mul", [A(2, 5), A(1, 5)], {}, {"out_scale": 0.2}, "QLinearMul", "dev"),
    ("concat", "Concat", [A(2, 3), A(2, 2)], {"axis": 1}, {"out_scale": 0.06}, "QLinearConcat", "dev"),
    # "Where" -> QLinearWhere: vkinfer's float Where between DQ and Q is ORT's table arithmetic (native: the DQs, the
    # float Where and the Q on the cpu)
    ("where", "Where", [R(COND), A(2, 5), A(2, 5)], {}, {"out_scale": 0.06}, "QLinearWhere", "cpu"),
    # ORT keeps these in float; vkinfer folds them where Q(DQ(v)) == v makes it exact
    ("spacetodepth", "SpaceToDepth", [A(1, 2, 4, 6)], {"blocksize": 2}, {}, "DequantizeLinear,SpaceToDepth,"
     "QuantizeLinear", "dev"),
    ("pad", "Pad", [A(1, 2, 3, 3), R(i64(0, 0, 1, 1, 0, 0, 1, 1)), R(f32(0.3))], {}, {},
     "DequantizeLinear,Pad,QuantizeLinear", "dev"),
]
W = np.random.default_rng(0).integers(-100, 100, (6, 4)).astype(np.int8)


def build(op, ins, attrs, dt, opset=19, n_out=1, scale=0.05, out_scale=None, out_zp=None, q_out=True) -> bytes:
    """DQ(8-bit graph input) -> op -> Q (graph output), all 8-bit parameters scalar."""
    zp = np.array(128 if dt == np.uint8 else -3, dt)
    consts = {"s": np.array(scale, np.float32), "z": zp,
              "so": np.array(scale if out_scale is None else out_scale, np.float32),
              "zo": np.array(zp if out_zp is None else out_zp, dt)}
    nodes, inputs, names = [], {}, []
    for i, v in enumerate(ins):
        if v is None:
            names.append("")
        elif v[0] == "a":
            inputs[f"x{i}"] = (dt, list(v[1]))
            nodes.append(h.make_node("DequantizeLinear", [f"x{i}", "s", "z"], [f"d{i}"], name=f"dq{i}"))
            names.append(f"d{i}")
        else:
            consts[f"c{i}"] = v[1]
            names.append(f"c{i}")
    mids = [f"m{k}" for k in range(n_out)]
    nodes.append(h.make_node(op, names, mids, name="target", **attrs))
    if q_out:
        nodes += [h.make_node("QuantizeLinear", [m, "so", "zo"], [f"y{k}"], name=f"q{k}") for k, m in enumerate(mids)]
        outs = {f"y{k}": dt for k in range(n_out)}
    else:
        outs = dict.fromkeys(mids, np.int64)
    return make_model(nodes, inputs, outs, consts, opset=opset, ir=9).SerializeToString()


def ort_session(blob: bytes, dt):
    """ORT 1.31 at ORT_ENABLE_ALL on one thread (int8: session.qdqisint8allowed=1) and its optimized graph's ops."""
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    o.intra_op_num_threads = 1
    o.log_severity_level = 3
    if dt == np.int8:
        o.add_session_config_entry("session.qdqisint8allowed", "1")
    with tempfile.TemporaryDirectory() as d:
        o.optimized_model_filepath = os.path.join(d, "opt.onnx")
        s = ort.InferenceSession(blob, o, providers=["CPUExecutionProvider"])
        ops = ",".join(n.op_type for n in onnx.load(o.optimized_model_filepath).graph.node)
    return s, ops


def feeds(blob: bytes, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for vi in onnx.load_model_from_string(blob).graph.input:
        t = vi.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        out[vi.name] = rng.integers(0, 256, shape).astype(np.uint8).view(
            np.int8 if t.elem_type == onnx.TensorProto.INT8 else np.uint8)
    return out


def check(blob: bytes, dt, want_ops: str, where: dict[str, str]) -> None:
    """ORT's graph is `want_ops`; every device gives ORT's bits on two feeds; node name -> where it runs."""
    s, ops = ort_session(blob, dt)
    assert ops == want_ops, ops
    sessions = {d: vkinfer.InferenceSession(blob, device=d) for d in DEVICES}
    for seed in range(2):
        f = feeds(blob, seed)
        run_sessions(sessions, f, want=s.run(None, f))
    for device in ("cpu", "vulkan"):
        placed = sessions[device].placement
        for name, kind in where.items():
            want = {"dev": device, "cpu": "cpu", "host": "host"}[kind]
            got = [d.split(":")[0] for n, d in placed.items() if n == name or n.startswith(name + "#")]
            assert got and all(d == want for d in got), (device, name, placed)


@functools.cache
def rule_model(rid: str, dt) -> bytes:
    _, op, ins, attrs, kw, _, _ = next(r for r in RULES if r[0] == rid)
    return build(op, ins, attrs, dt, **kw)


@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["u8", "s8"])
@pytest.mark.parametrize("rid", [r[0] for r in RULES])
def test_rule_equals_ort(rid, dt):
    """One ORT rule: ORT's graph as the table says, ORT's bits on every device, the op where the table says."""
    rule = next(r for r in RULES if r[0] == rid)
    kind, _, node = rule[6].partition("@")  # "@q0": a vkinfer:Table, named after the Q it ends in
    check(rule_model(rid, dt), dt, rule[5], {node or "target": kind})


# ------------------------------------------------------------------------------------------ QDQ propagation


def _mm_consts(dt) -> dict:
    zp = np.array(128 if dt == np.uint8 else -3, dt)
    return {"s": np.array(0.05, np.float32), "z": zp, "so": np.array(0.3, np.float32), "zo": zp, "w": W,
            "ws": np.array(0.02, np.float32), "wz": np.array(0, np.int8), "shape": i64(4, 3)}


def prop_forward(dt) -> bytes:
    """DQ -> Transpose -> MatMul(DQ w) -> Q: ORT propagates the DQ past the Transpose (8-bit Transpose and
    QLinearMatMul)."""
    n = [h.make_node("DequantizeLinear", ["x", "s", "z"], ["d"], name="dq"),
         h.make_node("Transpose", ["d"], ["t"], perm=[1, 0], name="tr"),
         h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["dw"], name="dqw"),
         h.make_node("MatMul", ["t", "dw"], ["m"], name="mm"), h.make_node("QuantizeLinear", ["m", "so", "zo"], ["y"])]
    return make_model(n, {"x": (dt, [6, 3])}, {"y": dt}, _mm_consts(dt), opset=19, ir=9).SerializeToString()


def prop_backward(dt) -> bytes:
    """DQ -> MatMul(DQ w) -> Reshape -> Q: ORT propagates the Q back before the Reshape (QLinearMatMul + 8-bit
    Reshape), where the float MatMul would otherwise round differently."""
    n = [h.make_node("DequantizeLinear", ["x", "s", "z"], ["d"], name="dq"),
         h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["dw"], name="dqw"),
         h.make_node("MatMul", ["d", "dw"], ["m"], name="mm"), h.make_node("Reshape", ["m", "shape"], ["r"], name="rs"),
         h.make_node("QuantizeLinear", ["r", "so", "zo"], ["y"])]
    return make_model(n, {"x": (dt, [3, 6])}, {"y": dt}, _mm_consts(dt), opset=19, ir=9).SerializeToString()


@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["u8", "s8"])
@pytest.mark.parametrize("case", ["forward", "backward"])
def test_qdq_propagation_equals_ort(case, dt):
    """ORT's QDQPropagationTransformer: the move runs on the 8-bit tensor and the MatMul as QLinearMatMul."""
    if case == "forward":
        check(prop_forward(dt), dt, "Transpose,QLinearMatMul", {"tr": "dev", "mm": "dev"})
    else:
        check(prop_backward(dt), dt, "QLinearMatMul,Reshape", {"rs": "dev", "mm": "dev"})


def test_maxpool_negative_scale_is_not_folded():
    """ORT keeps MaxPool with a negative scale in float (max of DQ values is the min of the bytes): vkinfer must not
    fold it into an 8-bit MaxPool. It refuses the negative DQ scale instead, with the node's name, on every device."""
    blob = build("MaxPool", [A(1, 3, 6, 6)], {"kernel_shape": [2, 2]}, np.uint8, scale=-0.05)
    _, ops = ort_session(blob, np.uint8)
    assert ops == "DequantizeLinear,MaxPool,QuantizeLinear"
    for device in DEVICES:
        with pytest.raises(ValueError, match="dq0"):
            vkinfer.InferenceSession(blob, device=device).run(None, feeds(blob, 0))


# ------------------------------------------------------------------------------ MatMul with a float output


def mm_float(dt, wdt, per_column: bool, bias: bool, a_shape=(3, 6), trans_b=None) -> tuple[bytes, dict]:
    """DQ(x) and DQ(constant w) -> MatMul (-> Add bias) with a float graph output, no Q; with `trans_b` (0 or 1) a
    Gemm (no C) instead, its B transposed when 1."""
    rng = np.random.default_rng(1 + 2 * per_column + bias)
    k, n = a_shape[-1], 5
    c = {"s": np.array(0.05, np.float32), "z": np.array(128 if dt == np.uint8 else -3, dt),
         "w": rng.integers(0, 256, (k, n)).astype(np.uint8).view(wdt),
         "ws": rng.uniform(0.01, 0.03, n).astype(np.float32) if per_column else np.array(0.02, np.float32),
         "wz": rng.integers(0, 256, n if per_column else ()).astype(np.uint8).view(wdt)}
    nodes = [h.make_node("DequantizeLinear", ["x", "s", "z"], ["d"], name="dq"),
             h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["dw"], name="dqw", axis=1 - (trans_b or 0)),
             h.make_node("MatMul", ["d", "dw"], ["m" if bias else "y"], name="mm")]
    if trans_b is not None:
        c["w"] = np.ascontiguousarray(c["w"].T) if trans_b else c["w"]
        nodes[2] = h.make_node("Gemm", ["d", "dw"], ["y"], name="mm", transB=trans_b)
    if bias:
        c["b"] = rng.standard_normal(n).astype(np.float32)
        nodes.append(h.make_node("Add", ["m", "b"], ["y"], name="add"))
    blob = make_model(nodes, {"x": (dt, list(a_shape))}, {"y": np.float32}, c, opset=19, ir=9).SerializeToString()
    return blob, c


MM_FLOAT = [(dt, wdt, pc) for dt, wdt in ((np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8))
            for pc in (False, True)]


@pytest.mark.parametrize("dt,wdt,per_column", MM_FLOAT,
                         ids=[f"{d.__name__}-{w.__name__}-{'pc' if p else 'pt'}" for d, w, p in MM_FLOAT])
def test_matmul_float_output_reference_equals_ort(dt, wdt, per_column, monkeypatch):
    """ORT makes DQ -> MatMul (no Q) com.microsoft MatMulIntegerToFloat and DQ -> Gemm (no C, no Q) a QGemm with a
    float output; vkinfer's fold makes both MatMulIntegerToFloat and gives ORT's bits (uint8/int8 activations and
    weights, per-tensor and per-column, batched A, Gemm's transB; edge bytes 0/255 included)."""
    from vkinfer.model import onnx_import
    from vkinfer.model.interpreter import interpret
    from vkinfer.model.op_table import OPS
    from vkinfer.model.qdq_rules import fold_matmul_to_float

    monkeypatch.setattr(onnx_import, "optimize", lambda g: g)  # the imported graph before the passes

    for a_shape, trans_b in (((3, 6), None), ((2, 4, 33), None), ((3, 6), 0), ((4, 9), 1)):
        blob, _ = mm_float(dt, wdt, per_column, False, a_shape, trans_b)
        s, ops = ort_session(blob, dt)
        assert ops == ("MatMulIntegerToFloat" if trans_b is None else "QGemm"), ops
        g = fold_matmul_to_float(onnx_import.import_onnx(blob, dict.fromkeys(OPS)))
        assert [n.op for n in g.nodes] == ["com.microsoft:MatMulIntegerToFloat"]
        for seed in range(3):
            f = feeds(blob, seed)
            if seed == 2:
                f["x"] = np.where(f["x"].view(np.uint8) & 1, 255, 0).astype(np.uint8).view(dt)
            values = {**g.consts, **f}
            interpret(g, values)
            want = s.run(None, f)[0]
            if dt == np.uint8 and wdt == np.int8 and oo.u8s8_behaviour() == oo.SATURATING:
                continue  # ORT's x86 AVX2 u8 x s8 GEMM saturates int16 pair sums (tests/importers/test_onnx_extras.py)
            assert values["y"].dtype == np.float32 and np.array_equal(values["y"].view(np.int32), want.view(np.int32))


def test_matmul_float_output_not_folded(monkeypatch):
    """Where ORT keeps the float MatMul, the fold leaves it: DQ -> MatMul -> Add(bias) with no Q (ORT's
    MatMulAddFusion, vkinfer's too, makes a float Gemm first), a Gemm with a float C (float in ORT), and int8
    activations with uint8 weights (no such ORT kernel). A Gemm with an int32 DQ C is ORT's QGemm with a float
    output, and so here (tests/importers/test_qgemm_float.py checks the bits)."""
    from vkinfer.model import onnx_import
    from vkinfer.model.matmul_add_fuse import fuse_matmul_add
    from vkinfer.model.op_table import OPS
    from vkinfer.model.qdq_rules import fold_matmul_to_float

    monkeypatch.setattr(onnx_import, "optimize", lambda g: g)  # the imported graph before the passes

    for dt in (np.uint8, np.int8):
        blob, _ = mm_float(dt, np.int8, True, True)
        _, ops = ort_session(blob, dt)
        assert ops == "DequantizeLinear,DequantizeLinear,Gemm", ops
        # MatMulAddFusion first, as in ORT (vkinfer/model/matmul_add_fuse.py), then the fold keeps the float Gemm
        g = fuse_matmul_add(onnx_import.import_onnx(blob, dict.fromkeys(OPS)))
        assert [n.op for n in g.nodes] == ["DequantizeLinear", "DequantizeLinear", "Gemm"], g.nodes
        assert fold_matmul_to_float(g) is g
    # Gemm with a float C: ORT keeps a float Gemm too.
    blob, c = mm_float(np.uint8, np.int8, True, False, trans_b=0)
    m = onnx.load_model_from_string(blob)
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.linspace(-1, 1, 5).astype(np.float32), "cf"))
    m.graph.node[2].input.append("cf")
    blob = m.SerializeToString()
    _, ops = ort_session(blob, np.uint8)
    assert ops == "DequantizeLinear,DequantizeLinear,Gemm", ops
    g = onnx_import.import_onnx(blob, dict.fromkeys(OPS))
    assert fold_matmul_to_float(g) is g
    # Gemm with C a DQ of int32: ORT's QGemm adds the int32 bias before the multiply; folded into the same QGemm.
    m = onnx.load_model_from_string(mm_float(np.uint8, np.int8, False, False, trans_b=0)[0])
    m.graph.initializer.extend([onnx.numpy_helper.from_array(np.arange(-2, 3, dtype=np.int32) * 999, "cq"),
                                onnx.numpy_helper.from_array(np.array(0.001, np.float32), "cs")])
    m.graph.node.insert(2, h.make_node("DequantizeLinear", ["cq", "cs"], ["cd"], name="dqc"))
    m.graph.node[3].input.append("cd")
    blob = m.SerializeToString()
    _, ops = ort_session(blob, np.uint8)
    assert ops == "QGemm", ops
    g = onnx_import.import_onnx(blob, dict.fromkeys(OPS))
    assert [n.op for n in fold_matmul_to_float(g).nodes] == ["com.microsoft:QGemm"]
    # int8 activations with uint8 weights: ORT has no such kernel and keeps DQ, DQ, MatMul in float.
    blob, _ = mm_float(np.int8, np.uint8, False, False)
    _, ops = ort_session(blob, np.int8)
    assert ops == "DequantizeLinear,DequantizeLinear,MatMul", ops
    g = onnx_import.import_onnx(blob, dict.fromkeys(OPS))
    assert fold_matmul_to_float(g) is g


def test_matmul_integer_to_float_bad_input():
    """The reference names the culprit: a b_scale that is neither a scalar nor one per column, a float64 scale, a
    per-row a_zero_point."""
    from vkinfer.reference.matmul_integer_to_float import matmul_integer_to_float

    a, b = np.zeros((2, 3), np.uint8), np.zeros((3, 4), np.int8)
    s = np.float32(0.1)
    with pytest.raises(ValueError, match="b_scale"):
        matmul_integer_to_float(a, b, s, np.ones(3, np.float32))
    with pytest.raises(TypeError, match="a_scale"):
        matmul_integer_to_float(a, b, np.float64(0.1), s)
    with pytest.raises(ValueError, match="a_zero_point"):
        matmul_integer_to_float(a, b, s, s, np.zeros(2, np.uint8))
    with pytest.raises(ValueError, match="bias"):
        matmul_integer_to_float(a, b, s, s, None, None, np.zeros(3, np.float32))



@pytest.mark.parametrize("dt,wdt,per_column", MM_FLOAT,
                         ids=[f"{d.__name__}-{w.__name__}-{'pc' if p else 'pt'}" for d, w, p in MM_FLOAT])
def test_matmul_float_output_sessions_equal_ort(dt, wdt, per_column):
    """The fold in the sessions' passes (model/passes.py optimize): DQ -> MatMul / Gemm with a float output runs as
    MatMulIntegerToFloat on the CPU of every device (a vulkan session too), ORT's bits on every device."""
    for a_shape, trans_b in (((3, 6), None), ((2, 4, 33), None), ((4, 9), 1)):
        blob, _ = mm_float(dt, wdt, per_column, False, a_shape, trans_b)
        s, _ = ort_session(blob, dt)
        sess = {d: vkinfer.InferenceSession(blob, device=d) for d in DEVICES}
        for d, se in sess.items():
            assert [n.op for n in se.graph.nodes] == ["com.microsoft:MatMulIntegerToFloat"], d
            if d != "reference":
                assert set(se.placement.values()) == {"cpu"}, (d, se.placement)
        saturating = dt == np.uint8 and wdt == np.int8 and oo.u8s8_behaviour() == oo.SATURATING
        for seed in range(2):
            f = feeds(blob, seed)
            run_sessions(sess, f, want=None if saturating else s.run(None, f))
