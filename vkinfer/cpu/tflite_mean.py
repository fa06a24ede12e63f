"""TFLite's 8-bit MEAN over any axes in the native CPU graph (XNNPACK's float32 mean,
vkinfer/reference/tflite_mean.py): one pass over x in its CPU form, each element summed into its output's
position in y's CPU form (`tflite_mean` in cpu_fallback/src/ops/tflite_mean.c), so no transpose either side."""

from __future__ import annotations

import numpy as np

from ..layout import form_perm
from ..model.lowering import Layer, lower
from ..reference.tflite_mean import mean_lowering


def _strides(shape) -> list[int]:
    """Element strides of each logical axis of `shape` in its CPU form."""
    perm = form_perm(shape)
    st, acc = [0] * len(shape), 1
    for a in reversed(perm):
        st[a] = acc
        acc *= int(shape[a])
    return st


@lower("cpu", "vkinfer:TFLiteMean")
def lower_tflite_mean(ctx, node, backend):
    geo = mean_lowering(ctx, node, 6)
    if geo is None:
        return None
    x, y, dt = node.inputs[0], node.outputs[0], ctx.dtype(node.inputs[0])
    shape, y_shape, axes, keep, n, m, bias = geo
    y_st = _strides(y_shape) if y_shape else []
    out_axis, k = {}, 0
    for i in range(len(shape)):
        if keep or i not in axes:
            out_axis[i] = k
            k += 1
    perm = form_perm(shape)
    mem_shape = [shape[a] for a in perm]
    ostride = [0 if a in axes else y_st[out_axis[a]] for a in perm]
    n_out = int(np.prod(y_shape, dtype=np.int64))
    shp = np.array(mem_shape, np.uint32)
    ost = np.array(ostride, np.uint64)

    def emit(g, refs, out, scratch):
        g.add("tflite_mean", len(shape), shp, ost, n_out, n, int(dt == np.int8), float(m), float(bias), refs[0],
              out)
    return Layer(node, [x], y, emit)
