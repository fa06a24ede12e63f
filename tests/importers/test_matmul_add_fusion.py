"""ORT's MatMulAddFusion mirrored (vkinfer/model/matmul_add_fuse.py): a float MatMul -> Add(bias) becomes the Gemm
ORT makes of it at ORT_ENABLE_BASIC and above, exactly where ORT makes it (compared with the model ORT 1.31 writes
to optimized_model_filepath), so vkinfer's float Gemm gives ORT_ENABLE_ALL's bits (one intra-op thread), on every
device, the Gemm on the cpu.

Cases: the bias shapes ORT takes and refuses for 2-D, 1-D, 3-D and 4-D A, the bias as either Add input, a second
reader, a graph output, a 3-D B, symbolic dimensions, an attention projection's input and a LayerNormalization's
Q, K, V (newer ORT sources skip both, 1.31.1 fuses them), random shapes; in QDQ models DQ(a), DQ(w) -> MatMul ->
Add(bias) with no Q: a float Gemm with DQ inputs (a float bias), a QGemm with a float output (a DequantizeLinear
of an int32 bias), and MatMulIntegerToFloat then Add (a bias that does not fit)."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, numpy_helper
from onnx import helper as h
from support.agree import DEVICES, run_sessions, sessions

F32 = np.float32
K, N = 300, 7  # K beyond MLAS's K block (128 unpacked, 256 packed): the fused bias order shows


def _model(nodes, ins: dict, consts: dict, opset: int = 17, outs=("y",)) -> bytes:
    """`ins`: name -> (elem type, shape); a DequantizeLinear branch is added when no input is 8-bit (vkinfer runs
    8-bit models only)."""
    nodes = list(nodes)
    consts = dict(consts)
    vis = [h.make_tensor_value_info(k, t, list(s)) for k, (t, s) in ins.items()]
    outputs = [h.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs]
    if not any(t in (TensorProto.UINT8, TensorProto.INT8) for t, _ in ins.values()):
        nodes.append(h.make_node("DequantizeLinear", ["q", "qs"], ["qf"], name="dq"))
        consts["qs"] = F32(0.5)
        vis.append(h.make_tensor_value_info("q", TensorProto.UINT8, [4]))
        outputs.append(h.make_tensor_value_info("qf", TensorProto.FLOAT, None))
    g = h.make_graph(nodes, "g", vis, outputs, initializer=[numpy_helper.from_array(np.asarray(v), k)
                                                            for k, v in consts.items()])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = 8 if opset <= 18 else 9 if opset <= 20 else 10
    return m.SerializeToString()


def _ort(blob: bytes, feed: dict, names: bool = False) -> tuple[list[np.ndarray], list[str]]:
    """ORT_ENABLE_ALL's outputs on one thread and the ops (or node names) of the model it optimized."""
    with tempfile.TemporaryDirectory() as d:
        o = ort.SessionOptions()
        o.intra_op_num_threads = o.inter_op_num_threads = 1
        o.log_severity_level = 3
        o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        o.optimized_model_filepath = os.path.join(d, "opt.onnx")
        s = ort.InferenceSession(blob, o, providers=["CPUExecutionProvider"])
        ops = [n.name if names else n.op_type for n in onnx.load(o.optimized_model_filepath).graph.node]
        return s.run(None, feed), ops


def _data(rng, shape) -> np.ndarray:
    """Magnitudes 1e-3 .. 1e3 of both signs with signed zeros: another summation order shows in the bits."""
    v = rng.standard_normal(shape) * rng.choice([1.0, 1e3, 1e-3], shape)
    return np.where(rng.random(shape) < 0.05, rng.choice([0.0, -0.0], shape), v).astype(F32)


def _vk_ops(blob: bytes, names: bool = False) -> list[str]:
    from vkinfer.model.onnx_import import import_onnx
    from vkinfer.model.op_table import OPS

    return [n.name if names else n.op for n in import_onnx(blob, dict.fromkeys(OPS)).nodes]


def _check(blob: bytes, feed: dict, fused: bool, name: str = "mm") -> None:
    """ORT fuses MatMul `name` iff `fused` (its Gemm named `name`/MatMulAddFusion); vkinfer's graph has the same
    Gemm iff ORT's has; every device ORT_ENABLE_ALL's bits, the Gemm (or the MatMul) on the cpu."""
    gemm = f"{name}/MatMulAddFusion"
    want, ort_names = _ort(blob, feed, names=True)
    assert (gemm in ort_names and name not in ort_names) == fused, ort_names
    names = _vk_ops(blob, names=True)
    assert (gemm in names and name not in names) == fused, names
    per = sessions(blob, DEVICES)
    run_sessions(per, feed, want=want)
    node = gemm if fused else name
    for dev in ("cpu", "vulkan"):
        assert per[dev].placement[node] == "cpu", (dev, per[dev].placement)


def _feed(rng, a_shape, extra=None) -> dict:
    return {"a": _data(rng, a_shape), "q": np.arange(4, dtype=np.uint8), **(extra or {})}


# (A shape, bias shape, ORT fuses): ORT's rules (matmul_add_fusion.cc): bias (N) always, (1, N) / (M, 1) / (M, N)
# for a 2-D A only; A of another rank reshaped to (M, K) and back.
CASES = [((3, K), (N,), True), ((3, K), (1, N), True), ((3, K), (3, 1), True), ((3, K), (3, N), True),
         ((3, K), (1, 1), False), ((3, K), (), False), ((3, K), (1, 1, N), False), ((1, K), (N,), True),
         ((K,), (N,), True), ((2, 3, K), (N,), True), ((2, 3, K), (1, N), False), ((2, 3, K), (1, 1, N), False),
         ((2, 2, 3, K), (N,), True), ((1, 1, K), (N,), True), ((5, K), (5, N), True)]


@pytest.mark.parametrize("bias_first", [False, True], ids=["m+bias", "bias+m"])
@pytest.mark.parametrize("packed", [True, False], ids=["B-init", "B-computed"])
@pytest.mark.parametrize("case", CASES, ids=[f"{a}+{b}" for a, b, _ in CASES])
def test_bias_shapes(case, packed, bias_first):
    a_shape, bias_shape, fused = case
    rng = np.random.default_rng(len(a_shape) * 31 + len(bias_shape))
    b, bias = _data(rng, (K, N)), _data(rng, bias_shape)
    nodes = [h.make_node("MatMul", ["a", "b"], ["m"], name="mm"),
             h.make_node("Add", ["bias", "m"] if bias_first else ["m", "bias"], ["y"], name="add")]
    consts, ins, extra = {"bias": bias}, {"a": (TensorProto.FLOAT, a_shape)}, {}
    if packed:
        consts["b"] = b
    else:  # B a graph input: ORT does not prepack it
        ins["b"], extra["b"] = (TensorProto.FLOAT, (K, N)), b
    _check(_model(nodes, ins, consts), _feed(rng, a_shape, extra), fused)


def test_not_fused_where_ort_does_not():
    """A second reader of the MatMul, the MatMul a graph output, a 3-D B, a symbolic dimension of a 3-D A: ORT keeps
    MatMul and Add, and so does vkinfer (the nodes as written: ORT's bits)."""
    rng = np.random.default_rng(2)
    b, bias = _data(rng, (K, N)), _data(rng, (N,))
    mm, add = h.make_node("MatMul", ["a", "b"], ["m"], name="mm"), h.make_node("Add", ["m", "bias"], ["y"], name="add")
    f = _feed(rng, (3, K))
    _check(_model([mm, add, h.make_node("Relu", ["m"], ["r"], name="relu")], {"a": (TensorProto.FLOAT, (3, K))},
                  {"b": b, "bias": bias}, outs=("y", "r")), f, False)
    _check(_model([mm, add], {"a": (TensorProto.FLOAT, (3, K))}, {"b": b, "bias": bias}, outs=("y", "m")), f, False)
    b3 = _data(rng, (2, K, N))
    _check(_model([mm, add], {"a": (TensorProto.FLOAT, (2, 3, K))}, {"b": b3, "bias": bias}), _feed(rng, (2, 3, K)),
           False)
    # a symbolic batch: ORT's shape of a 3-D A is not concrete (no reshape), a 2-D A needs none
    blob = _model([mm, add], {"a": (TensorProto.FLOAT, ("batch", 3, K))}, {"b": b, "bias": bias})
    _check(blob, _feed(rng, (2, 3, K)), False)
    blob = _model([mm, add], {"a": (TensorProto.FLOAT, ("batch", K))}, {"b": b, "bias": bias})
    _check(blob, _feed(rng, (4, K)), True)


def test_through_identity_and_float_cast():
    """MatMul -> Identity -> Cast(to float) -> Add (open_nsfw's MatMul -> Cast -> Add): ORT's Level 1 rules drop the
    no-op nodes and then fuse, so does vkinfer; a Cast to int32 and back is not a no-op: nothing fused."""
    rng = np.random.default_rng(4)
    consts = {"b": _data(rng, (K, N)), "bias": _data(rng, (N,))}
    mm = h.make_node("MatMul", ["a", "b"], ["m"], name="mm")
    nodes = [mm, h.make_node("Identity", ["m"], ["i"], name="id"), h.make_node("Cast", ["i"], ["c"], to=1, name="cast"),
             h.make_node("Add", ["c", "bias"], ["y"], name="add")]
    _check(_model(nodes, {"a": (TensorProto.FLOAT, (3, K))}, consts), _feed(rng, (3, K)), True)
    nodes = [mm, h.make_node("Cast", ["m"], ["h"], to=6, name="int"), h.make_node("Cast", ["h"], ["c"], to=1),
             h.make_node("Add", ["c", "bias"], ["y"], name="add")]
    _check(_model(nodes, {"a": (TensorProto.FLOAT, (3, K))}, consts), _feed(rng, (3, K)), False)


@pytest.mark.parametrize("opset", [13, 19])
def test_attention_projection_is_fused_as_ort_1_31_does(opset):
    """Softmax -> MatMul -> Transpose -> Reshape -> MatMul -> Add: newer ORT sources skip the projection (left to
    AttentionFusion); ORT 1.31.1 fuses it (measured), and so does vkinfer."""
    rng = np.random.default_rng(opset)
    nodes = [h.make_node("Softmax", ["a"], ["p"], axis=-1, name="sm"), h.make_node("MatMul", ["p", "v"], ["av"]),
             h.make_node("Transpose", ["av"], ["t"], perm=[0, 2, 1, 3]), h.make_node("Reshape", ["t", "shp"], ["r"]),
             h.make_node("MatMul", ["r", "b"], ["m"], name="mm"), h.make_node("Add", ["m", "bias"], ["y"], name="add")]
    consts = {"v": _data(rng, (2, 4, 3, 75)), "shp": np.array([2, 3, K], np.int64), "b": _data(rng, (K, N)),
              "bias": _data(rng, (N,))}
    blob = _model(nodes, {"a": (TensorProto.FLOAT, (2, 4, 3, 3))}, consts, opset=opset)
    _check(blob, _feed(rng, (2, 4, 3, 3)), True)


def test_layer_norm_qkv_pattern_is_fused():
    """A LayerNormalization read by three MatMul -> Add (Q, K, V) and a residual Add of an output projection (the
    pattern newer ORT's preserve_attention_pattern skips): ORT 1.31.1 fuses all four, so does vkinfer."""
    rng = np.random.default_rng(3)
    d = 40
    consts = {"sc": np.ones(d, F32), "bi": np.zeros(d, F32)}
    nodes = [h.make_node("LayerNormalization", ["a", "sc", "bi"], ["ln"], axis=-1, name="ln")]
    for p in ("q", "k", "v", "o"):
        consts["w" + p], consts["b" + p] = _data(rng, (d, d)), _data(rng, (d,))
        src = "x2" if p == "o" else "ln"
        nodes += [h.make_node("MatMul", [src, "w" + p], ["m" + p], name="mm" + p),
                  h.make_node("Add", ["m" + p, "b" + p], ["a" + p], name="add" + p)]
        if p == "v":
            nodes += [h.make_node("Add", ["aq", "ak"], ["s1"], name="s1"), h.make_node("Add", ["s1", "av"], ["s2"],
                                                                                      name="s2"),
                      h.make_node("Relu", ["s2"], ["x2"], name="relu")]
    nodes.append(h.make_node("Add", ["ln", "ao"], ["y"], name="res"))
    for shape in ((2, 3, d), (3, d)):
        blob = _model(nodes, {"a": (TensorProto.FLOAT, shape)}, consts)
        feed = _feed(rng, shape)
        want, ort_ops = _ort(blob, feed)
        assert ort_ops.count("Gemm") == 4, ort_ops
        ops = _vk_ops(blob)
        assert ops.count("Gemm") == 4 and "MatMul" not in ops, ops
        per = sessions(blob, DEVICES)
        run_sessions(per, feed, want=want)


def test_random_shapes():
    """Random M, K, N, A ranks 1-4 and bias shapes: vkinfer's graph fuses where ORT's does, ORT's bits."""
    rng = np.random.default_rng(11)
    for _ in range(12):
        k, n = int(rng.integers(1, 600)), int(rng.integers(1, 40))
        lead = tuple(int(v) for v in rng.integers(1, 5, int(rng.integers(0, 4))))
        a_shape = (*lead, k)
        m = int(np.prod(lead)) if len(lead) == 1 else 0
        choices = [(n,), (1, n), (1, 1, n), (1,)] + ([(m, 1), (m, n)] if m else [])
        bias_shape = choices[int(rng.integers(len(choices)))]
        consts = {"b": _data(rng, (k, n)), "bias": _data(rng, bias_shape)}
        blob = _model([h.make_node("MatMul", ["a", "b"], ["m"], name="mm"),
                       h.make_node("Add", ["m", "bias"], ["y"], name="add")], {"a": (TensorProto.FLOAT, a_shape)},
                      consts)
        feed = _feed(rng, a_shape)
        _check(blob, feed, "mm/MatMulAddFusion" in _ort(blob, feed, names=True)[1])  # ORT's graph: where it fuses


def _qdq_mm_add(dt, a_shape, bias: str) -> tuple[bytes, dict]:
    """DQ(x), DQ(constant w) -> MatMul -> Add(bias) with a float graph output, no Q: `bias` "float" (a float
    constant (N,)), "int32" (a DequantizeLinear of an int32 constant) or "float3d" ((1, 1, N): not fused)."""
    rng = np.random.default_rng(len(a_shape) + len(bias))
    k = a_shape[-1]
    c = {"s": np.array(0.05, F32), "z": np.array(128 if dt == np.uint8 else -3, dt),
         "w": rng.integers(-128, 128, (k, N)).astype(np.int8), "ws": rng.uniform(0.01, 0.03, N).astype(F32),
         "wz": np.zeros(N, np.int8)}
    nodes = [h.make_node("DequantizeLinear", ["x", "s", "z"], ["d"], name="dq"),
             h.make_node("DequantizeLinear", ["w", "ws", "wz"], ["dw"], name="dqw", axis=1),
             h.make_node("MatMul", ["d", "dw"], ["m"], name="mm")]
    if bias == "int32":
        c["bq"], c["bs"] = rng.integers(-99999, 99999, N).astype(np.int32), np.array(0.001, F32)
        nodes.append(h.make_node("DequantizeLinear", ["bq", "bs"], ["bd"], name="dqb"))
        nodes.append(h.make_node("Add", ["m", "bd"], ["y"], name="add"))
    else:
        c["b"] = _data(rng, (N,) if bias == "float" else (1, 1, N))
        nodes.append(h.make_node("Add", ["m", "b"], ["y"], name="add"))
    elem = TensorProto.UINT8 if dt == np.uint8 else TensorProto.INT8
    return _model(nodes, {"x": (elem, a_shape)}, c, opset=19), c


@pytest.mark.parametrize("a_shape", [(3, K), (2, 3, K)], ids=["2d", "3d"])
@pytest.mark.parametrize("bias", ["float", "int32", "float3d"])
def test_qdq_matmul_add_without_q(bias, a_shape):
    """What ORT makes of DQ(a), DQ(w) -> MatMul -> Add(bias) with no Q, and vkinfer the same, with its bits:
    a float bias: the fused float Gemm reading the DQs (2-D A; 3-D A: Reshape first); an int32 DQ bias: the same
    fused Gemm, which ORT's QDQ rules then make a QGemm with a float output where A is 2-D; a (1, 1, N) bias: no
    fusion."""
    rng = np.random.default_rng(5)
    blob, _ = _qdq_mm_add(np.uint8, a_shape, bias)
    feed = {"x": rng.integers(0, 256, a_shape).astype(np.uint8)}
    want, ort_ops = _ort(blob, feed)
    ops = _vk_ops(blob)
    fused = bias != "float3d"
    assert ("MatMul" not in ort_ops and "MatMulIntegerToFloat" not in ort_ops) == fused, ort_ops
    vk_gemm = {"Gemm", "com.microsoft:QGemm"} & set(ops)
    ort_gemm = {"Gemm", "QGemm"} & set(ort_ops)
    assert {o.split(":")[-1] for o in vk_gemm} == ort_gemm, (ops, ort_ops)
    per = sessions(blob, DEVICES)
    run_sessions(per, feed, want=want)
    node = "mm/MatMulAddFusion" if fused else "mm"  # the float Gemm, QGemm or MatMulIntegerToFloat
    for dev in ("cpu", "vulkan"):
        assert per[dev].placement[node] == "cpu", (dev, per[dev].placement)

