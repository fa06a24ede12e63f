"""Field models (vkinfer.testing.field_zoo: DS-CNN and MobileNetV2 keyword spotters, MobileNetV1 0.25 visual wake
words, MLPerf Tiny ResNet-8, and the fixed-cost tiny convolution) in int8 and uint8 through
vkinfer.InferenceSession on every device (tests/support/agree.py: reference, cpu and vulkan give the same bits), against
ai-edge-litert's Interpreter (and ONNX Runtime for the ONNX tiny convolution).

Bound: zero. Both the int8/uint8 ``logits`` and the SOFTMAX ``output`` must equal TFLite's exactly. The
convolutions, MEAN and FULLY_CONNECTED follow XNNPACK's numerics (float32 multipliers, round half to even) and
AVERAGE_POOL_2D, ADD and SOFTMAX are imported as TFLite's own arithmetic (vkinfer:TFLite*), so no rounding tie can
fall differently (tests/importers/test_tflite.py asserts the same bound for its MEAN and AVERAGE_POOL_2D models).
"""

import functools

import numpy as np
import pytest
from support.agree import run_devices

import vkinfer
from vkinfer.testing import field_zoo, tflite_zoo, zoo

MODELS = [*field_zoo.FIELD_MODELS, "tiny_conv"]
INPUT_SEEDS = range(3)


@functools.cache
def _blob(name: str, dtype: str) -> bytes:
    builder = field_zoo.FIELD_MODELS.get(name, field_zoo.tiny_conv)
    return builder(0, dtype)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("name", MODELS)
def test_matches_litert(name, dtype):
    """Every device gives litert's bits (dtype, shape, every byte) on each input seed."""
    blob = _blob(name, dtype)
    names = [o.name for o in vkinfer.InferenceSession(blob, device="reference").get_outputs()]
    assert names == (["output"] if name == "tiny_conv" else ["logits", "output"])
    for seed in INPUT_SEEDS:
        feed = field_zoo.field_inputs(name, seed, dtype)
        want = tflite_zoo.litert_run(blob, feed)
        assert all(want[n].dtype == np.dtype(dtype) for n in names), {n: want[n].dtype for n in names}
        run_devices(blob, feed, want=[want[n] for n in names])


def test_tiny_conv_onnx_matches_ort():
    model = field_zoo.tiny_conv_onnx(0)
    assert zoo.op_types(model) == ["QLinearConv"]
    for seed in INPUT_SEEDS:
        feed = field_zoo.field_inputs("tiny_conv_onnx", seed)
        assert feed["input"].dtype == np.uint8 and feed["input"].shape == (1, 8, 8, 8)
        want = zoo.ort_run(model, feed)
        assert want[0].dtype == np.uint8
        run_devices(model, feed, want=want)


# (input shape, ops, MACs) of each model: the published sizes (DS-CNN-S ~2.7 M MACs, MobileNetV1 0.25/96 ~7.5 M,
# ResNet-8 ~12.5 M) and what the docstrings promise.
EXPECTED = {
    "ds_cnn_kws": ((1, 49, 10, 1), 13, 2_656_768),
    "mobilenet_v2_kws": ((1, 59, 49, 1), 21, 1_882_848),
    "mobilenet_v1_vww": ((1, 96, 96, 3), 31, 7_489_664),
    "resnet8": ((1, 32, 32, 3), 16, 12_501_632),
    "tiny_conv": ((1, 8, 8, 8), 1, 36_864),
}


@pytest.mark.parametrize("name", MODELS)
def test_describe_and_inputs(name):
    shape, ops, macs = EXPECTED[name]
    for dtype in ("int8", "uint8"):
        d = field_zoo.describe(_blob(name, dtype))
        assert (d["input_shape"], d["ops"], d["macs"], d["input_type"]) == (shape, ops, macs, dtype)
        assert "QUANTIZE" not in d["op_types"]  # the 8-bit features are the graph input, as in the field
        x = field_zoo.field_inputs(name, 0, dtype)["input"]
        assert x.shape == shape and x.dtype == np.dtype(dtype)
    assert _blob(name, "int8") == field_zoo.FIELD_MODELS.get(name, field_zoo.tiny_conv)(0, "int8")  # seeded
    assert _blob(name, "int8") != field_zoo.FIELD_MODELS.get(name, field_zoo.tiny_conv)(1, "int8")
