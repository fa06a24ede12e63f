"""TFLite's 8-bit MEAN over any axes in the native CPU graph (XNNPACK's float32 mean,
vkinfer/reference/tflite_mean.py): one pass over x in its CPU form, each element summed into its output's
position in y's CPU form (`tflite_mean` in cpu_fallback/src/ops/tflite_mean.c), so no transpose either side."""

from __future__ import annotations

import numpy as np

from ..layout import form_perm
from ..model.lowering import Layer, lower, static_params
from ..reference import _qcheck as qc
from ..reference.tflite_mean import mean_axes, mean_params


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
    ins, x, y = node.inputs, node.inputs[0], node.outputs[0]
    shape = tuple(int(d) for d in ctx.shape(x))
    dt = ctx.dtype(x)
    if (not ctx.quantized(x, y) or ctx.dtype(y) != dt or not static_params(ctx, node, (1, 2, 3, 4))
            or not 1 <= len(shape) <= 6):
        return None
    c = ctx.g.consts
    try:
        axes = mean_axes(node.attrs.get("axes", ()), len(shape))
        xs, ys = qc.scale("x_scale", c[ins[1]]), qc.scale("y_scale", c[ins[3]])
        xz, yz = qc.zero_point("x_zero_point", c[ins[2]], dt), qc.zero_point("y_zero_point", c[ins[4]], dt)
    except ValueError:
        return None  # the interpreter's kernel reports it
    n = int(np.prod([shape[a] for a in axes], dtype=np.int64))
    if n < 1 or n * 255 >= 2 ** 31:
        return None
    keep = bool(node.attrs.get("keepdims", 1))
    y_shape = tuple(1 if i in axes else d for i, d in enumerate(shape)) if keep else tuple(
        d for i, d in enumerate(shape) if i not in axes)
    if tuple(ctx.shape(y)) != y_shape:
        return None
    y_st = _strides(y_shape) if y_shape else []
    out_axis, k = {}, 0
    for i in range(len(shape)):
        if keep or i not in axes:
            out_axis[i] = k
            k += 1
    perm = form_perm(shape)
    mem_shape = [shape[a] for a in perm]
    ostride = [0 if a in axes else y_st[out_axis[a]] for a in perm]
    m, bias = mean_params(n, xs, xz, ys, yz)
    n_out = int(np.prod(y_shape, dtype=np.int64))
    shp = np.array(mem_shape, np.uint32)
    ost = np.array(ostride, np.uint64)

    def emit(g, refs, out, scratch):
        g.add("tflite_mean", len(shape), shp, ost, n_out, n, int(dt == np.int8), float(m), float(bias), refs[0],
              out)
    return Layer(node, [x], y, emit)
