"""Chained byte moves in the CPU graph (vkinfer/cpu/segment.py `_fold_moves`) and the split ring buffer's
Transposes (vkinfer/model/transpose_fold.py: a Transpose only Slices read, a Transpose and its inverse).

A Transpose, a one-transpose Reshape/Flatten and aliases along a tensor with one reader become one transpose, or
an alias where the bytes end where they started. Oracle: ONNX Runtime on uint8/int8 models of such chains (random
permutations and reshapes), every device the same bits; the CPU graph's operator list shows the fold."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper as h
from support.agree import run_devices

import vkinfer
from vkinfer.model.graph import Graph, Node, TensorInfo
from vkinfer.model.interpreter import interpret
from vkinfer.model.transpose_fold import fold_stream_transposes
from vkinfer.testing.onnx_builder import make_model
from vkinfer.testing.zoo import ort_run

PERMS = list(itertools.permutations(range(4)))


def _i64(*v) -> np.ndarray:
    return np.array(v, np.int64)


def _cpu_ops(blob: bytes) -> list[str]:
    s = vkinfer.InferenceSession(blob, device="cpu", threads=1)
    return s._fast.plan.segments[0].runner.ops()


def _check(nodes, shape, dtype, consts=None, outs=("y",)):
    """ORT's values on every device, the last node's output `y` read by a Concat (so no edge conversion can
    take the last move); the CPU graph's operators."""
    attrs = {a.name: h.get_attribute_value(a) for a in nodes[-1].attribute}
    nodes = [*nodes[:-1], h.make_node(nodes[-1].op_type, nodes[-1].input, ["m"], **attrs),
             h.make_node("Concat", ["m", "m"], ["y"], axis=0)]
    m = make_model(nodes, {"x": (dtype, shape)}, dict.fromkeys(outs, dtype), consts or {}, opset=13)
    blob = m.SerializeToString()
    feed = {"x": np.random.default_rng(0).integers(0, 256, shape).astype(np.uint8).view(dtype)}
    run_devices(blob, feed, want=ort_run(m, feed, optimize=False))
    return _cpu_ops(blob)


@pytest.mark.parametrize("k", range(0, len(PERMS), 2))
def test_transpose_then_inverse_is_no_copy(k):
    """Transpose(p) -> Transpose(p^-1): an alias (only the int8 edges' conversions remain, was 3 transposes)."""
    p = PERMS[k]
    inv = [int(i) for i in np.argsort(p)]
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=list(p)), h.make_node("Transpose", ["t"], ["y"], perm=inv)]
    ops = _check(nodes, (2, 3, 4, 5), np.int8)
    assert ops.count("transpose") == 2, ops


@pytest.mark.parametrize("k", range(1, len(PERMS), 3))
def test_two_transposes_become_one(k):
    """Transpose(p) -> Transpose(q): one transpose (p then q composed) besides the output's conversion."""
    rng = np.random.default_rng(k)
    p, q = PERMS[k], PERMS[int(rng.integers(len(PERMS)))]
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=list(p)), h.make_node("Transpose", ["t"], ["y"], perm=list(q))]
    ops = _check(nodes, (2, 3, 4, 5), np.uint8)  # no size-1 axis: each Transpose is a real move
    assert ops.count("transpose") <= 2, ops


@pytest.mark.parametrize("shape,perm", [((1, 5, 1, 64), (0, 2, 3, 1)), ((1, 4, 3, 2), (0, 2, 3, 1)),
                                        ((2, 3, 4, 5), (0, 3, 1, 2)), ((1, 2, 3, 4), (3, 2, 1, 0))])
@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_transpose_flatten_reads_in_place(shape, perm, dtype):
    """A stream's Transpose (NCHW -> NHWC) then Flatten: the flatten of an NHWC tensor is the form's own bytes
    when perm is (0, 2, 3, 1), else one transpose; the values are ORT's either way."""
    nodes = [h.make_node("Transpose", ["x"], ["t"], perm=list(perm)), h.make_node("Flatten", ["t"], ["f"]),
             h.make_node("Reshape", ["f", "s"], ["y"])]
    n = int(np.prod(shape))
    ops = _check(nodes, shape, dtype, {"s": _i64(n // shape[0] // 2, -1) if n % 2 == 0 else _i64(-1)})
    if perm == (0, 2, 3, 1):  # an alias: only the edges' conversions
        assert ops.count("transpose") == (2 if dtype == np.int8 else 1), ops


def test_reshape_transpose_on_the_input_edge():
    """micro_wakeword's input: (1, 3, 40) -> Reshape (1, 3, 1, 40) -> Transpose (0, 3, 1, 2): the input's
    conversion writes the transposed bytes (one operator in all, with the reader a Concat)."""
    nodes = [h.make_node("Reshape", ["x", "s"], ["r"]), h.make_node("Transpose", ["r"], ["t"], perm=[0, 3, 1, 2]),
             h.make_node("Identity", ["t"], ["y"])]
    ops = _check(nodes, (1, 3, 40), np.int8, {"s": _i64(1, 3, 1, 40)})
    assert ops.count("transpose") == 2, ops  # the input's and the output's conversions


def _interp(g: Graph, feed):
    values = {**g.consts, **feed}
    interpret(g, values)
    return [values[t.name] for t in g.outputs]


@pytest.mark.parametrize("seed", range(8))
def test_split_ring_buffer_loses_its_transposes(seed):
    """okay_nabu's split buffer: Concat (NCHW, time) -> Transpose (NHWC) read by two Slices (channel halves), each
    then a strided Slice in time and the inverse Transpose to a consumer: exact, and no Transpose left."""
    rng = np.random.default_rng(seed)
    c, t = 2 * int(rng.integers(1, 5)), int(rng.integers(2, 9))
    consts = {"h0": _i64(0), "h1": _i64(c // 2), "h2": _i64(c), "ax": _i64(-1), "one": _i64(1),
              "ts": _i64(int(rng.integers(0, t))), "te": _i64(t), "tax": _i64(1), "st": _i64(int(rng.integers(1, 3)))}
    nodes = [Node("Concat", "c", ["s", "x"], ["cat"], {"axis": 2}),
             Node("Transpose", "t", ["cat"], ["nhwc"], {"perm": [0, 2, 3, 1]})]
    outs = []
    for k, (a, b) in enumerate((("h0", "h1"), ("h1", "h2"))):
        nodes += [Node("Slice", f"sp{k}", ["nhwc", a, b, "ax", "one"], [f"half{k}"]),
                  Node("Slice", f"kp{k}", [f"half{k}", "ts", "te", "tax", "st"], [f"keep{k}"]),
                  Node("Transpose", f"b{k}", [f"keep{k}"], [f"back{k}"], {"perm": [0, 3, 1, 2]}),
                  Node("Identity", f"use{k}", [f"back{k}"], [f"y{k}"])]
        outs.append(TensorInfo(f"y{k}", None, np.dtype(np.int8)))
    g = Graph(nodes, [TensorInfo("s", (1, c, t - 1, 1), np.dtype(np.int8)),
                      TensorInfo("x", (1, c, 1, 1), np.dtype(np.int8))], outs, consts)
    feed = {"s": rng.integers(-128, 128, (1, c, t - 1, 1), dtype=np.int8),
            "x": rng.integers(-128, 128, (1, c, 1, 1), dtype=np.int8)}
    want = _interp(g, feed)
    out = fold_stream_transposes(g)
    for a, b in zip(_interp(out, feed), want, strict=True):
        np.testing.assert_array_equal(a, b)
    assert [n.op for n in out.nodes].count("Transpose") == 0, [n.op for n in out.nodes]
