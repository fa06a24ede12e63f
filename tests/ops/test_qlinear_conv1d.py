"""1-D QLinearConv (N, C, L) against ONNX Runtime on every device: the import rewrites it as the 2-D convolution over
a height of 1 between an Unsqueeze and a Squeeze (vkinfer/reference/qlinear_conv.py conv1d_as_2d), which the devices
run natively; the reference computes it directly (the node kernel on the 3-D tensors). The table crosses kernel x
stride x dilation x pads x auto_pad x group with odd and even lengths and every ORT type pair, plus the layers of
openWakeWord's melspectrogram (a Conv1d-as-STFT: one channel, a 400-tap kernel, stride 160) and a QDQ Conv1d.
"""

from __future__ import annotations

import numpy as np
import pytest
from support import ort_oracle as oo
from support.cases import conv_case

from vkinfer.model.graph import Node
from vkinfer.model.interpreter import Memo
from vkinfer.model.op_table import OPS

from ._build import NAME, check, cross, model, node, ort_run

PLACED = [NAME, f"{NAME}/unsqueeze", f"{NAME}/squeeze"]


def _table() -> list[tuple]:
    """(id, (N, C, L), (M, C/group, k), attrs, (x type, w type))."""
    types = [("u8", "u8"), ("s8", "s8"), ("u8", "s8")]
    modes = ["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]
    cases = []
    for i, c in enumerate(cross(k=[1, 2, 3, 5], s=[1, 2, 3], mode=modes)):
        k, s, mode = c["k"], c["s"], c["mode"]
        d = 2 if i % 3 == 2 and k > 1 and not mode.startswith("SAME") else 1
        group = [1, 1, 2, 4][i % 4]
        ch = 4 * (1 + i % 3)
        length = (k - 1) * d + 6 + i % 4  # odd and even lengths: odd and even total pads
        a = dict(strides=[s], dilations=[d], group=group, auto_pad=mode)
        if mode == "NOTSET":
            a["pads"] = [[0, 0], [k // 2, k // 2], [k - 1, 0], [0, (k + 1) // 2]][i % 4]
        m = group * (1 + i % 5)
        cases.append((f"k{k}s{s}d{d}g{group}_{mode}_L{length}", (1 + i % 2, ch, length), (m, ch // group, k), a,
                      types[i % 3]))
    cases += [
        ("melspec_stft", (1, 1, 1760), (257, 1, 400), dict(strides=[160]), ("u8", "u8")),
        ("depthwise_k7", (1, 16, 50), (16, 1, 7), dict(group=16, pads=[3, 3]), ("s8", "s8")),
        ("pointwise_m1", (2, 9, 13), (1, 9, 1), {}, ("u8", "s8")),
    ]
    return cases


TABLE = _table()


def _case(cid, xs, ws, attrs, types) -> dict:
    (n, c, length), (m, _, k) = xs, ws
    case = conv_case(np.random.default_rng(sum(map(ord, cid))), n=n, c=c, h=1, w=length, m=m, kh=1, kw=k,
                     group=int(attrs.get("group", 1)), xt=types[0], wt=types[1])
    if oo.u8s8_behaviour() != oo.EXACT and types == ("u8", "s8"):  # ORT's int16 pairs cannot saturate then
        case["w"] = np.clip(case["w"], -64, 63).astype(np.int8)
        case["w_zero_point"] = np.clip(case["w_zero_point"], -64, 63).astype(np.int8)
    case["x"], case["w"] = case["x"][:, :, 0], case["w"][:, :, 0]
    return case


def _blob(case, attrs) -> bytes:
    consts = {"xs": np.float32(case["x_scale"]), "xz": case["x_zero_point"], "w": case["w"],
              "ws": np.asarray(case["w_scale"], np.float32), "wz": case["w_zero_point"],
              "ys": np.float32(case["y_scale"]), "yz": case["y_zero_point"]}
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if case["bias"] is not None:
        consts["b"], names = case["bias"], names + ["b"]
    return model([node("QLinearConv", names, kernel_shape=[case["w"].shape[2]], **attrs)],
                 {"x": (case["x"].dtype, case["x"].shape)}, consts, {"y": case["y_zero_point"].dtype})


@pytest.mark.parametrize("cid,xs,ws,attrs,types", TABLE, ids=[c[0] for c in TABLE])
def test_qlinear_conv1d_equals_ort_on_every_device(cid, xs, ws, attrs, types):
    case = _case(cid, xs, ws, attrs, types)
    blob = _blob(case, attrs)
    feed = {"x": case["x"]}
    sessions = check(blob, feed, ort_run(blob, feed))
    assert sorted(sessions["cpu"].placement) == sorted(PLACED)  # the conv and its two moves, all native


@pytest.mark.parametrize("cid,xs,ws,attrs,types", TABLE[::7], ids=[c[0] for c in TABLE[::7]])
def test_reference_kernel_computes_1d_directly(cid, xs, ws, attrs, types):
    """The node kernel on the 3-D tensors themselves (the definition, without the import's rewrite) equals ORT."""
    case = _case(cid, xs, ws, attrs, types)
    blob = _blob(case, attrs)
    want = ort_run(blob, {"x": case["x"]})[0]
    args = [case["x"], np.float32(case["x_scale"]), case["x_zero_point"], case["w"],
            np.asarray(case["w_scale"], np.float32), case["w_zero_point"], np.float32(case["y_scale"]),
            case["y_zero_point"]] + ([case["bias"]] if case["bias"] is not None else [])
    n = Node("QLinearConv", NAME, [f"i{j}" for j in range(len(args))], ["y"], dict(attrs))
    got = OPS["QLinearConv"](n, args, Memo().node(type("G", (), {"consts": {}})(), n))[0]
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_qdq_conv1d_equals_ort():
    """DequantizeLinear -> Conv (1-D) -> QuantizeLinear, which ORT fuses into its QLinearConv."""
    case = _case("qdq1d", (1, 4, 33), (6, 4, 5), {}, ("u8", "s8"))
    case["w"] = np.clip(case["w"], -64, 63).astype(np.int8)
    nodes = [node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dqx"),
             node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], name="dqw", axis=0),
             node("Conv", ["xf", "wf"], ["yf"], strides=[2], pads=[2, 1]),
             node("QuantizeLinear", ["yf", "ys", "yz"], ["y"], name="qy")]
    consts = {"xs": np.float32(case["x_scale"]), "xz": case["x_zero_point"], "w": case["w"],
              "ws": np.asarray(case["w_scale"], np.float32), "wz": np.zeros(6, np.int8),
              "ys": np.float32(case["y_scale"]), "yz": np.uint8(case["y_zero_point"])}
    blob = model(nodes, {"x": (np.uint8, case["x"].shape)}, consts, {"y": np.uint8})
    feed = {"x": case["x"]}
    check(blob, feed, ort_run(blob, feed, optimize=True), nodes=PLACED)
