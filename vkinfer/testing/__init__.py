"""Test models and their builders, for the tests, the benches and `vkinfer bench` / the demo (tools layer: the
runtime imports none of it).

- `onnx_builder`: the one ONNX graph builder (`make_model` for hand-written nodes, `GraphBuilder`).
- `zoo`: small float ONNX CNNs with seeded random weights, their static 8-bit quantization, an ORT runner
  (re-exported here); `field_onnx`: float models shaped like field ones (MobileNetV3, YOLOv8n, DB, CRNN).
- `tflite_builder`: the TFLite ModelBuilder, its float and quantization helpers, litert; `tflite_zoo`: seeded
  8-bit TFLite models; `tflite_ops`: one-op TFLite models; `field_zoo`: MLPerf Tiny-like 8-bit TFLite models.
"""

from __future__ import annotations

from .zoo import (
    BUILDERS,
    dilated_net,
    mlp,
    mobilenet_v1,
    mobilenet_v2,
    op_types,
    ort_run,
    quantize,
    random_inputs,
    resnext_like,
    shufflenet_like,
)

__all__ = ["BUILDERS", "mobilenet_v2", "mobilenet_v1", "shufflenet_like", "resnext_like", "dilated_net", "mlp",
           "quantize", "ort_run", "random_inputs", "op_types"]
