"""float32 Softmax and LogSoftmax in the native CPU graph with ONNX Runtime 1.31's AVX-512F bits
(cpu_fallback/src/ops/float_softmax.c; vkinfer/reference/float_softmax.py is the definition and says which order
it fixes). float32 tensors live in the graph in the host's plain layout, so the tensor is viewed as
(outer, len, inner): opset 13 and later, len = the axis and inner = the axes after it (ORT transposes that axis
last, which changes no bit); before opset 13 the rows are every axis from `axis` on (inner = 1). Other types
stay on the host (the float kernel refuses them with a TypeError); an 8-bit DQ -> Softmax -> Q has been folded
into QLinearSoftmax before lowering wherever ORT fuses it."""

from __future__ import annotations

import math

import numpy as np

from ..model.lowering import Layer, lower
from ..reference.float_softmax import OPS, node_axis

_F32 = np.dtype(np.float32)


@lower("cpu", *OPS)
def lower_float_softmax(ctx, node, backend):
    """A float32 Softmax/LogSoftmax as one float_softmax over (outer, len, inner)."""
    x, y = node.inputs[0], node.outputs[0]
    if not (x in ctx.info and y in ctx.info and ctx.dtype(x) == _F32 and ctx.dtype(y) == _F32):
        return None
    shape = tuple(int(s) for s in ctx.shape(x))
    axis, legacy = node_axis(node)
    r = len(shape)
    if r == 0 or not (-r <= axis <= (r if legacy else r - 1)):
        raise ValueError(f"{node.op} axis {axis} is out of range for a rank-{r} input")
    axis += r if axis < 0 else 0
    if 0 in shape:
        return None  # an empty tensor: the host
    outer = math.prod(shape[:axis])
    if legacy:
        length, inner = math.prod(shape[axis:]), 1
    else:
        length, inner = shape[axis], math.prod(shape[axis + 1:])
    if length >= 2 ** 32:
        raise ValueError(f"{node.op}: rows of {length} elements, past the native graph's 32-bit row length "
                         "(the host runs it)")
    log = int(node.op == "LogSoftmax")

    def emit(g, refs, out, scratch):
        g.add("float_softmax", outer, length, inner, log, refs[0], out)
    return Layer(node, [x], y, emit)
