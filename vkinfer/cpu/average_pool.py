"""Average pooling of 8-bit NCHW tensors in the native CPU graph: com.microsoft QLinearAveragePool (ORT's float
arithmetic, and its switch to the global pool's integer path) and TFLite's AVERAGE_POOL_2D (integer average,
fused activation bounds)."""

from __future__ import annotations

import numpy as np

from ..model.lowering import Layer, lower, pool_qparams, static_params
from ..reference.tflite_average_pool import tflite_pool_attrs


@lower("cpu", "com.microsoft:QLinearAveragePool")
def lower_qavgpool(ctx, node, backend):
    ins, a = node.inputs, node.attrs
    x, y = ins[0], node.outputs[0]
    if not (ctx.quantized(x, y) and len(ctx.shape(x)) == 4 and not a.get("channels_last", 0)
            and static_params(ctx, node, (1, 2, 3, 4))):
        return None
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
        return None
    k = [int(v) for v in a["kernel_shape"]]
    st = [int(v) for v in a.get("strides") or (1, 1)]
    pads = [int(v) for v in a.get("pads") or (0, 0, 0, 0)]
    if len(k) != 2 or len(st) != 2 or len(pads) != 4 or (a.get("dilations") and any(int(d) != 1 for d in
                                                                                        a["dilations"])):
        return None
    dt = ctx.dtype(x)
    xs, xz, ys, yz = pool_qparams(ctx, node)
    n, ch, h, w = ctx.shape(x)
    oh, ow = ctx.shape(y)[2:]
    cip = int(a.get("count_include_pad", 0))
    signed = int(np.dtype(dt) == np.int8)

    def emit(g, refs, out, scratch):
        g.add("qavgpool", n, h, w, ch, oh, ow, k[0], k[1], st[0], st[1], pads[0], pads[1], pads[2], pads[3], cip,
              signed, float(xs), int(xz), float(ys), int(yz), refs[0], out)
    return Layer(node, [x], y, emit)


@lower("cpu", "vkinfer:TFLiteAveragePool")
def lower_tflite_avgpool(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    if not (ctx.quantized(x, y) and len(ctx.shape(x)) == 4):
        return None
    dt = ctx.dtype(x)
    (kh, kw), (sh, sw), pads, lo, hi = tflite_pool_attrs(node, dt)
    n, ch, h, w = ctx.shape(x)
    oh, ow = ctx.shape(y)[2:]
    signed = int(np.dtype(dt) == np.int8)

    def emit(g, refs, out, scratch):
        g.add("tflite_avgpool", n, h, w, ch, oh, ow, kh, kw, sh, sw, pads[0], pads[1], signed, lo, hi, refs[0], out)
    return Layer(node, [x], y, emit)
