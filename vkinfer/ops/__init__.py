"""Quantized ops with ONNX semantics: one call, any device, the same bits.

`device` is "vulkan" (the most preferred Vulkan device, or $VKINFER_DEVICE), "vulkan:<which>" with
<which> an index, a name substring or a type from vkinfer.devices() (e.g. "vulkan:1",
"vulkan:nvidia", "vulkan:discrete"), "cpu" (the C fallback with the best ISA variant this CPU runs,
or $VKINFER_CPU_ISA), "cpu:<variant>" (e.g. "cpu:neon", "cpu:avx2", "cpu:scalar"; see
vkinfer.cpu.variants()), or "reference" (pure numpy, the executable definition of the numerics).
`threads` sets the CPU thread count for one call (default: $VKINFER_CPU_THREADS, else vkinfer.cpu.default_threads():
the CPUs this process may use within the fastest cluster, capped by its cgroup quota); results are
identical for any thread count.
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from .. import reference
from ..reference._spec import conv_spec, matmul_spec

Device = Literal["vulkan", "cpu", "reference"] | str
Activation = None | Literal["relu", "relu6"] | tuple[str, float, float]
DEVICES = ("vulkan", "cpu", "reference")


def _backend(device: str, threads: int | None):
    """("reference", None), ("vulkan", Device) or ("cpu", variant or None), checked before any work."""
    kind, _, which = device.partition(":") if isinstance(device, str) else ("", "", "")
    if kind not in DEVICES or (kind == "reference" and which):
        raise ValueError(f'device must be "vulkan", "vulkan:<index|name|type>", "cpu", "cpu:<variant>" or '
                         f'"reference", got {device!r}')
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer or None, got {threads!r}")
    if kind == "vulkan":
        from .._vk import get_device
        from ..vulkan import selftest

        # A device that failed vkinfer's self-test (or is blocklisted) raises DeviceUntrustedError; the test runs
        # here at a device's first use in the process unless its verdict is cached (vkinfer/vulkan/selftest.py).
        return kind, selftest.require(get_device(which or None))
    if kind == "cpu":
        from .. import cpu

        if which:
            cpu._isa_index(which)  # unknown or unavailable variant: ValueError naming it
        return kind, which or None
    return kind, None


def qlinear_conv(x: np.ndarray, x_scale, x_zero_point, w: np.ndarray, w_scale, w_zero_point,
                 y_scale, y_zero_point, bias: np.ndarray | None = None, *,
                 strides: tuple[int, int] = (1, 1), pads: tuple[int, int, int, int] = (0, 0, 0, 0),
                 dilations: tuple[int, int] = (1, 1), group: int = 1, activation: Activation = None,
                 device: Device = "vulkan", threads: int | None = None) -> np.ndarray:
    """ONNX QLinearConv: quantized 2-D convolution with int32 accumulation and requantization.

    x: (N, C, H, W) uint8 or int8. w: (M, C/group, kH, kW) uint8 or int8. x_scale, y_scale: positive
    floats; w_scale, w_zero_point: per tensor or one per output channel. Zero points are uint8/int8
    numpy scalars (or Python ints, which take the data's type); y_zero_point's type is the output's
    type. bias: int32 (M,) or None. pads: (top, left, bottom, right). activation: None, "relu",
    "relu6" or ("clip", lo, hi) in real units, applied by narrowing the output clamp.
    Returns (N, M, OH, OW) in y_zero_point's type, bit-identical on every device to ONNX Runtime.
    """
    kind, target = _backend(device, threads)
    s = conv_spec(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias,
                  strides=strides, pads=pads, dilations=dilations, group=group, activation=activation)
    if kind == "reference":
        return reference.qlinear_conv(s)
    if kind == "cpu":
        from .. import cpu

        return cpu.run_conv(s, target, threads)
    from .. import vulkan

    return vulkan.run_conv(s, target)


def qlinear_matmul(a: np.ndarray, a_scale, a_zero_point, b: np.ndarray, b_scale, b_zero_point,
                   y_scale, y_zero_point, *, device: Device = "vulkan", threads: int | None = None) -> np.ndarray:
    """ONNX QLinearMatMul: a @ b (numpy broadcasting over batch dimensions, both at least 2-D),
    int32 accumulation, requantized to y_zero_point's type. b_scale and b_zero_point may be per
    column (N values). Bit-identical on every device to ONNX Runtime.
    """
    kind, target = _backend(device, threads)
    s = matmul_spec(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point)
    if kind == "reference":
        return reference.qlinear_matmul(s)
    if kind == "cpu":
        from .. import cpu

        return cpu.run_matmul(s, target, threads)
    from .. import vulkan

    return vulkan.run_matmul(s, target)


__all__ = ["qlinear_conv", "qlinear_matmul", "DEVICES"]
