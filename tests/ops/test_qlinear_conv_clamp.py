"""vkinfer:QLinearConvClamp: a QLinearConv whose 8-bit output a Clip (or an int8 Relu) narrows, fused into the
convolution's clamp (vkinfer/model/passes.py), tested through the models that fuse: QOperator QLinearConv ->
Clip / Relu (ORT runs the conv, then the Clip on the bytes: exact) and a QDQ Conv -> Relu -> Q whose Relu matters
(y zero point above the type's minimum; ORT's exact form of it is the same graph with a Q -> DQ pair at the output
parameters before the Relu, tests/importers/test_onnx_extras.py). Bounds at both ends, one end, a Clip of a Clip;
kernels 1 and 3, depthwise, u8 and s8; the node must run on the session's device."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import INT8_QDQ, check, model, node, ort_run, qrand, qrange, refused

TABLE = [  # (id, dtype, bounds (lo, hi; None: none), relu, kernel, group, channels)
    ("u8_clip_both_k3", np.uint8, (20, 200), False, 3, 1, 4),
    ("u8_clip_high_k1", np.uint8, (None, 100), False, 1, 1, 5),
    ("s8_relu_k3", np.int8, None, True, 3, 1, 3),
    ("s8_clip_both_dw", np.int8, (-100, 50), False, 3, "dw", 8),
    ("u8_clip_of_clip", np.uint8, (30, 220), False, 3, 1, 6),
]


def _qop(cid, dt, bounds, relu, k, group, c, change=None):
    rng = np.random.default_rng(sum(map(ord, cid)))
    lo, _ = qrange(dt)
    g = c if group == "dw" else group
    consts = {"xs": np.float32(0.03), "xz": np.asarray(lo + 100, dt),
              "w": rng.integers(-60, 61, (c, c // g, k, k)).astype(np.int8), "ws": np.float32(0.02),
              "wz": np.asarray(0, np.int8), "ys": np.float32(0.02), "yz": np.asarray(lo + 90, dt)} | (change or {})
    nodes = [node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["c"], pads=[k // 2] * 4, group=g)]
    if relu:
        nodes.append(node("Relu", ["c"], ["y"], name="act"))
    else:
        ins = ["c", "", ""]
        for j, v, name in ((1, bounds[0], "lo"), (2, bounds[1], "hi")):
            if v is not None:
                consts[name], ins[j] = np.asarray(v, dt), name
        two = cid.endswith("clip_of_clip")
        nodes.append(node("Clip", ins, ["y1" if two else "y"], name="act"))
        if two:
            consts["lo2"] = np.asarray(bounds[0] + 30, dt)
            nodes.append(node("Clip", ["y1", "lo2"], ["y"], name="act2"))
    blob = model(nodes, {"x": (dt, (1, c, 7, 6))}, consts, {"y": dt}, opset=14)
    return blob, {"x": qrand(rng, (1, c, 7, 6), dt)}


@pytest.mark.parametrize("cid,dt,bounds,relu,k,group,c", TABLE, ids=[t[0] for t in TABLE])
def test_qoperator_conv_clip_fuses_and_equals_ort(cid, dt, bounds, relu, k, group, c):
    blob, feed = _qop(cid, dt, bounds, relu, k, group, c)
    want = ort_run(blob, feed)
    assert len(np.unique(want[0])) > 10  # the clamp acts on a spread of values, not on a constant
    per_device = check(blob, feed, want)
    assert [n.op for n in per_device["reference"].graph.nodes] == ["vkinfer:QLinearConvClamp"]


def _qdq(dt, mid: bool):
    """x -> DQ -> Conv 3x3 (DQ weights, int32 bias) [-> Q -> DQ] -> Relu -> Q(0.05, lo + 10)."""
    rng = np.random.default_rng(5)
    lo, _ = qrange(dt)
    consts = {"xs": np.float32(0.02), "xz": np.asarray(lo + 128 if dt == np.uint8 else 3, dt),
              "w": rng.integers(-60, 61, (8, 4, 3, 3)).astype(np.int8), "ws": np.float32(0.01),
              "wz": np.asarray(0, np.int8), "b": rng.integers(-3000, 3000, 8).astype(np.int32),
              "bs": np.float32(0.0002), "ys": np.float32(0.05), "yz": np.asarray(lo + 10, dt)}
    nodes = [node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dqx"),
             node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], name="dqw"),
             node("DequantizeLinear", ["b", "bs"], ["bf"], name="dqb"),
             node("Conv", ["xf", "wf", "bf"], ["c"], pads=[1, 1, 1, 1], name="conv")]
    src = "c"
    if mid:
        nodes += [node("QuantizeLinear", ["c", "ys", "yz"], ["cq"], name="qm"),
                  node("DequantizeLinear", ["cq", "ys", "yz"], ["cd"], name="dqm")]
        src = "cd"
    nodes += [node("Relu", [src], ["r"], name="relu"), node("QuantizeLinear", ["r", "ys", "yz"], ["y"], name="q")]
    blob = model(nodes, {"x": (dt, (1, 4, 6, 6))}, consts, {"y": dt})
    return blob, {"x": qrand(rng, (1, 4, 6, 6), dt)}


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_qdq_conv_relu_fuses_and_equals_ort_exact_form(dt):
    blob, feed = _qdq(dt, mid=False)
    exact_blob, _ = _qdq(dt, mid=True)
    want = ort_run(exact_blob, feed, optimize=True, config=INT8_QDQ)
    for b in (blob, exact_blob):
        per_device = check(b, feed, want)
        assert [n.op for n in per_device["reference"].graph.nodes] == ["vkinfer:QLinearConvClamp"]


def test_bad_fused_conv_refused_naming_the_conv():
    """The fused node keeps the convolution's name and its checks (a zero weight scale)."""
    blob, feed = _qop("bad", np.uint8, (20, 200), False, 3, 1, 4, change={"ws": np.float32(0)})
    refused(blob, feed, "w_scale")
