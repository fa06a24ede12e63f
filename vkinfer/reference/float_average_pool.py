"""float32 AveragePool with ONNX Runtime 1.31's CPU bits, in numpy: the interpreter's kernel (`kernel`, registered
for AveragePool by vkinfer/model/resize.py) and the specification cpu_fallback/src/ops/float_avgpool.c follows
(checked against onnxruntime in tests/ops/test_float_average_pool.py).

Which loop ORT 1.31 runs (measured against onnxruntime on random geometries; `pool_kind`):
- its own loop (pool_functors.h AveragePool{1,2,3}DTask) for a model of opset >= 19 (AveragePool-19's kernel), a
  dilation > 1, or ceil_mode with count_include_pad: y = +0 plus every tap inside the input in row-major order,
  divided (when there is a tap; else +0) by the tap count, or with count_include_pad by the product over axes of
  1 + (end - start - 1) // dilation, end = min(start + kernel * dilation, size + tail pad);
- else MLAS's pooling (MlasPool), one of three kernels by the geometry, parting in their summation order (and so on
  signed zeros and rounding):
  - global (kernel = image, strides 1, no pads): 4 lanes from +0, lane l sums x[4i + l] in order; the lanes fold
    as (l0 + l2) + (l1 + l3) (SSE's horizontal add), then the last size % 4 values one by one; / float(size).
  - vector (rank >= 2, last stride <= 2, every kernel side <= 32, the padded row within MLAS's 2048-float buffer):
    per output row, each column sums its window's rows (2-D: from the first row's value; 3-D: from +0, plane by
    plane, row by row) into a row buffer with +0 in the padding (pads, and 3 more on the right); each output sums
    its kw buffer entries from the first, padding included (+0 turns a -0 sum into +0).
  - generic (anything else): m = +0, then every tap inside the input in row-major order.
  The divisor is a float32: the product of the kernel sides (count_include_pad=1) or the number of taps inside the
  input (the vector kernel's lane arithmetic gives the same integer).
Every result is one IEEE division, sum / divisor. Negative (auto_pad) pads: ORT refuses the node, so does this.
"""

from __future__ import annotations

import itertools

import numpy as np

from ._opdef import check_auto_pad
from ._pool_shape import pool_geometry

F32 = np.float32
_BUF, _BUF_PAD = 2048, 3  # MLAS_POOL_REDUCTION_BUFFER_STACK, its padding (one vector's over-read)


def pool_kind(sp, k, s, p, d, ceil_mode: int, count_include_pad: int, opset: int) -> str:
    """Which loop ORT 1.31 runs (module docstring): "loop" (AveragePool-19's own), or MLAS's "global", "vector",
    "generic"."""
    nd = len(k)
    if opset >= 19 or any(v > 1 for v in d) or (ceil_mode and count_include_pad):
        return "loop"
    if tuple(k) == tuple(sp) and all(v == 1 for v in s) and not any(p):
        return "global"
    if nd >= 2 and s[-1] <= 2 and all(v <= 32 for v in k):
        room = _BUF - _BUF_PAD
        room = room - p[nd - 1] if room >= p[nd - 1] else 0
        room = room - p[2 * nd - 1] if room >= p[2 * nd - 1] else 0
        if room >= sp[-1]:
            return "vector"
    return "generic"


def _loop(x, k, s, p, d, out, divisor: str):
    """+0 plus every tap inside the input in row-major order, then / the divisor: "count" (the taps summed),
    "kernel" (MLAS's include-pad divisor) or "clipped" (ORT's own loop's include-pad divisor); no tap: +0."""
    nd = len(k)
    sp = x.shape[1:]
    m = np.zeros((x.shape[0], *out), F32)
    count = np.zeros(tuple(out), np.int64)
    for off in itertools.product(*[range(kk) for kk in k]):
        idx, valid = [], np.ones(tuple(out), bool)
        for i in range(nd):
            pos = np.arange(out[i]) * s[i] - p[i] + off[i] * d[i]
            shape = [1] * nd
            shape[i] = out[i]
            valid = valid & ((pos >= 0) & (pos < sp[i])).reshape(shape)
            idx.append(np.clip(pos, 0, sp[i] - 1).reshape(shape))
        m = np.where(valid, m + x[(slice(None), *idx)], m)
        count = count + valid
    if divisor == "kernel":
        div = np.full(tuple(out), int(np.prod(k)), np.int64)
    elif divisor == "clipped":
        div = np.ones(tuple(out), np.int64)
        for i in range(nd):
            st = np.arange(out[i], dtype=np.int64) * s[i] - p[i]
            en = np.minimum(st + k[i] * d[i], sp[i] + p[nd + i])
            shape = [1] * nd
            shape[i] = out[i]
            div = div * (1 + (en - st - 1) // d[i]).reshape(shape)
    else:
        div = count
    return np.where(count > 0, m / div.astype(F32), m)


def _global(x):
    v = x.reshape(x.shape[0], -1)
    n = v.shape[1]
    lanes = np.zeros((v.shape[0], 4), F32)
    full = n // 4 * 4
    for i in range(0, full, 4):
        lanes = lanes + v[:, i:i + 4]
    m = (lanes[:, 0] + lanes[:, 2]) + (lanes[:, 1] + lanes[:, 3])
    for i in range(full, n):
        m = m + v[:, i]
    return (m / F32(n)).reshape(x.shape[0], *([1] * (x.ndim - 1)))


def _vector(x, k, s, p, out, include_pad):
    nd = len(k)
    sp = x.shape[1:]
    w, kw, sw, pl, pr = sp[-1], k[-1], s[-1], p[nd - 1], p[2 * nd - 1]
    buf = np.zeros((x.shape[0], pl + w + pr + _BUF_PAD), F32)
    cols = np.arange(out[-1], dtype=np.int64) * sw
    outer = []  # per outer axis: (clipped start, end) of each output index, MLAS's wrap rule (start < size holds)
    for i in range(nd - 1):
        st = np.arange(out[i], dtype=np.int64) * s[i] - p[i]
        outer.append((np.where((st < 0) | (st >= sp[i]), 0, st), np.minimum(st + k[i], sp[i])))
    hcount = (np.minimum(cols + kw, pl + w) - np.maximum(cols, pl)).astype(F32)
    y = np.empty((x.shape[0], *out), F32)
    for o in itertools.product(*[range(v) for v in out[:-1]]):
        rng = [range(int(outer[i][0][o[i]]), int(outer[i][1][o[i]])) for i in range(nd - 1)]
        taps = list(itertools.product(*rng))
        if nd == 2:
            col = x[:, taps[0][0], :].copy()
            for t in taps[1:]:
                col = col + x[:, t[0], :]
        else:
            col = np.zeros((x.shape[0], w), F32)
            for t in taps:
                col = col + x[(slice(None), *t, slice(None))]
        buf[:, pl:pl + w] = col
        acc = buf[:, cols]
        for kk in range(1, kw):
            acc = acc + buf[:, cols + kk]
        if include_pad:
            div = F32(int(np.prod(k)))
        else:
            div = np.maximum(hcount * F32(len(taps)), F32(1))
        y[(slice(None), *o)] = acc / div
    return y


def average_pool_float(x: np.ndarray, kernel_shape, strides=None, pads=None, dilations=None, ceil_mode: int = 0,
                       auto_pad=None, count_include_pad: int = 0, opset: int = 22) -> np.ndarray:
    """ORT's float32 AveragePool of x (N, C, *spatial), 1 to 3 spatial axes, as the kernel of a model of `opset`
    runs it (module docstring)."""
    x = np.asarray(x)
    if x.dtype != F32:
        raise TypeError(f"AveragePool: the float kernel takes float32, got {x.dtype}")
    if not 3 <= x.ndim <= 5:
        raise ValueError(f"AveragePool takes 1 to 3 spatial axes (ORT's kernels), got shape {x.shape}")
    if count_include_pad not in (0, 1):
        raise ValueError(f"AveragePool count_include_pad must be 0 or 1, got {count_include_pad!r}")
    k, s, p, d, out = pool_geometry(x.shape, kernel_shape, strides, pads, dilations, ceil_mode, auto_pad)
    if min(p) < 0:  # auto_pad SAME with a stride above the kernel (measured: ORT 1.31 fails the run)
        raise ValueError(f"AveragePool: padding values must be non-negative, auto_pad gives {list(p)} (ORT refuses)")
    n, c, sp = x.shape[0], x.shape[1], x.shape[2:]
    if x.size == 0 or int(np.prod(out)) == 0:
        return np.zeros((n, c, *out), F32)
    flat = x.reshape(n * c, *sp)
    kind = pool_kind(sp, k, s, p, d, ceil_mode, count_include_pad, opset)
    with np.errstate(all="ignore"):
        if kind == "loop":
            y = _loop(flat, k, s, p, d, out, "clipped" if count_include_pad else "count")
        elif kind == "global":
            y = _global(flat)
        elif kind == "vector":
            y = _vector(flat, k, s, p, out, count_include_pad)
        else:
            y = _loop(flat, k, s, p, d, out, "kernel" if count_include_pad else "count")
    return y.reshape(n, c, *out).astype(F32)


def kernel(node, x: list, memo: dict) -> list:
    """A float32 AveragePool node (the interpreter's kernel); other element types: TypeError naming the input."""
    a = node.attrs
    if "kernel_shape" not in a:
        raise ValueError("AveragePool: missing attribute 'kernel_shape'")
    check_auto_pad(node)
    v = np.asarray(x[0])
    if v.dtype != F32:
        raise TypeError(f"AveragePool on {v.dtype} input {node.inputs[0]!r}: vkinfer's kernel takes float32 (ORT "
                        "refuses 8-bit and double AveragePool, a QDQ one becomes com.microsoft:QLinearAveragePool; "
                        "its float16 kernel is not reproduced)")
    return [average_pool_float(v, list(a["kernel_shape"]), a.get("strides"), a.get("pads"), a.get("dilations"),
                               int(a.get("ceil_mode", 0)), a.get("auto_pad"), int(a.get("count_include_pad", 0)),
                               int(a.get("_opset") or 22))]

