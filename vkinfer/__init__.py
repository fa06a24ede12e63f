"""vkinfer: 8-bit quantized neural networks on any Vulkan GPU (through Kompute), numpy in and out.

    import vkinfer
    vkinfer.devices()                      # Vulkan devices, most preferred first
    y = vkinfer.ops.qlinear_conv(...)      # ONNX QLinearConv, bit-exact with ONNX Runtime
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import ops
from ._vk import DeviceInfo
from .errors import PlacementError, ShaderCompileError, VkInferError, VulkanUnavailableError

__version__ = "0.1.0"


def devices() -> list[DeviceInfo]:
    """Vulkan devices in vkinfer's order of preference: discrete, integrated, virtual, then CPU
    implementations, the faster first (lavapipe, then SwiftShader when Debian's chromium-common is
    installed). Each has name, type, driver and limits. `$VKINFER_DEVICE` (an index, a name substring
    or a type) picks one for every op."""
    from ._vk import devices as _devices

    return _devices()


if TYPE_CHECKING:
    from .model.session import InferenceSession


def __getattr__(name: str):
    # InferenceSession needs the `onnx` package; load it only when asked for.
    if name == "InferenceSession":
        from .model.session import InferenceSession

        return InferenceSession
    raise AttributeError(f"module 'vkinfer' has no attribute {name!r}")


__all__ = ["ops", "devices", "InferenceSession", "DeviceInfo", "VkInferError", "VulkanUnavailableError",
           "PlacementError", "ShaderCompileError", "__version__"]
