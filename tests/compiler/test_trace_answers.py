"""The trace's shape rules answer once for nodes alike (vkinfer/model/interpreter.py `_Answers`; issue 26 item 3):
a 20k-node QLinearAdd chain traced in 2.9 s, ~100 us a node of numpy calls in its reference kernel; now its rule
checks the first node and the others reuse that answer (0.17 s). Each test holds the trace to its oracle: the same
graph traced on real values by every node's kernel (the trace's second pass, `_trace(g, feed, {}, limits)`), which
gives the same shapes and dtypes, and the kernel's own error for a bad node wherever it sits in a chain."""

from __future__ import annotations

import numpy as np
import pytest

from vkinfer.model import interpreter, op_table
from vkinfer.model.graph import Graph, Node, TensorInfo
from vkinfer.model.interpreter import _trace, trace
from vkinfer.model.sizes import DEFAULT

ADD, TFL, CONV = "com.microsoft:QLinearAdd", "vkinfer:TFLiteAdd", "QLinearConv"
SHAPE = (1, 4, 3, 5)


def _chain(op: str, n: int, dtype=np.uint8, odd: dict | None = None) -> tuple[Graph, dict]:
    """`n` nodes of `op` in a chain, each with its own constant second input (an 8-bit tensor, or 1x1 weights);
    `odd` {node index: {input position: value}} gives one node its own constant there (a bad node)."""
    rng = np.random.default_rng(0)
    consts = {"s": np.array(0.05, np.float32), "z": np.array(0, dtype), "s_out": np.array(0.1, np.float32)}
    nodes, x = [], "x0"
    for i in range(n):
        own = f"w{i}"
        if op == CONV:
            consts[own] = rng.integers(-8, 9, (SHAPE[1], SHAPE[1], 1, 1), dtype=np.int8)
            consts["zw"] = np.array(0, np.int8)
            ins = [x, "s", "z", own, "s", "zw", "s_out", "z"]
        else:
            consts[own] = rng.integers(0, 100, SHAPE, dtype=dtype)
            ins = [x, "s", "z", own, "s", "z", "s_out", "z"]
        for pos, v in (odd or {}).get(i, {}).items():
            ins[pos] = f"odd{i}_{pos}"
            consts[ins[pos]] = v
        attrs = {"activation_min": int(np.iinfo(dtype).min), "activation_max": int(np.iinfo(dtype).max)} \
            if op == TFL else {}
        nodes.append(Node(op, f"n{i}", ins, [f"x{i + 1}"], attrs))
        x = f"x{i + 1}"
    g = Graph(nodes, [TensorInfo("x0", SHAPE, np.dtype(dtype))], [TensorInfo(x, SHAPE, np.dtype(dtype))], consts)
    return g, {"x0": np.random.default_rng(1).integers(0, 100, SHAPE, dtype=dtype)}


def _counting(monkeypatch, op: str) -> list:
    calls: list = []
    rule = op_table.SHAPES[op]

    def counted(node, x):
        calls.append(node.name)
        return rule(node, x)
    monkeypatch.setitem(op_table.SHAPES, op, counted)
    return calls


@pytest.mark.parametrize("op,dtype", [(ADD, np.uint8), (TFL, np.int8), (CONV, np.uint8)])
def test_a_chain_is_checked_once_and_traced_as_its_kernels_trace_it(monkeypatch, op, dtype):
    """The constants each node has alone (its added tensor, its weights) are inputs whose values the rule never
    reads (op_table.VALUE_FREE), and the shared scales and zero points are the same values: one rule call."""
    g, feed = _chain(op, 40, dtype)
    calls = _counting(monkeypatch, op)
    info = trace(g, feed)
    assert calls == ["n0"]
    assert info == _trace(g, feed, {}, DEFAULT)


def test_scales_of_equal_values_under_other_names_are_one_answer(monkeypatch):
    """TFLite models give every node its own scale and zero-point tensors: they are keyed by value (type, bytes),
    so nodes 1-9 (numpy scalars of one value each) are one answer, and a 0-d array (nodes 0 and 11), a numpy scalar
    and a 1-element array of that value stay apart (a rule may tell them apart)."""
    odd = {i: {1: np.float32(0.05), 2: np.int8(0)} for i in range(1, 10)}
    odd[10] = {1: np.float32(0.05).reshape(1)}
    g, feed = _chain(TFL, 12, np.int8, odd)
    calls = _counting(monkeypatch, TFL)
    info = trace(g, feed)
    assert calls == ["n0", "n1", "n10"]
    assert info == _trace(g, feed, {}, DEFAULT)


@pytest.mark.parametrize("op,dtype,odd,error", [
    (ADD, np.uint8, {4: np.array(0.0, np.float32)}, ValueError),  # b_scale 0
    (ADD, np.uint8, {6: np.array(-0.1, np.float32)}, ValueError),  # c_scale negative
    (ADD, np.uint8, {7: np.array(0, np.int8)}, TypeError),  # c_zero_point of another dtype
    (ADD, np.uint8, {3: np.zeros(SHAPE, np.int8)}, TypeError),  # b of another dtype (a VALUE_FREE input)
    (ADD, np.uint8, {3: np.zeros((1, 4, 3, 2), np.uint8)}, ValueError),  # b of a shape that does not broadcast
    (TFL, np.int8, {4: np.array(1e-6, np.float32)}, ValueError),  # a scale ratio outside XNNPACK's range
    (TFL, np.int8, {3: np.zeros((1, 4, 2, 5), np.int8)}, ValueError),  # numpy's broadcast error, as the kernel's
    (CONV, np.uint8, {3: np.zeros((4, 4, 1, 1), np.uint8)}, TypeError),  # w of another dtype
    (CONV, np.uint8, {3: np.zeros((4, 4, 5, 5), np.int8)}, ValueError),  # a kernel larger than the input
    (CONV, np.uint8, {5: np.array(0, np.uint8)}, TypeError),  # w's zero point of another dtype than w
])
def test_a_bad_node_late_in_a_chain_gets_its_kernels_error(op, dtype, odd, error):
    """Only answers are kept, never errors: node 20 of a chain, unlike the 19 before it in one value, is checked
    again, and the trace raises what its kernel raises on the real values (the trace's own second pass)."""
    pos, value = next(iter(odd.items()))
    g, feed = _chain(op, 30, dtype, {20: {pos: value}})
    with pytest.raises(error) as got:
        trace(g, feed)
    with pytest.raises(error) as want:
        _trace(g, feed, {}, DEFAULT)
    assert str(got.value) == str(want.value)
    assert "node n20 " in str(got.value)


def test_values_that_decide_a_shape_are_computed_by_the_kernels():
    """A QLinearAdd's sums cast to int64 are a Reshape's target shape: its node runs its kernel (the sums [2, 3]),
    where a stand-in's zeros made the target [0, 0], which Reshape reads as "keep both dims": (3, 2), silently."""
    consts = {"s": np.float32(1.0), "z": np.uint8(0), "b": np.array([1, 1], np.uint8),
              "data": np.zeros((3, 2), np.float32)}
    nodes = [Node(ADD, "add", ["a", "s", "z", "b", "s", "z", "s", "z"], ["sum"]),
             Node("Cast", "cast", ["sum"], ["target"], {"to": 7}),
             Node("Reshape", "reshape", ["data", "target"], ["y"])]
    g = Graph(nodes, [TensorInfo("a", (2,), np.dtype(np.uint8))], [TensorInfo("y", None, np.dtype(np.float32))],
              consts)
    feed = {"a": np.array([1, 2], np.uint8)}
    info = trace(g, feed)
    assert info["y"][0] == (2, 3)
    assert info == _trace(g, feed, {}, DEFAULT)
    assert interpreter._shape_valued(g) == {"target", "sum", "a", "s", "z", "b"}


def test_zeros_shared_by_stand_ins_are_read_only():
    """The small zeros several stand-ins share are one read-only array: a kernel cannot change what the next reads."""
    g, feed = _chain(ADD, 3)
    answers = interpreter._Answers(g, {})
    z = answers.zeros_of(SHAPE, np.dtype(np.uint8))
    assert z is answers.zeros_of(SHAPE, np.dtype(np.uint8)) and not z.flags.writeable and not z.any()


def test_the_arena_counts_no_weights_but_an_initializer_fed_as_an_input():
    """The arena's last-reader map leaves out constants (the model's weights are never counted: a TFLite model has
    eight a node), except an initializer that is also a graph input, whose fed value is counted until read."""
    from vkinfer.model.sizes import Arena, Limits

    g, _ = _chain(ADD, 3)
    g.inputs.append(TensorInfo("w1", SHAPE, np.dtype(np.uint8)))  # an input whose initializer is its default
    arena = Arena(g, Limits(session_bytes=100))
    assert set(arena.last) == {"x0", "x1", "x2", "x3", "w1"}
    arena.made(None, "w1", SHAPE, np.dtype(np.uint8))
    assert arena.total == 60
    with pytest.raises(ValueError, match="over the limit of 100 bytes per session"):
        arena.made(None, "x0", SHAPE, np.dtype(np.uint8))


def _raised_at_once(monkeypatch, g: Graph, feed: dict, op: str, error: type, node: str) -> None:
    """The trace raises `error` naming `node` with the message of the pass on real values, and `op`'s kernel never
    runs (no second pass)."""
    with pytest.raises(error) as want:
        _trace(g, feed, {}, DEFAULT)
    ran: list = []
    kernel = op_table.OPS[op]
    monkeypatch.setitem(op_table.OPS, op, lambda n, x, memo: ran.append(n.name) or kernel(n, x, memo))
    monkeypatch.setattr(interpreter, "OPS", op_table.OPS)
    with pytest.raises(error) as got:
        trace(g, feed)
    assert str(got.value) == str(want.value) and f"node {node} " in str(got.value)
    assert ran == []


@pytest.mark.parametrize("op,pos,value", [(CONV, 4, np.array(0.0, np.float32)), (ADD, 4, np.array(0.0, np.float32)),
                                          (CONV, 3, np.zeros((4, 4, 5, 5), np.int8))])
def test_a_rules_refusal_of_the_models_own_is_raised_without_a_second_pass(monkeypatch, op, pos, value):
    """Node 20 refused by its shape rule for what the model holds (a zero scale, weights larger than the input),
    with stand-ins only in inputs whose values the rule never reads: the model's own error at once, with the
    message of the pass on real values, and no kernel run (a 25M-pixel QDQ model ran four convolutions in numpy
    for 11-60 s only to raise it again: fuzz finding hang/onnx-libfuzzer-7d5ad253)."""
    g, feed = _chain(op, 30, np.uint8, {20: {pos: value}})
    _raised_at_once(monkeypatch, g, feed, op, ValueError, "n20")


def test_a_type_error_after_a_stand_in_is_raised_without_a_second_pass(monkeypatch):
    """A kernel refusing its inputs' types after a stand-in (a QLinearConv chain whose uint8 end a Mul takes with a
    float32 constant) raises at once: types never depend on values, so the pass on real values (every convolution in
    numpy) would only raise it again (fuzz finding hang/onnx-libfuzzer-35a6540b: a Softmax of 2**27 elements re-run
    exactly, 33 s a device, before a Mul of float32 and uint8)."""
    g, feed = _chain(CONV, 6, np.uint8)
    g.nodes.append(Node("Mul", "bad", ["x6", "f"], ["y"], {}))
    g.consts["f"] = np.float32(3.0)
    g.outputs[:] = [TensorInfo("y", SHAPE, np.dtype(np.uint8))]
    _raised_at_once(monkeypatch, g, feed, CONV, TypeError, "bad")
