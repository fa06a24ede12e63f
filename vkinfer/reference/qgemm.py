"""com.microsoft QGemm (and vkinfer:QGemmClamp, with a fused activation) as the interpreter runs it:
requant((A - a_zp)(B - b_zp) + C) is a 1x1 QLinearConv over A's rows with bias C (vkinfer/reference/
qlinear_conv.py's numerics, ONNX Runtime's), so the devices' convolution kernels run it too.

Without y_scale and y_zero_point the output is float32, as ORT's QGemm computes it (the op its QDQ transformer makes
of DequantizeLinear'd A, B and an int32 C -> Gemm with no QuantizeLinear after it; measured against ORT 1.31.1):

    y = float32(int32(sum_k (A - a_zp)(B - b_zp) + C)) * float32(float32(alpha * a_scale) * b_scale[j])

C's raw int32 values join the integer sums (its DequantizeLinear's scale is not read); one float32 multiply per
output, the multiplier per column for a per-column b_scale.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ._opdef import OpDef, attr, cached_spec
from ._spec import conv_spec
from .qlinear_conv import qlinear_conv


def qgemm_node_spec(node, x: list, activation=None):
    """The ConvSpec of a QGemm node for input values `x`."""
    a = node.attrs
    if float(a.get("alpha", 1.0)) != 1.0:
        raise ValueError("QGemm with alpha != 1 is not supported")
    if len(x) < 9 or x[7] is None:
        raise ValueError("QGemm without y_scale (float output) is not supported")
    if np.ndim(x[3]) != 2:
        raise ValueError(f"B must be 2-D, got shape {list(np.shape(x[3]))}")
    A = x[0].T if a.get("transA", 0) else x[0]
    m, k = A.shape
    B = x[3] if a.get("transB", 0) else x[3].T  # (N, K)
    bias = None if x[6] is None else np.ascontiguousarray(np.broadcast_to(x[6], (B.shape[0],)), np.int32)
    return conv_spec(np.ascontiguousarray(A).reshape(m, k, 1, 1), x[1], x[2],
                     np.ascontiguousarray(B).reshape(B.shape[0], k, 1, 1), x[4], x[5], x[7], x[8], bias,
                     activation=activation)


def _check_a(x) -> None:
    if np.ndim(x[0]) != 2:
        raise ValueError(f"A must be 2-D, got shape {list(np.shape(x[0]))}")


def float_output(x: list) -> bool:
    """Whether a QGemm's inputs make a float32 output (no y_scale)."""
    return len(x) < 8 or x[7] is None


def qgemm_float(node, x: list) -> np.ndarray:
    """A QGemm without y_scale (module docstring): float32 (M, N)."""
    from .matmul_integer import matmul_integer

    a = node.attrs
    _check_a(x)
    if np.ndim(x[3]) != 2:
        raise ValueError(f"B must be 2-D, got shape {list(np.shape(x[3]))}")
    if len(x) > 8 and x[8] is not None:
        raise ValueError("y_zero_point without y_scale")
    A = x[0].T if a.get("transA", 0) else x[0]
    B = x[3].T if a.get("transB", 0) else x[3]  # (K, N)
    if A.shape[1] != B.shape[0]:
        raise ValueError(f"A {list(A.shape)} and B {list(B.shape)} (after transA/transB) do not multiply")
    m, n = A.shape[0], B.shape[1]
    sa, sb = np.asarray(x[1]), np.asarray(x[4])
    if sa.dtype != np.float32 or sb.dtype != np.float32 or sa.size != 1 or sb.size not in (1, n):
        raise ValueError(f"a_scale must be a float32 scalar and b_scale float32 of 1 or {n} entries")
    zb = None if x[5] is None else np.asarray(x[5]).reshape(-1)
    if zb is not None and zb.size not in (1, n):
        raise ValueError(f"b_zero_point must have 1 or {n} entries, got {zb.size}")
    za = None if x[2] is None else np.asarray(x[2]).reshape(())
    acc = matmul_integer(np.ascontiguousarray(A), np.ascontiguousarray(B), za,
                         None if zb is None else (zb.reshape(()) if zb.size == 1 else zb)).astype(np.int64)
    if len(x) > 6 and x[6] is not None:
        c = np.asarray(x[6])
        if c.dtype != np.int32:
            raise TypeError(f"C must be int32, got {c.dtype}")
        try:
            acc = acc + np.broadcast_to(c, (m, n))
        except ValueError:
            raise ValueError(f"C of shape {list(c.shape)} does not broadcast to ({m}, {n})") from None
    acc = acc.astype(np.int32)  # MLAS accumulates in int32 (wrapping)
    alpha = np.float32(a.get("alpha", 1.0))
    mult = (np.float32(alpha * sa.reshape(())[()]) * sb.reshape(-1)).astype(np.float32)
    return (acc.astype(np.float32) * mult).astype(np.float32)


def _kernel(node, x, memo, activation=None):
    if float_output(x) and activation is None:
        return [qgemm_float(node, x)]
    _check_a(x)
    A = x[0].T if node.attrs.get("transA", 0) else x[0]
    m, k = A.shape
    spec = cached_spec(memo, (A.shape, A.dtype.str), lambda: qgemm_node_spec(node, x, activation))
    out = qlinear_conv(dataclasses.replace(spec, x=np.ascontiguousarray(A).reshape(m, k, 1, 1)))
    return [out.reshape(m, out.shape[1])]


def _shape(node, x, activation=None):
    if float_output(x) and activation is None:
        y = qgemm_float(node, x)
        return [(y.shape, y.dtype)]
    _check_a(x)
    spec = qgemm_node_spec(node, x, activation)
    return [((spec.out_shape[0], spec.out_shape[1]), spec.out.dtype)]


_INPUTS = (6, (0, 1, 3, 4))
DEFINITIONS = (
    OpDef("com.microsoft:QGemm", _kernel, "gemm", _INPUTS, y_params=(7, 8), x_slots=(0, 3), shape=_shape),
    OpDef("vkinfer:QGemmClamp", lambda node, x, memo: _kernel(node, x, memo, attr(node, "activation")), "gemm",
          _INPUTS, shape=lambda node, x: _shape(node, x, attr(node, "activation"))),
)
