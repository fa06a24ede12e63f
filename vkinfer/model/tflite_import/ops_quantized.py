"""The 8-bit compute ops of the TFLite importer: each op's check, build and entry in the op table (ops.py).

    CONV_2D            -> QLinearConv (OHWI -> OIHW, SAME/VALID -> explicit pads, per-axis scales on axis 0)
    DEPTHWISE_CONV_2D  -> QLinearConv, group = C (1HW(C*mult) -> (C*mult)1HW: depth multiplier mult >= 1)
    FULLY_CONNECTED    -> com.microsoft:QGemm, transB = 1
    ADD                -> vkinfer:TFLiteAdd, or com.microsoft:QLinearAdd where XNNPACK would not take it
    MUL                -> com.microsoft:QLinearMul (numpy broadcasting; constant operands allowed)
    MEAN               -> vkinfer:TFLiteMean (any axes, XNNPACK's float32 mean)
    AVERAGE_POOL_2D    -> vkinfer:TFLiteAveragePool; MAX_POOL_2D -> MaxPool
    RESHAPE            -> Reshape; CONCATENATION -> Concat or com.microsoft:QLinearConcat; PAD -> Pad
    SOFTMAX            -> vkinfer:TFLiteSoftmax; LOGISTIC -> com.microsoft:QLinearSigmoid
    QUANTIZE           -> vkinfer:TFLiteQuantize, else DequantizeLinear -> QuantizeLinear; DEQUANTIZE ->
                          DequantizeLinear
(vkinfer/model/tflite/__init__.py says why each becomes what it does.)"""

from __future__ import annotations

from functools import lru_cache, partial

import numpy as np

from ...reference.tflite_add import xnnpack_adds
from ...reference.tflite_quantize import xnnpack_requantizes
from .builder import ACTIVATIONS, Op, act_range, expect_shape, same_pads, same_q
from .fastread import fused_activation
from .reader import DTYPES, QRANGE

# ---- builds: the nodes of one checked op ----------------------------------------------------------------------

def conv(imp, ins, outs, opts, *, depthwise: bool = False) -> None:
    x, w, b = ins[0], ins[1], ins[2] if len(ins) > 2 and ins[2] >= 0 else -1
    wt = imp.array(w)
    _, h, wd, _ = imp.t[x].shape
    if depthwise:
        weights = np.ascontiguousarray(wt[0].transpose(2, 0, 1)[:, None])  # 1HWC -> C1HW
        group = imp.t[x].shape[3]
    else:
        weights = np.ascontiguousarray(wt.transpose(0, 3, 1, 2))  # OHWI -> OIHW
        group = 1
    kh, kw = weights.shape[2:]
    sh, sw = opts.StrideH(), opts.StrideW()
    dh, dw = opts.DilationHFactor(), opts.DilationWFactor()
    imp.expect_hw(x, outs[0], (kh, kw), (sh, sw), (dh, dw), opts.Padding() == 0, weights.shape[0])
    if opts.Padding() == 0:  # SAME
        pt, pb = same_pads(h, kh, sh, dh)
        pl, pr = same_pads(wd, kw, sw, dw)
    else:
        pt = pb = pl = pr = 0
    xs, xz = imp.qparams(x)
    ws, wz = imp.qparams(w, per_axis=True)
    ys, yz = imp.qparams(outs[0])
    inputs = [imp.get(x, "NCHW"), xs, xz, imp.const("weights", weights), ws, wz, ys, yz]
    if b >= 0:
        inputs.append(imp.const("bias", imp.array(b).astype(np.int32)))
    act = imp.activation(opts.FusedActivationFunction(), outs[0])
    attrs = dict(strides=[sh, sw], pads=[pt, pl, pb, pr], dilations=[dh, dw], group=group)
    if act is not None:
        attrs["activation"] = act
    imp.node("vkinfer:QLinearConvClamp" if act is not None else "QLinearConv", inputs,
             [imp.put(outs[0], "NCHW")], **attrs)


def fully_connected(imp, ins, outs, opts) -> None:
    x, w, b = ins[0], ins[1], ins[2] if len(ins) > 2 and ins[2] >= 0 else -1
    wt = imp.array(w)
    k = wt.shape[1]
    a = imp.get(x)
    if len(imp.t[x].shape) != 2 or imp.t[x].shape[1] != k:
        flat = imp.fresh("fc_input")
        imp.node("Reshape", [a, imp.const("shape", np.array([-1, k], np.int64))], [flat])
        a = flat
    xs, xz = imp.qparams(x)
    ws, wz = imp.qparams(w, per_axis=True)
    ys, yz = imp.qparams(outs[0])
    bias = imp.const("bias", imp.array(b).astype(np.int32)) if b >= 0 else ""
    act = imp.activation(opts.FusedActivationFunction(), outs[0]) if opts is not None else None
    out_shape = imp.t[outs[0]].shape
    y = imp.put(outs[0]) if len(out_shape) == 2 else imp.fresh("fc_output")
    attrs = dict(transB=1, alpha=1.0)
    if act is not None:
        attrs["activation"] = act
    imp.node("vkinfer:QGemmClamp" if act is not None else "com.microsoft:QGemm",
             [a, xs, xz, imp.const("weights", wt), ws, wz, bias, ys, yz], [y], **attrs)
    if len(out_shape) != 2:
        imp.node("Reshape", [y, imp.const("shape", np.array(out_shape, np.int64))], [imp.put(outs[0])])


@lru_cache(maxsize=1024)
def _xnnpack_adds(a_scale: float, b_scale: float, y_scale: float) -> bool:
    """xnnpack_adds of three float32 scales (given as floats: exact), once per triple (a model's ADDs share a few;
    its numpy scalar arithmetic was a cost per op)."""
    return xnnpack_adds(np.float32(a_scale), np.float32(b_scale), np.float32(y_scale))


def binary(imp, ins, outs, opts, *, op: str) -> None:
    """ADD / MUL -> com.microsoft:QLinearAdd / QLinearMul (numpy broadcasting, in NCHW when both inputs are
    4-D and one exists as NCHW), then the fused activation's clamp. An ADD that XNNPACK runs (both scale
    ratios in [2**-10, 2**8)) becomes vkinfer:TFLiteAdd instead, its fixed-point arithmetic, the fused
    activation's bounds as attributes. (What follows from the op, its activation and the three tensors' types
    and quantization is worked out once per distinct combination: `imp.forms`.)"""
    a, b = ins
    layout = imp.layout_of(ins, outs)
    code = fused_activation(opts) if opts is not None else 0
    xa = imp.get(a, layout)
    sa, za = imp.qparams(a)
    xb = imp.get(b, layout)
    sb, zb = imp.qparams(b)
    inputs = [xa, sa, za, xb, sb, zb]
    t, ta, tb = imp.t[outs[0]], imp.t[a], imp.t[b]
    # (the reader's scale and zero-point arrays, alive as long as the tensors: their ids name their values)
    key = (op, code, id(ta.scale), id(tb.scale), id(t.scale), id(t.zero_point), t.dtype)
    form = imp.forms.get(key)
    if form is None:
        form = imp.forms[key] = _binary_form(imp, a, b, outs[0], code, op)
    if form[0]:
        sy, zy = imp.qparams(outs[0])
        imp.node("vkinfer:TFLiteAdd", [*inputs, sy, zy], [imp.put(outs[0], layout)], activation_min=form[1],
                 activation_max=form[2])
        return
    act = form[1]
    y = imp.write(outs[0], layout, act)
    imp.node(op, inputs + list(imp.qparams(outs[0])), [y])
    if act is not None:
        imp.clamp(y, outs[0], layout, act)


def _binary_form(imp, a: int, b: int, y: int, code: int, op: str) -> tuple:
    """(True, activation_min, activation_max) of an ADD XNNPACK runs, else (False, the clamp's activation)."""
    t = imp.t[y]
    if op.endswith("QLinearAdd") and _xnnpack_adds(float(imp.t[a].scale[0]), float(imp.t[b].scale[0]),
                                                     float(t.scale[0])):
        dt = DTYPES[t.dtype]
        lo, hi = act_range(code, t.scale[0], int(t.zero_point[0]), dt) or QRANGE[np.dtype(dt)]
        return True, int(lo), int(hi)
    return False, imp.activation(code, y)


def mean(imp, ins, outs, opts) -> None:
    """MEAN over any constant axes -> vkinfer:TFLiteMean (XNNPACK's float32 mean, vkinfer/reference/tflite_mean.py)
    on the tensor in TFLite's own layout, or on its NCHW form where a convolution wrote one (the kept axes in the
    same order in both, or keep_dims)."""
    from ...reference.tflite_mean import mean_axes

    keep_dims = bool(opts.KeepDims()) if opts is not None else False
    x = ins[0]
    shape = imp.t[x].shape
    axes = mean_axes(imp.array(ins[1]), len(shape))
    want = [1 if i in axes else d for i, d in enumerate(shape)]
    if not keep_dims:
        want = [d for i, d in enumerate(shape) if i not in axes]
    expect_shape(imp, outs[0], want, f"MEAN over axes {list(axes)} of {list(shape)}")
    layout, out_layout, ax = "NHWC", "NHWC", list(axes)
    if len(shape) == 4 and imp.nchw_ready(x):  # reduce the NCHW tensor a convolution wrote: no transpose
        pos = (0, 2, 3, 1)  # NHWC axis -> NCHW axis
        kept = [a for a in range(4) if a not in axes]
        if keep_dims or [pos[a] for a in kept] == sorted(pos[a] for a in kept):
            layout, out_layout, ax = "NCHW", "NCHW" if keep_dims else "NHWC", sorted(pos[a] for a in axes)
    imp.node("vkinfer:TFLiteMean", [imp.get(x, layout), *imp.qparams(x), *imp.qparams(outs[0])],
             [imp.put(outs[0], out_layout)], axes=ax, keepdims=int(keep_dims))


def pool(imp, ins, outs, opts, *, kind: str) -> None:
    """AVERAGE_POOL_2D -> vkinfer:TFLiteAveragePool (TFLite's integer average, the fused activation's bounds
    as attributes); MAX_POOL_2D -> MaxPool (padding never wins), then the fused activation's clamp;
    SAME/VALID -> explicit pads. Both on NCHW."""
    x = ins[0]
    _, h, w, _ = imp.t[x].shape
    kh, kw, sh, sw = opts.FilterHeight(), opts.FilterWidth(), opts.StrideH(), opts.StrideW()
    imp.expect_hw(x, outs[0], (kh, kw), (sh, sw), (1, 1), opts.Padding() == 0, imp.t[x].shape[3])
    if opts.Padding() == 0:
        pt, pb = same_pads(h, kh, sh, 1)
        pl, pr = same_pads(w, kw, sw, 1)
    else:
        pt = pb = pl = pr = 0
    attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=[pt, pl, pb, pr])
    if kind == "average":
        t = imp.t[outs[0]]
        dt = DTYPES[t.dtype]
        lo, hi = (act_range(opts.FusedActivationFunction(), t.scale[0], int(t.zero_point[0]), dt)
                  or QRANGE[np.dtype(dt)])
        imp.node("vkinfer:TFLiteAveragePool", [imp.get(x, "NCHW")], [imp.put(outs[0], "NCHW")],
                 activation_min=int(lo), activation_max=int(hi), **attrs)
        return
    act = imp.activation(opts.FusedActivationFunction(), outs[0])
    y = imp.write(outs[0], "NCHW", act)
    imp.node("MaxPool", [imp.get(x, "NCHW")], [y], **attrs)
    if act is not None:
        imp.clamp(y, outs[0], "NCHW", act)


def concatenation(imp, ins, outs, opts) -> None:
    """Concat when every input has the output's scale and zero point, else com.microsoft:QLinearConcat; the
    NHWC axis becomes the NCHW one when the inputs are 4-D and one exists as NCHW. A fused activation is
    ignored, as TFLite's 8-bit kernels ignore it (ai-edge-litert 2.3: a RELU leaves values below the zero
    point)."""
    layout = imp.layout_of(ins, outs)
    rank = len(imp.t[outs[0]].shape)
    axis = opts.Axis() % rank if opts is not None else 0
    if layout == "NCHW":
        axis = (0, 2, 3, 1)[axis]
    y = imp.put(outs[0], layout)
    if all(same_q(imp.t[i], imp.t[outs[0]]) for i in ins):
        imp.node("Concat", [imp.get(i, layout) for i in ins], [y], axis=axis)
        return
    inputs = list(imp.qparams(outs[0]))
    for i in ins:
        inputs += [imp.get(i, layout), *imp.qparams(i)]
    imp.node("com.microsoft:QLinearConcat", inputs, [y], axis=axis)


def pad(imp, ins, outs, opts) -> None:
    """PAD -> Pad (constant mode, value = the zero point: a real 0), pads permuted for NCHW."""
    x = ins[0]
    layout = imp.layout_of([x], outs)
    p = imp.array(ins[1]).astype(np.int64).reshape(-1, 2)
    want = [int(d + a + b) for d, (a, b) in zip(imp.t[x].shape, p, strict=True)]
    if list(imp.t[outs[0]].shape) != want:
        raise ValueError(f"output tensor {imp.t[outs[0]].name!r} has shape {list(imp.t[outs[0]].shape)}, but "
                         f"padding {imp.t[x].name!r} of shape {list(imp.t[x].shape)} by {p.tolist()} gives "
                         f"{want}")
    if layout == "NCHW":
        p = p[[0, 3, 1, 2]]
    t = imp.t[x]
    value = imp.const("pad_value", np.array(t.zero_point[0], DTYPES[t.dtype]))
    imp.node("Pad", [imp.get(x, layout), imp.const("pads", np.concatenate([p[:, 0], p[:, 1]])), value],
             [imp.put(outs[0], layout)], mode="constant")


def logistic(imp, ins, outs, opts) -> None:
    x = ins[0]
    layout = imp.layout_of([x], outs)
    imp.node("com.microsoft:QLinearSigmoid", [imp.get(x, layout), *imp.qparams(x), *imp.qparams(outs[0])],
             [imp.put(outs[0], layout)])


def reshape(imp, ins, outs, opts) -> None:
    shape = np.array(imp.t[outs[0]].shape, np.int64)
    imp.node("Reshape", [imp.get(ins[0]), imp.const("shape", shape)], [imp.put(outs[0])])


def dequantize(imp, x: int, name: str) -> None:
    imp.node("DequantizeLinear", [imp.get(x), *imp.qparams(x)], [name], axis=imp.t[x].qdim)


def dequantize_op(imp, ins, outs, opts) -> None:
    dequantize(imp, ins[0], imp.put(outs[0]))


def quantize(imp, ins, outs, opts) -> None:
    x = ins[0]
    if imp.t[x].dtype == 0:  # float32 -> 8 bits: TFLite multiplies by 1 / scale (ONNX divides)
        imp.node("vkinfer:TFLiteQuantize", [imp.get(x), *imp.qparams(outs[0])], [imp.put(outs[0])])
        return
    tx, ty = imp.t[x], imp.t[outs[0]]
    if xnnpack_requantizes(tx.scale[0], ty.scale[0], DTYPES[tx.dtype], DTYPES[ty.dtype]):
        imp.node("vkinfer:TFLiteQuantize", [imp.get(x), *imp.qparams(x), *imp.qparams(outs[0])],
                 [imp.put(outs[0])])
        return
    src = imp.fresh("float")  # other 8-bit requantizations through float (TFLite's builtin kernel: <= 1 step)
    dequantize(imp, x, src)
    imp.node("QuantizeLinear", [src, *imp.qparams(outs[0])], [imp.put(outs[0])])


def softmax(imp, ins, outs, opts) -> None:
    """SOFTMAX -> vkinfer:TFLiteSoftmax (TFLite's float32 exp table, over the last axis)."""
    x = ins[0]
    beta = opts.Beta() if opts is not None else 1.0
    imp.node("vkinfer:TFLiteSoftmax", [imp.get(x), imp.qparams(x)[0], *imp.qparams(outs[0])],
             [imp.put(outs[0])], beta=float(beta))

# ---- checks: why an op cannot be imported, or None --------------------------------------------------------------

_Q8 = tuple(code for code, dt in DTYPES.items() if dt in (np.uint8, np.int8))  # the 8-bit TensorTypes


def _qt(tensors, i) -> bool:
    return i >= 0 and tensors[i].dtype in _Q8 and tensors[i].scale is not None


def _quantized(ins, outs, opts, tensors, data_ins, same_type: bool) -> str | None:
    """What every op of this file but QUANTIZE, DEQUANTIZE and RESHAPE asks: per-tensor int8/uint8 data inputs
    (`data_ins`) and output, of one type where `same_type`, and a fused activation vkinfer knows."""
    # (loops, not generators: this runs once per op; the order of the checks is the messages' order)
    for i in data_ins:
        if i >= 0 and not _qt(tensors, i):
            return "only int8/uint8 quantized tensors are supported (float and int16 models are not)"
    if outs and not _qt(tensors, outs[0]):
        return "only int8/uint8 quantized tensors are supported (float and int16 models are not)"
    if (ins and tensors[ins[0]].scale.size > 1) or (outs and tensors[outs[0]].scale.size > 1):
        return "per-axis quantized activations are not supported"
    if same_type:
        for i in data_ins:
            if i >= 0 and tensors[i].dtype != tensors[outs[0]].dtype:
                return "inputs and output must have the same type"
    act = getattr(opts, "FusedActivationFunction", None)
    if act is not None:
        code = fused_activation(opts)
        if code not in ACTIVATIONS:
            return f"fused activation {code} is not supported (only NONE, RELU, RELU_N1_TO_1, RELU6)"
    return None


def _bias_ok(ins, tensors) -> bool:
    return not (len(ins) > 2 and ins[2] >= 0 and (tensors[ins[2]].data is None or tensors[ins[2]].dtype != 2))


def check_conv(ins, outs, opts, tensors, *, depthwise: bool = False) -> str | None:
    why = _quantized(ins, outs, opts, tensors, ins[:2], False)
    if why:
        return why
    w = tensors[ins[1]]
    if w.data is None:
        return "weights are not constant"
    if not _bias_ok(ins, tensors):
        return "bias must be a constant int32 tensor"
    if len(tensors[ins[0]].shape) != 4:
        return "input is not 4-D"
    if w.scale.size > 1 and w.qdim != (3 if depthwise else 0):
        return f"weights are quantized along axis {w.qdim}"
    if not depthwise and w.shape[3] != tensors[ins[0]].shape[3]:
        return "grouped CONV_2D is not supported"
    if depthwise and w.shape[3] % tensors[ins[0]].shape[3]:
        return f"{w.shape[3]} output channels are not a multiple of the {tensors[ins[0]].shape[3]} input channels"
    return None


def check_fully_connected(ins, outs, opts, tensors) -> str | None:
    why = _quantized(ins, outs, opts, tensors, ins[:2], False)
    if why:
        return why
    w = tensors[ins[1]]
    if w.data is None or len(w.shape) != 2:
        return "weights must be a constant 2-D tensor"
    if opts is not None and opts.WeightsFormat() != 0:
        return "shuffled weights are not supported"
    if not _bias_ok(ins, tensors):
        return "bias must be a constant int32 tensor"
    return None


def check_binary(ins, outs, opts, tensors) -> str | None:
    """ADD, MUL."""
    why = _quantized(ins, outs, opts, tensors, ins[:2], True)
    if why:
        return why
    for i in ins[:2]:
        if i >= 0 and tensors[i].scale.size > 1:
            return "inputs must be per-tensor int8/uint8"
    if len(tensors[ins[0]].shape) != len(tensors[ins[1]].shape) and any(len(tensors[i].shape) > 4 for i in ins):
        return "broadcasting over more than 4 dimensions is not supported"
    return None


def check_concatenation(ins, outs, opts, tensors) -> str | None:
    why = _quantized(ins, outs, opts, tensors, ins, True)
    if why:
        return why
    if any(tensors[i].scale.size > 1 for i in ins if i >= 0):
        return "inputs must be per-tensor int8/uint8"
    return None


def check_pool(ins, outs, opts, tensors) -> str | None:
    """AVERAGE_POOL_2D, MAX_POOL_2D."""
    why = _quantized(ins, outs, opts, tensors, ins[:1], True)
    if why:
        return why
    if len(tensors[ins[0]].shape) != 4:
        return "input is not 4-D"
    if not same_q(tensors[ins[0]], tensors[outs[0]]):
        return "input and output scale/zero point differ (TFLite's 8-bit pooling does not rescale)"
    return None


def check_pad(ins, outs, opts, tensors) -> str | None:
    why = _quantized(ins, outs, opts, tensors, ins[:1], True)
    if why:
        return why
    p = tensors[ins[1]]
    if p.data is None or p.dtype not in (2, 4) or p.shape != (len(tensors[ins[0]].shape), 2):
        return "paddings must be a constant int32/int64 tensor of shape (rank, 2)"
    if np.any(np.frombuffer(p.data, DTYPES[p.dtype]) < 0):
        return "negative paddings"
    if not same_q(tensors[ins[0]], tensors[outs[0]]):
        return "input and output scale/zero point differ"
    return None


def check_mean(ins, outs, opts, tensors) -> str | None:
    why = _quantized(ins, outs, opts, tensors, ins[:1], True)
    if why:
        return why
    axes = tensors[ins[1]]
    if axes.data is None or axes.dtype not in (2, 4):
        return "axes are not a constant int32/int64 tensor"
    return None


def check_unary(ins, outs, opts, tensors, *, same_type: bool) -> str | None:
    """SOFTMAX, LOGISTIC: the common checks only."""
    return _quantized(ins, outs, opts, tensors, ins[:1], same_type)


def check_quantize(ins, outs, opts, tensors) -> str | None:
    if tensors[ins[0]].dtype not in (0, 3, 9) or not _qt(tensors, outs[0]):
        return "only float32/int8/uint8 -> int8/uint8 is supported"
    if tensors[outs[0]].scale.size > 1:
        return "per-axis QUANTIZE output is not supported"
    return None


def check_dequantize(ins, outs, opts, tensors) -> str | None:
    return None if _qt(tensors, ins[0]) else "only int8/uint8 inputs are supported (not float16/int16)"


def check_reshape(ins, outs, opts, tensors) -> str | None:
    return None if all(d >= 0 for d in tensors[outs[0]].shape) else "output shape is not static"


# ---- the op table's entries (ops.py joins them) ------------------------------------------------------------------

_CLAMP = ("vkinfer:QLinearConvClamp", "Reshape")  # a fused activation's clamp (Builder.clamp)
_CONV_WINDOW = ("StrideH", "StrideW", "DilationHFactor", "DilationWFactor")
_POOL_WINDOW = ("StrideH", "StrideW", "FilterHeight", "FilterWidth")

OPS = {
    "CONV_2D": Op("Conv2DOptions", check_conv, conv, ("QLinearConv", "vkinfer:QLinearConvClamp"), min_inputs=2,
                  no_options="invalid", window=_CONV_WINDOW),
    "DEPTHWISE_CONV_2D": Op("DepthwiseConv2DOptions", partial(check_conv, depthwise=True),
                            partial(conv, depthwise=True), ("QLinearConv", "vkinfer:QLinearConvClamp"),
                            min_inputs=2, no_options="invalid", window=_CONV_WINDOW),
    "FULLY_CONNECTED": Op("FullyConnectedOptions", check_fully_connected, fully_connected,
                          ("com.microsoft:QGemm", "vkinfer:QGemmClamp", "Reshape"), min_inputs=2),
    "ADD": Op("AddOptions", check_binary, partial(binary, op="com.microsoft:QLinearAdd"),
              ("com.microsoft:QLinearAdd", *_CLAMP), min_inputs=2, shape="broadcast"),
    "MUL": Op("MulOptions", check_binary, partial(binary, op="com.microsoft:QLinearMul"),
              ("com.microsoft:QLinearMul", *_CLAMP), min_inputs=2, shape="broadcast"),
    "MEAN": Op("ReducerOptions", check_mean, mean, ("vkinfer:TFLiteMean",), min_inputs=2),
    "AVERAGE_POOL_2D": Op("Pool2DOptions", check_pool, partial(pool, kind="average"), ("vkinfer:TFLiteAveragePool",),
                          no_options="invalid", window=_POOL_WINDOW),
    "MAX_POOL_2D": Op("Pool2DOptions", check_pool, partial(pool, kind="max"), ("MaxPool", *_CLAMP),
                      no_options="invalid", window=_POOL_WINDOW),
    "RESHAPE": Op(None, check_reshape, reshape, ("Reshape",)),
    "CONCATENATION": Op("ConcatenationOptions", check_concatenation, concatenation,
                        ("Concat", "com.microsoft:QLinearConcat")),
    "PAD": Op(None, check_pad, pad, ("Pad",), min_inputs=2),
    "SOFTMAX": Op("SoftmaxOptions", partial(check_unary, same_type=False), softmax, ("vkinfer:TFLiteSoftmax",),
                  shape="same"),
    "LOGISTIC": Op(None, partial(check_unary, same_type=True), logistic, ("com.microsoft:QLinearSigmoid",),
                   shape="same"),
    "QUANTIZE": Op(None, check_quantize, quantize, ("vkinfer:TFLiteQuantize", "DequantizeLinear", "QuantizeLinear"),
                   shape="same"),
    "DEQUANTIZE": Op(None, check_dequantize, dequantize_op, ("DequantizeLinear",), shape="same"),
}
