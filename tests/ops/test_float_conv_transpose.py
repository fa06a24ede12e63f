"""vkinfer:QDQConvTranspose (vkinfer/reference/float_conv_transpose.py, cpu/float_conv_transpose.py,
cpu_fallback/src/ops/float_conv_transpose.c): a QDQ ConvTranspose that ORT 1.31 keeps in float (its optimized graph
keeps DQ -> ConvTranspose -> Q) with non-overlapping taps and <= 128 channels per group gives ORT's bits on every
device, also where the exact integer value lies on a .5 tie (ORT's float sum misses it; tie-prone data below:
scales whose real ratio is 0.5 put every odd integer sum next to a tie)."""

from __future__ import annotations

import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.agree import DEVICES, run_sessions, sessions

from vkinfer.reference.float_conv_transpose import OP
from vkinfer.testing import zoo

INT8_CFG = {"session.qdqisint8allowed": "1"}

# (name, C, M, kernel, strides, pads, dilations, output_padding, group, (H, W), activation, per-channel, bias, ties)
CASES = [
    ("k2s2", 128, 32, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (0, 0), 1, (6, 7), "uint8", True, True, False),
    ("k2s2_ties", 16, 8, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (0, 0), 1, (5, 5), "int8", False, True, True),
    ("k2s3_pads_op", 12, 9, (2, 2), (3, 3), (1, 0, 0, 1), (1, 1), (2, 1), 3, (4, 5), "uint8", True, True, False),
    ("k1s2_nobias", 5, 70, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1), (1, 0), 1, (3, 9), "int8", True, False, True),
    ("k2s3_dil2", 8, 6, (2, 2), (3, 3), (0, 0, 1, 1), (2, 2), (0, 0), 2, (4, 4), "uint8", False, True, True),
    ("k3s3_c100", 100, 4, (3, 3), (3, 3), (0, 0, 0, 0), (1, 1), (0, 0), 1, (3, 3), "uint8", True, True, False),
    # 64 and 128 output channels per tap: the C operator's vector path (a 64-column chunk in one tap), with ties,
    # a ragged last row of pixels (W = 7) and pads that drop border outputs
    ("k2s2_m128_ties", 96, 128, (2, 2), (2, 2), (1, 0, 0, 1), (1, 1), (0, 0), 1, (5, 7), "uint8", True, True, True),
    ("k2s2_m64_s8", 128, 64, (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), (1, 1), 1, (3, 6), "int8", False, True, True),
]


def _model(case):
    name, c, m, k, s, p, d, op, group, (h, w), act, per_channel, bias, ties = case
    rng = np.random.default_rng(sum(map(ord, name)))
    dt = np.dtype(act)
    lo, hi = (0, 255) if dt == np.uint8 else (-128, 127)
    mg = m // group
    x = rng.integers(lo, hi + 1, (1, c, h, w)).astype(dt)
    xz = dt.type(rng.integers(lo + 20, hi - 20))
    if ties:  # x_scale * w_scale / y_scale = 0.5 in real numbers, not in float32: odd sums sit next to a tie
        xs, ws = np.float32(0.1), np.full(mg if per_channel else (), 0.3, np.float32)
        wq = rng.integers(-3, 4, (c, mg, *k)).astype(np.int8)
        ys = np.float32(0.06)
    else:
        xs = np.float32(rng.uniform(0.01, 0.05))
        ws = rng.uniform(0.002, 0.01, mg if per_channel else ()).astype(np.float32)
        wq = rng.integers(-127, 128, (c, mg, *k)).astype(np.int8)
        ys = np.float32(0.02 * np.sqrt(c))
    wz = np.zeros(mg if per_channel else (), np.int8)
    yz = dt.type((lo + hi + 1) // 2)
    inits = [numpy_helper.from_array(np.asarray(v), n) for n, v in
             (("xs", xs), ("xz", xz), ("wq", wq), ("ws", ws), ("wz", wz), ("ys", ys), ("yz", yz))]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wz"], ["wf"], axis=1)]
    ins = ["xf", "wf"]
    if bias:
        bq = rng.integers(-3000, 3000, m).astype(np.int32)
        bs = (xs * np.tile(np.broadcast_to(ws, (mg,)), group)).astype(np.float32)
        inits += [numpy_helper.from_array(bq, "bq"), numpy_helper.from_array(bs, "bs"),
                  numpy_helper.from_array(np.zeros(m, np.int32), "bz")]
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs", "bz"], ["bf"], axis=0))
        ins.append("bf")
    nodes += [helper.make_node("ConvTranspose", ins, ["yf"], name="ct", kernel_shape=list(k), strides=list(s),
                               pads=list(p), dilations=list(d), output_padding=list(op), group=group),
              helper.make_node("QuantizeLinear", ["yf", "ys", "yz"], ["y"])]
    elem = TensorProto.UINT8 if dt == np.uint8 else TensorProto.INT8
    g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", elem, list(x.shape))],
                          [helper.make_tensor_value_info("y", elem, None)], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString(), {"x": x}


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_every_device_gives_ort_bits(case):
    """Bit for bit against ORT on every device; the node is the float op and runs natively (cpu, also in the
    Vulkan session: no shader does ORT's float order)."""
    model, feed = _model(case)
    (want,) = zoo.ort_run(onnx.load_from_string(model), feed, config=INT8_CFG)
    per_device = sessions(model)
    run_sessions(per_device, feed, want=[want], what=case[0])
    for device in DEVICES[1:]:
        sess = per_device[device]
        assert [n.op for n in sess.graph.nodes] == [OP], [n.op for n in sess.graph.nodes]
        assert sess.placement["ct"] == "cpu", (device, sess.placement)


def test_ties_are_where_the_integer_path_differed():
    """The tie-prone case really exercises the float order: the exact integer definition misses ORT there."""
    from vkinfer.reference.qlinear_conv_transpose import qlinear_conv_transpose

    case = CASES[1]
    model, feed = _model(case)
    (want,) = zoo.ort_run(onnx.load_from_string(model), feed, config=INT8_CFG)
    m = onnx.load_from_string(model)
    c = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    exact = qlinear_conv_transpose(feed["x"], c["xs"], c["xz"], c["wq"], c["ws"], c["wz"], c["ys"], c["yz"],
                                   c["bq"], strides=[2, 2])
    assert (exact != want).sum() > 0


_ASAN_SCRIPT = """
import sys
sys.path.insert(0, "tests")
import numpy as np, vkinfer
from ops.test_float_conv_transpose import CASES, _model
for case in CASES:
    model, feed = _model(case)
    ref = vkinfer.InferenceSession(model, device="reference").run(None, feed)[0]
    for threads in (1, 2):
        s = vkinfer.InferenceSession(model, device="cpu", threads=threads)
        assert set(s.placement.values()) == {"cpu"}, s.placement
        np.testing.assert_array_equal(s.run(None, feed)[0], ref)
print("float_conv_transpose asan: ok")
"""


def test_c_operator_under_asan_and_ubsan():
    """ops/float_conv_transpose.c in the AddressSanitizer + UBSan build, every case at 1 and 2 threads."""
    from support.cpu_build import ROOT, run_sanitized

    run_sanitized([sys.executable, "-W", "ignore", "-c", _ASAN_SCRIPT], "float_conv_transpose asan: ok", cwd=ROOT)


def _node_args(case):
    """The folded node of a case and its input values (the feed and the graph's constants)."""
    import vkinfer

    model, feed = _model(case)
    g = vkinfer.InferenceSession(model, device="reference").graph
    (node,) = g.nodes
    return node, [feed[n] if n in feed else (g.consts[n] if n else None) for n in node.inputs]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_shape_rule_is_the_kernels_shape_and_checks(case):
    """The trace's shape rule (the kernel took 3-4.6 s of slider_yoloseg's session): the kernel's output shape and
    dtype, and on broken arguments the kernel's own error (class and message)."""
    import copy

    from vkinfer.model.op_table import OPS, SHAPES

    node, args = _node_args(case)
    (y,) = OPS[OP](node, args, {})
    assert SHAPES[OP](node, args) == [(y.shape, y.dtype)]
    bad_kernel = copy.copy(node)
    bad_kernel.attrs = {**node.attrs, "kernel_shape": [9, 9]}
    broken = [(node, [args[0].astype(np.int32), *args[1:]]),  # x not 8-bit
              (node, [*args[:3], args[3].astype(np.float64), *args[4:]]),  # w not float32
              (node, [args[0], np.float32(0), *args[2:]]),  # x_scale 0
              (node, [*args[:6], np.int32(3)]),  # y_zero_point not 8-bit
              (node, [args[0][:, :-1], *args[1:]]),  # channels that do not match the weights
              (bad_kernel, args)]
    if len(args) > 4 and args[4] is not None:
        broken.append((node, [*args[:4], args[4][:-1], *args[5:]]))  # bias of the wrong length
    for n, a in broken:
        with pytest.raises((ValueError, TypeError)) as k:
            OPS[OP](n, a, {})
        with pytest.raises(k.type, match=None) as r:
            SHAPES[OP](n, a)
        assert str(r.value) == str(k.value)


def test_loading_runs_no_kernel(monkeypatch):
    """A session's trace takes the node's shape from the rule: the kernel runs at run time only."""
    import vkinfer
    from vkinfer.model import op_table

    calls = []
    kernel = op_table.OPS[OP]
    monkeypatch.setitem(op_table.OPS, OP, lambda *a: calls.append(1) or kernel(*a))
    model, feed = _model(CASES[0])
    for device in DEVICES:
        vkinfer.InferenceSession(model, device=device)
    assert calls == []
