"""ArgMax / ArgMin of uint8, int8 and float32 in the native CPU graph (vkinfer/cpu/argmax.py,
cpu_fallback/src/ops/argmax.c) against ONNX Runtime's CPU EP: every device the same int64 indices as ORT (the
reference device runs vkinfer/reference/argmax.py), the node placed on the cpu in cpu and vulkan sessions.

Edge tables: ties (first index, or last with select_last_index), all-equal rows, the lowest and highest bytes,
float32 NaN at every position (a NaN first stays, a later one is skipped: numpy's argmax differs), +0/-0 ties and
infinities; random shapes, every axis, keepdims 0 and 1 (4-D and 5-D 8-bit inputs are in the NHWC storage form);
the QDQ form (DQ -> ArgMax, ORT's dropDQ: the ArgMax reads the bytes); and the C operator under ASan/UBSan."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper as oh
from support.cpu_build import run_both_builds

import vkinfer
from vkinfer.reference.argmax import arg_reduce

from ._build import NAME, QTYPES, check, model, node, ort_run, qrand

F32 = np.float32
OPS = ["ArgMax", "ArgMin"]


def _blob(op, shape, dtype, axis, keepdims=1, last=0) -> bytes:
    """One ArgMax/ArgMin; a float32 one with an unrelated DequantizeLinear branch (vkinfer runs 8-bit models)."""
    nodes = [node(op, ["x"], ["y"], axis=axis, keepdims=keepdims, select_last_index=last)]
    ins, outs, consts = {"x": (dtype, tuple(shape))}, {"y": np.int64}, None
    if np.dtype(dtype) == F32:
        nodes.append(node("DequantizeLinear", ["q", "s"], ["qf"], name="dq"))
        ins["q"], outs["qf"], consts = (np.uint8, (4,)), F32, {"s": F32(0.5)}
    return model(nodes, ins, consts, outs, opset=13)


def _feeds(feeds):
    """`feeds` with the unrelated branch's input where the input is float32."""
    q = np.arange(4, dtype=np.uint8)
    return [{**f, "q": q} if f["x"].dtype == F32 else f for f in feeds]


def _check(blob, feeds):
    feeds = _feeds(feeds)
    sess = check(blob, feeds, [ort_run(blob, f) for f in feeds], where="cpu")
    assert sess["cpu"].placement[NAME] == "cpu"


def _float_edges(n: int) -> np.ndarray:
    """Rows of n float32 with NaN, +-0, +-inf and ties at every position."""
    rows = []
    for p in range(n):
        for v in (np.nan, 0.0, -0.0, np.inf, -np.inf, 2.0):
            r = np.full(n, 1.0, F32)
            r[p] = v
            rows.append(r)
            r2 = np.where(np.arange(n) % 2 == 0, F32(0.0), F32(-0.0)).astype(F32)
            r2[p] = v
            rows.append(r2)
    rows.append(np.full(n, np.nan, F32))
    rows.append(np.full(n, 3.0, F32))
    return np.stack(rows)


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("op", OPS)
def test_float_edge_table(op, last):
    """NaN / +-0 / inf / tie at every position of rows of 5 and 9, along the last and the first axis."""
    for n in (5, 9):
        x = _float_edges(n)
        for axis, data in ((1, x), (0, np.ascontiguousarray(x.T))):
            _check(_blob(op, data.shape, F32, axis, 1, last), [{"x": data}])


@pytest.mark.parametrize("last", [0, 1])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dt", QTYPES, ids=["u8", "s8"])
def test_byte_edge_table(dt, op, last):
    """Ties, all-equal rows, the lowest and highest byte at every position."""
    info = np.iinfo(dt)
    rows = []
    for p in range(7):
        for v in (info.min, info.max, 0):
            for base in (info.min, info.max, 0, 5):
                r = np.full(7, base, dt)
                r[p] = v
                rows.append(r)
                r = r.copy()
                r[(p + 3) % 7] = v
                rows.append(r)
    x = np.stack(rows)
    _check(_blob(op, x.shape, dt, 1, 0, last), [{"x": x}])
    _check(_blob(op, x.T.shape, dt, 0, 1, last), [{"x": np.ascontiguousarray(x.T)}])


SHAPES = [(7,), (3, 1), (1, 9), (4, 300), (2, 3, 5), (2, 5, 3, 4), (1, 8, 6, 6), (2, 3, 1, 2, 5), (1, 2, 3, 4, 5, 2)]


@pytest.mark.parametrize("dt", [np.uint8, np.int8, F32], ids=["u8", "s8", "f32"])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_random_shapes_every_axis(shape, dt):
    """Every axis (negative ones too), keepdims 0/1, select_last_index 0/1, tie-prone random data."""
    rng = np.random.default_rng(len(shape) * 7 + shape[-1])
    for axis in range(-len(shape), len(shape)):
        op, keep, last = OPS[axis % 2], int(rng.integers(2)), int(rng.integers(2))
        if dt == F32:
            feeds = [{"x": rng.choice(F32([0.5, -0.0, 0.0, 1.5, np.nan, -2.0]), shape).astype(F32)}]
        else:
            feeds = [{"x": qrand(rng, shape, dt)}, {"x": rng.integers(0, 3, shape).astype(dt)}]
        _check(_blob(op, shape, dt, axis, keep, last), feeds)


@pytest.mark.parametrize("dt", QTYPES, ids=["u8", "s8"])
def test_qdq_argmax_reads_the_bytes(dt):
    """DQ -> ArgMax (ORT's dropDQ: its ArgMax runs on the 8-bit tensor, ORT_ENABLE_ALL): the same indices on every
    device, the ArgMax on the cpu and no DQ left."""
    c = {"s": np.array(0.05, F32), "z": np.array(128 if dt == np.uint8 else -3, dt)}
    blob = model([oh.make_node("DequantizeLinear", ["x", "s", "z"], ["d"], name="dq"),
                  node("ArgMax", ["d"], ["y"], axis=1, keepdims=0)],
                 {"x": (dt, (2, 6, 3, 3))}, c, {"y": np.int64}, opset=13)
    rng = np.random.default_rng(3)
    feeds = [{"x": qrand(rng, (2, 6, 3, 3), dt)}, {"x": rng.integers(0, 2, (2, 6, 3, 3)).astype(dt)}]
    config = {"session.qdqisint8allowed": "1"}
    sess = check(blob, feeds, [ort_run(blob, f, optimize=True, config=config) for f in feeds], where="cpu",
                 nodes=[NAME])
    for s in sess.values():
        assert "dq" not in s.placement, s.placement


def test_reference_is_orts_loop_not_numpys():
    """The definition on NaN rows: ORT's walk (measured values), where numpy's argmax picks the NaN."""
    x = F32([[1, np.nan, 3, 2], [np.nan, 1, 3, 2], [1, 3, 2, np.nan], [0, -0.0, 0, -0.0]])
    assert arg_reduce("ArgMax", x, 1, False).tolist() == [2, 0, 1, 0]
    assert arg_reduce("ArgMax", x, 1, False, True).tolist() == [2, 0, 1, 3]
    assert arg_reduce("ArgMin", x, 1, False).tolist() == [0, 0, 0, 0]
    assert np.argmax(x, 1).tolist() != [2, 0, 1, 0]
    assert (ort_run(_blob("ArgMax", x.shape, F32, 1, 0, 1), _feeds([{"x": x}])[0])[0] == [2, 0, 1, 3]).all()


def test_bad_axis_is_refused_naming_the_node():
    blob = _blob("ArgMax", (2, 3), np.uint8, 2)
    for dev in ("reference", "cpu"):
        with pytest.raises(ValueError, match="axis"):
            vkinfer.InferenceSession(blob, device=dev).run(None, {"x": np.zeros((2, 3), np.uint8)})


DRIVER = r'''
import sys
import numpy as np
from onnx import TensorProto, helper as oh
import vkinfer
from vkinfer.cpu import graph as G

T = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
     np.dtype(np.float32): TensorProto.FLOAT}
rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
k = 0
for shape in [(7,), (4, 300), (2, 5, 3, 4), (2, 3, 1, 2, 5), (1, 2, 3, 4, 5, 2)]:
    for dt in (np.uint8, np.int8, np.float32):
        for axis in range(len(shape)):
            op = ("ArgMax", "ArgMin")[axis % 2]
            n = oh.make_node(op, ["x"], ["y"], axis=axis, keepdims=k % 2, select_last_index=(k // 2) % 2)
            dq = oh.make_node("DequantizeLinear", ["q", "s"], ["qf"])
            g = oh.make_graph([n, dq], "g", [oh.make_tensor_value_info("x", T[np.dtype(dt)], list(shape)),
                                             oh.make_tensor_value_info("q", TensorProto.UINT8, [4])],
                              [oh.make_tensor_value_info("y", TensorProto.INT64, None),
                               oh.make_tensor_value_info("qf", TensorProto.FLOAT, None)],
                              initializer=[oh.make_tensor("s", TensorProto.FLOAT, [], [0.5])])
            m = oh.make_model(g, opset_imports=[oh.make_opsetid("", 13)])
            m.ir_version = 8
            if dt == np.float32:
                x = rng.choice(np.float32([0.5, -0.0, 0.0, np.nan, 2.0]), shape).astype(dt)
            else:
                x = rng.integers(0, 4, shape).astype(dt)
            s = vkinfer.InferenceSession(m.SerializeToString(), device="cpu")
            assert set(s.placement.values()) == {"cpu"}, s.placement
            feed = {"x": x, "q": np.arange(4, dtype=np.uint8)}
            outs[f"in{k}"] = x
            outs[f"out{k}"] = s.run(None, feed)[0]
            outs[f"ref{k}"] = vkinfer.InferenceSession(m.SerializeToString(), device="reference").run(None, feed)[0]
            k += 1
np.savez(sys.argv[1], **outs)
print("argmax asan: ok", "library:", G.lib()._name)
'''


def test_argmax_under_asan_and_ubsan(tmp_path):
    """The C operator on every axis of ranks 1-6, under AddressSanitizer + UBSan and the normal build: the same
    indices, equal to the reference's."""
    sanitized, normal = run_both_builds(DRIVER, tmp_path, "argmax asan: ok", ("5",))
    assert sorted(sanitized) == sorted(normal) and len(normal) == 3 * 54
    for k, v in normal.items():
        assert (v == sanitized[k]).all() or (np.isnan(v) & np.isnan(sanitized[k]) | (v == sanitized[k])).all(), k
        if k.startswith("out"):
            assert (v == normal["ref" + k[3:]]).all(), k
