"""The compiler: a graph placed on devices, cut into segments with their runners and memory, as one plan.

Layer: above the backends (vkinfer.cpu, vkinfer.vulkan, vkinfer.dispatch), below the session
(tests/package/test_layers.py).
"""
