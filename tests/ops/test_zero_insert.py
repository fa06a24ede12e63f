"""vkinfer:ZeroInsert, the zero insertion of a quantized ConvTranspose (vkinfer/model/conv_transpose.py: stride - 1
fill bytes after every input pixel, rows and columns; a `pad` operator on the cpu, cpu/zero_insert.py, and a byte
gather on Vulkan, model/moves.py), on every device, which must run it.

No peer runs the op itself: the direct table (the node written into a model, as the rewrite leaves it) is checked
against numpy's definition, written out here; then through the models that make it, QDQ ConvTransposes, whose
output every device must give as the numpy reference (vkinfer/reference/qlinear_conv_transpose.py: ORT computes
ConvTranspose in float, within one step of it, tests/numerics/test_conv_transpose.py)."""

from __future__ import annotations

import numpy as np
import pytest

from vkinfer.reference.qlinear_conv_transpose import qlinear_conv_transpose

from ._build import QTYPES, check, cross, model, node, qrand, qrange, refused

TABLE = [  # (id, shape, strides): strides crossed with channel counts (every other pair but all of c = 16)
    (f"s{c['sh']}x{c['sw']}_c{c['c']}", (1 + (c["c"] == 5), c["c"], 3 + c["sh"] % 2, 4 + c["sw"]), (c["sh"], c["sw"]))
    for c in cross(sh=[1, 2, 3], sw=[1, 2, 4], c=[1, 5, 16]) if (c["sh"] + c["sw"] + c["c"]) % 2 == 0 or c["c"] == 16]


def _zero_insert(x: np.ndarray, fill, strides) -> np.ndarray:
    """The definition: x[n, c, i, j] at (i * s_h, j * s_w) of an (H * s_h, W * s_w) plane of `fill`."""
    n, c, h, w = x.shape
    sh, sw = strides
    y = np.full((n, c, h * sh, w * sw), fill, x.dtype)
    y[:, :, ::sh, ::sw] = x
    return y


def _direct(shape, strides, dt, fill, fill_dtype=None) -> bytes:
    consts = {"f": np.asarray(fill, fill_dtype or dt)}
    return model([node("ZeroInsert", ["x", "f"], domain="vkinfer", strides=list(strides))], {"x": (dt, shape)},
                 consts, {"y": dt})


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[c[0] for c in TABLE])
def test_zero_insert_equals_its_definition_on_every_device(k):
    _, shape, strides = TABLE[k]
    dt = QTYPES[k % 2]
    lo, hi = qrange(dt)
    fill = [lo, hi, (lo + hi) // 2 + 3][k % 3]
    x = qrand(np.random.default_rng(k), shape, dt)
    check(_direct(shape, strides, dt, fill), {"x": x}, [_zero_insert(x, fill, strides)])


CONV_T = [  # (id, C, M, kernel, strides, pads, output_padding, group, (H, W), dtype)
    ("k3s2p1op1", 4, 6, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 1, (5, 6), np.uint8),
    # (taps that never overlap, kernel <= stride, are ORT's float ConvTranspose instead: test_float_conv_transpose.py)
    ("k3x2s2", 3, 5, (3, 2), (2, 2), (0, 0, 0, 0), (0, 0), 1, (4, 3), np.int8),
    ("k4s3_group2", 4, 6, (4, 3), (3, 2), (1, 0, 2, 1), (2, 1), 2, (3, 5), np.uint8),
    ("depthwise_s2", 4, 4, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 4, (4, 5), np.int8),
]


@pytest.mark.parametrize("cid,c,m,k,s,p,op,group,hw,dt", CONV_T, ids=[t[0] for t in CONV_T])
def test_conv_transpose_makes_a_zero_insert_that_runs_on_the_device(cid, c, m, k, s, p, op, group, hw, dt):
    rng = np.random.default_rng(len(cid))
    lo, hi = qrange(dt)
    x = qrand(rng, (1, c, *hw), dt)
    w = rng.integers(-127, 128, (c, m // group, *k)).astype(np.int8)
    xs, xz, ws, wz = np.float32(0.03), np.asarray(lo + 100, dt), np.float32(0.005), np.asarray(0, np.int8)
    ys, yz = np.float32(0.02 * np.sqrt(c * k[0] * k[1])), np.asarray(lo + 120, dt)
    a = dict(kernel_shape=list(k), strides=list(s), pads=list(p), output_padding=list(op), group=group)
    nodes = [node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dqx"),
             node("DequantizeLinear", ["w", "ws", "wz"], ["wf"], name="dqw"),
             node("ConvTranspose", ["xf", "wf"], ["yf"], name="ct", **a),
             node("QuantizeLinear", ["yf", "ys", "yz"], ["y"], name="q")]
    blob = model(nodes, {"x": (dt, x.shape)}, {"xs": xs, "xz": xz, "w": w, "ws": ws, "wz": wz, "ys": ys, "yz": yz},
                 {"y": dt})
    want = qlinear_conv_transpose(x, xs, xz, w, ws, wz, ys, yz, None, **a)
    per_device = check(blob, {"x": x}, [want])
    inserts = [n.name for n in per_device["reference"].graph.nodes if n.op == "vkinfer:ZeroInsert"]
    assert len(inserts) == (s != (1, 1)), [n.op for n in per_device["reference"].graph.nodes]


@pytest.mark.parametrize("shape,strides,fill_dtype,culprit", [
    ((1, 2, 3, 3), (0, 2), None, "strides"),
    ((1, 2, 3, 3), (2, 2, 2), None, "strides"),
    ((2, 3, 3), (2, 2), None, "4-D"),
    ((1, 2, 3, 3), (2, 2), np.int8, "fill"),
], ids=["stride0", "three_strides", "rank3", "fill_dtype"])
def test_bad_zero_insert_refused_naming_the_node(shape, strides, fill_dtype, culprit):
    refused(_direct(shape, strides, np.uint8, 0, fill_dtype), {"x": np.zeros(shape, np.uint8)}, culprit)
