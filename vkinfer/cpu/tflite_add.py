"""TFLite's 8-bit ADD (XNNPACK's fixed point) in the native CPU graph, on equal shapes or a broadcast row: integer
arithmetic, so the canonical domain only moves the zero points. Other broadcasts take the table
(qlinear_lut.py)."""

from __future__ import annotations

import numpy as np

from ..layout import flip
from ..model.lowering import Layer, attrs_key, binary_mode, lower, memo, value_key
from ..reference import _qcheck as qc
from ..reference.tflite_add import tflite_add_params


@lower("cpu", "vkinfer:TFLiteAdd")
def lower_tflite_add(ctx, node, backend):
    ins = node.inputs
    # Whether it runs here, and its arguments: a pure function of the shapes, types, constant parameters (the key
    # holds whether each is a constant) and attributes, once per distinct one (a chain's nodes repeat it; 60 us a
    # node).
    ak = attrs_key(node)
    vk = None if ak is None else value_key(ctx, [ins[i] if i < len(ins) else "" for i in (0, 3, 1, 2, 4, 5, 6, 7)]
                                           + node.outputs[:1], by_shape=(0, 1))
    args = memo(ctx, None if vk is None else ("tflite_add", ak, vk), lambda: _tflite_add_plan(ctx, node))
    if args is None:
        return None

    def emit(g, refs, out, scratch):
        g.add_form("tflite_add", args, refs[0], refs[1], out)
    return Layer(node, [ins[0], ins[3]], node.outputs[0], emit)


def _tflite_add_plan(ctx, node) -> tuple | None:
    """_tflite_add_args of a node this lowering takes, else None."""
    ins = node.inputs
    mode = binary_mode(ctx, node)
    if not mode or (mode == "row" and len(ctx.shape(ins[0])) == 5) or ctx.dtype(node.outputs[0]) != ctx.dtype(ins[0]):
        return None
    return _tflite_add_args(ctx, node, mode)


def _tflite_add_args(ctx, node, mode: str) -> tuple | None:
    """The tflite_add operator's arguments before its refs, or None where the interpreter's kernel runs it."""
    ins, a = node.inputs, node.attrs
    c, dt = ctx.g.consts, ctx.dtype(ins[0])
    za, zb, zy = (qc.zero_point("zero_point", c[n], dt) for n in (ins[2], ins[5], ins[7]))
    ma, mb, shift = tflite_add_params(c[ins[1]], c[ins[4]], c[ins[6]])
    qmin, qmax = qc.QRANGE[dt]
    lo = qmin if a.get("activation_min") is None else int(a["activation_min"])
    hi = qmax if a.get("activation_max") is None else int(a["activation_max"])
    if not qmin <= lo <= hi <= qmax:
        return None  # the interpreter's kernel reports it
    k = flip(dt)  # canonical = value + 128 for int8
    n = int(np.prod(ctx.shape(ins[0])))
    period = 0 if mode == "equal" else int(np.prod(ctx.shape(ins[3])))
    return n, period, za + k, zb + k, ma, mb, shift, zy + k, lo + k, hi + k
