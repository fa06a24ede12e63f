"""Elementwise float32 ops in the native CPU graph (vkinfer/cpu/float_elementwise.py, cpu_fallback/src/ops/
float_binary.c and float_unary.c) against ONNX Runtime's CPU EP (one thread, nodes as written), asserting that the
node runs on the cpu device (a Vulkan session places it there too).

Each model carries an unrelated DequantizeLinear branch so vkinfer takes it (it runs 8-bit models only) while the op
reads float graph inputs, so edge values reach it: signed zeros, NaN, infinities, denormals, the largest floats.
Every table compares every device with ORT, the reference device too (its own kernels:
vkinfer/reference/float_minmax.py, float_activations.py). NaN payloads are not compared (tests/support/agree.py)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from support.agree import run_devices

import vkinfer

from ._build import NAME, check, model, node, ort_run

F32 = np.float32
EDGE = np.array([0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -1e-45, 1.2e-38, -3e-39,
                 3.4028235e38, -3.4028235e38, 2.5, -0.75], F32)
SCALE = F32(0.5)
BINARY = ["Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu"]
# Broadcast patterns: ORT's spans and their 16-byte alignment decide Max/Min's +0/-0 (float_binary.c).
SHAPES = [((7,), (7,)), ((1,), (9,)), ((9,), (1,)), ((1,), (1,)), ((2, 3, 5), (2, 3, 5)), ((3, 1), (3, 7)),
          ((3, 7), (3, 1)), ((1, 6), (5, 1)), ((5, 1), (1, 6)), ((4, 5), (5,)), ((5,), (4, 5)), ((2, 3, 4), (2, 1, 4)),
          ((2, 1, 4), (2, 3, 4)), ((2, 3, 1), (1, 3, 5)), ((1, 4, 6, 6), (1, 4, 1, 1)), ((1, 4, 1, 1), (1, 4, 6, 6)),
          ((2, 1, 3, 1, 5), (1, 4, 1, 2, 1)), ((1, 3, 5, 5), ()),
          # ORT's broadcaster starting on a size-1 dimension: spans of one element, input 0 the scalar (ort_spans)
          ((6, 1), (1,)), ((1,), (8, 1)), ((5, 1), ()), ((3, 1, 1), (1, 1)), ((2, 1), (1, 1))]


def _blob(nodes, inputs: dict, consts: dict | None = None, opset: int = 13) -> bytes:
    """`nodes` over float32 graph inputs (name -> shape), output y, plus the DequantizeLinear branch q -> qf."""
    ins = {k: (F32, s) for k, s in inputs.items()} | {"q": (np.uint8, (4,))}
    return model([*nodes, node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")], ins,
                 (consts or {}) | {"s": SCALE}, {"y": F32, "qf": F32}, opset=opset)


def _edge(rng, shape) -> np.ndarray:
    """Edge values and their ties: half the elements from EDGE, the rest +-0 or small integers (ties)."""
    n = int(np.prod(shape, dtype=np.int64))
    v = np.where(rng.random(n) < 0.5, rng.choice(EDGE, n), rng.choice(F32([0.0, -0.0, 1.0, -1.0, 2.0]), n))
    return v.astype(F32).reshape(shape)


def _feed(rng, shapes: dict, edge: bool) -> dict:
    f = {k: _edge(rng, s) if edge else rng.uniform(-3, 3, s).astype(F32) for k, s in shapes.items()}
    return f | {"q": np.arange(4, dtype=np.uint8)}


def _check_edge(blob: bytes, feed: dict) -> None:
    """Every device gives ORT's bits; the op on the cpu device in cpu and vulkan sessions."""
    sess = {d: vkinfer.InferenceSession(blob, device=d) for d in ("cpu", "vulkan")}
    want = ort_run(blob, feed)
    run_devices(blob, feed, want=want)
    for d, s in sess.items():
        assert s.placement[NAME] == "cpu", (d, s.placement)


# PRelu broadcasts the slope to x only: the shape pairs where b would widen x are not PRelu cases.
EDGE_CASES = [pytest.param(op, (sa, sb), id=f"{sa}x{sb}-{op}") for (sa, sb) in SHAPES for op in BINARY
              if op != "PRelu" or np.broadcast_shapes(sa, sb) == sa]


@pytest.mark.parametrize("op,shapes", EDGE_CASES)
def test_binary_edge_values(op, shapes):
    sa, sb = shapes
    rng = np.random.default_rng(zlib.crc32(repr((op, sa, sb)).encode()))  # per-process hash() varied the data
    blob = _blob([node(op, ["a", "b"], ["y"])], {"a": sa, "b": sb})
    for _ in range(2):
        _check_edge(blob, _feed(rng, {"a": sa, "b": sb}, edge=True))


@pytest.mark.parametrize("op", ["Max", "Min"])
@pytest.mark.parametrize("shapes", [((1,), (1,)), ((), (1,)), ((1, 1), (1, 1)), ((1,), ()), ((6, 1), (1,)),
                                    ((1,), (8, 1)), ((5, 1), ()), ((3, 1, 1), (1, 1))], ids=str)
def test_one_element_signed_zero_ties(op, shapes):
    """A 1-element output is ORT's input-0-scalar path: input1.max(input0), so a +0/-0 tie gives input 1's zero
    (vkinfer gave input 0's before: found by the edge tables under another hash seed). So is every span where ORT's
    broadcaster starts on a dimension of size 1 ((6, 1) by (1,): six spans of one; vkinfer gave input 0's zero on
    the packet-aligned elements before, found by the Pow helper reading ORT's broadcaster)."""
    sa, sb = shapes
    blob = _blob([node(op, ["a", "b"], ["y"])], {"a": sa, "b": sb})
    for av, bv in ((0.0, -0.0), (-0.0, 0.0)):
        feed = {"a": np.full(sa, av, F32), "b": np.full(sb, bv, F32), "q": np.arange(4, dtype=np.uint8)}
        want = ort_run(blob, feed)
        assert np.signbit(want[0]).tolist() == np.signbit(np.full(np.broadcast_shapes(sa, sb), bv)).tolist()
        run_devices(blob, feed, want=want)


@pytest.mark.parametrize("op", BINARY)
def test_binary_all_devices(op):
    """Finite values without ties: every device (the numpy reference too) gives ORT's bits; constant operand."""
    rng = np.random.default_rng(5)
    c = rng.uniform(0.5, 2, (1, 4, 1, 1)).astype(F32)
    blob = _blob([node(op, ["a", "c"], ["y"])], {"a": (1, 4, 5, 7)}, {"c": c})
    feed = _feed(rng, {"a": (1, 4, 5, 7)}, edge=False)
    check(blob, feed, ort_run(blob, feed), where="cpu", nodes=[NAME])


UNARY = [("Relu", {}, 13), ("LeakyRelu", {"alpha": 0.1}, 13), ("LeakyRelu", {"alpha": -0.5}, 13), ("Neg", {}, 13),
         ("Abs", {}, 13), ("Sqrt", {}, 13), ("Clip", {"min": -1.0, "max": 2.0}, 10), ("Clip", {"min": 0.0}, 10),
         ("Clip", {}, 10)]


@pytest.mark.parametrize("case", UNARY, ids=[f"{o}{a}" for o, a, _ in UNARY])
@pytest.mark.parametrize("shape", [(1,), (13,), (1, 3, 7, 5), (2, 64, 33)])
def test_unary_edge_values(case, shape):
    op, attrs, opset = case
    rng = np.random.default_rng(len(shape))
    blob = _blob([node(op, ["x"], ["y"], **attrs)], {"x": shape}, opset=opset)
    _check_edge(blob, _feed(rng, {"x": shape}, edge=True))


CLIP_BOUNDS = [(-1.0, 2.0), (0.0, 0.0), (-0.0, -0.0), (-0.0, 0.0), (0.0, -0.0), (None, 1.5), (-1.5, None),
               (None, None), (-np.inf, np.inf), (2.0, -1.0), (1e-45, 3e-39)]


@pytest.mark.parametrize("bounds", CLIP_BOUNDS, ids=str)
def test_clip_bounds(bounds):
    """Clip-13 with constant bounds (absent: ORT's lowest/highest float), ties of signed zeros, lo > hi."""
    consts, names = {}, ["x"]
    for k, v in zip(("lo", "hi"), bounds, strict=True):
        names.append("" if v is None else k)
        if v is not None:
            consts[k] = np.array(v, F32)
    blob = _blob([node("Clip", names, ["y"])], {"x": (3, 17)}, consts)
    _check_edge(blob, _feed(np.random.default_rng(3), {"x": (3, 17)}, edge=True))


def test_unary_all_devices():
    rng = np.random.default_rng(9)
    blob = _blob([node("LeakyRelu", ["x"], ["t"], name="lr", alpha=0.2), node("Abs", ["t"], ["u"], name="abs"),
                  node("Sqrt", ["u"], ["y"])], {"x": (1, 8, 9, 9)})
    feed = _feed(rng, {"x": (1, 8, 9, 9)}, edge=False)
    check(blob, feed, ort_run(blob, feed), where="cpu", nodes=[NAME, "lr", "abs"])


def test_float_chain_between_quantize_ops_is_one_native_call():
    """DequantizeLinear -> Max(const) -> Mul -> QuantizeLinear: one cpu segment, float tensors between C operators."""
    rng = np.random.default_rng(2)
    shape = (1, 3, 8, 8)
    blob = model([node("DequantizeLinear", ["x", "s", "z"], ["xf"], name="dq"),
                  node("Max", ["xf", "m"], ["t"], name="max"), node("Mul", ["t", "k"], ["u"]),
                  node("QuantizeLinear", ["u", "s2", "z"], ["y"], name="q")],
                 {"x": (np.uint8, shape)}, {"s": F32(0.05), "z": np.uint8(128), "m": F32(-0.5),
                                            "k": rng.uniform(0.5, 1.5, (1, 3, 1, 1)).astype(F32), "s2": F32(0.04)})
    feed = {"x": rng.integers(0, 256, shape).astype(np.uint8)}
    sessions = check(blob, feed, ort_run(blob, feed), where="cpu", on_vulkan="any")
    plan = sessions["cpu"].plan(feed)
    assert plan.native_calls == 1 and len(plan.segments) == 1
    assert {"float_binary"} <= set(plan.segments[0].runner.ops())


@pytest.mark.parametrize("why", ["three_inputs", "int_inputs"])
def test_refused_forms_stay_on_the_host(why):
    """What the native graph does not take runs on the host, with the same bits."""
    if why == "three_inputs":
        blob = _blob([node("Max", ["a", "b", "c"], ["y"])], {"a": (2, 5), "b": (2, 5), "c": (2, 5)})
        feed = _feed(np.random.default_rng(0), {"a": (2, 5), "b": (2, 5), "c": (2, 5)}, edge=False)
    else:
        blob = model([node("Add", ["a", "b"], ["y"]), node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                     {"a": (np.int32, (2, 5)), "b": (np.int32, (2, 5)), "q": (np.uint8, (4,))}, {"s": SCALE},
                     {"y": np.int32, "qf": F32})
        feed = {"a": np.arange(10, dtype=np.int32).reshape(2, 5), "b": np.ones((2, 5), np.int32),
                "q": np.arange(4, dtype=np.uint8)}
    check(blob, feed, ort_run(blob, feed), where={NAME: "host"}, nodes=[NAME])


RUNTIME_BOUNDS = [(-1.0, 2.0), (0.0, 0.0), (-0.0, -0.0), (-0.0, 0.0), (0.0, -0.0), (2.0, -1.0), (np.nan, 1.0),
                  (-1.0, np.nan), (np.nan, np.nan), (-np.inf, np.inf), (np.inf, -np.inf), (1e-45, 3e-39)]


@pytest.mark.parametrize("which", ["lo", "hi", "both", "lo_const_hi"])
@pytest.mark.parametrize("bounds", RUNTIME_BOUNDS, ids=str)
def test_clip_bounds_read_at_run_time(which, bounds):
    """Clip-13 whose bounds are graph inputs (one float_clip reading them when the graph runs): NaN bounds, signed
    zero ties, lo > hi, infinities; every device gives ORT's bits, the node on the cpu device."""
    lo, hi = (F32(v) for v in bounds)
    inputs, consts, names, feed_b = {"x": (3, 17)}, {}, ["x", "", ""], {}
    if which in ("lo", "both", "lo_const_hi"):
        inputs["lo"] = ()
        names[1] = "lo"
        feed_b["lo"] = np.array(lo, F32)
    if which in ("hi", "both"):
        inputs["hi"] = ()
        names[2] = "hi"
        feed_b["hi"] = np.array(hi, F32)
    if which == "lo_const_hi":
        consts["hc"] = np.array(hi, F32)
        names[2] = "hc"
    blob = _blob([node("Clip", names, ["y"])], inputs, consts)
    feed = _feed(np.random.default_rng(11), {"x": (3, 17)}, edge=True) | feed_b
    _check_edge(blob, feed)


def test_log_mel_clip_to_peak_minus_80_is_one_native_call():
    """oww_melspec's tail: y = Clip(x, ReduceMax(x) - 80) over a [1, 1, 8, 32] log-mel, between a DequantizeLinear
    and a QuantizeLinear: every device gives ORT's bits and the cpu device runs it all in one native call."""
    shape = (1, 1, 8, 32)
    blob = model([node("DequantizeLinear", ["q", "s", "z"], ["x"], name="dq"),
                  node("ReduceMax", ["x"], ["m"], name="peak", keepdims=0),
                  node("Sub", ["m", "k"], ["lo"], name="sub"), node("Clip", ["x", "lo"], ["c"]),
                  node("QuantizeLinear", ["c", "s2", "z"], ["y"], name="qy")],
                 {"q": (np.uint8, shape)}, {"s": F32(0.9), "z": np.uint8(128), "k": F32(80.0), "s2": F32(0.5)})
    rng = np.random.default_rng(4)
    for _ in range(3):
        feed = {"q": rng.integers(0, 256, shape).astype(np.uint8)}
        sessions = check(blob, feed, ort_run(blob, feed), where="cpu", on_vulkan="any")
    plan = sessions["cpu"].plan(feed)
    assert plan.native_calls == 1 and len(plan.segments) == 1
    assert {"float_reduce", "float_clip"} <= set(plan.segments[0].runner.ops())


def test_clip_with_a_non_scalar_bound_is_refused_naming_it():
    """ORT refuses a bound of two elements; so does every device, naming the node and the bound."""
    blob = _blob([node("Clip", ["x", "lo"], ["y"])], {"x": (2, 5), "lo": (2,)})
    feed = _feed(np.random.default_rng(0), {"x": (2, 5), "lo": (2,)}, edge=False)
    with pytest.raises(Exception, match="scalar"):
        ort_run(blob, feed)
    for d in ("reference", "cpu", "vulkan"):
        with pytest.raises(ValueError, match=rf"{NAME} \(Clip\): Clip: min must be a scalar"):
            vkinfer.InferenceSession(blob, device=d).run(None, feed)
