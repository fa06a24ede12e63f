"""Cubic Resize of float32 tensors as ONNX Runtime 1.31's ResizeBiCubic computes it (the interpreter's kernel;
vkinfer/cpu/float_resize_cubic.py runs the same arithmetic natively). 2-D and NCHW 4-D (scales 1, 1, h, w), ORT's
only cubic forms. Per axis (the coordinate the output index itself where the scale is 1, else
vkinfer/model/resize.py's `_original`): i = floor(x), s = x - i and Keys' four float32 coefficients of s
(GetCubicCoeffs, cubic_coeff_a = a):
    c0 = ((a*(s+1) - 5a)*(s+1) + 8a)*(s+1) - 4a      c1 = ((a+2)*s - (a+3))*s*s + 1
    c2 = ((a+2)*(1-s) - (a+3))*(1-s)*(1-s) + 1      c3 = ((a*(2-s) - 5a)*(2-s) + 8a)*(2-s) - 4a
for the taps i-1 .. i+2, clamped to the input; exclude_outside zeroes the taps outside and divides by the sum of
the kept ones (+0 + c0 + c1 + ...), else the sum is 1. An output is
    sum over rows k (from +0) of (r_k * cy_k) / sum_y,  r_k = sum over columns j (from +0) of (cx_j / sum_x) * X[k, j]
in float32, in that order; tf_crop_and_resize: the extrapolation value where an original coordinate lies outside
[0, n - 1]."""

from __future__ import annotations

import numpy as np

f32 = np.float32


def cubic_coeffs(s: np.ndarray, a: np.float32) -> np.ndarray:
    """ORT's GetCubicCoeffs(|s|, a) for each s: (len(s), 4) float32."""
    s = np.abs(np.asarray(s, f32))
    one, two = f32(1), f32(2)
    t, u, w = s + one, one - s, two - s
    a5, a8, a4, a2, a3 = f32(5) * a, f32(8) * a, f32(4) * a, a + two, a + f32(3)
    c0 = ((a * t - a5) * t + a8) * t - a4
    c1 = ((a2 * s - a3) * s) * s + one
    c2 = ((a2 * u - a3) * u) * u + one
    c3 = ((a * w - a5) * w + a8) * w - a4
    return np.stack([c0, c1, c2, c3], axis=1).astype(f32)


def cubic_taps(p: dict, shape: tuple[int, ...], axis: int) -> tuple[np.ndarray, ...]:
    """(original coordinate, 4 clamped tap indices, 4 coefficients (zeroed outside with exclude_outside), their
    sum) of one axis, as ORT's ResizeBiCubic sets them up."""
    from .resize import _original

    r = len(shape)
    lo, lr, sc = shape[axis], p["out"][axis], p["scales"][axis]
    if sc == f32(1):
        xo = np.arange(lr, dtype=f32)
    else:
        xo = _original(p["ctm"], np.arange(lr, dtype=f32), sc, lr, lo, p["roi"][axis], p["roi"][r + axis])
    with np.errstate(invalid="ignore", over="ignore"):
        xi = np.nan_to_num(np.floor(xo), nan=0.0, posinf=2.0 ** 40, neginf=-2.0 ** 40).astype(np.int64)
        s = (xo - xi.astype(f32)).astype(f32)
    c = cubic_coeffs(s, f32(p["cubic_a"]))
    pos = xi[:, None] - 1 + np.arange(4)[None, :]
    if p["exclude_outside"]:
        c = np.where((pos < 0) | (pos >= lo), f32(0), c).astype(f32)
        total = np.zeros(lr, f32)
        for j in range(4):
            total = total + c[:, j]
    else:
        total = np.ones(lr, f32)
    return xo, np.clip(pos, 0, lo - 1), c, total


def resize_cubic(v: np.ndarray, p: dict) -> np.ndarray:
    """Cubic Resize of a float32 2-D or NCHW 4-D tensor (module docstring)."""
    if v.dtype != np.float32:
        raise ValueError(f"Resize cubic on {v.dtype} tensors is not supported (ORT's cubic kernel is float32)")
    r = v.ndim
    if not (r == 2 or (r == 4 and p["scales"][0] == 1 and p["scales"][1] == 1)):
        raise ValueError(f"Resize cubic takes 2-D and NCHW 4-D tensors (scales 1, 1, h, w; ORT's rule), got rank "
                         f"{r} with scales {p['scales'].tolist()}")
    if tuple(p["out"]) == tuple(v.shape):  # ORT copies the input
        return np.array(v, copy=True)
    yo, yi, cy, sy = cubic_taps(p, v.shape, r - 2)
    xo, xi, cx, sx = cubic_taps(p, v.shape, r - 1)
    wx = (cx / sx[:, None]).astype(f32)
    sel = v.reshape(-1, v.shape[-2], v.shape[-1])
    with np.errstate(invalid="ignore", over="ignore"):
        rows = np.zeros((sel.shape[0], v.shape[-2], len(xo)), f32)  # every input row interpolated along x
        for j in range(4):
            rows = rows + wx[None, None, :, j] * sel[:, :, xi[:, j]]
        out = np.zeros((sel.shape[0], len(yo), len(xo)), f32)
        for k in range(4):
            out = out + (rows[:, yi[:, k], :] * cy[None, :, k, None]) / sy[None, :, None]
        if p["ctm"] == "tf_crop_and_resize":
            bad = ((yo < 0) | (yo > f32(v.shape[-2] - 1)))[:, None] | ((xo < 0) | (xo > f32(v.shape[-1] - 1)))[None]
            out = np.where(bad[None], f32(p["extrapolation"]), out)
    return np.ascontiguousarray(out.astype(f32)).reshape(*v.shape[:-2], len(yo), len(xo))
