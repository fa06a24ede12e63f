"""vkinfer: 8-bit quantized neural networks on any Vulkan GPU (through Kompute), numpy in and out.

    import vkinfer
    vkinfer.devices()                      # Vulkan devices, most preferred first
    y = vkinfer.ops.qlinear_conv(...)      # ONNX QLinearConv, bit-exact with ONNX Runtime
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import ops
from ._version import __version__
from ._vk import DeviceInfo
from .errors import (
    HostNodeWarning,
    PlacementError,
    ShaderCompileError,
    SizeLimitError,
    VkInferError,
    VulkanDeviceError,
    VulkanDeviceLostError,
    VulkanOutOfMemoryError,
    VulkanUnavailableError,
)


def devices() -> list[DeviceInfo]:
    """Vulkan devices in vkinfer's order of preference: discrete, integrated, virtual, then CPU
    implementations, the faster first (lavapipe, then SwiftShader when Debian's chromium-common is
    installed). Each has name, type, driver and limits. `$VKINFER_DEVICE` (an index, a name substring
    or a type) picks one for every op."""
    from ._vk import devices as _devices

    return _devices()


if TYPE_CHECKING:
    from .ort import (
        ExecutionMode,
        GraphOptimizationLevel,
        InferenceSession,
        IOBinding,
        ModelMetadata,
        NodeArg,
        OrtValue,
        RunOptions,
        SessionOptions,
        get_all_providers,
        get_available_providers,
        get_device,
    )


# ONNX Runtime's API (vkinfer/ort.py: `import vkinfer as ort` runs an onnxruntime script) and LiteRT's
# (vkinfer/tflite.py: vkinfer.tflite.Interpreter); they need the `onnx` package, so they load when first asked for.
_ORT_NAMES = ("InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode",
              "ModelMetadata", "IOBinding", "OrtValue", "NodeArg", "get_available_providers", "get_all_providers",
              "get_device")


def __getattr__(name: str):
    if name in _ORT_NAMES:
        from . import ort

        return getattr(ort, name)
    if name in ("ort", "tflite"):
        import importlib

        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'vkinfer' has no attribute {name!r}")


__all__ = ["ops", "devices", "DeviceInfo", "VkInferError", "VulkanUnavailableError", "PlacementError",
           "HostNodeWarning", "ShaderCompileError", "VulkanDeviceError", "VulkanDeviceLostError",
           "VulkanOutOfMemoryError", "SizeLimitError", "__version__", "InferenceSession", "SessionOptions",
           "RunOptions", "GraphOptimizationLevel", "ExecutionMode", "ModelMetadata", "IOBinding", "OrtValue", "NodeArg",
           "get_available_providers", "get_all_providers", "get_device"]
