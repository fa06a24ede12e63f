"""The error classes a user catches are at the package root, as onnxruntime's are under its own name: a size
refusal (`vkinfer.SizeLimitError`, a ValueError) and a failing Vulkan device (`vkinfer.VulkanDeviceLostError`,
`vkinfer.VulkanOutOfMemoryError`, both `vkinfer.VulkanDeviceError`, a `vkinfer.VkInferError`) are the very classes
the session raises."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import vkinfer
from vkinfer import errors
from vkinfer.model import sizes
from vkinfer.testing.onnx_builder import OPSET, ir_version


def test_root_names_are_the_raised_classes():
    for name in ("VkInferError", "VulkanUnavailableError", "PlacementError", "ShaderCompileError",
                 "VulkanDeviceError", "VulkanDeviceLostError", "VulkanOutOfMemoryError", "HostNodeWarning"):
        assert getattr(vkinfer, name) is getattr(errors, name), name
        assert name in vkinfer.__all__
    assert vkinfer.SizeLimitError is sizes.SizeLimitError and "SizeLimitError" in vkinfer.__all__
    assert issubclass(vkinfer.SizeLimitError, ValueError)
    assert issubclass(vkinfer.VulkanDeviceLostError, vkinfer.VulkanDeviceError)
    assert issubclass(vkinfer.VulkanOutOfMemoryError, vkinfer.VulkanDeviceError)
    assert issubclass(vkinfer.VulkanDeviceError, vkinfer.VkInferError)


def test_a_size_refusal_is_caught_by_the_root_class():
    """A Tile to 2**40 bytes: caught as vkinfer.SizeLimitError, naming the node."""
    reps = helper.make_tensor("reps", TensorProto.INT64, [2], [1, 1 << 36])
    g = helper.make_graph([helper.make_node("Tile", ["x", "reps"], ["y"], name="tile")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, None)], [reps])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    m.ir_version = ir_version(OPSET, {})
    with pytest.raises(vkinfer.SizeLimitError, match="tile"):
        s = vkinfer.InferenceSession(m.SerializeToString(), device="cpu")
        s.run(None, {"x": np.ones((1, 16), np.uint8)})


def test_importing_vkinfer_loads_no_onnx():
    """The root's lazy names (SizeLimitError, the ONNX Runtime API) load nothing heavy until asked for."""
    code = ("import sys, vkinfer; assert 'onnx' not in sys.modules and 'vkinfer.model.sizes' not in sys.modules; "
            "vkinfer.SizeLimitError; assert 'onnx' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
