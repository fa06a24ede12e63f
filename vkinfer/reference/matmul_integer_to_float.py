"""com.microsoft MatMulIntegerToFloat as ONNX Runtime 1.31's CPU EP computes it (the op its QDQ transformer makes of
DequantizeLinear(a) and DequantizeLinear(b) -> MatMul with no QuantizeLinear after it, a float output):

    y = float32(int32 sum_k (a - a_zero_point)(b - b_zero_point)) * float32(a_scale * b_scale)  [+ bias]

one float32 product per output, the multiplier per column for a per-column b_scale; then the float32 bias (input 6,
per column) added in a second rounding (MLAS's scale-bias output processor multiplies, then adds). Checked bit for
bit against ORT in tests/importers/test_qdq_rules.py. Inputs: a, b (uint8/int8), a_scale (scalar), b_scale (scalar
or N), a_zero_point (scalar), b_zero_point (scalar or N), bias (N).
"""

from __future__ import annotations

import numpy as np

from ._opdef import OpDef
from .matmul_integer import matmul_integer


def _vec(name: str, v, n: int, dtype) -> np.ndarray:
    """A scalar or a 1-D per-column vector of `n` entries, of `dtype`, else ValueError/TypeError naming it."""
    x = np.asarray(v)
    if x.dtype != dtype:
        raise TypeError(f"{name} must have dtype {np.dtype(dtype)}, got {x.dtype}")
    if x.size != 1 and x.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have one entry per column ({n}), got shape {x.shape}")
    return x.reshape(-1)


def matmul_integer_to_float(a, b, a_scale, b_scale, a_zero_point=None, b_zero_point=None,
                            bias=None) -> np.ndarray:
    """ORT's MatMulIntegerToFloat (module docstring): float32 y of numpy-matmul shape."""
    if np.ndim(b) < 1:
        raise ValueError("b must have at least one dimension")
    n = int(np.shape(b)[-1])
    sa = _vec("a_scale", a_scale, 1, np.float32)
    sb = _vec("b_scale", b_scale, n, np.float32)
    if a_zero_point is not None and np.asarray(a_zero_point).size != 1:
        raise ValueError(f"a_zero_point must be a scalar, got shape {np.shape(a_zero_point)}")
    bz = None if b_zero_point is None else _vec("b_zero_point", b_zero_point, n, np.asarray(b).dtype)
    az = None if a_zero_point is None else np.asarray(a_zero_point).reshape(())
    acc = matmul_integer(a, b, az, None if bz is None else (bz.reshape(()) if bz.size == 1 else bz))
    mult = (sa[0] * sb).astype(np.float32)  # float32 a_scale * b_scale, rounded once
    y = (acc.astype(np.float32) * mult).astype(np.float32)  # int32 -> float32 exact below 2**24, else rounded
    if bias is not None:
        y = (y + _vec("bias", bias, n, np.float32)).astype(np.float32)
    return y


def _kernel(node, x, memo):
    return [matmul_integer_to_float(*x[:7])]


def _shape(node, x):
    y = matmul_integer_to_float(*x[:7])
    return [(y.shape, y.dtype)]


DEFINITIONS = (
    OpDef("com.microsoft:MatMulIntegerToFloat", _kernel, "gemm", (4, (0, 1, 2, 3)), shape=_shape),
)
