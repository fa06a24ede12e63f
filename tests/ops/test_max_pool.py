"""MaxPool on 8-bit NCHW tensors (vkinfer/cpu/max_pool.py, vkinfer/vulkan/max_pool.py) against ONNX Runtime on
every device. The table crosses kernel x stride (ncnn style) with odd sizes, dilation, symmetric and asymmetric
pads, ceil_mode and both 8-bit types rotating through, plus the pools of real models (ResNet's stem, YOLO's SPPF
and tiny-YOLO's 2x2 stride-1 pool). 2-D pools with explicit pads run on the device; 1-D pools run on the host.
auto_pad (VALID, SAME_UPPER, SAME_LOWER) has its own table: the import makes the pads explicit for static shapes.
"""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check, cross, model, node, ort_run, qrand, qrange, refused


def _table() -> list[tuple]:
    """(id, input shape, attrs, dtype)."""
    cases = []
    for i, c in enumerate(cross(k=[1, 2, 3, 5], s=[1, 2, 3])):
        k, s = c["k"], c["s"]
        d = 2 if i % 4 == 3 and k > 1 else 1
        ek = (k - 1) * d + 1
        pads = [[0, 0, 0, 0], [k // 2] * 4, [0, (k - 1) // 2, k - 1, 0], [k - 1, 0, 0, k - 1]][i % 4]
        h, w = ek + 2 * (i % 3) + 1, ek + 4 + (i % 5)  # odd and even sizes, never smaller than the kernel
        a = dict(kernel_shape=[k, k], strides=[s, s], pads=pads, dilations=[d, d], ceil_mode=i % 2)
        cases.append((f"k{k}s{s}d{d}p{''.join(map(str, pads))}c{i % 2}", (1 + i % 2, 3 + 2 * (i % 4), h, w), a,
                      QTYPES[i % 2]))
    cases += [
        ("asym_kernel_32", (1, 5, 9, 8), dict(kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1]), np.int8),
        ("resnet_stem", (1, 64, 112, 112), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), np.uint8),
        ("yolo_sppf_k5", (1, 32, 13, 13), dict(kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]), np.int8),
        ("tiny_yolo_k2s1", (1, 16, 13, 13), dict(kernel_shape=[2, 2], strides=[1, 1], pads=[0, 0, 1, 1]), np.uint8),
        ("defaults_no_pads", (2, 1, 7, 5), dict(kernel_shape=[2, 3]), np.int8),
    ]
    return cases


TABLE = _table()
HOST = [  # (id, shape, attrs, dtype): what no device lowering takes, the host's kernel
    ("pool1d", (1, 4, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 1]), np.uint8),
]


def _auto_table() -> list[tuple]:
    """auto_pad (VALID, SAME_UPPER, SAME_LOWER) x kernel x stride x dilation, odd and even sizes (odd and even total
    pads; strides past the kernel make them negative), ceil_mode rotating: (id, shape, attrs, dtype)."""
    cases = []
    for i, c in enumerate(cross(mode=["VALID", "SAME_UPPER", "SAME_LOWER"], k=[1, 2, 3], s=[1, 2, 3, 4])):
        mode, k, s = c["mode"], c["k"], c["s"]
        d = 2 if i % 3 == 1 and k > 1 else 1
        h, w = (k - 1) * d + 5 + i % 2, (k - 1) * d + 6 + i % 3
        a = dict(auto_pad=mode, kernel_shape=[k, k], strides=[s, s], dilations=[d, d], ceil_mode=(i // 2) % 2)
        cases.append((f"{mode}_k{k}s{s}d{d}c{(i // 2) % 2}_{h}x{w}", (1, 3 + i % 4, h, w), a, QTYPES[i % 2]))
    cases += [("mtcnn_same_upper_k2s2", (1, 10, 69, 79), dict(auto_pad="SAME_UPPER", kernel_shape=[2, 2],
                                                                strides=[2, 2]), np.uint8),
              ("mtcnn_same_upper_k3s2", (1, 28, 22, 22), dict(auto_pad="SAME_UPPER", kernel_shape=[3, 3],
                                                                strides=[2, 2]), np.int8),
              ("mtcnn_valid_k3s2", (1, 48, 9, 9), dict(auto_pad=b"VALID", kernel_shape=[3, 3], strides=[2, 2]),
               np.uint8)]
    return cases


AUTO = _auto_table()


def _auto_native(shape, attrs) -> bool:
    """ORT's windows (pool_attributes.h, written out here) as explicit pads >= 0: no head < 0, and a tail < 0 only
    in floor mode where a tail of 0 gives the same output size."""
    mode = attrs["auto_pad"].decode() if isinstance(attrs["auto_pad"], bytes) else attrs["auto_pad"]
    for n, k, s, d in zip(shape[2:], attrs["kernel_shape"], attrs["strides"], attrs.get("dilations", [1, 1]),
                          strict=True):
        if mode == "VALID":
            continue
        need = (-(-n // s) - 1) * s + k - n
        head = int((need + 1 if mode == "SAME_LOWER" else need) / 2)
        span = (k - 1) * d + 1
        if head < 0 or (need - head < 0 and (attrs["ceil_mode"] or
                                             (n + need - span) // s != (n + head - span) // s)):
            return False
    return True


@pytest.mark.parametrize("cid,shape,attrs,dt", AUTO, ids=[c[0] for c in AUTO])
def test_max_pool_auto_pad_equals_ort_on_every_device(cid, shape, attrs, dt):
    """Static shapes: the import gives the node ORT's pads, explicit, and the devices run it; shifted windows (a
    negative head) stay with the reference, on the host."""
    blob = _mp(shape, attrs, dt)
    feed = {"x": qrand(np.random.default_rng(len(cid)), shape, dt)}
    feed["x"].flat[::5] = qrange(dt)[0]
    check(blob, feed, ort_run(blob, feed), where=None if _auto_native(shape, attrs) else "host")


def test_max_pool_auto_pad_with_dynamic_shapes_on_the_host():
    """Symbolic dimensions: nothing to resolve at import; the host's kernel applies auto_pad at each size."""
    blob = model([node("MaxPool", ["x"], auto_pad="SAME_LOWER", kernel_shape=[3, 2], strides=[2, 2])],
                 {"x": (np.uint8, (1, 3, "h", "w"))})
    rng = np.random.default_rng(5)
    feeds = [{"x": qrand(rng, s, np.uint8)} for s in [(1, 3, 7, 8), (1, 3, 10, 5)]]
    check(blob, feeds, [ort_run(blob, f) for f in feeds], where="host")


def _mp(shape, attrs, dt) -> bytes:
    return model([node("MaxPool", ["x"], **attrs)], {"x": (dt, shape)})


@pytest.mark.parametrize("cid,shape,attrs,dt", TABLE + HOST, ids=[c[0] for c in TABLE + HOST])
def test_max_pool_equals_ort_on_every_device(cid, shape, attrs, dt):
    blob = _mp(shape, attrs, dt)
    rng = np.random.default_rng(len(cid))
    feed = {"x": qrand(rng, shape, dt)}
    feed["x"].flat[::7] = qrange(dt)[0]  # the minimum inside windows: padding must never win
    check(blob, feed, ort_run(blob, feed), where="host" if cid in {h[0] for h in HOST} else None)


@pytest.mark.parametrize("attrs,culprit", [
    (dict(kernel_shape=[3, 3], pads=[3, 0, 0, 0]), "pads"),
    (dict(kernel_shape=[3, 3], strides=[0, 1]), "strides"),
    (dict(kernel_shape=[3, 3], dilations=[1, -1]), "dilations"),
    (dict(kernel_shape=[3, 3], auto_pad="SAME"), "auto_pad"),
    (dict(kernel_shape=[13, 3]), "kernel_shape"),
], ids=["pad_ge_kernel", "stride0", "dilation_neg", "auto_pad", "kernel_too_big"])
def test_bad_max_pool_refused_naming_the_node(attrs, culprit):
    refused(_mp((1, 5, 9, 9), attrs, np.uint8), {"x": np.zeros((1, 5, 9, 9), np.uint8)}, culprit)
