"""float32 LayerNormalization and vkinfer:LayerNormChain in the native CPU graph (cpu_fallback/src/ops/layer_norm.c),
bit for bit vkinfer/reference/layer_normalization.py.

LayerNormalization with constant Scale (and B): ORT's row path (Welford below 8 elements, MLAS's AVX2 kernel from
8) where the parameters are X.shape[axis:] in size and do not vary along the outer axes; its float64 path where
they broadcast inside X.shape[axis:] (expanded to one row here). Parameters that vary along the outer axes, the
Mean / InvStdDev outputs, and non-constant parameters stay on the host (its kernel is the same definition).

vkinfer:LayerNormChain (vkinfer/model/layer_norm_fuse.py): over trailing axes, eps a constant, gamma/beta constants
that broadcast to X's shape without varying along the outer axes; other forms stay on the host."""

from __future__ import annotations

import numpy as np

from ..model.lowering import Layer, lower
from ..reference.layer_normalization import CHAIN, chain_parts, ort_path

_F32 = np.dtype(np.float32)
_ORT, _DOUBLE, _CHAIN = 0, 1, 2


def _floats(ctx, x: str, y: str) -> bool:
    return x in ctx.info and y in ctx.info and ctx.dtype(x) == _F32 and ctx.dtype(y) == _F32


def _inner(p: np.ndarray, shape: tuple[int, ...], start: int, what: str) -> np.ndarray:
    """`p` broadcast to X's `shape`, one row: shape[start:] flattened; ValueError when it varies before `start`."""
    p = np.asarray(p, np.float32)
    rank = len(shape)
    if p.ndim > rank:
        raise ValueError(f"{what} of rank {p.ndim} is past X's rank {rank} (the host runs it)")
    dims = (1,) * (rank - p.ndim) + p.shape
    if any(d != 1 for d in dims[:start]):
        raise ValueError(f"{what} varies along the outer axes (the host runs it)")
    row = np.broadcast_to(p.reshape(dims[start:]), shape[start:])
    return np.ascontiguousarray(row.reshape(-1), np.float32)


def _const(ctx, name: str, what: str) -> np.ndarray | None:
    if not name:
        return None
    if name not in ctx.g.consts:
        raise ValueError(f"{what} is not a constant (the host runs it)")
    return np.asarray(ctx.g.consts[name])


@lower("cpu", "LayerNormalization")
def lower_layer_normalization(ctx, node, backend):
    """ORT 1.31's LayerNormalization as one layer_norm operator (module docstring)."""
    x, y = node.inputs[0], node.outputs[0]
    if not _floats(ctx, x, y) or int(node.attrs.get("stash_type", 1)) != 1:
        return None
    if any(node.outputs[1:]):
        raise ValueError("LayerNormalization with its Mean / InvStdDev outputs (the host runs it)")
    shape = tuple(int(s) for s in ctx.shape(x))
    if not shape or 0 in shape:
        return None
    rank = len(shape)
    axis = int(node.attrs.get("axis", -1))
    if not -rank <= axis < rank:
        return None  # the kernel's ValueError on the host names it
    axis %= rank
    scale = _const(ctx, node.inputs[1], "Scale")
    bias = _const(ctx, node.inputs[2] if len(node.inputs) > 2 else "", "B")
    if scale.dtype != _F32 or (bias is not None and bias.dtype != _F32):
        return None
    path = ort_path(shape, scale.shape, None if bias is None else bias.shape, axis)
    mode = _DOUBLE if path == "double" else _ORT
    s = _inner(scale, shape, axis, "Scale")
    b = None if bias is None else _inner(bias, shape, axis, "B")
    rows, n = int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))
    eps = np.float32(float(node.attrs.get("epsilon", 1e-5)))

    def emit(g, refs, out, scratch):
        g.add("layer_norm", mode, rows, n, eps, s, b, 0, refs[0], out)
    return Layer(node, [x], y, emit)


@lower("cpu", CHAIN)
def lower_layer_norm_chain(ctx, node, backend):
    """The fused layer-norm chain as one layer_norm operator (mode 2), the unfused ops' bits."""
    x, y = node.inputs[0], node.outputs[0]
    if not _floats(ctx, x, y):
        return None
    shape = tuple(int(s) for s in ctx.shape(x))
    if not shape or 0 in shape or tuple(ctx.shape(y)) != shape:
        return None
    rank = len(shape)
    axes, eps_first, gamma_first, beta_first = chain_parts(node)
    norm = sorted({a % rank for a in axes if -rank <= a < rank})
    if len(norm) != len(axes) or norm != list(range(rank - len(norm), rank)):
        raise ValueError(f"layer-norm chain over axes {axes} of rank {rank}: not the trailing axes (the host runs it)")
    eps = _const(ctx, node.inputs[1], "eps")
    if eps.dtype != _F32 or eps.size != 1:
        return None
    gamma = _const(ctx, node.inputs[2] if len(node.inputs) > 2 else "", "gamma")
    beta = _const(ctx, node.inputs[3] if len(node.inputs) > 3 else "", "beta")
    if any(p is not None and p.dtype != _F32 for p in (gamma, beta)):
        return None
    start = rank - len(norm)
    g_row = None if gamma is None else _inner(gamma, shape, start, "gamma")
    b_row = None if beta is None else _inner(beta, shape, start, "beta")
    rows, n = int(np.prod(shape[:start], dtype=np.int64)), int(np.prod(shape[start:], dtype=np.int64))
    e = np.float32(eps.reshape(()))
    flags = int(eps_first) | int(gamma_first) << 1 | int(beta_first) << 2

    def emit(g, refs, out, scratch):
        g.add("layer_norm", _CHAIN, rows, n, e, g_row, b_row, flags, refs[0], out)
    return Layer(node, [x], y, emit)
