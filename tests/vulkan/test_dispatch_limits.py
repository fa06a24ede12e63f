"""Vulkan lowerings refuse a dispatch past 65535 workgroups in any dimension (the least maxComputeWorkGroupCount
Vulkan guarantees; checked at lowering from the shapes, so every device places the node alike), and the plan puts
that node on the CPU: device="vulkan" answers what the reference and cpu answer. QLinearGlobalAveragePool dispatches
one workgroup row per batch item: a batch of 65536 (../shared/regressions/hang/case_112893 and
nonclean/case_125185, MobileNets fed 65536 images) was a ValueError at run on vulkan only."""

from __future__ import annotations

import numpy as np
from ops._build import model, node, ort_run, qrand
from support.agree import run_devices

import vkinfer


def test_global_average_pool_of_a_large_batch_runs_on_the_cpu_of_a_vulkan_session():
    rng = np.random.default_rng(0)
    shape = (65536, 4, 2, 1)
    consts = {"xs": np.float32(0.02), "xz": np.asarray(3, np.uint8), "ys": np.float32(0.03),
              "yz": np.asarray(120, np.uint8)}
    blob = model([node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], domain="com.microsoft")],
                 {"x": (np.uint8, shape)}, consts, {"y": np.uint8})
    feed = {"x": qrand(rng, shape, np.uint8)}
    run_devices(blob, feed, want=ort_run(blob, feed))  # reference, cpu and vulkan: ONNX Runtime's bits
    sess = vkinfer.InferenceSession(blob, device="vulkan")
    assert set(sess.placement.values()) == {"cpu"}, sess.placement
    small = vkinfer.InferenceSession(model([node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"],
                                                 domain="com.microsoft")], {"x": (np.uint8, (8, 4, 2, 1))}, consts,
                                           {"y": np.uint8}), device="vulkan")
    assert all(p.startswith("vulkan") for p in small.placement.values()), small.placement
