"""DequantizeLinear (8-bit -> float32) against ONNX Runtime on every device, bit for bit (float32(x - zp) * scale).
Per-tensor parameters run in the native CPU graph (cpu/quantize_linear.py): on a cpu session and, as the
documented fallback of a Vulkan session's float edge, on the cpu there too. Per-axis parameters, 5-D inputs and
int32 inputs (a quantized bias) run on the host. Every byte value (inputs hold all 256), ranks 1-5, uint8 and
int8, zero points at both ends, no zero point, a classifier's logits."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check, f32, model, node, ort_run, qrand, refused


def _table() -> list[tuple]:
    """(id, shape, dtype, scale, zero point or None, axis, "cpu" or "host")."""
    cases = []
    for i, shape in enumerate([(256,), (16, 16), (2, 8, 16), (1, 4, 8, 8), (2, 3, 5, 9)]):
        for dt in QTYPES:
            lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
            zp = [np.array(lo, dt), np.array(hi, dt), None, np.array((lo + hi) // 2 + i, dt)][(i + (dt == np.int8)) % 4]
            cases.append((f"r{len(shape)}_{np.dtype(dt).name}_zp{'none' if zp is None else int(zp)}", shape, dt,
                          np.float32(0.0371 / (i + 1)), zp, min(1, len(shape) - 1), "cpu"))
    cases += [
        ("logits", (1, 1000), np.int8, np.float32(0.1234), np.array(-17, np.int8), 1, "cpu"),
        ("per_axis_c", (1, 4, 3, 5), np.int8, f32(0.01, 0.02, 0.5, 1e-3), np.array([0, 10, -10, 127], np.int8), 1,
         "host"),
        ("per_axis_last", (3, 6), np.uint8, f32(0.1, 0.2, 0.3, 0.4, 0.05, 0.01), np.arange(6).astype(np.uint8) * 40,
         -1, "host"),
        ("r5", (1, 2, 3, 2, 2), np.uint8, np.float32(0.05), np.array(7, np.uint8), 1, "host"),
        ("int32_bias", (64,), np.int32, np.float32(3.5e-7), None, 0, "host"),
    ]
    return cases


TABLE = _table()


def _dq(shape, dt, scale, zp, axis) -> bytes:
    consts = {"s": np.asarray(scale)} | ({} if zp is None else {"z": np.asarray(zp)})
    ins = ["x", "s"] + ([] if zp is None else ["z"])
    return model([node("DequantizeLinear", ins, axis=axis)], {"x": (dt, shape)}, consts, {"y": np.float32})


@pytest.mark.parametrize("cid,shape,dt,scale,zp,axis,where", TABLE, ids=[c[0] for c in TABLE])
def test_dequantize_linear_equals_ort(cid, shape, dt, scale, zp, axis, where):
    blob = _dq(shape, dt, scale, zp, axis)
    rng = np.random.default_rng(len(cid))
    if dt == np.int32:
        feeds = [{"x": rng.integers(-2**31, 2**31 - 1, shape).astype(np.int32)}]
    else:
        every = np.resize(np.arange(256, dtype=np.uint8), shape).view(dt)  # every byte value
        feeds = [{"x": np.ascontiguousarray(every)}, {"x": qrand(rng, shape, dt)}]
    check(blob, feeds, [ort_run(blob, f) for f in feeds], where=where)


@pytest.mark.parametrize("scale,zp,axis,culprit", [
    (np.float32(0), np.array(0, np.uint8), 1, "scale"),
    (np.float32(np.inf), np.array(0, np.uint8), 1, "scale"),
    (f32(0.1, 0.2), np.array([0, 0, 0], np.uint8), 1, "zero|shape|size"),
    (f32(0.1, 0.2, 0.3), np.array([0, 0, 0], np.uint8), -5, "axis"),
    (np.float32(0.1), np.array(0, np.int8), 1, "zero|type|int8"),
], ids=["scale0", "scale_inf", "zp_count", "axis_range", "zp_type"])
def test_bad_dequantize_linear_refused_naming_the_node(scale, zp, axis, culprit):
    exc = (ValueError, TypeError) if zp.dtype == np.int8 else ValueError
    refused(_dq((1, 3, 2, 2), np.uint8, scale, zp, axis), {"x": np.zeros((1, 3, 2, 2), np.uint8)}, culprit, exc=exc)
