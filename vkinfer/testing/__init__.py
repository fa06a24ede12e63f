"""Test models: small float ONNX CNNs with seeded random weights and their static 8-bit quantization."""

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
