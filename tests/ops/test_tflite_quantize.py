"""TFLite's QUANTIZE against ai-edge-litert on every device. Of float32, it is vkinfer:TFLiteQuantize (a multiply
by float32(1 / scale), not ONNX's division; cpu/quantize_linear.py): on the cpu, also in a Vulkan session (its
float edge, the documented fallback). 8-bit to the same type with a scale ratio in [2**-8, 2**7] is
vkinfer:TFLiteQuantize too (XNNPACK's 8-bit-fraction multiplier; a 256-entry table, cpu/qlinear_lut.py), on the
cpu in both sessions (Vulkan has no form of it); other ratios and int8 <-> uint8 import as DequantizeLinear ->
QuantizeLinear, also on the cpu. Shapes of ranks 1-4 (odd sizes), scales that are and are not powers of two,
values on ties and out of range."""

from __future__ import annotations

import numpy as np
import pytest
import tflite

from vkinfer.testing import tflite_zoo

from ._build import check_vs_litert, qrand, refused

FLOAT = [  # (id, shape, dtype, scale or None: seeded)
    ("r1", (37,), "int8", None), ("r2", (3, 11), "uint8", 0.0625), ("r3", (2, 5, 7), "int8", 0.0173),
    ("r4", (1, 9, 9, 3), "uint8", None), ("r4_pow2", (1, 4, 6, 5), "int8", 2.0**-5),
    ("mobilenet_input", (1, 224, 224, 3), "int8", 0.0078125),
]
REQUANT = [  # (id, dtype, out dtype, ratio or None: seeded in [0.6, 1.6], imported op)
    ("same_type_int8", "int8", "int8", None, "vkinfer:TFLiteQuantize"),
    ("same_type_uint8_ratio_100", "uint8", "uint8", 100.0, "vkinfer:TFLiteQuantize"),
    ("same_type_ratio_1_200", "int8", "int8", 1 / 200, "vkinfer:TFLiteQuantize"),
    ("same_type_ratio_300", "int8", "int8", 300.0, "QuantizeLinear"),
    ("int8_to_uint8", "int8", "uint8", None, "QuantizeLinear"),
    ("uint8_to_int8", "uint8", "int8", 0.8, "QuantizeLinear"),
]


@pytest.mark.parametrize("cid,shape,dt,scale", FLOAT, ids=[c[0] for c in FLOAT])
def test_float_quantize_equals_litert(cid, shape, dt, scale):
    blob = tflite_zoo.op_model("quantize", len(cid), dtype=dt, shape=shape, **({"scale": scale} if scale else {}))
    rng = np.random.default_rng(len(cid))
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    x.flat[::5] = (np.round(x.flat[::5] * 16) / 16 + np.float32(1 / 32)).astype(np.float32)  # halves of the 1/16 grid
    x.flat[:2] = [np.float32(1e9), np.float32(-1e9)]
    per_device = check_vs_litert(blob, {"x": x}, where="cpu")
    assert [n.op for n in per_device["reference"].graph.nodes] == ["vkinfer:TFLiteQuantize"]


@pytest.mark.parametrize("cid,dt,out_dt,ratio,op", REQUANT, ids=[c[0] for c in REQUANT])
def test_requantize_equals_litert(cid, dt, out_dt, ratio, op):
    blob = tflite_zoo.op_model("requantize", len(cid), dtype=dt, shape=(1, 4, 8, 8), out_dtype=out_dt, ratio=ratio)
    every = np.arange(256, dtype=np.uint8).view(np.dtype(dt)).reshape(1, 4, 8, 8)
    per_device = check_vs_litert(blob, [{"x": every}, {"x": qrand(np.random.default_rng(1), every.shape, every.dtype)}],
                                 where="cpu")
    assert per_device["reference"].graph.nodes[-1].op == op


def test_bad_quantize_scale_refused_naming_the_node():
    m = tflite_zoo.ModelBuilder()
    x = m.tensor("x", (2, 10), np.float32)
    y = m.tensor("out", (2, 10), np.int8, scale=0.0, zero_point=0)
    m.op(tflite.BuiltinOperator.QUANTIZE, [x], [y])
    refused(m.finish([x], [y]), {"x": np.zeros((2, 10), np.float32)}, "scale", name="TFLiteQuantize_0")
