"""The loop iterations one shader invocation may run on every Vulkan device vkinfer supports.

Mesa's llvmpipe (lavapipe, the CPU Vulkan driver vkinfer is tested on) ends every loop of a shader once the passes
through all its loops together reach 65535 (gallivm's LP_MAX_TGSI_LOOP_ITERATIONS: one counter per invocation,
shared by every loop, decremented at each pass through a loop's end, the exiting pass included). A longer reduction
silently stops early and gives wrong bits with no error. Measured on lavapipe: a TFLite MEAN over 65,500 values (one
loop) missed its last values; QLinearGlobalAveragePool over 256x257, AVERAGE_POOL_2D and MaxPool over 255x257
windows, QLinearSoftmax over rows of 34,000 and 50,257 gave wrong values. A lowering whose shader would loop more
than `LOOP_BUDGET` times in one invocation refuses the node (ValueError), so the plan places it on the CPU, on every
Vulkan device alike (one plan and the same bits everywhere). shaders/tflite_mean.comp unrolls its innermost loop to
sum ~1M values in one invocation; the pools' windows and QLinearGlobalAveragePool's planes stop at ~64,000
positions.
"""

from __future__ import annotations

from collections.abc import Iterable

#: llvmpipe's shared limit (65535) less 1024 for a shader's own short loops (requantization's normalisation
#: loops, per-byte loops: about 40 measured in tflite_mean.comp, at most ~300 possible).
LOOP_BUDGET = 65535 - 1024


def loop_cost(trips: int) -> int:
    """What one entry of a loop of `trips` iterations takes from the counter: llvmpipe runs a loop's body until
    every lane has left it, so the pass that exits counts too (measured: 4,000 entries of a 15-trip loop, 64,000
    iterations, were cut short)."""
    return max(int(trips), 0) + 1


def nested_iterations(trips: Iterable[int]) -> int:
    """Counter cost of perfectly nested loops with these trip counts, outer to inner: each level's `loop_cost`
    times the entries of its loop."""
    total, entries = 0, 1
    for t in trips:
        total += entries * loop_cost(t)
        entries *= max(int(t), 0)
    return total


def check_loops(op: str, iterations: int) -> None:
    """ValueError naming `op` when one invocation would run more than LOOP_BUDGET loop iterations."""
    if iterations > LOOP_BUDGET:
        raise ValueError(f"{op}: one shader invocation would run {iterations} loop iterations, past the "
                         f"{LOOP_BUDGET} every Vulkan device runs correctly (llvmpipe ends loops at 65535 in all)")
