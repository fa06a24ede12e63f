"""vkinfer:QDQConvTranspose (vkinfer/reference/float_conv_transpose.py, ONNX Runtime's float bits) in the native
CPU graph: one `float_conv_transpose` operator (cpu_fallback/src/ops/float_conv_transpose.c) over the NHWC form.

The weights (C, M/group, kH, kW) are packed per group as the operator reads them: the group's columns in (kh, kw,
m') order, in chunks of 64 (zero-padded), each chunk (channel, 64). The operator takes non-overlapping kernels and at
most 128 channels per group (what the fold produces); anything else stays on the host, where the definition runs."""

from __future__ import annotations

import numpy as np

from ..layout import u32
from ..model.lowering import Layer, lower
from ..reference.float_conv_transpose import MAX_CHAIN, OP, overlapping
from ..reference.qlinear_conv_transpose import conv_transpose_geometry

_COLS = 64  # ops/float_conv_transpose.c's FC_COLS


def pack_weights(w: np.ndarray, group: int) -> np.ndarray:
    """(C, M/group, kH, kW) float32 -> (group, chunk, C/group, 64) float32, columns (kh, kw, m') zero-padded."""
    c, mg, kh, kw = w.shape
    cg = c // group
    cols = kh * kw * mg
    chunks = -(-cols // _COLS)
    t = np.zeros((group, cg, chunks * _COLS), np.float32)
    t[:, :, :cols] = w.reshape(group, cg, mg, kh, kw).transpose(0, 1, 3, 4, 2).reshape(group, cg, cols)
    return np.ascontiguousarray(t.reshape(group, cg, chunks, _COLS).transpose(0, 2, 1, 3)).ravel()


@lower("cpu", OP)
def lower_float_conv_transpose(ctx, node, backend):
    """The node as one native operator (module docstring), or None (the host runs it)."""
    ins = list(node.inputs) + [""] * (7 - len(node.inputs))
    x, y = ins[0], node.outputs[0]
    if not ctx.quantized(x, y) or len(ctx.shape(x)) != 4:
        return None
    if not all(ctx.const(t) for t in (ins[1], ins[2], ins[3], ins[5], ins[6])) or (ins[4] and not ctx.const(ins[4])):
        return None
    c = ctx.g.consts
    w = np.asarray(c[ins[3]])
    a = node.attrs
    group = int(a.get("group", 1))
    n, ci, h, wd = ctx.shape(x)
    if w.dtype != np.float32 or w.ndim != 4 or group < 1 or ci % group or w.shape[0] != ci:
        return None
    strides = [int(v) for v in a.get("strides", [1, 1])]
    dilations = [int(v) for v in a.get("dilations", [1, 1])]
    if ci // group > MAX_CHAIN or overlapping(w.shape[2:], strides, dilations):
        return None
    try:
        (pt, pl), (oh, ow) = conv_transpose_geometry(
            (h, wd), w.shape[2:], **{k: a[k] for k in ("strides", "pads", "dilations", "output_padding",
                                                        "output_shape", "auto_pad") if k in a})
    except ValueError:
        return None  # the definition reports it, naming the node
    m = w.shape[1] * group
    if tuple(ctx.shape(y)) != (n, m, oh, ow):
        return None
    bias = np.zeros(m, np.float32) if not ins[4] else np.asarray(c[ins[4]], np.float32).reshape(-1)
    if bias.size != m:
        return None
    xs, ys = np.asarray(c[ins[1]]), np.asarray(c[ins[5]])
    xz, yz = np.asarray(c[ins[2]]), np.asarray(c[ins[6]])
    if xs.size != 1 or ys.size != 1 or xz.size != 1 or yz.size != 1:
        return None
    xdt, ydt = np.dtype(ctx.dtype(x)), np.dtype(ctx.dtype(y))
    dims = u32([n, h, wd, ci, m, group, *w.shape[2:], *strides, *dilations, pt, pl, oh, ow])
    weights = pack_weights(w, group)
    bias = np.ascontiguousarray(bias)
    args = (float(xs.reshape(-1)[0]), int(xz.reshape(-1)[0]), int(xdt == np.int8),
            float(ys.reshape(-1)[0]), int(yz.reshape(-1)[0]), int(ydt == np.int8))

    def emit(g, refs, out, scratch):
        g.add("float_conv_transpose", dims, weights, bias, args[0], args[1], args[2], args[3], args[4], args[5],
              refs[0], out)
    return Layer(node, [x], y, emit)
