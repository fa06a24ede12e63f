"""float32 Conv (what stays float between quantized ops: a convolution the quantizer excluded) with ONNX Runtime
1.31's CPU bits (tests/ops/test_float_conv.py, against ORT on random and edge geometries).

ORT's Conv<float> (1-D, 2-D and 3-D kernels) runs MLAS's MlasConv (onnxruntime/core/mlas/lib/convolve.cpp), per
batch image and group: a GEMM Y_g = W_g col_g with A = the group's filters (M/group x K, K = C/group * prod(kernel)
in (c, kernel taps) order) and B = the im2col panel of the input (K x OH*OW..., zero padding), then Y += bias per
output channel (one rounded add, only when there is a bias). Whichever of its algorithms MlasConvPrepare picks (a
direct GEMM on the input for pointwise convolutions, the full expansion then a GEMM, or the segmented expansion that
builds the panel K block by K block), every output is summed in MLAS's unpacked SGEMM order for N = OH*OW and that K
(vkinfer/reference/float_matmul.py: K blocks of fused multiply-add chains; the M = 1 AVX kernel for one filter per
group, e.g. depthwise). Two shapes take MLAS's transposed-B dot-product kernel, not reproduced (blocked order here,
bounded in the tests): a single output position with several filters per group, and one filter per group of one
channel whose 2-D kernel spans the whole input width (stride 1, no pads, no dilation: MLAS's GemmDirect with B
transposed).

ORT's graph optimizer at ORT_ENABLE_ALL rewrites a float Conv with constant weights into its NCHWc form on AVX2 and
AVX-512 machines (channel blocks of 8 or 16 lanes: a CPU-dependent order), which vkinfer does not follow: those bits
are bounded, measured in the tests. auto_pad is resolved as ORT does (vkinfer/reference/_auto_pad.py).
"""

from __future__ import annotations

import itertools

import numpy as np

from ._auto_pad import conv_pads, crop
from .float_matmul import F32, bounded, k_block, sgemm


def _ints(v, n: int, default: int, what: str) -> list[int]:
    if v is None or (hasattr(v, "__len__") and len(v) == 0):
        return [default] * n
    out = [int(i) for i in v]
    if len(out) != n:
        raise ValueError(f"{what} must have {n} values, got {out}")
    return out


def conv_geometry(x_shape, w_shape, group: int, strides, pads, dilations) -> tuple:
    """(output spatial shape, M per group, K, transposed-B direct case) of a float Conv, checked; pads >= 0."""
    r = len(x_shape) - 2
    if r < 1 or r > 3 or len(w_shape) != r + 2:
        raise ValueError(f"Conv takes 1-D to 3-D inputs with matching weights, got x {list(x_shape)} and w "
                         f"{list(w_shape)}")
    c, m = x_shape[1], w_shape[0]
    if group < 1 or c % group or m % group or w_shape[1] != c // group:
        raise ValueError(f"Conv: group {group} does not fit x's {c} channels and w {list(w_shape)}")
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations) or min(pads, default=0) < 0:
        raise ValueError(f"Conv: bad strides {strides}, dilations {dilations} or pads {pads}")
    out = []
    for i in range(r):
        span = dilations[i] * (w_shape[2 + i] - 1) + 1
        n = x_shape[2 + i] + pads[i] + pads[r + i]
        if n < span:
            raise ValueError(f"Conv: kernel extent {span} larger than the padded input {n} on axis {i + 2}")
        out.append((n - span) // strides[i] + 1)
    cg, mg = c // group, m // group
    k = cg * int(np.prod(w_shape[2:]))
    # MlasConvPrepare's GemmDirect with B transposed: 2-D (1-D promoted: height 1), stride 1, no pads, no dilation,
    # one input channel per group, the kernel as wide as the input.
    trans_b = (all(s == 1 for s in strides) and not any(pads) and all(d == 1 for d in dilations) and cg == 1 and
               r <= 2 and k != cg and w_shape[-1] == x_shape[-1])
    return tuple(out), mg, k, trans_b


def conv_plan(x_shape, w_shape, group: int, strides, pads, dilations) -> tuple[int, bool]:
    """(k_block, bounded) of the convolution's GEMMs (module docstring)."""
    out, mg, k, trans_b = conv_geometry(x_shape, w_shape, group, strides, pads, dilations)
    n = int(np.prod(out))
    return (k_block(mg, n, k, packed=False, trans_b=trans_b), bounded(mg, n, packed=False, trans_b=trans_b))


def im2col(x: np.ndarray, kernel, strides, pads, dilations, out) -> np.ndarray:
    """(N, C * prod(kernel), prod(out)) panel of x (N, C, *spatial), rows in (c, taps) order, zero padding."""
    r = len(kernel)
    xp = np.pad(x, [(0, 0), (0, 0)] + [(pads[i], pads[r + i]) for i in range(r)])
    taps = []
    for t in itertools.product(*(range(k) for k in kernel)):
        sl = tuple(slice(t[i] * dilations[i], t[i] * dilations[i] + strides[i] * (out[i] - 1) + 1, strides[i])
                   for i in range(r))
        taps.append(xp[(slice(None), slice(None), *sl)])
    col = np.stack(taps, axis=2)  # (N, C, T, *out)
    n, c = x.shape[:2]
    return col.reshape(n, c * len(taps), int(np.prod(out)))


def conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, *, group: int = 1, strides=None, pads=None,
         dilations=None) -> np.ndarray:
    """ONNX Conv of float32 x (N, C, *spatial) and w (M, C/group, *kernel), optional bias (M,), explicit pads
    (heads..., tails...; negative pads crop), with ORT's bits (module docstring)."""
    for v, what in ((x, "x"), (w, "w")):
        if not isinstance(v, np.ndarray) or v.dtype != F32:
            raise TypeError(f"Conv's {what} must be float32, got {getattr(v, 'dtype', type(v).__name__)}")
    r = x.ndim - 2
    strides = _ints(strides, r, 1, "strides")
    dilations = _ints(dilations, r, 1, "dilations")
    pads = _ints(pads, 2 * r, 0, "pads")
    x, pads = crop(x, pads)
    out, mg, k, _ = conv_geometry(x.shape, w.shape, group, strides, pads, dilations)
    kb, _ = conv_plan(x.shape, w.shape, group, strides, pads, dilations)
    n = x.shape[0]
    col = im2col(x, w.shape[2:], strides, pads, dilations, out)  # (N, C * T, O)
    o = col.shape[-1]
    col = col.reshape(n, group, k, o)
    y = sgemm(w.reshape(1, group, mg, k), col, kb)  # (N, group, mg, O)
    y = y.reshape(n, group * mg, *out)
    if bias is not None:
        b = np.asarray(bias)
        if b.dtype != F32 or b.shape != (group * mg,):
            raise ValueError(f"Conv's bias must be float32 of shape ({group * mg},), got {b.dtype} {list(b.shape)}")
        y = y + b.reshape((1, -1) + (1,) * r)
    return y.astype(F32)


def kernel(node, x, memo):
    """Conv of float32 tensors (group, strides, pads, dilations, auto_pad resolved as ORT does)."""
    xv, wv = np.asarray(x[0]), np.asarray(x[1])
    if xv.ndim < 3 or wv.ndim != xv.ndim:
        raise ValueError(f"Conv takes x and w of the same rank >= 3, got {list(xv.shape)} and {list(wv.shape)}")
    a = node.attrs
    ks = a.get("kernel_shape")
    if ks is not None and len(ks) and [int(v) for v in ks] != list(wv.shape[2:]):
        raise ValueError(f"kernel_shape {list(ks)} does not match the weights {list(wv.shape[2:])}")
    pads = conv_pads(node, xv.shape, wv.shape)
    bias = x[2] if len(x) > 2 else None
    return [conv(xv, wv, bias, group=int(a.get("group", 1)), strides=a.get("strides"), pads=pads,
                 dilations=a.get("dilations"))]


def shape(node, x) -> list:
    """Conv's output (shape, dtype), checked as the kernel checks it (the trace's shape rule)."""
    xv, wv = np.asarray(x[0]), np.asarray(x[1])
    if xv.ndim < 3 or wv.ndim != xv.ndim:
        raise ValueError(f"Conv takes x and w of the same rank >= 3, got {list(xv.shape)} and {list(wv.shape)}")
    r = xv.ndim - 2
    a = node.attrs
    pads = conv_pads(node, xv.shape, wv.shape)
    xs, p = crop(np.broadcast_to(np.False_, xv.shape), pads)
    out, _, _, _ = conv_geometry(xs.shape, wv.shape, int(a.get("group", 1)), _ints(a.get("strides"), r, 1, "strides"),
                                 p, _ints(a.get("dilations"), r, 1, "dilations"))
    return [((xv.shape[0], wv.shape[0], *out), xv.dtype)]
