"""Small 8-bit TFLite models with seeded random weights, written with the `tflite` flatbuffer builders.

No TensorFlow: every model is serialised with the generated ``tflite.*Start/Add/End`` functions and a
``flatbuffers.Builder``. Weights are He-initialised from a seeded numpy generator; activation scales and zero
points are calibrated on a float forward pass (numpy, NHWC) over a few seeded random images, so the quantized
model computes something close to the float one.

    from vkinfer.testing import tflite_zoo
    blob = tflite_zoo.tiny_cnn(0)                       # bytes of a .tflite file
    blob = tflite_zoo.tiny_cnn(0, dtype="uint8", pool="average_pool", head="dequantize")
    blob = tflite_zoo.mobilenet_v2(0)                   # MobileNetV2 1.0/224, int8, 1000 classes

The model's input is ``input`` (float32 NHWC 1x16x16x3); its outputs are ``logits`` (the FULLY_CONNECTED
result, int8/uint8, the tensor to compare between runtimes) and ``output`` (SOFTMAX in the activation type, or
DEQUANTIZE to float32). `mobilenet_v2` has the same ``input``, ``logits`` and ``output`` (DEQUANTIZE).

    blob = tflite_zoo.ops_net(0, dtype="uint8")         # PAD, MAX_POOL_2D, depth multiplier 2, LOGISTIC, MUL,
                                                        # CONCATENATION, fused activations that clamp
    blob = tflite_zoo.op_model("mul", 0, dtype="int8")  # one op, 8-bit graph inputs x (and y), output out
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import flatbuffers
import numpy as np
import tflite

from .zoo import MOBILENET_V2_STAGES, _divisible

_TYPES = {np.dtype(np.float32): tflite.TensorType.FLOAT32, np.dtype(np.int32): tflite.TensorType.INT32,
          np.dtype(np.uint8): tflite.TensorType.UINT8, np.dtype(np.int8): tflite.TensorType.INT8,
          np.dtype(np.int64): tflite.TensorType.INT64, np.dtype(object): tflite.TensorType.RESOURCE}
_ACT = {None: tflite.ActivationFunctionType.NONE, "relu": tflite.ActivationFunctionType.RELU,
        "relu6": tflite.ActivationFunctionType.RELU6, "relu_n1_to_1": tflite.ActivationFunctionType.RELU_N1_TO_1}
_ACT_FLOAT = {None: lambda v: v, "relu": lambda v: np.maximum(v, 0), "relu6": lambda v: np.clip(v, 0, 6),
              "relu_n1_to_1": lambda v: np.clip(v, -1, 1)}


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    buffer: int
    scale: np.ndarray | None = None
    zero_point: np.ndarray | None = None
    quantized_dimension: int = 0


@dataclass
class _Op:
    code: int
    inputs: list[int]
    outputs: list[int]
    options_type: int = 0
    options: dict = field(default_factory=dict)


class ModelBuilder:
    """Tensors, buffers and operators of one subgraph; `finish` serialises them as TFLite flatbuffer bytes.

    Options are given as a dict of the options table's field names (e.g. {"Padding": 0, "StrideW": 2}); the
    matching ``<OptionsName>Add<Field>`` builder function writes each one (a list: an int32 vector, a str: a
    string). A tensor of dtype "resource" is a resource handle (VAR_HANDLE's output). Further subgraphs (a
    CALL_ONCE init subgraph, say) are builders made by `subgraph()`, which share this one's buffers, passed to
    `finish` in subgraph index order.
    """

    def __init__(self, buffers: list[bytes] | None = None) -> None:
        self.tensors: list[_Tensor] = []
        # buffer 0: the empty sentinel every TFLite file starts with
        self.buffers: list[bytes] = buffers if buffers is not None else [b""]
        self.ops: list[_Op] = []

    def subgraph(self) -> ModelBuilder:
        """A builder for another subgraph of the same model (the buffers list is shared)."""
        return ModelBuilder(self.buffers)

    def tensor(self, name: str, shape, dtype, data: np.ndarray | None = None, scale=None, zero_point=None,
               quantized_dimension: int = 0) -> int:
        """Index of a new tensor (dtype "resource": a resource handle)."""
        dtype = object if isinstance(dtype, str) and dtype == "resource" else dtype
        buf = 0
        if data is not None:
            self.buffers.append(np.ascontiguousarray(data, dtype=dtype).tobytes())
            buf = len(self.buffers) - 1
        self.tensors.append(_Tensor(name, tuple(int(s) for s in shape), np.dtype(dtype), buf,
                                    None if scale is None else np.atleast_1d(np.asarray(scale, np.float32)),
                                    None if zero_point is None else np.atleast_1d(np.asarray(zero_point, np.int64)),
                                    quantized_dimension))
        return len(self.tensors) - 1

    def op(self, code: int, inputs: list[int], outputs: list[int], options_type: int = 0, **options) -> None:
        """Append an operator (options: see the class docstring)."""
        self.ops.append(_Op(code, list(inputs), list(outputs), options_type, options))

    def finish(self, inputs: list[int], outputs: list[int],
               subgraphs: list[tuple[ModelBuilder, list[int], list[int]]] = ()) -> bytes:
        """The .tflite bytes: this builder's subgraph (index 0, inputs, outputs), then `subgraphs` (builder,
        inputs, outputs) as subgraphs 1, 2, ..."""
        b = flatbuffers.Builder(4096)
        graphs = [(self, list(inputs), list(outputs)), *subgraphs]

        def ints(start, values, dtype=np.int32):
            start(b, len(values))
            for v in reversed(values):
                (b.PrependInt32 if dtype == np.int32 else b.PrependInt64)(int(v))
            return b.EndVector()

        def floats(start, values):
            start(b, len(values))
            for v in reversed(values):
                b.PrependFloat32(float(v))
            return b.EndVector()

        buffers = []
        for data in self.buffers:
            vec = None
            if data:
                b.StartVector(1, len(data), 16)  # 16-byte aligned, as the converter writes them
                b.head -= len(data)
                b.Bytes[b.head:b.head + len(data)] = data
                vec = b.EndVector()
            tflite.BufferStart(b)
            if vec is not None:
                tflite.BufferAddData(b, vec)
            buffers.append(tflite.BufferEnd(b))

        codes = sorted({o.code for g, _, _ in graphs for o in g.ops})
        code_index = {c: i for i, c in enumerate(codes)}
        opcodes = []
        for c in codes:
            tflite.OperatorCodeStart(b)
            tflite.OperatorCodeAddDeprecatedBuiltinCode(b, min(c, 127))
            tflite.OperatorCodeAddBuiltinCode(b, c)
            tflite.OperatorCodeAddVersion(b, 1)
            opcodes.append(tflite.OperatorCodeEnd(b))

        def offsets(start, items):
            start(b, len(items))
            for it in reversed(items):
                b.PrependUOffsetTRelative(it)
            return b.EndVector()

        subgraph_offsets = []
        for k, (g, g_in, g_out) in enumerate(graphs):
            tensors = []
            for t in g.tensors:
                name = b.CreateString(t.name)
                shape = ints(tflite.TensorStartShapeVector, t.shape)
                quant = None
                if t.scale is not None:
                    sc = floats(tflite.QuantizationParametersStartScaleVector, t.scale)
                    zp = ints(tflite.QuantizationParametersStartZeroPointVector, t.zero_point, np.int64)
                    tflite.QuantizationParametersStart(b)
                    tflite.QuantizationParametersAddScale(b, sc)
                    tflite.QuantizationParametersAddZeroPoint(b, zp)
                    tflite.QuantizationParametersAddQuantizedDimension(b, t.quantized_dimension)
                    quant = tflite.QuantizationParametersEnd(b)
                tflite.TensorStart(b)
                tflite.TensorAddShape(b, shape)
                tflite.TensorAddType(b, _TYPES[t.dtype])
                tflite.TensorAddBuffer(b, t.buffer)
                tflite.TensorAddName(b, name)
                if quant is not None:
                    tflite.TensorAddQuantization(b, quant)
                tensors.append(tflite.TensorEnd(b))

            operators = []
            for o in g.ops:
                opts = None
                if o.options_type:
                    kind = next(k for k, v in vars(tflite.BuiltinOptions).items() if v == o.options_type)
                    vectors = {k: ints(getattr(tflite, f"{kind}Start{k}Vector"), v)
                               for k, v in o.options.items() if isinstance(v, list | tuple)}
                    vectors.update({k: b.CreateString(v) for k, v in o.options.items() if isinstance(v, str)})
                    getattr(tflite, f"{kind}Start")(b)
                    for k, v in o.options.items():
                        getattr(tflite, f"{kind}Add{k}")(b, vectors.get(k, v))
                    opts = getattr(tflite, f"{kind}End")(b)
                ins = ints(tflite.OperatorStartInputsVector, o.inputs)
                outs = ints(tflite.OperatorStartOutputsVector, o.outputs)
                tflite.OperatorStart(b)
                tflite.OperatorAddOpcodeIndex(b, code_index[o.code])
                tflite.OperatorAddInputs(b, ins)
                tflite.OperatorAddOutputs(b, outs)
                if opts is not None:
                    tflite.OperatorAddBuiltinOptionsType(b, o.options_type)
                    tflite.OperatorAddBuiltinOptions(b, opts)
                operators.append(tflite.OperatorEnd(b))

            t_vec = offsets(tflite.SubGraphStartTensorsVector, tensors)
            i_vec = ints(tflite.SubGraphStartInputsVector, g_in)
            o_vec = ints(tflite.SubGraphStartOutputsVector, g_out)
            op_vec = offsets(tflite.SubGraphStartOperatorsVector, operators)
            sg_name = b.CreateString("main" if k == 0 else f"subgraph_{k}")
            tflite.SubGraphStart(b)
            tflite.SubGraphAddTensors(b, t_vec)
            tflite.SubGraphAddInputs(b, i_vec)
            tflite.SubGraphAddOutputs(b, o_vec)
            tflite.SubGraphAddOperators(b, op_vec)
            tflite.SubGraphAddName(b, sg_name)
            subgraph_offsets.append(tflite.SubGraphEnd(b))

        sg_vec = offsets(tflite.ModelStartSubgraphsVector, subgraph_offsets)
        oc_vec = offsets(tflite.ModelStartOperatorCodesVector, opcodes)
        buf_vec = offsets(tflite.ModelStartBuffersVector, buffers)
        desc = b.CreateString("vkinfer.testing.tflite_zoo")
        tflite.ModelStart(b)
        tflite.ModelAddVersion(b, 3)
        tflite.ModelAddOperatorCodes(b, oc_vec)
        tflite.ModelAddSubgraphs(b, sg_vec)
        tflite.ModelAddDescription(b, desc)
        tflite.ModelAddBuffers(b, buf_vec)
        b.Finish(tflite.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())


# ---- float forward pass (NHWC) for calibration --------------------------------------------------------------

def same_pads(size: int, k: int, stride: int, dilation: int = 1) -> tuple[int, int]:
    """TFLite/TensorFlow SAME padding of one spatial dim: (before, after), the extra pixel after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _conv_nhwc(x, w_hwio, bias, stride, groups=1):
    """x (N,H,W,C), w (kh,kw,C/groups,M): SAME-padded grouped convolution in float64."""
    n, h, wd, c = x.shape
    kh, kw, cg, m = w_hwio.shape
    pt, pb = same_pads(h, kh, stride)
    pl, pr = same_pads(wd, kw, stride)
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    oh, ow = -(-h // stride), -(-wd // stride)
    y = np.zeros((n, oh, ow, m))
    mg = m // groups
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :]
            for g in range(groups):
                y[..., g * mg:(g + 1) * mg] += patch[..., g * cg:(g + 1) * cg] @ w_hwio[i, j, :, g * mg:(g + 1) * mg]
    return y + bias


def _qparams(lo: float, hi: float, dtype) -> tuple[float, int]:
    """Asymmetric (scale, zero point) covering [min(lo, 0), max(hi, 0)] in dtype's range."""
    qmin, qmax = (-128, 127) if np.dtype(dtype) == np.int8 else (0, 255)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max(hi - lo, 1e-6) / (qmax - qmin)
    zp = int(np.clip(round(qmin - lo / scale), qmin, qmax))
    return float(np.float32(scale)), zp


def _weights(w: np.ndarray, axis: int | None, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantized weights, scales, zero points: symmetric int8 (per axis, or per tensor when axis is None), or
    asymmetric uint8 per tensor."""
    if np.dtype(dtype) == np.uint8:
        scale, zp = _qparams(float(w.min()), float(w.max()), np.uint8)
        q = np.clip(np.rint(w / scale) + zp, 0, 255).astype(np.uint8)
        return q, np.array([scale], np.float32), np.array([zp])
    red = tuple(i for i in range(w.ndim) if i != axis) if axis is not None else None
    amax = np.maximum(np.abs(w).max(axis=red, keepdims=axis is not None), 1e-8)
    scale = (amax / 127.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    scale = scale.reshape(-1)
    return q, scale, np.zeros(scale.size, np.int64)



def _layer_tensors(m, qdt, name: str, w: np.ndarray, axis: int | None, in_scale, bias: np.ndarray):
    """The weight and int32 bias tensors of a CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED layer: int8
    weights per `axis` (uint8: per tensor), bias quantized with scale in_scale * weight scale, zero point 0."""
    q, s, z = _weights(w, axis if np.dtype(qdt) == np.int8 else None, qdt)
    tw = m.tensor(f"{name}/weights", q.shape, qdt, q, s, z, axis if s.size > 1 else 0)
    bscale = (np.float32(in_scale) * s).astype(np.float32)
    bq = np.rint(bias / bscale).astype(np.int32)
    tb = m.tensor(f"{name}/bias", bq.shape, np.int32, bq, bscale, np.zeros(bscale.size, np.int64), 0)
    return tw, tb


def tiny_cnn(seed: int = 0, *, dtype: Literal["int8", "uint8"] = "int8",
             pool: Literal["mean", "average_pool"] = "mean", head: Literal["softmax", "dequantize"] = "softmax",
             size: int = 16, channels: int = 8, num_classes: int = 10, extra_outputs: tuple[str, ...] = ()) -> bytes:
    """QUANTIZE -> CONV_2D 3x3/2 (+RELU6) -> DEPTHWISE_CONV_2D 3x3 (+RELU) -> CONV_2D 1x1 -> ADD (residual)
    -> MEAN over H,W (or AVERAGE_POOL_2D) -> RESHAPE -> FULLY_CONNECTED -> SOFTMAX (or DEQUANTIZE).

    int8: symmetric per-axis weights for the convolutions, per-tensor for the fully connected layer.
    uint8: asymmetric per-tensor weights (TFLite has no per-axis uint8). Biases are int32 with scale
    input_scale * weight_scale. `extra_outputs` names intermediate tensors ("conv1", "dwconv", "conv2", "add",
    "pool") to expose as further graph outputs, after ``logits`` and ``output``. Returns the .tflite bytes.
    """
    qdt = np.dtype(dtype)
    if qdt not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise ValueError(f"dtype must be 'int8' or 'uint8', got {dtype!r}")
    rng = np.random.default_rng(seed)
    c, half = channels, -(-size // 2)

    def he(shape, fan_in, gain=2.0):
        return rng.standard_normal(shape) * math.sqrt(gain / fan_in)

    w1 = he((c, 3, 3, 3), 27)                 # OHWI
    b1 = rng.standard_normal(c) * 0.05
    wd = he((1, 3, 3, c), 9)                  # 1HWC
    bd = rng.standard_normal(c) * 0.05
    w2 = he((c, 1, 1, c), c, 1.0)             # OHWI
    b2 = rng.standard_normal(c) * 0.05
    wf = he((num_classes, c), c, 1.0)         # (N, K)
    bf = rng.standard_normal(num_classes) * 0.05

    # Float calibration pass over a few images (the activation ranges set the scales).
    x = rng.uniform(-1.0, 1.0, (8, size, size, 3))
    a1 = np.clip(_conv_nhwc(x, w1.transpose(1, 2, 3, 0), b1, 2), 0, 6)
    a2 = np.maximum(_conv_nhwc(a1, wd[0][:, :, None, :], bd, 1, groups=c), 0)
    a3 = _conv_nhwc(a2, w2.transpose(1, 2, 3, 0), b2, 1)
    a4 = a1 + a3
    a5 = a4.mean(axis=(1, 2))
    a6 = a5 @ wf.T + bf
    qp = {k: _qparams(float(v.min()), float(v.max()), qdt)
          for k, v in {"x": x, "a1": a1, "a2": a2, "a3": a3, "a4": a4, "a5": a5, "a6": a6}.items()}
    if pool == "average_pool":  # TFLite's int8/uint8 AVERAGE_POOL_2D wants equal input and output parameters
        qp["a5"] = qp["a4"]

    m = ModelBuilder()
    act_shape = {"x": (1, size, size, 3), "a1": (1, half, half, c), "a2": (1, half, half, c),
                 "a3": (1, half, half, c), "a4": (1, half, half, c), "a5": (1, 1, 1, c), "a6": (1, num_classes)}
    names = {"x": "input_q", "a1": "conv1", "a2": "dwconv", "a3": "conv2", "a4": "add", "a5": "pool",
             "a6": "logits"}
    t = {k: m.tensor(names[k], act_shape[k], qdt, scale=qp[k][0], zero_point=qp[k][1]) for k in act_shape}
    t_in = m.tensor("input", (1, size, size, 3), np.float32)
    flat = m.tensor("flatten", (1, c), qdt, scale=qp["a5"][0], zero_point=qp["a5"][1])

    B, A, P = tflite.BuiltinOperator, tflite.BuiltinOptions, tflite.Padding
    m.op(B.QUANTIZE, [t_in], [t["x"]])
    tw, tb = _layer_tensors(m, qdt, "conv1", w1, 0, qp["x"][0], b1)
    m.op(B.CONV_2D, [t["x"], tw, tb], [t["a1"]], A.Conv2DOptions, Padding=P.SAME, StrideW=2, StrideH=2,
         FusedActivationFunction=_ACT["relu6"])
    tw, tb = _layer_tensors(m, qdt, "dwconv", wd, 3, qp["a1"][0], bd)
    m.op(B.DEPTHWISE_CONV_2D, [t["a1"], tw, tb], [t["a2"]], A.DepthwiseConv2DOptions, Padding=P.SAME,
         StrideW=1, StrideH=1, DepthMultiplier=1, FusedActivationFunction=_ACT["relu"])
    tw, tb = _layer_tensors(m, qdt, "conv2", w2, 0, qp["a2"][0], b2)
    m.op(B.CONV_2D, [t["a2"], tw, tb], [t["a3"]], A.Conv2DOptions, Padding=P.VALID, StrideW=1, StrideH=1)
    m.op(B.ADD, [t["a1"], t["a3"]], [t["a4"]], A.AddOptions, FusedActivationFunction=_ACT[None])
    if pool == "mean":
        axes = m.tensor("mean/axes", (2,), np.int32, np.array([1, 2], np.int32))
        m.op(B.MEAN, [t["a4"], axes], [t["a5"]], A.ReducerOptions, KeepDims=True)
    else:
        m.op(B.AVERAGE_POOL_2D, [t["a4"]], [t["a5"]], A.Pool2DOptions, Padding=P.VALID, StrideW=1, StrideH=1,
             FilterWidth=half, FilterHeight=half)
    shape = m.tensor("flatten/shape", (2,), np.int32, np.array([1, c], np.int32))
    m.op(B.RESHAPE, [t["a5"], shape], [flat], A.ReshapeOptions, NewShape=[1, c])
    tw, tb = _layer_tensors(m, qdt, "fc", wf, None, qp["a5"][0], bf)
    m.op(B.FULLY_CONNECTED, [flat, tw, tb], [t["a6"]], A.FullyConnectedOptions, FusedActivationFunction=0)
    if head == "softmax":
        out = m.tensor("output", (1, num_classes), qdt, scale=1.0 / 256,
                       zero_point=-128 if qdt == np.int8 else 0)
        m.op(B.SOFTMAX, [t["a6"]], [out], A.SoftmaxOptions, Beta=1.0)
    else:
        out = m.tensor("output", (1, num_classes), np.float32)
        m.op(B.DEQUANTIZE, [t["a6"]], [out])
    by_name = {v: t[k] for k, v in names.items()}
    return m.finish([t_in], [t["a6"], out] + [by_name[n] for n in extra_outputs])


def _conv_float(x: np.ndarray, w_ohwi: np.ndarray, bias: np.ndarray, stride: int) -> np.ndarray:
    """SAME-padded dense convolution of x (N,H,W,C) in float32 as one im2col matmul."""
    n, h, wd, c = x.shape
    m, kh, kw, _ = w_ohwi.shape
    if kh == kw == 1 and stride == 1:
        return (x.reshape(-1, c) @ w_ohwi.reshape(m, c).T).reshape(n, h, wd, m) + bias
    pt, pb = same_pads(h, kh, stride)
    pl, pr = same_pads(wd, kw, stride)
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    oh, ow = -(-h // stride), -(-wd // stride)
    cols = np.concatenate([xp[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :]
                           for i in range(kh) for j in range(kw)], axis=3)
    return (cols.reshape(-1, kh * kw * c) @ w_ohwi.reshape(m, -1).T).reshape(n, oh, ow, m) + bias


def _depthwise_float(x: np.ndarray, w_hwc: np.ndarray, bias: np.ndarray, stride: int) -> np.ndarray:
    """SAME-padded depthwise convolution (multiplier 1) of x (N,H,W,C) in float32, one tap at a time."""
    n, h, wd, c = x.shape
    kh, kw, _ = w_hwc.shape
    pt, pb = same_pads(h, kh, stride)
    pl, pr = same_pads(wd, kw, stride)
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr), (0, 0)))
    oh, ow = -(-h // stride), -(-wd // stride)
    y = np.zeros((n, oh, ow, c), np.float32)
    for i in range(kh):
        for j in range(kw):
            y += xp[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :] * w_hwc[i, j]
    return y + bias


def mobilenet_v2(seed: int = 0, size: int = 224, width: float = 1.0, num_classes: int = 1000,
                 dtype: Literal["int8"] = "int8", *, calibration_images: int = 4,
                 pool: Literal["mean", "average_pool"] = "mean", extra_outputs: tuple[str, ...] = ()) -> bytes:
    """MobileNetV2 as an int8 TFLite model with seeded He-initialised weights (BN folded into the biases).

    QUANTIZE -> CONV_2D 3x3/2 + RELU6 -> 17 inverted residual blocks (CONV_2D 1x1 + RELU6 expand, except in the
    first; DEPTHWISE_CONV_2D 3x3 stride 1/2 SAME + RELU6; CONV_2D 1x1 project; ADD residual where stride 1 and
    channels match) -> CONV_2D 1x1 to 1280*max(1, width) + RELU6 -> MEAN over H,W (or, with pool="average_pool",
    a VALID AVERAGE_POOL_2D over the whole 7x7 (size / 32) map, as in the converter's Keras MobileNetV2, with the
    pooled tensor keeping conv_last's parameters) -> RESHAPE -> FULLY_CONNECTED (``logits``, int8) -> DEQUANTIZE
    (``output``, float32). Input ``input``: float32 NHWC 1 x size x size x 3.

    Symmetric per-axis int8 weights for the convolutions, per-tensor for the fully connected layer; int32 biases
    with scale input_scale * weight_scale; activation scales from a float32 numpy forward pass over
    `calibration_images` seeded uniform(-1, 1) images, except the quantized input (scale 1/128, zero point 0).
    Tensor names: ``conv1``, ``block{i}/expand``,
    ``block{i}/dwconv``, ``block{i}/project``, ``block{i}/add``, ``conv_last``, ``pool``, ``logits``;
    `extra_outputs` names intermediate tensors to expose as further graph outputs, after ``logits`` and ``output``.
    Returns the .tflite bytes.
    """
    if np.dtype(dtype) != np.dtype(np.int8):
        raise ValueError(f"dtype must be 'int8', got {dtype!r}")
    qdt = np.dtype(np.int8)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, (calibration_images, size, size, 3)).astype(np.float32)
    acts: dict[str, np.ndarray] = {"input_q": x}
    layers: list[tuple] = []  # (kind, output name, input names, weights, bias, stride, activation)

    def conv(src: str, name: str, cout: int, k: int, stride: int = 1, act: str | None = "relu6",
             depthwise: bool = False, gain: float = 2.0) -> str:
        a = acts[src]
        cin = a.shape[3]
        if depthwise:
            w = (rng.standard_normal((1, k, k, cin)) * math.sqrt(gain / (k * k))).astype(np.float32)
            b = (rng.standard_normal(cin) * 0.05).astype(np.float32)
            y = _depthwise_float(a, w[0], b, stride)
        else:
            w = (rng.standard_normal((cout, k, k, cin)) * math.sqrt(gain / (k * k * cin))).astype(np.float32)
            b = (rng.standard_normal(cout) * 0.05).astype(np.float32)
            y = _conv_float(a, w, b, stride)
        acts[name] = np.clip(y, 0, 6) if act == "relu6" else y
        layers.append(("dw" if depthwise else "conv", name, [src], w, b, stride, act))
        return name

    settings = MOBILENET_V2_STAGES
    cin = _divisible(32 * width)
    last = _divisible(1280 * max(1.0, width))
    cur = conv("input_q", "conv1", cin, 3, stride=2)
    block = 0
    for t, c, n, s in settings:
        cout = _divisible(c * width)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = int(round(cin * t))
            y = cur
            if t != 1:
                y = conv(y, f"block{block}/expand", hidden, 1)
            y = conv(y, f"block{block}/dwconv", hidden, 3, stride=stride, depthwise=True)
            y = conv(y, f"block{block}/project", cout, 1, act=None, gain=1.0)
            if stride == 1 and cin == cout:
                name = f"block{block}/add"
                acts[name] = acts[cur] + acts[y]
                layers.append(("add", name, [cur, y], None, None, 1, None))
                y = name
            cur, cin = y, cout
            block += 1
    cur = conv(cur, "conv_last", last, 1)
    acts["pool"] = acts[cur].mean(axis=(1, 2), keepdims=True)
    wf = (rng.standard_normal((num_classes, last)) * math.sqrt(1.0 / last)).astype(np.float32)
    bf = (rng.standard_normal(num_classes) * 0.05).astype(np.float32)
    acts["logits"] = acts["pool"].reshape(-1, last) @ wf.T + bf
    qp = {k: _qparams(float(v.min()), float(v.max()), qdt) for k, v in acts.items()}
    # The [-1, 1] input gets scale 1/128, as in converter-made MobileNets.
    qp["input_q"] = (1.0 / 128, 0)
    if pool == "average_pool":  # TFLite's 8-bit AVERAGE_POOL_2D wants equal input and output parameters
        qp["pool"] = qp[cur]

    m = ModelBuilder()
    t = {k: m.tensor(k, (1, *v.shape[1:]), qdt, scale=qp[k][0], zero_point=qp[k][1]) for k, v in acts.items()}
    t_in = m.tensor("input", (1, size, size, 3), np.float32)
    flat = m.tensor("flatten", (1, last), qdt, scale=qp["pool"][0], zero_point=qp["pool"][1])

    B, A, P = tflite.BuiltinOperator, tflite.BuiltinOptions, tflite.Padding
    m.op(B.QUANTIZE, [t_in], [t["input_q"]])
    for kind, name, srcs, w, b, stride, act in layers:
        if kind == "add":
            m.op(B.ADD, [t[srcs[0]], t[srcs[1]]], [t[name]], A.AddOptions, FusedActivationFunction=_ACT[None])
        elif kind == "dw":
            tw, tb = _layer_tensors(m, qdt, name, w, 3, qp[srcs[0]][0], b)
            m.op(B.DEPTHWISE_CONV_2D, [t[srcs[0]], tw, tb], [t[name]], A.DepthwiseConv2DOptions, Padding=P.SAME,
                 StrideW=stride, StrideH=stride, DepthMultiplier=1, FusedActivationFunction=_ACT[act])
        else:
            tw, tb = _layer_tensors(m, qdt, name, w, 0, qp[srcs[0]][0], b)
            m.op(B.CONV_2D, [t[srcs[0]], tw, tb], [t[name]], A.Conv2DOptions, Padding=P.SAME, StrideW=stride,
                 StrideH=stride, FusedActivationFunction=_ACT[act])
    if pool == "average_pool":
        fh, fw = acts[cur].shape[1:3]
        m.op(B.AVERAGE_POOL_2D, [t[cur]], [t["pool"]], A.Pool2DOptions, Padding=P.VALID, StrideW=1, StrideH=1,
             FilterWidth=fw, FilterHeight=fh)
    else:
        axes = m.tensor("mean/axes", (2,), np.int32, np.array([1, 2], np.int32))
        m.op(B.MEAN, [t[cur], axes], [t["pool"]], A.ReducerOptions, KeepDims=True)
    shape = m.tensor("flatten/shape", (2,), np.int32, np.array([1, last], np.int32))
    m.op(B.RESHAPE, [t["pool"], shape], [flat], A.ReshapeOptions, NewShape=[1, last])
    tw, tb = _layer_tensors(m, qdt, "fc", wf, None, qp["pool"][0], bf)
    m.op(B.FULLY_CONNECTED, [flat, tw, tb], [t["logits"]], A.FullyConnectedOptions, FusedActivationFunction=0)
    out = m.tensor("output", (1, num_classes), np.float32)
    m.op(B.DEQUANTIZE, [t["logits"]], [out])
    return m.finish([t_in], [t["logits"], out] + [t[n] for n in extra_outputs])


def _max_pool_nhwc(x: np.ndarray, k: int, stride: int) -> np.ndarray:
    """VALID max pooling of x (N,H,W,C)."""
    oh, ow = (x.shape[1] - k) // stride + 1, (x.shape[2] - k) // stride + 1
    return np.max([x[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :]
                   for i in range(k) for j in range(k)], axis=0)


def ops_net(seed: int = 0, *, dtype: Literal["int8", "uint8"] = "int8", size: int = 16, channels: int = 8,
            num_classes: int = 10) -> bytes:
    """A small net over the remaining 8-bit ops, with fused activations that really clamp:

        input (float32 1 x size x size x 3) -> QUANTIZE (scale not a power of two) ``input_q``
        -> CONV_2D 3x3 SAME + RELU ``conv1`` (output range from the pre-activation: RELU clamps at the zero point)
        -> PAD 1 on H and W ``pad`` -> MAX_POOL_2D 3x3/2 VALID + RELU_N1_TO_1 ``pool``
        -> DEPTHWISE_CONV_2D 3x3 SAME, depth multiplier 2, + RELU6 ``dwconv``
        -> LOGISTIC ``sigmoid``; MUL(dwconv, sigmoid) + RELU_N1_TO_1 ``mul``
        -> ADD(mul, a constant (1, 1, 1, 2*channels) tensor, broadcast) + RELU ``add``
        -> CONCATENATION(add, pool) on channels ``concat`` -> MEAN over H,W -> RESHAPE
        -> FULLY_CONNECTED ``logits`` -> DEQUANTIZE ``output``.

    int8: per-axis weights; TFLite's int8 CONCATENATION does not rescale, so ``add``, ``pool`` (and ``conv1``,
    ``pad``, as pooling and padding keep their input's parameters) share ``concat``'s scale and zero point (plain
    Concat). uint8: per-tensor weights, every tensor its own parameters (QLinearConcat rescales). Every
    intermediate tensor above is also a graph output, after ``logits`` and ``output``. Returns the .tflite bytes.
    """
    qdt = np.dtype(dtype)
    if qdt not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise ValueError(f"dtype must be 'int8' or 'uint8', got {dtype!r}")
    rng = np.random.default_rng(seed)
    c, c2 = channels, 2 * channels

    def he(shape, fan_in, gain=2.0):
        return rng.standard_normal(shape) * math.sqrt(gain / fan_in)

    w1, b1 = he((c, 3, 3, 3), 27), rng.standard_normal(c) * 0.05       # OHWI
    wd, bd = he((1, 3, 3, c2), 9) * 2.0, rng.standard_normal(c2) * 0.05  # 1HW(C*2): large, so RELU6 clips
    addc = rng.standard_normal((1, 1, 1, c2)) * 0.3
    wf, bf = he((num_classes, c2 + c), c2 + c, 1.0), rng.standard_normal(num_classes) * 0.05

    x = rng.uniform(-1.0, 1.0, (8, size, size, 3))
    pre1 = _conv_nhwc(x, w1.transpose(1, 2, 3, 0), b1, 1) * 2.0
    w1 = w1 * 2.0
    b1 = b1 * 2.0
    a1 = np.maximum(pre1, 0)
    pool = np.clip(_max_pool_nhwc(np.pad(a1, ((0, 0), (1, 1), (1, 1), (0, 0))), 3, 2), -1, 1)
    pre_d = _conv_nhwc(pool, wd[0][:, :, None, :].reshape(3, 3, 1, c2), bd, 1, groups=c)
    dw = np.clip(pre_d, 0, 6)
    sig = 1 / (1 + np.exp(-dw))
    pre_m = dw * sig
    mul = np.clip(pre_m, -1, 1)
    pre_a = mul + addc
    add = np.maximum(pre_a, 0)
    cat = np.concatenate([add, pool], axis=3)
    pooled = cat.mean(axis=(1, 2))
    logits = pooled @ wf.T + bf
    # Activation outputs take the pre-activation range, so the fused clamps are narrower than the type.
    ranges = {"input_q": x, "conv1": pre1, "dwconv": pre_d * 1.5, "mul": pre_m * 1.5, "add": pre_a,
              "concat": np.concatenate([pre_a.ravel(), pre1.ravel()]), "mean": pooled, "logits": logits}
    qp = {k: _qparams(float(v.min()), float(v.max()), qdt) for k, v in ranges.items()}
    qp["input_q"] = (float(np.float32(qp["input_q"][0] * 1.037)), qp["input_q"][1])  # far from a power of two
    qp["sigmoid"] = (1.0 / 256, -128 if qdt == np.int8 else 0)
    if qdt == np.int8:
        qp["conv1"] = qp["add"] = qp["concat"]
    qp["pad"] = qp["pool"] = qp["conv1"]

    half = (size + 2 - 3) // 2 + 1
    shapes = {"input_q": (1, size, size, 3), "conv1": (1, size, size, c), "pad": (1, size + 2, size + 2, c),
              "pool": (1, half, half, c), "dwconv": (1, half, half, c2), "sigmoid": (1, half, half, c2),
              "mul": (1, half, half, c2), "add": (1, half, half, c2), "concat": (1, half, half, c2 + c),
              "mean": (1, 1, 1, c2 + c), "logits": (1, num_classes)}
    m = ModelBuilder()
    t = {k: m.tensor(k, shp, qdt, scale=qp[k][0], zero_point=qp[k][1]) for k, shp in shapes.items()}
    t_in = m.tensor("input", (1, size, size, 3), np.float32)
    flat = m.tensor("flatten", (1, c2 + c), qdt, scale=qp["mean"][0], zero_point=qp["mean"][1])

    B, A, P = tflite.BuiltinOperator, tflite.BuiltinOptions, tflite.Padding
    m.op(B.QUANTIZE, [t_in], [t["input_q"]])
    tw, tb = _layer_tensors(m, qdt, "conv1", w1, 0, qp["input_q"][0], b1)
    m.op(B.CONV_2D, [t["input_q"], tw, tb], [t["conv1"]], A.Conv2DOptions, Padding=P.SAME, StrideW=1, StrideH=1,
         FusedActivationFunction=_ACT["relu"])
    pads = m.tensor("pad/paddings", (4, 2), np.int32, np.array([[0, 0], [1, 1], [1, 1], [0, 0]], np.int32))
    m.op(B.PAD, [t["conv1"], pads], [t["pad"]])
    m.op(B.MAX_POOL_2D, [t["pad"]], [t["pool"]], A.Pool2DOptions, Padding=P.VALID, StrideW=2, StrideH=2,
         FilterWidth=3, FilterHeight=3, FusedActivationFunction=_ACT["relu_n1_to_1"])
    tw, tb = _layer_tensors(m, qdt, "dwconv", wd, 3, qp["pool"][0], bd)
    m.op(B.DEPTHWISE_CONV_2D, [t["pool"], tw, tb], [t["dwconv"]], A.DepthwiseConv2DOptions, Padding=P.SAME,
         StrideW=1, StrideH=1, DepthMultiplier=2, FusedActivationFunction=_ACT["relu6"])
    m.op(B.LOGISTIC, [t["dwconv"]], [t["sigmoid"]])
    m.op(B.MUL, [t["dwconv"], t["sigmoid"]], [t["mul"]], A.MulOptions,
         FusedActivationFunction=_ACT["relu_n1_to_1"])
    cs, cz = _qparams(float(addc.min()), float(addc.max()), qdt)
    tc = m.tensor("add/constant", addc.shape, qdt,
                  np.clip(np.rint(addc / cs) + cz, *((-128, 127) if qdt == np.int8 else (0, 255))), cs, cz)
    m.op(B.ADD, [t["mul"], tc], [t["add"]], A.AddOptions, FusedActivationFunction=_ACT["relu"])
    m.op(B.CONCATENATION, [t["add"], t["pool"]], [t["concat"]], A.ConcatenationOptions, Axis=3,
         FusedActivationFunction=_ACT[None])
    axes = m.tensor("mean/axes", (2,), np.int32, np.array([1, 2], np.int32))
    m.op(B.MEAN, [t["concat"], axes], [t["mean"]], A.ReducerOptions, KeepDims=True)
    shape = m.tensor("flatten/shape", (2,), np.int32, np.array([1, c2 + c], np.int32))
    m.op(B.RESHAPE, [t["mean"], shape], [flat], A.ReshapeOptions, NewShape=[1, c2 + c])
    tw, tb = _layer_tensors(m, qdt, "fc", wf, 0, qp["mean"][0], bf)  # int8: per-axis (output channels) here too
    m.op(B.FULLY_CONNECTED, [flat, tw, tb], [t["logits"]], A.FullyConnectedOptions, FusedActivationFunction=0)
    out = m.tensor("output", (1, num_classes), np.float32)
    m.op(B.DEQUANTIZE, [t["logits"]], [out])
    inner = ["input_q", "conv1", "pad", "pool", "dwconv", "sigmoid", "mul", "add", "concat"]
    return m.finish([t_in], [t["logits"], out] + [t[k] for k in inner])


def op_model(op: Literal["mul", "add", "logistic", "max_pool", "average_pool", "softmax", "concat", "pad", "quantize",
                         "requantize", "strided_slice", "split", "split_v", "pack", "unpack", "squeeze", "gather",
                         "depth_to_space", "resize_nearest", "tanh", "hard_swish", "leaky_relu", "sub", "maximum",
                         "minimum", "prelu"],
             seed: int = 0, *,
             dtype: Literal["int8", "uint8"] = "int8", shape=(1, 8, 8, 16), activation: str | None = None,
             **kw) -> bytes:
    """One TFLite op with 8-bit graph inputs ``x`` (and ``y``) and output ``out``, seeded random quantization
    parameters, for op-by-op comparisons (the compared inputs are then identical in both runtimes).

    mul, add: ``x`` of `shape` times/plus ``y`` (shape kw["y_shape"], default `shape`), fused `activation`.
    logistic: output scale 1/256 (TFLite's requirement). max_pool: kw filter (3), stride (2), padding ("SAME" or
    "VALID"), fused `activation`; output parameters = the input's. average_pool: as max_pool, filter and stride
    an int or an (h, w) pair. softmax: over the last axis, kw beta (1.0), kw scale (the input's; default seeded),
    output scale 1/256, zero point -128 (int8) / 0 (uint8), as TFLite requires. concat: kw inputs (2), axis (3); kw
    same_params: every input with the output's parameters. pad: kw paddings (rank x 2). quantize: float32
    input ``x``, kw scale (default: a seeded scale that is not a power of two). requantize: QUANTIZE of the 8-bit
    ``x`` to kw out_dtype (default `dtype`) with scale x_scale / kw ratio (default: seeded in [0.6, 1.6]).
    strided_slice (kw begin, end, strides, BeginMask, EndMask, ShrinkAxisMask, out_shape), split / split_v / unpack
    (kw axis, sizes; outputs out0, out1, ...), pack (kw inputs, axis; inputs x, x1, ...), squeeze (kw dims),
    gather (kw axis, indices), depth_to_space (kw block), resize_nearest (kw size, align_corners, half_pixel), tanh,
    hard_swish, leaky_relu (kw alpha), sub (kw activation), maximum, minimum (kw same_params), prelu (constant
    alpha of shape kw y_shape): see `_more_op`.
    """
    qdt = np.dtype(dtype)
    rng = np.random.default_rng(seed)
    shape = tuple(shape)

    def params(lo=0.005, hi=0.05):
        sc = float(np.float32(np.exp(rng.uniform(np.log(lo), np.log(hi)))))
        zp = int(rng.integers(-20, 21)) + (0 if qdt == np.int8 else 128)
        return sc, zp

    B, A, P = tflite.BuiltinOperator, tflite.BuiltinOptions, tflite.Padding
    m = ModelBuilder()
    if op == "quantize":
        sc = kw.get("scale") or float(np.float32(np.exp(rng.uniform(np.log(0.003), np.log(0.05)))))
        x = m.tensor("x", shape, np.float32)
        y = m.tensor("out", shape, qdt, scale=sc, zero_point=params()[1])
        m.op(B.QUANTIZE, [x], [y])
        return m.finish([x], [y])
    xp = params()
    x = m.tensor("x", shape, qdt, None, *xp)
    ins = [x]
    if op in ("mul", "add"):
        yp = params()
        ins.append(m.tensor("y", kw.get("y_shape", shape), qdt, None, *yp))
        out_shape = tuple(np.broadcast_shapes(shape, kw.get("y_shape", shape)))
        # Output scales that keep most results inside the type: a * b spans ~ 128^2 * xs * ys, a + b ~ 256 * max.
        sc = xp[0] * yp[0] * rng.uniform(30, 120) if op == "mul" else max(xp[0], yp[0]) * rng.uniform(1.2, 2.5)
        y = m.tensor("out", out_shape, qdt, None, float(np.float32(sc)), params()[1])
        code, kind = (B.MUL, A.MulOptions) if op == "mul" else (B.ADD, A.AddOptions)
        m.op(code, ins, [y], kind, FusedActivationFunction=_ACT[activation])
    elif op == "logistic":
        y = m.tensor("out", shape, qdt, scale=1.0 / 256, zero_point=-128 if qdt == np.int8 else 0)
        m.op(B.LOGISTIC, ins, [y])
    elif op == "max_pool":
        k, st, pad = kw.get("filter", 3), kw.get("stride", 2), kw.get("padding", "SAME")
        h, w = shape[1:3]
        oh, ow = ((-(-h // st), -(-w // st)) if pad == "SAME" else ((h - k) // st + 1, (w - k) // st + 1))
        t = m.tensors[x]
        y = m.tensor("out", (shape[0], oh, ow, shape[3]), qdt, scale=t.scale, zero_point=t.zero_point)
        m.op(B.MAX_POOL_2D, ins, [y], A.Pool2DOptions, Padding=getattr(P, pad), StrideW=st, StrideH=st,
             FilterWidth=k, FilterHeight=k, FusedActivationFunction=_ACT[activation])
    elif op == "average_pool":
        (kh, kw_), (sh, sw) = (tuple(v) if isinstance(v, tuple | list) else (v, v)
                               for v in (kw.get("filter", 3), kw.get("stride", 2)))
        pad = kw.get("padding", "SAME")
        h, w = shape[1:3]
        oh, ow = ((-(-h // sh), -(-w // sw)) if pad == "SAME" else ((h - kh) // sh + 1, (w - kw_) // sw + 1))
        t = m.tensors[x]
        y = m.tensor("out", (shape[0], oh, ow, shape[3]), qdt, scale=t.scale, zero_point=t.zero_point)
        m.op(B.AVERAGE_POOL_2D, ins, [y], A.Pool2DOptions, Padding=getattr(P, pad), StrideW=sw, StrideH=sh,
             FilterWidth=kw_, FilterHeight=kh, FusedActivationFunction=_ACT[activation])
    elif op == "softmax":
        y = m.tensor("out", shape, qdt, scale=1.0 / 256, zero_point=-128 if qdt == np.int8 else 0)
        if kw.get("scale"):
            m.tensors[x].scale = np.float32([kw["scale"]])
        m.op(B.SOFTMAX, ins, [y], A.SoftmaxOptions, Beta=float(kw.get("beta", 1.0)))
    elif op == "concat":
        n, axis = kw.get("inputs", 2), kw.get("axis", 3)
        yp = params()
        for j in range(1, n):
            ins.append(m.tensor(f"x{j}", shape, qdt, None, *(yp if kw.get("same_params") else params())))
        if kw.get("same_params"):
            m.tensors[x].scale, m.tensors[x].zero_point = np.float32([yp[0]]), np.array([yp[1]])
        out_shape = list(shape)
        out_shape[axis] *= n
        y = m.tensor("out", out_shape, qdt, scale=yp[0], zero_point=yp[1])
        m.op(B.CONCATENATION, ins, [y], A.ConcatenationOptions, Axis=axis, FusedActivationFunction=_ACT[None])
    elif op == "requantize":
        odt = np.dtype(kw.get("out_dtype", dtype))
        ratio = kw.get("ratio") or rng.uniform(0.6, 1.6)
        y = m.tensor("out", shape, odt, None, float(np.float32(xp[0] / ratio)),
                     int(rng.integers(-20, 21)) + (0 if odt == np.int8 else 128))
        m.op(B.QUANTIZE, ins, [y])
    elif op == "pad":
        p = np.array(kw.get("paddings", [[0, 0], [1, 2], [2, 1], [0, 0]]), np.int32)
        ins.append(m.tensor("paddings", p.shape, np.int32, p))
        t = m.tensors[x]
        y = m.tensor("out", tuple(int(v) for v in np.array(shape) + p.sum(axis=1)), qdt, scale=t.scale,
                     zero_point=t.zero_point)
        m.op(B.PAD, ins, [y])
    elif op in _MORE_OPS:
        outs = _more_op(m, op, x, xp, qdt, shape, params, rng, kw)
        graph_ins = [i for i in range(len(m.tensors)) if m.tensors[i].buffer == 0 and m.tensors[i].name.startswith(
            "x")]
        return m.finish(graph_ins, outs)
    else:
        raise ValueError(f"unknown op {op!r}")
    graph_ins = [i for i in ins if m.tensors[i].buffer == 0]
    return m.finish(graph_ins, [y])


_MORE_OPS = ("strided_slice", "split", "split_v", "pack", "unpack", "squeeze", "gather", "depth_to_space",
             "resize_nearest", "tanh", "hard_swish", "leaky_relu", "sub", "maximum", "minimum", "prelu")


def _more_op(m: ModelBuilder, op: str, x: int, xp, qdt, shape, params, rng, kw) -> list[int]:
    """The ops of `op_model` added for streaming models and the field's int8 CNNs; returns the output tensors
    (named ``out``, or ``out0``, ``out1``, ... for several). Data movement keeps x's parameters."""
    B, A = tflite.BuiltinOperator, tflite.BuiltinOptions

    def like(name, shp):
        return m.tensor(name, shp, qdt, None, *xp)

    def ints(name, v):
        v = np.asarray(v, np.int32)
        return m.tensor(name, v.shape, np.int32, v)

    r = len(shape)
    if op == "strided_slice":
        begin, end, strides = kw.get("begin", [0] * r), kw.get("end", list(shape)), kw.get("strides", [1] * r)
        masks = {k: kw.get(k, 0) for k in ("BeginMask", "EndMask", "ShrinkAxisMask")}
        out_shape = tuple(kw["out_shape"])
        y = like("out", out_shape)
        m.op(B.STRIDED_SLICE, [x, ints("begin", begin), ints("end", end), ints("strides", strides)], [y],
             A.StridedSliceOptions, EllipsisMask=0, NewAxisMask=0, **masks)
        return [y]
    if op in ("split", "split_v", "unpack"):
        axis = kw.get("axis", 3)
        sizes = kw.get("sizes", [shape[axis] // 2] * 2)
        outs = []
        for k, size in enumerate(sizes):
            sh = list(shape)
            sh[axis] = size
            if op == "unpack":
                del sh[axis]
            outs.append(like(f"out{k}", sh))
        if op == "split":
            m.op(B.SPLIT, [ints("axis", axis), x], outs, A.SplitOptions, NumSplits=len(sizes))
        elif op == "split_v":
            m.op(B.SPLIT_V, [x, ints("sizes", kw.get("size_splits", sizes)), ints("axis", axis)], outs,
                 A.SplitVOptions, NumSplits=len(sizes))
        else:
            m.op(B.UNPACK, [x], outs, A.UnpackOptions, Num=len(sizes), Axis=axis)
        return outs
    if op == "pack":
        n, axis = kw.get("inputs", 3), kw.get("axis", 0)
        ins = [x] + [like(f"x{j}", shape) for j in range(1, n)]
        y = like("out", (*shape[:axis], n, *shape[axis:]))
        m.op(B.PACK, ins, [y], A.PackOptions, ValuesCount=n, Axis=axis)
        return [y]
    if op == "squeeze":
        dims = kw.get("dims", [i for i, d in enumerate(shape) if d == 1])
        y = like("out", [d for i, d in enumerate(shape) if i not in dims])
        m.op(B.SQUEEZE, [x], [y], A.SqueezeOptions, SqueezeDims=list(dims))
        return [y]
    if op == "gather":
        axis = kw.get("axis", 3)
        idx = np.asarray(kw.get("indices", rng.integers(0, shape[axis], 5)), np.int32)
        y = like("out", (*shape[:axis], *idx.shape, *shape[axis + 1:]))
        m.op(B.GATHER, [x, ints("indices", idx)], [y], A.GatherOptions, Axis=axis, BatchDims=0)
        return [y]
    if op == "depth_to_space":
        b = kw.get("block", 2)
        n, h, w, c = shape
        y = like("out", (n, h * b, w * b, c // (b * b)))
        m.op(B.DEPTH_TO_SPACE, [x], [y], A.DepthToSpaceOptions, BlockSize=b)
        return [y]
    if op == "resize_nearest":
        oh, ow = kw.get("size", (2 * shape[1], 2 * shape[2]))
        y = like("out", (shape[0], oh, ow, shape[3]))
        m.op(B.RESIZE_NEAREST_NEIGHBOR, [x, ints("size", [oh, ow])], [y], A.ResizeNearestNeighborOptions,
             AlignCorners=bool(kw.get("align_corners", False)), HalfPixelCenters=bool(kw.get("half_pixel", False)))
        return [y]
    if op in ("tanh", "hard_swish", "leaky_relu"):
        if op == "tanh":  # TFLite requires output scale 1/128, zero point 0 (int8) / 128 (uint8)
            y = m.tensor("out", shape, qdt, None, 1.0 / 128, 0 if qdt == np.int8 else 128)
            m.op(B.TANH, [x], [y])
        elif op == "hard_swish":
            y = m.tensor("out", shape, qdt, None, *params())
            m.op(B.HARD_SWISH, [x], [y])
        else:
            y = m.tensor("out", shape, qdt, None, *params())
            m.op(B.LEAKY_RELU, [x], [y], A.LeakyReluOptions, Alpha=float(kw.get("alpha", rng.uniform(0.05, 0.5))))
        return [y]
    # binary: sub, maximum, minimum, prelu
    yp = params()
    same = kw.get("same_params", op in ("maximum", "minimum"))
    b_shape = tuple(kw.get("y_shape", shape))
    if op == "prelu":
        alpha = rng.integers(-128, 128, b_shape) if qdt == np.int8 else rng.integers(0, 256, b_shape)
        b = m.tensor("alpha", b_shape, qdt, alpha, *params(0.002, 0.01))
    else:
        b = m.tensor("x1", b_shape, qdt, None, *(xp if same else yp))
    y = m.tensor("out", np.broadcast_shapes(shape, b_shape), qdt, None,
                 *(xp if same else (max(xp[0], yp[0]) * float(rng.uniform(1.2, 2.5)), params()[1])))
    if op == "sub":
        m.op(B.SUB, [x, b], [y], A.SubOptions, FusedActivationFunction=_ACT[kw.get("activation")])
    else:
        m.op({"maximum": B.MAXIMUM, "minimum": B.MINIMUM, "prelu": B.PRELU}[op], [x, b], [y])
    return [y]


def litert_run(model: bytes, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a .tflite model in ai-edge-litert's Interpreter: {output name: array}."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=model)
    try:
        it.allocate_tensors()
    except RuntimeError as e:
        # XNNPACK's delegate refuses some valid graphs as it prepares (an identity TRANSPOSE of a uint8 tensor:
        # "failed to delegate TRANSPOSE node"); litert's own builtin kernels are the same oracle without it.
        if "XNNPack" not in str(e) and "delegate" not in str(e):
            raise
        it = Interpreter(model_content=model,
                         experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
        it.allocate_tensors()
    for d in it.get_input_details():
        it.set_tensor(d["index"], inputs[d["name"]])
    it.invoke()
    return {d["name"]: it.get_tensor(d["index"]).copy() for d in it.get_output_details()}


def streaming_kws(seed: int = 0, *, dtype: Literal["int8", "uint8"] = "int8", features: int = 10,
                  window: int = 4, channels: int = 8, num_classes: int = 6) -> bytes:
    """A streaming keyword spotter as TFLite's converter writes stateful models: two subgraphs, the main one
    starting with CALL_ONCE of an init subgraph that assigns each state ring buffer its zero point (a real 0),
    resource variables (VAR_HANDLE "kws"/"stream1" and "kws"/"stream2") holding the last frames between calls.

    Per call, input ``frame`` (float32 1 x 1 x 1 x features, one frame of audio features):
        QUANTIZE -> READ_VARIABLE stream1 (1, window-1, 1, features) -> CONCATENATION on the time axis (1)
        -> CONV_2D (window x 1, VALID) + RELU ``conv1``; STRIDED_SLICE of the concatenation dropping the oldest
        frame -> ASSIGN_VARIABLE stream1
        -> READ_VARIABLE stream2 (1, 2, 1, channels) -> CONCATENATION -> DEPTHWISE_CONV_2D (3 x 1, VALID) + RELU6
        ``dwconv``; SPLIT_V of the concatenation into its oldest frame and the rest -> ASSIGN_VARIABLE stream2
        -> CONV_2D 1x1 -> RESHAPE -> FULLY_CONNECTED ``logits`` (8-bit) -> DEQUANTIZE ``output``.
    Weights seeded (int8: per-axis); activation parameters from a float pass over seeded frames. Returns bytes.
    """
    qdt = np.dtype(dtype)
    if qdt not in (np.dtype(np.int8), np.dtype(np.uint8)):
        raise ValueError(f"dtype must be 'int8' or 'uint8', got {dtype!r}")
    rng = np.random.default_rng(seed)
    f, c, t = features, channels, window
    w1, b1 = rng.standard_normal((c, t, 1, f)) * math.sqrt(2.0 / (t * f)), rng.standard_normal(c) * 0.05  # OHWI
    wd, bd = rng.standard_normal((1, 3, 1, c)) * math.sqrt(2.0 / 3), rng.standard_normal(c) * 0.05       # 1HWC
    w2, b2 = rng.standard_normal((c, 1, 1, c)) * math.sqrt(1.0 / c), rng.standard_normal(c) * 0.05
    wf, bf = rng.standard_normal((num_classes, c)) * math.sqrt(1.0 / c), rng.standard_normal(num_classes) * 0.05

    # Float calibration over a stream of seeded frames.
    frames = rng.uniform(-1.0, 1.0, (64, f))
    pad = np.concatenate([np.zeros((t - 1, f)), frames])
    a1 = np.maximum(np.stack([np.einsum("thf,othf->o", pad[i:i + t, None, :], w1) for i in range(len(frames))])
                    + b1, 0)
    pad1 = np.concatenate([np.zeros((2, c)), a1])
    a2 = np.clip(np.stack([(pad1[i:i + 3] * wd[0, :, 0, :]).sum(0) for i in range(len(a1))]) + bd, 0, 6)
    a3 = a2 @ w2[:, 0, 0, :].T + b2
    a4 = a3 @ wf.T + bf
    qp = {k: _qparams(float(v.min()), float(v.max()), qdt)
          for k, v in {"q": frames, "a1": a1, "a2": a2, "a3": a3, "a4": a4}.items()}

    B, A, P = tflite.BuiltinOperator, tflite.BuiltinOptions, tflite.Padding
    m = ModelBuilder()
    init = m.subgraph()
    for name, shape, key in (("stream1", (1, t - 1, 1, f), "q"), ("stream2", (1, 2, 1, c), "a1")):
        h = init.tensor(f"{name}/handle", (), "resource")
        init.op(B.VAR_HANDLE, [], [h], A.VarHandleOptions, Container="kws", SharedName=name)
        zero = init.tensor(f"{name}/zeros", shape, qdt, np.full(shape, qp[key][1]), *qp[key])
        init.op(B.ASSIGN_VARIABLE, [h, zero], [])

    x = m.tensor("frame", (1, 1, 1, f), np.float32)
    m.op(B.CALL_ONCE, [], [], A.CallOnceOptions, InitSubgraphIndex=1)
    xq = m.tensor("frame_q", (1, 1, 1, f), qdt, None, *qp["q"])
    m.op(B.QUANTIZE, [x], [xq])

    def stream(name, new, shape, params, keep_with):
        """READ -> CONCATENATION(state, new) on axis 1 -> the window; the window without its oldest frame
        (STRIDED_SLICE or SPLIT_V) -> ASSIGN."""
        h = m.tensor(f"{name}/handle", (), "resource")
        m.op(B.VAR_HANDLE, [], [h], A.VarHandleOptions, Container="kws", SharedName=name)
        state = m.tensor(f"{name}/state", shape, qdt, None, *params)
        m.op(B.READ_VARIABLE, [h], [state])
        win_shape = (1, shape[1] + 1, 1, shape[3])
        win = m.tensor(f"{name}/window", win_shape, qdt, None, *params)
        m.op(B.CONCATENATION, [state, new], [win], A.ConcatenationOptions, Axis=1, FusedActivationFunction=0)
        rest = m.tensor(f"{name}/next", shape, qdt, None, *params)
        if keep_with == "strided_slice":
            begin = m.tensor(f"{name}/begin", (4,), np.int32, np.array([0, 1, 0, 0], np.int32))
            end = m.tensor(f"{name}/end", (4,), np.int32, np.array(win_shape, np.int32))
            strides = m.tensor(f"{name}/strides", (4,), np.int32, np.ones(4, np.int32))
            m.op(B.STRIDED_SLICE, [win, begin, end, strides], [rest], A.StridedSliceOptions, BeginMask=0,
                 EndMask=0, EllipsisMask=0, NewAxisMask=0, ShrinkAxisMask=0)
        else:
            sizes = m.tensor(f"{name}/sizes", (2,), np.int32, np.array([1, shape[1]], np.int32))
            axis = m.tensor(f"{name}/axis", (), np.int32, np.array(1, np.int32))
            oldest = m.tensor(f"{name}/oldest", (1, 1, 1, shape[3]), qdt, None, *params)
            m.op(B.SPLIT_V, [win, sizes, axis], [oldest, rest], A.SplitVOptions, NumSplits=2)
        m.op(B.ASSIGN_VARIABLE, [h, rest], [])
        return win

    win1 = stream("stream1", xq, (1, t - 1, 1, f), qp["q"], "strided_slice")
    conv1 = m.tensor("conv1", (1, 1, 1, c), qdt, None, *qp["a1"])
    tw, tb = _layer_tensors(m, qdt, "conv1", w1, 0, qp["q"][0], b1)
    m.op(B.CONV_2D, [win1, tw, tb], [conv1], A.Conv2DOptions, Padding=P.VALID, StrideW=1, StrideH=1,
         FusedActivationFunction=_ACT["relu"])
    win2 = stream("stream2", conv1, (1, 2, 1, c), qp["a1"], "split_v")
    dw = m.tensor("dwconv", (1, 1, 1, c), qdt, None, *qp["a2"])
    tw, tb = _layer_tensors(m, qdt, "dwconv", wd, 3, qp["a1"][0], bd)
    m.op(B.DEPTHWISE_CONV_2D, [win2, tw, tb], [dw], A.DepthwiseConv2DOptions, Padding=P.VALID, StrideW=1,
         StrideH=1, DepthMultiplier=1, FusedActivationFunction=_ACT["relu6"])
    conv2 = m.tensor("conv2", (1, 1, 1, c), qdt, None, *qp["a3"])
    tw, tb = _layer_tensors(m, qdt, "conv2", w2, 0, qp["a2"][0], b2)
    m.op(B.CONV_2D, [dw, tw, tb], [conv2], A.Conv2DOptions, Padding=P.VALID, StrideW=1, StrideH=1,
         FusedActivationFunction=0)
    flat = m.tensor("flatten", (1, c), qdt, None, *qp["a3"])
    shape = m.tensor("flatten/shape", (2,), np.int32, np.array([1, c], np.int32))
    m.op(B.RESHAPE, [conv2, shape], [flat], A.ReshapeOptions, NewShape=[1, c])
    logits = m.tensor("logits", (1, num_classes), qdt, None, *qp["a4"])
    tw, tb = _layer_tensors(m, qdt, "fc", wf, None, qp["a3"][0], bf)
    m.op(B.FULLY_CONNECTED, [flat, tw, tb], [logits], A.FullyConnectedOptions, FusedActivationFunction=0)
    out = m.tensor("output", (1, num_classes), np.float32)
    m.op(B.DEQUANTIZE, [logits], [out])
    return m.finish([x], [logits, out, conv1, dw], subgraphs=[(init, [], [])])


class LiteRT:
    """One ai-edge-litert Interpreter kept across calls (a streaming model's variables persist in it)."""

    def __init__(self, model: bytes):
        from ai_edge_litert.interpreter import Interpreter

        self.it = Interpreter(model_content=model)
        self.it.allocate_tensors()

    def __call__(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Invoke once: {output name: array}."""
        for d in self.it.get_input_details():
            self.it.set_tensor(d["index"], inputs[d["name"]])
        self.it.invoke()
        return {d["name"]: self.it.get_tensor(d["index"]).copy() for d in self.it.get_output_details()}
