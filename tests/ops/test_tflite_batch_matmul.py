"""TFLite's int8 BATCH_MATMUL, imported as vkinfer:TFLiteBatchMatMul (vkinfer/reference/tflite_batch_matmul.py;
cpu/ and vulkan/tflite_batch_matmul.py), against ai-edge-litert on every device.

litert's kernel depends on the second operand's zero point (asserted for every model): 0 -> the XNNPACK delegate
(float32 requantization, ties to even; the qmatmul C operator and the qlinear_matmul_act shader), else TFLite's
builtin kernel (gemmlowp's fixed point; the tflite_batch_matmul C operator). adj_x / adj_y, numpy-broadcast batch
axes (ranks 2-4, size-1 and missing batch axes), a constant second operand, attention-like shapes, K = 1, long K,
power-of-two scale ratios (exact halves are common). CPU sessions run every node on the CPU; Vulkan sessions run
the XNNPACK form on Vulkan and the builtin form on the CPU (no shader for its fixed point yet); asserted."""

from __future__ import annotations

import numpy as np
import pytest

from vkinfer.testing import tflite_ops

from ._build import check_vs_litert, refused

ADJ = [(False, False), (False, True), (True, False), (True, True)]
SHAPES = [  # (id, x shape, y shape) without adj (M x K times K x N)
    ("r2", (5, 9), (9, 6)),
    ("r3_same_batch", (3, 7, 11), (3, 11, 4)),
    ("r4_broadcast", (2, 3, 5, 7), (3, 7, 4)),
    ("r4_size1_batch", (3, 1, 8, 16), (1, 2, 16, 8)),
    ("attention_qk", (1, 4, 16, 32), (1, 4, 32, 16)),
    ("k1", (2, 6, 1), (2, 1, 5)),
    ("long_k", (2, 4, 600), (2, 600, 3)),
]
ZPS = [(0, 0, 0), (12, -7, 3), (-128, 0, -5), (5, 127, 0)]  # (x, y, out): y_zp == 0 is the one-rounding path


def _adj(shape, adj):
    return (*shape[:-2], shape[-1], shape[-2]) if adj else tuple(shape)


TABLE = [(f"{sid}-{'x' if ax else ''}{'y' if ay else ''}-zp{j}", _adj(xs, ax), _adj(ys, ay), ax, ay, ZPS[j])
         for k, (sid, xs, ys) in enumerate(SHAPES) for i, (ax, ay) in enumerate(ADJ) for j in [(k + i) % 4]]


def _litert_delegates(blob: bytes) -> bool:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=blob)
    it.allocate_tensors()
    return "DELEGATE" in [o["op_name"] for o in it._get_ops_details()]


def _qparams(rng, zps, ties: bool = False) -> dict:
    if ties:  # power-of-two scales: the multiplier is 2^-e, so exact halves are common
        return {"x": (0.5, zps[0]), "y": (0.25, zps[1]), "out": (float(rng.choice([16.0, 64.0, 256.0])), zps[2])}
    sc = np.float32(np.exp(rng.uniform(np.log(0.005), np.log(0.05), 2)))
    return {"x": (float(sc[0]), zps[0]), "y": (float(sc[1]), zps[1]),
            "out": (float(np.float32(np.exp(rng.uniform(np.log(0.05), np.log(0.5))))), zps[2])}


@pytest.mark.parametrize("cid,xs,ys,ax,ay,zps", TABLE, ids=[c[0] for c in TABLE])
def test_tflite_batch_matmul_equals_litert_on_every_device(cid, xs, ys, ax, ay, zps):
    rng = np.random.default_rng(len(cid) + 7 * ax + 3 * ay)
    for ties in (False, True):
        blob = tflite_ops.op_model("batch_matmul", len(cid), shape=xs, y_shape=ys, adj_x=ax, adj_y=ay,
                                   qparams=_qparams(rng, zps, ties))
        assert _litert_delegates(blob) == (zps[1] == 0), "litert's kernel choice changed"
        feeds = [{"x": rng.integers(-128, 128, xs).astype(np.int8), "x1": rng.integers(-128, 128, ys).astype(np.int8)}
                 for _ in range(2)]
        check_vs_litert(blob, feeds, where="cpu", on_vulkan="vulkan" if zps[1] == 0 else "cpu")


def test_tflite_batch_matmul_constant_operand():
    """The second operand a constant (a weight): both rounding paths, adj_y."""
    rng = np.random.default_rng(11)
    for k, (zps, ay) in enumerate([((3, 0, -2), False), ((-9, 14, 1), True)]):
        blob = tflite_ops.op_model("batch_matmul", 50 + k, shape=(2, 6, 24), y_shape=(8, 24) if ay else (24, 8),
                                   adj_y=ay, const_y=True, qparams=_qparams(rng, zps))
        check_vs_litert(blob, [{"x": rng.integers(-128, 128, (2, 6, 24)).astype(np.int8)}], where="cpu",
                        on_vulkan="vulkan" if zps[1] == 0 else "cpu")


def test_tflite_batch_matmul_refuses_uint8():
    """uint8 BATCH_MATMUL: litert fails to prepare it; vkinfer refuses, naming the op."""
    blob = tflite_ops.op_model("batch_matmul", 0, dtype="uint8", shape=(2, 3), y_shape=(3, 2))
    refused(blob, {"x": np.zeros((2, 3), np.uint8), "x1": np.zeros((3, 2), np.uint8)}, "int8",
            name="BATCH_MATMUL")


_ASAN_SCRIPT = """
import numpy as np, vkinfer
from vkinfer.testing import tflite_ops
rng = np.random.default_rng(3)
cases = [((5, 9), (9, 6), 0, 0, 0), ((2, 3, 7, 5), (3, 4, 7), 1, 1, 3), ((3, 1, 16, 8), (1, 2, 16, 8), 1, 0, 0),
         ((2, 6, 1), (2, 1, 5), 0, 0, -4), ((1, 1), (1, 1), 0, 0, 0)]
for k, (xs, ys, ax, ay, yz) in enumerate(cases):
    blob = tflite_ops.op_model("batch_matmul", k, shape=xs, y_shape=ys, adj_x=ax, adj_y=ay,
                               qparams={"x": (0.02, 3), "y": (0.03, yz), "out": (0.2, -1)})
    feed = {"x": rng.integers(-128, 128, xs).astype(np.int8), "x1": rng.integers(-128, 128, ys).astype(np.int8)}
    ref = vkinfer.InferenceSession(blob, device="reference").run(None, feed)[0]
    s = vkinfer.InferenceSession(blob, device="cpu")
    assert set(s.placement.values()) == {"cpu"}, s.placement
    for _ in range(2):
        np.testing.assert_array_equal(s.run(None, feed)[0], ref)
print("tflite_batch_matmul asan: ok")
"""


def test_tflite_batch_matmul_c_operator_under_asan_and_ubsan():
    """The C operator (cpu_fallback/src/ops/tflite_batch_matmul.c) in the AddressSanitizer + UBSan build."""
    import sys

    from support.cpu_build import ROOT, run_sanitized

    run_sanitized([sys.executable, "-c", _ASAN_SCRIPT], "tflite_batch_matmul asan: ok", cwd=ROOT)
