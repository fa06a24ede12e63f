"""QuantizeLinear (float32 -> 8-bit) against ONNX Runtime on every device. Per-tensor parameters run in the native
CPU graph (cpu/quantize_linear.py, the NCHW -> NHWC move folded in): on a cpu session and, as the documented
fallback of a Vulkan session's float edge, on the cpu there too. Per-axis and blocked parameters and 5-D inputs
run on the host. Values on exact .5 ties (ORT rounds half to even), far out of range (saturation), +-0 and
+-inf; ranks 1-5; uint8 and int8 (the zero point's type, or uint8 without one); MobileNetV2's input."""

from __future__ import annotations

import numpy as np
import pytest
from support.agree import refused_devices

from ._build import QTYPES, check, f32, model, node, ort_run, refused


def _x(rng, shape, scale) -> np.ndarray:
    """Random values, values on (or within float32 rounding of) .5 ties of the scale (`scale` broadcast to
    `shape`), huge values, infinities and +-0."""
    x = rng.normal(0, 60 * float(np.max(scale)), shape).astype(np.float32)
    flat, s = x.reshape(-1), np.broadcast_to(scale, shape).reshape(-1)
    k = rng.integers(-300, 300, flat.size)
    flat[1::3] = ((k[1::3] + np.float32(0.5)) * s[1::3]).astype(np.float32)
    edges = np.array([1e30, -1e30, np.inf, -np.inf, 0.0, -0.0], np.float32)
    flat[:min(6, flat.size)] = edges[:flat.size]
    return x


def _table() -> list[tuple]:
    """(id, shape, scale, zero point or None, axis, placement of the node: "device" or "host")."""
    cases = []
    for i, shape in enumerate([(7,), (3, 5), (2, 3, 5), (1, 3, 5, 7), (2, 5, 3, 3)]):
        for dt in QTYPES:
            zp = np.array([-3, 131][dt == np.uint8] + i, dt) if i % 2 == 0 or dt == np.int8 else None
            cases.append((f"r{len(shape)}_{np.dtype(dt).name}{'' if zp is not None else '_no_zp'}", shape,
                          np.float32(0.0173 * (i + 1)), zp, 1, "device"))
    cases += [
        ("mobilenet_input", (1, 3, 224, 224), np.float32(0.0186), np.array(114, np.uint8), 1, "device"),
        ("tiny_scale_saturates", (1, 4, 3, 3), np.float32(2.0**-20), np.array(0, np.int8), 1, "device"),
        ("per_axis_c", (1, 4, 3, 5), f32(0.01, 0.02, 0.5, 1e-3), np.array([0, 10, -10, 127], np.int8), 1, "host"),
        ("per_axis_last", (3, 6), f32(0.1, 0.2, 0.3, 0.4, 0.05, 0.01), np.arange(6).astype(np.uint8) * 40, -1,
         "host"),
        ("r5", (1, 2, 3, 2, 2), np.float32(0.05), np.array(7, np.uint8), 1, "host"),
    ]
    return cases


TABLE = _table()


def _q(shape, scale, zp, axis) -> bytes:
    consts = {"s": np.asarray(scale)} | ({} if zp is None else {"z": np.asarray(zp)})
    ins = ["x", "s"] + ([] if zp is None else ["z"])
    out = np.uint8 if zp is None else np.asarray(zp).dtype
    return model([node("QuantizeLinear", ins, axis=axis)], {"x": (np.float32, shape)}, consts, {"y": out})


@pytest.mark.parametrize("cid,shape,scale,zp,axis,where", TABLE, ids=[c[0] for c in TABLE])
def test_quantize_linear_equals_ort(cid, shape, scale, zp, axis, where):
    blob = _q(shape, scale, zp, axis)
    bcast = [-1 if k == axis % len(shape) else 1 for k in range(len(shape))]
    feeds = [{"x": _x(np.random.default_rng(s), shape, np.asarray(scale).reshape(bcast if np.size(scale) > 1 else ()))}
             for s in (0, 1)]
    check(blob, feeds, [ort_run(blob, f) for f in feeds], where="cpu" if where == "device" else "host")


def test_nan_refused_naming_the_input():
    """NaN has no 8-bit value: every device refuses it (ORT leaves it undefined)."""
    blob = _q((1, 3, 2, 2), np.float32(0.1), np.array(0, np.uint8), 1)
    x = np.zeros((1, 3, 2, 2), np.float32)
    x[0, 1, 1, 0] = np.nan
    refused_devices(blob, {"x": x}, ValueError, match="NaN|nan")


@pytest.mark.parametrize("scale,zp,axis,culprit", [
    (np.float32(0), np.array(0, np.uint8), 1, "scale"),
    (np.float32(-0.1), np.array(0, np.uint8), 1, "scale"),
    (f32(0.1, 0.2), np.array([0, 0, 0], np.uint8), 1, "zero|shape|size"),
    (f32(0.1, 0.2, 0.3), np.array([0, 0, 0], np.uint8), 5, "axis"),
], ids=["scale0", "scale_negative", "zp_count", "axis_range"])
def test_bad_quantize_linear_refused_naming_the_node(scale, zp, axis, culprit):
    refused(_q((1, 3, 2, 2), scale, zp, axis), {"x": np.zeros((1, 3, 2, 2), np.float32)}, culprit)
