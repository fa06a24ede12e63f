"""com.microsoft QGemm (a 1x1 convolution over rows: vkinfer/cpu/qlinear_conv.py, vulkan/qlinear_conv.py) and
its fused form vkinfer:QGemmClamp against ONNX Runtime on every device, which must run the node itself: transB 0
and 1, bias C present or not, per-tensor and per-column B parameters, u8 x u8 / u8 x s8 / s8 x s8, odd M, K, N
(M < 8: the GEMV kernel), a classifier's shape. transA=1 becomes an 8-bit Transpose plus a QGemm
(tests/numerics/test_quant_ops.py). QGemmClamp comes from a QGemm whose 8-bit output a Clip or Relu narrows (QOperator):
ORT runs QGemm then the Clip on the bytes, which vkinfer fuses into the GEMM's clamp.

ORT's u8 x s8 kernel saturates int16 pair sums on x86 without VNNI (tests/support/ort_oracle.py): there, u8 x s8
weights are drawn 7-bit."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from support import ort_oracle as oo

from ._build import check, model, node, ort_run, qrand, qrange, refused

T = {"u8": np.uint8, "s8": np.int8}
TABLE = [  # (id, M, K, N, (a type, b type), transB, bias, per_column)
    (f"m{m}k{k}n{n}-{a}{b}-t{tb}{'-bias' if bias else ''}{'-pc' if pc else ''}", m, k, n, (a, b), tb, bias, pc)
    for i, (m, k, n) in enumerate([(1, 17, 5), (3, 8, 9), (7, 33, 1), (9, 64, 40), (16, 5, 3), (33, 15, 17)])
    for a, b in [[("u8", "u8"), ("u8", "s8"), ("s8", "s8")][i % 3]]
    for tb, bias, pc in [(i % 2, i % 3 != 2, i % 4 < 2)]
] + [("classifier", 1, 1280, 1000, ("u8", "s8"), 1, True, True)]


def _model(cid, m, k, n, types, trans_b, bias, per_column, clip=None, change=None):
    rng = np.random.default_rng(sum(map(ord, cid)))
    at, bt = T[types[0]], T[types[1]]
    seven = oo.u8s8_behaviour() != oo.EXACT and types == ("u8", "s8")
    b = qrand(rng, (n, k) if trans_b else (k, n), bt)
    if seven:
        b = np.clip(b, -64, 63).astype(np.int8)
    pshape = (n,) if per_column else ()
    bs = rng.uniform(0.001, 0.02, pshape).astype(np.float32)
    bz = rng.integers(*(qrange(bt) if not seven else (-64, 63)), pshape).astype(bt) if bt == np.uint8 or seven \
        else np.zeros(pshape, bt)
    consts = {"as": np.float32(0.02), "az": np.asarray(qrand(rng, (), at)), "b": b, "bs": bs, "bz": bz,
              "c": rng.integers(-20000, 20000, n).astype(np.int32), "ys": np.float32(np.sqrt(k) * 1.2 * bs.mean()),
              "yz": np.asarray(qrand(rng, (), at))} | (change or {})
    ins = ["a", "as", "az", "b", "bs", "bz", "c" if bias else "", "ys", "yz"]
    nodes = [node("QGemm", ins, ["g"] if clip else ["y"], domain="com.microsoft", transB=trans_b)]
    if clip is not None:
        lo, hi = clip
        consts |= {"lo": np.asarray(lo, at)} | ({} if hi is None else {"hi": np.asarray(hi, at)})
        nodes.append(node("Clip", ["g", "lo"] + ([] if hi is None else ["hi"]), name="clip"))
    blob = model(nodes, {"a": (at, (m, k))}, consts, {"y": at})
    return blob, {"a": qrand(rng, (m, k), at)}


@pytest.mark.parametrize("cid,m,k,n,types,trans_b,bias,per_column", TABLE, ids=[c[0] for c in TABLE])
def test_qgemm_equals_ort_on_every_device(cid, m, k, n, types, trans_b, bias, per_column):
    blob, feed = _model(cid, m, k, n, types, trans_b, bias, per_column)
    check(blob, feed, ort_run(blob, feed))


@pytest.mark.parametrize("types,clip", [(("u8", "u8"), (20, 200)), (("u8", "s8"), (60, None)),
                                        (("s8", "s8"), (-100, 50)), (("s8", "s8"), (0, None))],
                         ids=["u8_clip_both", "u8_clip_low", "s8_clip_both", "s8_relu_like"])
def test_qgemm_clamp_equals_ort_on_every_device(types, clip):
    """QGemm -> Clip on its 8-bit output becomes one vkinfer:QGemmClamp node, on the device."""
    blob, feed = _model(f"clamp{clip}", 5, 24, 7, types, 1, True, True, clip=clip)
    per_device = check(blob, feed, ort_run(blob, feed))
    assert [nd.op for nd in per_device["reference"].graph.nodes] == ["vkinfer:QGemmClamp"]


@pytest.mark.parametrize("change,culprit", [
    (dict(bs=np.float32(0)), "scale"),
    (dict(bs=np.full(3, 0.01, np.float32)), "scale|shape|column"),
    (dict(c=np.zeros(4, np.int32)), "broadcast"),
    (dict(b=np.zeros((9, 6), np.uint8)), "shape|K|match"),
], ids=["b_scale_zero", "b_scale_count", "bias_length", "k_mismatch"])
def test_bad_qgemm_refused_naming_the_node(change, culprit):
    blob, feed = _model("bad", 3, 8, 5, ("u8", "u8"), 0, True, False, change=change)
    refused(blob, feed, culprit)


def test_qgemm_alpha_refused_naming_the_node():
    blob, feed = _model("alpha", 3, 8, 5, ("u8", "u8"), 0, True, False)
    m = onnx.load_model_from_string(blob)
    m.graph.node[0].attribute.append(onnx.helper.make_attribute("alpha", 0.5))
    refused(m.SerializeToString(), feed, "alpha")
