"""TFLite's 8-bit ADD as ai-edge-litert's default interpreter runs it (the XNNPACK delegate's integer add).

XNNPACK does not requantize an ADD in float: each input's scale ratio r = float32(x_scale / y_scale) becomes a
fixed-point multiplier with about 21 significant bits, shared shift `shift` chosen from the larger ratio:

    shift = 20 - floor(log2(max(r_a, r_b)))                    (the float32 exponent of the larger ratio)
    m_a   = round_half_even(r_a * 2**shift), m_b likewise      (the larger one in [2**20, 2**21])
    acc   = (a - a_zero_point) * m_a + (b - b_zero_point) * m_b + 2**(shift - 1)
    y     = clamp((acc >> shift) + y_zero_point, act_min, act_max)                    (>>: floor)

so ties round half up and the multipliers carry ~2**-21 relative error. ONNX Runtime's QLinearAdd computes
(a - za) * float32(sa / sy) + (b - zb) * float32(sb / sy) in float32 and rounds half to even: the two differ by one
step on rare values (a few in 10**5 on MobileNetV2 residual adds), and one step early in a deep network grows
downstream (MobileNetV2 0.35/224 with seeded random weights: up to 29 steps on its last convolution).

The delegate takes the ADD when both ratios lie in [2**-10, 2**8) (`xnnpack_adds`); otherwise TFLite's builtin
kernel runs it (a different fixed-point scheme), and the importer keeps ONNX Runtime's QLinearAdd there.
act_min/act_max are the fused activation's quantized bounds (CalculateActivationRangeQuantized), the type's range
without one.
"""

from __future__ import annotations

import math

import numpy as np

from . import _qcheck as qc
from ._opdef import OpDef


def _ratio(x_scale, y_scale) -> np.float32:
    return np.float32(qc.scale("x_scale", x_scale)) / np.float32(qc.scale("y_scale", y_scale))


def xnnpack_adds(a_scale, b_scale, y_scale) -> bool:
    """Whether ai-edge-litert's XNNPACK delegate runs this 8-bit ADD (both scale ratios in [2**-10, 2**8))."""
    return all(2.0 ** -10 <= float(_ratio(s, y_scale)) < 2.0 ** 8 for s in (a_scale, b_scale))


def tflite_add_params(a_scale, b_scale, y_scale) -> tuple[int, int, int]:
    """(m_a, m_b, shift) of the module docstring; ValueError outside XNNPACK's range."""
    ra, rb = _ratio(a_scale, y_scale), _ratio(b_scale, y_scale)
    if not xnnpack_adds(a_scale, b_scale, y_scale):
        raise ValueError(f"scale ratios {ra}, {rb} outside XNNPACK's [2**-10, 2**8)")
    exponent = math.frexp(float(max(ra, rb)))[1] - 1  # floor(log2) of a normal float32
    shift = 20 - exponent
    # r * 2**shift is exact in float32 (a power-of-two scaling); round half to even as lrintf does.
    ma, mb = (int(np.rint(np.float32(math.ldexp(float(r), shift)))) for r in (ra, rb))
    return ma, mb, shift


def tflite_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point,
               activation_min=None, activation_max=None) -> np.ndarray:
    """a, b: int8/uint8 of one dtype (numpy broadcasting); per-tensor scales and zero points; output in the
    inputs' dtype, clamped to [activation_min, activation_max] (default the type's range)."""
    qc.qtensor("a", a)
    qc.qtensor("b", b)
    if a.dtype != b.dtype:
        raise TypeError(f"a and b must have one dtype, got {a.dtype} and {b.dtype}")
    dt = a.dtype
    za, zb, zy = (qc.zero_point(n, z, dt) for n, z in (("a_zero_point", a_zero_point),
                                                          ("b_zero_point", b_zero_point),
                                                          ("y_zero_point", y_zero_point)))
    ma, mb, shift = tflite_add_params(a_scale, b_scale, y_scale)
    qmin, qmax = qc.QRANGE[dt]
    lo = qmin if activation_min is None else int(activation_min)
    hi = qmax if activation_max is None else int(activation_max)
    if not qmin <= lo <= hi <= qmax:
        raise ValueError(f"activation bounds [{lo}, {hi}] must lie inside the {dt} range [{qmin}, {qmax}]")
    # |acc| <= 2 * 255 * 2**21 + 2**29 < 2**31: int32 holds it exactly.
    acc = (a.astype(np.int32) - np.int32(za)) * np.int32(ma) + (b.astype(np.int32) - np.int32(zb)) * np.int32(mb)
    acc += np.int32(1 << (shift - 1))
    acc >>= shift
    acc += np.int32(zy)
    return np.clip(acc, lo, hi).astype(dt)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, x, memo):
    """Inputs as QLinearAdd's (a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point), numpy
    broadcasting; clamped to attrs activation_min/activation_max."""
    a = node.attrs
    return [tflite_add(*x[:8], a.get("activation_min"), a.get("activation_max"))]


def _binary(node, consts: dict):
    p = [consts.get(n) if n else None for n in node.inputs]
    lo, hi = node.attrs.get("activation_min"), node.attrs.get("activation_max")
    return lambda a, b: tflite_add(a, p[1], p[2], b, p[4], p[5], p[6], p[7], lo, hi)


def _shape(node, x) -> list:
    """Shape rule (interpreter.trace): the kernel on one element of each 8-bit input checks the node as on the
    whole ones (its checks read their dtypes, the scales, zero points and bounds, never their values), then the
    broadcast, refused with the error of the kernel's own arithmetic. None (the kernel runs) for two 0-d inputs,
    whose sum the kernel gives as a numpy scalar, not an array."""
    a, b = x[0], x[3]
    one = [v[(slice(0, 1),) * v.ndim] if isinstance(v, np.ndarray) and v.size > 1 else v for v in (a, b)]
    y = _kernel(node, [one[0], *x[1:3], one[1], *x[4:]], {})[0]
    try:
        shape = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        np.add(np.broadcast_to(np.int32(0), a.shape), np.broadcast_to(np.int32(0), b.shape))  # numpy's message
        raise
    return [(shape, y.dtype)] if shape else None


DEFINITIONS = (OpDef("vkinfer:TFLiteAdd", _kernel, "elementwise", (8, (0, 1, 3, 4, 6)), binary=_binary,
                     shape=_shape),)
