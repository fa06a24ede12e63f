"""Compatibility: calibration now lives in vkinfer/dispatch/calibration/ (grid, measure, fit; the entry
`calibrate_device` in its __init__). This module re-exports its names, the private ones tests reach for
included, and stays the name the dispatcher calls through (`ensure_profile` imports `calibrate_device` from
here at call time, so replacing it here replaces it for the dispatcher).
"""

from __future__ import annotations

from .calibration import (
                          CPU_TILES,
                          GRID,
                          HOST_TILE,
                          MIN_SAMPLES,
                          MODEL_SAMPLES,
                          MODES,
                          TILED,
                          VULKAN_TILE,
                          Sample,
                          Shape,
                          Workload,
                          calibrate_device,
                          field_workload,
                          fit_class,
                          grid,
                          model_samples,
                          pick_tile,
)
from .calibration.fit import _fit_link
from .calibration.grid import (
                          Built,
                          g_binary,
                          g_concat,
                          g_conv,
                          g_dequantize,
                          g_matmul,
                          g_pad,
                          g_pool,
                          g_qgemm,
                          g_quantize,
                          g_shuffle,
                          g_softmax,
                          g_unary,
)
from .calibration.measure import (
                          CHAIN,
                          _cpu_plan,
                          _cpu_probe,
                          _measure_cpu,
                          _measure_host,
                          _measure_vulkan,
                          _op_split,
                          _rounds,
                          _tail,
                          _vulkan_links,
)

__all__ = ["calibrate_device", "fit_class", "pick_tile", "grid", "GRID", "Shape", "Built", "Sample", "MODES",
           "MIN_SAMPLES", "VULKAN_TILE", "HOST_TILE", "CPU_TILES", "TILED", "CHAIN", "MODEL_SAMPLES", "Workload",
           "field_workload", "model_samples", "g_conv", "g_qgemm", "g_matmul", "g_binary", "g_unary", "g_quantize",
           "g_dequantize", "g_softmax", "g_pool", "g_concat", "g_shuffle", "g_pad", "_fit_link", "_cpu_plan",
           "_cpu_probe", "_measure_cpu", "_measure_host", "_measure_vulkan", "_op_split", "_rounds", "_tail",
           "_vulkan_links"]
