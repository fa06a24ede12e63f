"""ONNX Pad on any numpy tensor (vkinfer uses it on uint8/int8 data), equal to ONNX Runtime 1.31's Pad.

pads = [x1_begin, x2_begin, ..., x1_end, x2_end] over `axes` (default: every axis, negative axes count from
the end). Negative pads remove elements first; the remaining tensor is then padded with `constant_value`
(mode "constant"), the mirror image without the edge element ("reflect"), the edge element ("edge") or the
tensor's other end ("wrap"). Pad only moves values, so it is exact for every type.
"""

from __future__ import annotations

import numpy as np

MODES = ("constant", "reflect", "edge", "wrap")


def pad(data: np.ndarray, pads, constant_value=None, axes=None, mode: str = "constant") -> np.ndarray:
    if not isinstance(data, np.ndarray):
        raise TypeError(f"data must be a numpy array, got {type(data).__name__}")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    r = data.ndim
    if axes is None:
        axes = list(range(r))
    else:
        axes = [int(a) for a in np.asarray(axes).reshape(-1)]
        if any(not -r <= a < r for a in axes):
            raise ValueError(f"axes {axes} out of range for a {r}-D tensor")
        axes = [a % r for a in axes]
        if len(set(axes)) != len(axes):
            raise ValueError(f"axes {axes} has repeated entries")
    p = [int(v) for v in np.asarray(pads).reshape(-1)]
    if len(p) != 2 * len(axes):
        raise ValueError(f"pads has {len(p)} entries; expected 2 * {len(axes)}")
    begin, end = [0] * r, [0] * r
    for i, a in enumerate(axes):
        begin[a], end[a] = p[i], p[i + len(axes)]
    if any(data.shape[a] + begin[a] + end[a] < 0 for a in range(r)):
        raise ValueError(f"pads {p} give a negative output dimension for shape {data.shape}")
    width = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end, strict=True)]
    if mode == "constant":
        # Pad, then remove what negative pads remove (this may eat into the other side's padding).
        if constant_value is None:
            value = data.dtype.type(0)
        else:
            cv = np.asarray(constant_value)
            if cv.size != 1:
                raise ValueError(f"constant_value must be a scalar, got shape {cv.shape}")
            value = cv.reshape(()).astype(data.dtype)
        y = np.pad(data, width, mode="constant", constant_values=value)
        return y[tuple(slice(max(-b, 0), n - max(-e, 0)) for n, b, e in zip(y.shape, begin, end, strict=True))]
    # Other modes: negative pads crop first; the rest is padded from what is left, which must not be empty.
    if any(n + min(b, 0) + min(e, 0) <= 0 for n, b, e in zip(data.shape, begin, end, strict=True)):
        raise ValueError(f"{mode} padding needs a non-empty tensor after negative pads {p} crop shape {data.shape}")
    x = data[tuple(slice(max(-b, 0), n - max(-e, 0)) for n, b, e in zip(data.shape, begin, end, strict=True))]
    for a, (b, e) in enumerate(width):
        if mode == "reflect" and max(b, e) >= x.shape[a]:
            raise ValueError(f"reflect pads ({b}, {e}) must be smaller than axis {a}'s size {x.shape[a]}")
    return np.pad(x, width, mode=mode)
