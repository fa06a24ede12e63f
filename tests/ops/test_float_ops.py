"""Generic float ops between the quantized ones (vkinfer/model/host_float.py: onnx.reference's kernels, or ORT's
reproduced), as they sit in real 8-bit models: x (8-bit) -> DequantizeLinear -> the op -> a float output, against
ONNX Runtime on every device. The op runs on the host, or in the native CPU graph where it has the op
(NATIVE_FLOAT), and the DequantizeLinear on the cpu, in a Vulkan session too (its float edge); the values are
every dequantized byte of a seeded (scale, zero point). Exact where host_float claims ORT's numerics, bounded in
ulps where it documents a different evaluation (Softmax, Exp, reductions, float MatMul).

Deliberately a sample, one row per kind of op: tests/numerics/test_host_float.py checks the elementwise kernels on every
dequantized byte and on edge values, BatchNormalization, the data movement and comparison ops, the transcendental
and reduction bounds and the bad attributes, each op alone on the host."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check, model, node, ort_run

F32 = np.float32
SHAPE = (1, 4, 6, 6)
RNG = np.random.default_rng(11)
PER_CHANNEL = RNG.uniform(-2, 2, (1, 4, 1, 1)).astype(F32)
W = RNG.uniform(-1, 1, (6, 5)).astype(F32)
NATIVE_FLOAT = {"Mul", "Add", "MaxPool", "Sigmoid", "Tanh", "HardSwish", "Softmax", "MatMul", "Where", "ArgMax",
                "GlobalMaxPool", "ReduceMax", "ReduceMean", "Exp"}

# (id, nodes reading "xf" and writing "f", constants, opset, output type, ulps bound: 0 = exact). The bounds are
# documented ones (Softmax 10 against ORT on AVX2-only CPUs, exact on AVX-512F); measured over 5 seeds: Softmax 4
# before vkinfer took the AVX-512F order, MatMul 0; Exp and ReduceMean exact since they follow MLAS's exp and Eigen's
# per-row sum (2 and 3 ulps before).
TABLE = [
    ("mul_per_channel", [node("Mul", ["xf", "pc"], ["f"])], {"pc": PER_CHANNEL}, 13, F32, 0),
    ("add_per_channel", [node("Add", ["xf", "pc"], ["f"])], {"pc": PER_CHANNEL}, 13, F32, 0),
    ("where_greater", [node("Greater", ["xf", "pc"], ["g"], name="gt"), node("Where", ["g", "xf", "pc"], ["f"])],
     {"pc": PER_CHANNEL}, 13, F32, 0),
    ("sigmoid", [node("Sigmoid", ["xf"], ["f"])], {}, 13, F32, 0),
    ("tanh", [node("Tanh", ["xf"], ["f"])], {}, 13, F32, 0),
    ("hardswish", [node("HardSwish", ["xf"], ["f"])], {}, 14, F32, 0),
    ("max_pool_float", [node("MaxPool", ["xf"], ["f"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])], {},
     13, F32, 0),
    ("global_max_pool", [node("GlobalMaxPool", ["xf"], ["f"])], {}, 13, F32, 0),
    ("reduce_max", [node("ReduceMax", ["xf"], ["f"], axes=[2, 3], keepdims=0)], {}, 13, F32, 0),
    ("argmax_int64", [node("ArgMax", ["xf"], ["f"], axis=1, keepdims=0)], {}, 13, np.int64, 0),
    ("cast_int32", [node("Cast", ["xf"], ["f"], to=6)], {}, 13, np.int32, 0),
    ("softmax", [node("Softmax", ["xf"], ["f"], axis=-1)], {}, 13, F32, 10),  # AVX2-only ORT: float_softmax.py
    ("exp", [node("Exp", ["xf"], ["f"])], {}, 13, F32, 0),  # MLAS's exp; e^x >= 2^-126 here: every ISA's bits
    ("reduce_mean", [node("ReduceMean", ["xf"], ["f"], axes=[2, 3])], {}, 13, F32, 0),  # Eigen's row order
    ("matmul_const", [node("MatMul", ["xf", "w"], ["f"])], {"w": W}, 13, F32, 0),  # MLAS order: exact
]


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    def ordered(v):
        i = np.asarray(v, F32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


NATIVE_FLOAT |= {"Greater"}  # comparisons: vkinfer/cpu/float_compare.py


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[c[0] for c in TABLE])
def test_float_op_on_the_host_equals_ort(k):
    _, nodes, consts, opset, out, bound = TABLE[k]
    dt = QTYPES[k % 2]
    lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
    rng = np.random.default_rng(k)
    params = {"s": F32(rng.uniform(0.01, 0.1)), "z": np.asarray((lo + hi) // 2 + k, dt)}
    blob = model([node("DequantizeLinear", ["x", "s", "z"], ["xf"], name="dq"), *nodes], {"x": (dt, SHAPE)},
                 consts | params, {"f": out}, opset=opset)
    x = np.resize(rng.permutation(np.arange(256, dtype=np.uint8)), SHAPE).view(dt)
    want = ort_run(blob, {"x": x})
    # Float MaxPool and the elementwise ops (Sigmoid, Tanh, HardSwish too) run in the native CPU graph
    # (vkinfer/cpu/float_*.py), the rest on the host.
    where = {"dq": "cpu"} | {n.name: "cpu" if n.op_type in NATIVE_FLOAT else "host" for n in nodes}
    # A MaxPool right after the DequantizeLinear is 8-bit once ORT's QDQ propagation (model/qdq_rules.py) puts a
    # Q -> DQ pair after it, as ORT does: Vulkan takes it then.
    pools = [n.name for n in nodes if n.op_type == "MaxPool"]
    per_device = check(blob, {"x": x}, want if bound == 0 else None, where=where, on_vulkan="any" if pools else None)
    for name in pools:  # the propagated pair's DequantizeLinear, a float output, stays on the CPU
        assert per_device["vulkan"].placement[name].startswith("vulkan"), per_device["vulkan"].placement
    if bound:
        (got,) = per_device["reference"].run(None, {"x": x})
        assert got.shape == want[0].shape and got.dtype == want[0].dtype
        assert _ulps(got, want[0]).max() <= bound
