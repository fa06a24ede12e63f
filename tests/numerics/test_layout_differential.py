"""Layout-changing ops on 8-bit tensors, differentially: ONNX Runtime (or litert) vs the reference, cpu and vulkan.

Reshape, Flatten, Squeeze, Unsqueeze and Transpose on generated 2- to 6-D shapes, with the targets that broke
(2026-11: [-1, C], [N*H*W, C] and [1, -1, C] of a 4-D tensor returned NHWC order on cpu and vulkan), each alone,
after a QLinearConv, and before a QLinearMatMul or QGemm; the same for TFLite's RESHAPE, SQUEEZE, TRANSPOSE and
FULLY_CONNECTED after a 4-D tensor against litert. The rule under test is vkinfer/layout.py; `test_alias_rule`
checks it against the element orders themselves.
"""

from __future__ import annotations

import math

import numpy as np
import onnxruntime as ort
import pytest
import tflite
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper
from support.agree import run_devices

from vkinfer import layout
from vkinfer.testing.onnx_builder import MS, make_model
from vkinfer.testing.tflite_zoo import ModelBuilder, litert_run

DTYPES = (np.uint8, np.int8)
SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                print_blob=True)


# ------------------------------------------------------------------------------------------- the rule itself

def _device_order(shape) -> np.ndarray:
    """The row-major element indices in the order a device stores them (the definition, by brute force)."""
    return np.arange(math.prod(shape)).reshape(shape).transpose(layout.form_perm(shape)).reshape(-1)


@settings(max_examples=300, **SETTINGS)
@given(st.data())
def test_alias_rule(data):
    """same_order agrees with the stored element orders, for reshapes and transposes; aliases() needs that."""
    rank = data.draw(st.integers(0, 6))
    xs = tuple(data.draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    ys = tuple(data.draw(_factorisation(math.prod(xs))))
    want = np.array_equal(_device_order(xs), _device_order(ys))
    assert layout.same_order(xs, ys) == want, (xs, ys)
    assert layout.aliases("cpu", xs, ys) == want
    if layout.aliases("vulkan", xs, ys):
        assert want
    perm = tuple(data.draw(st.permutations(range(rank))))
    ts = tuple(xs[p] for p in perm)
    src = np.arange(math.prod(xs)).reshape(xs).transpose(perm)
    want_t = np.array_equal(_device_order(xs), src.transpose(layout.form_perm(ts)).reshape(-1))
    assert layout.same_order(xs, ts, perm) == want_t, (xs, perm)


def test_alias_rule_table():
    """The cases that broke, and the aliases that must stay free."""
    assert not layout.aliases("cpu", (1, 8, 8, 8), (64, 8))       # NHWC vs row-major
    assert not layout.aliases("vulkan", (1, 8, 8, 8), (64, 8))    # same (rows, width), other order
    assert not layout.aliases("vulkan", (1, 8, 8, 8), (1, 64, 8))
    assert layout.aliases("vulkan", (1, 8, 1, 1), (1, 8))         # a pooled tensor flattened
    assert layout.aliases("cpu", (2, 6, 3, 3), (2, 2, 3, 3, 3))   # the channel split of a shuffle
    assert layout.aliases("vulkan", (2, 6, 3, 3), (2, 2, 3, 3, 3))
    assert layout.aliases("cpu", (3, 1), (3,)) and not layout.aliases("vulkan", (3, 1), (3,))  # padding moves
    assert layout.aliases("vulkan", (2, 8), (4, 4))                # whole words: no padding to move
    assert layout.aliases("cpu", (1, 1, 5, 1), (1, 5, 1, 1), (0, 2, 1, 3))  # only size-1 axes move in the form
    with pytest.raises(ValueError, match="kind"):
        layout.aliases("gpu", (1,), (1,))


# ----------------------------------------------------------------------------------------------- strategies

@st.composite
def _factorisation(draw, total: int, max_rank: int = 6):
    """A shape with `total` elements, rank 1..max_rank."""
    primes, n, p = [], total, 2
    while n > 1:
        while n % p == 0:
            primes.append(p)
            n //= p
        p += 1
    rank = draw(st.integers(1, max_rank))
    dims = [1] * rank
    for q in primes:
        dims[draw(st.integers(0, rank - 1))] *= q
    return dims


@st.composite
def _targets(draw, shape: tuple[int, ...]):
    """A Reshape target for `shape` (maybe with one -1 or 0), preferring the channel-last targets that broke."""
    total = math.prod(shape)
    c = shape[1] if len(shape) == 4 else shape[-1]
    special = [[-1, c], [total // c, c], [1, -1, c], [-1], [1, -1], [shape[0], -1]]
    if draw(st.booleans()):
        target = list(draw(st.sampled_from(special)))
    else:
        target = draw(_factorisation(total))
        if draw(st.booleans()):
            target[draw(st.integers(0, len(target) - 1))] = -1
    return target


@st.composite
def _chain(draw, shape: tuple[int, ...], end_rank: int | None = None):
    """Layout nodes applied to a tensor of `shape`: [(op, attrs or None, int64 const input or None)], the output
    shape. `end_rank`: the last node gives that rank (a Reshape to [-1, K] or a Flatten)."""
    nodes, cur = [], tuple(shape)
    for _ in range(draw(st.integers(1, 2))):
        op = draw(st.sampled_from(["Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"]))
        r = len(cur)
        if op == "Reshape":
            t = draw(_targets(cur))
            known = math.prod(d for d in t if d != -1)
            new = tuple(math.prod(cur) // known if d == -1 else d for d in t)
            nodes.append(("Reshape", {}, np.array(t, np.int64)))
        elif op == "Transpose":
            perm = list(draw(st.permutations(range(r))))
            new = tuple(cur[p] for p in perm)
            nodes.append(("Transpose", {"perm": perm}, None))
        elif op == "Flatten":
            axis = draw(st.integers(-r, r))
            a = axis + r if axis < 0 else axis
            new = (math.prod(cur[:a]), math.prod(cur[a:]))
            nodes.append(("Flatten", {"axis": axis}, None))
        elif op == "Squeeze":
            ones = [i for i, d in enumerate(cur) if d == 1]
            if not ones or r <= 1:
                continue
            axes = draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))
            new = tuple(d for i, d in enumerate(cur) if i not in axes)
            nodes.append(("Squeeze", {}, np.array(axes, np.int64)))
        else:
            if r >= 6:
                continue
            k = draw(st.integers(1, 6 - r))
            axes = sorted(draw(st.lists(st.integers(0, r + k - 1), min_size=k, max_size=k, unique=True)))
            it = iter(cur)
            new = tuple(1 if i in axes else next(it) for i in range(r + k))
            nodes.append(("Unsqueeze", {}, np.array(axes, np.int64)))
        cur = new
    if end_rank is not None and len(cur) != end_rank:
        k = cur[-1] if cur else 1  # a Squeeze may have left a scalar
        nodes.append(("Reshape", {}, np.array([-1, k], np.int64)))
        cur = (math.prod(cur) // k, k)
    if not nodes:
        nodes.append(("Reshape", {}, np.array([-1], np.int64)))
        cur = (math.prod(cur),)
    return nodes, cur


# ------------------------------------------------------------------------------------------------- models

def _ort(model_bytes: bytes, feed: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.log_severity_level = 4
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"]).run(None, feed)


def _qint(rng, dtype, shape, lo=None, hi=None):
    info = np.iinfo(dtype)
    return rng.integers(info.min if lo is None else lo, (info.max if hi is None else hi) + 1, shape).astype(dtype)


def _model(dtype, in_shape, chain, context: str, rng) -> tuple[bytes, dict]:
    """x -> [QLinearConv] -> layout chain -> [QLinearMatMul | QGemm] -> y, and its feed."""
    dt = np.dtype(dtype)
    zp = np.array(3 if dt == np.uint8 else -5, dt)
    consts, nodes = {"sx": np.array(0.05, np.float32), "zx": zp}, []
    cur = "x"
    x_shape = in_shape
    if context == "conv":  # x (N, Cin, H, W) -> QLinearConv k x k -> in_shape (N, M, H, W)
        n, m, h, w = in_shape
        cin, k = int(rng.integers(1, 5)), int(rng.choice([1, 3]))
        x_shape = (n, cin, h, w)
        # |w| <= 63: no int16 pair saturation in ORT's x86 kernels without VNNI (ort_oracle.py)
        wq = _qint(rng, dt, (m, cin, k, k), *((0, 255) if dt == np.uint8 else (-63, 63)))
        consts.update(w=wq, sw=np.array(0.02, np.float32), zw=np.array(120 if dt == np.uint8 else 0, dt),
                      sy=np.array(0.05 * 0.02 * 8 * math.sqrt(cin * k * k) * (25 if dt == np.uint8 else 1),
                                  np.float32), zy=zp, b=rng.integers(-500, 500, m).astype(np.int32))
        nodes.append(helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "b"], ["c"],
                                      pads=[k // 2] * 4, kernel_shape=[k, k]))
        cur = "c"
    for i, (op, attrs, const) in enumerate(chain):
        ins = [cur]
        if const is not None:
            consts[f"k{i}"] = const
            ins.append(f"k{i}")
        nodes.append(helper.make_node(op, ins, [f"t{i}"], **attrs))
        cur = f"t{i}"
    if context in ("matmul", "gemm"):
        kdim = _shape_after(in_shape, chain)[-1]
        ncol = int(rng.integers(1, 6))
        bq = _qint(rng, dt, (kdim, ncol), *((0, 255) if dt == np.uint8 else (-63, 63)))
        consts.update(B=bq if context == "matmul" else np.ascontiguousarray(bq.T), sb=np.array(0.02, np.float32),
                      zb=np.array(128 if dt == np.uint8 else 0, dt),
                      sy=np.array(0.05 * 0.02 * 6 * math.sqrt(kdim) * (25 if dt == np.uint8 else 1), np.float32),
                      zy=zp)
        if context == "matmul":
            nodes.append(helper.make_node("QLinearMatMul", [cur, "sx", "zx", "B", "sb", "zb", "sy", "zy"], ["y"]))
        else:
            nodes.append(helper.make_node("QGemm", [cur, "sx", "zx", "B", "sb", "zb", "", "sy", "zy"], ["y"],
                                          domain="com.microsoft", transB=1))
    else:
        nodes.append(helper.make_node("Identity", [cur], ["y"]))
    m = make_model(nodes, {"x": (dt, x_shape)}, {"y": dt}, consts, domains=MS, name="layout")
    return m.SerializeToString(), {"x": _qint(rng, dt, x_shape)}


def _shape_after(shape, chain) -> tuple[int, ...]:
    cur = np.empty(shape, np.uint8)
    for op, attrs, const in chain:
        if op == "Reshape":
            cur = cur.reshape(const)
        elif op == "Transpose":
            cur = cur.transpose(attrs["perm"])
        elif op == "Flatten":
            a = attrs["axis"] + cur.ndim if attrs["axis"] < 0 else attrs["axis"]
            cur = cur.reshape(math.prod(cur.shape[:a]), -1)
        elif op == "Squeeze":
            cur = cur.squeeze(tuple(int(i) for i in const))
        else:
            cur = np.expand_dims(cur, tuple(int(i) for i in const))
    return cur.shape


def _shapes(min_rank=2, max_rank=6, max_elems=360):
    return st.integers(min_rank, max_rank).flatmap(
        lambda r: st.lists(st.integers(1, 5), min_size=r, max_size=r)).filter(
        lambda s: math.prod(s) <= max_elems).map(tuple)


def _check(model: bytes, feed: dict):
    run_devices(model, feed, want=_ort(model, feed))


@pytest.mark.parametrize("dtype", DTYPES, ids=["uint8", "int8"])
@settings(max_examples=120, **SETTINGS)
@given(data=st.data())
def test_alone(dtype, data):
    shape = data.draw(_shapes())
    chain, _ = data.draw(_chain(shape))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))
    _check(*_model(dtype, shape, chain, "alone", rng))


@pytest.mark.parametrize("dtype", DTYPES, ids=["uint8", "int8"])
@settings(max_examples=60, **SETTINGS)
@given(data=st.data())
def test_after_conv(dtype, data):
    shape = data.draw(_shapes(4, 4, 240))
    chain, _ = data.draw(_chain(shape))
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))
    _check(*_model(dtype, shape, chain, "conv", rng))


@pytest.mark.parametrize("context", ["matmul", "gemm"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["uint8", "int8"])
@settings(max_examples=40, **SETTINGS)
@given(data=st.data())
def test_before_matmul(dtype, context, data):
    shape = data.draw(_shapes(2, 6, 240))
    chain, out = data.draw(_chain(shape, end_rank=2 if context == "gemm" else None))
    if len(out) < 2:
        chain, out = chain + [("Reshape", {}, np.array([-1, out[-1]], np.int64))], (math.prod(out) // out[-1], out[-1])
    rng = np.random.default_rng(data.draw(st.integers(0, 2 ** 31)))
    _check(*_model(dtype, shape, chain, context, rng))


# The shapes and targets that broke, every one on every device (the hypothesis tests above draw around them).
CHANNEL_LAST = [((1, 8, 8, 8), [-1, 8]), ((1, 8, 8, 8), [64, 8]), ((2, 3, 4, 5), [-1, 3]), ((2, 3, 4, 5), [40, 3]),
                ((1, 6, 3, 2), [1, -1, 6]), ((1, 5, 1, 3), [-1, 5])]


@pytest.mark.parametrize("transpose", [False, True], ids=["direct", "after-transpose"])
@pytest.mark.parametrize("dtype", DTYPES, ids=["uint8", "int8"])
@pytest.mark.parametrize("shape,target", CHANNEL_LAST)
def test_channel_last_targets(shape, target, dtype, transpose):
    chain = [("Transpose", {"perm": [0, 2, 3, 1]}, None)] if transpose else []
    chain.append(("Reshape", {}, np.array(target, np.int64)))
    _check(*_model(dtype, shape, chain, "alone", np.random.default_rng(7)))


@pytest.mark.parametrize("dtype", DTYPES, ids=["uint8", "int8"])
@pytest.mark.parametrize("axis", range(-4, 5))
def test_flatten_every_axis_after_conv(dtype, axis):
    _check(*_model(dtype, (1, 6, 3, 5), [("Flatten", {"axis": axis}, None)], "conv", np.random.default_rng(axis + 4)))


# --------------------------------------------------------------------------------------------------- TFLite

def _tfl_model(dtype, shape, ops, rng) -> tuple[bytes, dict]:
    """x (NHWC `shape`) -> [DEPTHWISE_CONV_2D] -> RESHAPE / SQUEEZE / TRANSPOSE / FULLY_CONNECTED..., output out."""
    B, A = tflite.BuiltinOperator, tflite.BuiltinOptions
    dt = np.dtype(dtype)
    xp = (0.05, 3 if dt == np.uint8 else -5)
    m = ModelBuilder()
    x = m.tensor("x", shape, dt, None, *xp)
    cur, cur_shape, cur_q = x, tuple(shape), xp  # layout ops keep their input's scale and zero point (TFLite's
    for k, (op, arg) in enumerate(ops):           # converter writes them so; its kernels copy bytes)
        last = k == len(ops) - 1
        name = "out" if last else f"t{k}"
        if op == "dwconv":
            c = cur_shape[3]
            w = _qint(rng, dt, (1, 3, 3, c), *((0, 255) if dt == np.uint8 else (-127, 127)))
            tw = m.tensor(f"w{k}", w.shape, dt, w, 0.02, 128 if dt == np.uint8 else 0)
            tb = m.tensor(f"b{k}", (c,), np.int32, rng.integers(-300, 300, c).astype(np.int32), 0.05 * 0.02, 0)
            y_q = (0.05 * 0.02 * 300 * (20 if dt == np.uint8 else 1), xp[1])
            y = m.tensor(name, cur_shape, dt, None, *y_q)
            m.op(B.DEPTHWISE_CONV_2D, [cur, tw, tb], [y], A.DepthwiseConv2DOptions, Padding=tflite.Padding.SAME,
                 StrideW=1, StrideH=1, DepthMultiplier=1)
            new = cur_shape
        elif op == "reshape":
            t = list(arg)
            known = math.prod(d for d in t if d != -1)
            new = tuple(math.prod(cur_shape) // known if d == -1 else d for d in t)
            ts = m.tensor(f"s{k}", (len(t),), np.int32, np.array(t, np.int32))
            y = m.tensor(name, new, dt, None, *cur_q)
            m.op(B.RESHAPE, [cur, ts], [y], A.ReshapeOptions, NewShape=t)
        elif op == "squeeze":
            new = tuple(d for i, d in enumerate(cur_shape) if i not in arg)
            y = m.tensor(name, new, dt, None, *cur_q)
            m.op(B.SQUEEZE, [cur], [y], A.SqueezeOptions, SqueezeDims=list(arg))
        elif op == "transpose":
            new = tuple(cur_shape[p] for p in arg)
            tp = m.tensor(f"p{k}", (len(arg),), np.int32, np.array(arg, np.int32))
            y = m.tensor(name, new, dt, None, *cur_q)
            m.op(B.TRANSPOSE, [cur, tp], [y], A.TransposeOptions)
        else:  # fully_connected with K = arg (the input flattened to [-1, K])
            kdim, units = arg, int(rng.integers(1, 6))
            w = _qint(rng, dt, (units, kdim), *((0, 255) if dt == np.uint8 else (-127, 127)))
            tw = m.tensor(f"w{k}", w.shape, dt, w, 0.02, 128 if dt == np.uint8 else 0)
            tb = m.tensor(f"b{k}", (units,), np.int32, rng.integers(-300, 300, units).astype(np.int32),
                          np.float32(cur_q[0]) * np.float32(0.02), 0)
            new = (math.prod(cur_shape) // kdim, units)
            y_q = (cur_q[0] * 0.02 * 6 * math.sqrt(kdim) * (25 if dt == np.uint8 else 1), xp[1])
            y = m.tensor(name, new, dt, None, *y_q)
            m.op(B.FULLY_CONNECTED, [cur, tw, tb], [y], A.FullyConnectedOptions, FusedActivationFunction=0)
        cur, cur_shape = y, new
        cur_q = y_q if op in ("dwconv", "fully_connected") else cur_q
    return m.finish([x], [cur]), {"x": _qint(rng, dt, shape)}


@st.composite
def _tfl_case(draw):
    n, h, w, c = draw(st.tuples(st.integers(1, 2), st.integers(1, 5), st.integers(1, 5), st.integers(1, 6)))
    shape = (n, h, w, c)
    ops = [("dwconv", None)] if draw(st.booleans()) else []
    kind = draw(st.sampled_from(["reshape", "squeeze", "transpose", "fc_c", "fc_all"]))
    if kind == "reshape":
        ops.append(("reshape", draw(st.sampled_from([[-1, c], [n * h * w, c], [1, -1, c], [n, -1], [-1]]))))
    elif kind == "squeeze":
        ones = [i for i, d in enumerate(shape) if d == 1]
        ops.append(("squeeze", sorted(draw(st.lists(st.sampled_from(ones), min_size=1, unique=True))))
                   if ones else ("reshape", [-1, c]))
    elif kind == "transpose":
        ops.append(("transpose", list(draw(st.permutations(range(4))))))
    else:
        ops.append(("fully_connected", c if kind == "fc_c" else h * w * c))
    return shape, ops


@pytest.mark.parametrize("dtype", DTYPES, ids=["uint8", "int8"])
@settings(max_examples=40, **SETTINGS)
@given(case=_tfl_case(), seed=st.integers(0, 2 ** 31))
def test_tflite(dtype, case, seed):
    shape, ops = case
    model, feed = _tfl_model(dtype, shape, ops, np.random.default_rng(seed))
    run_devices(model, feed, want=[litert_run(model, feed)["out"]])


@pytest.mark.parametrize("dtype", DTYPES, ids=["uint8", "int8"])
def test_tflite_fully_connected_after_depthwise(dtype):
    """The fuzzed model's pattern: FULLY_CONNECTED fed straight by DEPTHWISE_CONV_2D (K = C: one row a pixel)."""
    model, feed = _tfl_model(dtype, (1, 4, 3, 6), [("dwconv", None), ("fully_connected", 6)],
                             np.random.default_rng(3))
    run_devices(model, feed, want=[litert_run(model, feed)["out"]])
