"""The shared table of the 8-bit binary ops com.microsoft QLinearAdd and QLinearMul (tests/ops/test_qlinear_add.py,
test_qlinear_mul.py): every broadcast kind the lowerings know, and those they leave to the host.

The devices run every numpy broadcast (ranks 0-5, either side broadcasting, scalars): the CPU's QLinearAdd in ORT's
float arithmetic at per-axis strides (cpu/qlinear_add.py, the `qadd` operator), QLinearMul's equal shapes and channel
rows as table lookups (65536 entries, the reference on every byte pair: cpu/qlinear_lut.py) and its other
broadcasts as the same table at strides (`qadd` with a table); Vulkan as table lookups (vulkan/qlinear_lut.py), any
broadcast reading the packed operands at their strides. QLinearAdd's operand swap (ORT's broadcaster: input 0
"scalar" at its innermost axis) changes the last bit of the float sum, so the table keeps it: the swap cases below
are checked against ORT. A 5-D "row" broadcast was once taken as a row of the 5-D device form (N, A, B, H, W), which
has no row of the last axis (Vulkan gave 44 of 48 values wrong: found here, fixed in model/lowering.py binary_mode);
it now runs at strides."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import check, model, node, ort_run, qrand, qrange

TABLE = [  # (id, a shape, b shape, where on cpu, where on vulkan)
    ("equal_r4", (1, 5, 7, 9), (1, 5, 7, 9), "cpu", "vulkan"),
    ("equal_r1", (37,), (37,), "cpu", "vulkan"),
    ("equal_r3_batch", (2, 3, 10), (2, 3, 10), "cpu", "vulkan"),
    ("row_r4_channels", (2, 6, 5, 3), (1, 6, 1, 1), "cpu", "vulkan"),
    ("row_r2", (3, 7), (7,), "cpu", "vulkan"),
    ("row_r3", (2, 5, 6), (1, 1, 6), "cpu", "vulkan"),
    ("row_r5", (1, 2, 3, 2, 4), (1, 1, 1, 1, 4), "cpu", "vulkan"),  # not a row of the 5-D device form
    ("scalar_first", (1,), (2, 3, 4), "cpu", "vulkan"),
    ("spatial_b", (1, 3, 4, 5), (1, 1, 4, 5), "cpu", "vulkan"),
    ("resnet_residual", (1, 64, 28, 28), (1, 64, 28, 28), "cpu", "vulkan"),
    ("se_gate", (1, 96, 14, 14), (1, 96, 1, 1), "cpu", "vulkan"),
    # any numpy broadcast (ORT swaps QLinearAdd's operands where a's innermost non-trivial axis is 1)
    ("nsfw_bias_r4", (1, 7, 7, 1024), (1, 1, 1, 1024), "cpu", "vulkan"),  # open_nsfw: [1, 1, 1, C] on NCHW
    ("yoloseg_mul", (1, 4, 8400), (1, 8400), "cpu", "vulkan"),  # slider_yoloseg: b lower rank
    ("both_sides", (2, 1, 4), (3, 1), "cpu", "vulkan"),
    ("both_sides_r4", (1, 3, 1, 5), (2, 1, 4, 1), "cpu", "vulkan"),
    ("a_scalar_r0", (), (2, 3), "cpu", "vulkan"),
    ("b_scalar_r0", (3, 1, 5), (), "cpu", "vulkan"),
    ("both_scalar", (), (), "host", "host"),  # the shape trace records no 0-D output of two 0-D inputs
    ("a_column_swap", (4, 1), (4, 6), "cpu", "vulkan"),
    ("a_channels_r4_swap", (1, 6, 1, 1), (2, 6, 3, 5), "cpu", "vulkan"),
    ("r5_middle", (2, 3, 1, 2, 5), (1, 3, 4, 1, 1), "cpu", "vulkan"),
    ("r5_vs_r2", (1, 2, 3, 4, 5), (4, 5), "cpu", "vulkan"),
    ("r1_vs_r4", (5,), (2, 3, 4, 5), "cpu", "vulkan"),
    ("odd_rows_r3", (3, 5, 7), (3, 1, 7), "cpu", "vulkan"),
    ("long_rows", (2, 5000), (1, 5000), "cpu", "vulkan"),  # rows past the C operator's 4096-byte chunk
]


def params() -> list:
    """TABLE's indices as pytest params, the known disagreement marked."""
    return [pytest.param(k, id=c[0]) for k, c in enumerate(TABLE)]


def binary_model(op: str, sa, sb, dt, seed: int, change: dict | None = None) -> tuple[bytes, dict]:
    """The one-node com.microsoft `op` model (a, b graph inputs, seeded parameters) and a feed."""
    rng = np.random.default_rng(seed)
    lo, hi = qrange(dt)
    ys = 0.05 if op == "QLinearAdd" else 0.02 * 0.03 * 60
    consts = {"as": np.float32(0.02), "az": np.asarray(rng.integers(lo, hi + 1), dt), "bs": np.float32(0.03),
              "bz": np.asarray(rng.integers(lo, hi + 1), dt), "ys": np.float32(ys),
              "yz": np.asarray(rng.integers(lo + 60, hi - 60), dt)} | (change or {})
    blob = model([node(op, ["a", "as", "az", "b", "bs", "bz", "ys", "yz"], domain="com.microsoft")],
                 {"a": (dt, sa), "b": (dt, sb)}, consts, {"y": dt})
    return blob, {"a": qrand(rng, sa, dt), "b": qrand(rng, sb, dt)}


def check_binary(op: str, k: int, dt) -> None:
    """Case k of TABLE against ORT on every device, and where the node ran."""
    _, sa, sb, on_cpu, on_vulkan = TABLE[k]
    blob, feed = binary_model(op, sa, sb, dt, k)
    check(blob, feed, ort_run(blob, feed), where=on_cpu, on_vulkan=on_vulkan)


def every_pair(op: str, dt, seed: int) -> None:
    """All 65536 byte pairs at once, as two operands of equal shape (65536,) (the devices' table form), against
    ORT."""
    codes = np.arange(256, dtype=np.uint8)
    a, b = np.repeat(codes, 256).view(dt), np.tile(codes, 256).view(dt)
    blob, _ = binary_model(op, a.shape, b.shape, dt, seed)
    feed = {"a": a, "b": b}
    check(blob, feed, ort_run(blob, feed))
