"""TFLite's 8-bit MEAN over any axes, imported as vkinfer:TFLiteMean (XNNPACK's float32 mean,
vkinfer/reference/tflite_mean.py; cpu/tflite_mean.py), against ai-edge-litert on every device.

litert's kernel: the XNNPACK delegate takes every one of these MEANs (the one-op model's execution plan is one
DELEGATE node, asserted below); its builtin kernel differs from it by a step on some values. Ranks 1-5, every
axes combination of a 4-D input, keep_dims on and off, negative axes, odd sizes, batch 2, int8 and uint8,
scale ratios that make ties (powers of two) and ones that do not. CPU sessions run every node on the CPU, Vulkan
sessions on Vulkan (shaders/tflite_mean.comp, asserted); a rank-0 output (every axis reduced, keep_dims off) has
no device form, so the host runs that node (the warning says so)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import tflite

from vkinfer.testing import tflite_ops, tflite_zoo

from ._build import check_vs_litert, qrand, refused

AXES4 = [list(c) for k in range(1, 5) for c in itertools.combinations(range(4), k)]


def _table() -> list[tuple]:
    """(id, shape, axes, keep_dims, dtype, ratio)."""
    cases = []
    for i, axes in enumerate(AXES4):
        shape = (1 + i % 2, 3 + i % 5, 5 + i % 3, [3, 8, 17, 33][i % 4])
        ratio = [1.0, 2.0, 0.5, None][i % 4]
        cases.append((f"4d-{''.join(map(str, axes))}-{'keep' if i % 3 else 'drop'}", shape, axes, bool(i % 3),
                      ["int8", "uint8"][i % 2], ratio))
    cases += [
        ("hw_mobilenet_head", (1, 7, 7, 64), [1, 2], True, "int8", None),
        ("hw_drop_uint8", (2, 5, 5, 40), [1, 2], False, "uint8", 1.0),
        ("negative_axes", (2, 4, 6, 5), [-3, -2], True, "int8", 1.0),
        ("repeated_axis", (1, 4, 6, 5), [2, -2], False, "int8", None),
        ("r1", (37,), [0], True, "int8", 2.0),
        ("r1_to_scalar", (37,), [0], False, "int8", 2.0),  # a rank-0 output: no device form, the host runs it
        ("all_axes_to_scalar", (2, 3, 4, 5), [0, 1, 2, 3], False, "uint8", 1.0),
        ("r2_rows", (9, 31), [1], True, "uint8", None),
        ("r2_cols", (9, 31), [0], False, "int8", 1.0),
        ("r3_tokens", (2, 49, 24), [1], False, "int8", 1.0),
        ("r3_outer_inner", (3, 4, 5), [0, 2], True, "uint8", 0.5),
        ("r5", (2, 3, 2, 4, 3), [1, 3], True, "int8", 1.0),
        ("big_window", (1, 64, 64, 3), [1, 2], True, "int8", 1.0),
    ]
    return cases


TABLE = _table()


def _litert_delegates(blob: bytes) -> bool:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=blob)
    it.allocate_tensors()
    return "DELEGATE" in [o["op_name"] for o in it._get_ops_details()]


@pytest.mark.parametrize("cid,shape,axes,keep,dt,ratio", TABLE, ids=[c[0] for c in TABLE])
def test_tflite_mean_equals_litert_on_every_device(cid, shape, axes, keep, dt, ratio):
    blob = tflite_ops.op_model("mean", len(cid), dtype=dt, shape=shape, axes=axes, keep_dims=keep, ratio=ratio)
    assert _litert_delegates(blob), "litert's XNNPACK delegate should run this MEAN"
    rng = np.random.default_rng(len(cid))
    info = np.iinfo(np.dtype(dt))
    ends = (int(rng.choice([info.min, info.max - 3])) + rng.integers(0, 4, shape)).astype(np.dtype(dt))
    scalar = not keep and len(set(a % len(shape) for a in axes)) == len(shape)
    check_vs_litert(blob, [{"x": qrand(rng, shape, np.dtype(dt))}, {"x": ends}], where="host" if scalar else "cpu",
                    on_vulkan="host" if scalar else "vulkan")


def test_tflite_mean_random_shapes_and_parameters():
    """Seeded shapes, axes sets and quantization parameters (wide scale ratios, zero points far from 0)."""
    rng = np.random.default_rng(25)
    for k in range(12):
        r = int(rng.integers(1, 6))
        shape = tuple(int(v) for v in rng.integers(1, 6 if r > 3 else 20, r))
        axes = sorted(rng.choice(r, int(rng.integers(1, r + 1)), replace=False).tolist())
        dt = ["int8", "uint8"][k % 2]
        blob = tflite_ops.op_model("mean", 100 + k, dtype=dt, shape=shape, axes=axes, keep_dims=bool(k % 3),
                                   ratio=float(np.exp(rng.uniform(-3, 3))))
        scalar = k % 3 == 0 and len(axes) == r
        check_vs_litert(blob, [{"x": qrand(rng, shape, np.dtype(dt))}], where="host" if scalar else "cpu",
                        on_vulkan="host" if scalar else "vulkan")


EDGES = [  # (id, shape, axes, dtype, ratio, (x_zp, y_zp), x fill): the shader's float32 emulation at its edges
    ("sums_past_2_24_int8", (1, 380, 380, 2), [1, 2], "int8", 1.0, (-128, 127), "max"),  # |sum| > 2^24: fl32 rounds
    ("sums_past_2_24_uint8", (1, 300, 300, 3), [1, 2], "uint8", 0.5, (255, 0), "max"),
    ("bias_cancels_product", (2, 9, 9, 8), [1, 2], "int8", 64.0, (127, -128), "near_zp"),  # p + bias cancels
    ("huge_ratio_saturates", (1, 4, 4, 8), [1, 2], "uint8", 3000.0, (0, 128), "random"),
    ("tiny_ratio", (1, 5, 5, 8), [1, 2], "int8", 1e-4, (-3, 5), "random"),
    ("ties_ratio_one", (1, 2, 2, 12), [1, 2], "int8", 1.0, (0, 0), "random"),  # sum / 4: quarters and halves
    ("ties_ratio_one_uint8", (3, 1, 2, 5), [2], "uint8", 1.0, (128, 128), "random"),
    ("zero_bias", (1, 3, 8, 7), [1, 3], "int8", 0.25, (0, 0), "random"),
]


@pytest.mark.parametrize("cid,shape,axes,dt,ratio,zps,fill", EDGES, ids=[e[0] for e in EDGES])
def test_tflite_mean_float32_edges(cid, shape, axes, dt, ratio, zps, fill):
    """Sums past 2^24 (float32 conversion rounds), a product cancelled by the bias (subtraction), ratios that
    saturate or underflow, ties, and a zero bias, against litert on every device, Vulkan placement asserted."""
    blob = tflite_ops.op_model("mean", len(cid), dtype=dt, shape=shape, axes=axes, ratio=ratio, zero_points=zps)
    rng = np.random.default_rng(len(cid))
    info = np.iinfo(np.dtype(dt))
    if fill == "max":
        x = (info.max - rng.integers(0, 3, shape)).astype(dt)
    elif fill == "near_zp":
        x = np.clip(zps[0] - rng.integers(0, 3, shape), info.min, info.max).astype(dt)
    else:
        x = qrand(rng, shape, np.dtype(dt))
    check_vs_litert(blob, [{"x": x}], where="cpu", on_vulkan="vulkan")


def test_bad_tflite_mean_axis_refused_naming_the_op():
    m = tflite_zoo.ModelBuilder()
    B, A = tflite.BuiltinOperator, tflite.BuiltinOptions
    x = m.tensor("x", (1, 4, 4, 2), np.int8, scale=0.1, zero_point=0)
    ax = m.tensor("axes", (1,), np.int32, np.array([4], np.int32))
    y = m.tensor("y", (1, 4, 4, 2), np.int8, scale=0.1, zero_point=0)
    m.op(B.MEAN, [x, ax], [y], A.ReducerOptions, KeepDims=True)
    refused(m.finish([x], [y]), {"x": np.zeros((1, 4, 4, 2), np.int8)}, "axis 4", name="op 0 (MEAN)")


_ASAN_SCRIPT = """
import numpy as np, vkinfer
from vkinfer.testing import tflite_ops
rng = np.random.default_rng(3)
cases = [((1, 7, 9, 5), [1, 2], True), ((2, 3, 4, 5), [0, 2], False), ((3, 1, 4), [2], True),
         ((2, 3, 2, 4, 3), [1, 3], False), ((9, 31), [0], True), ((1, 1, 1, 1), [3], True)]
for k, (shape, axes, keep) in enumerate(cases):
    for dt in ("int8", "uint8"):
        blob = tflite_ops.op_model("mean", k, dtype=dt, shape=shape, axes=axes, keep_dims=keep)
        x = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1, shape).astype(dt)
        ref = vkinfer.InferenceSession(blob, device="reference").run(None, {"x": x})[0]
        s = vkinfer.InferenceSession(blob, device="cpu")
        assert set(s.placement.values()) == {"cpu"}, s.placement
        for _ in range(2):
            np.testing.assert_array_equal(s.run(None, {"x": x})[0], ref)
print("tflite_mean asan: ok")
"""


def test_tflite_mean_c_operator_under_asan_and_ubsan():
    """The C operator (cpu_fallback/src/ops/tflite_mean.c) in the AddressSanitizer + UBSan build of the library,
    on every storage-order case the lowering makes (4-D forms, dropped axes, ranks 2, 3, 5, size-1 axes)."""
    import sys

    from support.cpu_build import ROOT, run_sanitized

    run_sanitized([sys.executable, "-c", _ASAN_SCRIPT], "tflite_mean asan: ok", cwd=ROOT)
