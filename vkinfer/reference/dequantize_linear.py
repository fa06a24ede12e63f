"""ONNX DequantizeLinear (uint8/int8 -> float32), bit-exact with ONNX Runtime 1.31.

    y = float32(int32(x) - int32(zp)) * scale        one float32 multiply
Per-tensor (scalar scale), per-axis (1-D scale of length x.shape[axis]) or blocked (opset 21 `block_size`
B > 0: entry i // B along `axis` of a scale of x's rank; see quantize_linear).
"""

from __future__ import annotations

import numpy as np

from . import _qcheck as qc
from .quantize_linear import _params


def dequantize_linear(x, x_scale, x_zero_point=None, axis: int = 1, block_size: int = 0) -> np.ndarray:
    """uint8/int8 x -> float32."""
    qc.qtensor("x", x)
    s, z = _params(x, x_scale, x_zero_point, axis, x.dtype, block_size)
    return (x.astype(np.int32) - z).astype(np.float32) * s
