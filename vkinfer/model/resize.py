"""ONNX Resize as ORT 1.31 computes it (the interpreter's kernel, and the index maps the byte gathers of the
devices use): nearest on any tensor in every mode; linear on float32 2-D/3-D tensors, 4-D/5-D ones whose outer
scales are 1 and NHWC 4-D (bilinear, trilinear; vkinfer/cpu/float_resize.py runs them natively), bilinear on
8-bit; cubic on float32 2-D/NCHW (vkinfer/model/resize_cubic.py). An output shape equal to the input's is a copy."""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..reference import float_average_pool
from .attrs import _axis, _ints1, _opt, _text  # noqa: F401
from .graph import Node
from .op_table import _op

_CTM = ("half_pixel", "asymmetric", "pytorch_half_pixel", "tf_half_pixel_for_nn", "align_corners",
        "tf_crop_and_resize", "half_pixel_symmetric")
_NEAREST = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
f32 = np.float32


def _original(ctm: str, xr: np.ndarray, scale: np.float32, lr: int, lo: int, r0: np.float32,
              r1: np.float32) -> np.ndarray:
    """ORT's GetOriginalCoordinateFromResizedCoordinate: float32 arithmetic (double where ORT uses double)."""
    lrf, lof = f32(lr), f32(lo)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if ctm == "asymmetric":
            return xr / scale
        if ctm == "pytorch_half_pixel":
            return (xr + f32(0.5)) / scale - f32(0.5) if lrf > 1 else np.zeros_like(xr)
        if ctm == "tf_half_pixel_for_nn":
            return (xr + f32(0.5)) / scale
        if ctm == "align_corners":
            return np.zeros_like(xr) if lrf == 1 else xr * (lof - f32(1)) / (lrf - f32(1))
        if ctm == "tf_crop_and_resize":
            if lrf > 1:
                return r0 * (lof - f32(1)) + (xr * (r1 - r0) * (lof - f32(1))) / (lrf - f32(1))
            return np.full_like(xr, f32(0.5 * float(f32(r0 + r1)) * float(lof - f32(1))))  # float sum, double rest
        if ctm == "half_pixel_symmetric":
            out_w = scale * lof
            adjustment = lrf / out_w
            offset = (lof / f32(2)) * (f32(1) - adjustment)
            return (float(offset) + (xr.astype(np.float64) + 0.5) / float(scale) - 0.5).astype(f32)
        return ((xr + f32(0.5)) / scale) - f32(0.5)  # half_pixel


def _nearest(mode: str, xo: np.ndarray, down: bool) -> np.ndarray:
    """ORT's GetNearestPixelFromOriginal (round: half away from zero, as std::round)."""
    def rnd(v):
        return np.trunc(v + np.copysign(f32(0.5), v))
    with np.errstate(invalid="ignore", over="ignore"):
        if mode == "simple":
            v = np.ceil(xo) if down else np.trunc(xo)
        elif mode == "round_prefer_ceil":
            v = rnd(xo.astype(np.float64))
        elif mode == "floor":
            v = np.floor(xo)
        elif mode == "ceil":
            v = np.ceil(xo)
        else:  # round_prefer_floor
            half = xo == np.trunc(xo) + f32(0.5)
            v = np.where(half, np.floor(xo), rnd(xo.astype(np.float64)))
    v = np.nan_to_num(v, nan=0.0, posinf=2.0 ** 62, neginf=-2.0 ** 62)
    return np.clip(v, -2.0 ** 62, 2.0 ** 62).astype(np.int64)


def resize_params(node: Node, in_shape: tuple[int, ...], x: list) -> dict:
    """Resize's output shape, per-axis float32 scales and roi, modes: as ORT 1.31 derives them (opset 10: inputs
    (X, scales), asymmetric coordinates, the old nearest rounding; opset 11+: X, roi, scales, sizes; 18+: axes,
    keep_aspect_ratio_policy)."""
    a = node.attrs
    r = len(in_shape)
    if r == 0:
        raise ValueError("Resize needs an input of rank >= 1")
    opset10 = len(node.inputs) == 2
    mode = _text(a.get("mode"), "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise ValueError(f"Resize mode {mode!r} is not supported (nearest, linear and cubic are)")
    if int(a.get("antialias", 0)):
        raise ValueError("Resize with antialias=1 is not supported")
    if int(a.get("exclude_outside", 0)) and mode != "cubic":
        raise ValueError("Resize with exclude_outside=1 is defined for mode cubic only (ORT refuses it)")
    ctm = "asymmetric" if opset10 else _text(a.get("coordinate_transformation_mode"), "half_pixel")
    if ctm not in _CTM:
        raise ValueError(f"coordinate_transformation_mode {ctm!r} is not supported")
    nearest = "simple" if opset10 else _text(a.get("nearest_mode"), "round_prefer_floor")
    if mode == "nearest" and nearest not in (*_NEAREST, "simple"):
        raise ValueError(f"nearest_mode {nearest!r} is not supported")
    policy = _text(a.get("keep_aspect_ratio_policy"), "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise ValueError(f"keep_aspect_ratio_policy {policy!r} is not supported")
    axes = [_axis(int(i), r, "Resize axis") for i in a.get("axes") or []]
    if len(set(axes)) != len(axes):
        raise ValueError(f"Resize axes {axes} repeat an axis")
    if opset10:
        roi_in, scales_in, sizes_in = None, x[1], None
    else:
        roi_in, scales_in, sizes_in = _opt(x, 1), _opt(x, 2), _opt(x, 3)
    have_scales = scales_in is not None and np.asarray(scales_in).size > 0
    have_sizes = sizes_in is not None and np.asarray(sizes_in).size > 0
    if have_scales == have_sizes:
        raise ValueError("Resize needs exactly one of scales and sizes")
    sel = axes or list(range(r))
    if have_scales:
        s = np.asarray(scales_in)
        if s.dtype != np.float32:
            raise TypeError(f"Resize scales must be float32, got {s.dtype}")
        s = s.reshape(-1)
        if s.size != len(sel):
            raise ValueError(f"Resize has {s.size} scales for {len(sel)} axes")
        scales = np.ones(r, f32)
        scales[sel] = s
        if not np.all(scales > 0):
            raise ValueError(f"Resize scales {s.tolist()} must be positive")
        out = [int(np.trunc(scales[i] * f32(in_shape[i]))) if np.isfinite(scales[i] * f32(in_shape[i]))
               else -1 for i in range(r)]
    else:
        z = _ints1(sizes_in, "sizes")
        if len(z) != len(sel):
            raise ValueError(f"Resize has {len(z)} sizes for {len(sel)} axes")
        out = list(in_shape)
        for i, v in zip(sel, z, strict=True):
            out[i] = v
        scales = np.array([f32(o) / f32(n) if n else f32(1) for o, n in zip(out, in_shape, strict=True)], f32)
        if any(n == 0 and o != 0 for o, n in zip(out, in_shape, strict=True)):
            raise ValueError("Resize of an empty axis to a non-empty one")
        if policy != "stretch":
            pick = [scales[i] for i in sel]
            p = min(pick) if policy == "not_larger" else max(pick)
            for i in range(r):
                if i in sel:
                    scales[i] = p
                    out[i] = int(np.round(np.float64(f32(p) * f32(in_shape[i]))))
                else:
                    scales[i], out[i] = f32(1), in_shape[i]
    if any(o < 0 for o in out) or math.prod(out) > 2 ** 31:
        raise ValueError(f"Resize output shape {out} is not valid")
    roi = np.concatenate([np.zeros(r, f32), np.ones(r, f32)])
    if ctm == "tf_crop_and_resize":
        rv = np.asarray(roi_in if roi_in is not None else np.zeros(0, f32)).astype(f32).reshape(-1)
        if rv.size != 2 * len(sel):
            raise ValueError(f"tf_crop_and_resize needs a roi of {2 * len(sel)} values, got {rv.size}")
        roi[sel] = rv[:len(sel)]
        roi[[r + i for i in sel]] = rv[len(sel):]
    if mode == "linear":
        ok = r in (2, 3) or (r == 4 and scales[0] == 1 and (scales[1] == 1 or scales[3] == 1)) or (
            r == 5 and scales[0] == 1 and scales[1] == 1)
        if not ok:
            raise ValueError(f"Resize linear supports 2-D/3-D inputs and 4-D/5-D inputs whose outer scales are 1 "
                             f"(ORT's rule), got scales {scales.tolist()}")
    extra = float(a.get("extrapolation_value", 0.0))
    return {"mode": mode, "ctm": ctm, "nearest": nearest, "out": tuple(out), "scales": scales, "roi": roi,
            "extrapolation": extra, "cubic_a": np.float32(a.get("cubic_coeff_a", -0.75)),
            "exclude_outside": bool(int(a.get("exclude_outside", 0)))}


def _resize_maps(p: dict, in_shape: tuple[int, ...]) -> list[np.ndarray]:
    """Per axis, the input index of each output index (-1: extrapolation), as ORT's nearest kernel maps them."""
    r = len(in_shape)
    maps = []
    for i in range(r):
        lo, lr, s = in_shape[i], p["out"][i], p["scales"][i]
        if r > 1 and s == f32(1):  # ORT: one-to-one where the scale is 1 (rank 1 always transforms)
            maps.append(np.arange(lr, dtype=np.int64))
            continue
        xo = _original(p["ctm"], np.arange(lr, dtype=f32), s, lr, lo, p["roi"][i], p["roi"][r + i])
        idx = np.clip(_nearest(p["nearest"], xo, bool(s < 1)), 0, max(lo - 1, 0))
        if p["ctm"] == "tf_crop_and_resize":
            idx = np.where((xo < 0) | (xo > f32(lo - 1)), -1, idx)
        maps.append(idx)
    return maps


def resize_nearest(v: np.ndarray, p: dict, fill) -> np.ndarray:
    """Nearest Resize of any array with parameters `p` (resize_params); `fill` where ORT extrapolates. An output
    shape equal to the input's is a copy of it, whatever the scales (ORT's Upsample BaseCompute, measured)."""
    if tuple(p["out"]) == tuple(v.shape):
        return np.array(v, copy=True)
    maps = _resize_maps(p, v.shape)
    out = v[np.ix_(*[np.maximum(m, 0) for m in maps])] if v.size else np.zeros(p["out"], v.dtype)
    out = np.array(out, v.dtype, copy=True).reshape(p["out"])
    if p["ctm"] == "tf_crop_and_resize" and out.size:
        bad = np.zeros(p["out"], bool)
        for i, m in enumerate(maps):
            sh = [1] * len(maps)
            sh[i] = -1
            bad |= (m < 0).reshape(sh)
        out[bad] = fill
    return out


def _extrapolation(value: float, dtype) -> object:
    """ORT's static_cast<T>(float extrapolation_value)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return dt.type(value)
    info = np.iinfo(dt)
    t = math.trunc(value) if math.isfinite(value) else 0
    if not info.min <= t <= info.max:
        raise ValueError(f"extrapolation_value {value} is outside the {dt} range")
    return dt.type(t)


def linear_axes(p: dict, rank: int) -> tuple[int, ...] | None:
    """The axes ORT's float linear kernels interpolate for a Resize of `rank` with parameters `p`: bilinear on
    2-D and NCHW 4-D (scales 1, 1, h, w), then NHWC 4-D (scales 1, h, w, 1: its NhwcUpsampleBilinear, the same
    float arithmetic per element, measured), trilinear on 3-D and NCDHW 5-D (scales 1, 1, d, h, w); None for the
    others (ORT refuses them)."""
    sc = p["scales"]
    if rank in (2, 3):
        return tuple(range(rank))
    if rank in (4, 5) and sc[0] == 1 and sc[1] == 1:
        return tuple(range(2, rank))
    if rank == 4 and sc[0] == 1 and sc[3] == 1:
        return (1, 2)
    return None


def linear_taps(p: dict, shape: tuple[int, ...], axis: int) -> tuple[np.ndarray, ...]:
    """ORT's per-axis linear parameters (SetupUpsampleBilinear / Trilinear): the original coordinate (the output
    index itself where the scale is 1), clamped to [0, n - 1]; i1 = min(int(x), n - 1), i2 = min(i1 + 1, n - 1);
    float32 weights d1 = |x - i1|, d2 = |x - i2| (0.5 each where i1 == i2). Returns (original, i1, i2, d1, d2)."""
    r = len(shape)
    lo, lr, s = shape[axis], p["out"][axis], p["scales"][axis]
    if s == f32(1):
        xo = np.arange(lr, dtype=f32)
    else:
        xo = _original(p["ctm"], np.arange(lr, dtype=f32), s, lr, lo, p["roi"][axis], p["roi"][r + axis])
    with np.errstate(invalid="ignore"):
        xc = np.maximum(f32(0), np.minimum(xo, f32(lo - 1)))
        i1 = np.minimum(xc.astype(np.int64), lo - 1)
    i2 = np.minimum(i1 + 1, lo - 1)
    d1, d2 = np.abs(xc - i1.astype(f32)), np.abs(xc - i2.astype(f32))
    same = i1 == i2
    return xo, i1, i2, np.where(same, f32(0.5), d1).astype(f32), np.where(same, f32(0.5), d2).astype(f32)


def resize_linear(v: np.ndarray, p: dict) -> np.ndarray:
    """Linear Resize as ORT's UpsampleBilinear / UpsampleTrilinear compute it (`linear_axes`; per-axis weights
    `linear_taps`): over the 2**n corners, outer axis first and the i1 side before i2, the weight product taken
    from the innermost axis outwards (dx * dy * dz) times the corner's value, the terms added left to right in
    float32 (d2x*d2y*X11 + d1x*d2y*X21 + d2x*d1y*X12 + d1x*d1y*X22 in 2-D); tf_crop_and_resize: the
    extrapolation value where an original coordinate lies outside [0, n - 1]. Cast to the input's type
    (uint8/int8: truncated, ORT's static_cast). 8-bit NHWC (ORT's integer kernel) and the others: ValueError."""
    if v.dtype not in (np.float32, np.uint8, np.int8):
        raise ValueError(f"Resize linear on {v.dtype} tensors is not supported")
    if tuple(p["out"]) == tuple(v.shape):  # ORT copies the input (as resize_nearest)
        return np.array(v, copy=True)
    dtype, v = v.dtype, v.astype(np.float32)
    r = v.ndim
    axes = linear_axes(p, r)
    trailing = axes is not None and axes == tuple(range(r - len(axes), r))
    if axes is None or (dtype != np.float32 and (len(axes) != 2 or not trailing)):
        raise ValueError(f"Resize linear is supported on 2-D/3-D tensors and 4-D/5-D ones whose outer scales are 1 "
                         f"or NHWC (float32; 8-bit: bilinear 2-D/NCHW only), got rank {r} with scales "
                         f"{p['scales'].tolist()}")
    n = len(axes)
    taps = [linear_taps(p, v.shape, i) for i in axes]
    perm = [i for i in range(r) if i not in axes] + list(axes)  # the interpolated axes last (NHWC: C moves)
    v = v.transpose(perm)
    lead = v.shape[:r - n]
    sel = v.reshape(-1, *v.shape[r - n:])
    out = None
    with np.errstate(invalid="ignore", over="ignore"):
        for corner in itertools.product((0, 1), repeat=n):  # outer axis first, i1 before i2
            idx = [slice(None)]
            w = None
            for j in range(n):
                t, sh = taps[j], [1] * n
                sh[j] = -1
                idx.append((t[1] if corner[j] == 0 else t[2]).reshape(sh))
            for j in reversed(range(n)):  # weights from the innermost axis outwards; corner i1 takes d2
                t, sh = taps[j], [1] * n
                sh[j] = -1
                wj = (t[4] if corner[j] == 0 else t[3]).reshape(sh)
                w = wj if w is None else w * wj
            term = w * sel[tuple(idx)]
            out = term if out is None else out + term
        if p["ctm"] == "tf_crop_and_resize":
            bad = np.zeros(out.shape[1:], bool)
            for j in range(n):
                sh = [1] * n
                sh[j] = -1
                xo = taps[j][0]
                bad = bad | ((xo < 0) | (xo > f32(v.shape[r - n + j] - 1))).reshape(sh)
            out = np.where(bad, f32(p["extrapolation"]), out)
    # 8-bit: ORT's static_cast<T> of the float32 sum (truncation toward zero; the sum lies in T's range)
    y = out.astype(f32).astype(dtype).reshape(*lead, *out.shape[1:])
    return np.ascontiguousarray(y.transpose(np.argsort(perm)))


@_op("Resize")
def _resize(node: Node, x: list, memo: dict) -> list:
    """ONNX Resize as ORT 1.31 computes it: mode nearest on any tensor (every coordinate_transformation_mode and
    nearest_mode, axes, keep_aspect_ratio_policy); mode linear as `resize_linear`; cubic as
    vkinfer/model/resize_cubic.py's `resize_cubic`."""
    v = x[0]
    p = resize_params(node, v.shape, x)
    if p["mode"] == "linear":
        return [resize_linear(v, p)]
    if p["mode"] == "cubic":
        from .resize_cubic import resize_cubic

        return [resize_cubic(v, p)]
    return [resize_nearest(v, p, _extrapolation(p["extrapolation"], v.dtype))]


# float32 AveragePool, ORT's loops (vkinfer/reference/float_average_pool.py), registered here with the other
# spatial resampling op: an OpDef would file it twice in vkinfer/dispatch/costs.py, which lists it as a pool.
_op("AveragePool")(float_average_pool.kernel)
