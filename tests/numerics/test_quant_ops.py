"""The quantized-domain ops ONNX Runtime emits, against ORT 1.31 on single-node models: com.microsoft
QLinearSoftmax (and DQ -> Softmax -> Q, which ORT fuses into it), QLinearReduceMean (ORT has no kernel: checked
against ORT's QLinearGlobalAveragePool, whose arithmetic defines it), QLinearAveragePool (channels_last,
ceil_mode), QGemm with transA=1, QLinearMatMul with both inputs activations (batched as in attention), blocked
QuantizeLinear / DequantizeLinear with output_dtype; every device; bad input naming the node.

QLinearSoftmax (vkinfer/reference/qlinear_softmax.py) equals ORT bit for bit (it was a pinned bound before issue
25; tests/ops/test_qlinear_softmax.py has the tie-heavy tables)."""

from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as TP
from onnx import helper
from support.agree import DEVICES, run_devices, run_sessions, sessions

import vkinfer
from vkinfer.model.onnx_import import UnsupportedModelError
from vkinfer.reference.qlinear_softmax import qlinear_softmax
from vkinfer.testing.onnx_builder import MS, make_model

_R = {np.dtype(np.uint8): (0, 256), np.dtype(np.int8): (-128, 128)}


def _model(nodes, inputs: dict, consts: dict, out_dtype, opset: int = 13, outs=("y",)) -> bytes:
    m = make_model(nodes, inputs, dict.fromkeys(outs, out_dtype), consts, opset=opset, domains=MS)
    return m.SerializeToString()


def _ort(model: bytes, feed: dict, optimize: bool = False) -> list:
    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    o.log_severity_level = 3
    o.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                  else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    return ort.InferenceSession(model, o, providers=["CPUExecutionProvider"]).run(None, feed)


# ------------------------------------------------------------------------------------------------ QLinearSoftmax

def _softmax_model(shape, dt, xs, ys, yz, axis, opset):
    kw = {} if axis is None else {"axis": axis}
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            opset=opset, **kw)
    return _model([node], {"x": np.zeros(shape, dt)}, {"xs": np.float32(xs), "xz": dt.type(0),
                                                        "ys": np.float32(ys), "yz": dt.type(yz)}, dt, opset)


def _check_softmax_exact(got, want):
    """got (vkinfer) vs want (ORT): the same type, shape and bytes."""
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


SOFTMAX_EDGES = [  # shape, dtype, x_scale, y_scale, y_zero_point, axis, opset, fill
    ((2, 7), np.uint8, 0.1, 1 / 256, 0, None, 13, "random"),
    ((2, 7), np.int8, 0.1, 1 / 256, -128, None, 13, "random"),
    ((3, 4, 5), np.uint8, 0.05, 1 / 255, 0, 1, 13, "random"),
    ((3, 4, 5), np.int8, 0.05, 1 / 255, -128, 0, 13, "random"),
    ((2, 3, 4, 5), np.uint8, 0.02, 1 / 256, 0, -3, 13, "random"),
    ((2, 3, 4, 5), np.int8, 0.3, 0.01, 10, 2, 13, "random"),
    ((2, 3, 4), np.uint8, 0.1, 1 / 256, 0, 1, 11, "random"),     # legacy: rows are the flattened trailing axes
    ((2, 3, 4), np.int8, 0.1, 1 / 256, -128, 0, 12, "random"),
    ((2, 3, 4), np.uint8, 0.1, 1 / 256, 0, None, 12, "random"),  # legacy without axis: the last axis
    ((4, 9), np.uint8, 8.0, 1 / 256, 0, -1, 13, "dominant"),     # one element takes it all: saturates at qmax
    ((4, 9), np.int8, 8.0, 1 / 256, -128, -1, 13, "dominant"),
    ((4, 9), np.int8, 8.0, 1 / 256, 100, -1, 13, "dominant"),    # v + zero point far over 127: clamps
    ((4, 6), np.uint8, 1e-4, 1 / 256, 0, -1, 13, "random"),      # tiny scale: nearly uniform rows
    ((4, 6), np.uint8, 0.1, 1 / 256, 0, -1, 13, "equal"),
    ((5, 3), np.uint8, 0.1, 2.0, 7, -1, 13, "random"),           # y_scale > 1: floor(1 / y_scale) = 0
    ((1, 300), np.uint8, 0.05, 1 / 256, 3, -1, 13, "random"),    # long row
]


@functools.cache
def _softmax_case(i):
    shape, dt, xs, ys, yz, axis, opset, fill = SOFTMAX_EDGES[i]
    dt = np.dtype(dt)
    rng = np.random.default_rng(i)
    lo, hi = _R[dt]
    x = rng.integers(lo, hi, shape).astype(dt)
    if fill == "dominant":
        x[...] = lo
        x[..., 0] = hi - 1
    elif fill == "equal":
        x[...] = 17
    model = _softmax_model(shape, dt, xs, ys, yz, axis, opset)
    return x, model, _ort(model, {"x": x})[0]


@pytest.mark.parametrize("i", range(len(SOFTMAX_EDGES)))
def test_qlinear_softmax_edges_vs_ort(i):
    shape, dt, xs, ys, yz, axis, opset, _ = SOFTMAX_EDGES[i]
    x, model, want = _softmax_case(i)
    (got,) = run_devices(model, {"x": x}, want=[want])  # every device equals ORT bit for bit
    assert got.dtype == want.dtype and got.shape == want.shape
    _check_softmax_exact(got, want)


def test_qlinear_softmax_random_vs_ort():
    """Seeded shapes, ranks 1-4, axes, opsets, scales, zero points: every row exact."""
    rng = np.random.default_rng(2024)
    rows = 0
    for trial in range(60):
        dt = np.dtype([np.uint8, np.int8][trial % 2])
        r = int(rng.integers(1, 5))
        shape = tuple(int(v) for v in rng.integers(1, 7, r))
        opset = [11, 13][trial % 2 if trial % 3 else 1]
        axis = int(rng.integers(-r, r))
        xs = float(np.float32(10 ** rng.uniform(-3, 0.7)))
        ys = float(rng.choice([1 / 256, 1 / 255, 1 / 128, 0.01, 0.3]))
        lo, hi = _R[dt]
        yz = int(rng.integers(lo, hi))
        x = rng.integers(lo, hi, shape).astype(dt)
        try:
            want = qlinear_softmax(x, np.float32(xs), dt.type(0), np.float32(ys), dt.type(yz), axis, opset)
        except ValueError:  # the overflow ORT leaves undefined (a short row at a small y_scale)
            continue
        model = _softmax_model(shape, dt, xs, ys, yz, axis, opset)
        ref = _ort(model, {"x": x})[0]
        (got,) = run_devices(model, {"x": x}, want=[want])
        _check_softmax_exact(got, ref)
        np.testing.assert_array_equal(want, ref)
        rows += x.size // max(1, shape[axis % r])
    assert rows > 0


@pytest.mark.parametrize("opset,axis", [(13, None), (13, 1), (11, None), (11, 2)])
@pytest.mark.parametrize("dt,yz", [(np.uint8, 0), (np.int8, -128)])
def test_qdq_softmax_folds_as_ort_fuses_it(opset, axis, dt, yz):
    """DQ -> Softmax -> Q: ORT (ORT_ENABLE_ALL) fuses it into QLinearSoftmax, and so does vkinfer."""
    dt = np.dtype(dt)
    kw = {} if axis is None else {"axis": axis}
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("Softmax", ["xf"], ["sf"], **kw),
             helper.make_node("QuantizeLinear", ["sf", "ys", "yz"], ["y"])]
    x = np.random.default_rng(opset).integers(*_R[dt], (2, 3, 5)).astype(dt)
    model = _model(nodes, {"x": x}, {"xs": np.float32(0.07), "xz": dt.type(3), "ys": np.float32(1 / 256),
                                     "yz": dt.type(yz)}, dt, opset)
    want = _ort(model, {"x": x}, optimize=True)[0]
    sess = vkinfer.InferenceSession(model, device="reference")
    assert [n.op for n in sess.graph.nodes] == ["com.microsoft:QLinearSoftmax"]
    (got,) = run_devices(model, {"x": x})
    _check_softmax_exact(got, want)


# ---------------------------------------------------------------------------------------------- QLinearReduceMean

def _reduce_mean_model(shape, dt, xs, xz, ys, yz, axes, keepdims):
    node = helper.make_node("QLinearReduceMean", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            axes=list(axes), keepdims=keepdims)
    return _model([node], {"x": np.zeros(shape, dt)}, {"xs": np.float32(xs), "xz": dt.type(xz),
                                                        "ys": np.float32(ys), "yz": dt.type(yz)}, dt)


def _ort_gap_reduce(x, xs, xz, ys, yz, axes, keepdims):
    """ORT's QLinearGlobalAveragePool on x moved to (1, kept, reduced): the mean over `axes`."""
    r = x.ndim
    ax = sorted(a % r for a in axes)
    kept = [a for a in range(r) if a not in ax]
    moved = np.ascontiguousarray(x.transpose(kept + ax)).reshape(1, -1, int(np.prod([x.shape[a] for a in ax])))
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            channels_last=0)
    dt = x.dtype
    model = _model([node], {"x": moved}, {"xs": np.float32(xs), "xz": dt.type(xz), "ys": np.float32(ys),
                                          "yz": dt.type(yz)}, dt)
    y = _ort(model, {"x": moved})[0]
    shape = [1 if a in ax else x.shape[a] for a in range(r)] if keepdims else [x.shape[a] for a in kept]
    return y.reshape(shape)


REDUCE_EDGES = [  # shape, dtype, x_scale, x_zp, y_scale, y_zp, axes, keepdims
    ((1, 8, 5, 5), np.uint8, 0.05, 128, 0.05, 128, (2, 3), 1),   # QLinearGlobalAveragePool itself
    ((2, 3, 4, 5), np.int8, 0.1, -3, 0.02, 5, (-1,), 1),
    ((2, 3, 4, 5), np.uint8, 0.1, 0, 0.4, 0, (1,), 0),
    ((6, 7), np.int8, 0.02, 0, 0.001, 0, (0,), 1),             # saturates
    ((3, 4, 6), np.uint8, 0.5, 255, 0.5, 0, (0, 2), 0),
    ((5,), np.uint8, 0.1, 7, 0.1, 7, (0,), 1),
]


@pytest.mark.parametrize("i", range(len(REDUCE_EDGES)))
def test_qlinear_reduce_mean_vs_ort_global_pool(i):
    shape, dt, xs, xz, ys, yz, axes, keepdims = REDUCE_EDGES[i]
    dt = np.dtype(dt)
    x = np.random.default_rng(i).integers(*_R[dt], shape).astype(dt)
    want = _ort_gap_reduce(x, xs, xz, ys, yz, axes, keepdims)
    model = _reduce_mean_model(shape, dt, xs, xz, ys, yz, axes, keepdims)
    assert want.dtype == dt
    run_devices(model, {"x": x}, want=[want])


def test_qlinear_reduce_mean_has_no_ort_kernel():
    """Why the definition above is ORT's global pool: ORT 1.31 has no CPU kernel for QLinearReduceMean."""
    model = _reduce_mean_model((2, 3), np.dtype(np.uint8), 0.1, 0, 0.1, 0, (1,), 1)
    with pytest.raises(Exception, match="QLinearReduceMean"):
        _ort(model, {"x": np.zeros((2, 3), np.uint8)})


# ------------------------------------------------------------------------------------------ QLinearAveragePool

POOL_EDGES = [  # shape (NCHW), dtype, kernel, strides, pads, ceil_mode, count_include_pad, channels_last
    ((1, 3, 7, 7), np.uint8, [3, 3], [2, 2], [1, 1, 1, 1], 1, 0, 1),
    ((2, 4, 6, 5), np.int8, [2, 3], [2, 2], [0, 1, 0, 1], 1, 1, 1),
    ((1, 5, 7, 6), np.uint8, [3, 2], [2, 3], [0, 0, 0, 0], 1, 0, 0),
    ((1, 2, 9, 9), np.int8, [3, 3], [3, 3], [1, 1, 1, 1], 0, 1, 1),
    ((1, 3, 8), np.uint8, [3], [2], [1, 1], 1, 0, 1),
]


@pytest.mark.parametrize("i", range(len(POOL_EDGES)))
def test_qlinear_average_pool_channels_last_ceil_mode_vs_ort(i):
    shape, dt, k, s, p, ceil, cip, cl = POOL_EDGES[i]
    dt = np.dtype(dt)
    rng = np.random.default_rng(i)
    x = rng.integers(*_R[dt], shape).astype(dt)
    if cl:
        x = np.ascontiguousarray(np.moveaxis(x, 1, -1))
    node = helper.make_node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            kernel_shape=k, strides=s, pads=p, ceil_mode=ceil, count_include_pad=cip, channels_last=cl)
    lo = _R[dt][0]
    model = _model([node], {"x": x}, {"xs": np.float32(0.03), "xz": dt.type(lo + 5), "ys": np.float32(0.02),
                                      "yz": dt.type(lo + 9)}, dt)
    run_devices(model, {"x": x}, want=_ort(model, {"x": x}))


# ---------------------------------------------------------------------------------------------- QGemm transA

@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("m,k,n", [(3, 8, 5), (1, 17, 4), (6, 2, 9)])
def test_qgemm_trans_a_vs_ort_every_device(m, k, n, trans_b):
    """transA=1 runs as an 8-bit Transpose of A and a QGemm the CPU and Vulkan lowerings take."""
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    a = rng.integers(0, 256, (k, m)).astype(np.uint8)  # A is (K, M): transposed
    b = rng.integers(0, 256, (n, k) if trans_b else (k, n)).astype(np.uint8)
    c = rng.integers(-500, 500, n).astype(np.int32)
    node = helper.make_node("QGemm", ["a", "as", "az", "b", "bs", "bz", "c", "ys", "yz"], ["y"],
                            domain="com.microsoft", transA=1, transB=trans_b, alpha=1.0)
    model = _model([node], {"a": a}, {"as": np.float32(0.02), "az": np.uint8(120), "b": b, "bs": np.float32(0.01),
                                      "bz": np.uint8(130), "c": c, "ys": np.float32(0.05), "yz": np.uint8(100)},
                   np.uint8)
    per_device = sessions(model)
    run_sessions(per_device, {"a": a}, want=_ort(model, {"a": a}))
    for device, sess in per_device.items():  # where each device's session puts the ops
        q = next(nd for nd in sess.graph.nodes if nd.op == "com.microsoft:QGemm")
        assert not q.attrs.get("transA", 0)
        if device != "reference":  # the QGemm (and the transpose) run on the device, not the host
            assert sess.placement[q.name].startswith(device) and sess.placement[f"{q.name} (transA)"] != "host"


# ------------------------------------------------------------------------------ QLinearMatMul, both activations

@pytest.mark.parametrize("dt", [np.uint8, np.int8])
@pytest.mark.parametrize("sa,sb", [((4, 6), (6, 3)), ((2, 5, 8), (2, 8, 5)), ((2, 3, 4, 8), (2, 3, 8, 4)),
                                   ((2, 3, 4, 8), (8, 4)), ((1, 5, 6), (3, 6, 2))])
def test_qlinear_matmul_two_activations_vs_ort(sa, sb, dt):
    """Attention's Q K^T and P V: both operands are graph inputs, batched 3-D / 4-D with broadcasting."""
    dt = np.dtype(dt)
    rng = np.random.default_rng(len(sa) * 10 + len(sb))
    lo, hi = _R[dt]
    # Moderate values: ORT's s8 x s8 / u8 x u8 kernels are exact then on every x86 variant.
    a = rng.integers(lo // 2, hi // 2, sa).astype(dt)
    b = rng.integers(lo // 2, hi // 2, sb).astype(dt)
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], ["y"])
    model = _model([node], {"a": a, "b": b}, {"as": np.float32(0.02), "az": dt.type(lo // 4 + 3),
                                              "bs": np.float32(0.03), "bz": dt.type(lo // 4 + 1),
                                              "ys": np.float32(0.2), "yz": dt.type(lo // 2 + 60)}, dt)
    run_devices(model, {"a": a, "b": b}, want=_ort(model, {"a": a, "b": b}))


# ------------------------------------------------------------------------------------------ blocked Q / DQ

BLOCK_EDGES = [  # x shape, axis, block_size, dtype
    ((3, 8), 1, 4, np.uint8), ((3, 8), 1, 2, np.int8), ((6, 5), 0, 3, np.int8), ((3, 7), 1, 4, np.uint8),
    ((2, 4, 3, 2), 1, 2, np.uint8), ((2, 3, 5, 4), -2, 2, np.int8), ((4, 9), 1, 9, np.uint8),
    ((4, 9), -1, 1, np.int8),
]


def _block_params(shape, axis, bs, dt, rng):
    sshape = list(shape)
    sshape[axis] = -(-shape[axis] // bs)
    s = rng.uniform(0.01, 0.3, sshape).astype(np.float32)
    s.flat[0] = np.float32(2.0 ** -20)  # extreme scales: everything saturates in that block
    s.flat[-1] = np.float32(1e4)
    z = rng.integers(*_R[np.dtype(dt)], sshape).astype(dt)
    return s, z


@pytest.mark.parametrize("i", range(len(BLOCK_EDGES)))
def test_blocked_quantize_dequantize_vs_ort(i):
    shape, axis, bs, dt = BLOCK_EDGES[i]
    rng = np.random.default_rng(i)
    s, z = _block_params(shape, axis, bs, dt, rng)
    full_s = np.repeat(s, bs, axis=axis).take(range(shape[axis]), axis=axis)
    # Values on exact rounding ties (k + 0.5 steps) and far out of range, besides random ones.
    x = (rng.normal(0, 5, shape)).astype(np.float32)
    x.flat[1::3] = ((rng.integers(-300, 300, x.size)[1::3] + np.float32(0.5)) * full_s.flat[1::3]).astype(np.float32)
    if int(np.prod(shape[axis % len(shape) + 1:])) == 1:  # (undefined in ORT where elements follow the axis)
        x.flat[2], x.flat[3] = np.float32(-1e30), np.float32(1e30)
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=axis, block_size=bs)
    qm = _model([q], {"x": x}, {"s": s, "z": z}, dt, opset=21)
    run_devices(qm, {"x": x}, want=_ort(qm, {"x": x}))
    xq = rng.integers(*_R[np.dtype(dt)], shape).astype(dt)
    d = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=axis, block_size=bs)
    dm = _model([d], {"x": xq}, {"s": s, "z": z}, np.float32, opset=21)
    run_devices(dm, {"x": xq}, want=_ort(dm, {"x": xq}))


def test_blocked_quantize_rejects_what_ort_leaves_undefined():
    """Blocked quantization with elements after the block axis: ORT converts x / scale to int32 before it clamps,
    so |x / scale| >= 2**31 is undefined behaviour (x86: INT_MIN plus the zero point; an ARM build saturates): a
    ValueError naming it."""
    from vkinfer.reference.quantize_linear import quantize_linear

    s = np.ones((1, 3), np.float32)
    x = np.ones((2, 3), np.float32)
    x[0, 1] = np.float32(2.0**31)
    with pytest.raises(ValueError, match="2\\*\\*31"):
        quantize_linear(x, s, np.zeros((1, 3), np.uint8), axis=0, block_size=2)
    with pytest.raises(ValueError, match="2\\*\\*31"):
        quantize_linear(-x, s, np.zeros((1, 3), np.int8), axis=0, block_size=2)
    # The same value where the block axis is the last one is defined (ORT clamps first): qmax.
    assert quantize_linear(x.T.copy(), s.T.copy(), np.zeros((3, 1), np.uint8), axis=1, block_size=2)[1, 0] == 255


@pytest.mark.parametrize("to,dt", [(TP.UINT8, np.uint8), (TP.INT8, np.int8)])
def test_quantize_output_dtype_vs_ort(to, dt):
    x = np.random.default_rng(to).normal(0, 20, (3, 5)).astype(np.float32)
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], output_dtype=to, saturate=1)
    model = _model([node], {"x": x}, {"s": np.float32(0.1)}, dt, opset=21)
    want = _ort(model, {"x": x})
    assert want[0].dtype == dt
    run_devices(model, {"x": x}, want=want)


# -------------------------------------------------------------------------------------------------- bad input

def _bad(model: bytes, feed: dict, exc, *words):
    """Every device refuses the model with `exc`, naming each of `words`."""
    for device in DEVICES:
        with pytest.raises(exc) as e:
            vkinfer.InferenceSession(model, device=device).run(None, feed)
        for w in words:
            assert w in str(e.value), (device, str(e.value))


def test_bad_input_raises_naming_the_node():
    u8 = np.dtype(np.uint8)
    x8 = np.zeros((2, 6), np.uint8)
    xf = np.zeros((2, 6), np.float32)
    sm = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", opset=13,
                          name="sm")
    ok = {"xs": np.float32(0.1), "xz": np.uint8(0), "ys": np.float32(1 / 256), "yz": np.uint8(0)}
    _bad(_model([sm], {"x": x8}, {**ok, "xs": np.float32(0)}, u8), {"x": x8}, ValueError, "sm", "x_scale")
    _bad(_model([sm], {"x": x8}, {**ok, "ys": np.float32(-1)}, u8), {"x": x8}, ValueError, "sm", "y_scale")
    _bad(_model([sm], {"x": x8}, {**ok, "yz": np.int8(0)}, u8), {"x": x8}, (TypeError, ValueError), "sm")
    sm3 = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                           opset=13, axis=2, name="sm3")
    _bad(_model([sm3], {"x": x8}, ok, u8), {"x": x8}, ValueError, "sm3", "axis")
    nop = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", name="nop")
    _bad(_model([nop], {"x": x8}, ok, u8), {"x": x8}, ValueError, "nop", "opset")
    rm = helper.make_node("QLinearReduceMean", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                          axes=[5], keepdims=1, name="rm")
    _bad(_model([rm], {"x": x8}, ok, u8), {"x": x8}, ValueError, "rm", "axes")
    # Blocked Q / DQ: a block size whose block count does not match the scale, a scale of the wrong rank,
    # a non-positive scale, a zero point of the wrong type, a bad axis, an out-of-scope output type.
    s3 = np.full((2, 3), 0.1, np.float32)
    q = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=4, name="qb")
    _bad(_model([q], {"x": xf}, {"s": s3, "z": np.zeros((2, 3), np.uint8)}, u8, 21), {"x": xf}, ValueError, "qb",
         "block_size")
    _bad(_model([q], {"x": xf}, {"s": np.full(2, 0.1, np.float32), "z": np.zeros(2, np.uint8)}, u8, 21), {"x": xf},
         ValueError, "qb", "rank")
    q2 = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=1, block_size=2, name="qb2")
    _bad(_model([q2], {"x": xf}, {"s": -s3, "z": np.zeros((2, 3), np.uint8)}, u8, 21), {"x": xf}, ValueError, "qb2",
         "y_scale")
    _bad(_model([q2], {"x": xf}, {"s": s3, "z": np.zeros((2, 3), np.int16)}, u8, 21), {"x": xf},
         (TypeError, ValueError), "qb2")
    q5 = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], axis=5, block_size=2, name="qb5")
    _bad(_model([q5], {"x": xf}, {"s": s3, "z": np.zeros((2, 3), np.uint8)}, u8, 21), {"x": xf}, ValueError, "qb5",
         "axis")
    d = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=0, block_size=4, name="db")
    _bad(_model([d], {"x": x8}, {"s": s3, "z": np.zeros((2, 3), np.uint8)}, np.float32, 21), {"x": x8}, ValueError,
         "db", "block_size")
    # output_dtype: int16 is out of scope; uint8 against an int8 zero point is a type error.
    to16 = helper.make_node("QuantizeLinear", ["x", "s"], ["t"], output_dtype=TP.INT16, name="to16")
    back = helper.make_node("Cast", ["t"], ["y"], to=TP.UINT8)
    _bad(_model([to16, back], {"x": xf}, {"s": np.float32(0.1)}, u8, 21), {"x": xf}, UnsupportedModelError, "to16",
         "int16")
    mix = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], output_dtype=TP.UINT8, name="mix")
    _bad(_model([mix], {"x": xf}, {"s": np.float32(0.1), "z": np.int8(0)}, u8, 21), {"x": xf}, (TypeError, ValueError),
         "mix")
