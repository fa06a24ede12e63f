"""vkinfer/model/transpose_fold.py: the ring-buffer Transpose moves are exact (the numpy interpreter gives the same
bytes before and after on random permutations, axes, slices and negative axes) and do what they claim (the
Transpose between a Slice and its source, and the one after a Concat, leave the path)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from vkinfer.model.graph import Graph, Node, TensorInfo
from vkinfer.model.interpreter import interpret
from vkinfer.model.transpose_fold import fold_stream_transposes


def _run(g: Graph, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    values = {**g.consts, **feed}
    interpret(g, values)
    return [values[t.name] for t in g.outputs]


def _slice_consts(rng, shape, axis):
    n = shape[axis]
    start = int(rng.integers(0, n))
    return {"st": np.array([start], np.int64), "en": np.array([n + 1], np.int64),
            "ax": np.array([axis - len(shape) if rng.integers(2) else axis], np.int64),
            "sp": np.array([1], np.int64)}


PERMS = list(itertools.permutations(range(4)))


@pytest.mark.parametrize("seed", range(12))
def test_ring_buffer_rewrites_are_exact(seed):
    """state -> Transpose(p) -> Concat(axis) with a new frame -> Transpose(q) -> Slice -> next state (graph
    output), the Concat also read by a consumer, as the TFLite importer makes a streaming model's ring buffer;
    and the first-buffer form: Concat in the state's layout read by a Slice and a Transpose."""
    rng = np.random.default_rng(seed)
    p = PERMS[int(rng.integers(len(PERMS)))]
    inv = tuple(int(i) for i in np.argsort(p))
    hist = (1, int(rng.integers(1, 5)), 1, int(rng.integers(1, 7)))  # (1, T, 1, C) as TFLite keeps it
    axis = 1
    c_axis = inv[axis]  # the time axis after Transpose(p)
    frame = list(np.transpose(np.zeros(hist), p).shape)
    frame[c_axis] = 1
    cat_shape = list(np.transpose(np.zeros(hist), p).shape)
    cat_shape[c_axis] += 1
    post = tuple(np.transpose(np.zeros(cat_shape), inv).shape)
    consts = _slice_consts(rng, post, axis)
    consts["st"] = np.array([1], np.int64)
    nodes = [Node("Transpose", "t1", ["state"], ["ts"], {"perm": list(p)}),
             Node("Concat", "c", ["ts", "x"], ["cat"], {"axis": c_axis}),
             Node("Transpose", "t2", ["cat"], ["back"], {"perm": list(inv)}),
             Node("Slice", "s", ["back", "st", "en", "ax", "sp"], ["next"]),
             Node("Identity", "use", ["cat"], ["y"])]
    g = Graph(nodes, [TensorInfo("state", hist, np.dtype(np.int8)), TensorInfo("x", tuple(frame), np.dtype(np.int8))],
              [TensorInfo("y", None, np.dtype(np.int8)), TensorInfo("next", hist, np.dtype(np.int8))], consts)
    feed = {"state": rng.integers(-128, 128, hist, dtype=np.int8),
            "x": rng.integers(-128, 128, tuple(frame), dtype=np.int8)}
    want = _run(g, feed)
    out = fold_stream_transposes(g)
    for a, b in zip(_run(out, feed), want, strict=True):
        np.testing.assert_array_equal(a, b)
    made = {o: n for n in out.nodes for o in n.outputs}
    s = next(n for n in out.nodes if n.op == "Slice")
    assert made[s.inputs[0]].op == "Concat"  # the slice reads the concat: the Transpose moved past it
    assert made["next"].op == "Transpose"

    # The first buffer: Concat in the state's layout, read by a Slice and a Transpose to the consumer.
    nodes = [Node("Concat", "c", ["state", "x2"], ["cat"], {"axis": 1}),
             Node("Slice", "s", ["cat", "st", "en", "ax", "sp"], ["next"]),
             Node("Transpose", "t", ["cat"], ["tc"], {"perm": [0, 3, 1, 2]}),
             Node("Identity", "use", ["tc"], ["y"])]
    x2 = (1, int(rng.integers(1, 4)), 1, hist[3])
    consts2 = dict(consts, ax=np.array([1], np.int64))
    g2 = Graph(nodes, [TensorInfo("state", hist, np.dtype(np.int8)), TensorInfo("x2", x2, np.dtype(np.int8))],
               [TensorInfo("y", None, np.dtype(np.int8)), TensorInfo("next", None, np.dtype(np.int8))], consts2)
    feed2 = {"state": feed["state"], "x2": rng.integers(-128, 128, x2, dtype=np.int8)}
    want2 = _run(g2, feed2)
    out2 = fold_stream_transposes(g2)
    for a, b in zip(_run(out2, feed2), want2, strict=True):
        np.testing.assert_array_equal(a, b)
    made2 = {o: n for n in out2.nodes for o in n.outputs}
    cat = next(n for n in out2.nodes if n.op == "Concat")
    assert cat.attrs["axis"] == 2 and made2["y"].inputs[0] == cat.outputs[0]  # the concat moved to NCHW's H
    assert made2["next"].op == "Transpose"


def test_graph_without_the_pattern_is_unchanged():
    g = Graph([Node("Transpose", "t", ["x"], ["y"], {"perm": [1, 0]})], [TensorInfo("x", (2, 3), np.dtype(np.int8))],
              [TensorInfo("y", (3, 2), np.dtype(np.int8))], {})
    assert fold_stream_transposes(g) is g
