"""float32 Conv (vkinfer/reference/float_conv.py, vkinfer/cpu/float_matmul.py, cpu_fallback/src/ops/float_gemm.c in
convolution mode) against ONNX Runtime's CPU EP (one intra-op thread, nodes as written) bit for bit on every device,
the node asserted to run on the cpu device in cpu and vulkan sessions; and the float_gemm operator (MatMul, Gemm and
Conv forms, AVX-512 and portable loops) under AddressSanitizer + UBSan against the numpy definition.

The geometries reach every algorithm MlasConvPrepare picks (pointwise direct GEMM, the full expansion when there are
more filters than output positions, the segmented expansion) and both K-block shapes (K beyond 128 with a wide output,
K grown to 1024 with a narrow one), groups, depthwise (one filter per group: MLAS's M = 1 AVX kernel), dilations,
strides, asymmetric pads, auto_pad, 1-D kernels, with and without a bias. Two shapes take MLAS's transposed-B dot
product, not reproduced (bounded: `test_dot_product_shapes_bound`); ORT_ENABLE_ALL's NCHWc rewrite is bounded too
(`test_nchwc_rewrite_bound`); 3-D convolutions and computed weights run on the host (the definition), exact."""

from __future__ import annotations

import numpy as np
import pytest
from support.agree import run_devices
from support.cpu_build import run_both_builds

import vkinfer
from vkinfer.reference import float_conv as fc
from vkinfer.reference._auto_pad import conv_pads

from ._build import NAME, model, node, ort_run
from .test_float_matmul import data

F32 = np.float32


def _blob(nodes, inputs: dict, consts: dict) -> bytes:
    consts = {**consts, "qs": F32(0.5)}
    return model([*nodes, node("DequantizeLinear", ["q", "qs"], ["qf"], name="dq")],
                 {**{k: (F32, v.shape) for k, v in inputs.items()}, "q": (np.uint8, (4,))}, consts,
                 {"y": F32, "qf": F32})


def _conv_blob(x, w, b, attrs, const_w: bool = True) -> tuple[bytes, dict]:
    ins = ["x", "w"] + (["b"] if b is not None else [])
    consts = {} if b is None else {"b": b}
    inputs = {"x": x}
    (consts if const_w else inputs)["w"] = w
    feed = {**inputs, "q": np.arange(4, dtype=np.uint8)}
    return _blob([node("Conv", ins, ["y"], **attrs)], inputs, consts), feed


def _plan(x, w, attrs):
    n = type("N", (), {"attrs": attrs})()
    r = x.ndim - 2
    pads = conv_pads(n, x.shape, w.shape)
    return fc.conv_plan(x.shape, w.shape, attrs.get("group", 1), attrs.get("strides", [1] * r), pads,
                        attrs.get("dilations", [1] * r))


# (x shape, w shape, attributes)
CONV = [((1, 8, 9, 9), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1])),
        ((2, 6, 7, 5), (6, 1, 3, 3), dict(group=6, pads=[1, 0, 1, 2], strides=[2, 1])),
        ((1, 64, 6, 6), (32, 64, 3, 3), {}),
        ((1, 300, 4, 4), (8, 300, 1, 1), {}),
        ((1, 3, 20, 20), (4, 3, 5, 5), dict(dilations=[2, 2], pads=[2, 2, 2, 2])),
        ((1, 4, 9, 9), (1, 4, 3, 3), {}),
        ((1, 1, 6, 6), (4, 1, 3, 6), {}),
        ((1, 4, 30), (6, 4, 5), dict(pads=[2, 2])),
        ((2, 4, 31), (4, 2, 3), dict(group=2, strides=[2], dilations=[3], pads=[1, 4])),
        ((1, 16, 40, 40), (16, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
        ((1, 3, 8, 8), (5, 3, 3, 3), dict(auto_pad="SAME_UPPER")),
        ((1, 3, 9, 8), (5, 3, 2, 3), dict(auto_pad="SAME_LOWER", strides=[2, 2])),
        ((1, 3, 9, 8), (5, 3, 2, 3), dict(auto_pad="VALID")),
        ((1, 9, 5, 5), (3, 3, 1, 1), dict(group=3, strides=[2, 2])),
        ((1, 130, 5, 5), (7, 130, 3, 3), {}),
        ((1, 2, 40, 40), (1, 2, 3, 3), dict(pads=[1, 1, 1, 1])),
        ((1, 600, 2, 2), (5, 600, 1, 1), {}),
        ((1, 40, 12, 12), (40, 1, 3, 3), dict(group=40, pads=[1, 1, 1, 1], strides=[2, 2])),
        ((1, 24, 9, 9), (48, 12, 3, 3), dict(group=2, pads=[0, 1, 2, 1])),
        ((1, 200, 11, 11), (3, 200, 3, 3), dict(pads=[1, 1, 1, 1]))]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("case", CONV, ids=[f"{x}{w}{a}" for x, w, a in CONV])
def test_conv_matches_ort(case, bias):
    xs, ws, attrs = case
    assert not _plan(np.zeros(xs, F32), np.zeros(ws, F32), attrs)[1], "a dot-product shape: see the bound test"
    rng = np.random.default_rng(sum(xs) + 3 * sum(ws))
    x, w = data(rng, xs), data(rng, ws)
    b = data(rng, (ws[0],)) if bias else None
    blob, feed = _conv_blob(x, w, b, attrs)
    run_devices(blob, feed, want=ort_run(blob, feed))
    for dev in ("cpu", "vulkan"):
        assert vkinfer.InferenceSession(blob, device=dev).placement[NAME] == "cpu"


def test_m1_and_blocked_orders_are_distinguished():
    """Depthwise (M = 1 kernel, unfused groups of 4) and a wide K (blocks of 128): the other order fails on each."""
    rng = np.random.default_rng(11)
    for xs, ws, g, other in (((1, 2, 40, 40), (1, 2, 3, 3), 1, 1024), ((1, 16, 40, 40), (16, 16, 3, 3), 1, 1024)):
        x, w = data(rng, xs), data(rng, ws)
        blob, feed = _conv_blob(x, w, None, dict(group=g, pads=[1, 1, 1, 1]))
        want = ort_run(blob, feed)[0]
        assert np.array_equal(fc.conv(x, w, None, group=g, pads=[1, 1, 1, 1]).view(np.int32), want.view(np.int32))
        col = fc.im2col(x, ws[2:], [1, 1], [1, 1, 1, 1], [1, 1], xs[2:]).reshape(1, g, -1, xs[2] * xs[3])
        alt = fc.sgemm(w.reshape(1, g, ws[0] // g, -1), col, other).reshape(want.shape)
        assert not np.array_equal(alt.view(np.int32), want.view(np.int32))


# MLAS's transposed-B dot product (one output position with several filters; one filter per group whose kernel spans
# the input width): measured at most 4.5 ulps of the largest |partial sum| over these shapes, 6 seeds each; pinned with
# margin.
DOT_BOUND_ULPS = 8


@pytest.mark.parametrize("case", [((1, 8, 3, 3), (16, 8, 3, 3), {}), ((1, 2, 6, 6), (2, 1, 3, 6), dict(group=2)),
                                  ((1, 130, 3, 3), (7, 130, 3, 3), {}), ((1, 600, 1, 1), (9, 600, 1, 1), {})])
def test_dot_product_shapes_bound(case):
    xs, ws, attrs = case
    assert _plan(np.zeros(xs, F32), np.zeros(ws, F32), attrs)[1]
    rng = np.random.default_rng(12)
    x, w = data(rng, xs), data(rng, ws)
    blob, feed = _conv_blob(x, w, None, attrs)
    got = run_devices(blob, feed)[0]  # the devices agree (the definition's blocked order)
    want = ort_run(blob, feed)[0]
    scale = fc.conv(np.abs(x), np.abs(w), None, group=attrs.get("group", 1)).astype(np.float64)
    ulps = np.abs(got.astype(np.float64) - want) / np.spacing(scale.astype(F32)).astype(np.float64)
    assert ulps.max() <= DOT_BOUND_ULPS, ulps.max()
    assert vkinfer.InferenceSession(blob, device="cpu").placement[NAME] == "cpu"


# ORT_ENABLE_ALL rewrites a float Conv with constant weights into NCHWc (channel blocks of the CPU's vector width, its
# own tap order): not followed (ORT's own bits differ between AVX2 and AVX-512 machines). Measured on this AVX-512
# machine: at most 8 ulps of the largest |partial sum| (these shapes and a strided one, 6 seeds each); pinned with
# margin.
NCHWC_BOUND_ULPS = 16


@pytest.mark.parametrize("case", [((1, 16, 20, 20), (32, 16, 3, 3), dict(pads=[1, 1, 1, 1])),
                                  ((1, 64, 6, 6), (32, 64, 3, 3), {}), ((1, 300, 4, 4), (8, 300, 1, 1), {})])
def test_nchwc_rewrite_bound(case):
    xs, ws, attrs = case
    rng = np.random.default_rng(13)
    x, w = data(rng, xs), data(rng, ws)
    blob, feed = _conv_blob(x, w, None, attrs)
    got = run_devices(blob, feed, want=ort_run(blob, feed))[0]
    opt = ort_run(blob, feed, optimize=True)[0]
    scale = fc.conv(np.abs(x), np.abs(w), None, pads=attrs.get("pads")).astype(np.float64)
    ulps = np.abs(got.astype(np.float64) - opt) / np.spacing(scale.astype(F32)).astype(np.float64)
    assert ulps.max() <= NCHWC_BOUND_ULPS, ulps.max()


@pytest.mark.parametrize("case", [("3d", (1, 2, 4, 5, 6), (3, 2, 2, 2, 3), True), ("computed_w", (1, 3, 7, 7),
                                                                                   (4, 3, 3, 3), False)])
def test_host_forms_are_exact(case):
    """3-D kernels and computed weights stay on the host: the definition, exact against ORT."""
    _, xs, ws, const_w = case
    rng = np.random.default_rng(14)
    x, w = data(rng, xs), data(rng, ws)
    blob, feed = _conv_blob(x, w, data(rng, (ws[0],)), {}, const_w=const_w)
    if not const_w:
        feed["w"] = w
    run_devices(blob, feed, want=ort_run(blob, feed))
    assert vkinfer.InferenceSession(blob, device="cpu").placement[NAME] == "host"


def test_kernel_shape_mismatch_refused():
    x, w = np.zeros((1, 3, 5, 5), F32), np.zeros((4, 3, 3, 3), F32)
    n = type("N", (), {"attrs": {"kernel_shape": [2, 2]}})()
    with pytest.raises(ValueError, match="kernel_shape"):
        fc.kernel(n, [x, w], {})
    with pytest.raises(TypeError, match="float32"):
        fc.conv(x.astype(np.float64), w, None)


DRIVER = r"""
import os
import sys

if sys.argv[2] == "scalar":
    os.environ["VKINFER_CPU_ISA"] = "scalar"
import numpy as np
from vkinfer.cpu import graph as G
from vkinfer.cpu.float_matmul import lower_float_conv, lower_float_gemm, lower_float_matmul
from vkinfer.model.graph import Graph, Node
from vkinfer.model.lowering import Ctx

F = np.float32
rng = np.random.default_rng(3)


def vals(shape):
    v = rng.standard_normal(shape) * rng.choice([1.0, 1e3, 1e-3], shape)
    return np.where(rng.random(shape) < 0.05, -0.0, v).astype(F)


def odd(a):
    raw = np.zeros(a.nbytes + 1, np.uint8)
    v = np.frombuffer(raw, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    v[...] = a
    return v


CASES = [
    ("mm_act", lower_float_matmul, "MatMul", {}, {"a": vals((3, 300)), "b": vals((300, 70))}, {}, (3, 70)),
    ("mm_const", lower_float_matmul, "MatMul", {}, {"a": vals((2, 3, 260))}, {"b": vals((260, 9))}, (2, 3, 9)),
    ("mm_m1", lower_float_matmul, "MatMul", {}, {"a": vals((1, 301)), "b": vals((301, 67))}, {}, (1, 67)),
    ("mm_batch", lower_float_matmul, "MatMul", {}, {"a": vals((2, 1, 4, 70)), "b": vals((1, 3, 70, 9))}, {},
     (2, 3, 4, 9)),
    ("gemm", lower_float_gemm, "Gemm", {"transA": 1, "transB": 1, "alpha": 0.3, "beta": 0.7},
     {"a": vals((130, 5)), "b": vals((66, 130)), "c": vals((5, 1))}, {}, (5, 66)),
    ("gemm_c", lower_float_gemm, "Gemm", {"transB": 1}, {"a": vals((4, 20))}, {"b": vals((7, 20)), "c": vals((7,))},
     (4, 7)),
    ("conv", lower_float_conv, "Conv", {"group": 2, "pads": [1, 0, 1, 2], "strides": [2, 1]}, {"x": vals((2, 8, 9, 9))},
     {"w": vals((16, 4, 3, 3)), "b": vals((16,))}, (2, 16, 5, 9)),
    ("dw", lower_float_conv, "Conv", {"group": 6, "pads": [1, 1, 1, 1]}, {"x": vals((1, 6, 10, 70))},
     {"w": vals((6, 1, 3, 3))}, (1, 6, 10, 70)),
    ("conv1d", lower_float_conv, "Conv", {"pads": [2, 2], "dilations": [2]}, {"x": vals((1, 4, 30))},
     {"w": vals((6, 4, 5))}, (1, 6, 26)),
]
outs = {}
for name, fn, op, attrs, ins, consts, out_shape in CASES:
    names = list(ins) + list(consts)
    info = {k: (v.shape, v.dtype) for k, v in {**ins, **consts}.items()}
    info["y"] = (out_shape, np.dtype(F))
    lay = fn(Ctx(Graph([], [], [], dict(consts)), info), Node(op, "n", names, ["y"], attrs), "cpu")
    assert lay is not None, name
    arrays = [odd({**ins, **consts}[t]) for t in lay.acts]
    y = odd(np.zeros(out_shape, F))
    ng = G.NativeGraph(0, [a.nbytes for a in arrays] + [y.nbytes])
    refs = [G.Ref(k + 1, 0, a.nbytes) for k, a in enumerate(arrays)]
    lay.build()(ng, refs, G.Ref(len(arrays) + 1, 0, y.nbytes), None)
    ng.run(arrays + [y])
    outs[name] = np.array(y)
    for k, v in {**ins, **consts}.items():
        outs[f"{name}:{k}"] = v
np.savez(sys.argv[1], **outs)
print("float_gemm ok")
print(f"library: {G.lib()._name}")
"""

KERNELS = {"mm_act": "MatMul", "mm_const": "MatMul", "mm_m1": "MatMul", "mm_batch": "MatMul", "gemm": "Gemm",
           "gemm_c": "Gemm", "conv": "Conv", "dw": "Conv", "conv1d": "Conv"}
ATTRS = {"gemm": {"transA": 1, "transB": 1, "alpha": 0.3, "beta": 0.7}, "gemm_c": {"transB": 1},
         "conv": {"group": 2, "pads": [1, 0, 1, 2], "strides": [2, 1]}, "dw": {"group": 6, "pads": [1, 1, 1, 1]},
         "conv1d": {"pads": [2, 2], "dilations": [2]}}
CONST = {"mm_const": ["b"], "gemm_c": ["b", "c"], "conv": ["w", "b"], "dw": ["w"], "conv1d": ["w"]}


@pytest.mark.parametrize("isa", ["native", "scalar"])
def test_float_gemm_under_asan(tmp_path, isa):
    """Every float_gemm form (MatMul packed / unpacked / M = 1 / batched, Gemm with transposes and C, Conv grouped,
    depthwise, 1-D), lowered as the session lowers it, on buffers at odd addresses, under the sanitizer build and the
    normal one, with the AVX-512 tile (native) and the portable loops (scalar): every output equals the numpy
    definition bit for bit."""
    from vkinfer.reference import float_matmul as fm

    asan, plain = run_both_builds(DRIVER, tmp_path, "float_gemm ok", (isa,))
    for name, op in KERNELS.items():
        ins = {k.split(":")[1]: v for k, v in plain.items() if k.startswith(f"{name}:")}
        n = type("N", (), {"attrs": ATTRS.get(name, {})})()
        order = ["x", "w", "b"] if op == "Conv" else ["a", "b", "c"]
        x = [ins[k] for k in order if k in ins]
        memo = {"static": all(k in CONST.get(name, []) for k in order[1:] if k in ins)}
        want = {"MatMul": fm.matmul_kernel, "Gemm": fm.gemm_kernel, "Conv": fc.kernel}[op](n, x, memo)[0]
        for tag, got in (("asan", asan[name]), ("plain", plain[name])):
            assert got.shape == want.shape and np.array_equal(got.view(np.int32), want.view(np.int32)), (name, tag)
