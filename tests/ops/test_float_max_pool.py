"""float32 MaxPool in the native CPU graph (vkinfer/cpu/float_max_pool.py, cpu_fallback/src/ops/float_maxpool.c)
against ONNX Runtime's CPU EP (one thread, nodes as written), on tables of signed zeros, NaN, infinities and
denormals: ORT picks one of four loops by the geometry (MaxPool-8's own loop for dilation, MLAS's generic, global
and vector kernels), each taking the maximum with its own operand order, so every kind is in the table. The node
runs on the cpu device in cpu and Vulkan sessions.

The model carries an unrelated DequantizeLinear branch so vkinfer takes it (8-bit models only) while MaxPool reads
a float graph input. Every device is compared with ORT on every table, the reference device too (its own kernel:
vkinfer/reference/float_max_pool.py, ORT's four loops in numpy)."""

from __future__ import annotations

import numpy as np
import pytest
from support.agree import run_devices

import vkinfer

from ._build import NAME, check, model, node, ort_run

F32 = np.float32
EDGE = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -1e-45, 3.4028235e38, -3.4028235e38],
                F32)

# (input shape, attributes): the loop ORT takes in the comment.
CASES = [
    ((1, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2])),                      # vector, stride 2
    ((1, 2, 7, 9), dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])),   # vector, stride 1, pads
    ((2, 3, 5, 11), dict(kernel_shape=[1, 2], strides=[1, 2])),                     # vector: oww_embedding's form
    ((1, 2, 9, 7), dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1)),         # vector, ceil_mode
    ((1, 2, 6, 5), dict(kernel_shape=[2, 3], strides=[2, 1], pads=[1, 2, 0, 1], ceil_mode=1)),
    ((1, 3, 10, 13), dict(kernel_shape=[3, 3], strides=[2, 3], pads=[1, 1, 1, 1])),  # generic: stride 3
    ((1, 2, 9, 11), dict(kernel_shape=[2, 4], strides=[3, 4], ceil_mode=1)),        # generic, ceil_mode
    ((1, 1, 4, 40), dict(kernel_shape=[2, 33], strides=[1, 1])),                    # generic: kernel > 32
    ((1, 2, 5, 7), dict(kernel_shape=[5, 7])),                                      # global
    ((1, 2, 3, 3), dict(kernel_shape=[3, 3])),                                      # global, 9 = 2 * 4 + 1
    ((1, 2, 5, 7), dict(kernel_shape=[5, 7], pads=[1, 0, 0, 0])),                   # kernel = image, padded
    ((1, 2, 9, 10), dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 1, 1])),  # MaxPool-8's loop
    ((1, 2, 8, 9), dict(kernel_shape=[3, 2], dilations=[1, 3], strides=[2, 1], ceil_mode=1)),
    ((1, 4, 1, 1), dict(kernel_shape=[1, 1])),
    ((1, 2, 3, 2100), dict(kernel_shape=[2, 2], strides=[1, 2])),                   # generic: row past the buffer
]


def _blob(shape, attrs, opset: int = 13) -> bytes:
    return model([node("MaxPool", ["x"], ["y"], **attrs), node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, shape), "q": (np.uint8, (4,))}, {"s": F32(0.5)}, {"y": F32, "qf": F32}, opset=opset)


def _edge(rng, shape) -> np.ndarray:
    """Edge values, ties of +-0, all -inf rows and NaN, among ordinary values."""
    n = int(np.prod(shape))
    r = rng.random(n)
    v = np.where(r < 0.3, rng.choice(EDGE, n), np.where(r < 0.7, rng.choice(F32([0.0, -0.0, -np.inf]), n),
                                                       rng.uniform(-2, 2, n)))
    return v.astype(F32).reshape(shape)


def _feed(x) -> dict:
    return {"x": x, "q": np.arange(4, dtype=np.uint8)}


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}-{sorted(c[1].items())}" for c in CASES])
def test_edge_tables(case):
    shape, attrs = CASES[case]
    blob = _blob(shape, attrs)
    rng = np.random.default_rng(case)
    for k in range(4):
        x = _edge(rng, shape)
        if k == 3:  # all -inf windows and all ties
            x = rng.choice(F32([0.0, -0.0, -np.inf]), x.shape).astype(F32)
        run_devices(blob, _feed(x), want=ort_run(blob, _feed(x)), what=f"table {k}")
    for d in ("cpu", "vulkan"):
        assert vkinfer.InferenceSession(blob, device=d).placement[NAME] == "cpu"


@pytest.mark.parametrize("case", [0, 3, 5, 8, 11])
def test_random_all_devices(case):
    shape, attrs = CASES[case]
    blob = _blob(shape, attrs)
    x = np.random.default_rng(case).uniform(-3, 3, shape).astype(F32)
    check(blob, _feed(x), ort_run(blob, _feed(x)), where="cpu", nodes=[NAME])


def test_opset_8_without_dilations():
    blob = _blob((1, 2, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2]), opset=10)
    x = _edge(np.random.default_rng(7), (1, 2, 7, 7))
    run_devices(blob, _feed(x), want=ort_run(blob, _feed(x)))


def test_indices_output_stays_on_the_host():
    blob = model([node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2]),
                  node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, (1, 2, 4, 4)), "q": (np.uint8, (4,))}, {"s": F32(0.5)},
                 {"y": F32, "i": np.int64, "qf": F32})
    x = np.random.default_rng(0).uniform(-3, 3, (1, 2, 4, 4)).astype(F32)
    sess = vkinfer.InferenceSession(blob, device="cpu")
    assert sess.placement[NAME] == "host"
    assert "Indices" in sess.plan(_feed(x)).why_host[NAME]


# GlobalMaxPool (and MaxPool whose kernel is the image): MLAS's global kernel, 4 lanes over the flat image from the
# lowest float by SSE's max (r > x ? r : x), the lanes folded (l0, l2), (l1, l3), then the hw % 4 rest by std::max.
GLOBAL_SPATIAL = [(1,), (3,), (7,), (1, 1), (1, 3), (2, 2), (3, 3), (1, 8), (3, 5), (4, 4), (5, 7), (3, 11),
                  (2, 2, 3), (1, 3, 3)]


def _global_rows(hw: int) -> np.ndarray:
    """One channel per (position, pattern): a NaN among zeros, among -inf, among 1 and among 5; 1 among NaN; +0
    among -0 and -0 among +0; -inf everywhere; and random +-0/NaN/+-inf/-FLT_MAX rows."""
    rows = []
    for i in range(hw):
        for base, odd in ((0.0, np.nan), (-np.inf, np.nan), (1.0, np.nan), (5.0, np.nan), (np.nan, 1.0),
                          (-0.0, 0.0), (0.0, -0.0), (np.nan, -np.inf)):
            r = np.full(hw, base, F32)
            r[i] = odd
            rows.append(r)
    rng = np.random.default_rng(hw)
    rows += list(rng.choice(F32([0.0, -0.0, np.nan, np.inf, -np.inf, -3.4028235e38, 1.0]), (24, hw)))
    rows.append(np.full(hw, -np.inf, F32))
    return np.stack(rows).astype(F32)


@pytest.mark.parametrize("op", ["GlobalMaxPool", "MaxPool"])
@pytest.mark.parametrize("spatial", GLOBAL_SPATIAL, ids=[str(s) for s in GLOBAL_SPATIAL])
def test_global_max_pool_nan_and_signed_zero_at_every_position(op, spatial):
    """NaN, +-0 and -inf at every position of images of 1 to 35 values (1-, 2- and 3-D): every device equals ORT,
    GlobalMaxPool on the cpu device (MaxPool of other ranks than 2 stays on the host)."""
    hw = int(np.prod(spatial))
    x = _global_rows(hw).reshape(1, -1, *spatial)
    attrs = {"kernel_shape": list(spatial)} if op == "MaxPool" else {}
    blob = model([node(op, ["x"], ["y"], **attrs), node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, x.shape), "q": (np.uint8, (4,))}, {"s": F32(0.5)}, {"y": F32, "qf": F32}, opset=13)
    run_devices(blob, _feed(x), want=ort_run(blob, _feed(x)))
    if op == "GlobalMaxPool" or len(spatial) == 2:
        for d in ("cpu", "vulkan"):
            assert vkinfer.InferenceSession(blob, device=d).placement[NAME] == "cpu"


def test_global_max_pool_random_shapes():
    """Random NCHW shapes and values (with a few NaN and zeros): every device equals ORT, native."""
    rng = np.random.default_rng(21)
    for _ in range(6):
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 9)), int(rng.integers(1, 15)), int(rng.integers(1, 15)))
        x = rng.uniform(-3, 3, shape).astype(F32)
        x = np.where(rng.random(shape) < 0.05, rng.choice(F32([np.nan, 0.0, -0.0, -np.inf]), shape), x).astype(F32)
        blob = model([node("GlobalMaxPool", ["x"], ["y"]), node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                     {"x": (F32, shape), "q": (np.uint8, (4,))}, {"s": F32(0.5)}, {"y": F32, "qf": F32}, opset=13)
        check(blob, _feed(x), ort_run(blob, _feed(x)), where="cpu", nodes=[NAME])
