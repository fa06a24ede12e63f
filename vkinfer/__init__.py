"""vkinfer: 8-bit quantized neural networks on any Vulkan GPU (through Kompute), numpy in and out.

    import vkinfer
    vkinfer.devices()                      # Vulkan devices, most preferred first
    y = vkinfer.ops.qlinear_conv(...)      # ONNX QLinearConv, bit-exact with ONNX Runtime
"""

from __future__ import annotations

from . import ops
from ._vk import DeviceInfo
from .errors import ShaderCompileError, VkInferError, VulkanUnavailableError

__version__ = "0.1.0"


def devices() -> list[DeviceInfo]:
    """Vulkan devices in vkinfer's order of preference: discrete, integrated, virtual, then CPU
    implementations such as lavapipe. Each has name, type, driver and limits. `$VKINFER_DEVICE`
    (an index, a name substring or a type) picks one for every op."""
    from ._vk import devices as _devices

    return _devices()


__all__ = ["ops", "devices", "DeviceInfo", "VkInferError", "VulkanUnavailableError", "ShaderCompileError",
           "__version__"]
