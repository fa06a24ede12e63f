"""float32 ReduceSum / ReduceMean / ReduceMax / ReduceMin in the native CPU graph (vkinfer/cpu/float_reduce.py,
cpu_fallback/src/ops/float_reduce.c) against ONNX Runtime's CPU EP (one intra-op thread) bit for bit, asserting that
the node runs on the cpu device in cpu and vulkan sessions.

The data is tie-prone: sums of values of very different magnitudes (1e8 and 0.1), signed zeros (a column of -0
sums to +0 in ORT's generic loop and to -0 on its RK path), NaN and infinities for Max/Min (which of +0/-0, and
whether a NaN stays, follow the loop's order). Any other summation order (pairwise, reversed, lanes of 4 or 8,
blocks of 128) fails these tables; `test_orders_are_distinguished` shows it. Every device is compared with ORT,
the reference device too (its own kernels: vkinfer/reference/float_reduce.py). Shapes whose reduced axes are
innermost (KR, every axis) take Eigen's per-row 4-lane order (ORT's FastReduceKR and aggall), reproduced and asserted
native here with +-0 and NaN at every position of rows at every 16-byte phase; shapes ORT reduces with MLAS's SGEMM
or Eigen's rowwise reductions (KRK with several outer blocks, RKR) stay on the host with that reason."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from support.agree import run_devices

import vkinfer
from vkinfer.cpu.float_reduce import fast_shape, ort_loop

from ._build import NAME, model, node, ort_run

F32 = np.float32
OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"]
TIES = F32([0.1, 0.2, 0.3, 1e8, 1.0, 3.0, 0.7, 0.0, 1e-3, 0.75, 16777216.0, 1e-45])


def _blob(op: str, shape, axes, keepdims: int = 1, opset: int = 18, **attrs) -> bytes:
    """One reduction over a float32 input x, the axes an input (opset 18) or an attribute (opset 13), plus an
    unrelated DequantizeLinear branch (vkinfer runs 8-bit models only)."""
    consts = {"s": F32(0.5)}
    ins = ["x"]
    if opset >= 18 or op == "ReduceSum":
        if axes is not None:
            consts["ax"] = np.array(axes, np.int64)
            ins.append("ax")
    elif axes is not None:
        attrs["axes"] = list(axes)
    return model([node(op, ins, ["y"], keepdims=keepdims, **attrs),
                  node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, tuple(shape)), "q": (np.uint8, (4,))}, consts, {"y": F32, "qf": F32}, opset=opset)


def _data(rng, shape, op: str) -> np.ndarray:
    """Tie-prone values: magnitudes 1e8 apart, signed zeros; NaN and infinities for Max/Min (and a few for sums)."""
    n = int(np.prod(shape))
    v = rng.choice(TIES, n) * rng.choice(F32([1, -1]), n) * rng.choice(F32([1, 1, 0.5, 2, 1.5]), n)
    if op in ("ReduceMax", "ReduceMin"):
        v = np.where(rng.random(n) < 0.05, rng.choice(F32([np.nan, np.inf, -np.inf]), n), v)
    return v.astype(F32).reshape(shape)


def _zeros(rng, shape) -> np.ndarray:
    """Only +0 and -0, with whole columns of -0: the sign of each sum tells the loop's start."""
    v = np.where(rng.random(shape) < 0.7, F32(-0.0), F32(0.0)).astype(F32)
    v[..., ::3] = -0.0
    return v


def _check(blob: bytes, feeds: list[dict]) -> None:
    for feed in feeds:
        feed = {k: _aligned(v) for k, v in feed.items()}  # Eigen's packets start at ORT's 16-byte boundaries
        run_devices(blob, feed, want=ort_run(blob, feed))
    for dev in ("cpu", "vulkan"):
        sess = vkinfer.InferenceSession(blob, device=dev)
        assert sess.placement[NAME] == "cpu", (dev, sess.placement)


# (shape, axes, ORT's loop): 1 = its RK path (first row copied), 0 = its generic loop, 3 = Eigen's redux of each
# contiguous row (the reduced axes innermost: KR, or every axis).
SHAPES = [((1, 7, 7, 1024), [1, 2], 0),  # open_nsfw's global pool (K R K with one outer block)
          ((1, 7, 7, 33), [-3, -2], 0), ((49, 1024), [0], 1), ((17, 300), [0], 1), ((17, 256), [0], 0),
          ((16, 300), [0], 0), ((10, 20), [0], 0), ((30, 4), [0], 0), ((1, 5), [0], 0), ((6, 5, 4), [0, 1], 0),
          ((4, 7, 3, 5), [0, 2], 0), ((4, 7, 3, 5), [1, 3], 0), ((3, 1, 4), [0, 2], 0), ((2, 3, 4, 5, 3), [0, 2, 4], 0),
          ((1, 1, 9), [1], 0), ((1, 300, 3), [1], 0), ((1, 3, 5, 7), [3, 1], 0),
          ((300, 17), [1], 3), ((5, 3), [-1], 3), ((2, 3, 4), [0, 1, 2], 3), ((37,), [0], 3),
          ((2, 8, 9, 11), [2, 3], 3), ((1, 16, 7, 7), [2, 3], 3), ((2, 3, 14, 14), [-2, -1], 3), ((4, 1), [1], 3),
          ((3, 2, 1), [1, 2], 3), ((1, 1, 8, 32), [0, 1, 2, 3], 3), ((2, 5, 257), [1, 2], 3), ((3, 1030), [1], 3)]
# ORT's KRK path with several outer blocks (4: MLAS's M = 1 SGEMM per block for sums, Eigen's rowwise redux for
# Max/Min) and RKR path with several kept elements (5: Eigen's redux of each contiguous run, folded). Vkinfer ran
# these on the host in the generic loop's order before: with NaN that differs from ORT by more than a zero's sign.
BLOCK_SHAPES = [((2, 49, 33), [1], 4), ((3, 130, 5), [1], 4), ((2, 7, 1), [1], 4), ((4, 3, 2), [1], 4),
                ((2, 9, 6, 5), [1, 2], 4), ((5, 9, 13), [1], 4), ((3, 4, 5), [0, 2], 5), ((2, 6, 7, 3), [0, 3], 5),
                ((5, 2, 1), [0, 2], 5), ((4, 3, 2, 9), [0, 2, 3], 5)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", BLOCK_SHAPES, ids=[f"{s}{a}" for s, a, _ in BLOCK_SHAPES])
def test_reduce_table_krk_rkr(op, case):
    shape, axes, loop = case
    sizes, red = fast_shape(shape, [a % len(shape) for a in axes])
    assert ort_loop(sizes, red) == loop
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    blob = _blob(op, shape, axes, keepdims=len(shape) % 2)
    _check(blob, [{"x": _data(rng, shape, op), "q": np.arange(4, dtype=np.uint8)},
                  {"x": _zeros(rng, shape), "q": np.arange(4, dtype=np.uint8)}])


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", SHAPES, ids=[f"{s}{a}" for s, a, _ in SHAPES])
def test_reduce_table(op, case):
    shape, axes, loop = case
    sizes, red = fast_shape(shape, [a % len(shape) for a in axes])
    assert ort_loop(sizes, red) == loop
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    blob = _blob(op, shape, axes, keepdims=len(shape) % 2)
    _check(blob, [{"x": _data(rng, shape, op), "q": np.arange(4, dtype=np.uint8)},
                  {"x": _zeros(rng, shape), "q": np.arange(4, dtype=np.uint8)}])


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceMin"])
def test_axes_attribute_opset13(op):
    blob = _blob(op, (2, 5, 3, 4), [1, -1], opset=13)
    rng = np.random.default_rng(3)
    _check(blob, [{"x": _data(rng, (2, 5, 3, 4), op), "q": np.arange(4, dtype=np.uint8)}])


def test_noop_with_empty_axes_copies():
    blob = _blob("ReduceSum", (3, 4), None, noop_with_empty_axes=1)
    _check(blob, [{"x": _data(np.random.default_rng(4), (3, 4), "ReduceMax"), "q": np.arange(4, dtype=np.uint8)}])


def test_every_merged_shape_has_an_order():
    """No float reduction is left to the host for its order: every merged shape of up to 3 axes (and the generic
    loop's 4 or more) maps to a loop vkinfer reproduces."""
    for shape, axes in (((2, 49, 33), [1]), ((3, 130, 5), [1]), ((3, 4, 5), [0, 2]), ((300, 17), [1]), ((37,), [0]),
                        ((17, 300), [0]), ((2, 3, 4, 5), [0, 2])):
        assert ort_loop(*fast_shape(shape, axes)) is not None


@pytest.mark.parametrize("op", OPS)
def test_random_shapes_and_axes_with_nan(op):
    """Random shapes, random axes sets (every merged kind), data with +-0, NaN and infinities: every device equals
    ORT bit for bit, the node on the cpu device."""
    rng = np.random.default_rng(OPS.index(op) + 40)
    for _ in range(10):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(v) for v in rng.integers(1, 8, rank))
        axes = sorted(int(a) for a in rng.choice(rank, int(rng.integers(1, rank + 1)), replace=False))
        n = int(np.prod(shape))
        x = np.where(rng.random(n) < 0.25, rng.choice(F32([np.nan, np.inf, -np.inf, 0.0, -0.0]), n),
                     rng.standard_normal(n)).astype(F32).reshape(shape)
        _check(_blob(op, shape, axes, keepdims=rank % 2), [{"x": x, "q": np.arange(4, dtype=np.uint8)}])


def test_non_constant_axes_stay_on_the_host():
    blob = model([node("ReduceSum", ["x", "ax"], ["y"]), node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, (3, 4)), "ax": (np.int64, (1,)), "q": (np.uint8, (4,))}, {"s": F32(0.5)},
                 {"y": F32, "qf": F32}, opset=18)
    sess = vkinfer.InferenceSession(blob, device="cpu")
    feed = {"x": np.ones((3, 4), F32), "ax": np.array([1], np.int64), "q": np.arange(4, dtype=np.uint8)}
    plan = sess.plan(feed)  # shapes known only with the feed: the plan of that signature
    assert plan.placement[NAME] == "host"
    assert "not constant" in plan.why_host[NAME]


def test_orders_are_distinguished():
    """The tables above tell the orders apart: on the real shape's data, ORT's sequential sum from 0.0f differs
    from numpy's pairwise sum, from the reversed order and from 8 interleaved lanes."""
    rng = np.random.default_rng(6)
    x = _data(rng, (1, 7, 7, 1024), "ReduceSum")
    want = ort_run(_blob("ReduceSum", x.shape, [1, 2], keepdims=0), {"x": x, "q": np.arange(4, dtype=np.uint8)})[0]
    want = want.reshape(-1)
    rows = x.reshape(49, 1024)
    seq = np.zeros(1024, F32)
    for r in rows:
        seq = seq + r
    assert np.array_equal(want, seq)
    rev = np.zeros(1024, F32)
    for r in rows[::-1]:
        rev = rev + r
    lanes = np.zeros((8, 1024), F32)
    for i, r in enumerate(rows):
        lanes[i % 8] = lanes[i % 8] + r
    lane_sum = lanes[0]
    for k in range(1, 8):
        lane_sum = lane_sum + lanes[k]
    pairwise = np.ascontiguousarray(rows.T).sum(1, dtype=F32)  # numpy: pairwise along a contiguous axis
    for other in (pairwise, rev, lane_sum):
        assert not np.array_equal(want, other)


# Reduce-all Max/Min: Eigen's 4-lane maxCoeff/minCoeff (ORT's aggall). Sizes around the packet (4) and the two
# accumulators' step (8), and oww_melspec's [1, 1, 8, 32].
ALL_SIZES = [1, 2, 3, 4, 5, 7, 8, 9, 11, 12, 13, 15, 16, 17, 20, 23, 24, 31, 32, 33, 63, 64, 65, 255, 256, 257]


def _aligned(x: np.ndarray) -> np.ndarray:
    """A 64-byte aligned copy: ORT reads a graph input in place, and Eigen's packets start at its first 16-byte
    aligned element, so a misaligned feed moves ORT's order (its own tensors, as in a real model, are aligned)."""
    raw = np.empty(x.nbytes + 64, np.uint8)
    off = -raw.ctypes.data % 64
    v = raw[off:off + x.nbytes].view(x.dtype).reshape(x.shape)
    v[...] = x
    return v


def _all_blob(op: str, shape) -> bytes:
    return _blob(op, shape, None, keepdims=len(shape) % 2, opset=13)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("n", ALL_SIZES)
def test_reduce_all_max_min_signed_zero_and_nan_at_every_position(op, n):
    """+0 among -0 (and -0 among +0), a NaN, and a NaN among zeros at every position; random tables of +-0, NaN,
    +-inf and 1: every device gives ORT's bits, the node on the cpu device."""
    shape = (n,)
    blob = _all_blob(op, shape)
    feeds = []
    for i in range(n):
        for base, odd in ((F32(-0.0), F32(0.0)), (F32(0.0), F32(-0.0)), (F32(0.0), F32(np.nan)),
                          (F32(-np.inf), F32(np.nan))):
            x = np.full(shape, base, F32)
            x[i] = odd
            feeds.append(x)
    rng = np.random.default_rng(n)
    feeds += [rng.choice(F32([0.0, -0.0, np.nan, 1.0, -1.0, np.inf, -np.inf]), shape).astype(F32) for _ in range(8)]
    big = [_aligned(x) for x in feeds]
    o = ort.SessionOptions()
    o.intra_op_num_threads = o.inter_op_num_threads = 1
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # as ort_run: nodes as written
    oracle = ort.InferenceSession(blob, o, providers=["CPUExecutionProvider"])
    want = np.concatenate([oracle.run(None, {"x": x, "q": np.arange(4, dtype=np.uint8)})[0].reshape(1) for x in big])
    sessions = {d: vkinfer.InferenceSession(blob, device=d) for d in ("reference", "cpu", "vulkan")}
    for d, sess in sessions.items():
        got = np.concatenate([sess.run(None, {"x": x, "q": np.arange(4, dtype=np.uint8)})[0].reshape(1) for x in big])
        same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
        assert same.all(), (d, np.argwhere(~same)[:4].tolist())
        if d != "reference":
            assert sess.placement[NAME] == "cpu", (d, sess.placement)


@pytest.mark.parametrize("op", ["ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("shape", [(1, 1, 8, 32), (2, 3, 4), (3, 1, 7)])
def test_reduce_all_max_min_tables(op, shape):
    """Every axis of a rank-3/4 tensor (oww_melspec's log-mel peak): tie-prone tables, every device."""
    rng = np.random.default_rng(len(shape))
    blob = _all_blob(op, shape)
    _check(blob, [{"x": _aligned(_data(rng, shape, op)), "q": np.arange(4, dtype=np.uint8)},
                  {"x": _aligned(_zeros(rng, shape)), "q": np.arange(4, dtype=np.uint8)}])


def test_reduce_all_order_is_eigen_not_sequential():
    """The table tells Eigen's order from the sequential loop: +0 at element 4 of eight -0 is ORT's answer only
    with the two packet accumulators (sequential keeps the first -0)."""
    from vkinfer.reference.float_reduce import eigen_redux, fold_first

    x = np.full(8, -0.0, F32)
    x[4] = 0.0
    want = ort_run(_all_blob("ReduceMax", (8,)), {"x": _aligned(x), "q": np.arange(4, dtype=np.uint8)})[0]
    assert np.signbit(fold_first(x[:, None], "ReduceMax")[0])
    assert np.signbit(want) == np.signbit(eigen_redux(x, "ReduceMax"))


# KR: Eigen's redux of each contiguous row, row r starting r * W floats into ORT's aligned buffer (its first
# (-r * W) % 4 elements the unaligned head). Row lengths around the packet (4), the two accumulators' step (8) and
# the head (W % 4 = 1, 2, 3 put rows at every phase).
ROW_LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 15, 16, 17, 19, 21, 23, 25, 31, 33, 49]


def _position_rows(w: int, op: str) -> np.ndarray:
    """One row per (position, pattern): +0 among -0, -0 among +0, NaN among zeros, NaN among -inf, and for sums
    1e8 among ties (the rounding tells the order); each pattern repeated 4 times so it meets every row phase."""
    pats = [(-0.0, 0.0), (0.0, -0.0), (0.0, np.nan), (-np.inf, np.nan)] if op in ("ReduceMax", "ReduceMin") else \
        [(-0.0, 0.0), (0.0, -0.0), (0.3, 1e8), (1e8, 0.3), (-0.0, np.nan)]
    rows = []
    for i in range(w):
        for base, odd in pats:
            r = np.full(w, base, F32)
            r[i] = odd
            rows += [r] * 4
    if op in ("ReduceSum", "ReduceMean"):
        rng = np.random.default_rng(w)
        rows += list(rng.choice(TIES, (16, w)) * rng.choice(F32([1, -1]), (16, w)))
    return np.stack(rows).astype(F32)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("w", ROW_LENGTHS)
def test_eigen_rows_signed_zero_nan_and_rounding_at_every_position(op, w):
    """Rows of W over the last axis (KR): every position of each pattern at every 16-byte phase of its row; every
    device equals ORT, the node on the cpu device."""
    x = _position_rows(w, op)
    blob = _blob(op, x.shape, [1], keepdims=w % 2)
    _check(blob, [{"x": x, "q": np.arange(4, dtype=np.uint8)}])


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
def test_random_shapes_with_innermost_axes(op):
    """Random shapes and innermost axes (KR, R), normal data of mixed magnitudes: every device equals ORT."""
    rng = np.random.default_rng(11)
    for _ in range(12):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(v) for v in rng.integers(1, 9, rank))
        k = int(rng.integers(1, rank + 1))
        x = (rng.standard_normal(shape) * rng.choice(F32([1e-3, 1, 1e4]), shape)).astype(F32)
        blob = _blob(op, shape, list(range(rank - k, rank)), keepdims=k % 2)
        _check(blob, [{"x": x, "q": np.arange(4, dtype=np.uint8)}])


def test_spatial_max_of_a_quantize_static_model_is_native():
    """ReduceMax over axes (2, 3) of an NCHW tensor (a quantize_static model's spatial max): native, ORT's bits on
    +-0/NaN/inf tables."""
    rng = np.random.default_rng(12)
    shape = (1, 24, 7, 7)
    blob = _blob("ReduceMax", shape, [2, 3], keepdims=1)
    _check(blob, [{"x": _data(rng, shape, "ReduceMax"), "q": np.arange(4, dtype=np.uint8)},
                  {"x": _zeros(rng, shape), "q": np.arange(4, dtype=np.uint8)}])


def test_generic_order_is_not_orts_for_innermost_axes():
    """The tables tell Eigen's per-row order from the generic loop vkinfer ran before (from 0.0f, in index order):
    on KR rows of tie-prone data the generic order differs from ORT, Eigen's (eigen_rows) does not."""
    from vkinfer.reference.float_reduce import eigen_rows

    rng = np.random.default_rng(13)
    x = _aligned(_data(rng, (64, 37), "ReduceSum"))
    want = ort_run(_blob("ReduceSum", x.shape, [1], keepdims=0), {"x": x, "q": np.arange(4, dtype=np.uint8)})[0]
    generic = np.zeros(64, F32)
    for c in range(37):
        generic = generic + x[:, c]
    eigen = eigen_rows(x, np.arange(64) * 37, "ReduceSum")
    assert np.array_equal(want.view(np.uint32), eigen.view(np.uint32))
    assert not np.array_equal(want.view(np.uint32), generic.view(np.uint32))
