"""Integer attributes checked before use, on every device (issue 22).

ONNX attributes are int64; the C kernels, the shaders and the native plan take 32-bit dimensions. A value that
does not fit (or a negative pad, a zero stride, a kernel that contradicts its weights) must end as one
ValueError naming the node and the attribute on reference, cpu and vulkan alike, never as a narrowed, small,
meaningless answer (`pads=[0, 0, 2**62, 0]` once ran on the CPU). ONNX Runtime, the independent oracle, refuses
each of these models too. Below the importer, the C library refuses geometry whose sizes do not fit its counts
even when called directly (a second line of defence for callers that bypass the Python checks), and every
integer crossing ctypes is range-checked first (ctypes narrows silently).
"""

from __future__ import annotations

import ctypes
import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from support.agree import outcome_devices, run_devices

from vkinfer import cpu
from vkinfer.reference._spec import conv_spec
from vkinfer.testing.onnx_builder import make_model

BIG = [2 ** 31, 2 ** 32, 2 ** 32 + 1, 2 ** 62, 2 ** 63 - 1, -(2 ** 63)]


def _model(op: str, attrs: dict, *, dtype=np.uint8, quantized: bool = False):
    """One node of `op` on a 1x2x5x5 input (QLinearConv/Conv with 3x3 weights, pools with a 3x3 window)."""
    dt = np.dtype(dtype)
    rng = np.random.default_rng(3)
    if op == "QLinearConv":
        consts = {k: np.array(v, t) for k, v, t in (
            ("xs", 0.05, np.float32), ("xz", 7, dtype), ("ws", 0.02, np.float32), ("wz", 0, np.int8),
            ("ys", 0.1, np.float32), ("yz", 3, dtype))}
        consts["w"] = rng.integers(-100, 100, (3, 2, 3, 3)).astype(np.int8)
        names, x_dt = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], dt
    elif op == "Conv":
        consts = {"w": rng.uniform(-1, 1, (3, 2, 3, 3)).astype(np.float32)}
        names, x_dt = ["x", "w"], np.dtype(np.float32)
    elif op == "MaxPool" and quantized:  # ONNX MaxPool takes 8-bit tensors (opset 12)
        consts, names, x_dt = {}, ["x"], dt
        attrs = {"kernel_shape": [3, 3], **attrs}
    else:  # MaxPool, AveragePool on float
        consts, names, x_dt = {}, ["x"], np.dtype(np.float32)
        attrs = {"kernel_shape": [3, 3], **attrs}
    node = helper.make_node(op, names, ["y"], name="the_node", **attrs)
    return make_model([node], {"x": (x_dt, [1, 2, 5, 5])}, {"y": x_dt if op != "QLinearConv" else dt}, consts)


def _feed(op: str, dtype=np.uint8, quantized: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    if op == "QLinearConv" or quantized:
        return {"x": rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max + 1, (1, 2, 5, 5)).astype(dtype)}
    return {"x": rng.uniform(-2, 2, (1, 2, 5, 5)).astype(np.float32)}


def _ort(model, feed):
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feed)


# (op, attribute, a bad value, what the message says). ORT refuses every one of them but the strides beyond int32,
# which it runs (one output position per axis); vkinfer refuses those too rather than carry 64-bit strides
# through every kernel: a deviation pinned in the test below.
_ORT_RUNS = {("QLinearConv", "strides"), ("MaxPool", "strides")}
_BAD = ([(op, "pads", v, "does not fit a 32-bit integer")
         for op in ("QLinearConv", "Conv", "MaxPool", "AveragePool")
         for v in ([0, 0, 2 ** 62, 0], [1, 1, 2 ** 63 - 1, 1], [2 ** 32, 0, 0, 0], [0, -(2 ** 40), 0, 0])] +
        [(op, "strides", [1, v], "does not fit a 32-bit integer") for op in ("QLinearConv", "MaxPool")
         for v in (2 ** 32 + 1, 2 ** 63 - 1)] +
        [(op, "dilations", [2 ** 32 + 1, 1], "does not fit a 32-bit integer") for op in ("QLinearConv", "Conv")] +
        [("QLinearConv", "group", 2 ** 32 + 1, "does not fit a 32-bit integer"),
         ("QLinearConv", "kernel_shape", [2 ** 32 + 3, 3], "does not fit a 32-bit integer"),
         ("MaxPool", "kernel_shape", [2 ** 32 + 3, 3], "does not fit a 32-bit integer"),
         ("QLinearConv", "pads", [1, -1, 0, 0], "must be >= 0"),
         ("MaxPool", "pads", [0, 0, -1, 0], "must be >= 0"),
         ("QLinearConv", "strides", [0, 1], "must be >= 1"),
         ("AveragePool", "strides", [1, 0], "must be >= 1"),
         ("Conv", "dilations", [1, 0], "must be >= 1"),
         ("QLinearConv", "kernel_shape", [3, 2], "contradicts the weights"),
         ("QLinearConv", "pads", [1, 1, 1], "must have 4 values"),
         ("MaxPool", "strides", [1, 1, 1], "must have 2 values"),
         ("QLinearConv", "group", 2, "does not divide")])


@pytest.mark.parametrize("op,attr,value,says", _BAD, ids=lambda v: str(v)[:24])
def test_bad_integer_attribute_refused_on_every_device(op, attr, value, says):
    model = _model(op, {attr: value})
    feed = _feed(op)
    if (op, attr) in _ORT_RUNS and "32-bit" in says:
        assert [o.shape[2:] for o in _ort(model, feed)] == [(3, 1)]
    else:
        with pytest.raises(Exception):  # noqa: B017, PT011 - the peer refuses it (its error class is its own)
            _ort(model, feed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = outcome_devices(model, feed)
    assert isinstance(outcome, ValueError), outcome
    msg = str(outcome)
    assert "'the_node'" in msg and f"'{attr}'" in msg and says in msg, msg


@pytest.mark.parametrize("dtype", [np.uint8, np.int8], ids=["uint8", "int8"])
@pytest.mark.parametrize("op", ["QLinearConv", "MaxPool"])
def test_large_but_valid_attributes_run_equal_to_onnxruntime(op, dtype):
    """The checks refuse only what does not fit: strides and pads far beyond the input (yet within int32) give
    ORT's answer on every device, e.g. a stride of 2**31 - 1 keeps one output position per axis."""
    for attrs in ({"strides": [2 ** 31 - 1, 3]}, {"pads": [0, 2, 1, 0], "strides": [2, 2 ** 20]}):
        model, feed = _model(op, attrs, dtype=dtype, quantized=True), _feed(op, dtype, quantized=True)
        run_devices(model, feed, want=_ort(model, feed))


def test_conv_spec_refuses_geometry_beyond_int32():
    """Attributes that each fit int32 can still add up past it (padded input, dilated kernel, output count):
    the op spec every device uses refuses those too."""
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (1, 2, 5, 5)).astype(np.uint8)
    w = rng.integers(-5, 5, (3, 2, 3, 3)).astype(np.int8)
    args = (x, 0.05, 7, w, 0.02, 0, 0.1, 3)
    with pytest.raises(ValueError, match="padded input height .* does not fit a 32-bit integer"):
        conv_spec(*args, pads=[2 ** 31 - 1, 0, 2 ** 31 - 1, 0])
    with pytest.raises(ValueError, match="dilated kernel width .* does not fit a 32-bit integer"):
        conv_spec(*args, dilations=[1, 2 ** 30 + 1])
    with pytest.raises(ValueError, match="has over 2147483647 elements"):
        conv_spec(*args, pads=[2 ** 20, 2 ** 20, 2 ** 20, 2 ** 20])


def test_ctypes_arguments_checked_before_they_narrow():
    """ctypes would pass 2**32 as a uint32 0 and -1 as 4294967295: every integer crossing into the library is
    checked against its C type first, naming the field."""
    assert cpu.checked("x", 2 ** 32 - 1, ctypes.c_uint32) == 2 ** 32 - 1
    assert cpu.checked("x", -(2 ** 31), ctypes.c_int32) == -(2 ** 31)
    for value, ctype in ((2 ** 32, ctypes.c_uint32), (-1, ctypes.c_uint32), (2 ** 31, ctypes.c_int32),
                         (2 ** 64, ctypes.c_uint64), (np.int64(2 ** 62), ctypes.c_uint32)):
        with pytest.raises(ValueError, match=r"the_field = -?\d+ does not fit the C library's"):
            cpu.checked("the_field", value, ctype)
    with pytest.raises(ValueError, match=r"convolution\.pt = 4611686018427387904 does not fit"):
        cpu.c_struct(cpu._Desc, "convolution", n=1, pt=2 ** 62)


def _c_conv(**geom) -> tuple[int, str]:
    """vki_conv_create called straight through ctypes (no Python checks): its status and error message."""
    so = cpu.lib()
    d = dict(n=1, h=3, w=3, c=2, m=2, kh=1, kw=1, sh=1, sw=1, dh=1, dw=1, pt=0, pl=0, pb=0, pr=0, groups=1)
    d.update(geom)
    # The refused geometries would need exabytes of weights; the C check runs before any weight is read.
    weights = np.ones(min(d["m"] * d["c"] * d["kh"] * d["kw"], 1 << 16), np.uint8)
    zp, bias, scale = np.zeros(d["m"], np.int32), np.zeros(d["m"], np.int32), np.full(d["m"], 0.5, np.float32)
    desc = cpu._Desc(**d, weights=weights.ctypes.data, w_signed=0, w_zp=zp.ctypes.data, bias=bias.ctypes.data,
                     scale=scale.ctypes.data, x_zp=0, y_zp=0, y_lo=0, y_hi=255, isa=-1)
    handle = ctypes.c_void_p()
    status = so.vki_conv_create(ctypes.byref(desc), ctypes.byref(handle))
    if status == 0:
        so.vki_conv_destroy(handle)
        return 0, ""
    so.vki_last_error.restype = ctypes.c_char_p
    return status, so.vki_last_error().decode()


def test_c_convolution_refuses_sizes_beyond_its_counts():
    """The C side checks the dimensions it is given fit the kernels' 32-bit counts: a padded input of
    3 + 2**32 rows once gave a uint32 output height of 3 (wrapped), and four 32-bit factors could overflow the
    64-bit element count."""
    assert _c_conv() == (0, "")
    assert _c_conv(pt=2 ** 31, pb=2 ** 31)[0] == 1  # 3 + 2**32 rows: oh would wrap to 3
    assert "does not fit the kernels' 32-bit counts" in _c_conv(pt=2 ** 31, pb=2 ** 31)[1]
    status, msg = _c_conv(n=2 ** 32 - 1, h=2 ** 31 - 1, w=2 ** 31 - 1, c=2 ** 32 - 1, m=1)
    assert status == 1 and "tensor too large" in msg, msg
    status, msg = _c_conv(kh=2 ** 32 - 1, kw=2 ** 32 - 1, h=2 ** 32 - 1, w=2 ** 32 - 1, sh=2 ** 31, sw=2 ** 31)
    assert status == 1 and "taps" in msg, msg
