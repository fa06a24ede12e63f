"""8-bit TFLite ops with the bits of litert's integer kernels (XNNPACK's where litert 2.3 delegates them, else
TFLite's builtin ones): each op's check, build and entry in the op table (ops.py).

    RESIZE_BILINEAR    -> vkinfer:TFLiteResizeBilinear (XNNPACK's 11-bit weights, vkinfer/reference/
                          tflite_resize_bilinear.py), on NCHW
    BATCH_MATMUL       -> vkinfer:TFLiteBatchMatMul (int8; XNNPACK's float32 or the builtin kernel's fixed-point
                          requantization, vkinfer/reference/tflite_batch_matmul.py), on TFLite's layout
    TRANSPOSE_CONV     -> vkinfer:QLinearConvTranspose (int8, per-tensor or per-channel weights; XNNPACK's
                          float32 requantization is the convolution contract), on NCHW, then the fused
                          activation's clamp, expanded at once into ZeroInsert + QLinearConv; where XNNPACK
                          refuses the geometry (negative total padding) vkinfer:TFLiteTransposeConv, the builtin
                          kernel's fixed point (vkinfer/reference/tflite_transpose_conv.py), on the host
"""

from __future__ import annotations

import numpy as np

from .builder import Op, act_range, expect_shape, same_q
from .reader import DTYPES, QRANGE


def _const_ints(tensors, i: int, what: str) -> np.ndarray:
    t = tensors[i]
    if t.data is None or t.dtype not in (2, 4):
        raise ValueError(f"{what} {t.name!r} must be a constant int32/int64 tensor")
    return np.frombuffer(t.data, DTYPES[t.dtype]).astype(np.int64)


def _q8(tensors, i: int) -> bool:
    return DTYPES.get(tensors[i].dtype) in (np.uint8, np.int8) and tensors[i].scale is not None and (
        tensors[i].scale.size == 1)


# ---- RESIZE_BILINEAR -------------------------------------------------------------------------------------------

def resize_bilinear(imp, ins, outs, opts) -> None:
    """RESIZE_BILINEAR -> vkinfer:TFLiteResizeBilinear on NCHW (the size constant)."""
    x = ins[0]
    n, _, _, c = imp.t[x].shape
    size = _const_ints(imp.t, ins[1], "size")
    if size.size != 2 or size.min() < 1 or size.max() >= 2 ** 24:
        raise ValueError(f"size {size.tolist()} must be two integers in [1, 2^24)")
    oh, ow = (int(v) for v in size)
    expect_shape(imp, outs[0], [n, oh, ow, c], f"resizing to {[oh, ow]}")
    ac = bool(opts.AlignCorners()) if opts is not None else False
    hp = bool(opts.HalfPixelCenters()) if opts is not None else False
    imp.node("vkinfer:TFLiteResizeBilinear", [imp.get(x, "NCHW")], [imp.put(outs[0], "NCHW")], size=[oh, ow],
             align_corners=int(ac), half_pixel_centers=int(hp))


def check_resize_bilinear(ins, outs, opts, tensors) -> str | None:
    if not (_q8(tensors, ins[0]) and _q8(tensors, outs[0])):
        return "only per-tensor int8/uint8 quantized tensors are supported (float models are not)"
    if tensors[ins[0]].dtype != tensors[outs[0]].dtype or not same_q(tensors[ins[0]], tensors[outs[0]]):
        return "input and output must share one type, scale and zero point (as TFLite requires)"
    if len(tensors[ins[0]].shape) != 4:
        return "input is not 4-D"
    if tensors[ins[1]].data is None:
        return "the size must be a constant tensor"
    return None


# ---- BATCH_MATMUL ----------------------------------------------------------------------------------------------

def batch_matmul(imp, ins, outs, opts) -> None:
    """BATCH_MATMUL -> vkinfer:TFLiteBatchMatMul on TFLite's own layout (adj_x / adj_y as attributes)."""
    from ...reference.tflite_batch_matmul import batch_matmul_shapes

    adj_x = bool(opts.AdjX()) if opts is not None else False
    adj_y = bool(opts.AdjY()) if opts is not None else False
    a, b = ins[:2]
    batch, m, _, n = batch_matmul_shapes(imp.t[a].shape, imp.t[b].shape, adj_x, adj_y)
    expect_shape(imp, outs[0], [*batch, m, n], f"BATCH_MATMUL (adj_x={adj_x}, adj_y={adj_y})")
    imp.node("vkinfer:TFLiteBatchMatMul", [imp.get(a), *imp.qparams(a), imp.get(b), *imp.qparams(b),
                                           *imp.qparams(outs[0])], [imp.put(outs[0])], adj_x=int(adj_x),
             adj_y=int(adj_y))


def check_batch_matmul(ins, outs, opts, tensors) -> str | None:
    if not all(_q8(tensors, i) and DTYPES[tensors[i].dtype] == np.int8 for i in [*ins[:2], outs[0]]):
        return "only per-tensor int8 operands and output are supported (TFLite's 8-bit BATCH_MATMUL is int8)"
    if opts is not None and opts.AsymmetricQuantizeInputs():
        return "asymmetric_quantize_inputs (hybrid float) is not supported"
    return None


# ---- TRANSPOSE_CONV --------------------------------------------------------------------------------------------

def transpose_conv_pads(in_size: int, out_size: int, k: int, s: int) -> tuple[int, int, int]:
    """(pad_begin, pad_end, output_padding) of a transposed convolution from in_size to out_size: TFLite's (and
    XNNPACK's) total padding (in - 1) * s + k - out split with the smaller half first; a negative total is extra
    output at the end (ONNX's output_padding, below the stride)."""
    total = (in_size - 1) * s + k - out_size
    if total >= 0:
        return total // 2, total - total // 2, 0
    if -total >= s:
        raise ValueError(f"transposed convolution output size {out_size} is more than {s - 1} past what input "
                         f"size {in_size}, kernel {k} and stride {s} reach")
    return 0, 0, -total


def transpose_conv(imp, ins, outs, opts) -> None:
    """TRANSPOSE_CONV -> vkinfer:QLinearConvTranspose on NCHW: weights OHWI -> (I, O, kH, kW) (ONNX's layout, its
    per-channel parameters on axis 1), pads from the output size, the fused activation's clamp after."""
    out_shape = _const_ints(imp.t, ins[0], "output_shape")
    w, x = ins[1], ins[2]
    b = ins[3] if len(ins) > 3 and ins[3] >= 0 else -1
    n, h, wd, c = imp.t[x].shape
    wt = imp.array(w)
    o, kh, kw, ci = wt.shape
    if ci != c:
        raise ValueError(f"weights {imp.t[w].name!r} have {ci} input channels, the input has {c}")
    if out_shape.tolist() != list(imp.t[outs[0]].shape) or out_shape.size != 4 or out_shape[3] != o or (
            out_shape[0] != n):
        raise ValueError(f"output_shape {out_shape.tolist()} does not match the output tensor "
                         f"{list(imp.t[outs[0]].shape)} of {o} channels")
    sh, sw = opts.StrideH(), opts.StrideW()
    ph0, ph1, oph = transpose_conv_pads(h, int(out_shape[1]), kh, sh)
    pw0, pw1, opw = transpose_conv_pads(wd, int(out_shape[2]), kw, sw)
    if opts.Padding() == 1 and (ph0 or ph1 or pw0 or pw1 or oph or opw):
        raise ValueError(f"VALID TRANSPOSE_CONV from {[h, wd]} by kernel {[kh, kw]}, stride {[sh, sw]} cannot "
                         f"give output {out_shape[1:3].tolist()}")
    ws, wz = imp.qparams(w, per_axis=True)
    w_onnx = imp.const("weights", np.ascontiguousarray(wt.transpose(3, 0, 1, 2)))
    if oph or opw:  # XNNPACK's delegate refuses a negative total padding: litert's builtin kernel runs it
        t = imp.t[outs[0]]
        lo, hi = (act_range(opts.FusedActivationFunction(), t.scale[0], int(t.zero_point[0]), np.int8)
                  or QRANGE[np.dtype(np.int8)])
        ins_ = [imp.get(x, "NCHW"), *imp.qparams(x), w_onnx, ws, *imp.qparams(outs[0])]
        if b >= 0:
            ins_.append(imp.const("bias", imp.array(b).astype(np.int32)))
        imp.node("vkinfer:TFLiteTransposeConv", ins_, [imp.put(outs[0], "NCHW")], strides=[sh, sw],
                 pads=[ph0, pw0, ph1, pw1], output_padding=[oph, opw], activation_min=int(lo),
                 activation_max=int(hi))
        return
    inputs = [imp.get(x, "NCHW"), *imp.qparams(x), w_onnx, ws, wz, *imp.qparams(outs[0])]
    if b >= 0:
        inputs.append(imp.const("bias", imp.array(b).astype(np.int32)))
    act = imp.activation(opts.FusedActivationFunction(), outs[0])
    y = imp.write(outs[0], "NCHW", act)
    attrs = dict(strides=[sh, sw], pads=[ph0, pw0, ph1, pw1], kernel_shape=[kh, kw])
    if oph or opw:
        attrs["output_padding"] = [oph, opw]
    # Expanded here (the ONNX importer's passes.optimize does it there) into ZeroInsert + a stride-1 QLinearConv,
    # which the devices run; geometry it cannot expand stays vkinfer:QLinearConvTranspose on the host.
    from ..conv_transpose import QOP, expand_conv_transpose
    from ..graph import Graph, Node

    node = Node(QOP, f"QLinearConvTranspose_{len(imp.nodes)}", inputs, [y], attrs)
    imp.nodes.extend(expand_conv_transpose(Graph([node], [], [], imp.consts)).nodes)
    if act is not None:
        imp.clamp(y, outs[0], "NCHW", act)


def check_transpose_conv(ins, outs, opts, tensors) -> str | None:
    from .builder import ACTIVATIONS

    if len(ins) < 3:
        return "TRANSPOSE_CONV needs output_shape, weights and input"
    x, w = ins[2], ins[1]
    if not (_q8(tensors, x) and _q8(tensors, outs[0]) and DTYPES[tensors[x].dtype] == np.int8
            and DTYPES[tensors[outs[0]].dtype] == np.int8):
        return "only int8 quantized input and output are supported (float and uint8 models are not)"
    if DTYPES.get(tensors[w].dtype) != np.int8 or tensors[w].data is None or tensors[w].scale is None:
        return "weights must be constant int8 quantized tensors"
    if len(tensors[w].shape) != 4 or len(tensors[x].shape) != 4:
        return "input and weights must be 4-D"
    if np.any(np.asarray(tensors[w].zero_point) != 0):
        return "weights must be symmetric (zero point 0)"
    if tensors[ins[0]].data is None:
        return "output_shape must be a constant tensor"
    if len(ins) > 3 and ins[3] >= 0 and (tensors[ins[3]].data is None or DTYPES.get(tensors[ins[3]].dtype) != np.int32):
        return "bias must be a constant int32 tensor"
    if opts is None or opts.StrideH() < 1 or opts.StrideW() < 1:
        return "strides must be positive"
    if opts.FusedActivationFunction() not in ACTIVATIONS:
        return f"fused activation {opts.FusedActivationFunction()} is not supported"
    return None


OPS = {
    "TRANSPOSE_CONV": Op("TransposeConvOptions", check_transpose_conv, transpose_conv,
                         ("vkinfer:QLinearConvTranspose", "vkinfer:ZeroInsert", "QLinearConv",
                          "vkinfer:QLinearConvClamp", "Reshape", "vkinfer:TFLiteTransposeConv"), min_inputs=3),
    "BATCH_MATMUL": Op("BatchMatMulOptions", check_batch_matmul, batch_matmul, ("vkinfer:TFLiteBatchMatMul",),
                       min_inputs=2),
    "RESIZE_BILINEAR": Op("ResizeBilinearOptions", check_resize_bilinear, resize_bilinear,
                          ("vkinfer:TFLiteResizeBilinear",), min_inputs=2),
}
