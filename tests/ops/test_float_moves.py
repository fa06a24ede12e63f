"""Data movement of float32 (and int32/int64) tensors in the native CPU graph (vkinfer/cpu/float_moves.py:
cpu_fallback/src/ops/gather.c with 4- and 8-byte elements, transpose.c's 4-byte permutation, a copy for the reshape
family) against ONNX Runtime's CPU EP bit for bit, asserting that the node runs on the cpu device (a Vulkan session
places it there too) and that the reference device (the numpy interpreter) agrees.

Each model carries an unrelated DequantizeLinear branch so vkinfer takes it (it runs 8-bit models only) while the op
reads float graph inputs, so edge values reach it: signed zeros, NaN, infinities, denormals, the largest floats."""

from __future__ import annotations

import numpy as np
import pytest

import vkinfer

from ._build import NAME, check, model, node, ort_run

F32 = np.float32
EDGE = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -3e-39, 3.4028235e38, 2.5], F32)


def _blob(nodes, inputs: dict, consts: dict | None = None, opset: int = 13, dtype=F32) -> bytes:
    """`nodes` over graph inputs of `dtype` (name -> shape), output y, plus the DequantizeLinear branch."""
    ins = {k: (dtype, s) for k, s in inputs.items()} | {"q": (np.uint8, (4,))}
    return model([*nodes, node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")], ins,
                 (consts or {}) | {"s": F32(0.5)}, {"y": dtype, "qf": F32}, opset=opset)


def _feed(rng, inputs: dict, dtype=F32) -> dict:
    f = {}
    for k, s in inputs.items():
        n = int(np.prod(s, dtype=np.int64))
        if np.dtype(dtype) == F32:
            v = np.where(rng.random(n) < 0.3, rng.choice(EDGE, n), rng.uniform(-3, 3, n)).astype(F32)
        else:
            info = np.iinfo(dtype)
            v = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        f[k] = v.reshape(s)
    return f | {"q": np.arange(4, dtype=np.uint8)}


def _check(blob: bytes, feed: dict, nodes=(NAME,)) -> None:
    """Every device gives ORT's bits; the nodes run on the cpu device in cpu and vulkan sessions."""
    check(blob, feed, ort_run(blob, feed), where="cpu", nodes=list(nodes))


def _i64(*v) -> np.ndarray:
    return np.array(v, np.int64)


# (shape, starts, ends, axes, steps): odd sizes, negative steps and axes, clamped and empty-looking bounds.
SLICES = [((13,), [2], [11], [0], [3]), ((13,), [-1], [-100], [0], [-1]), ((13,), [12], [0], [0], [-4]),
          ((1, 3, 9, 8), [0, 0], [100, 100], [2, 3], [2, 2]), ((1, 3, 9, 8), [1, 1], [100, 100], [2, 3], [2, 2]),
          ((5, 7), [-1, 5], [-100, 0], [0, 1], [-2, -1]),
          ((2, 3, 5, 7, 3), [1, -2, 0], [5, -7, 3], [-1, 3, 1], [2, -2, 1]),
          ((4, 6, 5), [1], [-1], [-2], [1]), ((3, 4, 5, 6), [0, 5, 3], [3, 0, 1], [0, 3, 1], [1, -3, -1]),
          ((1, 3, 640, 640), [0, 1], [2 ** 62, 2 ** 62], [2, 3], [2, 2])]


@pytest.mark.parametrize("case", SLICES, ids=[str(c[0]) + str(c[1:]) for c in SLICES])
def test_slice(case):
    shape, starts, ends, axes, steps = case
    blob = _blob([node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], {"x": shape},
                 {"st": _i64(*starts), "en": _i64(*ends), "ax": _i64(*axes), "sp": _i64(*steps)})
    _check(blob, _feed(np.random.default_rng(len(shape)), {"x": shape}))


def test_slice_random_tables():
    """Seeded random shapes (ranks 1-5, sizes 1-9) and slice parameters (any sign, past the ends)."""
    rng = np.random.default_rng(11)
    for _ in range(12):
        shape = tuple(int(s) for s in rng.integers(1, 10, rng.integers(1, 6)))
        k = int(rng.integers(1, len(shape) + 1))
        axes = [int(a) for a in rng.permutation(len(shape))[:k]]
        axes = [a - len(shape) if rng.random() < 0.3 else a for a in axes]
        steps = [int(s) for s in rng.choice([-3, -2, -1, 1, 2, 3], k)]
        starts = [int(s) for s in rng.integers(-12, 12, k)]
        ends = [int(s) for s in rng.integers(-12, 12, k)]
        blob = _blob([node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], {"x": shape},
                     {"st": _i64(*starts), "en": _i64(*ends), "ax": _i64(*axes), "sp": _i64(*steps)})
        feed = _feed(rng, {"x": shape})
        if min(ort_run(blob, feed)[0].shape, default=1) == 0:
            continue  # an empty result: nothing moves (the host takes it)
        _check(blob, feed)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_slice_integers(dtype):
    blob = _blob([node("Slice", ["x", "st", "en", "ax", "sp"], ["y"])], {"x": (3, 8, 5)},
                 {"st": _i64(-1, 1), "en": _i64(-100, 7), "ax": _i64(0, 1), "sp": _i64(-1, 2)}, dtype=dtype)
    _check(blob, _feed(np.random.default_rng(2), {"x": (3, 8, 5)}, dtype), )


PERMS = [((7,), None), ((3, 5), None), ((1, 5, 6, 3), [0, 3, 1, 2]), ((2, 3, 5, 7), [0, 2, 3, 1]),
         ((2, 3, 4, 5, 3), [4, 2, 0, 3, 1]), ((1, 230, 230, 3), [0, 3, 1, 2]), ((3, 1, 4), [1, 0, 2]),
         ((2, 3, 1, 4, 1, 5), [5, 3, 1, 0, 2, 4])]


@pytest.mark.parametrize("case", PERMS, ids=[str(c) for c in PERMS])
def test_transpose(case):
    shape, perm = case
    attrs = {} if perm is None else {"perm": perm}
    blob = _blob([node("Transpose", ["x"], ["y"], **attrs)], {"x": shape})
    _check(blob, _feed(np.random.default_rng(3), {"x": shape}))


def test_transpose_int64_through_the_gather():
    blob = _blob([node("Transpose", ["x"], ["y"], perm=[2, 0, 1])], {"x": (3, 4, 5)}, dtype=np.int64)
    _check(blob, _feed(np.random.default_rng(4), {"x": (3, 4, 5)}, np.int64))


PADS = [((7,), [2, 3]), ((1, 3, 4, 5), [0, 0, 1, 2, 0, 1, 3, 0]), ((2, 5, 6), [1, 2, 3, 1, 4, 5]),
        ((1, 224, 224, 3), [0, 3, 3, 0, 0, 2, 2, 0]), ((3, 4, 5, 6, 2), [0, 1, 2, 3, 1, 1, 0, 2, 1, 0])]


# reflect needs pads smaller than the axis: the cases where one is not are not reflect cases.
PAD_CASES = [pytest.param(case, mode, id=f"{case[0]}-{mode}") for case in PADS
             for mode in ("constant", "reflect", "edge")
             if mode != "reflect" or all(p < s for p, s in zip(case[1], list(case[0]) * 2, strict=True))]


@pytest.mark.parametrize("case,mode", PAD_CASES)
def test_pad(case, mode):
    shape, pads = case
    ins, consts = ["x", "p"], {"p": _i64(*pads)}
    if mode == "constant":
        ins.append("v")
        consts["v"] = np.array(-0.0 if len(shape) % 2 else 1.5, F32)
    blob = _blob([node("Pad", ins, ["y"], mode=mode)], {"x": shape}, consts)
    _check(blob, _feed(np.random.default_rng(5), {"x": shape}))


def test_pad_opset11_default_value_and_axes():
    """Pad-18's axes input; Pad without a value (0.0)."""
    blob = _blob([node("Pad", ["x", "p", "", "ax"], ["y"])], {"x": (2, 3, 4)}, {"p": _i64(1, 2, 0, 3),
                                                                              "ax": _i64(-1, 0)}, opset=18)
    _check(blob, _feed(np.random.default_rng(6), {"x": (2, 3, 4)}))


RESHAPES = [("Reshape", {"x": (1, 3, 4, 5)}, {"sh": _i64(3, -1)}, ["x", "sh"], {}),
            ("Reshape", {"x": (2, 9)}, {"sh": _i64(0, 3, 3)}, ["x", "sh"], {}),
            ("Flatten", {"x": (2, 3, 4, 5)}, {}, ["x"], {"axis": 2}),
            ("Squeeze", {"x": (1, 3, 1, 5)}, {"ax": _i64(0, -2)}, ["x", "ax"], {}),
            ("Unsqueeze", {"x": (3, 5)}, {"ax": _i64(0, 3)}, ["x", "ax"], {}),
            ("Identity", {"x": (7, 3)}, {}, ["x"], {})]


@pytest.mark.parametrize("case", RESHAPES, ids=[c[0] + str(c[1]["x"]) for c in RESHAPES])
def test_reshape_family(case):
    """The output is the graph's output: the copy writes it in place (an alias would not)."""
    op, ins, consts, names, attrs = case
    blob = _blob([node(op, names, ["y"], **attrs)], ins, consts)
    _check(blob, _feed(np.random.default_rng(7), ins))


def test_chain_between_quantize_ops():
    """Pad, Transpose, Reshape, Slice in a row on a float input (open_nsfw's and oww_embedding's entrance), then a
    QuantizeLinear: one cpu segment. (ORT's QDQ propagation, which vkinfer follows (model/qdq_rules.py), moves the
    QuantizeLinear up the moves: its node takes another name, so the check names the moves.)"""
    nodes = [node("Pad", ["x", "p"], ["a"], name="pad"), node("Transpose", ["a"], ["b"], perm=[0, 3, 1, 2], name="tr"),
             node("Slice", ["b", "st", "en", "ax", "sp"], ["c"], name="sl"),
             node("Reshape", ["c", "sh"], ["d"], name=NAME), node("QuantizeLinear", ["d", "s", "z"], ["y"], name="ql")]
    consts = {"p": _i64(0, 1, 2, 0, 0, 1, 0, 0), "st": _i64(-1), "en": _i64(-100), "ax": _i64(2), "sp": _i64(-2),
              "sh": _i64(1, -1), "s": F32(0.05), "z": np.uint8(128)}
    blob = model(nodes, {"x": (F32, (1, 6, 5, 3))}, consts, {"y": np.uint8})
    feed = {"x": np.random.default_rng(8).uniform(-5, 5, (1, 6, 5, 3)).astype(F32)}
    # In a vulkan session the moves after the (moved) QuantizeLinear are 8-bit: Vulkan takes them.
    sess = check(blob, feed, ort_run(blob, feed), where="cpu", nodes=["pad", "tr", "sl", NAME],
                 on_vulkan={"pad": "cpu", "tr": "vulkan", "sl": "vulkan", NAME: "vulkan"})
    assert set(sess["cpu"].placement.values()) == {"cpu"}
    assert sess["cpu"].plan(feed).native_calls == 1


CONCATS = [([(2, 3, 4), (2, 1, 4), (2, 5, 4)], 1), ([(3, 2), (3, 7)], -1), ([(1, 4, 5, 3), (2, 4, 5, 3)], 0),
           ([(7,), (1,), (2,)], 0), ([(2, 3, 4, 5, 2), (2, 3, 4, 1, 2)], 3)]


@pytest.mark.parametrize("case", CONCATS, ids=[str(c) for c in CONCATS])
def test_concat(case):
    shapes, axis = case
    ins = {f"x{i}": s for i, s in enumerate(shapes)}
    blob = _blob([node("Concat", list(ins), ["y"], axis=axis)], ins)
    _check(blob, _feed(np.random.default_rng(9), ins))


def test_concat_int32_with_a_constant():
    blob = _blob([node("Concat", ["x", "c"], ["y"], axis=1)], {"x": (2, 3)}, {"c": np.array([[7], [-9]], np.int32)},
                 dtype=np.int32)
    _check(blob, _feed(np.random.default_rng(10), {"x": (2, 3)}, np.int32))


def test_split_with_sizes():
    """A Split with constant sizes becomes one Slice per output (moves.split_to_slices), each on the cpu."""
    blob = model([node("Split", ["x", "sp"], ["y0", "y1", "y2"], axis=-1),
                  node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, (2, 3, 10)), "q": (np.uint8, (4,))}, {"sp": _i64(3, 0, 7), "s": F32(0.5)},
                 {"y0": F32, "y2": F32, "qf": F32})
    feed = _feed(np.random.default_rng(12), {"x": (2, 3, 10)})
    _check(blob, feed, nodes=[f"{NAME}#0", f"{NAME}#2"])


GATHERS = [((5, 4), [3, -1, 0, 0], 0), ((2, 3, 4), [[3, -1], [0, 0]], 2), ((2, 7, 3), 4, 1), ((6,), [[5]], 0)]


@pytest.mark.parametrize("case", GATHERS, ids=[str(c) for c in GATHERS])
def test_gather(case):
    shape, idx, axis = case
    blob = _blob([node("Gather", ["x", "i"], ["y"], axis=axis)], {"x": shape}, {"i": np.array(idx, np.int64)})
    _check(blob, _feed(np.random.default_rng(13), {"x": shape}))


def test_other_moves():
    """DepthToSpace, SpaceToDepth, Tile, Expand and nearest Resize on floats go through the same gather."""
    rng = np.random.default_rng(14)
    cases = [(node("DepthToSpace", ["x"], ["y"], blocksize=2, mode="CRD"), {"x": (1, 8, 3, 2)}, {}),
             (node("SpaceToDepth", ["x"], ["y"], blocksize=2), {"x": (1, 3, 4, 6)}, {}),
             (node("Tile", ["x", "r"], ["y"]), {"x": (2, 3)}, {"r": _i64(2, 3)}),
             (node("Expand", ["x", "e"], ["y"]), {"x": (3, 1)}, {"e": _i64(2, 3, 4)}),
             (node("Resize", ["x", "", "sc"], ["y"], mode="nearest"), {"x": (1, 2, 3, 4)},
              {"sc": F32([1, 1, 2, 1.5])})]
    for n, ins, consts in cases:
        blob = _blob([n], ins, consts)
        _check(blob, _feed(rng, ins))


def test_refused_moves_stay_on_the_host_with_a_reason():
    """Parameters that are not constant, a NaN pad value: the host runs them (ORT's bits), naming why."""
    feed = _feed(np.random.default_rng(15), {"x": (3, 5)}) | {"st": _i64(1), "en": _i64(4)}
    blob = model([node("Slice", ["x", "st", "en"], ["y"]), node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, (3, 5)), "st": (np.int64, (1,)), "en": (np.int64, (1,)), "q": (np.uint8, (4,))},
                 {"s": F32(0.5)}, {"y": F32, "qf": F32})
    want = ort_run(blob, feed)
    for dev in ("cpu", "vulkan"):
        sess = vkinfer.InferenceSession(blob, device=dev)
        got = sess.run(None, feed)
        assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip(want, got, strict=True))
        assert sess.placement[NAME] == "host", sess.placement
    blob = _blob([node("Pad", ["x", "p", "v"], ["y"])], {"x": (3, 5)}, {"p": _i64(1, 0, 0, 1),
                                                                       "v": np.array(np.nan, F32)})
    sess = vkinfer.InferenceSession(blob, device="cpu")
    f = _feed(np.random.default_rng(16), {"x": (3, 5)})
    assert sess.placement[NAME] == "host"
    assert "representable" in sess.plan(f).why_host[NAME]
