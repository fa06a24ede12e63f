"""vkinfer's exception types. Bad arguments raise the builtin ValueError / TypeError."""


class VkInferError(RuntimeError):
    """Base class of vkinfer's own run-time errors."""


class VulkanUnavailableError(VkInferError):
    """No usable Vulkan loader, driver, device or native module; the message says what to install."""


class PlacementError(ValueError):
    """A hand-given placement names an unknown node or device, or a node the device cannot run."""


class ShaderCompileError(VkInferError):
    """glslang is missing or rejected a shader."""


class HostNodeWarning(RuntimeWarning):
    """A compiled session runs some of its nodes on the host (numpy, not native code): each run then returns to
    Python between native calls. Warned once per session, naming the count and the ops; `vkinfer info MODEL`
    lists each node with why no device takes it. Silence it with
    `warnings.simplefilter("ignore", vkinfer.HostNodeWarning)`."""
