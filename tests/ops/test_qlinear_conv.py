"""QLinearConv (vkinfer/cpu/qlinear_conv.py, vkinfer/vulkan/qlinear_conv.py) against ONNX Runtime on every device,
which must run the node itself: kernel x stride x group kind crossed ncnn style (kernels 1/3/5, strides 1/2,
groups 1 / 2 / depthwise), dilation, asymmetric pads, odd channel counts and sizes, per-tensor and per-channel
weights, every u8/s8 combination, saturating and tie-heavy scales, no bias; then the layers of real models
(MobileNetV2's depthwise and pointwise, ResNet's 3x3, YOLO's strided 3x3, a 7x7 stem). Every conv kernel of
vkinfer.vulkan.KERNELS is reached (gemm, gemv, dwconv3x3, dwconv, conv).

ORT implements (x, w) in {(u8, u8), (u8, s8), (s8, s8)}: s8 x u8 is compared between the devices only (the
reference device is the numpy definition, vkinfer/reference/qlinear_conv.py). ORT's u8 x s8 kernel saturates
int16 pair sums on x86 without VNNI (tests/support/ort_oracle.py): there, u8 x s8 weights are drawn 7-bit, as
tests/numerics/test_reference_vs_ort.py does. Weights that are not constants run on the host; 1-D convolutions run as
2-D ones over a height of 1 (tests/ops/test_qlinear_conv1d.py), auto_pad in tests/ops/test_conv_auto_pad.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from support import ort_oracle as oo
from support.cases import conv_case

from vkinfer.reference._spec import conv_spec
from vkinfer.vulkan import KERNELS, choose_kernel

from ._build import check, model, node, ort_run, refused

TYPES = [("u8", "s8"), ("u8", "u8"), ("s8", "s8"), ("s8", "u8")]
MODES = ["random", "random", "saturate", "ties"]


def _table() -> list[tuple[str, dict]]:
    """(id, conv_case keywords)."""
    cases = []
    for i, (k, s, g) in enumerate((k, s, g) for k in (1, 3, 5) for s in (1, 2) for g in ("1", "2", "dw")):
        d = 1 + (i % 4 == 1 and k > 1)
        ek = (k - 1) * d + 1
        pads = [(0, 0, 0, 0), (k // 2,) * 4, (0, k - 1, k // 2, 0), (k - 1, 0, 0, (k - 1) // 2)][i % 4]
        c = [3, 5, 8, 17][i % 4] * (2 if g == "2" else 1)
        group, m = {"1": (1, [1, 7, 16, 33][i % 4]), "2": (2, 2 * (1 + i % 3)), "dw": (c, c)}[g]
        h, w = max(ek - pads[0] - pads[2], 1) + 2 + 2 * (i % 3), max(ek - pads[1] - pads[3], 1) + 4 + (i % 5)
        xt, wt = TYPES[i % 4]
        cases.append((f"k{k}s{s}d{d}-g{g}-c{c}m{m}-{xt}{wt}-{MODES[(i // 3) % 4]}",
                      dict(n=1 + i % 2, c=c, h=h, w=w, m=m, kh=k, strides=(s, s), pads=pads, dilations=(d, d),
                           group=group, xt=xt, wt=wt, per_channel=i % 3 != 0, mode=MODES[(i // 3) % 4])))
    cases += [
        ("mbv2_dw3x3_s2", dict(c=96, h=14, w=14, m=96, kh=3, strides=(2, 2), pads=(1, 1, 1, 1), group=96)),
        ("mbv2_pw_expand", dict(c=24, h=28, w=28, m=144, kh=1, xt="u8", wt="u8")),
        ("mbv2_classifier_gemv", dict(c=320, h=1, w=1, m=1280, kh=1, xt="s8", wt="s8")),
        ("resnet_3x3", dict(c=64, h=28, w=28, m=64, kh=3, pads=(1, 1, 1, 1), per_channel=False)),
        ("yolo_3x3_s2", dict(c=16, h=52, w=52, m=32, kh=3, strides=(2, 2), pads=(1, 1, 1, 1), xt="s8", wt="s8")),
        ("stem_7x7_s2", dict(c=3, h=33, w=33, m=8, kh=7, strides=(2, 2), pads=(3, 3, 3, 3))),
        ("bigacc", dict(c=520, h=3, w=3, m=8, kh=1, xt="u8", wt="u8", mode="bigacc")),
        # Wide kernels over few channels: the CPU's merged-row mode up to 4096 bytes per row (c <= 4)
        ("wide_kw_c2", dict(c=2, h=5, w=70, m=9, kh=3, kw=41, strides=(1, 3), pads=(1, 5, 1, 2), xt="u8", wt="s8")),
        ("wide_kw_c4_s8", dict(c=4, h=3, w=300, m=17, kh=1, kw=257, strides=(1, 16), xt="s8", wt="s8",
                               mode="saturate")),
        ("wide_kw_c5_not_merged", dict(c=5, h=4, w=40, m=6, kh=2, kw=17, pads=(0, 3, 1, 3))),
    ]
    return cases


TABLE = _table()


def _model(case: dict, dims: int = 2, w_input: bool = False) -> tuple[bytes, np.ndarray]:
    """The one-node model of a conv_case (a 1-D conv when dims is 1; the weights a graph input if w_input)."""
    x, w = case["x"], case["w"]
    if dims == 1:
        x, w = x[:, :, 0], w[:, :, 0]
    consts = {"xs": np.float32(case["x_scale"]), "xz": case["x_zero_point"], "w": w,
              "ws": np.asarray(case["w_scale"], np.float32), "wz": case["w_zero_point"],
              "ys": np.float32(case["y_scale"]), "yz": case["y_zero_point"]}
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if case["bias"] is not None:
        consts["b"], names = case["bias"], names + ["b"]
    inputs = {"x": x}
    if w_input:
        inputs["w"] = consts.pop("w")
    s, p, d = case["strides"][:dims], case["pads"], case["dilations"][:dims]
    p = p if dims == 2 else (p[1], p[3])
    n = node("QLinearConv", names, strides=list(s), pads=list(p), dilations=list(d), group=case["group"],
             kernel_shape=list(w.shape[2:]))
    return model([n], {k: (v.dtype, v.shape) for k, v in inputs.items()}, consts,
                 {"y": case["y_zero_point"].dtype}), x


def _case(cid: str, kw: dict) -> dict:
    kw = {"xt": "u8", "wt": "s8", **kw}
    case = conv_case(np.random.default_rng(sum(map(ord, cid))), **kw)
    if oo.u8s8_behaviour() != oo.EXACT and kw["xt"] == "u8" and kw["wt"] == "s8":
        case["w"] = np.clip(case["w"], -64, 63).astype(np.int8)  # ORT's int16 pairs cannot saturate then
        case["w_zero_point"] = np.clip(case["w_zero_point"], -64, 63).astype(np.int8)
    return case


@pytest.mark.parametrize("cid,kw", TABLE, ids=[c[0] for c in TABLE])
def test_qlinear_conv_equals_ort_on_every_device(cid, kw):
    case = _case(cid, kw)
    blob, x = _model(case)
    peer = not (case["x"].dtype == np.int8 and case["w"].dtype == np.uint8)  # ORT has no s8 x u8 kernel
    check(blob, {"x": x}, ort_run(blob, {"x": x}) if peer else None)


def test_table_reaches_every_vulkan_conv_kernel():
    assert {choose_kernel(conv_spec(**_case(cid, kw))) for cid, kw in TABLE} == set(KERNELS)


def test_qlinear_conv_weights_input_runs_on_the_host_equal_to_ort():
    """Weights that are a graph input (no device packs them ahead): the host."""
    case = _case("weights_input", dict(c=4, h=3, w=9, m=5, kh=3, pads=(1, 1, 1, 1), xt="u8", wt="u8"))
    blob, x = _model(case, w_input=True)
    feed = {"x": x, "w": case["w"]}
    check(blob, feed, ort_run(blob, feed), where="host")


def test_qlinear_conv_1d_equals_ort_on_every_device():
    """A 1-D QLinearConv runs on every device as the 2-D one over a height of 1, with the moves between the forms
    (the full table: tests/ops/test_qlinear_conv1d.py)."""
    case = _case("conv1d", dict(c=4, h=3, w=9, m=5, kh=3, pads=(1, 1, 1, 1), xt="u8", wt="u8"))
    blob, x = _model(case, dims=1)
    sess = check(blob, {"x": x}, ort_run(blob, {"x": x}))
    assert set(sess["cpu"].placement) == {"op_under_test", "op_under_test/unsqueeze", "op_under_test/squeeze"}


@pytest.mark.parametrize("change,culprit", [
    (dict(w_scale=np.full(3, 0.01, np.float32)), "w_scale"),
    (dict(w_scale=np.float32(0)), "w_scale"),
    (dict(x_scale=np.float32(-1)), "x_scale"),
    (dict(bias=np.zeros(3, np.int32)), "bias"),
    (dict(group=3), "group"),
], ids=["w_scale_count", "w_scale_zero", "x_scale_negative", "bias_length", "group"])
def test_bad_qlinear_conv_refused_naming_the_node(change, culprit):
    case = _case("bad", dict(c=4, h=5, w=5, m=6, kh=3))
    case.update(change)
    blob, x = _model(case)
    refused(blob, {"x": x}, culprit)


@pytest.mark.parametrize("k", [32, 33])
def test_a_kernel_past_the_native_taps_runs_on_the_host(k):
    """conv.c takes at most 1024 taps (its pointer tiles are on the stack): a 33x33 kernel (1089) is legal and runs on
    the host of a cpu session, with ORT's bits on every device; device="cpu" used to raise at graph build."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from support.agree import run_devices, sessions

    rng = np.random.default_rng(k)
    w = rng.integers(-3, 4, (2, 1, k, k)).astype(np.int8)
    consts = (("xs", np.float32(0.02)), ("xz", np.uint8(128)), ("w", w), ("ws", np.float32(0.01)), ("wz", np.int8(0)),
              ("ys", np.float32(0.5)), ("yz", np.uint8(128)))
    g = helper.make_graph([helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"],
                                            name="c")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1, k + 3, k + 2])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                          [numpy_helper.from_array(np.asarray(v), n) for n, v in consts])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    x = rng.integers(0, 256, (1, 1, k + 3, k + 2)).astype(np.uint8)
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    run_devices(m, {"x": x}, want=want)
    assert sessions(m, ["cpu"])["cpu"].placement["c"] == ("cpu" if k * k <= 1024 else "host")
