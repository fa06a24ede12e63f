"""QLinearMatMul, the readable definition (ONNX semantics, ONNX Runtime's requantization).

acc[..., i, j] = sum_k (a[..., i, k] - a_zp) * (b[..., k, j] - b_zp[j]) in int32; then requantize().
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ._opdef import OpDef, cached_spec
from .requant import requantize


def qlinear_matmul(s) -> np.ndarray:
    """Quantized output of a validated MatMulSpec, in the broadcast output shape."""
    a = s.a.astype(np.float64) - s.a_zp
    b = s.b.astype(np.float64) - s.b_zp[None, None, :]
    acc = np.matmul(a, b).astype(np.int64).astype(np.int32)  # exact: |acc| < 2**53
    q = requantize(acc, s.out.m[None, None, :], s.out.zero_point, s.out.lo, s.out.hi)
    return q.astype(s.out.dtype).reshape(s.out_shape)


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _kernel(node, x, memo):
    from ._spec import matmul_spec

    spec = cached_spec(memo, (x[0].shape, x[0].dtype.str), lambda: matmul_spec(*x[:8]))
    a, b = x[0], x[3]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])  # matmul_spec has checked it broadcasts
    # A as the spec's (batch, M, K): 4-D, or broadcast over B's batch
    a = np.ascontiguousarray(np.broadcast_to(a, (*batch, *a.shape[-2:]))).reshape(-1, *a.shape[-2:])
    return [qlinear_matmul(dataclasses.replace(spec, a=a))]


def _shape(node, x):
    from ._spec import matmul_spec

    spec = matmul_spec(*x[:8])
    return [(spec.out_shape, spec.out.dtype)]


DEFINITIONS = (OpDef("QLinearMatMul", _kernel, "gemm", (8, (0, 1, 3, 4, 6)), y_params=(6, 7), x_slots=(0, 3),
                     shape=_shape),)
