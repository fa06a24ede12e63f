"""Comparisons and logic ops in the native CPU graph (vkinfer/cpu/float_compare.py, cpu_fallback/src/ops/
float_compare.c): Equal, Greater, GreaterOrEqual, Less, LessOrEqual of float32 / int32 / int64 / uint8 / int8
operands, And, Or, Xor, Not of bools. Every device gives the same bytes (the reference device runs
vkinfer/model/host_elementwise.py's numpy kernels: C == numpy), equal to ONNX Runtime's CPU EP (numpy's where ORT
has no kernel for the type), the nodes placed on the cpu in cpu and vulkan sessions.

Cases: every broadcast pattern of two operands up to rank 6 with float32 edge values (NaN both signs, +-0, +-inf,
subnormals, the largest floats, ties), random shapes, 8-bit operands in their NHWC storage form, the QDQ chain
DQ -> Greater -> Where -> Q as one native call (and a quantize_static model carrying it), and the C operator under
ASan/UBSan. Graph outputs are bool; vkinfer takes no bool graph input, so bool operands of the logic ops come from
comparisons, and the bool results reach the float32 outputs through Where(c, 1, 0) (no bool graph outputs either),
which reads them in the native graph."""

from __future__ import annotations

import zlib

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper as oh
from support.agree import run_devices
from support.cpu_build import run_both_builds

import vkinfer

from ._build import NAME, check, model, node, ort_run, qrand

F32 = np.float32
COMPARE = ["Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual"]
LOGIC = ["And", "Or", "Xor"]
EDGE = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -1e-45, 1.2e-38, -3e-39,
                 3.4028235e38, -3.4028235e38, 2.5, -0.75], F32)
SHAPES = [((7,), (7,)), ((1,), (9,)), ((9,), (1,)), ((), ()), ((), (3, 4)), ((2, 3, 5), (2, 3, 5)), ((3, 1), (3, 7)),
          ((1, 6), (5, 1)), ((4, 5), (5,)), ((2, 1, 4), (2, 3, 4)), ((1, 4, 6, 6), (1, 4, 1, 1)),
          ((2, 1, 3, 1, 5), (1, 4, 1, 2, 1)), ((2, 1, 2, 1, 2, 1), (1, 2, 1, 2, 1, 2)), ((1, 1), (1, 1)),
          ((3, 9000), (1, 9000))]  # the last: several work items of the long axis
ONE = {"q": (np.uint8, (4,))}


def _dq_branch():
    """An unrelated DequantizeLinear (vkinfer runs 8-bit models only)."""
    return node("DequantizeLinear", ["q", "qs"], ["qf"], name="dq")


def _blob(nodes, inputs: dict, dt=F32, consts=None, opset: int = 13) -> bytes:
    """`nodes` writing the bool tensor "c", which Where(c, 1, 0) makes the float32 output y (vkinfer has no bool
    graph outputs; the native Where reads the native graph's bool tensor)."""
    ins = {k: (dt, s) for k, s in inputs.items()} | ONE
    sel = node("Where", ["c", "one", "zero0"], ["y"], name="sel")
    return model([*nodes, sel, _dq_branch()], ins, (consts or {}) | {"qs": F32(0.5), "one": F32(1), "zero0": F32(0)},
                 {"y": F32, "qf": F32}, opset=opset)


def _edge(rng, shape) -> np.ndarray:
    """Half edge values, half small integers and signed zeros (ties between the operands)."""
    n = int(np.prod(shape, dtype=np.int64))
    v = np.where(rng.random(n) < 0.5, rng.choice(EDGE, n), rng.choice(F32([0.0, -0.0, 1.0, -1.0, 2.0]), n))
    return v.astype(F32).reshape(shape)


def _feed(**arrays) -> dict:
    return {**arrays, "q": np.arange(4, dtype=np.uint8)}


def _placed_cpu(blob: bytes, names=(NAME,)) -> None:
    for dev in ("cpu", "vulkan"):
        placed = vkinfer.InferenceSession(blob, device=dev).placement
        for n in names:
            assert placed[n] == "cpu", (dev, n, placed)


def _ort_takes(op: str, dt) -> bool:
    """Whether ORT's CPU EP has a kernel for `op` on `dt`."""
    blob = model([node(op, ["a", "b"])], {"a": (dt, (2,)), "b": (dt, (2,))}, None, {"y": np.bool_})
    try:
        ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001  (ORT's NOT_IMPLEMENTED: no kernel)
        return False
    return True


_NUMPY = {"Equal": np.equal, "Greater": np.greater, "GreaterOrEqual": np.greater_equal, "Less": np.less,
          "LessOrEqual": np.less_equal}


@pytest.mark.parametrize("op", COMPARE)
@pytest.mark.parametrize("shapes", SHAPES, ids=[f"{a}x{b}" for a, b in SHAPES])
def test_float_edge_table(op, shapes):
    """float32 edge values in every broadcast pattern: ORT's bools (NaN compares false, Equal(NaN, NaN) too; +0 ==
    -0), on every device."""
    sa, sb = shapes
    rng = np.random.default_rng(zlib.crc32(repr((op, sa, sb)).encode()))
    blob = _blob([node(op, ["a", "b"], ["c"])], {"a": sa, "b": sb})
    feeds = [_feed(a=_edge(rng, sa), b=_edge(rng, sb)) for _ in range(2)]
    check(blob, feeds, [ort_run(blob, f) for f in feeds], where="cpu", nodes=[NAME])


def test_nan_semantics_are_orts():
    """Every pair of edge values, every comparison: ORT's answer is IEEE's (numpy's), which the C operator gives."""
    a, b = np.meshgrid(EDGE, EDGE)
    a, b = a.reshape(-1), b.reshape(-1)
    for op in COMPARE:
        blob = _blob([node(op, ["a", "b"], ["c"])], {"a": a.shape, "b": b.shape})
        want = ort_run(blob, _feed(a=a, b=b))
        assert np.array_equal(want[0], _NUMPY[op](a, b).astype(F32)), op
        run_devices(blob, _feed(a=a, b=b), want=want)
    assert not ort_run(_blob([node("Equal", ["a", "b"], ["c"])], {"a": (1,), "b": (1,)}),
                       _feed(a=F32([np.nan]), b=F32([np.nan])))[0][0]


@pytest.mark.parametrize("dt", [np.int32, np.int64, np.uint8, np.int8], ids=["i32", "i64", "u8", "s8"])
@pytest.mark.parametrize("op", COMPARE)
def test_integer_operands(op, dt):
    """int32 / int64 over their whole range (extremes and ties), uint8 / int8 in the 8-bit storage form (4-D NHWC,
    int8 canonical): ORT's bools, numpy's where ORT has no kernel for the type."""
    rng = np.random.default_rng(zlib.crc32(repr((op, np.dtype(dt).name)).encode()))
    info = np.iinfo(dt)
    for sa, sb in (((2, 3, 4, 5), (2, 3, 4, 5)), ((2, 3, 4, 5), (1, 3, 1, 1)), ((1, 3, 1, 5), (2, 1, 4, 1)),
                   ((6, 7), (7,)), ((), (3, 2))):
        def vals(shape):
            v = qrand(rng, shape, dt) if np.dtype(dt).itemsize == 1 else rng.integers(-5, 5, shape).astype(dt)
            ends = np.array([info.min, info.max, 0, -1 if info.min else 1], dt)
            return np.where(rng.random(shape) < 0.3, rng.choice(ends, shape), v).astype(dt)
        blob = _blob([node(op, ["a", "b"], ["c"])], {"a": sa, "b": sb}, dt)
        feeds = [_feed(a=vals(sa), b=vals(sb)) for _ in range(2)]
        if _ort_takes(op, dt):
            want = [ort_run(blob, f) for f in feeds]
        else:
            want = [[_NUMPY[op](f["a"], f["b"]).astype(F32), (np.arange(4) * F32(0.5)).astype(F32)] for f in feeds]
        check(blob, feeds, want, where="cpu", nodes=[NAME])


@pytest.mark.parametrize("op", [*LOGIC, "Not", "EqualBool"])
def test_logic_ops(op):
    """And / Or / Xor / Not of bools made by comparisons (vkinfer takes no bool graph input), Equal of two bools;
    broadcasting; the whole chain on the cpu."""
    rng = np.random.default_rng(zlib.crc32(op.encode()))
    for sa, sb in (((2, 3, 5), (2, 3, 5)), ((3, 1), (1, 4)), ((), (2, 2)), ((2, 1, 3, 1, 2, 1), (1, 2, 1, 2, 1, 2))):
        nodes = [node("Greater", ["a", "zero"], ["ga"], name="ga"), node("Less", ["b", "zero"], ["lb"], name="lb")]
        if op == "Not":
            nodes.append(node("Not", ["ga"], ["c"]))
        else:
            nodes.append(node("Equal" if op == "EqualBool" else op, ["ga", "lb"], ["c"]))
        blob = _blob(nodes, {"a": sa, "b": sb}, consts={"zero": F32(0)})
        feeds = [_feed(a=_edge(rng, sa), b=_edge(rng, sb)) for _ in range(2)]
        check(blob, feeds, [ort_run(blob, f) for f in feeds], where="cpu", nodes=[NAME, "ga", "lb"])


def test_random_shapes():
    """Random broadcast pairs of rank 0-6 (size-1 axes anywhere, one operand shorter), every op, against ORT."""
    rng = np.random.default_rng(7)
    for case in range(24):
        r = int(rng.integers(0, 7))
        out = [int(v) for v in rng.integers(1, 5, r)]
        sa = tuple(d if rng.random() < 0.6 else 1 for d in out)
        sb = tuple(d if rng.random() < 0.6 else 1 for d in out)[int(rng.integers(0, r + 1)):]
        if rng.random() < 0.5:
            sa, sb = sb, sa
        op = COMPARE[case % len(COMPARE)]
        blob = _blob([node(op, ["a", "b"], ["c"])], {"a": sa, "b": sb})
        f = _feed(a=_edge(rng, sa), b=_edge(rng, sb))
        check(blob, f, ort_run(blob, f), where="cpu", nodes=[NAME], what=f"{op} {sa} {sb}")


@pytest.mark.parametrize("dt", [np.uint8, np.int8], ids=["u8", "s8"])
def test_qdq_greater_where_is_one_native_call(dt):
    """DQ(a), DQ(b) -> Greater -> Where(DQ(a), DQ(b)) -> Q (ORT at ORT_ENABLE_ALL: Greater float between the DQs,
    Where a QLinearWhere): ORT's bytes on every device, every node on the cpu: the bool tensor Where reads is the
    native graph's own."""
    z = np.array(128 if dt == np.uint8 else -3, dt)
    c = {"s": F32(0.05), "z": z, "s2": F32(0.11), "so": F32(0.06), "zo": z}
    blob = model([oh.make_node("DequantizeLinear", ["a", "s", "z"], ["da"], name="dqa"),
                  oh.make_node("DequantizeLinear", ["b", "s2", "z"], ["db"], name="dqb"),
                  node("Greater", ["da", "db"], ["c"], name="gt"),
                  node("Where", ["c", "da", "db"], ["w"]),
                  oh.make_node("QuantizeLinear", ["w", "so", "zo"], ["y"], name="q")],
                 {"a": (dt, (2, 3, 4, 5)), "b": (dt, (1, 5))}, c, {"y": dt})
    rng = np.random.default_rng(3)
    feeds = [{"a": qrand(rng, (2, 3, 4, 5), dt), "b": qrand(rng, (1, 5), dt)} for _ in range(2)]
    config = {"session.qdqisint8allowed": "1"}
    sess = check(blob, feeds, [ort_run(blob, f, optimize=True, config=config) for f in feeds], where="cpu")
    for s in sess.values():  # check() asserted each on the cpu in cpu and vulkan sessions
        assert set(s.placement) == {"dqa", "dqb", "gt", NAME, "q"}, s.placement
    segments = [(sg.device, len(sg.nodes)) for sg in sess["cpu"].plan(feeds[0]).segments]
    assert segments == [("cpu", 5)], segments  # one native segment: the bool tensor never leaves the graph


def test_quantize_static_model(tmp_path):
    """A float model quantized by onnxruntime.quantization.quantize_static (QDQ, uint8): Conv -> DQ -> Greater,
    LessOrEqual, And, Not -> Where -> Q -> Conv. ORT's bits on every device; the comparisons, the logic ops and
    Where on the cpu."""
    import onnx
    from onnx import numpy_helper as nh
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    rng = np.random.default_rng(0)
    nodes = [oh.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             oh.make_node("Greater", ["c", "lo"], ["g"], name="gt"),
             oh.make_node("LessOrEqual", ["c", "hi"], ["le"], name="le"),
             oh.make_node("And", ["g", "le"], ["band"], name="and"),
             oh.make_node("Not", ["band"], ["nb"], name="not"),
             oh.make_node("Where", ["nb", "c", "zero"], ["wh"], name="where"),
             oh.make_node("Conv", ["wh", "w2"], ["out"], name="conv2")]
    inits = {"w": rng.standard_normal((8, 3, 3, 3)).astype(F32) * 0.3, "lo": F32(-0.2), "hi": F32(0.4),
             "zero": F32(0.0), "w2": (rng.standard_normal((4, 8, 1, 1)) * 0.3).astype(F32)}
    g = oh.make_graph(nodes, "g", [oh.make_tensor_value_info("x", 1, [1, 3, 8, 8])],
                      [oh.make_tensor_value_info("out", 1, None)],
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
    _placed_cpu(blob, ("gt", "le", "and", "not", "where"))


def test_refusals_stay_on_the_host():
    """What the operator does not take runs on the host, with the same bits, the reason given: 7 axes after
    merging."""
    sa, sb = (2, 1, 2, 1, 2, 1, 2), (1, 2, 1, 2, 1, 2, 1)
    blob = _blob([node("Greater", ["a", "b"], ["c"])], {"a": sa, "b": sb})
    f = _feed(a=_edge(np.random.default_rng(1), sa), b=_edge(np.random.default_rng(2), sb))
    check(blob, f, ort_run(blob, f), where="host", nodes=[NAME])


DRIVER = r'''
import sys
import numpy as np
from onnx import TensorProto, helper as oh
import vkinfer
from vkinfer.cpu import graph as G

T = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int32): TensorProto.INT32,
     np.dtype(np.int64): TensorProto.INT64, np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}
rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
k = 0
for sa, sb in [((5,), (5,)), ((2, 5), (5,)), ((1, 3, 1, 1), (2, 3, 4, 5)), ((2, 1, 2, 1, 2, 1), (1, 2, 1, 2, 1, 2)),
               ((), (3,)), ((1, 9000), (3, 1))]:
    for dt in (np.float32, np.int32, np.int64, np.uint8, np.int8):
        for op in ("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "AndNot"):
            vi = lambda n, t, s: oh.make_tensor_value_info(n, T[np.dtype(t)], list(s))
            if op == "AndNot":
                if dt != np.float32:
                    continue
                nodes = [oh.make_node("Greater", ["a", "b"], ["g"]), oh.make_node("Less", ["a", "b"], ["l"]),
                         oh.make_node("Not", ["l"], ["nl"]), oh.make_node("Xor", ["g", "nl"], ["x"]),
                         oh.make_node("Or", ["x", "g"], ["o"]), oh.make_node("And", ["o", "nl"], ["y0"], name="c")]
            else:
                nodes = [oh.make_node(op, ["a", "b"], ["y0"], name="c")]
            nodes.append(oh.make_node("Where", ["y0", "one", "zero"], ["y"], name="w"))
            nodes.append(oh.make_node("DequantizeLinear", ["q", "s"], ["qf"]))
            g = oh.make_graph(nodes, "g", [vi("a", dt, sa), vi("b", dt, sb), vi("q", np.uint8, (4,))],
                              [oh.make_tensor_value_info("y", TensorProto.FLOAT, None),
                               oh.make_tensor_value_info("qf", TensorProto.FLOAT, None)],
                              initializer=[oh.make_tensor(k, TensorProto.FLOAT, [], [v])
                                           for k, v in (("s", 0.5), ("one", 1.0), ("zero", 0.0))])
            m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])
            m.ir_version = 8
            feed = {"a": rng.integers(-2, 3, sa).astype(dt), "b": rng.integers(-2, 3, sb).astype(dt),
                    "q": np.arange(4, dtype=np.uint8)}
            if dt == np.float32:
                feed["a"] = np.where(rng.random(sa) < 0.2, np.nan, feed["a"]).astype(dt)
            s = vkinfer.InferenceSession(m.SerializeToString(), device="cpu")
            assert s.placement["c"] == "cpu" and s.placement["w"] == "cpu", s.placement
            outs[f"out{k}"] = s.run(None, feed)[0]
            outs[f"ref{k}"] = vkinfer.InferenceSession(m.SerializeToString(), device="reference").run(None, feed)[0]
            k += 1
np.savez(sys.argv[1], **outs)
print("compare asan: ok", "library:", G.lib()._name)
'''


def test_under_asan_and_ubsan(tmp_path):
    """The C operator on every kind, op and broadcast pattern and a long last axis (several work items), under
    AddressSanitizer + UBSan and the normal build: the same bytes, equal to the reference's."""
    sanitized, normal = run_both_builds(DRIVER, tmp_path, "compare asan: ok", ("3",))
    assert sorted(sanitized) == sorted(normal) and len(normal) == 2 * 6 * (5 * 5 + 1)
    for k, v in normal.items():
        assert v.dtype == sanitized[k].dtype and v.tobytes() == sanitized[k].tobytes(), k
        if k.startswith("out"):
            assert v.dtype == F32 and v.tobytes() == normal["ref" + k[3:]].tobytes(), k
