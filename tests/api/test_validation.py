"""Bad input raises TypeError/ValueError naming the culprit, on every device, before any kernel runs."""

import numpy as np
import pytest
from support.cases import conv_case, mm_case

from vkinfer import ops

DEVICES = ["reference", "vulkan", "cpu"]


def good_conv():
    return conv_case(np.random.default_rng(0), c=4, h=6, w=6, m=8, kh=3, pads=(1, 1, 1, 1))


CONV_BAD = [
    ("x", lambda c: c["x"].astype(np.float32), TypeError, "x must be uint8 or int8"),
    ("x", lambda c: c["x"].tolist(), TypeError, "x must be a numpy array"),
    ("x", lambda c: c["x"][0], ValueError, "x must be 4-D"),
    ("x", lambda c: c["x"][:, :0], ValueError, "x is empty"),
    ("w", lambda c: c["w"].astype(np.int16), TypeError, "w must be uint8 or int8"),
    ("w", lambda c: c["w"][:, :3], ValueError, "input channels per group"),
    ("x_scale", lambda c: np.float32(np.nan), ValueError, "x_scale must be finite and positive"),
    ("x_scale", lambda c: 0.0, ValueError, "x_scale must be finite and positive"),
    ("x_scale", lambda c: -1.0, ValueError, "x_scale must be finite and positive"),
    ("x_scale", lambda c: "0.1", TypeError, "x_scale must be a float"),
    ("y_scale", lambda c: np.float32(np.inf), ValueError, "y_scale must be finite and positive"),
    ("y_scale", lambda c: 1e-45 / 4, ValueError, "y_scale must be finite and positive"),  # 0 in float32
    ("w_scale", lambda c: np.ones(3, np.float32), ValueError, "w_scale must be a scalar or 8 values"),
    ("w_scale", lambda c: np.array([0.1] * 7 + [-0.1], np.float32), ValueError, "w_scale must be finite"),
    ("x_zero_point", lambda c: 300, ValueError, "x_zero_point"),
    ("x_zero_point", lambda c: np.int8(3), TypeError, "x_zero_point has dtype int8"),
    ("x_zero_point", lambda c: 1.5, TypeError, "x_zero_point must be an integer"),
    ("w_zero_point", lambda c: np.zeros(5, c["w"].dtype), ValueError, "w_zero_point must be a scalar or 8"),
    ("w_zero_point", lambda c: np.int32(0), TypeError, "w_zero_point must be uint8 or int8"),
    ("y_zero_point", lambda c: np.int16(0), TypeError, "y_zero_point must be uint8 or int8"),
    ("bias", lambda c: np.zeros(8, np.int64), TypeError, "bias must be int32"),
    ("bias", lambda c: np.zeros(7, np.int32), ValueError, r"bias must have shape \(8,\)"),
    ("strides", lambda c: (0, 1), ValueError, "strides must all be >= 1"),
    ("strides", lambda c: (1,), ValueError, "strides must be 2 integers"),
    ("pads", lambda c: (1, 1, -1, 1), ValueError, "pads must all be >= 0"),
    ("dilations", lambda c: (1.5, 1), ValueError, "dilations must be 2 integers"),
    ("group", lambda c: 3, ValueError, "group=3 must divide"),
    ("group", lambda c: 0, ValueError, "group must be a positive integer"),
    ("activation", lambda c: "gelu", ValueError, "activation must be"),
    ("activation", lambda c: ("clip", 2.0, 1.0), ValueError, "lo <= hi"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arg,make,exc,msg", CONV_BAD, ids=[f"{a}-{m[:24]}" for a, _, _, m in CONV_BAD])
def test_conv_bad_argument(arg, make, exc, msg, device):
    c = good_conv()
    c[arg] = make(c)
    with pytest.raises(exc, match=msg):
        ops.qlinear_conv(**c, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_kernel_larger_than_padded_input(device):
    c = conv_case(np.random.default_rng(1), c=2, h=3, w=3, m=2, kh=5, pads=(0, 0, 0, 0))
    with pytest.raises(ValueError, match="larger than the padded input"):
        ops.qlinear_conv(**c, device=device)
    c["dilations"], c["w"] = (2, 2), c["w"][:, :, :3, :3]
    with pytest.raises(ValueError, match=r"dilated 5x5\) is larger"):
        ops.qlinear_conv(**c, device=device)


def test_unknown_device():
    with pytest.raises(ValueError, match="device must be"):
        ops.qlinear_conv(**good_conv(), device="gpu")
    with pytest.raises(ValueError, match="no Vulkan device matches 'no-such-gpu'"):
        ops.qlinear_conv(**good_conv(), device="vulkan:no-such-gpu")


def test_device_argument_picks_a_vulkan_device():
    import vkinfer

    d = vkinfer.devices()[0]
    c = good_conv()
    ref = ops.qlinear_conv(**c, device="reference")
    for which in (f"vulkan:{d.index}", f"vulkan:{d.type}", f"vulkan:{d.name[:5]}"):
        np.testing.assert_array_equal(ops.qlinear_conv(**c, device=which), ref)


def test_multiplier_overflow_is_rejected():
    c = good_conv()
    c["x_scale"], c["w_scale"], c["y_scale"] = np.float32(1e30), np.float32(1e30), np.float32(1e-30)
    c["w_zero_point"] = c["w_zero_point"][0]
    with pytest.raises(ValueError, match="overflows float32"):
        ops.qlinear_conv(**c, device="reference")


def test_output_over_device_limits_is_rejected():
    """A dispatch beyond maxComputeWorkGroupCount or a buffer beyond maxStorageBufferRange is a
    ValueError, never a device crash."""
    rng = np.random.default_rng(2)
    c = conv_case(rng, n=1, c=1, h=70000, w=1, m=1, kh=1)  # N*OH = 70000 workgroups along z
    c["w"], c["group"] = c["w"][:1], 1
    with pytest.raises(ValueError, match="exceeds this device's limit"):
        ops.qlinear_conv(**c, device="vulkan")


MM_BAD = [
    ("a", lambda c: c["a"][0], ValueError, "at least 2-D"),
    ("b", lambda c: c["b"][:3], ValueError, "must equal b's second-to-last"),
    ("a", lambda c: c["a"].astype(np.uint16), TypeError, "a must be uint8 or int8"),
    ("b_scale", lambda c: np.ones(2, np.float32), ValueError, "b_scale must be a scalar or 6 values"),
    ("a_zero_point", lambda c: -1, ValueError, "a_zero_point"),
    ("y_scale", lambda c: np.float32(-2), ValueError, "y_scale must be finite and positive"),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("arg,make,exc,msg", MM_BAD, ids=[f"{a}-{m[:24]}" for a, _, _, m in MM_BAD])
def test_matmul_bad_argument(arg, make, exc, msg, device):
    c = mm_case(np.random.default_rng(3), (4, 5), (5, 6))
    c[arg] = make(c)
    with pytest.raises(exc, match=msg):
        ops.qlinear_matmul(**c, device=device)


def test_matmul_batch_mismatch():
    c = mm_case(np.random.default_rng(4), (2, 4, 5), (3, 5, 6))
    with pytest.raises(ValueError, match="do not broadcast"):
        ops.qlinear_matmul(**c, device="vulkan")
