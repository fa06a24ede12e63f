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
    """uint8/int8 x -> float32; int32 x (a quantized bias, as onnxruntime.quantization leaves one in front of a
    float op it does not quantize) with no zero point or a zero one: float32(x) * scale, as ORT computes it."""
    if isinstance(x, np.ndarray) and x.dtype == np.int32:
        if x_zero_point is not None and (np.asarray(x_zero_point).dtype != np.int32 or np.any(x_zero_point)):
            raise ValueError("an int32 DequantizeLinear takes no zero point, or an int32 zero")
        s, _ = _params(x, x_scale, None, axis, np.int8, block_size)
        return x.astype(np.float32) * s
    qc.qtensor("x", x)
    s, z = _params(x, x_scale, x_zero_point, axis, x.dtype, block_size)
    return (x.astype(np.int32) - z).astype(np.float32) * s
