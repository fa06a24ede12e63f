"""8-bit ReduceMax / ReduceMin in the native CPU graph (vkinfer/cpu/byte_reduce.py, cpu_fallback/src/ops/
byte_reduce.c) against ONNX Runtime's CPU EP: ORT's uint8/int8 reduce kernels on one-node models and ORT's drop-QDQ
rule on DQ -> ReduceMax/ReduceMin -> Q (ORT_ENABLE_ALL), every device the same bytes as ORT (the reference device
runs vkinfer/reference/byte_reduce.py), the node placed on the cpu in cpu and vulkan sessions.

Edge tables: the lowest and highest byte at every position, all-equal rows, ties; random shapes with every axis
subset (4-D and 5-D inputs are in the NHWC storage form, a keepdims=0 output in another order), axes as an input
(opset 18) and as an attribute (opset 13), negative axes, noop_with_empty_axes; the C operator under ASan/UBSan."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper as oh
from support.cpu_build import run_both_builds

from vkinfer.reference.byte_reduce import byte_reduce

from ._build import NAME, QTYPES, check, model, node, ort_run, qrand

F32 = np.float32
OPS = ["ReduceMax", "ReduceMin"]


def _blob(op, shape, dtype, axes, keepdims=1, opset=18, **attrs) -> bytes:
    consts, ins = {}, ["x"]
    if axes is not None:
        if opset >= 18:
            consts["ax"] = np.array(axes, np.int64)
            ins.append("ax")
        else:
            attrs["axes"] = list(axes)
    return model([node(op, ins, ["y"], keepdims=keepdims, **attrs)], {"x": (dtype, tuple(shape))}, consts,
                 {"y": dtype}, opset=opset)


def _check(blob, feeds):
    sess = check(blob, feeds, [ort_run(blob, f) for f in feeds], where="cpu")
    assert sess["cpu"].placement[NAME] == "cpu"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dt", QTYPES, ids=["u8", "s8"])
def test_edge_table(dt, op):
    """The lowest/highest byte and 0 at every position of rows over every base value; all-equal rows."""
    info = np.iinfo(dt)
    rows = []
    for p in range(9):
        for v in (info.min, info.max, 0, 1):
            for base in (info.min, info.max, 0, -1 if dt == np.int8 else 200):
                r = np.full(9, base, dt)
                r[p] = v
                rows.append(r)
    x = np.stack(rows)
    _check(_blob(op, x.shape, dt, [1], 0), [{"x": x}])
    _check(_blob(op, x.T.shape, dt, [0], 1), [{"x": np.ascontiguousarray(x.T)}])
    _check(_blob(op, (6, 6, 2, 3), dt, [1, 3]), [{"x": x.reshape(-1)[:216].reshape(6, 6, 2, 3)}])


SHAPES = [(7,), (3, 1), (4, 300), (2, 3, 5), (2, 5, 3, 4), (1, 8, 6, 6), (2, 3, 1, 2, 5), (1, 2, 3, 4, 5, 2)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_every_axis_subset(shape, op):
    """Every non-empty subset of axes (negative for odd ones), keepdims 0 and 1, uint8 and int8."""
    rng = np.random.default_rng(len(shape) * 11 + shape[-1])
    r = len(shape)
    subsets = [c for k in range(1, r + 1) for c in itertools.combinations(range(r), k)]
    for i, axes in enumerate(subsets):
        dt = QTYPES[i % 2]
        ax = [a - r if (a + i) % 2 else a for a in axes]
        keep = (i // 2) % 2
        feeds = [{"x": qrand(rng, shape, dt)}, {"x": rng.integers(0, 2, shape).astype(dt)}]
        _check(_blob(op, shape, dt, ax, keep, opset=18 if i % 3 else 13), feeds)


@pytest.mark.parametrize("dt", QTYPES, ids=["u8", "s8"])
def test_default_and_empty_axes(dt):
    """No axes: every axis; noop_with_empty_axes=1 with no axes: a copy (opset 18)."""
    rng = np.random.default_rng(5)
    x = {"x": qrand(rng, (2, 3, 4, 5), dt)}
    for op in OPS:
        _check(_blob(op, (2, 3, 4, 5), dt, None, 1), [x])
        _check(_blob(op, (2, 3, 4, 5), dt, None, 0, opset=13), [x])
        _check(_blob(op, (2, 3, 4, 5), dt, None, 1, noop_with_empty_axes=1), [x])


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dt", QTYPES, ids=["u8", "s8"])
def test_qdq_reduce_runs_on_the_bytes(dt, op):
    """DQ -> ReduceMax/ReduceMin -> Q with one positive scale (ORT's drop-QDQ rule at ORT_ENABLE_ALL): the 8-bit
    reduction on the cpu, no DQ or Q left, ORT's bytes on every device."""
    z = np.array(128 if dt == np.uint8 else -3, dt)
    c = {"s": np.array(0.05, F32), "z": z, "ax": np.array([1, 3], np.int64)}
    blob = model([oh.make_node("DequantizeLinear", ["x", "s", "z"], ["d"], name="dq"),
                  node(op, ["d", "ax"], ["m"], keepdims=0),
                  oh.make_node("QuantizeLinear", ["m", "s", "z"], ["y"], name="q")],
                 {"x": (dt, (2, 6, 3, 5))}, c, {"y": dt}, opset=18)
    rng = np.random.default_rng(7)
    feeds = [{"x": qrand(rng, (2, 6, 3, 5), dt)}, {"x": rng.integers(0, 2, (2, 6, 3, 5)).astype(dt)}]
    config = {"session.qdqisint8allowed": "1"}
    sess = check(blob, feeds, [ort_run(blob, f, optimize=True, config=config) for f in feeds], where="cpu")
    for s in sess.values():
        assert sorted(s.placement) == [NAME], s.placement


def test_empty_reduction_fill():
    """A reduction over an empty axis: the type's lowest (Max) / highest (Min) value, as ORT."""
    for dt in QTYPES:
        x = np.zeros((3, 0), dt)
        for op in OPS:
            want = ort_run(_blob(op, (3, 0), dt, [1], 1), {"x": x})[0]
            got = byte_reduce(op, x, [1], True)
            assert got.dtype == want.dtype and (got == want).all(), (op, dt, got, want)


DRIVER = r'''
import itertools
import sys
import numpy as np
from onnx import TensorProto, helper as oh
import vkinfer
from vkinfer.cpu import graph as G

T = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8}
rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
k = 0
for shape in [(7,), (4, 300), (2, 5, 3, 4), (2, 3, 1, 2, 5), (1, 2, 3, 4, 5, 2)]:
    r = len(shape)
    for axes in [c for n in range(1, r + 1) for c in itertools.combinations(range(r), n)][:12]:
        dt = (np.uint8, np.int8)[k % 2]
        n = oh.make_node(("ReduceMax", "ReduceMin")[(k // 2) % 2], ["x", "ax"], ["y"], keepdims=(k // 4) % 2)
        g = oh.make_graph([n], "g", [oh.make_tensor_value_info("x", T[np.dtype(dt)], list(shape))],
                          [oh.make_tensor_value_info("y", T[np.dtype(dt)], None)],
                          initializer=[oh.make_tensor("ax", TensorProto.INT64, [len(axes)], list(axes))])
        m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 18)])
        m.ir_version = 8
        x = rng.integers(-128, 128, shape).astype(np.int16).astype(dt)
        s = vkinfer.InferenceSession(m.SerializeToString(), device="cpu")
        assert set(s.placement.values()) == {"cpu"}, s.placement
        outs[f"out{k}"] = s.run(None, {"x": x})[0]
        outs[f"ref{k}"] = vkinfer.InferenceSession(m.SerializeToString(), device="reference").run(None, {"x": x})[0]
        k += 1
np.savez(sys.argv[1], **outs)
print("byte_reduce asan: ok", "library:", G.lib()._name)
'''


def test_byte_reduce_under_asan_and_ubsan(tmp_path):
    """The C operator over axis subsets of ranks 1-6 under AddressSanitizer + UBSan and the normal build: the same
    bytes, equal to the reference's."""
    sanitized, normal = run_both_builds(DRIVER, tmp_path, "byte_reduce asan: ok", ("3",))
    assert sorted(sanitized) == sorted(normal) and len(normal) == 2 * (1 + 3 + 12 + 12 + 12)
    for k, v in normal.items():
        assert v.dtype == sanitized[k].dtype and (v == sanitized[k]).all(), k
        if k.startswith("out"):
            assert (v == normal["ref" + k[3:]]).all(), k
