"""com.microsoft QLinearConcat against ONNX Runtime on every device. Along the channel axis it runs on the
session's device (cpu/qlinear_concat.py, vulkan/qlinear_concat.py), each input whose parameters differ from the
output's through its 256-entry requantization table (the reference's), the others copied; along another axis
with every input at the output's parameters it is a byte gather (model/moves.py), also on the device; along
another axis with requantization it runs on the host. Odd channel counts, 2-4 inputs, negative axes, both
8-bit types, YOLO's route concatenation.

Along an axis stored outside the devices' row with requantizing inputs (slider_yoloseg's head: [1, C, 8400] on
axis 1) the concatenation runs on the device too: the CPU form has no padding, so any axis is rows of blocks
(cpu/qlinear_concat.py); on Vulkan the blocks are whole padded rows whose padding bytes must stay zero through
the table (odd last axes below check it)."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check, model, node, ort_run, qrand, qrange, refused

TABLE = [  # (id, input shapes, axis, inputs at the output's parameters, where)
    ("channels_requant", [(1, 3, 4, 5), (1, 5, 4, 5)], 1, (False, False), "device"),
    ("channels_one_copied", [(1, 1, 3, 3), (1, 7, 3, 3), (1, 2, 3, 3)], -3, (True, False, True), "device"),
    ("channels_all_copied", [(2, 4, 2, 3), (2, 4, 2, 3)], 1, (True, True), "device"),
    ("r2_last_requant", [(3, 5), (3, 9)], -1, (False, True), "device"),
    ("r3_last", [(2, 3, 1), (2, 3, 6), (2, 3, 2), (2, 3, 3)], 2, (False, False, False, False), "device"),
    ("height_same_params", [(1, 3, 2, 5), (1, 3, 4, 5)], 2, (True, True), "device"),
    ("height_requant", [(1, 3, 2, 5), (1, 3, 4, 5)], -2, (True, False), "device"),
    ("batch_requant", [(1, 3, 2, 5), (2, 3, 2, 5)], 0, (False, True), "device"),
    ("width_requant", [(1, 3, 2, 5), (1, 3, 2, 2)], 3, (False, False), "device"),
    ("r3_axis1_requant_odd", [(2, 3, 7), (2, 1, 7), (2, 2, 7)], 1, (False, True, False), "device"),
    ("r2_axis0_requant_odd", [(3, 5), (1, 5)], 0, (False, False), "device"),
    ("r5_axis1_requant", [(1, 2, 3, 2, 3), (1, 1, 3, 2, 3)], 1, (False, True), "device"),
    ("r5_axis3_requant", [(1, 2, 3, 2, 3), (1, 2, 3, 1, 3)], 3, (True, False), "device"),
    ("r5_axis4_requant", [(1, 2, 3, 2, 3), (1, 2, 3, 2, 1)], 4, (False, True), "device"),
    ("r5_axis4_same_params", [(1, 2, 3, 2, 3), (1, 2, 3, 2, 1)], -1, (True, True), "device"),
    # inside the 5-D packed row (A*B): Vulkan has no form, the CPU graph takes it in a Vulkan session
    ("r5_axis2_requant", [(1, 2, 3, 2, 3), (1, 2, 1, 2, 3)], 2, (True, False), ("device", "cpu")),
    ("yoloseg_concat5", [(1, 2, 8400), (1, 2, 8400)], 1, (False, False), "device"),
    ("yoloseg_concat6", [(1, 4, 8400), (1, 1, 8400), (1, 32, 8400)], 1, (False, False, False), "device"),
    ("yolo_route", [(1, 128, 13, 13), (1, 256, 13, 13)], 1, (False, True), "device"),
]


def _concat(shapes, axis, same, dt, change=None):
    rng = np.random.default_rng(sum(map(sum, shapes)) + axis)
    lo, hi = qrange(dt)
    ys, yz = np.float32(0.05), np.asarray(rng.integers(lo + 40, hi - 40), dt)
    consts = {"ys": ys, "yz": yz}
    names, inputs = ["ys", "yz"], {}
    for k, (s, keep) in enumerate(zip(shapes, same, strict=True)):
        consts[f"s{k}"] = ys if keep else np.float32(rng.uniform(0.01, 0.12))
        consts[f"z{k}"] = yz if keep else np.asarray(rng.integers(lo, hi + 1), dt)
        names += [f"x{k}", f"s{k}", f"z{k}"]
        inputs[f"x{k}"] = (dt, s)
    consts |= change or {}
    blob = model([node("QLinearConcat", names, domain="com.microsoft", axis=axis)], inputs, consts, {"y": dt})
    return blob, {f"x{k}": qrand(rng, s, dt) for k, s in enumerate(shapes)}


@pytest.mark.parametrize("k", range(len(TABLE)), ids=[c[0] for c in TABLE])
def test_qlinear_concat_equals_ort(k):
    _, shapes, axis, same, where = TABLE[k]
    blob, feed = _concat(shapes, axis, same, QTYPES[k % 2])
    on_cpu, on_vulkan = (where, where) if isinstance(where, str) else where
    check(blob, feed, ort_run(blob, feed), where=None if on_cpu == "device" else on_cpu,
          on_vulkan=None if on_vulkan == "device" else on_vulkan)


@pytest.mark.parametrize("shapes,axis,change,culprit", [
    ([(1, 3, 4, 5), (1, 5, 4, 5)], 1, dict(s0=np.float32(0)), "scale"),
    ([(1, 3, 4, 5), (1, 5, 4, 5)], 4, None, "axis"),
    ([(1, 3, 4, 5), (1, 5, 3, 5)], 1, None, "dimension|shape"),
], ids=["scale_zero", "axis_range", "shapes_differ"])
def test_bad_qlinear_concat_refused_naming_the_node(shapes, axis, change, culprit):
    blob, feed = _concat(shapes, axis, (False, False), np.uint8, change)
    refused(blob, feed, culprit)


def test_mismatched_shapes_refused_before_any_requantization(monkeypatch):
    """Shapes are compared before an input is requantized: a mismatch next to a 1 GiB input was reported after 4 s
    of table lookups on every device (fuzz finding tflite-libfuzzer-612cda7ded)."""
    from vkinfer.reference import qlinear_concat as mod

    def no_lookup(*a, **k):
        raise AssertionError("requantized before the shapes were checked")

    monkeypatch.setattr(mod, "apply_table", no_lookup)
    a, b = np.zeros((3, 4, 2), np.uint8), np.zeros((5, 4, 2), np.uint8)
    s, z = np.float32(0.5), np.uint8(3)
    with pytest.raises(ValueError, match=r"inputs\[1\] has shape \[5, 4, 2\], inputs\[0\] \[3, 4, 2\]"):
        mod.qlinear_concat(np.float32(0.25), z, [(a, s, z), (b, s, z)], axis=2)
    with pytest.raises(ValueError, match=r"inputs\[1\] has shape \[3, 4\]"):
        mod.qlinear_concat(np.float32(0.25), z, [(a, s, z), (a[..., 0], s, z)], axis=1)


def test_past_the_guaranteed_buffer_range_runs_on_the_cpu(monkeypatch):
    """A node with a tensor over the storage buffer range every Vulkan device guarantees (2**27 bytes) is refused
    by the Vulkan lowering, so a vulkan session runs it on the CPU with ORT's bits (fuzz finding
    tflite-libfuzzer-624645b6: a 512 MiB concatenation loaded on device="vulkan", then failed at run where cpu and
    the reference ran it). The range is lowered here to keep the tensors small: the packed output of
    [1, 9, 4, 5] takes 9 * 4 * 8 = 288 bytes, its inputs 96 and 192."""
    from vkinfer.model import lowering

    assert lowering.VULKAN_BUFFER_RANGE == 1 << 27
    monkeypatch.setattr(lowering, "VULKAN_BUFFER_RANGE", 200)
    blob, feed = _concat([(1, 3, 4, 5), (1, 6, 4, 5)], 1, (False, False), np.uint8)
    check(blob, feed, ort_run(blob, feed), on_vulkan="cpu")
    monkeypatch.setattr(lowering, "VULKAN_BUFFER_RANGE", 288)  # exactly fits: on Vulkan
    check(blob, feed, ort_run(blob, feed))
