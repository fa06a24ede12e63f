"""TFLite (int8/uint8) -> vkinfer Graph, mapped onto the ONNX-style ops the session already runs.

TFLite activations are NHWC; vkinfer's convolutions are NCHW. Every tensor is kept in the layouts asked of it:
a convolution's output exists as NCHW, and a Transpose to NHWC is inserted only when an NHWC consumer (RESHAPE,
a graph output, ...) needs it, so a chain of convolutions, ADDs and MEANs runs without transposes between them.

    CONV_2D            -> QLinearConv (OHWI -> OIHW, SAME/VALID -> explicit pads, per-axis scales on axis 0)
    DEPTHWISE_CONV_2D  -> QLinearConv, group = C (1HW(C*mult) -> (C*mult)1HW: depth multiplier mult >= 1)
    FULLY_CONNECTED    -> com.microsoft:QGemm, transB = 1
    ADD                -> vkinfer:TFLiteAdd (XNNPACK's fixed-point add; numpy broadcasting; constant operands
                          allowed), com.microsoft:QLinearAdd where XNNPACK would not take it (scale ratios)
    MUL                -> com.microsoft:QLinearMul (numpy broadcasting; constant operands allowed)
    MEAN over H,W      -> com.microsoft:QLinearGlobalAveragePool
    AVERAGE_POOL_2D    -> vkinfer:TFLiteAveragePool (NCHW; TFLite's integer average, fused activation included)
    MAX_POOL_2D        -> MaxPool (SAME/VALID -> explicit pads; padding never wins, as in TFLite)
    RESHAPE            -> Reshape (to the output tensor's static shape)
    CONCATENATION      -> Concat when every input has the output's scale and zero point (TFLite's int8 kernel
                          requires it), else com.microsoft:QLinearConcat; NHWC axis -> NCHW axis in NCHW
    PAD                -> Pad (constant mode, value = the zero point), pads permuted in NCHW
    SOFTMAX            -> vkinfer:TFLiteSoftmax (TFLite's float32 exp table, over the last axis)
    LOGISTIC           -> com.microsoft:QLinearSigmoid
    QUANTIZE           -> vkinfer:TFLiteQuantize (float input; 8-bit input of the same type where XNNPACK runs
                          it), else DequantizeLinear -> QuantizeLinear (int8 <-> uint8 requantization)
    DEQUANTIZE         -> DequantizeLinear
Fused activations (RELU, RELU6, RELU_N1_TO_1) narrow the output clamp to TFLite's bounds (zero point +
round-half-away(value / scale), CalculateActivationRangeQuantized), given as a ("clip", lo, hi) that quantizes to
exactly those bounds: a convolution (or fully connected layer) becomes vkinfer:QLinearConvClamp (or
vkinfer:QGemmClamp); MUL, MAX_POOL_2D and a QLinearAdd are followed by an identity 1x1 vkinfer:QLinearConvClamp
(weight 1, input scale = output scale: multiplier 1.0, only the clamp acts), left out where the bounds are the
type's range;
vkinfer:TFLiteAveragePool and vkinfer:TFLiteAdd take the bounds as attributes.
CONCATENATION ignores its fused activation, as TFLite does. Pooling and PAD need equal input and output
parameters (TFLite's 8-bit kernels do not rescale; other models are refused).

Numerics: vkinfer follows ONNX Runtime (float32 requantization multipliers, round half to even). ai-edge-litert's
default kernels (XNNPACK) do the same for CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED, MEAN, MAX_POOL_2D,
CONCATENATION, PAD, LOGISTIC: identical results on the test models (tests/test_tflite.py). Where they differ:
  - QUANTIZE of float32: TFLite multiplies by float32(1 / scale), ONNX QuantizeLinear divides by the scale; the
    importer emits vkinfer:TFLiteQuantize (vkinfer/reference/tflite_quantize.py), identical to TFLite.
  - QUANTIZE int8 -> int8 / uint8 -> uint8: XNNPACK requantizes with an 8-bit-fraction multiplier (round
    half up), which vkinfer:TFLiteQuantize follows exactly when 2**-8 <= ratio <= 2**7 (ORT's DequantizeLinear
    -> QuantizeLinear differs by one step on ~2.5% of values); other ratios and int8 <-> uint8 go through float
    (TFLite's builtin fixed-point kernel: identical on the measured cases, <= 1 step in principle).
  - ADD: XNNPACK turns each scale ratio float32(x_scale / y_scale) into a ~21-bit fixed-point multiplier (shift
    20 - exponent of the larger ratio) and rounds ties up; ORT's QLinearAdd works in float32, ties to even: one
    step on a few of the 65536 input pairs of some parameter sets, which a deep network amplifies (MobileNetV2
    0.35/224, seeded: 1 of 25088 values of block2/add, then up to 39 steps on conv_last, 2 on the logits).
    vkinfer:TFLiteAdd (vkinfer/reference/tflite_add.py) is identical to TFLite on all pairs; used when both
    ratios lie in [2**-10, 2**8), XNNPACK's range (outside it TFLite's builtin kernel runs; QLinearAdd kept).
  - MUL: TFLite adds the output zero point after rounding, ORT in float32 before: one step on rare values near .5
    (4 of 524288 uint8 input pairs over 8 parameter sets, 0 int8).
  - AVERAGE_POOL_2D: XNNPACK takes float pools only, so TFLite's builtin kernel runs 8-bit ones: the integer sum
    of the raw values over the in-image window, divided by that count rounding half away from zero (ORT averages
    x - zero point in float32, half to even: one step on ~1-10% of values, ties being common, and a following
    FULLY_CONNECTED amplified it to 5 steps). vkinfer:TFLiteAveragePool (vkinfer/reference/
    tflite_average_pool.py) is identical to TFLite (SAME/VALID, activations, windows past 16 x 16).
  - SOFTMAX: XNNPACK takes float only; TFLite's builtin kernel looks up expf(-x_scale * beta * (max - x)) in a
    float32 table and normalises in float32. vkinfer:TFLiteSoftmax (vkinfer/reference/tflite_softmax.py) does the
    same, identical on the tested cases (the float path it replaced agreed there too; it differs at float ties).
Without the XNNPACK delegate (OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES, BUILTIN_REF) TFLite's builtin
kernels requantize with fixed-point multipliers: one step on about 0.8% of MUL values and 0.05-0.1% of
convolution outputs (measured on the test models); the tests compare with the default interpreter.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..reference.tflite_add import xnnpack_adds
from ..reference.tflite_quantize import xnnpack_requantizes
from .graph import Graph, Node, TensorInfo
from .onnx_import import UnsupportedModelError
from .passes import check_graph

_DTYPES = {0: np.float32, 2: np.int32, 3: np.uint8, 4: np.int64, 9: np.int8}
_QTYPES = (np.dtype(np.uint8), np.dtype(np.int8))
_QRANGE = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}
# Fused activations: code -> real (lo, hi) bounds (None: unbounded above); NONE, RELU, RELU_N1_TO_1, RELU6.
_ACTIVATIONS = {0: None, 1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}


def is_tflite(model) -> bool:
    """True for TFLite flatbuffer bytes or a path to such a file (file identifier "TFL3" at bytes 4..8)."""
    if isinstance(model, bytes | bytearray | memoryview):
        return bytes(model[4:8]) == b"TFL3"
    if isinstance(model, str | os.PathLike):
        try:
            with open(model, "rb") as f:
                return f.read(8)[4:8] == b"TFL3"
        except OSError:
            return False
    return False


def _builtin_names() -> dict[int, str]:
    import tflite

    return {v: k for k, v in vars(tflite.BuiltinOperator).items() if not k.startswith("_") and isinstance(v, int)}


class _T:
    """A parsed TFLite tensor."""

    def __init__(self, name, shape, dtype, data, scale, zero_point, qdim):
        self.name, self.shape, self.dtype, self.data = name, shape, dtype, data
        self.scale, self.zero_point, self.qdim = scale, zero_point, qdim


def _parse(blob: bytes):
    """Subgraph 0's (tensors, operators, inputs, outputs) (see `_parse_all`)."""
    return _parse_all(blob)[0]


def _parse_all(blob: bytes):
    """[(tensors, operators, inputs, outputs)] per subgraph, all as plain Python objects; any decoding error ->
    ValueError."""
    import tflite

    if len(blob) < 8 or blob[4:8] != b"TFL3":
        raise ValueError("not a TFLite model (no 'TFL3' file identifier at bytes 4..8)")
    try:
        model = tflite.Model.GetRootAsModel(blob, 0)
        if model.SubgraphsLength() == 0:
            raise ValueError("the model has no subgraph")
        codes = []
        for i in range(model.OperatorCodesLength()):
            oc = model.OperatorCodes(i)
            codes.append(max(int(oc.BuiltinCode()), int(oc.DeprecatedBuiltinCode())))
        subgraphs = [_parse_subgraph(blob, model, model.Subgraphs(k), codes) for k in range(model.SubgraphsLength())]
    except UnsupportedModelError:
        raise
    except ValueError as e:
        raise ValueError(f"not a readable TFLite model ({e})") from None
    except Exception as e:  # flatbuffers reads lazily: a corrupt file fails here with struct/index errors
        raise ValueError(f"not a readable TFLite model ({type(e).__name__}: {e})") from None
    return subgraphs


def _parse_subgraph(blob, model, sg, codes):
    tensors = []
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        data = None
        if t.Buffer() > 0:
            buf = model.Buffers(t.Buffer())
            if buf.Offset() > 1:  # large models keep data after the flatbuffer
                raw = blob[buf.Offset():buf.Offset() + buf.Size()]
            else:
                raw = buf.DataAsNumpy().tobytes() if buf.DataLength() else b""
            if raw:
                data = raw
        q = t.Quantization()
        scale = zp = None
        qdim = 0
        if q is not None and q.ScaleLength():
            scale = q.ScaleAsNumpy().astype(np.float32)
            zp = q.ZeroPointAsNumpy().astype(np.int64) if q.ZeroPointLength() else np.zeros(scale.size, np.int64)
            qdim = int(q.QuantizedDimension())
        name = t.Name().decode() if t.Name() else f"tensor_{i}"
        shape = tuple(int(s) for s in t.ShapeAsNumpy()) if t.ShapeLength() else ()
        tensors.append(_T(name, shape, int(t.Type()), data, scale, zp, qdim))
    ops = []
    for i in range(sg.OperatorsLength()):
        o = sg.Operators(i)
        if not 0 <= o.OpcodeIndex() < len(codes):
            raise ValueError(f"op {i}: opcode index {o.OpcodeIndex()} is out of range ({len(codes)} opcodes)")
        ops.append((codes[o.OpcodeIndex()], [int(v) for v in o.InputsAsNumpy()] if o.InputsLength() else [],
                    [int(v) for v in o.OutputsAsNumpy()] if o.OutputsLength() else [],
                    o.BuiltinOptionsType(), o.BuiltinOptions()))
    ins = [int(v) for v in sg.InputsAsNumpy()] if sg.InputsLength() else []
    outs = [int(v) for v in sg.OutputsAsNumpy()] if sg.OutputsLength() else []
    return tensors, ops, ins, outs


def _options(kind, table):
    """The op's builtin options as an object of class `kind`, or None."""
    if table is None:
        return None
    o = kind()
    o.Init(table.Bytes, table.Pos)
    return o


class _Importer:
    def __init__(self, tensors):
        self.t = tensors
        names, seen = [], set()
        for i, t in enumerate(tensors):
            n = t.name if t.name not in seen else f"{t.name}:{i}"
            seen.add(n)
            names.append(n)
        self.names = names
        self.nodes: list[Node] = []
        self.consts: dict[str, np.ndarray] = {}
        self.layouts: dict[int, dict[str, str]] = {}  # tensor index -> {"NHWC" | "NCHW": graph tensor name}
        self._n = 0

    # ---- helpers ----
    def fresh(self, kind: str) -> str:
        self._n += 1
        return f"_{kind}_{self._n}"

    def const(self, kind: str, value: np.ndarray) -> str:
        name = self.fresh(kind)
        self.consts[name] = value
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], **attrs) -> None:
        self.nodes.append(Node(op, f"{op.split(':')[-1]}_{len(self.nodes)}", inputs, outputs, attrs))

    def array(self, i: int) -> np.ndarray:
        t = self.t[i]
        return np.frombuffer(t.data, dtype=_DTYPES[t.dtype]).reshape(t.shape).copy()

    def qparams(self, i: int, per_axis: bool = False) -> tuple[str, str]:
        """Names of constants holding tensor i's scale and zero point (zero point in the tensor's type)."""
        t = self.t[i]
        dt = _DTYPES[t.dtype]
        if per_axis and t.scale.size > 1:
            zp = np.broadcast_to(t.zero_point, t.scale.shape).astype(dt)
            return self.const("scale", t.scale.copy()), self.const("zero_point", zp)
        return self.const("scale", np.float32(t.scale[0])), self.const("zero_point", np.array(t.zero_point[0], dt))

    def get(self, i: int, layout: str = "NHWC") -> str:
        """Graph name of tensor i in `layout` (4-D tensors only may be NCHW), adding a Transpose if needed."""
        have = self.layouts.setdefault(i, {})
        if self.t[i].data is not None:  # a constant: stored in each layout asked for
            if layout == "NCHW" and len(self.t[i].shape) == 4:
                if "NCHW" not in have:
                    have["NCHW"] = self.const(f"{self.names[i]}_nchw", np.ascontiguousarray(
                        self.array(i).transpose(0, 3, 1, 2)))
                return have["NCHW"]
            if self.names[i] not in self.consts:
                self.consts[self.names[i]] = self.array(i)
            return self.names[i]
        if layout in have:
            return have[layout]
        if len(self.t[i].shape) != 4:
            layout = "NHWC"
            if layout in have:
                return have[layout]
        src, = have.values()
        perm = [0, 3, 1, 2] if layout == "NCHW" else [0, 2, 3, 1]
        name = self.names[i] if layout == "NHWC" else self.fresh(f"{self.names[i]}_nchw")
        self.node("Transpose", [src], [name], perm=perm)
        have[layout] = name
        return name

    def put(self, i: int, layout: str = "NHWC") -> str:
        """Name under which an op writes tensor i in `layout` (the TFLite name for NHWC)."""
        name = self.names[i] if layout == "NHWC" else self.fresh(f"{self.names[i]}_nchw")
        self.layouts.setdefault(i, {})[layout] = name
        return name

    def nchw_ready(self, i: int) -> bool:
        return "NCHW" in self.layouts.get(i, {})

    def layout_of(self, ins: list[int], outs: list[int]) -> str:
        """NCHW for an op on 4-D tensors whose (non-constant) input already exists as NCHW, else NHWC."""
        four = all(len(self.t[i].shape) == 4 for i in [*ins, *outs])
        return "NCHW" if four and any(self.nchw_ready(i) for i in ins if self.t[i].data is None) else "NHWC"

    def shape(self, i: int, layout: str) -> tuple[int, ...]:
        s = self.t[i].shape
        return (s[0], s[3], s[1], s[2]) if layout == "NCHW" and len(s) == 4 else s

    def activation(self, code: int, i: int):
        """vkinfer's `activation` attribute for TFLite fused activation `code` on output tensor i: a ("clip", lo,
        hi) whose quantized bounds are TFLite's (CalculateActivationRangeQuantized: zero point +
        round-half-away(value / scale), limited to the type's range), or None when the clamp is the type's range."""
        t = self.t[i]
        rng = _act_range(code, t.scale[0], int(t.zero_point[0]), _DTYPES[t.dtype])
        if rng is None:
            return None
        lo, hi = rng
        s, zp = np.float64(t.scale[0]), int(t.zero_point[0])
        # (q - zp) * scale as a real bound quantizes back to q exactly (|q - zp| <= 255: float32 error << 0.5).
        return ("clip", float((lo - zp) * s), float((hi - zp) * s))

    def clamp(self, src: str, i: int, layout: str, act) -> None:
        """Write tensor i (in `layout`) as `src` clamped by fused activation `act` (see `activation`): an identity
        1x1 vkinfer:QLinearConvClamp (weight 1, weight scale 1, input scale = output scale: multiplier exactly
        1.0, so only the narrowed clamp acts), depthwise on an NCHW tensor, else on a (1, 1, rows, last dim)
        view of it."""
        t = self.t[i]
        shape = self.shape(i, layout)
        dt = _DTYPES[t.dtype]
        out = self.put(i, layout)
        if len(shape) == 4 and layout == "NCHW":
            x4, y4, c = src, out, shape[1]
        else:
            rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
            x4, y4, c = self.fresh("clamp_in"), self.fresh("clamp_out"), 1
            self.node("Reshape", [src, self.const("shape", np.array([1, 1, rows, shape[-1] if shape else 1],
                                                                    np.int64))], [x4])
        s, z = self.qparams(i)
        self.node("vkinfer:QLinearConvClamp", [x4, s, z, self.const("weights", np.ones((c, 1, 1, 1), dt)),
                                               self.const("scale", np.float32(1.0)),
                                               self.const("zero_point", np.array(0, dt)), s, z],
                  [y4], strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], group=c, activation=act)
        if y4 != out:
            self.node("Reshape", [y4, self.const("shape", np.array(shape, np.int64))], [out])

    def write(self, i: int, layout: str, act) -> str:
        """Name an op writes tensor i under; with a fused activation, a fresh name that `finish` clamps into i."""
        return self.put(i, layout) if act is None else self.fresh(f"{self.names[i]}_unclamped")

    def expect_hw(self, x: int, y: int, k: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int],
                  same: bool, channels: int) -> None:
        """ValueError naming output tensor y unless its declared shape (N, H, W, `channels`) is what TFLite
        computes from input x."""
        want = []
        for axis, size, kk, ss, dd in zip("HW", self.t[x].shape[1:3], k, stride, dilation, strict=True):
            eff = (kk - 1) * dd + 1
            if same and max(_same(size, kk, ss, dd)) > size + 8:
                # Legal arithmetic, but only padding: a window this large is a corrupt filter size or dilation.
                raise ValueError(f"a {eff}-wide window along {axis} (filter {kk}, dilation {dd}) over input "
                                 f"{self.t[x].name!r} of size {size} pads it by {max(_same(size, kk, ss, dd))}")
            want.append(-(-size // ss) if same else -(-(size - eff + 1) // ss))
        got = self.t[y].shape
        want = [self.t[x].shape[0], *want, int(channels)]
        if list(got) != want or min(want) < 1:
            raise ValueError(f"output tensor {self.t[y].name!r} has shape {list(got)}, but a {k[0]}x{k[1]} window "
                             f"at strides {list(stride)} over input {self.t[x].name!r} of shape "
                             f"{list(self.t[x].shape)} gives {want}")

    # ---- ops ----
    def conv(self, ins, outs, opts, depthwise: bool) -> None:
        x, w, b = ins[0], ins[1], ins[2] if len(ins) > 2 and ins[2] >= 0 else -1
        wt = self.array(w)
        _, h, wd, _ = self.t[x].shape
        if depthwise:
            weights = np.ascontiguousarray(wt[0].transpose(2, 0, 1)[:, None])  # 1HWC -> C1HW
            group = self.t[x].shape[3]
        else:
            weights = np.ascontiguousarray(wt.transpose(0, 3, 1, 2))  # OHWI -> OIHW
            group = 1
        kh, kw = weights.shape[2:]
        sh, sw = opts.StrideH(), opts.StrideW()
        dh, dw = opts.DilationHFactor(), opts.DilationWFactor()
        self.expect_hw(x, outs[0], (kh, kw), (sh, sw), (dh, dw), opts.Padding() == 0, weights.shape[0])
        if opts.Padding() == 0:  # SAME
            pt, pb = _same(h, kh, sh, dh)
            pl, pr = _same(wd, kw, sw, dw)
        else:
            pt = pb = pl = pr = 0
        xs, xz = self.qparams(x)
        ws, wz = self.qparams(w, per_axis=True)
        ys, yz = self.qparams(outs[0])
        inputs = [self.get(x, "NCHW"), xs, xz, self.const("weights", weights), ws, wz, ys, yz]
        if b >= 0:
            inputs.append(self.const("bias", self.array(b).astype(np.int32)))
        act = self.activation(opts.FusedActivationFunction(), outs[0])
        attrs = dict(strides=[sh, sw], pads=[pt, pl, pb, pr], dilations=[dh, dw], group=group)
        if act is not None:
            attrs["activation"] = act
        self.node("vkinfer:QLinearConvClamp" if act is not None else "QLinearConv", inputs,
                  [self.put(outs[0], "NCHW")], **attrs)

    def fully_connected(self, ins, outs, opts) -> None:
        x, w, b = ins[0], ins[1], ins[2] if len(ins) > 2 and ins[2] >= 0 else -1
        wt = self.array(w)
        k = wt.shape[1]
        a = self.get(x)
        if len(self.t[x].shape) != 2 or self.t[x].shape[1] != k:
            flat = self.fresh("fc_input")
            self.node("Reshape", [a, self.const("shape", np.array([-1, k], np.int64))], [flat])
            a = flat
        xs, xz = self.qparams(x)
        ws, wz = self.qparams(w, per_axis=True)
        ys, yz = self.qparams(outs[0])
        bias = self.const("bias", self.array(b).astype(np.int32)) if b >= 0 else ""
        act = self.activation(opts.FusedActivationFunction(), outs[0]) if opts is not None else None
        out_shape = self.t[outs[0]].shape
        y = self.put(outs[0]) if len(out_shape) == 2 else self.fresh("fc_output")
        attrs = dict(transB=1, alpha=1.0)
        if act is not None:
            attrs["activation"] = act
        self.node("vkinfer:QGemmClamp" if act is not None else "com.microsoft:QGemm",
                  [a, xs, xz, self.const("weights", wt), ws, wz, bias, ys, yz], [y], **attrs)
        if len(out_shape) != 2:
            self.node("Reshape", [y, self.const("shape", np.array(out_shape, np.int64))], [self.put(outs[0])])

    def binary(self, op: str, ins, outs, opts) -> None:
        """ADD / MUL -> com.microsoft:QLinearAdd / QLinearMul (numpy broadcasting, in NCHW when both inputs are
        4-D and one exists as NCHW), then the fused activation's clamp. An ADD that XNNPACK runs (both scale
        ratios in [2**-10, 2**8)) becomes vkinfer:TFLiteAdd instead, its fixed-point arithmetic, the fused
        activation's bounds as attributes."""
        a, b = ins
        layout = self.layout_of([a, b], outs)
        code = opts.FusedActivationFunction() if opts is not None else 0
        inputs = []
        for i in (a, b):
            inputs += [self.get(i, layout), *self.qparams(i)]
        t = self.t[outs[0]]
        if op.endswith("QLinearAdd") and xnnpack_adds(self.t[a].scale[0], self.t[b].scale[0], t.scale[0]):
            dt = _DTYPES[t.dtype]
            lo, hi = _act_range(code, t.scale[0], int(t.zero_point[0]), dt) or _QRANGE[np.dtype(dt)]
            self.node("vkinfer:TFLiteAdd", inputs + list(self.qparams(outs[0])), [self.put(outs[0], layout)],
                      activation_min=int(lo), activation_max=int(hi))
            return
        act = self.activation(code, outs[0])
        y = self.write(outs[0], layout, act)
        self.node(op, inputs + list(self.qparams(outs[0])), [y])
        if act is not None:
            self.clamp(y, outs[0], layout, act)

    def mean(self, ins, outs, keep_dims: bool) -> None:
        x = ins[0]
        layout = "NCHW" if self.nchw_ready(x) else "NHWC"
        y_shape = self.t[outs[0]].shape
        y = self.put(outs[0], layout) if keep_dims else self.fresh("mean")
        self.node("com.microsoft:QLinearGlobalAveragePool", [self.get(x, layout), *self.qparams(x),
                                                             *self.qparams(outs[0])], [y],
                  channels_last=int(layout == "NHWC"))
        if not keep_dims:
            self.node("Reshape", [y, self.const("shape", np.array(y_shape, np.int64))], [self.put(outs[0])])

    def pool(self, ins, outs, opts, kind: str) -> None:
        """AVERAGE_POOL_2D -> vkinfer:TFLiteAveragePool (TFLite's integer average, the fused activation's bounds
        as attributes); MAX_POOL_2D -> MaxPool (padding never wins), then the fused activation's clamp;
        SAME/VALID -> explicit pads. Both on NCHW."""
        x = ins[0]
        _, h, w, _ = self.t[x].shape
        kh, kw, sh, sw = opts.FilterHeight(), opts.FilterWidth(), opts.StrideH(), opts.StrideW()
        self.expect_hw(x, outs[0], (kh, kw), (sh, sw), (1, 1), opts.Padding() == 0, self.t[x].shape[3])
        if opts.Padding() == 0:
            pt, pb = _same(h, kh, sh, 1)
            pl, pr = _same(w, kw, sw, 1)
        else:
            pt = pb = pl = pr = 0
        attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=[pt, pl, pb, pr])
        if kind == "average":
            t = self.t[outs[0]]
            dt = _DTYPES[t.dtype]
            lo, hi = (_act_range(opts.FusedActivationFunction(), t.scale[0], int(t.zero_point[0]), dt)
                      or _QRANGE[np.dtype(dt)])
            self.node("vkinfer:TFLiteAveragePool", [self.get(x, "NCHW")], [self.put(outs[0], "NCHW")],
                      activation_min=int(lo), activation_max=int(hi), **attrs)
            return
        act = self.activation(opts.FusedActivationFunction(), outs[0])
        y = self.write(outs[0], "NCHW", act)
        self.node("MaxPool", [self.get(x, "NCHW")], [y], **attrs)
        if act is not None:
            self.clamp(y, outs[0], "NCHW", act)

    def concatenation(self, ins, outs, opts) -> None:
        """Concat when every input has the output's scale and zero point, else com.microsoft:QLinearConcat; the
        NHWC axis becomes the NCHW one when the inputs are 4-D and one exists as NCHW. A fused activation is
        ignored, as TFLite's 8-bit kernels ignore it (ai-edge-litert 2.3: a RELU leaves values below the zero
        point)."""
        layout = self.layout_of(ins, outs)
        rank = len(self.t[outs[0]].shape)
        axis = opts.Axis() % rank if opts is not None else 0
        if layout == "NCHW":
            axis = (0, 2, 3, 1)[axis]
        y = self.put(outs[0], layout)
        if all(_same_q(self.t[i], self.t[outs[0]]) for i in ins):
            self.node("Concat", [self.get(i, layout) for i in ins], [y], axis=axis)
            return
        inputs = list(self.qparams(outs[0]))
        for i in ins:
            inputs += [self.get(i, layout), *self.qparams(i)]
        self.node("com.microsoft:QLinearConcat", inputs, [y], axis=axis)

    def pad(self, ins, outs) -> None:
        """PAD -> Pad (constant mode, value = the zero point: a real 0), pads permuted for NCHW."""
        x = ins[0]
        layout = self.layout_of([x], outs)
        p = self.array(ins[1]).astype(np.int64).reshape(-1, 2)
        want = [int(d + a + b) for d, (a, b) in zip(self.t[x].shape, p, strict=True)]
        if list(self.t[outs[0]].shape) != want:
            raise ValueError(f"output tensor {self.t[outs[0]].name!r} has shape {list(self.t[outs[0]].shape)}, but "
                             f"padding {self.t[x].name!r} of shape {list(self.t[x].shape)} by {p.tolist()} gives "
                             f"{want}")
        if layout == "NCHW":
            p = p[[0, 3, 1, 2]]
        t = self.t[x]
        value = self.const("pad_value", np.array(t.zero_point[0], _DTYPES[t.dtype]))
        self.node("Pad", [self.get(x, layout), self.const("pads", np.concatenate([p[:, 0], p[:, 1]])), value],
                  [self.put(outs[0], layout)], mode="constant")

    def logistic(self, ins, outs) -> None:
        x = ins[0]
        layout = self.layout_of([x], outs)
        self.node("com.microsoft:QLinearSigmoid", [self.get(x, layout), *self.qparams(x), *self.qparams(outs[0])],
                  [self.put(outs[0], layout)])

    def reshape(self, ins, outs) -> None:
        shape = np.array(self.t[outs[0]].shape, np.int64)
        self.node("Reshape", [self.get(ins[0]), self.const("shape", shape)], [self.put(outs[0])])

    def dequantize(self, x: int, name: str) -> None:
        self.node("DequantizeLinear", [self.get(x), *self.qparams(x)], [name], axis=self.t[x].qdim)

    def quantize(self, ins, outs) -> None:
        x = ins[0]
        if self.t[x].dtype == 0:  # float32 -> 8 bits: TFLite multiplies by 1 / scale (ONNX divides)
            self.node("vkinfer:TFLiteQuantize", [self.get(x), *self.qparams(outs[0])], [self.put(outs[0])])
            return
        tx, ty = self.t[x], self.t[outs[0]]
        if xnnpack_requantizes(tx.scale[0], ty.scale[0], _DTYPES[tx.dtype], _DTYPES[ty.dtype]):
            self.node("vkinfer:TFLiteQuantize", [self.get(x), *self.qparams(x), *self.qparams(outs[0])],
                      [self.put(outs[0])])
            return
        src = self.fresh("float")  # other 8-bit requantizations through float (TFLite's builtin kernel: <= 1 step)
        self.dequantize(x, src)
        self.node("QuantizeLinear", [src, *self.qparams(outs[0])], [self.put(outs[0])])

    def softmax(self, ins, outs, opts) -> None:
        """SOFTMAX -> vkinfer:TFLiteSoftmax (TFLite's float32 exp table, over the last axis)."""
        x = ins[0]
        beta = opts.Beta() if opts is not None else 1.0
        self.node("vkinfer:TFLiteSoftmax", [self.get(x), self.qparams(x)[0], *self.qparams(outs[0])],
                  [self.put(outs[0])], beta=float(beta))


def _same(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def _round_away(v: float) -> int:
    return int(np.sign(v) * np.floor(abs(v) + 0.5))


def _act_range(code: int, scale, zp: int, dtype) -> tuple[int, int] | None:
    """TFLite's quantized clamp of fused activation `code` (CalculateActivationRangeQuantized: zero point +
    round-half-away(float32(value / scale)), within the type's range); None when it is the whole range."""
    if _ACTIVATIONS[code] is None:
        return None
    qmin, qmax = _QRANGE[np.dtype(dtype)]
    lo, hi = _ACTIVATIONS[code]

    def q(v: float) -> int:
        return zp + _round_away(float(np.float32(v) / np.float32(scale)))

    lo, hi = max(qmin, q(lo)), qmax if hi is None else min(qmax, q(hi))
    return None if (lo, hi) == (qmin, qmax) else (lo, hi)


def _same_q(a: _T, b: _T) -> bool:
    return (a.scale is not None and b.scale is not None and a.scale.size == b.scale.size == 1
            and np.float32(a.scale[0]) == np.float32(b.scale[0]) and int(a.zero_point[0]) == int(b.zero_point[0]))


def _check(code, ins, outs, opts, tensors) -> str | None:
    """Why op `index` cannot be imported, or None."""
    import tflite

    def qt(i):
        return i >= 0 and _DTYPES.get(tensors[i].dtype) in (np.uint8, np.int8) and tensors[i].scale is not None

    B = tflite.BuiltinOperator
    if code not in _SUPPORTED:
        return "op not supported"
    if code in (B.CALL_ONCE, B.VAR_HANDLE, B.READ_VARIABLE, B.ASSIGN_VARIABLE):
        return _check_variable_op(code, ins, outs, tensors)
    if code in _MORE:
        return _check_more(code, ins, outs, opts, tensors)
    if code == B.QUANTIZE:
        if tensors[ins[0]].dtype not in (0, 3, 9) or not qt(outs[0]):
            return "only float32/int8/uint8 -> int8/uint8 is supported"
        if tensors[outs[0]].scale.size > 1:
            return "per-axis QUANTIZE output is not supported"
        return None
    if code == B.DEQUANTIZE:
        return None if qt(ins[0]) else "only int8/uint8 inputs are supported (not float16/int16)"
    if code == B.RESHAPE:
        return None if all(d >= 0 for d in tensors[outs[0]].shape) else "output shape is not static"
    unary = (B.MEAN, B.RESHAPE, B.SOFTMAX, B.AVERAGE_POOL_2D, B.MAX_POOL_2D, B.LOGISTIC, B.PAD)
    data_ins = [i for i in (ins if code == B.CONCATENATION else ins[:1 if code in unary else 2]) if i >= 0]
    if not all(qt(i) for i in data_ins + outs[:1]):
        return "only int8/uint8 quantized tensors are supported (float and int16 models are not)"
    if any(tensors[i].scale.size > 1 for i in [*ins[:1], *outs[:1]]):
        return "per-axis quantized activations are not supported"
    if code in (B.ADD, B.MUL, B.CONCATENATION, B.MAX_POOL_2D, B.AVERAGE_POOL_2D, B.PAD, B.LOGISTIC) and any(
            tensors[i].dtype != tensors[outs[0]].dtype for i in data_ins):
        return "inputs and output must have the same type"
    act = getattr(opts, "FusedActivationFunction", None)
    if act is not None and act() not in _ACTIVATIONS:
        return f"fused activation {act()} is not supported (only NONE, RELU, RELU_N1_TO_1, RELU6)"
    if code in (B.CONV_2D, B.DEPTHWISE_CONV_2D):
        w = tensors[ins[1]]
        if w.data is None:
            return "weights are not constant"
        if len(ins) > 2 and ins[2] >= 0 and (tensors[ins[2]].data is None or tensors[ins[2]].dtype != 2):
            return "bias must be a constant int32 tensor"
        if len(tensors[ins[0]].shape) != 4:
            return "input is not 4-D"
        if w.scale.size > 1 and w.qdim != (0 if code == B.CONV_2D else 3):
            return f"weights are quantized along axis {w.qdim}"
        if code == B.CONV_2D and w.shape[3] != tensors[ins[0]].shape[3]:
            return "grouped CONV_2D is not supported"
        if code == B.DEPTHWISE_CONV_2D and w.shape[3] % tensors[ins[0]].shape[3]:
            return (f"{w.shape[3]} output channels are not a multiple of the {tensors[ins[0]].shape[3]} input "
                    "channels")
    if code == B.FULLY_CONNECTED:
        w = tensors[ins[1]]
        if w.data is None or len(w.shape) != 2:
            return "weights must be a constant 2-D tensor"
        if opts is not None and opts.WeightsFormat() != 0:
            return "shuffled weights are not supported"
        if len(ins) > 2 and ins[2] >= 0 and (tensors[ins[2]].data is None or tensors[ins[2]].dtype != 2):
            return "bias must be a constant int32 tensor"
    if code in (B.ADD, B.MUL, B.CONCATENATION):
        if any(tensors[i].scale.size > 1 for i in data_ins):
            return "inputs must be per-tensor int8/uint8"
        if code != B.CONCATENATION and len(tensors[ins[0]].shape) != len(tensors[ins[1]].shape) and any(
                len(tensors[i].shape) > 4 for i in ins):
            return "broadcasting over more than 4 dimensions is not supported"
    if code in (B.MAX_POOL_2D, B.AVERAGE_POOL_2D):
        if len(tensors[ins[0]].shape) != 4:
            return "input is not 4-D"
        if not _same_q(tensors[ins[0]], tensors[outs[0]]):
            return "input and output scale/zero point differ (TFLite's 8-bit pooling does not rescale)"
    if code == B.PAD:
        p = tensors[ins[1]]
        if p.data is None or p.dtype not in (2, 4) or p.shape != (len(tensors[ins[0]].shape), 2):
            return "paddings must be a constant int32/int64 tensor of shape (rank, 2)"
        if np.any(np.frombuffer(p.data, _DTYPES[p.dtype]) < 0):
            return "negative paddings"
        if not _same_q(tensors[ins[0]], tensors[outs[0]]):
            return "input and output scale/zero point differ"
    if code == B.MEAN:
        axes = tensors[ins[1]]
        if axes.data is None:
            return "axes are not constant"
        ax = sorted(int(a) % 4 for a in np.frombuffer(axes.data, _DTYPES[axes.dtype]))
        if len(tensors[ins[0]].shape) != 4 or ax != [1, 2]:
            return "only MEAN over H,W of a 4-D tensor is supported"
    return None


def _check_variable_op(code, ins, outs, tensors) -> str | None:
    """Why a resource-variable op cannot be imported (its tensors' types), or None."""
    import tflite

    B, RESOURCE = tflite.BuiltinOperator, tflite.TensorType.RESOURCE
    if code == B.CALL_ONCE:
        return "CALL_ONCE takes no inputs and writes no outputs" if ins or outs else None
    if code == B.VAR_HANDLE:
        return None if len(outs) == 1 and tensors[outs[0]].dtype == RESOURCE else (
            "VAR_HANDLE must write one resource tensor")
    if tensors[ins[0]].dtype != RESOURCE:
        return f"input {tensors[ins[0]].name!r} is not a resource tensor"
    value = ins[1] if code == B.ASSIGN_VARIABLE else (outs[0] if len(outs) == 1 else -1)
    if value < 0 or tensors[value].dtype not in _DTYPES:
        return "the value must be one tensor of a supported type (float32, int32, int64, int8, uint8)"
    return None


_MAX_ELEMENTS = 2 ** 31 - 1  # the native kernels index with 32-bit integers


def _validate(tensors, ops, ins, outs, names, main: bool = True) -> None:
    """ValueError naming the op and field when the flatbuffer's structure is inconsistent: tensor indices out of
    range (a negative one other than -1, "no tensor", is never read from the end), an op without the inputs or
    outputs its kind needs, builtin options of another op's type, non-positive strides, filters or dilations."""
    import tflite

    B = tflite.BuiltinOperator
    n = len(tensors)
    for what, idx in (("input", ins), ("output", outs)):
        for i in idx:
            if not 0 <= i < n:
                raise ValueError(f"subgraph {what} {i} is not a tensor index (the model has {n} tensors)")
    if not outs and main:
        raise ValueError("the subgraph has no outputs")
    for t in tensors:
        if int(np.prod([max(d, 1) for d in t.shape], dtype=np.float64)) > _MAX_ELEMENTS:
            raise ValueError(f"tensor {t.name!r} has shape {list(t.shape)}: over {_MAX_ELEMENTS} elements")
    options_type = {v: k for k, v in vars(tflite.BuiltinOptions).items() if not k.startswith("_")}
    for k, (code, op_in, op_out, otype, table) in enumerate(ops):
        where = f"op {k} ({names.get(code, f'builtin {code}')})"
        for i in op_in:
            if not -1 <= i < n:
                raise ValueError(f"{where}: input tensor index {i} is out of range (the model has {n} tensors)")
        if not op_out and code not in _NO_OUTPUTS:
            raise ValueError(f"{where} has no outputs")
        for i in op_out:
            if not 0 <= i < n:
                raise ValueError(f"{where}: output tensor index {i} is out of range (the model has {n} tensors)")
        if code not in _SUPPORTED:
            continue  # reported as unsupported
        need = _MIN_INPUTS.get(code, 1)
        if len(op_in) < need or any(i < 0 for i in op_in[:need]):
            raise ValueError(f"{where} needs {need} input tensors, has {op_in}")
        shapes = [tensors[i].shape for i in op_in[:need]]
        if not op_out:
            continue  # ASSIGN_VARIABLE, CALL_ONCE
        out_shape = tensors[op_out[0]].shape
        want = None
        if code in (B.SOFTMAX, B.LOGISTIC, B.QUANTIZE, B.DEQUANTIZE):
            want = shapes[0]
        elif code in (B.ADD, B.MUL):
            try:
                want = tuple(np.broadcast_shapes(*shapes))
            except ValueError:
                raise ValueError(f"{where}: input shapes {[list(s) for s in shapes]} do not broadcast") from None
        if want is not None and tuple(out_shape) != tuple(want):
            raise ValueError(f"{where}: output tensor {tensors[op_out[0]].name!r} has shape {list(out_shape)}, "
                             f"the inputs give {list(want)}")
        kind = _SUPPORTED[code]
        if kind is None:
            continue
        expected = getattr(tflite.BuiltinOptions, kind.__name__, None)
        if table is not None and otype != expected:
            raise ValueError(f"{where}: builtin options of type {options_type.get(otype, otype)}, expected "
                             f"{kind.__name__}")
        if code in (B.CALL_ONCE, B.VAR_HANDLE) and table is None:
            raise ValueError(f"{where} has no {kind.__name__}")
        if code in (B.CONV_2D, B.DEPTHWISE_CONV_2D, B.AVERAGE_POOL_2D, B.MAX_POOL_2D):
            if table is None:
                raise ValueError(f"{where} has no {kind.__name__}")
            o = _options(kind, table)
            fields = ["StrideH", "StrideW"] + (["DilationHFactor", "DilationWFactor"] if code in (
                B.CONV_2D, B.DEPTHWISE_CONV_2D) else ["FilterHeight", "FilterWidth"])
            for f in fields:
                if getattr(o, f)() < 1:
                    raise ValueError(f"{where}: {kind.__name__}.{f} is {getattr(o, f)()}, must be positive")
            if o.Padding() not in (0, 1):
                raise ValueError(f"{where}: {kind.__name__}.Padding is {o.Padding()} (SAME=0 or VALID=1)")


def _min_inputs() -> dict:
    import tflite

    B = tflite.BuiltinOperator
    return {B.CONV_2D: 2, B.DEPTHWISE_CONV_2D: 2, B.FULLY_CONNECTED: 2, B.ADD: 2, B.MUL: 2, B.MEAN: 2, B.PAD: 2,
            B.CALL_ONCE: 0, B.VAR_HANDLE: 0, B.READ_VARIABLE: 1, B.ASSIGN_VARIABLE: 2, B.STRIDED_SLICE: 4,
            B.SPLIT: 2, B.SPLIT_V: 3, B.SUB: 2, B.MAXIMUM: 2, B.MINIMUM: 2, B.PRELU: 2, B.GATHER: 2,
            B.RESIZE_NEAREST_NEIGHBOR: 2, B.RESIZE_BILINEAR: 2}


def _supported_codes() -> dict:
    import tflite

    B, t = tflite.BuiltinOperator, tflite
    return {B.CONV_2D: t.Conv2DOptions, B.DEPTHWISE_CONV_2D: t.DepthwiseConv2DOptions,
            B.FULLY_CONNECTED: t.FullyConnectedOptions, B.ADD: t.AddOptions, B.MUL: t.MulOptions,
            B.MEAN: t.ReducerOptions, B.AVERAGE_POOL_2D: t.Pool2DOptions, B.MAX_POOL_2D: t.Pool2DOptions,
            B.RESHAPE: None, B.CONCATENATION: t.ConcatenationOptions, B.PAD: None, B.SOFTMAX: t.SoftmaxOptions,
            B.LOGISTIC: None, B.QUANTIZE: None, B.DEQUANTIZE: None,
            B.CALL_ONCE: t.CallOnceOptions, B.VAR_HANDLE: t.VarHandleOptions, B.READ_VARIABLE: None,
            B.ASSIGN_VARIABLE: None, **_more_codes()}


def _needs() -> dict:
    """vkinfer ops each TFLite op may produce; all must be in the session's op table."""
    import tflite

    B = tflite.BuiltinOperator
    clamp = ("vkinfer:QLinearConvClamp", "Reshape")
    return {B.CONV_2D: ("QLinearConv", "vkinfer:QLinearConvClamp"), B.DEPTHWISE_CONV_2D: ("QLinearConv",
            "vkinfer:QLinearConvClamp"), B.FULLY_CONNECTED: ("com.microsoft:QGemm", "vkinfer:QGemmClamp", "Reshape"),
            B.ADD: ("com.microsoft:QLinearAdd", *clamp), B.MUL: ("com.microsoft:QLinearMul", *clamp),
            B.MEAN: ("com.microsoft:QLinearGlobalAveragePool", "Reshape"),
            B.AVERAGE_POOL_2D: ("vkinfer:TFLiteAveragePool",), B.MAX_POOL_2D: ("MaxPool", *clamp),
            B.RESHAPE: ("Reshape",), B.CONCATENATION: ("Concat", "com.microsoft:QLinearConcat"), B.PAD: ("Pad",),
            B.SOFTMAX: ("vkinfer:TFLiteSoftmax",), B.LOGISTIC: ("com.microsoft:QLinearSigmoid",),
            B.QUANTIZE: ("vkinfer:TFLiteQuantize", "DequantizeLinear", "QuantizeLinear"),
            B.DEQUANTIZE: ("DequantizeLinear",), **_more_needs()}


_SUPPORTED: dict = {}
_NEEDS: dict = {}
_MIN_INPUTS: dict = {}


def _build(imp, B, code, op_in, op_out, opts) -> None:
    """Adds the nodes of one TFLite op (already checked) to `imp`."""
    if code in (B.CONV_2D, B.DEPTHWISE_CONV_2D):
        imp.conv(op_in, op_out, opts, depthwise=code == B.DEPTHWISE_CONV_2D)
    elif code == B.FULLY_CONNECTED:
        imp.fully_connected(op_in, op_out, opts)
    elif code in (B.ADD, B.MUL):
        imp.binary("com.microsoft:QLinearAdd" if code == B.ADD else "com.microsoft:QLinearMul", op_in, op_out,
                   opts)
    elif code == B.MEAN:
        imp.mean(op_in, op_out, bool(opts.KeepDims()) if opts is not None else False)
    elif code in (B.AVERAGE_POOL_2D, B.MAX_POOL_2D):
        imp.pool(op_in, op_out, opts, "average" if code == B.AVERAGE_POOL_2D else "max")
    elif code == B.RESHAPE:
        imp.reshape(op_in, op_out)
    elif code == B.CONCATENATION:
        imp.concatenation(op_in, op_out, opts)
    elif code == B.PAD:
        imp.pad(op_in, op_out)
    elif code == B.LOGISTIC:
        imp.logistic(op_in, op_out)
    elif code == B.SOFTMAX:
        imp.softmax(op_in, op_out, opts)
    elif code == B.QUANTIZE:
        imp.quantize(op_in, op_out)
    elif code in _MORE:
        _build_more(imp, B, code, op_in, op_out, opts)
    else:
        imp.dequantize(op_in[0], imp.put(op_out[0]))


_NO_OUTPUTS: set = set()  # ops that write no tensor (ASSIGN_VARIABLE, CALL_ONCE)
_CONTROL = ("WHILE", "IF")


@dataclass
class StateVariable:
    """A TFLite resource variable the main subgraph reads before assigning it: its value is carried from one
    `run` to the next by the session (vkinfer.InferenceSession keeps it per session; `reset_state` restores
    `initial`, the value the CALL_ONCE init subgraph assigns).

    name: "container/shared_name"; input: the graph input carrying the value into a run; output: the graph
    output carrying the value out (None when the run leaves it unchanged or assigns the constant `assigned`)."""

    name: str
    input: str
    output: str | None
    initial: np.ndarray
    assigned: np.ndarray | None = None


class _Model:
    """What importing the subgraphs of one model shares: the parsed subgraphs, the session's op table, the
    values the init subgraphs assigned to each variable key, and the subgraphs already called once."""

    def __init__(self, subgraphs, names, supported):
        self.subgraphs, self.names, self.supported = subgraphs, names, supported
        self.initial: dict[tuple[str, str], np.ndarray] = {}
        self.called: set[int] = set()


def _key_name(key: tuple[str, str]) -> str:
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


def _check_subgraph(model: _Model, k: int) -> list[str]:
    """The problems (unsupported ops) of subgraph k, each 'op i (NAME): why', prefixed for k > 0."""
    tensors, ops, _, _ = model.subgraphs[k]
    where = f"subgraph {k} " if k else ""
    problems, parsed = [], []
    for i, (code, op_in, op_out, _, table) in enumerate(ops):
        name = model.names.get(code, f"builtin {code}")
        kind = _SUPPORTED.get(code)
        opts = None
        try:
            opts = _options(kind, table) if kind is not None else None
            why = _check(code, op_in, op_out, opts, tensors)
            if why == "op not supported" and name in _CONTROL:
                why = "control flow (WHILE, IF) is not supported; only CALL_ONCE of an init subgraph"
        except Exception as e:  # malformed options or tensor references
            why = f"cannot read the op ({type(e).__name__}: {e})"
        missing = [n for n in _NEEDS.get(code, ()) if n not in model.supported]
        if not why and missing:
            why = f"the session's op table lacks {missing}"
        if why:
            problems.append(f"{where}op {i} ({name}): {why}")
        parsed.append((code, op_in, op_out, opts if not why else None))
    model.subgraphs[k] = (*model.subgraphs[k][:4], parsed)
    return problems


def _call_graph(model: _Model) -> list[int]:
    """The subgraphs CALL_ONCE reaches from subgraph 0, in order; ValueError for an index out of range, missing
    CallOnceOptions or a cycle."""
    import tflite

    n = len(model.subgraphs)
    state: dict[int, int] = {}  # 1: being visited, 2: done
    order: list[int] = []

    def visit(k: int, path: list[int]) -> None:
        if state.get(k) == 2:
            return
        if state.get(k) == 1:
            raise ValueError(f"CALL_ONCE cycle through subgraphs {' -> '.join(map(str, [*path, k]))}")
        state[k] = 1
        order.append(k)
        for i, (code, _, _, otype, table) in enumerate(model.subgraphs[k][1]):
            if code != tflite.BuiltinOperator.CALL_ONCE:
                continue
            where = f"subgraph {k} op {i} (CALL_ONCE)"
            if table is None or otype != tflite.BuiltinOptions.CallOnceOptions:
                raise ValueError(f"{where} has no CallOnceOptions")
            try:
                init = int(_options(tflite.CallOnceOptions, table).InitSubgraphIndex())
            except Exception as e:
                raise ValueError(f"{where}: unreadable CallOnceOptions ({type(e).__name__}: {e})") from None
            if not 0 <= init < n:
                raise ValueError(f"{where}: init subgraph index {init} is out of range (the model has {n} "
                                 "subgraphs)")
            visit(init, [*path, k])
        state[k] = 2

    visit(0, [])
    return order


def _import_subgraph(model: _Model, k: int, imp: _Importer):
    """Adds the nodes of subgraph k to `imp`; returns {variable key: graph name of its value at the end} and the
    variables read before this subgraph assigned them ({key: (first READ's output tensor, the graph name of the
    value it read)}), in order."""
    import tflite

    B = tflite.BuiltinOperator
    tensors, _, ins, _, parsed = model.subgraphs[k]
    where_sg = f"subgraph {k} " if k else ""
    handles: dict[int, tuple[str, str]] = {}
    current: dict[tuple[str, str], str] = {}
    carried: dict[tuple[str, str], int] = {}
    for i in ins:
        imp.put(i)
    for j, (code, op_in, op_out, opts) in enumerate(parsed):
        name = model.names.get(code, code)
        where = f"{where_sg}op {j} ({name})"
        try:
            if code == B.CALL_ONCE:
                init = int(opts.InitSubgraphIndex())
                if init not in model.called:
                    model.called.add(init)
                    _run_init(model, init)
            elif code == B.VAR_HANDLE:
                key = ((opts.Container() or b"").decode(), (opts.SharedName() or b"").decode())
                handles[op_out[0]] = key
            elif code in (B.READ_VARIABLE, B.ASSIGN_VARIABLE):
                if op_in[0] not in handles:
                    raise ValueError(f"resource tensor {tensors[op_in[0]].name!r} is not the output of an "
                                     "earlier VAR_HANDLE")
                key = handles[op_in[0]]
                if code == B.ASSIGN_VARIABLE:
                    current[key] = imp.get(op_in[1])
                    carried.setdefault(key, None)
                    continue
                if key not in current:
                    if k != 0 or key not in model.initial:
                        raise ValueError(f"resource variable {_key_name(key)!r} is read before it is assigned")
                    current[key] = imp.fresh(f"state_{_key_name(key)}")
                    carried[key] = (op_out[0], current[key])
                imp.layouts[op_out[0]] = {"NHWC": current[key]}
            else:
                _build(imp, B, code, op_in, op_out, opts)
        except (ValueError, TypeError) as e:
            raise type(e)(f"{where}: {e}") from e
        except Exception as e:  # options fields are read lazily: a corrupt table fails here
            raise ValueError(f"{where}: unreadable ({type(e).__name__}: {e})") from e
    return current, {key: t for key, t in carried.items() if t is not None}


def _run_init(model: _Model, k: int) -> None:
    """Import init subgraph k as a graph of its own and evaluate it once (it has no inputs): the values it
    assigns become the variables' initial values."""
    from .plan import interpret

    tensors, _, ins, _, _ = model.subgraphs[k]
    if ins:
        raise ValueError(f"init subgraph {k} has {len(ins)} inputs (CALL_ONCE passes none)")
    imp = _Importer(tensors)
    current, carried = _import_subgraph(model, k, imp)
    if carried:
        raise ValueError(f"init subgraph {k} reads variable {_key_name(next(iter(carried)))!r} before assigning it")
    values: dict[str, np.ndarray] = dict(imp.consts)
    interpret(Graph(imp.nodes, [], [], imp.consts), values, "reference")
    for key, name in current.items():
        model.initial[key] = np.array(values[name], copy=True)


def import_tflite(model: str | os.PathLike | bytes, supported: dict[str, str | None]) -> Graph:
    """Graph of an int8/uint8 TFLite model. `supported` is the session's op table (as for import_onnx).
    Unsupported ops raise UnsupportedModelError listing each (op index, builtin name, why); an unreadable file
    raises ValueError.

    Streaming models: CALL_ONCE of an init subgraph is evaluated here, once, into each variable's initial value;
    a resource variable the main subgraph reads before assigning it becomes an extra graph input (its value
    going into a run) and, when the run assigns it, an extra graph output (its value after the run), listed in
    the graph's `variables` (StateVariable) after its `user_outputs` first outputs. The session carries them."""
    import tflite

    if not _SUPPORTED:
        _SUPPORTED.update(_supported_codes())
        _NEEDS.update(_needs())
        _MIN_INPUTS.update(_min_inputs())
        B = tflite.BuiltinOperator
        _NO_OUTPUTS.update({B.ASSIGN_VARIABLE, B.CALL_ONCE})
    if isinstance(model, bytes | bytearray | memoryview):
        blob = bytes(model)
    else:
        with open(os.fspath(model), "rb") as f:
            blob = f.read()
    subgraphs = _parse_all(blob)
    names = _builtin_names()
    m = _Model(subgraphs, names, supported)
    try:
        for k, (tensors, ops, ins, outs) in enumerate(subgraphs):
            try:
                _validate(tensors, ops, ins, outs, names, main=k == 0)
            except ValueError as e:
                if k:
                    raise ValueError(f"subgraph {k}: {e}") from None
                raise
        order = _call_graph(m)
    except ValueError:
        raise
    except Exception as e:  # options tables pointing outside the file
        raise ValueError(f"not a readable TFLite model ({type(e).__name__}: {e})") from None
    problems = []
    for k in order:
        problems += _check_subgraph(m, k)
    if "Transpose" not in supported:
        problems.append("the session's op table lacks Transpose")
    if problems:
        raise UnsupportedModelError("the model has ops vkinfer cannot run:\n  " + "\n  ".join(problems))

    tensors, _, ins, outs, _ = m.subgraphs[0]
    imp = _Importer(tensors)
    current, carried = _import_subgraph(m, 0, imp)
    out_names = [imp.get(o) for o in outs]

    def info(i: int, name: str) -> TensorInfo:
        t = tensors[i]
        if t.dtype not in _DTYPES:
            raise UnsupportedModelError(f"graph input/output {t.name!r} has unsupported TFLite type {t.dtype}")
        return TensorInfo(name, t.shape, np.dtype(_DTYPES[t.dtype]))

    inputs = [info(i, imp.names[i]) for i in ins]
    outputs = [info(i, n) for i, n in zip(outs, out_names, strict=True)]
    variables = []
    for key, read in carried.items():
        init = m.initial[key]
        read, state_in = read
        if tuple(init.shape) != tuple(tensors[read].shape) or _DTYPES.get(tensors[read].dtype) != init.dtype:
            raise ValueError(f"resource variable {_key_name(key)!r} holds {init.dtype} {list(init.shape)} (from its "
                             f"init subgraph), READ_VARIABLE output {tensors[read].name!r} declares "
                             f"{_DTYPES.get(tensors[read].dtype, tensors[read].dtype)} {list(tensors[read].shape)}")
        inputs.append(TensorInfo(state_in, init.shape, init.dtype))
        out, assigned = current[key], None
        if out == state_in:
            out = None
        elif out in imp.consts:
            out, assigned = None, imp.consts[out]
        elif out in {t.name for t in inputs}:
            copy = imp.fresh("state_out")
            imp.node("Identity", [out], [copy])
            out = copy
        if assigned is not None and (assigned.shape != init.shape or assigned.dtype != init.dtype):
            raise UnsupportedModelError(f"resource variable {_key_name(key)!r} of {init.dtype} {list(init.shape)} "
                                        f"is assigned {assigned.dtype} {list(assigned.shape)}")
        variables.append(StateVariable(_key_name(key), state_in, out, init, assigned))
    user_outputs = len(outputs)
    for v in variables:
        if v.output is not None and v.output not in {t.name for t in outputs}:
            outputs.append(TensorInfo(v.output, v.initial.shape, v.initial.dtype))

    graph = Graph(imp.nodes, inputs, outputs, imp.consts)
    consts = [t.name for t in graph.outputs if t.name in graph.consts]
    if consts:
        raise UnsupportedModelError(f"graph outputs {consts} are constants (they depend on no graph input), which "
                                    "vkinfer does not support as outputs")
    check_graph(graph)  # ops writing a subgraph input or one another's outputs, reading what nothing writes
    graph.variables = variables
    graph.user_outputs = user_outputs
    try:
        graph.meta = _file_meta(blob, ins, outs, [t.name for t in inputs[:len(ins)]], out_names, imp.names)
    except Exception as e:  # noqa: BLE001 - flatbuffers reads lazily: a corrupt table fails here
        raise ValueError(f"not a readable TFLite model ({type(e).__name__}: {e})") from None
    return graph


# TFLite TensorType -> numpy type, as ai-edge-litert reports a tensor's dtype (types without one are left out).
_DETAIL_TYPES = {0: np.float32, 1: np.float16, 2: np.int32, 3: np.uint8, 4: np.int64, 6: np.bool_, 7: np.int16,
                 8: np.complex64, 9: np.int8, 10: np.float64, 11: np.complex128, 12: np.uint64, 15: np.uint32,
                 16: np.uint16}


def _file_meta(blob: bytes, ins: list[int], outs: list[int], in_names: list[str], out_names: list[str],
               graph_names: list[str]) -> dict:
    """Graph.meta of a TFLite model: what the file says beside the computation, read as it is written.

    "tflite": "tensors" (subgraph 0's tensors by index: name, shape, shape_signature (None where the file has
    none: the shape is the signature), TFLite type, numpy type or None, scales, zero_points,
    quantized_dimension); "inputs" / "outputs" (the subgraph's tensor indices, in order) with "input_names" /
    "output_names" (the graph tensor each one is: the TFLite name, or "name:index" where names repeat);
    "graph_names" (that name for every tensor: the graph's name of its NHWC form); "signatures" (SignatureDef
    key -> {"inputs": {name: tensor index}, "outputs": {...}, "subgraph_index"}); "subgraphs" (their count).
    "model": ONNX Runtime's ModelMetadata fields (the file's description as producer and description, subgraph
    0's name as graph name, the schema version, metadata entries as strings). "quantization": each 8-bit graph
    input and output's per-tensor (scale, zero point)."""
    import tflite

    model = tflite.Model.GetRootAsModel(blob, 0)
    sg = model.Subgraphs(0)
    tensors = []
    for i in range(sg.TensorsLength()):
        t = sg.Tensors(i)
        shape = [int(v) for v in t.ShapeAsNumpy()] if t.ShapeLength() else []
        sig = [int(v) for v in t.ShapeSignatureAsNumpy()] if t.ShapeSignatureLength() else None
        q = t.Quantization()
        scales = q.ScaleAsNumpy().astype(np.float32) if q is not None and q.ScaleLength() else np.zeros(0, np.float32)
        zps = (q.ZeroPointAsNumpy().astype(np.int32) if q is not None and q.ZeroPointLength()
               else np.zeros(scales.size, np.int32))
        tensors.append({"name": t.Name().decode() if t.Name() else "", "shape": shape, "shape_signature": sig,
                        "type": int(t.Type()), "dtype": _DETAIL_TYPES.get(int(t.Type())), "scales": scales,
                        "zero_points": zps, "quantized_dimension": int(q.QuantizedDimension()) if q is not None else 0})
    signatures = {}
    for k in range(model.SignatureDefsLength()):
        d = model.SignatureDefs(k)

        def tensor_map(n: int, get) -> dict[str, int]:
            return {get(j).Name().decode(): int(get(j).TensorIndex()) for j in range(n)}

        signatures[d.SignatureKey().decode() if d.SignatureKey() else ""] = {
            "inputs": tensor_map(d.InputsLength(), d.Inputs), "outputs": tensor_map(d.OutputsLength(), d.Outputs),
            "subgraph_index": int(d.SubgraphIndex())}
    entries = {}
    for k in range(model.MetadataLength()):
        e = model.Metadata(k)
        raw = b""
        if 0 < e.Buffer() < model.BuffersLength():
            buf = model.Buffers(e.Buffer())
            raw = (blob[buf.Offset():buf.Offset() + buf.Size()] if buf.Offset() > 1
                   else buf.DataAsNumpy().tobytes() if buf.DataLength() else b"")
        try:
            value = raw.rstrip(b"\0").decode()
        except UnicodeDecodeError:
            value = f"<{len(raw)} bytes>"
        entries[e.Name().decode() if e.Name() else f"metadata_{k}"] = value
    description = model.Description().decode() if model.Description() else ""
    meta_model = {"producer_name": description, "producer_version": "", "graph_name": sg.Name().decode()
                  if sg.Name() else "", "domain": "", "description": description, "graph_description": "",
                  "version": int(model.Version()), "custom_metadata_map": entries}
    quant = {}
    for i, name in [*zip(ins, in_names, strict=True), *zip(outs, out_names, strict=True)]:
        t = tensors[i]
        if t["dtype"] in (np.uint8, np.int8) and t["scales"].size == 1:
            quant[name] = (float(t["scales"][0]), int(t["zero_points"][0]))
    return {"format": "tflite", "model": meta_model, "quantization": quant,
            "tflite": {"tensors": tensors, "inputs": list(ins), "outputs": list(outs), "input_names": list(in_names),
                       "output_names": list(out_names), "graph_names": list(graph_names), "signatures": signatures,
                       "subgraphs": int(model.SubgraphsLength())}}



# ---- data movement and elementwise ops on 8-bit tensors ---------------------------------------------------------
# Data movement becomes ONNX-style nodes on the 8-bit tensor (Slice, Concat, Reshape, Gather, DepthToSpace: pure
# byte moves, exact by construction, run on every device through vkinfer/model/moves.py); elementwise ops become
# vkinfer:Table / vkinfer:Table2 lookups (vkinfer/model/tables.py) whose entries are TFLite's arithmetic
# (vkinfer/reference/tflite_elementwise.py, tflite_hard_swish.py).

_MORE: dict = {}
_UNARY_TABLE_OPS = ("TANH", "HARD_SWISH", "LEAKY_RELU")
_BINARY_TABLE_OPS = ("SUB", "MAXIMUM", "MINIMUM", "PRELU")


def _more_codes() -> dict:
    import tflite

    B, t = tflite.BuiltinOperator, tflite
    codes = {B.STRIDED_SLICE: t.StridedSliceOptions, B.SPLIT: t.SplitOptions, B.SPLIT_V: t.SplitVOptions,
             B.PACK: t.PackOptions, B.UNPACK: t.UnpackOptions, B.SQUEEZE: t.SqueezeOptions,
             B.GATHER: t.GatherOptions, B.DEPTH_TO_SPACE: t.DepthToSpaceOptions,
             B.RESIZE_NEAREST_NEIGHBOR: t.ResizeNearestNeighborOptions, B.TANH: None, B.HARD_SWISH: None,
             B.LEAKY_RELU: t.LeakyReluOptions, B.SUB: t.SubOptions, B.MAXIMUM: None, B.MINIMUM: None,
             B.PRELU: None, B.TRANSPOSE: t.TransposeOptions}
    _MORE.update(codes)
    return codes


def _more_needs() -> dict:
    import tflite

    B = tflite.BuiltinOperator
    return {B.STRIDED_SLICE: ("Slice", "Reshape"), B.SPLIT: ("Slice",), B.SPLIT_V: ("Slice",),
            B.PACK: ("Reshape", "Concat"), B.UNPACK: ("Slice", "Reshape"), B.SQUEEZE: ("Reshape",),
            B.GATHER: ("Gather",), B.DEPTH_TO_SPACE: ("DepthToSpace",), B.RESIZE_NEAREST_NEIGHBOR: ("Gather",),
            B.TRANSPOSE: ("Transpose",),
            **{getattr(B, n): ("vkinfer:Table",) for n in _UNARY_TABLE_OPS},
            **{getattr(B, n): ("vkinfer:Table2",) for n in _BINARY_TABLE_OPS}}


def _const_ints(tensors, i: int, what: str) -> np.ndarray:
    t = tensors[i]
    if t.data is None or t.dtype not in (2, 4):
        raise ValueError(f"{what} {t.name!r} must be a constant int32/int64 tensor")
    return np.frombuffer(t.data, _DTYPES[t.dtype]).astype(np.int64)


def _check_more(code, ins, outs, opts, tensors) -> str | None:
    """Why one of the ops of this section cannot be imported, or None."""
    import tflite

    B = tflite.BuiltinOperator

    def q8(i):
        return _DTYPES.get(tensors[i].dtype) in (np.uint8, np.int8) and tensors[i].scale is not None and \
            tensors[i].scale.size == 1

    def known(i):
        return tensors[i].dtype in _DTYPES
    name = _builtin_names().get(code, code)
    if opts is None and _MORE.get(code) is not None and code not in (B.SQUEEZE, B.SUB, B.TRANSPOSE):
        return f"missing {_MORE[code].__name__}"
    if name in _UNARY_TABLE_OPS:
        if not (q8(ins[0]) and q8(outs[0])) or tensors[ins[0]].dtype != tensors[outs[0]].dtype:
            return "only per-tensor int8/uint8 input and output of one type are supported"
        return None
    if name in _BINARY_TABLE_OPS:
        if not all(q8(i) for i in (ins[0], ins[1], outs[0])) or len({tensors[i].dtype for i in (
                ins[0], ins[1], outs[0])}) != 1:
            return "only per-tensor int8/uint8 inputs and output of one type are supported"
        act = getattr(opts, "FusedActivationFunction", None)
        if act is not None and act() not in _ACTIVATIONS:
            return f"fused activation {act()} is not supported"
        return None
    data = ins[1:2] if code == B.SPLIT else (list(ins) if code == B.PACK else ins[:1])
    if not all(known(i) for i in data + outs) or any(tensors[o].dtype != tensors[data[0]].dtype for o in outs):
        return "inputs and outputs must have one supported type"
    if code == B.STRIDED_SLICE and opts is not None and (opts.EllipsisMask() or opts.NewAxisMask()):
        return "ellipsis_mask and new_axis_mask are not supported"
    if code == B.GATHER and opts is not None and opts.BatchDims() != 0:
        return "batch_dims != 0 is not supported"
    if code == B.PACK and any(tensors[i].scale is not None and not _same_q(tensors[i], tensors[outs[0]])
                              for i in ins):
        return "inputs and output must share one scale and zero point"
    if code == B.DEPTH_TO_SPACE and len(tensors[ins[0]].shape) != 4:
        return "input is not 4-D"
    if code == B.TRANSPOSE and tensors[ins[0]].scale is not None and not _same_q(tensors[ins[0]], tensors[outs[0]]):
        return "input and output must share one scale and zero point"
    if code == B.RESIZE_NEAREST_NEIGHBOR and len(tensors[ins[0]].shape) != 4:
        return "input is not 4-D"
    return None


def _build_more(imp: _Importer, B, code, ins, outs, opts) -> None:
    if code == B.STRIDED_SLICE:
        imp.strided_slice(ins, outs, opts)
    elif code in (B.SPLIT, B.SPLIT_V, B.UNPACK):
        imp.split(code, ins, outs, opts)
    elif code == B.PACK:
        imp.pack(ins, outs, opts)
    elif code == B.SQUEEZE:
        imp.squeeze(ins, outs)
    elif code == B.TRANSPOSE:
        imp.transpose(ins, outs)
    elif code == B.GATHER:
        imp.gather(ins, outs, opts)
    elif code == B.DEPTH_TO_SPACE:
        imp.depth_to_space(ins, outs, opts)
    elif code == B.RESIZE_NEAREST_NEIGHBOR:
        imp.resize_nearest(ins, outs, opts)
    elif code in (B.TANH, B.HARD_SWISH, B.LEAKY_RELU):
        imp.unary_table(code, ins, outs, opts)
    else:
        imp.binary_table(code, ins, outs, opts)


def _expect_shape(imp: _Importer, i: int, want, what: str) -> None:
    got = tuple(imp.t[i].shape)
    if got != tuple(int(d) for d in want):
        raise ValueError(f"output tensor {imp.t[i].name!r} has shape {list(got)}, {what} gives "
                         f"{[int(d) for d in want]}")


def _nearest_indices(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """TFLite's resize_nearest_neighbor source index per output index (float32 scale, as its kernel)."""
    if align_corners and out_size > 1:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    offset = np.float32(0.5) if half_pixel else np.float32(0.0)
    v = (np.arange(out_size, dtype=np.float32) + offset) * scale
    idx = (np.floor(np.abs(v) + np.float32(0.5)) * np.sign(v) if align_corners else np.floor(v)).astype(np.int64)
    idx = np.minimum(idx, in_size - 1)
    return np.maximum(idx, 0) if half_pixel else idx


def _importer_more(cls):
    """The methods of _Importer for this section (kept here, next to their checks)."""

    def slice_axis(self, src: str, dst: str, axis: int, start: int, stop: int, step: int = 1) -> None:
        self.node("Slice", [src, self.const("starts", np.array([start], np.int64)),
                            self.const("ends", np.array([stop], np.int64)),
                            self.const("axes", np.array([axis], np.int64)),
                            self.const("steps", np.array([step], np.int64))], [dst])

    def strided_slice(self, ins, outs, opts) -> None:
        x = ins[0]
        shape = self.t[x].shape
        r = len(shape)
        begin, end, strides = (_const_ints(self.t, i, w) for i, w in zip(ins[1:4], ("begin", "end", "strides"),
                                                                         strict=True))
        if not begin.size == end.size == strides.size == r:
            raise ValueError(f"begin/end/strides have {begin.size}/{end.size}/{strides.size} entries for a rank-{r} "
                             "input")
        if np.any(strides == 0):
            raise ValueError(f"strides {strides.tolist()} contain 0")
        bm, em, sm = opts.BeginMask(), opts.EndMask(), opts.ShrinkAxisMask()
        if getattr(opts, "Offset", lambda: False)():
            end = begin + end
        starts, ends, steps, dims = [], [], [], []
        for i, d in enumerate(shape):
            s = int(strides[i])
            if sm >> i & 1:
                b = int(begin[i]) + (d if begin[i] < 0 else 0)
                if not 0 <= b < d:
                    raise ValueError(f"shrink axis {i}: begin {int(begin[i])} is outside [-{d}, {d})")
                starts.append(b), ends.append(b + 1), steps.append(1)
                continue
            lo, hi = (0, d) if s > 0 else (-1, d - 1)
            b = (0 if s > 0 else d - 1) if bm >> i & 1 else int(begin[i]) + (d if begin[i] < 0 else 0)
            e = (d if s > 0 else -1) if em >> i & 1 else int(end[i]) + (d if end[i] < 0 else 0)
            b, e = min(max(b, lo), hi), min(max(e, lo), hi)
            n = max(0, -(-(e - b) // s))
            starts.append(b), ends.append(-(d + 1) if s < 0 and e == -1 else e), steps.append(s)
            dims.append(n)
        _expect_shape(self, outs[0], dims, f"strided slice {list(zip(starts, ends, steps, strict=True))} of "
                                           f"{self.t[x].name!r} {list(shape)}")
        if 0 in dims:
            raise UnsupportedModelError("an empty strided slice")
        reshape = len(dims) != r
        y = self.fresh("strided_slice") if reshape else self.put(outs[0])
        self.node("Slice", [self.get(x), self.const("starts", np.array(starts, np.int64)),
                            self.const("ends", np.array(ends, np.int64)),
                            self.const("axes", np.arange(r, dtype=np.int64)),
                            self.const("steps", np.array(steps, np.int64))], [y])
        if reshape:
            self.node("Reshape", [y, self.const("shape", np.array(dims, np.int64))], [self.put(outs[0])])

    def split(self, code, ins, outs, opts) -> None:
        """SPLIT / SPLIT_V / UNPACK -> one Slice per output along the axis (UNPACK: then a Reshape dropping it)."""
        import tflite

        B = tflite.BuiltinOperator
        if code == B.SPLIT:
            x, axis = ins[1], _const_ints(self.t, ins[0], "axis")
        elif code == B.SPLIT_V:
            x, axis = ins[0], _const_ints(self.t, ins[2], "axis")
        else:
            x, axis = ins[0], np.array([opts.Axis()])
        shape = self.t[x].shape
        if axis.size != 1 or not -len(shape) <= int(axis[0]) < len(shape):
            raise ValueError(f"axis {axis.tolist()} is not one axis of a rank-{len(shape)} input")
        a = int(axis[0]) % len(shape)
        d = shape[a]
        n = len(outs)
        if code == B.SPLIT_V:
            sizes = _const_ints(self.t, ins[1], "size_splits").tolist()
            if sizes.count(-1) == 1:
                sizes[sizes.index(-1)] = d - (sum(sizes) + 1)
            if len(sizes) != n or any(v < 0 for v in sizes) or sum(sizes) != d:
                raise ValueError(f"size_splits {sizes} do not split {d} into {n} outputs")
        else:
            num = opts.NumSplits() if code == B.SPLIT else opts.Num()
            if num != n or d % max(n, 1):
                raise ValueError(f"{num} splits / {n} outputs do not divide axis {a} of size {d}")
            sizes = [d // n] * n
        start = 0
        for o, size in zip(outs, sizes, strict=True):
            want = list(shape)
            want[a] = size
            if code == B.UNPACK:
                _expect_shape(self, o, want[:a] + want[a + 1:], f"unpacking axis {a} of {list(shape)}")
                y = self.fresh("unpack")
                self.slice_axis(self.get(x), y, a, start, start + size)
                self.node("Reshape", [y, self.const("shape", np.array(self.t[o].shape, np.int64))], [self.put(o)])
            else:
                _expect_shape(self, o, want, f"splitting axis {a} of {list(shape)} by {sizes}")
                self.slice_axis(self.get(x), self.put(o), a, start, start + size)
            start += size

    def pack(self, ins, outs, opts) -> None:
        shape = self.t[ins[0]].shape
        r = len(shape) + 1
        axis = opts.Axis()
        if not -r <= axis < r or any(self.t[i].shape != shape for i in ins):
            raise ValueError(f"cannot pack inputs of shapes {[list(self.t[i].shape) for i in ins]} on axis {axis}")
        a = axis % r
        one = [*shape[:a], 1, *shape[a:]]
        _expect_shape(self, outs[0], [*shape[:a], len(ins), *shape[a:]], f"packing {len(ins)} inputs")
        parts = []
        for i in ins:
            name = self.fresh("pack")
            self.node("Reshape", [self.get(i), self.const("shape", np.array(one, np.int64))], [name])
            parts.append(name)
        self.node("Concat", parts, [self.put(outs[0])], axis=a)

    def squeeze(self, ins, outs) -> None:
        x = ins[0]
        if int(np.prod(self.t[x].shape)) != int(np.prod(self.t[outs[0]].shape)):
            raise ValueError(f"output {list(self.t[outs[0]].shape)} does not hold input {list(self.t[x].shape)}")
        self.node("Reshape", [self.get(x), self.const("shape", np.array(self.t[outs[0]].shape, np.int64))],
                  [self.put(outs[0])])

    def transpose(self, ins, outs) -> None:
        """TRANSPOSE (a constant permutation) -> Transpose of the tensor in TFLite's own layout."""
        x = ins[0]
        shape = self.t[x].shape
        perm = _const_ints(self.t, ins[1], "perm") if len(ins) > 1 else np.arange(len(shape))[::-1]
        if sorted(perm.tolist()) != list(range(len(shape))):
            raise ValueError(f"perm {perm.tolist()} is not a permutation of the {len(shape)} axes of the input")
        _expect_shape(self, outs[0], [shape[p] for p in perm], f"transposing by {perm.tolist()}")
        self.node("Transpose", [self.get(x)], [self.put(outs[0])], perm=[int(p) for p in perm])

    def gather(self, ins, outs, opts) -> None:
        x, idx = ins[0], ins[1]
        shape = self.t[x].shape
        axis = opts.Axis()
        if not -len(shape) <= axis < len(shape):
            raise ValueError(f"axis {axis} is outside a rank-{len(shape)} input")
        a = axis % len(shape)
        if self.t[idx].dtype not in (2, 4):
            raise ValueError(f"indices {self.t[idx].name!r} must be int32/int64")
        _expect_shape(self, outs[0], [*shape[:a], *self.t[idx].shape, *shape[a + 1:]], "gathering")
        if self.t[idx].data is not None:
            v = self.array(idx).astype(np.int64)
            if v.size and (v.min() < 0 or v.max() >= shape[a]):
                raise ValueError(f"indices {sorted({int(i) for i in v.ravel() if not 0 <= i < shape[a]})[:5]} are "
                                 f"outside [0, {shape[a]})")
            ind = self.const("indices", v)
        else:
            ind = self.get(idx)
        self.node("Gather", [self.get(x), ind], [self.put(outs[0])], axis=a)

    def depth_to_space(self, ins, outs, opts) -> None:
        x = ins[0]
        n, h, w, c = self.t[x].shape
        b = opts.BlockSize()
        if b < 1 or c % (b * b):
            raise ValueError(f"block size {b} does not divide {c} channels into blocks")
        _expect_shape(self, outs[0], [n, h * b, w * b, c // (b * b)], f"depth to space by {b}")
        self.node("DepthToSpace", [self.get(x, "NCHW")], [self.put(outs[0], "NCHW")], blocksize=b, mode="DCR")

    def resize_nearest(self, ins, outs, opts) -> None:
        """RESIZE_NEAREST_NEIGHBOR -> Gather along H, then W, of the source rows and columns TFLite picks."""
        x = ins[0]
        n, h, w, c = self.t[x].shape
        size = _const_ints(self.t, ins[1], "size")
        if size.size != 2 or size.min() < 1:
            raise ValueError(f"size {size.tolist()} must be two positive integers")
        oh, ow = (int(v) for v in size)
        _expect_shape(self, outs[0], [n, oh, ow, c], f"resizing to {[oh, ow]}")
        ac, hp = bool(opts.AlignCorners()), bool(opts.HalfPixelCenters())
        layout = self.layout_of([x], outs)
        ah, aw = (2, 3) if layout == "NCHW" else (1, 2)
        mid = self.fresh("resize_rows")
        self.node("Gather", [self.get(x, layout), self.const("rows", _nearest_indices(h, oh, ac, hp))], [mid],
                  axis=ah)
        self.node("Gather", [mid, self.const("cols", _nearest_indices(w, ow, ac, hp))],
                  [self.put(outs[0], layout)], axis=aw)

    def unary_table(self, code, ins, outs, opts) -> None:
        from ..reference.tflite_elementwise import leaky_relu_table, tanh_table
        from ..reference.tflite_hard_swish import tflite_hard_swish_table

        x, y = self.t[ins[0]], self.t[outs[0]]
        _expect_shape(self, outs[0], x.shape, "an elementwise op")
        dt = _DTYPES[y.dtype]
        args = (x.scale[0], int(x.zero_point[0]), y.scale[0], int(y.zero_point[0]))
        name = _builtin_names()[code]
        if name == "TANH":
            table = tanh_table(*args, dt)
        elif name == "HARD_SWISH":
            table = tflite_hard_swish_table(*args, dt)
        else:
            table = leaky_relu_table(*args, opts.Alpha(), dt)
        layout = self.layout_of(ins[:1], outs)
        self.node("vkinfer:Table", [self.get(ins[0], layout), self.const("table", table.view(np.uint8))],
                  [self.put(outs[0], layout)], dtype=np.dtype(dt).name)

    def binary_table(self, code, ins, outs, opts) -> None:
        from ..reference.tflite_elementwise import max_min_table, prelu_table, sub_table

        a, b, y = self.t[ins[0]], self.t[ins[1]], self.t[outs[0]]
        try:
            want = np.broadcast_shapes(a.shape, b.shape)
        except ValueError:
            raise ValueError(f"input shapes {list(a.shape)} and {list(b.shape)} do not broadcast") from None
        _expect_shape(self, outs[0], want, "broadcasting the inputs")
        dt = _DTYPES[y.dtype]
        name = _builtin_names()[code]
        if name == "SUB":
            act = opts.FusedActivationFunction() if opts is not None else 0
            lo, hi = _act_range(act, y.scale[0], int(y.zero_point[0]), dt) or _QRANGE[np.dtype(dt)]
            table = sub_table(a.scale[0], int(a.zero_point[0]), b.scale[0], int(b.zero_point[0]), y.scale[0],
                              int(y.zero_point[0]), dt, lo, hi)
        elif name == "PRELU":
            table = prelu_table(a.scale[0], int(a.zero_point[0]), b.scale[0], int(b.zero_point[0]), y.scale[0],
                                int(y.zero_point[0]), dt, _DTYPES[b.dtype])
        else:
            table = max_min_table(dt, name == "MAXIMUM")
        layout = self.layout_of(ins[:2], outs) if len(a.shape) == len(b.shape) else "NHWC"
        self.node("vkinfer:Table2", [self.get(ins[0], layout), self.get(ins[1], layout),
                                     self.const("table", table.view(np.uint8))], [self.put(outs[0], layout)],
                  dtype=np.dtype(dt).name)

    for f in (slice_axis, strided_slice, split, pack, squeeze, transpose, gather, depth_to_space, resize_nearest,
              unary_table, binary_table):
        setattr(cls, f.__name__, f)
    return cls


_importer_more(_Importer)
