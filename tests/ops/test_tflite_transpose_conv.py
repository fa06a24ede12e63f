"""TFLite's int8 TRANSPOSE_CONV against ai-edge-litert on every device, in litert's two kernels:
- the XNNPACK delegate (DELEGATE node, asserted) wherever the total padding (in - 1) * stride + kernel - out is
  not negative: its deconvolution requantizes as the convolution contract (float32 multiplier per channel, one
  product, ties to even), so the importer emits vkinfer:QLinearConvTranspose (vkinfer/reference/
  qlinear_conv_transpose.py) expanded at import into ZeroInsert + a stride-1 QLinearConv (vkinfer/model/
  conv_transpose.py, cpu/zero_insert.py): every node on the session's device (placement asserted);
- TFLite's builtin kernel otherwise (a kernel below the stride with SAME padding; no DELEGATE node, asserted):
  vkinfer:TFLiteTransposeConv (vkinfer/reference/tflite_transpose_conv.py, QuantizeMultiplier and gemmlowp's two
  roundings), on the host.
SAME and VALID, strides 1-3 and unequal, kernels 1x1 to 5x5 and non-square, per-channel and per-tensor weights,
with and without bias, fused RELU / RELU6, batch 2, power-of-two scales (exact halves) and extreme inputs."""

from __future__ import annotations

import numpy as np
import pytest

from vkinfer.testing import tflite_ops

from ._build import check_vs_litert, refused

CASES = [  # (id, NHWC shape, kernel, stride, padding, kw)
    ("s2_k3_same", (1, 5, 6, 4), (3, 3), (2, 2), "SAME", {}),
    ("s2_k3_valid", (1, 5, 6, 4), (3, 3), (2, 2), "VALID", {}),
    ("s2_k4_same_batch2", (2, 4, 4, 3), (4, 4), (2, 2), "SAME", {}),
    ("s2_k2_same", (1, 3, 5, 6), (2, 2), (2, 2), "SAME", {"per_channel": False}),
    ("k1_below_stride_builtin", (1, 4, 4, 8), (1, 1), (2, 2), "SAME", {"bias": False}),
    ("k2_below_stride3_builtin", (2, 3, 4, 5), (2, 2), (3, 3), "SAME", {"activation": "relu6"}),
    ("k1x2_stride3_builtin", (1, 5, 3, 4), (1, 2), (3, 3), "SAME", {"per_channel": False}),
    ("unequal_stride_valid", (1, 6, 5, 3), (3, 2), (1, 2), "VALID", {"activation": "relu"}),
    ("s3_k5_same", (1, 3, 3, 5), (5, 5), (3, 3), "SAME", {"activation": "relu6"}),
    ("s1_k3_same", (1, 7, 7, 4), (3, 3), (1, 1), "SAME", {"filters": 16}),
    ("decoder_like", (1, 8, 8, 32), (4, 4), (2, 2), "SAME", {"filters": 16}),
]


def _litert_delegates(blob: bytes) -> bool:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=blob)
    it.allocate_tensors()
    return "DELEGATE" in [o["op_name"] for o in it._get_ops_details()]


@pytest.mark.parametrize("cid,shape,kernel,stride,padding,kw", CASES, ids=[c[0] for c in CASES])
def test_tflite_transpose_conv_equals_litert_on_every_device(cid, shape, kernel, stride, padding, kw):
    rng = np.random.default_rng(len(cid))
    kw = {"filters": 5, **kw}
    for ties in (False, True):
        extra = {"x_params": (0.5, 3), "w_scale": 0.25, "out_params": (float(rng.choice([2.0, 8.0, 32.0])), -2)} \
            if ties else {}
        blob = tflite_ops.op_model("transpose_conv", len(cid), shape=shape, kernel=kernel, stride=stride,
                                   padding=padding, **kw, **extra)
        builtin = cid.endswith("_builtin")
        assert _litert_delegates(blob) != builtin, "litert's kernel choice changed"
        feeds = [{"x": rng.integers(-128, 128, shape).astype(np.int8)},
                 {"x": rng.choice(np.array([-128, -127, 126, 127, 0], np.int8), shape)}]
        check_vs_litert(blob, feeds, where={"TFLiteTransposeConv_1": "host"} if builtin else None)


def test_tflite_transpose_conv_random_geometry():
    """Seeded sizes, kernels and strides (SAME, kernel >= stride: XNNPACK's form), per-channel weights."""
    rng = np.random.default_rng(25)
    for k in range(8):
        shape = (1, *(int(v) for v in rng.integers(1, 9, 2)), int(rng.integers(1, 9)))
        stride = tuple(int(v) for v in rng.integers(1, 4, 2))
        kernel = tuple(int(s + v) for s, v in zip(stride, rng.integers(0, 3, 2), strict=True))
        blob = tflite_ops.op_model("transpose_conv", 100 + k, shape=shape, kernel=kernel, stride=stride,
                                   padding="SAME", filters=int(rng.integers(1, 12)))
        assert _litert_delegates(blob)
        check_vs_litert(blob, [{"x": rng.integers(-128, 128, shape).astype(np.int8)}])


def test_tflite_transpose_conv_builtin_bound():
    """The builtin kernel's form (kernel < stride somewhere) on seeded geometry: every device gives the reference's
    bits (asserted exactly), and the reference is within one step of litert on at most 0.5% of values (measured:
    1 of 840 values of the 4x2-kernel, 2x3-stride model below, a value 0.0009 below a half that litert rounds
    toward zero where gemmlowp's two roundings give -1; the other seeded models identical)."""
    import vkinfer
    from vkinfer.testing.tflite_zoo import litert_run

    from ._build import check

    rng = np.random.default_rng(25)
    for k in range(8):
        shape = (1, *(int(v) for v in rng.integers(1, 9, 2)), int(rng.integers(1, 9)))
        stride = tuple(int(v) for v in rng.integers(2, 4, 2))
        kernel = (int(rng.integers(1, stride[0])), int(rng.integers(1, 6)))
        if k == 0:
            shape, kernel, stride = (1, 2, 7, 4), (4, 2), (2, 3)
        blob = tflite_ops.op_model("transpose_conv", 107 if k == 0 else 200 + k, shape=shape, kernel=kernel,
                                   stride=stride, padding="SAME", filters=int(rng.integers(1, 12)))
        assert not _litert_delegates(blob)
        x = {"x": rng.integers(-128, 128, shape).astype(np.int8)}
        check(blob, [x], where={"TFLiteTransposeConv_1": "host"})
        got = vkinfer.InferenceSession(blob, device="reference").run(None, x)[0].astype(int)
        want = litert_run(blob, x)["out"].astype(int)
        assert np.abs(got - want).max() <= 1 and np.count_nonzero(got != want) <= 0.005 * got.size + 1, (
            shape, kernel, stride, np.count_nonzero(got != want))


def test_tflite_transpose_conv_refuses_uint8():
    """uint8 activations (with int8 weights): litert's delegate fails to prepare; vkinfer refuses, naming the op."""
    blob = tflite_ops.op_model("transpose_conv", 0, dtype="uint8", shape=(1, 4, 4, 3))
    refused(blob, {"x": np.zeros((1, 4, 4, 3), np.uint8)}, "int8", name="TRANSPOSE_CONV")
