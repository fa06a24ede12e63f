"""float32 linear Resize (bilinear on 2-D, NCHW and NHWC 4-D; trilinear on 3-D and NCDHW 5-D) in the native CPU
graph with ONNX Runtime 1.31's arithmetic (cpu_fallback/src/ops/float_resize.c; the taps and float32 weights are
vkinfer/model/resize.py's `linear_taps`, the interpolation order its `resize_linear`); an output shape equal to
the input's is a copy (ORT copies the input). Nearest float Resize is an element gather (vkinfer/cpu/float_moves.py:
None here). Cubic Resize (2-D, NCHW) is ORT's ResizeBiCubic (cpu_fallback/src/ops/float_resize_cubic.c,
vkinfer/model/resize_cubic.py). Antialias and parameters that are not constant stay on the host, with the reason."""

from __future__ import annotations

import math

import numpy as np

from ..layout import u32
from ..model.lowering import Layer, lower
from ..model.resize import linear_axes, linear_taps, resize_params
from ..model.resize_cubic import cubic_taps


def resize_plan(node, shape: tuple[int, ...], consts: list) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, float,
                                                                        tuple[int, ...]]:
    """(slices, dims, taps, weights, extrapolation, output shape) of ops/float_resize.c for a linear float
    Resize of an input of `shape` (consts: the node's inputs, None for the data input); ValueError for what it
    does not take."""
    p = resize_params(node, shape, [None, *consts[1:]])
    axes = linear_axes(p, len(shape))
    if axes is None:
        raise ValueError(f"Resize linear of rank {len(shape)} with scales {p['scales'].tolist()} (ORT refuses it)")
    inner = math.prod(shape[axes[-1] + 1:])  # NHWC: the channels follow each position
    dims, taps, weights = [len(axes), inner], [], []
    for a in axes:
        xo, i1, i2, d1, d2 = linear_taps(p, shape, a)
        if p["ctm"] == "tf_crop_and_resize":
            out = (xo < 0) | (xo > np.float32(shape[a] - 1))
        else:
            out = np.zeros(len(xo), bool)
        dims += [shape[a], p["out"][a]]
        taps.append(np.stack([i1, i2, out.astype(np.int64)], axis=1).reshape(-1))
        weights.append(np.stack([d1, d2], axis=1).reshape(-1))
    nc = math.prod(shape[:axes[0]])
    return (nc, u32(dims), u32(np.concatenate(taps)), np.ascontiguousarray(np.concatenate(weights), np.float32),
            float(np.float32(p["extrapolation"])), tuple(p["out"]))


def cubic_plan(node, shape: tuple[int, ...], consts: list) -> tuple[int, np.ndarray, np.ndarray, np.ndarray, float,
                                                                      tuple[int, ...]]:
    """(slices, dims, taps, weights, extrapolation, output shape) of ops/float_resize_cubic.c for a cubic float
    Resize (2-D or NCHW 4-D) of an input of `shape`; ValueError for what ORT refuses."""
    p = resize_params(node, shape, [None, *consts[1:]])
    r = len(shape)
    if not (r == 2 or (r == 4 and p["scales"][0] == 1 and p["scales"][1] == 1)):
        raise ValueError(f"Resize cubic of rank {r} with scales {p['scales'].tolist()} (ORT takes 2-D and NCHW)")
    taps, weights = [], []
    for k, a in enumerate((r - 2, r - 1)):
        xo, idx, c, total = cubic_taps(p, shape, a)
        if p["ctm"] == "tf_crop_and_resize":
            out = (xo < 0) | (xo > np.float32(shape[a] - 1))
        else:
            out = np.zeros(len(xo), bool)
        taps.append(np.concatenate([idx, out.astype(np.int64)[:, None]], axis=1).reshape(-1))
        if k == 0:
            weights.append(np.concatenate([c, total[:, None]], axis=1).reshape(-1))
        else:
            weights.append((c / total[:, None]).astype(np.float32).reshape(-1))
    dims = u32([shape[-2], shape[-1], p["out"][-2], p["out"][-1]])
    return (math.prod(shape[:-2]), dims, u32(np.concatenate(taps)),
            np.ascontiguousarray(np.concatenate(weights), np.float32), float(np.float32(p["extrapolation"])),
            tuple(p["out"]))


@lower("cpu", "Resize")
def lower_float_resize(ctx, node, backend):
    """A float32 linear (cubic) Resize with constant roi/scales/sizes as one ops/float_resize.c
    (float_resize_cubic.c) node."""
    x, y = node.inputs[0], node.outputs[0] if node.outputs else ""
    if not x or not y or x not in ctx.info or np.dtype(ctx.dtype(x)) != np.float32:
        return None
    mode = node.attrs.get("mode", "nearest")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode == "nearest":
        return None  # an element gather (float_moves.py)
    if mode not in ("linear", "cubic"):
        raise ValueError(f"Resize mode {mode!r} is not run natively")
    shape = tuple(ctx.shape(x))
    if min(shape, default=0) == 0:
        return None  # nothing to compute
    if not all(ctx.const(t) for t in node.inputs[1:]):
        raise ValueError("Resize with roi/scales/sizes that are not constant (the host runs it)")
    if tuple(ctx.shape(y)) == shape:  # ORT copies the input whatever the scales: one memcpy (ops/transpose.c)
        count = 4 * math.prod(shape)
        if count >= 2 ** 32:
            raise ValueError("Resize: a copy past the copy's 32-bit size (the host runs it)")

        def emit_copy(g, refs, out_ref, scratch):
            g.add("transpose", 1, u32([count]), u32([0]), 1, 0, refs[0], out_ref)
        return Layer(node, [x], y, emit_copy)
    consts = [None] + [ctx.g.consts.get(t) if t else None for t in node.inputs[1:]]
    op = "float_resize" if mode == "linear" else "float_resize_cubic"
    nc, dims, taps, weights, fill, out = (resize_plan if mode == "linear" else cubic_plan)(node, shape, consts)
    if tuple(out) != tuple(ctx.shape(y)):
        raise ValueError(f"Resize: the traced output shape {list(ctx.shape(y))} is not ONNX Runtime's {list(out)}")
    if max(max(shape), max(out)) >= 2 ** 32:
        raise ValueError("Resize: a size past 32 bits (the host runs it)")

    def emit(g, refs, out_ref, scratch):
        g.add(op, nc, dims, taps, weights, fill, refs[0], out_ref)
    return Layer(node, [x], y, emit)
