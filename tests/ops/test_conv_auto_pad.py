"""auto_pad (NOTSET, VALID, SAME_UPPER, SAME_LOWER; vkinfer/reference/_auto_pad.py) on QLinearConv, the QDQ Conv,
ConvInteger and QLinearAveragePool against ONNX Runtime on every device (MaxPool: tests/ops/test_max_pool.py).

The table crosses mode x kernel x stride x dilation with odd and even sizes, so total pads come out even, odd and
negative (a stride larger than the kernel: ORT's negative tail, and with stride >= kernel + 2 a negative head, which
shifts the windows). Static shapes give every device explicit pads (the import resolves them); a negative head stays
with the reference, so the node runs on the host, as the test's own copy of ORT's rule (`_need`) predicts. Bad
auto_pad values and SAME with a dilation (ORT refuses it for convolutions) are ValueErrors naming the node.
"""

from __future__ import annotations

import numpy as np
import pytest
from support import ort_oracle as oo
from support.cases import conv_case

from vkinfer.reference import _auto_pad

from ._build import QTYPES, check, cross, model, node, ort_run, qrand, refused

MODES = ["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"]


def _head(mode: str, n: int, k: int, s: int, pool: bool = False) -> int:
    """ORT's head pad on one axis (conv_attributes.h / pool_attributes.h), written out here independently; a
    convolution's negative total splits as one larger would (what ORT 1.31 computes: `test_negative_totals`)."""
    if mode in ("NOTSET", "VALID"):
        return 0
    need = (-(-n // s) - 1) * s + k - n
    need += 1 if need < 0 and not pool else 0
    v = need + 1 if mode == "SAME_LOWER" else need
    return int(v / 2)  # C++ division: toward zero


def _conv_table() -> list[tuple]:
    """(id, x shape, w shape, attrs, (x type, w type))."""
    types = [("u8", "u8"), ("s8", "s8"), ("u8", "s8")]
    cases = []
    for i, c in enumerate(cross(mode=MODES, k=[1, 2, 3], s=[1, 2, 3])):
        mode, k, s = c["mode"], c["k"], c["s"]
        d = 2 if mode in ("NOTSET", "VALID") and k > 1 and i % 3 == 0 else 1
        kw = k + 1 if i % 4 == 1 else k  # an asymmetric kernel now and then
        h, w = 7 + 2 * (i % 2) + k * d, 8 + i % 3 + kw * d  # odd and even sizes: odd and even total pads
        a = dict(auto_pad=mode, strides=[s, s], dilations=[d, d])
        if mode == "NOTSET":
            a["pads"] = [k // 2, 0, (k - 1) // 2, kw - 1]
        cases.append((f"{mode}_k{k}x{kw}_s{s}_d{d}_{h}x{w}", (1, 3 + i % 3, h, w), (5, 3 + i % 3, k, kw), a,
                      types[i % 3]))
    cases += [  # negative pads: the tail (native), the head (host: shifted windows)
        ("SAME_UPPER_1x1_s2_even", (1, 4, 8, 10), (6, 4, 1, 1), dict(auto_pad="SAME_UPPER", strides=[2, 2]),
         ("u8", "u8")),
        ("SAME_LOWER_1x1_s3_tail", (1, 4, 9, 6), (6, 4, 1, 1), dict(auto_pad="SAME_LOWER", strides=[3, 3]),
         ("s8", "s8")),
        ("SAME_UPPER_1x1_s4_head", (1, 4, 7, 8), (6, 4, 1, 1), dict(auto_pad="SAME_UPPER", strides=[4, 4]),
         ("u8", "u8")),
        ("SAME_LOWER_1x2_s5_head", (1, 2, 10, 10), (3, 2, 1, 2), dict(auto_pad="SAME_LOWER", strides=[5, 5]),
         ("u8", "u8")),
        ("SAME_UPPER_group", (1, 6, 9, 10), (6, 2, 3, 3), dict(auto_pad="SAME_UPPER", strides=[2, 2], group=3),
         ("u8", "u8")),
        ("SAME_LOWER_depthwise", (1, 8, 8, 7), (8, 1, 3, 3), dict(auto_pad="SAME_LOWER", group=8), ("s8", "s8")),
    ]
    return cases


CONV = _conv_table()


def _shifted(x_shape, w_shape, attrs) -> bool:
    """A head pad < 0 on some axis: the node stays with the reference (the host)."""
    s = attrs.get("strides", [1, 1])
    return any(_head(attrs["auto_pad"], n, k, st) < 0 for n, k, st in zip(x_shape[2:], w_shape[2:], s, strict=True))


def _conv_args(cid, x_shape, w_shape, attrs, types):
    (n, c, h, w), (m, _, kh, kw) = x_shape, w_shape
    group = int(attrs.get("group", 1))
    case = conv_case(np.random.default_rng(sum(map(ord, cid))), n=n, c=c, h=h, w=w, m=m, kh=kh, kw=kw, group=group,
                     xt=types[0], wt=types[1])
    assert case["w"].shape == tuple(w_shape)
    if oo.u8s8_behaviour() != oo.EXACT and types == ("u8", "s8"):  # ORT's int16 pairs cannot saturate then
        case["w"] = np.clip(case["w"], -64, 63).astype(np.int8)
        case["w_zero_point"] = np.clip(case["w_zero_point"], -64, 63).astype(np.int8)
    return case


def _qlinear_conv(case, attrs) -> bytes:
    consts = {"xs": np.float32(case["x_scale"]), "xz": case["x_zero_point"], "w": case["w"],
              "ws": np.asarray(case["w_scale"], np.float32), "wz": case["w_zero_point"],
              "ys": np.float32(case["y_scale"]), "yz": case["y_zero_point"]}
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if case["bias"] is not None:
        consts["b"], names = case["bias"], names + ["b"]
    return model([node("QLinearConv", names, **attrs)], {"x": (case["x"].dtype, case["x"].shape)}, consts,
                 {"y": case["y_zero_point"].dtype})


@pytest.mark.parametrize("cid,xs,ws,attrs,types", CONV, ids=[c[0] for c in CONV])
def test_qlinear_conv_auto_pad_equals_ort(cid, xs, ws, attrs, types):
    case = _conv_args(cid, xs, ws, attrs, types)
    blob = _qlinear_conv(case, attrs)
    feed = {"x": case["x"]}
    check(blob, feed, ort_run(blob, feed), where="host" if _shifted(xs, ws, attrs) else None)


def _qdq_conv(case, attrs) -> bytes:
    """DequantizeLinear (x, w per channel, bias int32) -> Conv -> QuantizeLinear: ORT fuses it into QLinearConv."""
    xdt = case["x"].dtype
    nodes = [node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dqx"),
             node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], name="dqw", axis=0),
             node("Conv", ["xf", "wf"], ["yf"], **attrs),
             node("QuantizeLinear", ["yf", "ys", "yz"], ["y"], name="qy")]
    consts = {"xs": np.float32(case["x_scale"]), "xz": case["x_zero_point"], "w": case["w"],
              "ws": np.asarray(case["w_scale"], np.float32).reshape(-1), "wz": np.zeros(len(case["w"]), np.int8),
              "ys": np.float32(case["y_scale"]), "yz": np.asarray(case["y_zero_point"]).astype(xdt)}
    return model(nodes, {"x": (xdt, case["x"].shape)}, consts, {"y": xdt})


@pytest.mark.parametrize("cid,xs,ws,attrs,types", [c for c in CONV if c[4] == ("u8", "s8")][::2],
                         ids=[c[0] for c in CONV if c[4] == ("u8", "s8")][::2])
def test_qdq_conv_auto_pad_equals_ort(cid, xs, ws, attrs, types):
    """The QDQ Conv folds into QLinearConv with its auto_pad; ORT's own fusion is the oracle."""
    case = _conv_args(cid, xs, ws, attrs, types)
    case["w"] = np.clip(case["w"], -64, 63).astype(np.int8)
    blob = _qdq_conv(case, attrs)
    feed = {"x": case["x"]}
    want = ort_run(blob, feed, optimize=True)
    where = "host" if _shifted(xs, ws, attrs) else None
    check(blob, feed, want, where=where, nodes=[n for n in ("op_under_test",)])


@pytest.mark.parametrize("cid,xs,ws,attrs,types", CONV[::3], ids=[c[0] for c in CONV[::3]])
def test_conv_integer_auto_pad_equals_ort(cid, xs, ws, attrs, types):
    """ConvInteger's int32 output runs in numpy on every device: ORT's pads, negative ones included."""
    case = _conv_args(cid, xs, ws, attrs, ("u8", "u8"))
    blob = model([node("ConvInteger", ["x", "w", "xz"], **{k: v for k, v in attrs.items()})],
                 {"x": (np.uint8, xs)}, {"w": case["w"], "xz": np.uint8(case["x_zero_point"])}, {"y": np.int32},
                 opset=13)
    feed = {"x": case["x"]}
    check(blob, feed, ort_run(blob, feed), where="host")


def _avg_table() -> list[tuple]:
    cases = []
    for i, c in enumerate(cross(mode=MODES[1:], k=[1, 2, 3], s=[1, 2, 3])):
        mode, k, s = c["mode"], c["k"], c["s"]
        shape = (1, 3 + i % 3, k + 5 + i % 2, k + 6 + i % 3)
        a = dict(auto_pad=mode, kernel_shape=[k, k], strides=[s, s], count_include_pad=i % 2, ceil_mode=(i // 3) % 2)
        cases.append((f"{mode}_k{k}_s{s}_i{i % 2}_c{(i // 3) % 2}_{shape[2]}x{shape[3]}", shape, a, QTYPES[i % 2]))
    return cases


AVG = _avg_table()


def _pool_native(shape, attrs) -> bool:
    """ORT's windows as explicit pads >= 0: no head < 0, and a tail < 0 only where a tail of 0 (floor mode) gives
    the same output size."""
    k, s, mode = attrs["kernel_shape"], attrs["strides"], attrs["auto_pad"]
    for n, kk, st in zip(shape[2:], k, s, strict=True):
        need = (-(-n // st) - 1) * st + kk - n if mode.startswith("SAME") else 0
        head = _head(mode, n, kk, st, pool=True)
        if head < 0:
            return False
        if need - head < 0 and (attrs.get("ceil_mode") or (n + need - kk) // st != (n + head - kk) // st):
            return False
    return True


@pytest.mark.parametrize("cid,shape,attrs,dt", AVG, ids=[c[0] for c in AVG])
def test_qlinear_average_pool_auto_pad_equals_ort(cid, shape, attrs, dt):
    lo = int(np.iinfo(dt).min)
    consts = {"xs": np.float32(0.03), "xz": np.asarray(lo + 5, dt), "ys": np.float32(0.02),
              "yz": np.asarray(lo + 9, dt)}
    blob = model([node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], domain="com.microsoft", **attrs)],
                 {"x": (dt, shape)}, consts, {"y": dt})
    feed = {"x": qrand(np.random.default_rng(len(cid)), shape, dt)}
    where = "cpu" if _pool_native(shape, attrs) else "host"
    check(blob, feed, ort_run(blob, feed), where=where, on_vulkan=where)  # Vulkan runs it on the cpu


def test_dynamic_shapes_resolve_in_the_reference_and_the_conv_lowerings():
    """Symbolic input dimensions: nothing to resolve at import; the convolution's lowerings resolve auto_pad per
    plan (its spec), so it stays native, at every input size."""
    case = _conv_args("dynamic", (1, 3, 9, 8), (4, 3, 3, 3), {}, ("u8", "u8"))
    attrs = dict(auto_pad="SAME_UPPER", strides=[2, 2])
    consts = {"xs": np.float32(case["x_scale"]), "xz": case["x_zero_point"], "w": case["w"],
              "ws": np.asarray(case["w_scale"], np.float32), "wz": case["w_zero_point"],
              "ys": np.float32(case["y_scale"]), "yz": case["y_zero_point"]}
    blob = model([node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], **attrs)],
                 {"x": (np.uint8, ("n", 3, "h", "w"))}, consts, {"y": np.uint8})
    rng = np.random.default_rng(3)
    feeds = [{"x": qrand(rng, shape, np.uint8)} for shape in [(1, 3, 9, 8), (2, 3, 10, 7), (1, 3, 4, 4)]]
    check(blob, feeds, [ort_run(blob, f) for f in feeds])


@pytest.mark.parametrize("value", ["SAME", "same_upper", "VALID "])
def test_bad_auto_pad_refused_naming_the_node(value):
    case = _conv_args("bad", (1, 3, 7, 7), (4, 3, 3, 3), {}, ("u8", "u8"))
    refused(_qlinear_conv(case, dict(auto_pad=value)), {"x": case["x"]}, "auto_pad")
    blob = model([node("MaxPool", ["x"], kernel_shape=[2, 2], auto_pad=value)], {"x": (np.uint8, (1, 2, 5, 5))})
    refused(blob, {"x": np.zeros((1, 2, 5, 5), np.uint8)}, "auto_pad")


@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
def test_same_with_dilation_refused_as_ort_refuses_it(mode):
    case = _conv_args("dilated", (1, 3, 9, 9), (4, 3, 3, 3), {}, ("u8", "u8"))
    blob = _qlinear_conv(case, dict(auto_pad=mode, dilations=[2, 2]))
    with pytest.raises(Exception, match="Dilation not supported"):
        ort_run(blob, {"x": case["x"]})
    refused(blob, {"x": case["x"]}, "dilation")


def test_mode_takes_bytes_and_str():
    for m in _auto_pad.MODES:
        assert _auto_pad.mode(m) == _auto_pad.mode(m.encode()) == m
    assert _auto_pad.mode(None) == _auto_pad.mode(b"") == "NOTSET"  # ORT reads an empty string as NOTSET
    with pytest.raises(ValueError, match="auto_pad"):
        _auto_pad.mode(b"SAME")
    # SAME_UPPER puts the odd pad at the end, SAME_LOWER at the start; negative needs divide toward zero
    assert _auto_pad.pads("SAME_UPPER", [8], [4], [1], [1], None, pool=False) == [1, 2]
    assert _auto_pad.pads("SAME_LOWER", [8], [4], [1], [1], None, pool=False) == [2, 1]
    assert _auto_pad.pads("SAME_UPPER", [7], [1], [4], [1], None, pool=True) == [-1, -1]
    assert _auto_pad.pads("SAME_UPPER", [7], [1], [4], [1], None, pool=False) == [0, -2]  # measured on ORT
    assert _auto_pad.pads("SAME_LOWER", [8], [1], [2], [1], None, pool=False) == [0, -1]
    assert _auto_pad.pads("SAME_UPPER", [7], [2], [1], [2], None, pool=True) == [0, 1]  # pools: undilated k



def _probe(op: str, x: np.ndarray, k: int, attrs: dict) -> bytes:
    """A one-node `op` whose first output is the first element of its first window (identity weights)."""
    w = np.zeros((1, 1, 1, k), x.dtype)
    w[..., 0] = 1
    sz = {"s": np.float32(1), "z": np.uint8(0)}
    if op == "Conv":
        return model([node("Conv", ["x", "w"], **attrs)], {"x": x}, {"w": w})
    if op == "QLinearConv":
        return model([node(op, ["x", "s", "z", "w", "s", "z", "s", "z"], **attrs)], {"x": x}, {**sz, "w": w})
    if op == "ConvInteger":
        return model([node(op, ["x", "w"], **attrs)], {"x": x}, {"w": w}, {"y": np.int32})
    if op == "MaxPool":
        return model([node(op, ["x"], kernel_shape=[1, 1], **attrs)], {"x": x})
    return model([node(op, ["x", "s", "z", "s", "z"], domain="com.microsoft", kernel_shape=[1, 1], **attrs)],
                 {"x": x}, sz)


@pytest.mark.parametrize("op", ["Conv", "QLinearConv", "ConvInteger", "MaxPool", "QLinearAveragePool"])
@pytest.mark.parametrize("mode", ["SAME_UPPER", "SAME_LOWER"])
def test_negative_totals(op, mode):
    """Strides past the kernel (totals -1 to -6): where ORT 1.31 puts the windows, read from an arange input (the
    first output is the first window's first element) against the head `_auto_pad.pads` gives, for every size."""
    pool = op in ("MaxPool", "QLinearAveragePool")
    for k, s, n in [(k, s, n) for k in ((1,) if pool else (1, 2)) for s in range(2, 8) for n in range(5, 16)]:
        x = np.arange(1, n + 1, dtype=np.float32 if op == "Conv" else np.uint8).reshape(1, 1, 1, n)
        first = int(ort_run(_probe(op, x, k, dict(auto_pad=mode, strides=[1, s])), {"x": x})[0].ravel()[0])
        head = _auto_pad.pads(mode, [n], [k], [s], [1], None, pool=pool)[0]
        assert first == 1 - head, f"{op} {mode} k={k} s={s} n={n}: ORT starts at {first - 1}, we at {-head}"
