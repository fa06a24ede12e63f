"""ONNX Runtime's Python API over vkinfer: a script written for onnxruntime runs with `import vkinfer as ort`.

    import vkinfer as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    sess = ort.InferenceSession("model.onnx", opts, providers=["VulkanExecutionProvider", "CPUExecutionProvider"])
    [y] = sess.run(None, {sess.get_inputs()[0].name: x})

Execution providers name vkinfer's devices:

    providers                                               vkinfer device
    None or []                                              "auto" (the dispatcher places every node)
    ["VulkanExecutionProvider", "CPUExecutionProvider"]     "auto"
    ["VulkanExecutionProvider"]                             "vulkan" (provider option device_id: "vulkan:<index>",
                                                            device: "vulkan:<name, type or index>")
    ["CPUExecutionProvider", ...] (CPU first)               "cpu" (provider option variant: "cpu:<variant>")

A provider may be given as a name or as a (name, options) pair, or its options in `provider_options` (a list in the
providers' order), as in ONNX Runtime. vkinfer's own keywords (`device=`, `threads=`, `placement=`, `objective=`,
`profile=`) keep working, and a device string in the `sess_options` position is the device, as before.

SessionOptions: intra_op_num_threads (0: vkinfer's default) is the session's CPU thread count (`threads=`);
enable_profiling writes a per-layer Chrome trace (`end_profiling()` returns its path); log_severity_level 3 or 4
silences vkinfer's warnings while the session is made; the other fields are checked and kept (vkinfer always runs
its own import passes: they are part of its numerics, so graph_optimization_level does not change results).

Profiling records, per run, one "Node" event per node of the graph as vkinfer imported it (name
"<node>_kernel_time", args op_name, provider, device), one "Segment" event per device segment run, and a
"model_run" event, with times in microseconds from the session's creation (args "dur_ns" exact). CPU nodes:
the native graph's per-operator timers of that very run (the operators a node became, summed); host nodes: their
wall time; Vulkan nodes: device time from timestamp queries, measured once per compiled plan as
`vkinfer bench --per-layer` does (a plan's nodes share one submit, so a run has no per-node times of its own),
laid out in order from the segment's start. A profiling session runs each segment through Python (no one-call
native path) so that the timers can be read between segments.
"""

from __future__ import annotations

from ..errors import VkInferError
from .iobinding import IOBinding, OrtValue
from .options import (
    CPU_PROVIDER,
    PROVIDERS,
    VULKAN_PROVIDER,
    ExecutionMode,
    GraphOptimizationLevel,
    ModelMetadata,
    RunOptions,
    SessionOptions,
    get_all_providers,
    get_available_providers,
    get_device,
)
from .session import InferenceSession, NodeArg

__all__ = ["InferenceSession", "SessionOptions", "RunOptions", "GraphOptimizationLevel", "ExecutionMode",
           "ModelMetadata", "IOBinding", "OrtValue", "NodeArg", "get_available_providers", "get_all_providers",
           "get_device", "PROVIDERS", "VULKAN_PROVIDER", "CPU_PROVIDER", "VkInferError"]
