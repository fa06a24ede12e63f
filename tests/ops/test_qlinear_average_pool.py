"""com.microsoft QLinearAveragePool against ONNX Runtime on every device. NCHW 2-D pools run in the native CPU graph
(cpu/average_pool.py: ORT's float arithmetic and its switch to the global pool's integer path); Vulkan has no form
of its own, so a Vulkan session runs it on the cpu, the documented fallback; channels_last and 1-D pools run on the
host. The table crosses kernel x stride (ncnn style) with odd sizes, symmetric and asymmetric pads, ceil_mode,
count_include_pad and both 8-bit types, plus the pools of real models (a 7x7 global-size window, 2x2 stride 2)."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check, cross, model, node, ort_run, qrand, qrange, refused


def _table() -> list[tuple]:
    """(id, NCHW shape, attrs, dtype, cpu session placement, vulkan session placement)."""
    cases = []
    for i, c in enumerate(cross(k=[1, 2, 3, 5], s=[1, 2, 3])):
        k, s = c["k"], c["s"]
        pads = [[0, 0, 0, 0], [k // 2] * 4, [0, (k - 1) // 2, k - 1, 0]][i % 3]
        shape = (1 + i % 2, 3 + 2 * (i % 3), k + 2 + i % 3, k + 4 + i % 5)
        a = dict(kernel_shape=[k, k], strides=[s, s], pads=pads, ceil_mode=i % 2, count_include_pad=(i // 2) % 2)
        cases.append((f"k{k}s{s}p{''.join(map(str, pads))}c{i % 2}i{(i // 2) % 2}", shape, a, QTYPES[i % 2], "cpu",
                      "cpu"))
    cases += [
        ("global_size_7x7", (1, 64, 7, 7), dict(kernel_shape=[7, 7]), np.uint8, "cpu", "cpu"),
        ("asym_kernel", (1, 5, 9, 8), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1]), np.int8, "cpu",
         "cpu"),
        ("channels_last", (1, 3, 7, 7), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
                                             channels_last=1), np.uint8, "host", "host"),
        ("pool1d", (1, 3, 8), dict(kernel_shape=[3], strides=[2], pads=[1, 1]), np.int8, "host", "host"),
    ]
    return cases


TABLE = _table()


def _pool(shape, attrs, dt, change=None):
    lo, _ = qrange(dt)
    x_shape = (shape[0], *shape[2:], shape[1]) if attrs.get("channels_last") else shape
    consts = {"xs": np.float32(0.03), "xz": np.asarray(lo + 5, dt), "ys": np.float32(0.02),
              "yz": np.asarray(lo + 9, dt)} | (change or {})
    blob = model([node("QLinearAveragePool", ["x", "xs", "xz", "ys", "yz"], domain="com.microsoft", **attrs)],
                 {"x": (dt, x_shape)}, consts, {"y": dt})
    return blob, {"x": qrand(np.random.default_rng(len(shape) + sum(shape)), x_shape, dt)}


@pytest.mark.parametrize("cid,shape,attrs,dt,on_cpu,on_vulkan", TABLE, ids=[c[0] for c in TABLE])
def test_qlinear_average_pool_equals_ort(cid, shape, attrs, dt, on_cpu, on_vulkan):
    blob, feed = _pool(shape, attrs, dt)
    check(blob, feed, ort_run(blob, feed), where=on_cpu, on_vulkan=on_vulkan)


@pytest.mark.parametrize("attrs,change,culprit", [
    (dict(kernel_shape=[3, 3], pads=[3, 0, 0, 0]), None, "pads"),
    (dict(kernel_shape=[3, 3], strides=[0, 1]), None, "strides"),
    (dict(kernel_shape=[3, 3]), dict(xs=np.float32(0)), "scale"),
    (dict(kernel_shape=[9, 3]), None, "kernel_shape"),
], ids=["pad_ge_kernel", "stride0", "x_scale_zero", "kernel_too_big"])
def test_bad_qlinear_average_pool_refused_naming_the_node(attrs, change, culprit):
    blob, feed = _pool((1, 3, 5, 5), attrs, np.uint8, change)
    refused(blob, feed, culprit)
