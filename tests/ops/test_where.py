"""Where with a bool condition and uint8 / int8 / float32 branches in the native CPU graph (vkinfer/cpu/where.py,
cpu_fallback/src/ops/where.c): every device the same bits (the reference device runs vkinfer/reference/where.py),
equal to ONNX Runtime's CPU EP, the node placed on the cpu in cpu and vulkan sessions.

Cases: numpy broadcasting of all three inputs (4-D 8-bit operands in the NHWC storage form), float32 payloads whose
bits a selection must keep (NaN payloads, -0, infinities, subnormals), the lowest and highest bytes, a constant
condition and scalar branches; the QDQ form DQ, DQ -> Where -> Q (ORT: QLinearWhere at ORT_ENABLE_ALL), whose DQs,
float Where and Q all run on the cpu; and the C operator under ASan/UBSan."""

from __future__ import annotations

import itertools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper as oh
from support.cpu_build import run_both_builds

import vkinfer
from vkinfer.reference.where import where

from ._build import NAME, QTYPES, check, model, node, ort_run, qrand

F32 = np.float32
# float32 bit patterns a copy must keep: quiet NaNs with payloads, -0, infinities, subnormals, the extremes
BITS = np.array([0x7FC00001, 0xFFC12345, 0x80000000, 0x00000000, 0x7F800000, 0xFF800000, 0x00000001, 0x807FFFFF,
                 0x7F7FFFFF, 0x3F800000], np.uint32).view(F32)


def _ort_takes(dt) -> bool:
    """Whether ORT's CPU EP has a Where kernel for `dt` (its registrations: no int8 one)."""
    blob = model([node("Where", ["c", "a", "b"])], {"c": (np.bool_, (2,)), "a": (dt, (2,)), "b": (dt, (2,))},
                 None, {"y": dt})
    try:
        ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001  (ORT's NOT_IMPLEMENTED: no kernel)
        return False
    return True


def _blob(dt, cs, xs, ys, const_cond=None) -> bytes:
    """Where(c, a, b) -> y, the condition a constant or Greater(float32 input cm, 0) (vkinfer takes no bool graph
    input); a float32 one with an unrelated DequantizeLinear branch (vkinfer runs 8-bit models)."""
    ins, consts = {"a": (dt, xs), "b": (dt, ys)}, {}
    nodes, outs = [node("Where", ["c", "a", "b"])], {"y": dt}
    if const_cond is None:
        ins = {"cm": (F32, cs), **ins}
        consts["zero"] = F32(0)
        nodes.insert(0, node("Greater", ["cm", "zero"], ["c"], name="cond"))
    else:
        consts["c"] = const_cond
    if np.dtype(dt) == F32:
        nodes.append(node("DequantizeLinear", ["q", "s"], ["qf"], name="dq"))
        ins["q"], outs["qf"], consts["s"] = (np.uint8, (4,)), F32, F32(0.5)
    return model(nodes, ins, consts, outs)


def _values(rng, shape, dt) -> np.ndarray:
    if np.dtype(dt) == F32:
        return rng.choice(BITS, shape).astype(F32)
    return qrand(rng, shape, dt)


def _check(dt, cs, xs, ys, rng, const_cond=None):
    blob = _blob(dt, cs, xs, ys, const_cond)
    feeds = []
    for _ in range(2):
        f = {"a": _values(rng, xs, dt), "b": _values(rng, ys, dt)}
        if const_cond is None:
            f["cm"] = rng.choice(F32([0, 1, -1, 2]), cs)
        if np.dtype(dt) == F32:
            f["q"] = np.arange(4, dtype=np.uint8)
        feeds.append(f)
    if _ort_takes(dt):
        want = [ort_run(blob, f) for f in feeds]
    else:  # ORT has no int8 Where: numpy's where on the bytes is the oracle
        want = [[np.where(f["cm"] > 0 if const_cond is None else const_cond, f["a"], f["b"])] for f in feeds]
    sess = check(blob, feeds, want, where="cpu", nodes=[NAME])
    assert sess["cpu"].placement[NAME] == "cpu"


SHAPES = [((5,), (5,), (5,)), ((2, 5), (5,), (2, 1)), ((1,), (3, 4), (3, 4)), ((3, 1), (1, 4), ()),
          ((1, 3, 1, 1), (2, 3, 4, 5), (2, 3, 4, 5)), ((2, 1, 4, 5), (2, 3, 4, 5), (1, 3, 1, 1)),
          ((4, 5), (2, 3, 4, 5), (3, 1, 1)), ((2, 3, 4, 5), (1,), (2, 3, 4, 5)), ((1, 2, 1, 3, 2), (2, 1, 4, 1, 2), ()),
          ((2, 1, 2, 1, 2, 1), (1, 2, 1, 2, 1, 2), (2, 2, 2, 2, 2, 2)), ((1, 1), (1, 1), (1, 1))]


@pytest.mark.parametrize("dt", [np.uint8, np.int8, F32], ids=["u8", "s8", "f32"])
@pytest.mark.parametrize("shapes", SHAPES, ids=[str(s) for s in SHAPES])
def test_broadcast_table(shapes, dt):
    """Every broadcast pattern of the three inputs, full-range bytes and float32 bit patterns."""
    _check(dt, *shapes, np.random.default_rng(len(shapes[1]) * 13 + sum(map(len, shapes))))


@pytest.mark.parametrize("dt", [np.uint8, np.int8, F32], ids=["u8", "s8", "f32"])
def test_constant_condition(dt):
    rng = np.random.default_rng(2)
    _check(dt, None, (2, 3, 4, 5), (2, 3, 4, 5), rng, const_cond=rng.random((3, 1, 5)) < 0.5)
    _check(dt, None, (3, 7), (1,), rng, const_cond=np.array(True))


@pytest.mark.parametrize("dt", QTYPES, ids=["u8", "s8"])
def test_qdq_where_is_native(dt):
    """DQ(a), DQ(b) -> Where -> Q of other parameters (ORT: QLinearWhere's per-input tables): ORT's bytes on every
    device, all four nodes on the cpu (one native call)."""
    z = np.array(128 if dt == np.uint8 else -3, dt)
    c = {"s": np.array(0.05, F32), "z": z, "s2": np.array(0.11, F32), "so": np.array(0.06, F32), "zo": z}
    blob = model([oh.make_node("DequantizeLinear", ["a", "s", "z"], ["da"], name="dqa"),
                  oh.make_node("DequantizeLinear", ["b", "s2", "z"], ["db"], name="dqb"),
                  node("Where", ["c", "da", "db"], ["w"]),
                  oh.make_node("QuantizeLinear", ["w", "so", "zo"], ["y"], name="q")],
                 {"a": (dt, (2, 3, 4, 5)), "b": (dt, (1, 5))},
                 {**c, "c": np.random.default_rng(1).random((3, 1, 5)) < 0.5}, {"y": dt})
    rng = np.random.default_rng(11)
    feeds = [{"a": qrand(rng, (2, 3, 4, 5), dt), "b": qrand(rng, (1, 5), dt)} for _ in range(2)]
    config = {"session.qdqisint8allowed": "1"}
    sess = check(blob, feeds, [ort_run(blob, f, optimize=True, config=config) for f in feeds], where="cpu")
    for s in sess.values():
        assert set(s.placement) == {"dqa", "dqb", NAME, "q"}, s.placement


def test_quantize_static_model(tmp_path):
    """A float model quantized by onnxruntime.quantization (QDQ, uint8): Conv -> DQ read by ReduceMax, ArgMax, Greater
    and a Where whose branches are the DQ and a Sub -> Q -> Conv. ORT's bits on every device; ArgMax and Where run on
    the cpu (float32: the quantizer leaves them between DQ and Q)."""
    import onnx
    from onnx import numpy_helper as nh
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(0)
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             oh.make_node("ReduceMax", ["c", "ax"], ["rmax"], keepdims=1, name="rmax"),
             oh.make_node("Sub", ["c", "rmax"], ["d"], name="sub"),
             oh.make_node("ArgMax", ["c"], ["am"], axis=1, keepdims=0, name="argmax"),
             oh.make_node("Greater", ["c", "zero"], ["g"], name="gt"),
             oh.make_node("Where", ["g", "c", "d"], ["wh"], name="where"),
             oh.make_node("Conv", ["wh", "w2"], ["out"], name="conv2")]
    inits = {"w": rng.standard_normal((8, 3, 3, 3)).astype(F32) * 0.3, "ax": np.array([2, 3], np.int64),
             "zero": F32(0.1), "w2": (rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(F32)}
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", 1, [1, 3, 8, 8])],
                      [oh.make_tensor_value_info("out", 1, None), oh.make_tensor_value_info("am", 7, None)],
                      initializer=[nh.from_array(v, k) for k, v in inits.items()])
    m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])
    m.ir_version = 9
    onnx.save(m, tmp_path / "f.onnx")

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter([{"x": rng.standard_normal((1, 3, 8, 8)).astype(F32)} for _ in range(8)])

        def get_next(self):
            return next(self.feeds, None)
    quantize_static(tmp_path / "f.onnx", tmp_path / "q.onnx", Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    blob = (tmp_path / "q.onnx").read_bytes()
    feeds = [{"x": rng.standard_normal((1, 3, 8, 8)).astype(F32)} for _ in range(2)]
    check(blob, feeds, [ort_run(blob, f, optimize=True) for f in feeds], where="any")
    for dev in ("cpu", "vulkan"):
        placed = vkinfer.InferenceSession(blob, device=dev).placement
        assert placed["argmax"] == "cpu" and placed["where"] == "cpu", (dev, placed)


def test_reference_zero_rule_is_orts():
    """The definition's -0 rule (ORT's merge of c ? x : 0 and c ? 0 : y, reference/where.py zero_side) against ORT's
    float32 Where on every broadcast pattern of condition, x and y of ranks 0-3 (NaN payloads and -0 everywhere)."""
    dims = [(), (1,), (3,), (2, 1), (1, 3), (2, 3), (2, 1, 3), (1, 2, 1), (2, 2, 3)]
    rng = np.random.default_rng(4)
    bits = np.array([0x7FC00001, 0x80000000, 0x00000000, 0x80000000, 0x3F800000, 0x807FFFFF], np.uint32).view(F32)
    n = 0
    for cs, xs, ys in itertools.product(dims, repeat=3):
        try:
            np.broadcast_shapes(cs, xs, ys)
        except ValueError:
            continue
        blob = model([node("Where", ["c", "a", "b"])], {"c": (np.bool_, cs), "a": (F32, xs), "b": (F32, ys)}, None,
                     {"y": F32})
        s = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
        for _ in range(3):
            f = {"c": np.asarray(rng.random(cs) < 0.5), "a": np.asarray(rng.choice(bits, xs), F32),
                 "b": np.asarray(rng.choice(bits, ys), F32)}
            want = s.run(None, f)[0]
            got = where(f["c"], f["a"], f["b"])
            assert got.shape == want.shape and got.tobytes() == want.tobytes(), (cs, xs, ys, f, got, want)
        n += 1
    assert n > 400, n


def test_reference_checks():
    with pytest.raises(TypeError, match="bool"):
        where(np.ones(2, np.uint8), np.ones(2, F32), np.ones(2, F32))
    with pytest.raises(TypeError, match="one type"):
        where(np.ones(2, bool), np.ones(2, F32), np.ones(2, np.uint8))
    with pytest.raises(ValueError, match="broadcast"):
        where(np.ones(2, bool), np.ones(3, F32), np.ones(3, F32))


DRIVER = r'''
import sys
import numpy as np
from onnx import TensorProto, helper as oh
import vkinfer
from vkinfer.cpu import graph as G

T = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
     np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.bool_): TensorProto.BOOL}
rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
k = 0
for cs, xs, ys in [((5,), (5,), (5,)), ((2, 5), (5,), (2, 1)), ((1, 3, 1, 1), (2, 3, 4, 5), (2, 3, 4, 5)),
                   ((4, 5), (2, 3, 4, 5), (3, 1, 1)), ((1, 2, 1, 3, 2), (2, 1, 4, 1, 2), ()),
                   ((2, 1, 2, 1, 2, 1), (1, 2, 1, 2, 1, 2), (2, 2, 2, 2, 2, 2)), ((1, 1, 9000), (3, 1, 9000), (1,))]:
    for dt in (np.uint8, np.int8, np.float32):
        vi = lambda n, t, s: oh.make_tensor_value_info(n, T[np.dtype(t)], list(s))
        nodes = [oh.make_node("Greater", ["cm", "zero"], ["c"]),
                 oh.make_node("Where", ["c", "a", "b"], ["y"], name="w"),
                 oh.make_node("DequantizeLinear", ["q", "s"], ["qf"])]
        ins = [vi("cm", np.float32, cs), vi("a", dt, xs), vi("b", dt, ys), vi("q", np.uint8, (4,))]
        g = oh.make_graph(nodes, "g", ins,
                          [oh.make_tensor_value_info("y", T[np.dtype(dt)], None),
                           oh.make_tensor_value_info("qf", TensorProto.FLOAT, None)],
                          initializer=[oh.make_tensor("s", TensorProto.FLOAT, [], [0.5]),
                                       oh.make_tensor("zero", TensorProto.FLOAT, [], [0.0])])
        m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])
        m.ir_version = 8
        feed = {"cm": rng.integers(-1, 2, cs).astype(np.float32),
                "a": rng.integers(0, 256, xs).astype(np.uint8).astype(dt),
                "b": rng.integers(0, 256, ys).astype(np.uint8).astype(dt), "q": np.arange(4, dtype=np.uint8)}
        s = vkinfer.InferenceSession(m.SerializeToString(), device="cpu")
        assert s.placement["w"] == "cpu", s.placement
        outs[f"out{k}"] = s.run(None, feed)[0]
        outs[f"ref{k}"] = vkinfer.InferenceSession(m.SerializeToString(), device="reference").run(None, feed)[0]
        k += 1
np.savez(sys.argv[1], **outs)
print("where asan: ok", "library:", G.lib()._name)
'''


def test_where_under_asan_and_ubsan(tmp_path):
    """The C operator on every broadcast pattern and a long last axis (several work items), under AddressSanitizer
    + UBSan and the normal build: the same bits, equal to the reference's."""
    sanitized, normal = run_both_builds(DRIVER, tmp_path, "where asan: ok", ("9",))
    assert sorted(sanitized) == sorted(normal) and len(normal) == 2 * 7 * 3
    for k, v in normal.items():
        assert v.dtype == sanitized[k].dtype and v.tobytes() == sanitized[k].tobytes(), k
        if k.startswith("out"):
            assert v.tobytes() == normal["ref" + k[3:]].tobytes(), k
