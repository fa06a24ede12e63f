"""MaxPool on 8-bit NCHW tensors (2-D, explicit pads) in the native CPU graph: the max of canonical bytes is the
max of the values (XOR 0x80 keeps the order of int8)."""

from __future__ import annotations

from ..model.lowering import Layer, lower
from ..reference.max_pool import pool_attrs


@lower("cpu", "MaxPool")
def lower_max_pool(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    if not (ctx.quantized(x) and len(ctx.shape(x)) == 4 and not node.attrs.get("storage_order", 0)
            and len(node.outputs) == 1) or (p := pool_attrs(node)) is None:
        return None
    (kh, kw), (sh, sw), (dh, dw), pads = p
    n, c, h, w = ctx.shape(x)
    oh, ow = ctx.shape(y)[2:]

    def emit(g, refs, out, scratch):
        g.add("maxpool", n, h, w, c, oh, ow, kh, kw, sh, sw, dh, dw, pads[0], pads[1], refs[0], out)
    return Layer(node, [x], y, emit)
