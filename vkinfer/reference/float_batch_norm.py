"""Inference BatchNormalization on float32 tensors with ONNX Runtime 1.31's CPU bits, in numpy: the reference
device's kernel and the specification of cpu_fallback/src/ops/batch_norm.c (whose per-channel scale and bias
vkinfer/cpu/batch_normalization.py folds with `batch_norm_fold`).

ORT (batch_norm.h) folds per channel, each step rounded to float32 (its Eigen expression, no fused multiply-add):
s = (1 / sqrt(var + eps)) * scale, b = B - mean * s; then y = x * s + b, the multiply and the add each rounded.
training_mode=1 and the running-statistics outputs are refused (a trained model's inference graph has neither).
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def batch_norm_fold(scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray,
                    eps: np.float32) -> tuple[np.ndarray, np.ndarray]:
    """ORT's per-channel fold (module docstring): (s, b), float32."""
    with np.errstate(all="ignore"):
        s = (np.float32(1) / np.sqrt(var + np.float32(eps))) * scale
        b = bias - mean * s
    return s.astype(np.float32), b.astype(np.float32)


def batch_norm(x: np.ndarray, scale, bias, mean, var, eps: float = 1e-5) -> np.ndarray:
    """y = x * s[c] + b[c] over axis 1 of x (N, C, ...), float32."""
    x = np.asarray(x)
    if x.dtype != F32:
        raise TypeError(f"BatchNormalization: X must be float32, got {x.dtype}")
    if x.ndim < 2:
        raise ValueError(f"BatchNormalization: X must be (N, C, ...), got shape {list(x.shape)}")
    c = x.shape[1]
    params = []
    for p, what in zip((scale, bias, mean, var), ("scale", "B", "input_mean", "input_var"), strict=True):
        p = np.asarray(p)
        if p.dtype != F32:
            raise TypeError(f"BatchNormalization: {what} must be float32, got {p.dtype}")
        if p.shape != (c,):
            raise ValueError(f"BatchNormalization: {what} must have shape [{c}] (X's channels), got {list(p.shape)}")
        params.append(p)
    s, b = batch_norm_fold(*params, np.float32(eps))
    shape = (1, c) + (1,) * (x.ndim - 2)
    with np.errstate(all="ignore"):
        return (x * s.reshape(shape) + b.reshape(shape)).astype(F32)


def kernel(node, x: list, memo: dict) -> list:
    """An inference BatchNormalization node (inputs X, scale, B, mean, var; output Y only)."""
    if int(node.attrs.get("training_mode", 0)):
        raise ValueError("training_mode=1 is not supported (inference only)")
    if len(node.outputs) > 1 and any(node.outputs[1:]):
        raise ValueError("only the output Y is supported (running mean/var outputs are for training)")
    try:
        eps = float(node.attrs.get("epsilon", 1e-5))
    except (TypeError, ValueError) as e:
        raise ValueError(f"attribute 'epsilon' must be a float, got {node.attrs.get('epsilon')!r}") from e
    return [batch_norm(x[0], *x[1:5], eps)]
