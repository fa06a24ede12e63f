"""ONNX DequantizeLinear (uint8/int8 -> float32), bit-exact with ONNX Runtime 1.31.

    y = float32(int32(x) - int32(zp)) * scale        one float32 multiply
Per-tensor (scalar scale) or per-axis (1-D scale of length x.shape[axis]).
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from .quantize_linear import _params


def dequantize_linear(x, x_scale, x_zero_point=None, axis: int = 1) -> np.ndarray:
    qc.qtensor("x", x)
    s, z = _params(x, x_scale, x_zero_point, axis, x.dtype)
    return (x.astype(np.int32) - z).astype(np.float32) * s
