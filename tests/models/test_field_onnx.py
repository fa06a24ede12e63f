"""Field-shaped ONNX models (vkinfer.testing.field_onnx: MobileNetV3-small, a YOLOv8n-style detector, a DB text
detector, a CRNN recognizer with attention), pre-processed and quantized by onnxruntime.quantization as a user does
it (QDQ and QOperator; per-tensor and per-channel weights; uint8 and int8 activations), through
vkinfer.InferenceSession on every device (tests/support/agree.py: reference, cpu and vulkan give the same bits; "auto"
once too), against ONNX Runtime (CPU EP, one thread).

Tensor by tensor: every 8-bit tensor of the quantized graph (QuantizeLinear outputs, QLinear* outputs, 8-bit
MaxPool / Split / Concat / Resize / Reshape outputs) is added to the graph outputs in both runtimes, and each is
compared, in node order, so a mismatch names the first node where the runtimes part.

Oracle settings (tests/models/test_models_onnx.py explains both): int8-activation QDQ models run in ORT with
`session.qdqisint8allowed=1`; uint8-activation models use 7-bit weights (`reduce_range`), which ORT's u8 x s8
kernels on x86 AVX2 without VNNI cannot saturate, so ORT's result is exact on every machine; the one case with
full-range u8 x s8 per-channel weights (what a user gets from quantize_static's per_channel=True) is compared
with ORT where its u8 x s8 kernels are exact (`ort_oracle.u8s8_behaviour()`) and with vkinfer's reference
interpreter where they saturate int16 pairs.

Bound: zero, on every 8-bit tensor and every float output, unless a test's docstring pins a different bound and
its mechanism.
"""

from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from onnx import numpy_helper
from support import ort_oracle as oo
from support.agree import DEVICES, run_devices

import vkinfer
from vkinfer.testing import field_onnx, zoo

EXACT_INT8_QDQ = {"session.qdqisint8allowed": "1"}
# model -> (builder, quant_pre_process skips ORT's optimizations): "db_text_detector_unfolded" is pre-processed
# with skip_optimization=True (ORT's advice when its optimizer fails), so its BatchNormalizations stay float ops.
MODELS = {**{n: (n, False) for n in field_onnx.BUILDERS}, "db_text_detector_unfolded": ("db_text_detector", True)}
FORMATS = ["qdq", "qoperator"]
# name -> zoo.quantize settings: activation type, per-channel weights, 7-bit weights
SETTINGS = {
    "s8_per_tensor": dict(activation_type="int8", per_channel=False, reduce_range=False),  # quantize_static's defaults
    "u8_per_channel": dict(activation_type="uint8", per_channel=True, reduce_range=True),
    "s8_per_channel": dict(activation_type="int8", per_channel=True, reduce_range=False),
    "u8_per_channel_full": dict(activation_type="uint8", per_channel=True, reduce_range=False),  # as users do
}
# (format, setting): each format with uint8 and int8 activations, per-tensor and per-channel weights at least once
CASES = [("qdq", "s8_per_tensor"), ("qdq", "u8_per_channel"), ("qoperator", "u8_per_channel"),
         ("qoperator", "s8_per_channel"), ("qoperator", "u8_per_channel_full")]


@functools.cache
def _prepped(name: str) -> onnx.ModelProto:
    """The float model after quant_pre_process (built and pre-processed once per test run)."""
    builder, skip = MODELS[name]
    return field_onnx.preprocess(field_onnx.BUILDERS[builder](), skip_optimization=skip)


class Case:
    """One quantized model: its bytes, the bytes with every 8-bit tensor as an output too, a feed, and ORT's
    value of every output of the instrumented model (name -> array) and of the plain one."""

    def __init__(self, name: str, fmt: str, setting: str) -> None:
        self.name, self.fmt, self.setting = name, fmt, setting
        q = zoo.quantize(_prepped(name), fmt=fmt, seed=7, num_calib=4, **SETTINGS[setting])
        self.plain = q.SerializeToString()
        inst = field_onnx.with_outputs(q)
        self.tensors = [o.name for o in inst.graph.output[len(q.graph.output):]]
        self.instrumented = inst.SerializeToString()
        self.outputs = [o.name for o in inst.graph.output]
        self.public = [o.name for o in q.graph.output]
        self.producer = {o: (n.name, n.op_type) for n in q.graph.node for o in n.output}
        self.feed = field_onnx.float_inputs(q, seed=11)
        config = EXACT_INT8_QDQ if fmt == "qdq" and SETTINGS[setting]["activation_type"] == "int8" else None
        if self.saturating():
            def run(m):
                return vkinfer.InferenceSession(m.SerializeToString(), device="reference").run(None, self.feed)
        else:
            def run(m):
                return zoo.ort_run(m, self.feed, config=config)
        self.want = dict(zip(self.outputs, run(inst), strict=True))
        self.want_plain = dict(zip(self.public, run(q), strict=True))
        self._run, self._floats = run, {}

    def float_value(self, name: str) -> np.ndarray:
        """The oracle's value of the float tensor `name` (the plain model with it as an extra output)."""
        if name not in self._floats:
            m = onnx.load_from_string(self.plain)
            m.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
            self._floats[name] = self._run(m)[-1]
        return self._floats[name]

    def saturating(self) -> bool:
        """Full-range u8 x s8 weights on a machine where ORT's u8 x s8 kernels saturate int16 pair sums."""
        st = SETTINGS[self.setting]
        return (st["activation_type"] == "uint8" and not st["reduce_range"]
                and oo.u8s8_behaviour() == oo.SATURATING)

    def __repr__(self) -> str:
        return f"{self.name}/{self.fmt}/{self.setting}"


@functools.cache
def _case(name: str, fmt: str, setting: str) -> Case:
    return Case(name, fmt, setting)


def _mismatches(case: Case, got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> list[str]:
    """One line per tensor that differs, in node order: tensor, producing node and op, count, largest step."""
    lines = []
    for n, w in want.items():
        g = got[n]
        if g.shape != w.shape or g.dtype != w.dtype:
            lines.append(f"{n}: {g.dtype}{list(g.shape)} vs ORT {w.dtype}{list(w.shape)}")
            continue
        off = g != w
        if off.any():
            d = np.abs(g.astype(np.float64) - w.astype(np.float64))[off]
            node, op = case.producer.get(n, ("?", "?"))
            lines.append(f"{n} ({op} {node}): {int(off.sum())}/{off.size} differ, max {d.max():g}")
    return lines


class Softmax:
    """A quantized softmax, as ORT runs it: com.microsoft QLinearSoftmax (QOperator), or DequantizeLinear ->
    Softmax -> QuantizeLinear, which ORT fuses into QLinearSoftmax (QDQ). x, y: its 8-bit input and output.
    ORT sums its float32 exponentials in an order vkinfer does not reproduce (vkinfer/reference/qlinear_softmax.py),
    so a quotient within ORT's float32 error of a .5 tie can round either way."""

    kind = "softmax"

    def __init__(self, x: str, y: str, x_scale: float, y_scale: float, axis: int) -> None:
        self.x, self.y, self.x_scale, self.y_scale, self.axis = x, y, x_scale, y_scale, axis

    def near_tie(self, case: Case) -> np.ndarray:
        """Where the exact quotient q = floor(1 / y_scale) * softmax(x * x_scale) (float64) is within ORT's float32
        error of a .5 tie: its table entries exp(float32 argument), |argument| <= 89, are each off by up to
        89 * 2**-24 relative (twice: entry and sum); the float32 sum of D entries, the product and the quotient
        add (D + 4) * 2**-24."""
        x = case.want[self.x]
        z = (x.astype(np.float64) - x.max(axis=self.axis, keepdims=True)) * self.x_scale
        e = np.exp(z)
        q = np.floor(np.float32(1) / np.float32(self.y_scale)) * e / e.sum(axis=self.axis, keepdims=True)
        return np.abs(q - np.floor(q) - 0.5) <= q * ((2 * 89 + x.shape[self.axis] + 4) * 2.0**-24)


class FloatConvTranspose:
    """DequantizeLinear -> ConvTranspose -> QuantizeLinear, which ORT runs in float32 (MLAS SGEMM; it has no
    quantized ConvTranspose kernel to fuse into) and vkinfer in exact integer arithmetic (QDQ) or in numpy float32
    (QOperator, float weights): a value within float32 error of a .5 tie can round either way."""

    kind = "conv_transpose"

    def __init__(self, x: str, y: str, x_scale: float, x_zp: int, w: np.ndarray, b: np.ndarray | None,
                 y_scale: float, strides: list[int]) -> None:
        self.x, self.y, self.x_scale, self.x_zp, self.w, self.b = x, y, x_scale, x_zp, w, b
        self.y_scale, self.strides = y_scale, strides

    def near_tie(self, case: Case) -> np.ndarray:
        """Where the exact value of y / y_scale (float64, from ORT's 8-bit input) is within the float32 error of
        a K-term sum, (K + 4) * 2**-24 * (sum |x w| + |b|) / y_scale (Higham's gamma_K), of a .5 tie."""
        x = (case.want[self.x].astype(np.float64) - self.x_zp) * self.x_scale
        n, c, h, wd = x.shape
        _, m, kh, kw = self.w.shape
        sh, sw = self.strides
        y = np.zeros((n, m, (h - 1) * sh + kh, (wd - 1) * sw + kw))
        mag = np.zeros_like(y)
        for a in range(kh):
            for b in range(kw):
                tap = np.einsum("nchw,cm->nmhw", x, self.w[:, :, a, b])
                y[:, :, a:a + (h - 1) * sh + 1:sh, b:b + (wd - 1) * sw + 1:sw] += tap
                mag[:, :, a:a + (h - 1) * sh + 1:sh, b:b + (wd - 1) * sw + 1:sw] += np.einsum(
                    "nchw,cm->nmhw", np.abs(x), np.abs(self.w[:, :, a, b]))
        terms = c * -(-kh // sh) * -(-kw // sw)
        if self.b is not None:
            y += self.b[None, :, None, None]
            mag += np.abs(self.b)[None, :, None, None]
            terms += 1
        q = y / self.y_scale
        return np.abs(q - np.floor(q) - 0.5) <= (terms + 4) * 2.0**-24 * mag / self.y_scale


class FloatRegion:
    """QOperator's DB head: DequantizeLinear -> [BatchNormalization -> Relu ->] ConvTranspose -> [BatchNormalization
    ->] Relu -> ConvTranspose -> QuantizeLinear, float32 throughout (the quantizer has no QOperator form of
    ConvTranspose); ORT runs it with MLAS SGEMM and its BatchNormalization folding, vkinfer on the host in numpy
    float32: sums in another order, so a value within a few float32 ulps of a .5 tie can round either way."""

    kind = "float_region"

    def __init__(self, y: str, pre: str, y_scale: float) -> None:
        self.y, self.pre, self.y_scale = y, pre, y_scale

    def near_tie(self, case: Case) -> np.ndarray:
        """Where ORT's float32 value v / y_scale lies within 2**-18 of the tensor's largest |v / y_scale| of a .5
        tie: 64 float32 ulps at that scale, covering the reordered 8- and 9-term sums of the two ConvTransposes
        and the BatchNormalization folding (measured: the one differing byte seen in 12 input seeds was 4.9e-6
        steps from the tie, the window about 5e-4 steps)."""
        v = case.float_value(self.pre).astype(np.float64) / self.y_scale
        return np.abs(v - np.floor(v) - 0.5) <= 2.0**-18 * np.abs(v).max()


def _pinned_units(case: Case) -> list[Softmax | FloatConvTranspose | FloatRegion]:
    """The units of the case's quantized graph whose outputs the test bounds instead of equating."""
    m = onnx.load_from_string(case.plain)
    consts = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    producer = {o: n for n in m.graph.node for o in n.output}

    def op(name: str) -> str:
        return getattr(producer.get(name), "op_type", "")

    def attr(node, key, default):
        return next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == key), default)

    def real(name: str) -> np.ndarray:
        """A constant's float64 value, through a DequantizeLinear of constants if there is one."""
        if name in consts:
            return consts[name].astype(np.float64)
        dq = producer[name]
        q, sc = consts[dq.input[0]], consts[dq.input[1]].astype(np.float64)
        zp = consts[dq.input[2]].astype(np.float64) if len(dq.input) > 2 and dq.input[2] else np.zeros_like(sc)
        if sc.ndim == 1 and q.ndim > 1:
            shape = [1] * q.ndim
            shape[attr(dq, "axis", 1) % q.ndim] = -1
            sc, zp = sc.reshape(shape), zp.reshape(shape)
        return (q.astype(np.float64) - zp) * sc

    def float_region_has_conv_transpose(name: str) -> bool:
        """Whether the float ops computing `name` back to their DequantizeLinears include a ConvTranspose."""
        todo, seen = [name], set()
        while todo:
            t = todo.pop()
            node = producer.get(t)
            if t in seen or node is None or node.op_type == "DequantizeLinear":
                continue
            seen.add(t)
            if node.op_type == "ConvTranspose":
                return True
            todo.extend(i for i in node.input if i and i not in consts)
        return False

    units = []
    for n in m.graph.node:
        if (n.op_type == "QuantizeLinear" and case.fmt == "qoperator" and op(n.input[0]) != "DequantizeLinear"
                and float_region_has_conv_transpose(n.input[0])):
            units.append(FloatRegion(n.output[0], n.input[0], float(consts[n.input[1]])))
        elif n.op_type == "QLinearSoftmax":
            x, xs, _, ys = n.input[:4]
            units.append(Softmax(x, n.output[0], float(consts[xs]), float(consts[ys]), int(attr(n, "axis", -1))))
        elif n.op_type == "QuantizeLinear" and op(n.input[0]) == "Softmax":
            sm = producer[n.input[0]]
            x, xs = producer[sm.input[0]].input[:2]
            units.append(Softmax(x, n.output[0], float(consts[xs]), float(consts[n.input[1]]),
                                 int(attr(sm, "axis", -1))))
        elif (n.op_type == "QuantizeLinear" and op(n.input[0]) == "ConvTranspose"
              and op(producer[n.input[0]].input[0]) == "DequantizeLinear"):
            # QDQ's unit. (QOperator leaves the DB head's ConvTranspose -> Relu -> ConvTranspose in float between
            # DequantizeLinear and QuantizeLinear: vkinfer runs it on the host, held to exactness.)
            ct = producer[n.input[0]]
            assert attr(ct, "group", 1) == 1 and not any(attr(ct, "pads", [0])), ct.name  # the builders' form
            x, xs, xz = producer[ct.input[0]].input[:3]
            b = real(ct.input[2]) if len(ct.input) > 2 and ct.input[2] else None
            units.append(FloatConvTranspose(x, n.output[0], float(consts[xs]), int(consts[xz]), real(ct.input[1]), b,
                                            float(consts[n.input[1]]), list(attr(ct, "strides", [1, 1]))))
    return units


def _cut(case: Case, model: bytes, tensors: list[str]) -> bytes:
    """`model` (the case's plain or instrumented bytes) with `tensors` made graph inputs: their producers and the
    nodes only they fed (the float Softmax and its DequantizeLinear in QDQ form) removed."""
    m = onnx.load_from_string(model)
    infos = {o.name: o for o in onnx.load_from_string(case.instrumented).graph.output}
    m.graph.input.extend(infos[t] for t in tensors)
    keep_out = [o for o in m.graph.output if o.name not in tensors]
    del m.graph.output[:]
    m.graph.output.extend(keep_out)
    nodes = [n for n in m.graph.node if not set(n.output) & set(tensors)]
    while True:  # drop nodes whose outputs nothing reads
        read = {i for n in nodes for i in n.input} | {o.name for o in m.graph.output}
        live = [n for n in nodes if any(o in read for o in n.output)]
        if len(live) == len(nodes):
            break
        nodes = live
    del m.graph.node[:]
    m.graph.node.extend(nodes)
    return m.SerializeToString()


def _run_cut(case: Case, model: bytes, tensors: list[str], devices=DEVICES) -> dict[str, np.ndarray]:
    """Every output of `model` cut at `tensors`, with those tensors fed ORT's bytes: the same bits on `devices`."""
    cut = _cut(case, model, tensors)
    names = [o.name for o in onnx.load_from_string(cut).graph.output]
    feed = dict(case.feed, **{t: case.want[t] for t in tensors})
    return dict(zip(names, run_devices(cut, feed, devices=devices), strict=True))


@pytest.mark.parametrize("fmt,setting", CASES, ids=[f"{f}-{s}" for f, s in CASES])
@pytest.mark.parametrize("name", MODELS)
def test_every_8bit_tensor_equals_onnxruntime(name, fmt, setting, record_property):
    """Every device gives the same bits on every tensor (tests/support/agree.py), and ORT's.
    Bound against ORT: zero on every tensor, except the outputs of two kinds of unit whose ORT arithmetic vkinfer cannot
    reproduce bit for bit; there at most 1 step, and only on elements whose exact value (float64, from ORT's 8-bit
    input) lies within ORT's float32 error of a .5 tie:
    - a quantized softmax (QLinearSoftmax, or DequantizeLinear -> Softmax -> QuantizeLinear, which ORT fuses into
      it): ORT sums its float32 exponentials in an order vkinfer does not reproduce (`Softmax.near_tie`, about
      1e-5 relative; measured at the fixed seed: 1 and 3 of 33600 bytes of the YOLOv8 DFL softmax, 2.6e-5 and
      3.5e-6 steps from the tie; over 8 more input seeds 1-6 bytes, always at ties);
    - QDQ DequantizeLinear -> ConvTranspose -> QuantizeLinear (the DB head), float32 SGEMM in ORT, exact integers
      in vkinfer (`FloatConvTranspose.near_tie`; measured: 0 at the fixed seed, 1 of 16384 bytes at 2 of 6 other
      seeds, at ties);
    - QOperator's float DB head ending in a ConvTranspose, float32 in both runtimes with sums in different orders
      (`FloatRegion.near_tie`, against ORT's own float value; measured: 1 of 8192 bytes at 1 of 12 seeds).
    Each such unit that differs is then cut off: the model is run again with its output fed ORT's bytes, and
    every other tensor must equal ORT's (and the next differing unit, if any, is checked the same way)."""
    case = _case(name, fmt, setting)
    sess = vkinfer.InferenceSession(case.instrumented, device="reference")  # run_devices gives values, not names
    assert [o.name for o in sess.get_outputs()] == case.outputs
    got = dict(zip(case.outputs, run_devices(case.instrumented, case.feed), strict=True))
    units, pinned = _pinned_units(case), []
    while True:  # the first bounded unit (in node order) that differs: check its bound, cut there, run again
        u = next((u for u in units if u.y not in pinned and u.y in got and (got[u.y] != case.want[u.y]).any()),
                 None)
        if u is None:
            break
        g, w = got[u.y], case.want[u.y]
        off = g != w
        near = u.near_tie(case)
        steps = np.abs(g.astype(np.int32) - w.astype(np.int32))[off]
        assert steps.max() == 1 and near[off].all(), (
            f"{case} (every device): {u.kind} {u.y}: {int(off.sum())} bytes differ, by up to {steps.max()}, "
            f"{int((off & ~near).sum())} of them away from a .5 tie" + (
                f" (after cutting at {pinned})" if pinned else ""))
        pinned.append(u.y)
        record_property(f"{u.kind}_ties_{u.y}", f"{int(off.sum())} of {off.size} ({int(near.sum())} near ties)")
        got = _run_cut(case, case.instrumented, pinned)
    bad = _mismatches(case, got, {n: case.want[n] for n in got})
    assert not bad, f"{case} (every device): {len(bad)} of {len(got)} tensors differ from ORT" + (
        f" (bounded unit outputs {pinned} fed with ORT's bytes)" if pinned else "") + ":\n" + "\n".join(bad[:20])


@pytest.mark.parametrize("fmt,setting", CASES, ids=[f"{f}-{s}" for f, s in CASES])
@pytest.mark.parametrize("name", MODELS)
def test_plain_model_equals_onnxruntime(name, fmt, setting):
    """The model as quantized (no extra outputs, so every fusion both runtimes make applies): the same bits on every
    device, and ORT's; and ORT's outputs of the plain and the instrumented model agree (the extra outputs change
    nothing in ORT).
    Bound: zero, or, where the outputs differ and the model has units whose bound the test above pins (quantized
    softmax, QDQ ConvTranspose), zero on the model cut at those units' outputs, fed with ORT's bytes."""
    case = _case(name, fmt, setting)
    for n in case.public:
        np.testing.assert_array_equal(case.want[n], case.want_plain[n], err_msg=f"ORT: {case} plain vs instrumented")
    pinned = [u.y for u in _pinned_units(case)]
    got = dict(zip(case.public, run_devices(case.plain, case.feed), strict=True))
    bad = _mismatches(case, got, case.want_plain)
    if bad and pinned:
        bad = _mismatches(case, _run_cut(case, case.plain, pinned), case.want_plain)
    assert not bad, f"{case} (every device):\n" + "\n".join(bad)


def test_auto_device():
    """device="auto" (the dispatcher's placement across the CPU and Vulkan) gives the bits of every device, and
    ORT's (the bounded units' outputs fed with ORT's bytes, as above, where the outputs differ)."""
    case = _case("yolov8n", "qdq", "u8_per_channel")
    devices = ("auto", *DEVICES)
    got = run_devices(case.plain, case.feed, devices=devices)
    bad = _mismatches(case, dict(zip(case.public, got, strict=True)), case.want_plain)
    if bad:
        bad = _mismatches(case, _run_cut(case, case.plain, [u.y for u in _pinned_units(case)], devices),
                          case.want_plain)
    assert not bad, "\n".join(bad)


# ops each float model must carry (the list), and ops ORT's quantizer must leave in the quantized graphs
FLOAT_OPS = {
    "mobilenet_v3_small": {"HardSwish", "HardSigmoid", "GlobalAveragePool", "Mul", "Add", "Gemm", "Relu"},
    "yolov8n": {"Sigmoid", "Mul", "Split", "Concat", "MaxPool", "Resize", "Reshape", "Transpose", "Softmax", "Sub",
                "Div"},
    "db_text_detector": {"HardSigmoid", "Resize", "Concat", "ConvTranspose", "BatchNormalization", "Sigmoid"},
    "crnn_attention": {"MatMul", "Softmax", "ReduceMean", "Sub", "Pow", "Sqrt", "Div", "Erf", "Transpose",
                       "Reshape"},
}
QUANTIZED_OPS = {
    ("mobilenet_v3_small", "qdq"): {"HardSigmoid", "Mul", "GlobalAveragePool"},
    ("mobilenet_v3_small", "qoperator"): {"HardSigmoid", "QLinearMul", "QLinearGlobalAveragePool", "QGemm"},
    ("yolov8n", "qdq"): {"Sigmoid", "Split", "Resize", "Softmax", "MaxPool", "Concat"},
    ("yolov8n", "qoperator"): {"QLinearSigmoid", "QLinearMul", "Split", "Resize", "QLinearSoftmax", "QLinearConcat",
                               "MaxPool"},
    ("db_text_detector", "qdq"): {"ConvTranspose", "Resize", "HardSigmoid", "Sigmoid"},
    ("db_text_detector", "qoperator"): {"ConvTranspose", "Resize", "QLinearSigmoid", "QLinearConcat"},
    ("db_text_detector_unfolded", "qdq"): {"ConvTranspose", "BatchNormalization", "Resize", "Sigmoid"},
    ("db_text_detector_unfolded", "qoperator"): {"ConvTranspose", "BatchNormalization", "Relu", "QLinearSigmoid"},
    ("crnn_attention", "qdq"): {"MatMul", "Softmax", "ReduceMean", "Erf", "Sqrt"},
    ("crnn_attention", "qoperator"): {"QLinearMatMul", "QLinearSoftmax", "ReduceMean", "Erf", "Sqrt"},
}


@pytest.mark.parametrize("name", MODELS)
def test_models_carry_the_field_ops(name):
    """The float models carry the ops of the field models they mirror, and ORT's quantizer leaves the expected
    float and quantized ops in both formats (so the tests above exercise them)."""
    builder = MODELS[name][0]
    info = field_onnx.describe(field_onnx.BUILDERS[builder]())
    assert FLOAT_OPS[builder] <= set(info["ops"]), FLOAT_OPS[builder] - set(info["ops"])
    assert info["macs"] > 1_000_000
    for fmt in FORMATS:
        case = _case(name, fmt, "u8_per_channel")
        ops = {n.op_type for n in onnx.load_from_string(case.plain).graph.node}
        assert QUANTIZED_OPS[name, fmt] <= ops, (fmt, QUANTIZED_OPS[name, fmt] - ops)
        assert len(case.tensors) >= 10
