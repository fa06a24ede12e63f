"""Whole QOperator models from the seeded zoo (quantized by onnxruntime.quantization) through
vkinfer.InferenceSession on every device, bit-identical to ONNX Runtime.

u8 x s8 models use 7-bit weights (reduce_range): ORT's x86 u8 x s8 kernels saturate int16 pair
sums on full-range weights and are then not exact (README); u8 x u8 models use the full range.
"""

import numpy as np
import pytest

import vkinfer
from vkinfer.models import zoo

MODELS = ["mobilenet_v1", "mobilenet_v2", "shufflenet_like", "resnext_like", "dilated_net", "mlp"]
SMALL = {"mobilenet_v2": dict(width=0.35, size=64, num_classes=10)}  # the others default to tiny sizes
# (activations, weights, 7-bit weights, per-channel); onnxruntime.quantization writes per-channel
# weights as int8 only for some ops, so u8 x u8 is per-tensor.
VARIANTS = [("uint8", "int8", True, False), ("uint8", "int8", True, True), ("uint8", "uint8", False, False)]


@pytest.mark.parametrize("act,wt,reduce_range,per_channel", VARIANTS, ids=["u8s8_7bit", "u8s8_7bit_pc", "u8u8"])
@pytest.mark.parametrize("name", MODELS)
def test_qoperator_model_equals_onnxruntime(name, act, wt, reduce_range, per_channel):
    q = zoo.quantize(zoo.BUILDERS[name](seed=1, **SMALL.get(name, {})), fmt="qoperator", per_channel=per_channel,
                     activation_type=act,
                     weight_type=wt, reduce_range=reduce_range, seed=1)
    feed = zoo.random_inputs(q, seed=2)
    want = zoo.ort_run(q, feed)
    for device in ["reference", "cpu", "vulkan"]:
        got = vkinfer.InferenceSession(q.SerializeToString(), device=device).run(None, feed)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"{name} on {device}")


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("name", MODELS)
def test_qdq_model_equals_onnxruntime(name, per_channel):
    """QDQ models: vkinfer folds DequantizeLinear -> op -> QuantizeLinear into the quantized ops, as
    ORT's graph optimizer does, so both run the same integer arithmetic."""
    q = zoo.quantize(zoo.BUILDERS[name](seed=3, **SMALL.get(name, {})), fmt="qdq", per_channel=per_channel,
                     activation_type="uint8", weight_type="int8", reduce_range=True, seed=3)
    feed = zoo.random_inputs(q, seed=4)
    want = zoo.ort_run(q, feed)
    for device in ["reference", "cpu", "vulkan"]:
        got = vkinfer.InferenceSession(q.SerializeToString(), device=device).run(None, feed)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w, err_msg=f"{name} (QDQ) on {device}")
