"""Per-layer times of a session's plan: moved to vkinfer/layer_times.py (the session layer, which ONNX Runtime's
enable_profiling uses too); the benchmark keeps this name."""

from ..layer_times import PROFILE_ROUNDS, _cpu_op_nodes, per_layer  # noqa: F401
