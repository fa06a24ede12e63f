"""vkinfer:QDQConvTranspose: DequantizeLinear(x) -> float32 ConvTranspose -> QuantizeLinear with ONNX Runtime 1.31's
CPU bits (the group vkinfer/model/conv_transpose.py folds where ORT keeps the float op and the MLAS order below is
known).

ORT's optimized graph keeps a QDQ ConvTranspose in float (SessionOptions.optimized_model_filepath, slider_yoloseg
qdq and qdq_s8 with session.qdqisint8allowed=1). Its CPU kernel (providers/cpu/nn/conv_transpose.cc) computes per
group col = W^T X with MLAS SGEMM (beta 0), then Col2im into a zeroed Y (Y += col per kernel tap, taps in (kh, kw)
order), then Y += bias per channel. MLAS's SGEMM kernels (FMA3 / AVX-512F) run each output as one chain of fused
multiply-adds from +0 over k in order within a K block; the non-packed SGEMM's K block is at least 128
(MLAS_SGEMM_STRIDEK, doubled while the thread's N slice is small), so with C / group <= 128 every output is one
chain whatever the blocking. So, per output channel m (group g, m' = m % (M / group)) and output position:

    xf = float32(x - x_zp) * x_scale                              (DequantizeLinear, one rounding)
    v_tap = fma(xf[c_last], w[c_last], ... fma(xf[c0], w[c0], +0))  over the group's channels in order
    y = ((+0 + v_tap0) + v_tap1 ...) + bias[m]                      (Col2im's taps in (kh, kw) order, then bias)
    q = QuantizeLinear(y)                                          (reference/quantize_linear.py quantize_values)

`w` and `bias` are the float32 DequantizeLinear'd constants (the fold computes them with ORT's arithmetic). The
fold makes this op only for non-overlapping kernels ((k - 1) * d < s on both axes: one tap per output) and
C / group <= 128; the numpy definition below also accumulates overlapping taps in Col2im's order, but that order
is not verified against ORT (the fold keeps the exact integer vkinfer:QLinearConvTranspose there).
"""

from __future__ import annotations

import numpy as np

from ._float32 import fma32
from ._opdef import OpDef
from ._qcheck import scale as check_scale
from .qlinear_conv_transpose import check_shapes, conv_transpose_geometry
from .quantize_linear import quantize_values
from .requant import QRANGE

F32 = np.float32
MAX_CHAIN = 128  # MLAS_SGEMM_STRIDEK: the smallest K block of the non-packed SGEMM
OP = "vkinfer:QDQConvTranspose"
_LOW29, _HALF29 = np.uint64((1 << 29) - 1), np.uint64(1 << 28)  # float64 bits below float32's last place
_TINY = 2.0 ** -126


def _fma(a: np.ndarray, b: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """fma32(a, b, acc), cheaper: a * b is exact in float64 and s = a * b + acc rounds once there; s's float32
    rounding is the fused result unless s is a float32 midpoint or a nonzero below float32's normals, where
    the exact fma32 runs instead."""
    s = a.astype(np.float64) * b.astype(np.float64) + acc
    low = s.view(np.uint64) & _LOW29
    odd = (low == _HALF29) | ((low == 0) & (np.abs(s) < _TINY) & (s != 0))
    if odd.any():
        return fma32(a, b, acc)
    return s.astype(F32)


def overlapping(kernel_hw, strides, dilations) -> bool:
    """Whether two kernel taps can reach one output ((k - 1) * d >= s on an axis)."""
    return any((k - 1) * d >= s for k, s, d in zip(kernel_hw, strides, dilations, strict=True))


def _pair(v, default: int) -> tuple[int, int]:
    return (default, default) if v is None else tuple(int(i) for i in v)


def _checked(x, x_scale, x_zero_point, w, bias, y_scale, y_zero_point, *, strides=None, pads=None, dilations=None,
             group: int = 1, output_padding=None, output_shape=None, auto_pad="NOTSET", kernel_shape=None) -> tuple:
    """qdq_conv_transpose's checks of its arguments, in its order: (M, (pad_top, pad_left), (OH, OW), x_scale,
    y_scale, the zero points as arrays, the bias); ValueError/TypeError name the culprit."""
    if not isinstance(x, np.ndarray) or x.dtype not in QRANGE:
        raise TypeError(f"x must be a uint8 or int8 numpy array, got {getattr(x, 'dtype', type(x).__name__)}")
    if not isinstance(w, np.ndarray) or w.dtype != F32:
        raise TypeError(f"w must be float32, got {getattr(w, 'dtype', type(w).__name__)}")
    m = check_shapes(x.shape, w.shape, group)
    if kernel_shape is not None and tuple(int(k) for k in kernel_shape) != tuple(w.shape[2:]):
        raise ValueError(f"kernel_shape {list(kernel_shape)} does not match the weights {list(w.shape[2:])}")
    (pt, pl), (oh, ow) = conv_transpose_geometry(x.shape[2:], w.shape[2:], strides=strides, pads=pads,
                                                 dilations=dilations, output_padding=output_padding,
                                                 output_shape=output_shape, auto_pad=auto_pad)
    xs, ys = check_scale("x_scale", x_scale), check_scale("y_scale", y_scale)
    xz, yz = np.asarray(0 if x_zero_point is None else x_zero_point), np.asarray(y_zero_point)
    if xz.size != 1 or (x_zero_point is not None and xz.dtype != x.dtype):
        raise TypeError(f"x_zero_point must be one {x.dtype} value, got {xz.dtype} of shape {list(xz.shape)}")
    if yz.size != 1 or yz.dtype not in QRANGE:
        raise TypeError(f"y_zero_point must be one uint8 or int8 value, got {yz.dtype} of shape {list(yz.shape)}")
    b = np.zeros(m, F32) if bias is None else np.asarray(bias)
    if b.dtype != F32 or b.shape != (m,):
        raise ValueError(f"bias must be float32 of shape ({m},), got {b.dtype} {list(b.shape)}")
    return m, (pt, pl), (oh, ow), xs, ys, xz, yz, b


def qdq_conv_transpose(x: np.ndarray, x_scale, x_zero_point, w: np.ndarray, bias: np.ndarray | None, y_scale,
                       y_zero_point, *, strides=None, pads=None, dilations=None, group: int = 1,
                       output_padding=None, output_shape=None, auto_pad="NOTSET", kernel_shape=None) -> np.ndarray:
    """x (N, C, H, W) uint8/int8 with scalar x_scale / x_zero_point, w (C, M/group, kH, kW) float32, bias (M,)
    float32 or None; output (N, M, OH, OW) of y_zero_point's type, ORT's float bits (module docstring).
    ValueError/TypeError name the culprit."""
    m, (pt, pl), (oh, ow), xs, ys, xz, yz, b = _checked(
        x, x_scale, x_zero_point, w, bias, y_scale, y_zero_point, strides=strides, pads=pads, dilations=dilations,
        group=group, output_padding=output_padding, output_shape=output_shape, auto_pad=auto_pad,
        kernel_shape=kernel_shape)
    (sh, sw), (dh, dw) = _pair(strides, 1), _pair(dilations, 1)
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    cg = c // group
    xf = (x.astype(np.int32) - int(xz.reshape(-1)[0])).astype(F32) * F32(xs)  # DequantizeLinear
    y = np.zeros((n, m, oh, ow), F32)
    with np.errstate(over="ignore", invalid="ignore"):
        for g in range(group):
            xg = xf[:, g * cg:(g + 1) * cg]
            acc = np.zeros((n, mg, kh, kw, h, wd), F32)  # every tap's GEMM output (col), one FMA chain each
            for k in range(cg):
                acc = _fma(xg[:, k][:, None, None, None], w[g * cg + k][None, :, :, :, None, None], acc)
            for i in range(kh):  # Col2im: taps in (kh, kw) order into the zeroed output
                r = np.arange(h) * sh + i * dh - pt
                rk = (r >= 0) & (r < oh)
                for j in range(kw):
                    col = np.arange(wd) * sw + j * dw - pl
                    ck = (col >= 0) & (col < ow)
                    sel = np.ix_(rk, ck)
                    part = acc[:, :, i, j][:, :, sel[0], sel[1]]
                    yy = y[:, g * mg:(g + 1) * mg][:, :, r[rk][:, None], col[ck][None, :]]
                    y[:, g * mg:(g + 1) * mg, r[rk][:, None], col[ck][None, :]] = yy + part
        y = y + b[None, :, None, None]
    return quantize_values(y, F32(ys), yz.reshape(()), yz.dtype)


def _kernel(node, x, memo):
    """Inputs (x, x_scale, x_zero_point, w float32, bias float32 or absent, y_scale, y_zero_point);
    ConvTranspose's attributes."""
    bias = x[4] if len(x) > 4 else None
    return [qdq_conv_transpose(x[0], x[1], x[2], x[3], bias, x[5], x[6], **_attrs(node))]


def _attrs(node) -> dict:
    """ConvTranspose's attributes the kernel takes, `group` as an int."""
    a = {k: v for k, v in node.attrs.items() if k in ("strides", "pads", "dilations", "group", "output_padding",
                                                      "output_shape", "auto_pad", "kernel_shape")}
    if "group" in a:
        a["group"] = int(a["group"])
    return a


def _shape(node, x):
    """The output's shape and dtype, the arguments checked as the kernel checks them, nothing computed: the
    kernel's FMA chains in numpy were 3.0-4.6 s of slider_yoloseg's 3.6-5.1 s session, run by the trace."""
    bias = x[4] if len(x) > 4 else None
    m, _, (oh, ow), *_, yz, _ = _checked(x[0], x[1], x[2], x[3], bias, x[5], x[6], **_attrs(node))
    return [((x[0].shape[0], m, oh, ow), yz.dtype)]


DEFINITIONS = (OpDef(OP, _kernel, "conv", (7, (0, 1, 3, 5, 6)), y_params=(5, 6), x_slots=(0,), weights=3,
                     shape=_shape),)
