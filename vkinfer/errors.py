"""vkinfer's exception types. Bad arguments raise the builtin ValueError / TypeError."""


class VkInferError(RuntimeError):
    """Base class of vkinfer's own run-time errors."""


class VulkanUnavailableError(VkInferError):
    """No usable Vulkan loader, driver, device or native module; the message says what to install."""


class SizeLimitError(ValueError):
    """A tensor, or the session's live tensors, over the session's size limits, or a node's work over its work limit
    (a ValueError: the model or the feed asks for more memory or work than the session allows). Checked by
    vkinfer/model/sizes.py (sizes) and the pool geometry (vkinfer/reference/_pool_shape.py: work)."""


class PlacementError(ValueError):
    """A hand-given placement names an unknown node or device, or a node the device cannot run."""


class ShaderCompileError(VkInferError):
    """glslang is missing or rejected a shader."""


class HostNodeWarning(RuntimeWarning):
    """A compiled session runs some of its nodes on the host (numpy, not native code): each run then returns to
    Python between native calls. Warned once per session, naming the count and the ops; `vkinfer info MODEL`
    lists each node with why no device takes it. Silence it with
    `warnings.simplefilter("ignore", vkinfer.HostNodeWarning)`."""


class VulkanDeviceError(VkInferError):
    """A Vulkan device failed while building or running a session: lost, hung or out of memory. A session on
    device="auto" reruns the inference on the CPU instead (one RuntimeWarning) and keeps to the CPU; on
    device="vulkan" the error is raised."""


class VulkanDeviceLostError(VulkanDeviceError):
    """The Vulkan device was lost (VK_ERROR_DEVICE_LOST), or a submit did not finish within the fence timeout
    ($VKINFER_FENCE_TIMEOUT_S): the device runs nothing more; sessions created afterwards open it afresh."""


class VulkanOutOfMemoryError(VulkanDeviceError):
    """A Vulkan call ran out of device or host memory (VK_ERROR_OUT_OF_DEVICE_MEMORY / _HOST_MEMORY)."""


class DeviceUntrustedError(VulkanDeviceError):
    """A Vulkan device that failed vkinfer's self-test (its results differ from the C path's) or that the blocklist
    names (vkinfer/selftest.py): device="vulkan" raises this, naming the device, the driver and the failing case
    (`device`, `name`, `driver`, `case`); device="auto" leaves the device out (a VulkanDeviceError: a session that
    meets it while opening the device runs on the CPU, with a warning). `vkinfer selftest` reruns the test,
    $VKINFER_SELFTEST=0 uses the device untested."""

    def __init__(self, message: str, *, device: str = "", name: str = "", driver: str = "",
                 case: str | None = None):
        super().__init__(message)
        self.device, self.name, self.driver, self.case = device, name, driver, case
