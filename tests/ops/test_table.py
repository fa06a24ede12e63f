"""vkinfer:Table and vkinfer:Table2, the byte lookups the importer makes (vkinfer/model/tables.py), on every device:
cpu/qlinear_lut.py and vulkan/qlinear_lut.py must run them. They arise from
  - a QDQ float chain DequantizeLinear -> elementwise ops -> QuantizeLinear over one 8-bit tensor (Table) or two
    (Table2: equal shapes, or one a row of the other's channels, either operand first): against ONNX Runtime
    running the float chain as written;
  - a QLinearAdd / QLinearMul with a constant scalar operand (Table): against ORT's QLinear op;
  - TFLite's TANH, HARD_SWISH, LEAKY_RELU (Table) and SUB, MAXIMUM, MINIMUM (Table2): against litert.
Tensors of ranks 1-5 and odd sizes, uint8 and int8, every byte value in each input. The chains themselves (GELU,
SiLU, HardSwish, ...) are tests/numerics/test_tables.py's; the TFLite ops on every byte (pair)
tests/importers/test_tflite_ops.py's. A 5-D row broadcast of a Table2 runs on the host in a cpu session."""

from __future__ import annotations

import numpy as np
import pytest

from vkinfer.testing import tflite_zoo

from ._build import NAME, QTYPES, check, check_vs_litert, model, node, ort_run, qrand, qrange, refused

TABLE_OP, TABLE2_OP = "vkinfer:Table", "vkinfer:Table2"
UNARY = {  # name -> (nodes from xf to f, float constants)
    "sigmoid": ([node("Sigmoid", ["xf"], ["f"], name="sig")], {}),
    "hardswish": ([node("HardSigmoid", ["xf"], ["h"], name="hs", alpha=1 / 6, beta=0.5),
                   node("Mul", ["xf", "h"], ["f"], name="mul")], {}),
    "clip_div": ([node("Clip", ["xf", "lo", "hi"], ["c"], name="clip"), node("Div", ["c", "six"], ["f"], name="div")],
                 {"lo": np.float32(0), "hi": np.float32(6), "six": np.float32(6)}),
}
SHAPES = [(256,), (16, 16), (2, 8, 16), (1, 4, 8, 8), (1, 2, 4, 4, 8)]


def _params(dt, rng):
    lo, hi = qrange(dt)
    return [(np.float32(rng.uniform(0.01, 0.08)), np.asarray(rng.integers(lo + 40, hi - 40), dt)) for _ in range(3)]


def _chain(chain: str, shape, dt, seed: int, z_shape=None) -> tuple[bytes, dict]:
    """x (8-bit) -> DQ -> the chain -> Q -> y; with z_shape, f = Mul(xf, Sigmoid(zf)) of a second 8-bit input z
    (operands in the order chain names: "gate" x first, "gate_swapped" the sigmoid first)."""
    rng = np.random.default_rng(seed)
    (xs, xz), (ys, yz), (zs, zz) = _params(dt, rng)
    consts = {"xs": xs, "xz": xz, "ys": ys, "yz": yz}
    nodes = [node("DequantizeLinear", ["x", "xs", "xz"], ["xf"], name="dqx")]
    inputs = {"x": (dt, shape)}
    if z_shape is None:
        chain_nodes, chain_consts = UNARY[chain]
        nodes += chain_nodes
        consts |= chain_consts
    else:
        consts |= {"zs": zs, "zz": zz}
        inputs["z"] = (dt, z_shape)
        ins = ["xf", "s"] if chain == "gate" else ["s", "xf"]
        nodes += [node("DequantizeLinear", ["z", "zs", "zz"], ["zf"], name="dqz"),
                  node("Sigmoid", ["zf"], ["s"], name="sig"), node("Mul", ins, ["f"], name="mul")]
    nodes.append(node("QuantizeLinear", ["f", "ys", "yz"], name=NAME))
    every = np.resize(rng.permutation(np.arange(256, dtype=np.uint8)), shape).view(dt)
    feed = {"x": every} | ({} if z_shape is None else {"z": qrand(rng, z_shape, dt)})
    return model(nodes, inputs, consts, {"y": dt}), feed


CHAINS = [(f"{c}_r{len(s)}", c, s, None) for c, s in zip(["sigmoid", "hardswish", "clip_div", "sigmoid", "hardswish"],
                                                          SHAPES, strict=True)]
CHAINS += [
    ("gate_equal_r4", "gate", (1, 4, 8, 8), (1, 4, 8, 8)),
    ("gate_row_r4", "gate", (1, 4, 8, 8), (1, 4, 1, 1)),
    ("gate_swapped_row_r4", "gate_swapped", (1, 4, 8, 8), (1, 4, 1, 1)),
    ("gate_row_r2", "gate", (16, 16), (16,)),
    ("gate_equal_r5", "gate", (1, 2, 4, 4, 8), (1, 2, 4, 4, 8)),
]


@pytest.mark.parametrize("k", range(len(CHAINS)), ids=[c[0] for c in CHAINS])
def test_qdq_chain_table_equals_ort_on_every_device(k):
    _, chain, shape, z_shape = CHAINS[k]
    dt = QTYPES[k % 2]
    blob, feed = _chain(chain, shape, dt, k, z_shape)
    per_device = check(blob, feed, ort_run(blob, feed))
    assert [n.op for n in per_device["reference"].graph.nodes] == [TABLE_OP if z_shape is None else TABLE2_OP]


@pytest.mark.parametrize("dt", [np.uint8, np.int8])
def test_table2_5d_row(dt):
    """A 5-D "row" of the last axis is no row of the device form (N, A, B, H, W): the host on every device (Vulkan
    once took it as a row lookup: 27 (uint8) and 41 (int8) of 48 values wrong, found by this test)."""
    blob, feed = _chain("gate", (1, 2, 3, 2, 4), dt, 9, (1, 1, 1, 1, 4))
    check(blob, feed, ort_run(blob, feed), where="host")


@pytest.mark.parametrize("op,first", [("QLinearAdd", False), ("QLinearMul", True), ("QLinearAdd", True)])
def test_qlinear_op_with_a_constant_scalar_is_a_table(op, first):
    """QLinearAdd / QLinearMul of an activation and one constant value (a layer norm's epsilon, GELU's + 1)."""
    dt = np.int8 if first else np.uint8
    rng = np.random.default_rng(len(op) + first)
    lo, hi = qrange(dt)
    c = np.asarray([rng.integers(lo, hi + 1)], dt)
    consts = {"as": np.float32(0.03), "az": np.asarray(lo + 100, dt), "bs": np.float32(0.05),
              "bz": np.asarray(lo + 20, dt), "ys": np.float32(0.06), "yz": np.asarray(lo + 90, dt), "c": c}
    ins = ["c", "as", "az", "x", "bs", "bz", "ys", "yz"] if first else ["x", "as", "az", "c", "bs", "bz", "ys", "yz"]
    blob = model([node(op, ins, domain="com.microsoft")], {"x": (dt, (2, 5, 16))}, consts, {"y": dt})
    feed = {"x": np.resize(np.arange(256, dtype=np.uint8), (2, 5, 16)).view(dt)}
    per_device = check(blob, feed, ort_run(blob, feed))
    assert [n.op for n in per_device["reference"].graph.nodes] == [TABLE_OP]


TFLITE = [("tanh", {}, TABLE_OP), ("hard_swish", {}, TABLE_OP), ("leaky_relu", {"alpha": 0.2}, TABLE_OP),
          ("sub", {"y_shape": (1, 4, 8, 8)}, TABLE2_OP), ("maximum", {"y_shape": (1, 4, 8, 8)}, TABLE2_OP),
          ("minimum", {"y_shape": (1, 4, 8, 8)}, TABLE2_OP)]


@pytest.mark.parametrize("k", range(len(TFLITE)), ids=[c[0] for c in TFLITE])
def test_tflite_table_ops_equal_litert_on_every_device(k):
    op, kw, want_op = TFLITE[k]
    dt = ["int8", "uint8"][k % 2]
    blob = tflite_zoo.op_model(op, k, dtype=dt, shape=(1, 4, 8, 8), **kw)
    rng = np.random.default_rng(k)
    every = rng.permutation(np.arange(256, dtype=np.uint8)).view(np.dtype(dt)).reshape(1, 4, 8, 8)
    feed = {"x": every} | ({"x1": qrand(rng, (1, 4, 8, 8), np.dtype(dt))} if want_op == TABLE2_OP else {})
    per_device = check_vs_litert(blob, feed)
    assert [n.op for n in per_device["reference"].graph.nodes] == [want_op]


def _direct(op: str, table: np.ndarray, dtype_attr="uint8", b_shape=None) -> tuple[bytes, dict]:
    """A vkinfer-domain Table / Table2 node written straight into an ONNX model (as a pass would leave it)."""
    ins = ["x", "t"] if b_shape is None else ["x", "b", "t"]
    inputs = {"x": (np.uint8, (2, 8))} | ({} if b_shape is None else {"b": (np.uint8, b_shape)})
    blob = model([node(op.split(":")[1], ins, domain="vkinfer", dtype=dtype_attr)], inputs, {"t": table},
                 {"y": np.uint8})
    return blob, {k: np.zeros(v[1], np.uint8) for k, v in inputs.items()}


def test_direct_table_nodes_run_on_every_device():
    """The nodes written straight into a model run like the folded ones: y = table[byte] (numpy as the oracle)."""
    t = np.random.default_rng(0).integers(0, 256, 256).astype(np.uint8)
    blob, _ = _direct(TABLE_OP, t)
    x = np.arange(16, dtype=np.uint8).reshape(2, 8) * 13
    check(blob, {"x": x}, [t[x]])
    t2 = np.random.default_rng(1).integers(0, 256, 65536).astype(np.uint8)
    blob, _ = _direct(TABLE2_OP, t2, b_shape=(2, 8))
    b = np.arange(16, dtype=np.uint8).reshape(2, 8) * 7
    check(blob, {"x": x, "b": b}, [t2[x.astype(np.int32) * 256 + b]])


@pytest.mark.parametrize("op,table,attr,b_shape,culprit", [
    (TABLE_OP, np.zeros(255, np.uint8), "uint8", None, r"uint8\[256\]"),
    (TABLE_OP, np.zeros(256, np.int32), "uint8", None, r"uint8\[256\]"),
    (TABLE_OP, np.zeros(256, np.uint8), "float32", None, "dtype"),
    (TABLE2_OP, np.zeros(256, np.uint8), "uint8", (2, 8), r"uint8\[65536\]"),
    (TABLE2_OP, np.zeros(65536, np.uint8), "uint8", (3,), "broadcast"),
], ids=["table_short", "table_int32", "dtype_float", "table2_short", "table2_no_broadcast"])
def test_bad_table_nodes_refused_naming_the_node(op, table, attr, b_shape, culprit):
    blob, feed = _direct(op, table, attr, b_shape)
    refused(blob, feed, culprit)
