"""TFLite's 8-bit RESIZE_BILINEAR, imported as vkinfer:TFLiteResizeBilinear (XNNPACK's 11-bit interpolation,
vkinfer/reference/tflite_resize_bilinear.py; cpu/ and vulkan/tflite_resize_bilinear.py), against ai-edge-litert
on every device.

litert's kernel: the XNNPACK delegate takes every one of these (the one-op model's execution plan has a DELEGATE
node, asserted). Up- and downscaling by integer and odd factors, 1-pixel inputs and outputs, align_corners,
half_pixel_centers, both (align_corners wins), int8 and uint8, batch 2, odd channel counts; inputs over the whole
range and tie-prone ones (the extremes and their neighbours, so interpolated values land on halves). CPU
sessions run every node on the CPU, Vulkan sessions on Vulkan (placement asserted)."""

from __future__ import annotations

import numpy as np
import pytest

from vkinfer.testing import tflite_ops

from ._build import check_vs_litert, qrand, refused

FLAGS = [(False, False), (True, False), (False, True), (True, True)]
SIZES = [  # (id, input NHWC shape, output (h, w))
    ("up2", (1, 5, 7, 3), (10, 14)),
    ("up_odd", (2, 3, 5, 8), (7, 13)),
    ("down", (1, 9, 11, 5), (4, 3)),
    ("mixed", (1, 6, 4, 17), (3, 9)),
    ("from_1x1", (1, 1, 1, 4), (3, 5)),
    ("to_1x1", (1, 4, 6, 6), (1, 1)),
    ("row", (1, 1, 9, 2), (1, 20)),
    ("big_factor", (1, 3, 3, 1), (64, 61)),
    ("deeplab_like", (1, 17, 17, 33), (65, 65)),
]
TABLE = [(f"{sid}-{'ac' if ac else ''}{'hp' if hp else ''}-{dt}", shape, size, ac, hp, dt)
         for k, (sid, shape, size) in enumerate(SIZES) for j, (ac, hp) in enumerate(FLAGS)
         for dt in [["int8", "uint8"][(k + j) % 2]]]


def _litert_delegates(blob: bytes) -> bool:
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=blob)
    it.allocate_tensors()
    return "DELEGATE" in [o["op_name"] for o in it._get_ops_details()]


def _ties(rng, shape, dt) -> np.ndarray:
    info = np.iinfo(np.dtype(dt))
    vals = np.array([info.min, info.min + 1, info.max, info.max - 1, 0, 1, (info.min + info.max + 1) // 2])
    return vals[rng.integers(0, len(vals), shape)].astype(dt)


@pytest.mark.parametrize("cid,shape,size,ac,hp,dt", TABLE, ids=[c[0] for c in TABLE])
def test_tflite_resize_bilinear_equals_litert_on_every_device(cid, shape, size, ac, hp, dt):
    blob = tflite_ops.op_model("resize_bilinear", len(cid), dtype=dt, shape=shape, size=size, align_corners=ac,
                               half_pixel=hp)
    assert _litert_delegates(blob), "litert's XNNPACK delegate should run this RESIZE_BILINEAR"
    rng = np.random.default_rng(len(cid))
    check_vs_litert(blob, [{"x": qrand(rng, shape, np.dtype(dt))}, {"x": _ties(rng, shape, dt)}], where="cpu",
                    on_vulkan="vulkan")


def test_tflite_resize_bilinear_random_sizes():
    """Seeded sizes (1..40 in, 1..80 out), flags and types."""
    rng = np.random.default_rng(25)
    for k in range(10):
        shape = (int(rng.integers(1, 3)), *(int(v) for v in rng.integers(1, 41, 2)), int(rng.integers(1, 10)))
        size = tuple(int(v) for v in rng.integers(1, 81, 2))
        ac, hp = FLAGS[k % 4]
        dt = ["int8", "uint8"][k % 2]
        blob = tflite_ops.op_model("resize_bilinear", 100 + k, dtype=dt, shape=shape, size=size, align_corners=ac,
                                   half_pixel=hp)
        check_vs_litert(blob, [{"x": _ties(rng, shape, dt)}], where="cpu", on_vulkan="vulkan")


def test_tflite_resize_bilinear_refuses_rescaling():
    """Different input and output parameters: litert's delegate fails to prepare; vkinfer refuses, naming the op."""
    blob = tflite_ops.op_model("resize_bilinear", 0, shape=(1, 4, 4, 3), size=(8, 8), out_params=(0.03, 5))
    refused(blob, {"x": np.zeros((1, 4, 4, 3), np.int8)}, "share one type, scale and zero point",
            name="RESIZE_BILINEAR")


_ASAN_SCRIPT = """
import numpy as np, vkinfer
from vkinfer.testing import tflite_ops
rng = np.random.default_rng(3)
cases = [((1, 5, 7, 3), (10, 14), 0, 0), ((2, 3, 5, 8), (7, 13), 1, 0), ((1, 9, 11, 5), (4, 3), 0, 1),
         ((1, 1, 1, 4), (3, 5), 1, 1), ((1, 4, 6, 6), (1, 1), 0, 1), ((1, 3, 3, 1), (31, 29), 0, 0)]
for k, (shape, size, ac, hp) in enumerate(cases):
    for dt in ("int8", "uint8"):
        blob = tflite_ops.op_model("resize_bilinear", k, dtype=dt, shape=shape, size=size, align_corners=ac,
                                   half_pixel=hp)
        x = rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1, shape).astype(dt)
        ref = vkinfer.InferenceSession(blob, device="reference").run(None, {"x": x})[0]
        s = vkinfer.InferenceSession(blob, device="cpu")
        assert set(s.placement.values()) == {"cpu"}, s.placement
        for _ in range(2):
            np.testing.assert_array_equal(s.run(None, {"x": x})[0], ref)
print("tflite_resize_bilinear asan: ok")
"""


def test_tflite_resize_bilinear_c_operator_under_asan_and_ubsan():
    """The C operator (cpu_fallback/src/ops/tflite_resize_bilinear.c) in the AddressSanitizer + UBSan build."""
    import sys

    from support.cpu_build import ROOT, run_sanitized

    run_sanitized([sys.executable, "-c", _ASAN_SCRIPT], "tflite_resize_bilinear asan: ok", cwd=ROOT)
