"""com.microsoft QLinearAdd in C with ONNX Runtime's float arithmetic: the single op (`qlinear_add`, equal shapes)
and the native CPU graph's lowering on equal shapes (other broadcasts and QLinearMul run as tables:
qlinear_lut.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..model.lowering import Layer, binary_mode, lower
from ..reference import _qcheck as qc
from ..reference.requant import QRANGE
from . import _check, _ptr, lib


@lower("cpu", "com.microsoft:QLinearAdd")
def lower_qadd(ctx, node, backend):
    ins = node.inputs
    if binary_mode(ctx, node) != "equal":
        return None
    c, dt = ctx.g.consts, ctx.dtype(ins[0])
    za, zb, zc = (qc.zero_point("zero_point", c[n], dt) if n else 0 for n in (ins[2], ins[5], ins[7]))
    sa, sb, sc = (qc.scale("scale", c[n]) for n in (ins[1], ins[4], ins[6]))
    ra, rb, fixed = qadd_constants(sa, za, sb, zb, sc, zc)
    lo, hi = QRANGE[np.dtype(dt)]
    n = int(np.prod(ctx.shape(ins[0])))
    signed = int(np.dtype(dt) == np.int8)

    def emit(g, refs, out, scratch):
        g.add("qadd", n, signed, ra, rb, fixed, lo, hi, refs[0], refs[1], out)
    return Layer(node, [ins[0], ins[3]], node.outputs[0], emit)


def qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point) -> np.ndarray:
    """com.microsoft QLinearAdd in C, bit-exact with ONNX Runtime; equal shapes only (broadcasting
    goes through vkinfer.reference.qlinear_add, which defines the numerics for every case)."""
    from ..reference.qlinear_add import _binary_setup, _input0_is_scalar

    shape, sa, sb, sc, za, zb, zc = _binary_setup(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale,
                                                  c_zero_point)
    if a.shape != b.shape:
        raise ValueError(f"cpu.qlinear_add needs equal shapes, got {a.shape} and {b.shape}")
    run = prepare_qlinear_add(sa, za, sb, zb, sc, zc, a.dtype, swap=_input0_is_scalar(a.shape, b.shape))
    return run(a, b)


def qadd_constants(sa, za, sb, zb, sc, zc) -> tuple[float, float, float]:
    """(ra, rb, fixed) of ONNX Runtime's QLinearAdd, folded in its order of operations (vki_qlinear_add)."""
    from ..reference._float32 import fma32

    ra, rb = np.float32(sa / sc), np.float32(sb / sc)
    fixed = float(np.float32(np.float32(zc) - fma32(ra, np.float32(za), np.float32(rb * np.float32(zb)))))
    return float(ra), float(rb), fixed


def prepare_qlinear_add(sa, za, sb, zb, sc, zc, dtype, swap: bool = False) -> Callable[[np.ndarray, np.ndarray],
                                                                                       np.ndarray]:
    """QLinearAdd over checked float32 scales and integer zero points, constants folded once:
    fn(a, b) on equal-shaped contiguous arrays of `dtype`. `swap`: ONNX Runtime's operand swap (see the
    reference), decided by the caller from the shapes."""
    from ..reference.requant import QRANGE

    if swap:  # ORT swaps the kernel's operands (see the reference)
        sa, za, sb, zb = sb, zb, sa, za
    ra, rb, fixed = qadd_constants(sa, za, sb, zb, sc, zc)
    lo, hi = QRANGE[np.dtype(dtype)]
    signed = int(np.dtype(dtype) == np.int8)
    fn = lib().vki_qlinear_add

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if swap:
            a, b = b, a
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        if a.shape != b.shape or a.dtype != dtype or b.dtype != dtype:
            raise ValueError("internal: qlinear_add operands differ in shape or type")
        y = np.empty(a.shape, a.dtype)
        _check(fn(_ptr(a), _ptr(b), _ptr(y), a.size, signed, ra, rb, fixed, lo, hi), "qlinear_add")
        return y
    return run
