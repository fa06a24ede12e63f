"""The TFLite model builder of the test models: flatbuffer serialisation, the float NHWC forward pass and the
quantization helpers the seeded models calibrate with, and litert (ai-edge-litert) as the oracle.

No TensorFlow: `ModelBuilder` writes every model with the generated ``tflite.*Start/Add/End`` functions and a
``flatbuffers.Builder``. The float helpers (`conv_float`, `depthwise_float`, `conv_nhwc`, `max_pool_nhwc`,
TensorFlow's SAME padding `same_pads`) give the activations a model's scales and zero points are calibrated on;
`qparams`, `quantize_weights` and `layer_tensors` quantize them as TFLite's converter does (int8 symmetric per
channel, uint8 asymmetric per tensor, int32 biases). vkinfer.testing.tflite_zoo, .tflite_ops and .field_zoo build
their models with it; `litert_run` and `LiteRT` run a model in litert's Interpreter.

    m = ModelBuilder()
    x = m.tensor("x", (1, 4), np.int8, scale=0.1, zero_point=0)
    y = m.tensor("y", (1, 4), np.int8, scale=0.1, zero_point=0)
    m.op(tflite.BuiltinOperator.RELU, [x], [y])
    blob = m.finish([x], [y])                  # .tflite bytes
    litert_run(blob, {"x": np.zeros((1, 4), np.int8)})
"""

from __future__ import annotations

from dataclasses import dataclass, field

import flatbuffers
import numpy as np
import tflite

_TYPES = {np.dtype(np.float32): tflite.TensorType.FLOAT32, np.dtype(np.int32): tflite.TensorType.INT32,
          np.dtype(np.uint8): tflite.TensorType.UINT8, np.dtype(np.int8): tflite.TensorType.INT8,
          np.dtype(np.int64): tflite.TensorType.INT64, np.dtype(object): tflite.TensorType.RESOURCE}
ACT = {None: tflite.ActivationFunctionType.NONE, "relu": tflite.ActivationFunctionType.RELU,
        "relu6": tflite.ActivationFunctionType.RELU6, "relu_n1_to_1": tflite.ActivationFunctionType.RELU_N1_TO_1}
ACT_FLOAT = {None: lambda v: v, "relu": lambda v: np.maximum(v, 0), "relu6": lambda v: np.clip(v, 0, 6),
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


def conv_nhwc(x, w_hwio, bias, stride, groups=1):
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


def qparams(lo: float, hi: float, dtype) -> tuple[float, int]:
    """Asymmetric (scale, zero point) covering [min(lo, 0), max(hi, 0)] in dtype's range."""
    qmin, qmax = (-128, 127) if np.dtype(dtype) == np.int8 else (0, 255)
    lo, hi = min(lo, 0.0), max(hi, 0.0)
    scale = max(hi - lo, 1e-6) / (qmax - qmin)
    zp = int(np.clip(round(qmin - lo / scale), qmin, qmax))
    return float(np.float32(scale)), zp


def quantize_weights(w: np.ndarray, axis: int | None, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Quantized weights, scales, zero points: symmetric int8 (per axis, or per tensor when axis is None), or
    asymmetric uint8 per tensor."""
    if np.dtype(dtype) == np.uint8:
        scale, zp = qparams(float(w.min()), float(w.max()), np.uint8)
        q = np.clip(np.rint(w / scale) + zp, 0, 255).astype(np.uint8)
        return q, np.array([scale], np.float32), np.array([zp])
    red = tuple(i for i in range(w.ndim) if i != axis) if axis is not None else None
    amax = np.maximum(np.abs(w).max(axis=red, keepdims=axis is not None), 1e-8)
    scale = (amax / 127.0).astype(np.float32)
    q = np.clip(np.rint(w / scale), -127, 127).astype(np.int8)
    scale = scale.reshape(-1)
    return q, scale, np.zeros(scale.size, np.int64)



def layer_tensors(m, qdt, name: str, w: np.ndarray, axis: int | None, in_scale, bias: np.ndarray):
    """The weight and int32 bias tensors of a CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED layer: int8
    weights per `axis` (uint8: per tensor), bias quantized with scale in_scale * weight scale, zero point 0."""
    q, s, z = quantize_weights(w, axis if np.dtype(qdt) == np.int8 else None, qdt)
    tw = m.tensor(f"{name}/weights", q.shape, qdt, q, s, z, axis if s.size > 1 else 0)
    bscale = (np.float32(in_scale) * s).astype(np.float32)
    bq = np.rint(bias / bscale).astype(np.int32)
    tb = m.tensor(f"{name}/bias", bq.shape, np.int32, bq, bscale, np.zeros(bscale.size, np.int64), 0)
    return tw, tb


def conv_float(x: np.ndarray, w_ohwi: np.ndarray, bias: np.ndarray, stride: int) -> np.ndarray:
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


def depthwise_float(x: np.ndarray, w_hwc: np.ndarray, bias: np.ndarray, stride: int) -> np.ndarray:
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


def max_pool_nhwc(x: np.ndarray, k: int, stride: int) -> np.ndarray:
    """VALID max pooling of x (N,H,W,C)."""
    oh, ow = (x.shape[1] - k) // stride + 1, (x.shape[2] - k) // stride + 1
    return np.max([x[:, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride, :]
                   for i in range(k) for j in range(k)], axis=0)


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


__all__ = ["ModelBuilder", "ACT", "ACT_FLOAT", "same_pads", "conv_nhwc", "conv_float", "depthwise_float",
           "max_pool_nhwc", "qparams", "quantize_weights", "layer_tensors", "litert_run", "LiteRT"]
