"""Inference BatchNormalization on float32 tensors in the native CPU graph (cpu_fallback/src/ops/batch_norm.c):
the per-channel scale and bias folded once, in float32, as ONNX Runtime 1.31 folds them
(vkinfer.model.host_float.batch_norm_fold), then y = x * s[c] + b[c] with the multiply and the add each rounded.
Non-constant parameters, training_mode=1, spatial=0 and the running-statistics outputs stay on the host."""

from __future__ import annotations

import numpy as np

from ..model.host_float import batch_norm_fold
from ..model.lowering import Layer, lower


@lower("cpu", "BatchNormalization")
def lower_batch_normalization(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    if np.dtype(ctx.dtype(x)) != np.float32 or np.dtype(ctx.dtype(y)) != np.float32:
        return None
    shape = ctx.shape(x)
    if len(shape) < 2 or len(node.inputs) != 5:
        return None
    if int(node.attrs.get("training_mode", 0)) or not int(node.attrs.get("spatial", 1)) or \
            (len(node.outputs) > 1 and any(node.outputs[1:])):
        raise ValueError("BatchNormalization in training form (training_mode, spatial=0 or running statistics "
                         "outputs): the host runs it")
    if not all(ctx.const(t) and t for t in node.inputs[1:]):
        raise ValueError("BatchNormalization with non-constant scale, bias, mean or variance (the host runs it)")
    c = int(shape[1])
    params = [np.asarray(ctx.g.consts[t]) for t in node.inputs[1:]]
    if any(p.dtype != np.float32 or p.shape != (c,) for p in params):
        return None
    eps = np.float32(float(node.attrs.get("epsilon", 1e-5)))
    s, b = batch_norm_fold(*params, eps)
    s, b = np.ascontiguousarray(s), np.ascontiguousarray(b)
    n, hw = int(shape[0]), int(np.prod(shape[2:], dtype=np.int64))
    if n * c * hw == 0:
        return None

    def emit(g, refs, out, scratch):
        g.add("batch_norm", n, c, hw, s, b, refs[0], out)
    return Layer(node, [x], y, emit)
