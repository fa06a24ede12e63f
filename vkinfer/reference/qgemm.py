"""com.microsoft QGemm (and vkinfer:QGemmClamp, with a fused activation) as the interpreter runs it:
requant((A - a_zp)(B - b_zp) + C) is a 1x1 QLinearConv over A's rows with bias C (vkinfer/reference/
qlinear_conv.py's numerics, ONNX Runtime's), so the devices' convolution kernels run it too.
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


def _kernel(node, x, memo, activation=None):
    _check_a(x)
    A = x[0].T if node.attrs.get("transA", 0) else x[0]
    m, k = A.shape
    spec = cached_spec(memo, (A.shape, A.dtype.str), lambda: qgemm_node_spec(node, x, activation))
    out = qlinear_conv(dataclasses.replace(spec, x=np.ascontiguousarray(A).reshape(m, k, 1, 1)))
    return [out.reshape(m, out.shape[1])]


def _shape(node, x, activation=None):
    _check_a(x)
    spec = qgemm_node_spec(node, x, activation)
    return [((spec.out_shape[0], spec.out_shape[1]), spec.out.dtype)]


_INPUTS = (6, (0, 1, 3, 4))
DEFINITIONS = (
    OpDef("com.microsoft:QGemm", _kernel, "gemm", _INPUTS, y_params=(7, 8), x_slots=(0, 3), shape=_shape),
    OpDef("vkinfer:QGemmClamp", lambda node, x, memo: _kernel(node, x, memo, attr(node, "activation")), "gemm",
          _INPUTS, shape=lambda node, x: _shape(node, x, attr(node, "activation"))),
)
