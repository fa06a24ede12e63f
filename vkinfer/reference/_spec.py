"""Argument checking shared by every device: user arguments -> a validated, normalised spec.

Every backend (reference, Vulkan, later CPU) consumes these specs, so bad input is rejected once,
here, with an error that names the argument, before any kernel sees it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from .requant import QRANGE, multiplier, quantize_scalar

QTYPES = (np.dtype(np.uint8), np.dtype(np.int8))
_INT32_MAX = 2 ** 31 - 1


def _array(name: str, v, *, quant: bool = False) -> np.ndarray:
    if not isinstance(v, np.ndarray):
        raise TypeError(f"{name} must be a numpy array, got {type(v).__name__}")
    if quant and v.dtype not in QTYPES:
        raise TypeError(f"{name} must be uint8 or int8, got {v.dtype}")
    if v.size == 0:
        raise ValueError(f"{name} is empty (shape {v.shape})")
    return v


def _scale(name: str, v, count: int | None = None) -> np.ndarray:
    """A scale: a finite positive float, per tensor or (when count is given) per channel."""
    if isinstance(v, bool) or not isinstance(v, (numbers.Real, np.ndarray, np.generic)):
        raise TypeError(f"{name} must be a float or a float numpy array, got {type(v).__name__}")
    a = np.asarray(v)
    if a.dtype.kind not in "fiu":
        raise TypeError(f"{name} must be a floating-point number, got dtype {a.dtype}")
    a = a.astype(np.float32).reshape(-1)
    if a.size != 1 and (count is None or a.size != count):
        want = "a scalar" if count is None else f"a scalar or {count} values (one per channel)"
        raise ValueError(f"{name} must be {want}, got shape {np.shape(v)}")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{name} must be finite and positive (as float32), got {np.asarray(v).ravel()[:8]}")
    return a


def _zero_point(name: str, v, dtype: np.dtype | None, count: int | None = None, *,
                default: np.dtype | None = None) -> tuple[np.ndarray, np.dtype]:
    """A zero point in its quantized type's range. A numpy value's dtype must be uint8/int8 (and
    equal `dtype` when given); a Python int takes `dtype`, else `default`."""
    if isinstance(v, bool):
        raise TypeError(f"{name} must be an integer, got bool")
    if isinstance(v, (np.ndarray, np.generic)):
        a = np.asarray(v)
        if a.dtype not in QTYPES:
            raise TypeError(f"{name} must be uint8 or int8, got dtype {a.dtype}")
        if dtype is not None and a.dtype != dtype:
            raise TypeError(f"{name} has dtype {a.dtype} but its tensor is {dtype}")
        zdt = a.dtype
    elif isinstance(v, numbers.Integral):
        zdt = dtype if dtype is not None else default
        if zdt is None:
            raise TypeError(f"{name} as a Python int needs a dtype; pass np.uint8(...) or np.int8(...)")
        a, zdt = np.asarray(int(v)), np.dtype(zdt)
    else:
        raise TypeError(f"{name} must be an integer or a uint8/int8 numpy value, got {type(v).__name__}")
    a = a.astype(np.int64).reshape(-1)
    if a.size != 1 and (count is None or a.size != count):
        want = "a scalar" if count is None else f"a scalar or {count} values (one per channel)"
        raise ValueError(f"{name} must be {want}, got shape {np.shape(v)}")
    lo, hi = QRANGE[zdt]
    if np.any(a < lo) or np.any(a > hi):
        raise ValueError(f"{name} = {a[:8]} is out of range [{lo}, {hi}] for {zdt}")
    return a.astype(np.int32), zdt


def _ints(name: str, v, n: int, minimum: int) -> tuple[int, ...]:
    try:
        t = tuple(v)
    except TypeError:
        raise TypeError(f"{name} must be a sequence of {n} integers, got {v!r}") from None
    if len(t) != n or not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in t):
        raise ValueError(f"{name} must be {n} integers, got {v!r}")
    if any(int(i) < minimum for i in t):
        raise ValueError(f"{name} must all be >= {minimum}, got {v!r}")
    return tuple(int(i) for i in t)


def _activation_bounds(activation, y_scale: np.float32, y_zp: int, ydt: np.dtype) -> tuple[int, int]:
    """Fused activation as a narrower clamp: relu -> [q(0), qmax], relu6 -> [q(0), q(6)], clip -> [q(lo), q(hi)]."""
    qmin, qmax = QRANGE[ydt]
    if activation is None:
        return qmin, qmax
    if activation == "relu":
        lo, hi = 0.0, math.inf
    elif activation == "relu6":
        lo, hi = 0.0, 6.0
    elif isinstance(activation, tuple) and len(activation) == 3 and activation[0] == "clip":
        lo, hi = float(activation[1]), float(activation[2])
        if math.isnan(lo) or math.isnan(hi) or lo > hi:
            raise ValueError(f"activation clip bounds must satisfy lo <= hi, got {activation!r}")
    else:
        raise ValueError(f'activation must be None, "relu", "relu6" or ("clip", lo, hi), got {activation!r}')
    qlo = qmin if lo == -math.inf else quantize_scalar(lo, y_scale, y_zp, qmin, qmax)
    qhi = qmax if hi == math.inf else quantize_scalar(hi, y_scale, y_zp, qmin, qmax)
    return qlo, qhi


@dataclass(frozen=True, eq=False)
class QuantOut:
    """Output quantization: per-channel multipliers and the clamp after the zero point."""

    m: np.ndarray  # float32 (channels,)
    zero_point: int
    lo: int
    hi: int
    dtype: np.dtype


def _quant(names: tuple[str, str, str], x: np.ndarray, x_scale, x_zp, w: np.ndarray, w_scale, w_zp, y_scale, y_zp,
           channels: int, activation) -> tuple[int, np.ndarray, QuantOut]:
    """Check one op's scales and zero points (input per tensor, weights per tensor or per output
    channel, output per tensor); return the input zero point, per-channel weight zero points and
    the output quantization. `names` are the op's argument prefixes, e.g. ("x", "w", "y")."""
    xn, wn, yn = names
    xs = _scale(f"{xn}_scale", x_scale)
    ws = _scale(f"{wn}_scale", w_scale, channels)
    ys = np.float32(_scale(f"{yn}_scale", y_scale)[0])
    xzp, _ = _zero_point(f"{xn}_zero_point", x_zp, x.dtype)
    wzp, _ = _zero_point(f"{wn}_zero_point", w_zp, w.dtype, channels)
    yzp, ydt = _zero_point(f"{yn}_zero_point", y_zp, None, default=x.dtype)
    m = multiplier(np.float32(xs[0]), np.broadcast_to(ws, (channels,)), ys)
    if not np.all(np.isfinite(m)):
        raise ValueError(f"{xn}_scale * {wn}_scale / {yn}_scale overflows float32")
    lo, hi = _activation_bounds(activation, ys, int(yzp[0]), ydt)
    out = QuantOut(m=m, zero_point=int(yzp[0]), lo=lo, hi=hi, dtype=ydt)
    return int(xzp[0]), np.broadcast_to(wzp, (channels,)).astype(np.int32), out


@dataclass(frozen=True, eq=False)
class ConvSpec:
    """A validated QLinearConv call (ONNX semantics; pads are top, left, bottom, right)."""

    x: np.ndarray  # N, C, H, W
    x_zp: int
    w: np.ndarray  # M, C/group, kH, kW
    w_zp: np.ndarray  # int32 (M,)
    bias: np.ndarray  # int32 (M,)
    strides: tuple[int, int]
    pads: tuple[int, int, int, int]
    dilations: tuple[int, int]
    group: int
    out: QuantOut

    @property
    def out_shape(self) -> tuple[int, int, int, int]:
        """(N, M, OH, OW) of the output."""
        n, _, h, w = self.x.shape
        m, _, kh, kw = self.w.shape
        (sh, sw), (dh, dw), (pt, pl, pb, pr) = self.strides, self.dilations, self.pads
        oh = (h + pt + pb - ((kh - 1) * dh + 1)) // sh + 1
        ow = (w + pl + pr - ((kw - 1) * dw + 1)) // sw + 1
        return n, m, oh, ow

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the op."""
        n, m, oh, ow = self.out_shape
        return n * m * oh * ow * int(np.prod(self.w.shape[1:]))


def conv_spec(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias=None, *,
              strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1, activation=None) -> ConvSpec:
    """Check QLinearConv arguments; raise TypeError/ValueError naming the culprit."""
    x = _array("x", x, quant=True)
    w = _array("w", w, quant=True)
    if x.ndim != 4:
        raise ValueError(f"x must be 4-D NCHW, got shape {x.shape}")
    if w.ndim != 4:
        raise ValueError(f"w must be 4-D (M, C/group, kH, kW), got shape {w.shape}")
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    if isinstance(group, bool) or not isinstance(group, numbers.Integral) or group < 1:
        raise ValueError(f"group must be a positive integer, got {group!r}")
    group = int(group)
    if c % group or m % group:
        raise ValueError(f"group={group} must divide input channels ({c}) and output channels ({m})")
    if cg * group != c:
        raise ValueError(f"w has {cg} input channels per group, but x has {c} channels / group {group} = {c // group}")
    strides = _ints("strides", strides, 2, 1)
    dilations = _ints("dilations", dilations, 2, 1)
    pads = _ints("pads", pads, 4, 0)
    ekh, ekw = (kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1
    # Every device computes positions and sizes in 32-bit integers (the C kernels, the shaders): refuse
    # geometry whose padded input, dilated kernel or output does not fit, instead of letting it wrap.
    for what, v in (("padded input height", h + pads[0] + pads[2]), ("padded input width", wd + pads[1] + pads[3]),
                    ("dilated kernel height", ekh), ("dilated kernel width", ekw),
                    ("strides", max(strides))):
        if v > _INT32_MAX:
            raise ValueError(f"{what} {v} (pads {list(pads)}, strides {list(strides)}, dilations "
                             f"{list(dilations)}) does not fit a 32-bit integer")
    if ekh > h + pads[0] + pads[2] or ekw > wd + pads[1] + pads[3]:
        raise ValueError(f"kernel {kh}x{kw} (dilated {ekh}x{ekw}) is larger than the padded input "
                         f"{h + pads[0] + pads[2]}x{wd + pads[1] + pads[3]}")
    oh = (h + pads[0] + pads[2] - ekh) // strides[0] + 1
    ow = (wd + pads[1] + pads[3] - ekw) // strides[1] + 1
    if n * m * oh * ow > _INT32_MAX:
        raise ValueError(f"the output {n}x{m}x{oh}x{ow} (pads {list(pads)}) has over {_INT32_MAX} elements")
    xzp, wzp, out = _quant(("x", "w", "y"), x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale,
                           y_zero_point, m, activation)
    if bias is None:
        b = np.zeros(m, np.int32)
    else:
        b = _array("bias", bias)
        if b.dtype != np.int32:
            raise TypeError(f"bias must be int32, got {b.dtype}")
        if b.shape != (m,):
            raise ValueError(f"bias must have shape ({m},), got {b.shape}")
    return ConvSpec(x=np.ascontiguousarray(x), x_zp=xzp, w=np.ascontiguousarray(w), w_zp=wzp,
                    bias=np.ascontiguousarray(b), strides=strides, pads=pads, dilations=dilations, group=group,
                    out=out)


@dataclass(frozen=True, eq=False)
class MatMulSpec:
    """A validated QLinearMatMul call, broadcast to a[batch, M, K] @ b[batch or 1, K, N]."""

    a: np.ndarray  # (B, M, K)
    a_zp: int
    b: np.ndarray  # (B or 1, K, N)
    b_zp: np.ndarray  # int32 (N,)
    out: QuantOut
    out_shape: tuple[int, ...]

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the op."""
        bt, m, k = self.a.shape
        return bt * m * k * self.b.shape[2]


def matmul_spec(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point) -> MatMulSpec:
    """Check QLinearMatMul arguments (numpy matmul broadcasting); b may be quantized per column."""
    a = _array("a", a, quant=True)
    b = _array("b", b, quant=True)
    if a.ndim < 2 or b.ndim < 2:
        raise ValueError(f"a and b must be at least 2-D (1-D matmul operands are not supported), "
                         f"got a {a.shape}, b {b.shape}")
    if a.shape[-1] != b.shape[-2]:
        raise ValueError(f"a's last dimension ({a.shape[-1]}) must equal b's second-to-last ({b.shape[-2]})")
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(f"batch dimensions of a {a.shape} and b {b.shape} do not broadcast") from None
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    nb = int(np.prod(batch, dtype=np.int64))
    a3 = np.ascontiguousarray(np.broadcast_to(a, (*batch, m, k))).reshape(nb, m, k)
    if int(np.prod(b.shape[:-2], dtype=np.int64)) == 1:
        b3 = np.ascontiguousarray(b).reshape(1, k, n)  # one weight matrix shared by every batch
    else:
        b3 = np.ascontiguousarray(np.broadcast_to(b, (*batch, k, n))).reshape(nb, k, n)
    azp, bzp, out = _quant(("a", "b", "y"), a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale,
                           y_zero_point, n, None)
    return MatMulSpec(a=a3, a_zp=azp, b=b3, b_zp=bzp, out=out, out_shape=(*batch, m, n))
