"""Quantized transposed convolution (ONNX ConvTranspose on DequantizeLinear'd tensors), the readable definition.

ONNX Runtime 1.31's CPU EP has no integer kernel for it: a QDQ model's DequantizeLinear(x),
DequantizeLinear(w) -> ConvTranspose -> QuantizeLinear stays in float (its optimized graph keeps the float
ConvTranspose, with or without session.qdqisint8allowed; com.microsoft:QLinearConvTranspose has a schema but no
CPU kernel). vkinfer computes the exact integer value of that expression, as QLinearConv computes a convolution:

    acc[n, m, oh, ow] = bias[m] + sum over (c in m's group, ih, iw, kh, kw) with
                        ih * s_h + kh * d_h - pad_top == oh and iw * s_w + kw * d_w - pad_left == ow of
                        (x[n, c, ih, iw] - x_zp) * (w[c, m % (M / group), kh, kw] - w_zp[m % (M / group)])
    y = requantize(acc)  (vkinfer/reference/requant.py: float32(acc) * float32(x_scale * w_scale / y_scale))

accumulated in int32. Weights are (C, M / group, kH, kW); per-channel weight parameters lie along axis 1
(DequantizeLinear axis=1, what onnxruntime.quantization writes for ConvTranspose), so with group > 1 the
scale of output channel m is w_scale[m % (M / group)]. The geometry (pads, output_padding, output_shape,
auto_pad) follows ONNX Runtime's ComputeTransposePadAndOutputShape (`conv_transpose_geometry`).
ORT's float result differs from the integer one by at most one quantization step, only where the exact real
value lies within float32 rounding error of a .5 tie: measured 1 element of 368,640 (40 random 16-channel 12x12
draws), 3.0e-6 steps from the tie; tests/numerics/test_conv_transpose.py pins "at most 1 step, within 1e-4 steps of
a tie".
"""

from __future__ import annotations

import numbers

import numpy as np

from ._qcheck import scale as check_scale
from .requant import QRANGE, multiplier, requantize


def _ints(name: str, v, n: int, default: int, minimum: int) -> tuple[int, ...]:
    if v is None:
        return (default,) * n
    try:
        t = tuple(v)
    except TypeError:
        raise ValueError(f"{name} must be a sequence of {n} integers, got {v!r}") from None
    if len(t) != n or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in t):
        raise ValueError(f"{name} must be {n} integers, got {list(t)!r}")
    if any(int(i) < minimum for i in t):
        raise ValueError(f"{name} must all be >= {minimum}, got {list(t)!r}")
    return tuple(int(i) for i in t)


def _auto_pad(v) -> str:
    v = v.decode() if isinstance(v, bytes) else str(v)
    if v not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        raise ValueError(f"auto_pad must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {v!r}")
    return v


def conv_transpose_geometry(in_hw: tuple[int, int], kernel_hw: tuple[int, int], *, strides=None, pads=None,
                            dilations=None, output_padding=None, output_shape=None,
                            auto_pad="NOTSET") -> tuple[tuple[int, int], tuple[int, int]]:
    """((pad_top, pad_left), (OH, OW)) of a 2-D ConvTranspose, as ONNX Runtime computes them.

    Explicit pads (auto_pad NOTSET): OH = s * (H - 1) + output_padding + (k - 1) * d + 1 - pad_top - pad_bottom.
    output_shape (the spatial (OH, OW)) overrides pads: the total padding
    max(0, s * (H - 1) + output_padding + (k - 1) * d + 1 - OH) is split with the odd unit at the start, or at the
    end for SAME_UPPER; OH must give back H (ORT's check). SAME_UPPER / SAME_LOWER without output_shape: OH = H * s,
    split the same way. VALID: no padding. Raises ValueError naming the bad attribute."""
    strides = _ints("strides", strides, 2, 1, 1)
    dilations = _ints("dilations", dilations, 2, 1, 1)
    pads = _ints("pads", pads, 4, 0, 0)
    out_pad = _ints("output_padding", output_padding, 2, 0, 0)
    mode = _auto_pad(auto_pad)
    for a in range(2):
        if out_pad[a] >= strides[a]:  # ORT: output_padding < max(stride, dilation), and then an input size check
            raise ValueError(f"output_padding {list(out_pad)} must be less than the strides {list(strides)}")
    shape = None
    if output_shape is not None and len(tuple(output_shape)):
        shape = _ints("output_shape", tuple(output_shape), 2, 0, 1)  # ORT refuses the 4-D (N, M, OH, OW) form
    begin, out = [], []
    for a in range(2):
        h, k, s, d = in_hw[a], kernel_hw[a], strides[a], dilations[a]
        natural = s * (h - 1) + out_pad[a] + (k - 1) * d + 1
        if shape is not None or mode in ("SAME_UPPER", "SAME_LOWER"):
            size = shape[a] if shape is not None else h * s
            total = max(0, natural - size)
            # measured on ORT 1.31: SAME_UPPER puts the odd unit at the end, every other mode at the start
            head = total // 2 if mode == "SAME_UPPER" else total - total // 2
            if (size + total - (k - 1) * d - 1 - out_pad[a]) // s + 1 != h:
                raise ValueError(f"output_shape {list(shape or ())} (or auto_pad {mode}) is inconsistent with the "
                                 f"input size {h} on spatial axis {a} (kernel {k}, stride {s}, dilation {d})")
            begin.append(head)
            out.append(size)
        else:
            pt, pb = (0, 0) if mode == "VALID" else (pads[a], pads[a + 2])
            size = natural - pt - pb
            if size < 1:
                raise ValueError(f"pads {list(pads)} leave no output (input {list(in_hw)}, kernel "
                                 f"{list(kernel_hw)}, strides {list(strides)})")
            begin.append(pt)
            out.append(size)
    return (begin[0], begin[1]), (out[0], out[1])


def check_shapes(x_shape: tuple[int, ...], w_shape: tuple[int, ...], group) -> int:
    """Output channels M of a ConvTranspose with input (N, C, H, W) and weights (C, M / group, kH, kW);
    ValueError naming the culprit otherwise."""
    if len(x_shape) != 4:
        raise ValueError(f"x must be 4-D NCHW (2-D ConvTranspose), got shape {list(x_shape)}")
    if len(w_shape) != 4:
        raise ValueError(f"weights must be 4-D (C, M/group, kH, kW), got shape {list(w_shape)}")
    if isinstance(group, bool) or not isinstance(group, numbers.Integral) or group < 1:
        raise ValueError(f"group must be a positive integer, got {group!r}")
    c = x_shape[1]
    if c % group:
        raise ValueError(f"group={group} does not divide the {c} input channels")
    if w_shape[0] != c:
        raise ValueError(f"weights have {w_shape[0]} input channels (axis 0), x has {c}")
    if min(w_shape) < 1:
        raise ValueError(f"weights are empty (shape {list(w_shape)})")
    return int(w_shape[1]) * int(group)


def conv_transpose_accumulate(x: np.ndarray, w: np.ndarray, group: int, strides, dilations,
                              begin: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """sum of x[n, c, ih, iw] * w[c, j, kh, kw] into out[n, g * M/g + j, ih * s + kh * d - begin, ...] as float64
    (N, M, OH, OW). Exact for integer operands (every partial sum stays below 2**53) and, for float32 operands,
    the real sum up to float64 rounding."""
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    cg = c // group
    (sh, sw), (dh, dw) = strides, dilations
    oh, ow = out_hw
    # The full scatter extent, grown so that the crop [begin, begin + out) always lies inside it.
    fh = max(sh * (h - 1) + (kh - 1) * dh + 1, begin[0] + oh)
    fw = max(sw * (wd - 1) + (kw - 1) * dw + 1, begin[1] + ow)
    full = np.zeros((n, group, mg, fh, fw), np.float64)
    xg = x.astype(np.float64).reshape(n, group, cg, h, wd)
    wg = w.astype(np.float64).reshape(group, cg, mg, kh, kw)
    for i in range(kh):
        for j in range(kw):
            # (n, g, cg, h, w) x (g, cg, mg) -> (n, g, mg, h, w)
            part = np.einsum("ngchw,gcm->ngmhw", xg, wg[:, :, :, i, j], optimize=True)
            full[:, :, :, i * dh: i * dh + (h - 1) * sh + 1: sh, j * dw: j * dw + (wd - 1) * sw + 1: sw] += part
    out = full[:, :, :, begin[0]: begin[0] + oh, begin[1]: begin[1] + ow]
    return out.reshape(n, group * mg, oh, ow)


def _per_channel(name: str, v: np.ndarray, mg: int, group: int) -> np.ndarray:
    """A weight parameter along weights axis 1 (1 or M/group values) spread over the M output channels."""
    a = np.asarray(v).reshape(-1)
    if a.size not in (1, mg):
        raise ValueError(f"{name} must be a scalar or {mg} values (weights axis 1), got shape {list(np.shape(v))}")
    return np.tile(np.broadcast_to(a, (mg,)), group)


def qlinear_conv_transpose(x: np.ndarray, x_scale, x_zero_point, w: np.ndarray, w_scale, w_zero_point, y_scale,
                           y_zero_point, bias: np.ndarray | None = None, *, strides=None, pads=None,
                           dilations=None, group: int = 1, output_padding=None, output_shape=None,
                           auto_pad="NOTSET", kernel_shape=None) -> np.ndarray:
    """Quantized ConvTranspose: x (N, C, H, W) uint8/int8, w (C, M/group, kH, kW) uint8/int8 with per-tensor or
    axis-1 parameters, optional int32 bias (M,) in units of x_scale * w_scale; output (N, M, OH, OW) of
    y_zero_point's type (see the module docstring). ValueError/TypeError name the culprit."""
    for name, v in (("x", x), ("w", w)):
        if not isinstance(v, np.ndarray) or v.dtype not in QRANGE:
            raise TypeError(f"{name} must be a uint8 or int8 numpy array, got "
                            f"{getattr(v, 'dtype', type(v).__name__)}")
    m = check_shapes(x.shape, w.shape, group)
    mg = w.shape[1]
    if kernel_shape is not None and tuple(int(k) for k in kernel_shape) != tuple(w.shape[2:]):
        raise ValueError(f"kernel_shape {list(kernel_shape)} does not match the weights {list(w.shape[2:])}")
    begin, out_hw = conv_transpose_geometry(x.shape[2:], w.shape[2:], strides=strides, pads=pads,
                                            dilations=dilations, output_padding=output_padding,
                                            output_shape=output_shape, auto_pad=auto_pad)
    xs = check_scale("x_scale", x_scale)
    ys = check_scale("y_scale", y_scale)
    ws = _per_channel("w_scale", np.asarray(w_scale, np.float32), mg, group)
    if not np.all(np.isfinite(ws)) or np.any(ws <= 0):
        raise ValueError("w_scale must be finite and positive")
    xz = _zero("x_zero_point", x_zero_point, x.dtype)
    wz = _per_channel("w_zero_point", _zero_array("w_zero_point", w_zero_point, w.dtype), mg, group)
    ydt = np.dtype(np.asarray(y_zero_point).dtype) if y_zero_point is not None else np.dtype(np.uint8)
    if ydt not in QRANGE:
        raise TypeError(f"y_zero_point must be uint8 or int8, got {ydt}")
    yz = _zero("y_zero_point", y_zero_point, ydt)
    if bias is None:
        b = np.zeros(m, np.int64)
    else:
        b = np.asarray(bias)
        if b.dtype != np.int32 or b.shape != (m,):
            raise ValueError(f"bias must be int32 of shape ({m},), got {b.dtype} {list(b.shape)}")
        b = b.astype(np.int64)
    wq = (w.astype(np.int64) - wz[:mg].reshape(1, mg, 1, 1))
    acc = conv_transpose_accumulate(x.astype(np.int64) - xz, wq, int(group), _ints("strides", strides, 2, 1, 1),
                                    _ints("dilations", dilations, 2, 1, 1), begin, out_hw)
    acc = (acc.astype(np.int64) + b[None, :, None, None]).astype(np.int32)  # int32 wrap-around
    mult = multiplier(np.float32(xs), ws, np.float32(ys))
    if not np.all(np.isfinite(mult)):
        raise ValueError("x_scale * w_scale / y_scale overflows float32")
    lo, hi = QRANGE[ydt]
    return requantize(acc, mult[None, :, None, None], yz, lo, hi).astype(ydt)


def conv_transpose_float(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *, strides=None, pads=None,
                         dilations=None, group: int = 1, output_padding=None, output_shape=None,
                         auto_pad="NOTSET", kernel_shape=None) -> np.ndarray:
    """float32 ConvTranspose: the real sum (float64, exact products) plus bias, rounded once to float32.
    ONNX Runtime's float32 GEMM + col2im rounds each partial sum; the two differ by a few float32 ulps."""
    for name, v in (("x", x), ("w", w)):
        if not isinstance(v, np.ndarray) or v.dtype != np.float32:
            raise TypeError(f"{name} must be float32, got {getattr(v, 'dtype', type(v).__name__)}")
    m = check_shapes(x.shape, w.shape, group)
    if kernel_shape is not None and tuple(int(k) for k in kernel_shape) != tuple(w.shape[2:]):
        raise ValueError(f"kernel_shape {list(kernel_shape)} does not match the weights {list(w.shape[2:])}")
    begin, out_hw = conv_transpose_geometry(x.shape[2:], w.shape[2:], strides=strides, pads=pads,
                                            dilations=dilations, output_padding=output_padding,
                                            output_shape=output_shape, auto_pad=auto_pad)
    acc = conv_transpose_accumulate(x, w, int(group), _ints("strides", strides, 2, 1, 1),
                                    _ints("dilations", dilations, 2, 1, 1), begin, out_hw)
    if bias is not None:
        b = np.asarray(bias)
        if b.dtype != np.float32 or b.shape != (m,):
            raise ValueError(f"bias must be float32 of shape ({m},), got {b.dtype} {list(b.shape)}")
        acc = acc + b.astype(np.float64)[None, :, None, None]
    return acc.astype(np.float32)


def _zero_array(name: str, v, dtype) -> np.ndarray:
    if v is None:
        return np.zeros(1, np.int64)
    a = np.asarray(v)
    if a.dtype != dtype:
        raise TypeError(f"{name} must be {dtype} like its tensor, got {a.dtype}")
    return a.astype(np.int64).reshape(-1)


def _zero(name: str, v, dtype) -> int:
    a = _zero_array(name, v, dtype)
    if a.size != 1:
        raise ValueError(f"{name} must be a scalar, got shape {list(np.shape(v))}")
    return int(a[0])
