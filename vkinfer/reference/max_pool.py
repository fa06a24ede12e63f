"""ONNX MaxPool on uint8/int8 tensors (ORT 1.31 CPU, opset 12+): the maximum of the raw values over
each window's in-image elements; padding never contributes. Output sizes follow ORT (see _pool_shape).
"""

from __future__ import annotations

import itertools

import numpy as np

from . import _qcheck as qc
from ._pool_shape import pool_geometry


def max_pool(x, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode: int = 0,
             auto_pad=None) -> np.ndarray:
    qc.qtensor("x", x)
    k, s, p, d, out = pool_geometry(x.shape, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad)
    nd = len(k)
    if min(p) < 0:  # auto_pad's negative pads (ORT): a head shifts the windows, a tail is 0 (windows end at n)
        x = x[(slice(None), slice(None), *[slice(max(0, -p[i]), None) for i in range(nd)])]
        p = [max(0, v) for v in p]
    sp = x.shape[2:]
    lo, _ = qc.QRANGE[x.dtype]
    # Pad with qmin on every side, enough for ceil_mode windows running past the tail padding.
    extra = [max(0, (out[i] - 1) * s[i] + d[i] * (k[i] - 1) + 1 - (sp[i] + p[i])) for i in range(nd)]
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p[i], p[i + nd] + extra[i]) for i in range(nd)], constant_values=lo)
    y = np.full(x.shape[:2] + tuple(out), lo, x.dtype)
    for off in itertools.product(*[range(kk) for kk in k]):
        sl = tuple(slice(off[i] * d[i], off[i] * d[i] + (out[i] - 1) * s[i] + 1, s[i]) for i in range(nd))
        y = np.maximum(y, xp[(slice(None), slice(None), *sl)])
    return y


def pool_attrs(node) -> tuple | None:
    """(kernel, strides, dilations, pads) of a 2-D MaxPool with explicit pads (or auto_pad resolved for the graph's
    static input shape by vkinfer/reference/_auto_pad.py resolve_graph, in "_pads"), else None."""
    a = node.attrs
    k = tuple(int(v) for v in a["kernel_shape"])
    st = tuple(int(v) for v in a.get("strides") or (1, 1))
    di = tuple(int(v) for v in a.get("dilations") or (1, 1))
    pads = tuple(int(v) for v in a.get("pads") or (0, 0, 0, 0))
    if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"", ""):
        if a.get("_pads") is None:
            return None
        pads = tuple(int(v) for v in a["_pads"])
    if len(k) != 2:
        return None
    return k, st, di, pads
