"""float32 MaxPool with ONNX Runtime 1.31's CPU bits, in numpy: the reference device's kernel and the
specification cpu_fallback/src/ops/float_maxpool.c follows.

ORT picks one of four loops for a 2-D pool, and they part on signed zeros, NaN and -inf because each takes the
maximum with another operand order. With sse_max(r, x) = r > x ? r : x (_mm_max_ps: NaN and ties take x) and
std_max(r, x) = r < x ? x : r:
- MLAS's generic kernel (horizontal stride > 2, a kernel side > 32, or a row too wide for its 2048-float stack
  buffer): m = lowest float; every tap inside the image, row-major, m = std_max(m, x). NaN never enters; a window
  of -inf gives -FLT_MAX.
- dilation > 1 (MaxPool-8's own loop): the same fold from the window's first tap inside the image (a NaN first tap
  stays NaN, a window of -inf gives -inf); a window without such a tap gives the lowest float.
- MLAS's global kernel (kernel = image, strides 1, no pads): 4 lanes of lowest, lane l takes x[4i + l] by sse_max,
  the lanes folded as sse_max(sse_max(l0, l2), sse_max(l1, l3)), the remaining hw % 4 values by std_max.
- MLAS's vector kernel (horizontal stride <= 2, kernel sides <= 32): per output row, each column folds its window's
  rows (sse_max from the first row on for the columns in whole groups of 4, std_max for the last w % 4), into a row
  buffer padded with lowest; each output folds its kw buffer entries by sse_max from the first.
MlasPool takes the global kernel for every spatial rank (1 to 3): GlobalMaxPool and a MaxPool whose kernel is the
image (strides 1, no pads, no dilation, no Indices), over each channel's flat image; measured against ORT with NaN,
+-0 and -inf at every position of 1-, 2- and 3-D images (tests/ops/test_float_max_pool.py).
Rows of a window are clipped to the image as MLAS clips them. Other ranks, and the Indices output, take MaxPool-8's
loop (its own kernel for those; Indices as ORT: the flat input index of the value kept, row-major or, with
storage_order=1, column-major within the image, plus the channel's offset).
"""

from __future__ import annotations

import itertools

import numpy as np

from ._pool_shape import pool_geometry

F32 = np.float32
LOWEST = F32(np.finfo(F32).min)
_BUF, _BUF_PAD = 2048, 3  # MLAS_POOL_REDUCTION_BUFFER_STACK, its padding


def _sse(r, x):
    return np.where(r > x, r, x)


def _std(r, x):
    return np.where(r < x, x, r)


def pool_kind(h, w, k, s, d, p) -> str:
    """Which loop ORT runs for a 2-D geometry: "loop", "dilated", "global" or "vector"."""
    if d[0] > 1 or d[1] > 1:
        return "dilated"
    if tuple(k) == (h, w) and tuple(s) == (1, 1) and not any(p):
        return "global"
    room = max(0, max(0, _BUF - _BUF_PAD - p[1]) - p[3])
    if s[1] <= 2 and k[0] <= 32 and k[1] <= 32 and room >= w:
        return "vector"
    return "loop"


def _taps(x, k, s, d, p, out):
    """For every tap offset (row-major): (valid mask over the outputs, the values there), x: (NC, *spatial)."""
    nd = len(k)
    sp = x.shape[1:]
    for off in itertools.product(*[range(kk) for kk in k]):
        idx, valid = [], np.ones(tuple(out), bool)
        for i in range(nd):
            pos = np.arange(out[i]) * s[i] - p[i] + off[i] * d[i]
            ok = (pos >= 0) & (pos < sp[i])
            shape = [1] * nd
            shape[i] = out[i]
            valid = valid & ok.reshape(shape)
            idx.append(np.clip(pos, 0, sp[i] - 1).reshape(shape))
        yield valid, x[(slice(None), *idx)], idx


def _loop(x, k, s, d, p, out, first_tap: bool, indices: bool = False):
    m = np.full((x.shape[0], *out), LOWEST, F32)
    arg = np.zeros(m.shape, np.int64)
    first = np.ones(m.shape, bool) if first_tap else np.zeros(m.shape, bool)
    for valid, v, idx in _taps(x, k, s, d, p, out):
        take = valid & (first | (m < v))
        m = np.where(take, v, m)
        if indices:
            flat = np.ravel_multi_index(tuple(np.broadcast_to(i, tuple(out)) for i in idx), x.shape[1:])
            arg = np.where(take, flat, arg)
        first = first & ~valid
    return m, arg


def _global(x):
    v = x.reshape(x.shape[0], -1)
    n = v.shape[1]
    r = np.full((v.shape[0], 4), LOWEST, F32)
    full = n // 4 * 4
    for i in range(0, full, 4):
        r = _sse(r, v[:, i:i + 4])
    m = _sse(_sse(r[:, 0], r[:, 2]), _sse(r[:, 1], r[:, 3]))
    for i in range(full, n):
        m = _std(m, v[:, i])
    return m.reshape(x.shape[0], 1, 1)


def _vector(x, k, s, p, out):
    nc, h, w = x.shape
    (kh, kw), (sh, sw), (oh, ow) = k, s, out
    full = w // 4 * 4
    buf = np.full((nc, p[1] + w + p[3] + _BUF_PAD), LOWEST, F32)
    y = np.empty((nc, oh, ow), F32)
    for oy in range(oh):
        st = oy * sh - p[0]
        r0 = 0 if st < 0 or st >= h else st
        r1 = min(st + kh, h)
        m = x[:, r0, :].copy()
        for r in range(r0 + 1, r1):
            m[:, :full] = _sse(m[:, :full], x[:, r, :full])
            m[:, full:] = _std(m[:, full:], x[:, r, full:])
        buf[:, p[1]:p[1] + w] = m
        cols = np.arange(ow) * sw
        acc = buf[:, cols]
        for kk in range(1, kw):
            acc = _sse(acc, buf[:, cols + kk])
        y[:, oy] = acc
    return y


def max_pool_float(x: np.ndarray, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode: int = 0,
                   auto_pad=None, storage_order: int = 0, indices: bool = False):
    """ORT's float32 MaxPool of x (N, C, *spatial): y, or (y, indices) when `indices`."""
    x = np.asarray(x)
    if x.dtype != F32:
        raise TypeError(f"MaxPool: the float kernel takes float32, got {x.dtype}")
    k, s, p, d, out = pool_geometry(x.shape, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad)
    n, c, sp = x.shape[0], x.shape[1], x.shape[2:]
    nd = len(k)
    flat = x.reshape(n * c, *sp)
    if (not indices and nd <= 3 and tuple(k) == tuple(sp) and all(v == 1 for v in s) and all(v == 1 for v in d)
            and not any(p)):
        kind = "global"  # MlasPool's global case, for every spatial rank (GlobalMaxPool's too)
    elif nd != 2 or indices or min(p) < 0:
        kind = "dilated"
    else:
        kind = pool_kind(sp[0], sp[1], k, s, d, p)
    if kind == "global":
        y = _global(flat)
    elif kind == "vector":
        y = _vector(flat, k, s, p, out)
    else:
        y, arg = _loop(flat, k, s, d, p, out, kind == "dilated", indices)
    y = y.reshape(n, c, *out).astype(F32)
    if not indices:
        return y
    if storage_order:
        if nd != 2:
            raise ValueError("MaxPool storage_order=1 is defined for 2-D pools only")
        arg = (arg % sp[1]) * sp[0] + arg // sp[1]
    base = (np.arange(n * c, dtype=np.int64) * int(np.prod(sp))).reshape(n * c, *([1] * nd))
    return y, (arg + base).reshape(n, c, *out)


def kernel(node, x: list, memo: dict) -> list:
    """A float32 MaxPool node (the interpreter's kernel): y, and Indices when the node has that output."""
    a = node.attrs
    want_idx = len(node.outputs) > 1 and bool(node.outputs[1])
    r = max_pool_float(x[0], list(a["kernel_shape"]), a.get("strides"), a.get("pads"), a.get("dilations"),
                       int(a.get("ceil_mode", 0)), a.get("auto_pad"), int(a.get("storage_order", 0)), want_idx)
    return list(r) if want_idx else [r]
