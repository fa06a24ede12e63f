"""TFLite import: vkinfer.InferenceSession on int8/uint8 .tflite models against ai-edge-litert's Interpreter.

TFLite requantizes with fixed-point multipliers and rounds AVERAGE_POOL_2D halves away from zero; vkinfer follows
ONNX Runtime (float32 multipliers, round half to even). So the compared int8/uint8 tensors may differ by one step;
the fraction of differing values is printed (run with -s) and must stay small.
"""

import numpy as np
import pytest

import vkinfer
from vkinfer.model.onnx_import import UnsupportedModelError
from vkinfer.model.tflite_import import import_tflite, is_tflite
from vkinfer.models import tflite_zoo

pytest.importorskip("ai_edge_litert")

DEVICES = ["reference", "cpu", "vulkan"]
IMAGES = 6


def _images(n=IMAGES):
    return [np.random.default_rng(100 + i).uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32) for i in range(n)]


def _compare(blob, names, device):
    """Max |difference| and fraction differing per output name over IMAGES images."""
    sess = vkinfer.InferenceSession(blob, device=device)
    diffs = {n: [] for n in names}
    for x in _images():
        want = tflite_zoo.litert_run(blob, {"input": x})
        got = dict(zip(names, sess.run(names, {"input": x}), strict=True))
        for n in names:
            assert got[n].dtype == want[n].dtype and got[n].shape == want[n].shape, n
            diffs[n].append(np.abs(got[n].astype(np.int64) - want[n].astype(np.int64)).ravel())
    return {n: (int(np.concatenate(d).max()), float(np.mean(np.concatenate(d) > 0))) for n, d in diffs.items()}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kw", [dict(seed=0), dict(seed=1, head="dequantize"),
                                dict(seed=0, dtype="uint8"), dict(seed=2, dtype="uint8", head="dequantize")],
                         ids=["int8-mean-softmax", "int8-mean-dequantize", "uint8-mean-softmax",
                              "uint8-mean-dequantize"])
def test_tiny_cnn_matches_litert(kw, device):
    blob = tflite_zoo.tiny_cnn(**kw)
    assert is_tflite(blob)
    stats = _compare(blob, ["logits", "output"], device)
    print(f"\n{kw} on {device}: logits max diff {stats['logits'][0]}, fraction differing {stats['logits'][1]:.4f}")
    assert stats["logits"][0] <= 1
    if kw.get("head") == "dequantize":
        assert stats["output"][0] <= 1  # float32 of logits differing by <= 1 step: compared as ints, 0 expected
    else:
        assert stats["output"][0] <= 2  # SOFTMAX: TFLite's exp table vs float softmax, not a contract


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype,seed", [("int8", 0), ("uint8", 2)])
def test_average_pool(dtype, seed, device):
    """AVERAGE_POOL_2D: TFLite rounds the average half away from zero, ONNX half to even, so the pooled tensor
    (the compared 8-bit output here) may differ by one step; the fully connected layer after it scales such a
    step by sum(|w|) * scale ratio (up to about 5 steps of the logits in these models), so logits get a loose
    bound only."""
    blob = tflite_zoo.tiny_cnn(seed, dtype=dtype, pool="average_pool", head="dequantize", extra_outputs=("pool",))
    stats = _compare(blob, ["pool", "logits"], device)
    print(f"\n{dtype} avgpool on {device}: (max diff, fraction differing) {stats}")
    assert stats["pool"][0] <= 1
    assert stats["logits"][0] <= 8


@pytest.mark.parametrize("device", ["reference", "cpu"])
def test_mobilenet_v2_matches_litert(device):
    """The whole MobileNetV2 topology (17 inverted residual blocks) at a small size: int8 logits within 1 step."""
    blob = tflite_zoo.mobilenet_v2(seed=0, size=64, width=0.35, num_classes=10)
    sess = vkinfer.InferenceSession(blob, device=device)
    diffs = []
    for i in range(IMAGES):
        x = np.random.default_rng(200 + i).uniform(-1, 1, (1, 64, 64, 3)).astype(np.float32)
        want = tflite_zoo.litert_run(blob, {"input": x})["logits"]
        got = sess.run(["logits"], {"input": x})[0]
        assert got.dtype == want.dtype == np.int8 and got.shape == want.shape == (1, 10)
        diffs.append(np.abs(got.astype(np.int64) - want.astype(np.int64)).ravel())
    d = np.concatenate(diffs)
    print(f"\nmobilenet_v2 on {device}: logits max diff {d.max()}, fraction differing {np.mean(d > 0):.4f}")
    assert d.max() <= 1


def test_path_and_graph(tmp_path):
    blob = tflite_zoo.tiny_cnn(0)
    p = tmp_path / "m.tflite"
    p.write_bytes(blob)
    sess = vkinfer.InferenceSession(str(p), device="reference")
    assert [i.name for i in sess.get_inputs()] == ["input"]
    assert [(o.name, o.type) for o in sess.get_outputs()] == [("logits", "tensor(int8)"), ("output", "tensor(int8)")]
    ops = [n.op for n in sess.graph.nodes]
    # Convolutions chain in NCHW: one Transpose in, one out (before RESHAPE).
    assert ops.count("Transpose") == 2
    assert ops.count("vkinfer:QLinearConvClamp") == 2 and "com.microsoft:QGemm" in ops


def _unsupported_model() -> bytes:
    m = tflite_zoo.ModelBuilder()
    B = tflite_zoo.tflite.BuiltinOperator
    x = m.tensor("input", (1, 4), np.float32)
    q = m.tensor("q", (1, 4), np.int8, scale=0.01, zero_point=0)
    t = m.tensor("tanh", (1, 4), np.int8, scale=1 / 128, zero_point=0)
    s = m.tensor("sigmoid", (1, 4), np.int8, scale=1 / 256, zero_point=-128)
    y = m.tensor("output", (1, 4), np.float32)
    m.op(B.QUANTIZE, [x], [q])
    m.op(B.TANH, [q], [t])
    m.op(B.LOGISTIC, [t], [s])
    m.op(B.DEQUANTIZE, [s], [y])
    return m.finish([x], [y])


def test_unsupported_ops_listed():
    blob = _unsupported_model()
    tflite_zoo.litert_run(blob, {"input": np.zeros((1, 4), np.float32)})  # a valid model for TFLite
    with pytest.raises(UnsupportedModelError) as e:
        vkinfer.InferenceSession(blob, device="reference")
    msg = str(e.value)
    assert "op 1 (TANH): op not supported" in msg and "op 2 (LOGISTIC): op not supported" in msg
    assert "QUANTIZE" not in msg


def test_corrupt_files():
    blob = tflite_zoo.tiny_cnn(0)
    for bad in (blob[:200], blob[:8] + bytes(200), blob[:8] + np.random.default_rng(0).bytes(len(blob) - 8)):
        assert is_tflite(bad)
        with pytest.raises(ValueError) as e:
            vkinfer.InferenceSession(bad, device="reference")
        assert not isinstance(e.value, UnsupportedModelError) or "cannot read" in str(e.value)
    with pytest.raises(ValueError, match="TFL3"):
        import_tflite(b"\x00" * 64, {})
