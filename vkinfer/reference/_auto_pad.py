"""auto_pad (NOTSET, VALID, SAME_UPPER, SAME_LOWER) as ONNX Runtime 1.31 resolves it into explicit pads: the one
rule every convolution and pool of vkinfer uses, and the pass that writes the resolved pads into a graph.

ORT (core/providers/cpu/nn/conv_attributes.h ComputePadAndOutputShape, pool_attributes.h ComputeSizePadDilations),
per spatial axis of input size `n`, kernel `k`, stride `s`, dilation `d`:
    VALID:       head = tail = 0
    SAME_*:      need = (ceil(n / s) - 1) * s + k - n          (the undilated k, also for pools with d > 1)
                 SAME_UPPER: head = need / 2,  SAME_LOWER: head = (need + 1) / 2   (C++ division: toward zero)
                 tail = need - head
                 (a convolution's negative `need` splits as need + 1 would: measured, see `pads`)
    NOTSET:      the node's own pads
Convolutions refuse SAME with a dilation other than 1 (ORT: "Dilation not supported for AutoPadType::SAME_UPPER
or AutoPadType::SAME_LOWER"). `need` is negative when the stride exceeds the kernel (a 1x1 convolution of stride 2
on an even size: need = -1, tail = -1); ORT then starts window o at o * s - head (a negative head shifts the
windows right) and sizes the output from n + head + tail. The references implement exactly that (a convolution
crops the input, `crop`; pools start windows at o * s - head and clip them at n); the devices take only pads >= 0
(`resolve_graph`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

MODES = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")
# The ops with an auto_pad attribute vkinfer runs, and the input holding their weights (None: a pool, whose kernel
# is its kernel_shape attribute).
CONV_OPS = {"QLinearConv": 3, "vkinfer:QLinearConvClamp": 3, "ConvInteger": 1, "Conv": 1}
POOL_OPS = ("MaxPool", "AveragePool", "LpPool", "com.microsoft:QLinearAveragePool")
_INPUT_BYTES = 2 << 30  # vkinfer/model/sizes.py's default per-tensor limit (this layer does not import the model's)


def mode(v) -> str:
    """The auto_pad attribute (bytes as ONNX stores it, or str; None or empty: NOTSET, as ORT's StringToAutoPadType
    reads it) as a str; ValueError for others."""
    if v is None or v in (b"", ""):
        return "NOTSET"
    s = v.decode(errors="replace") if isinstance(v, bytes | bytearray) else v
    if not isinstance(s, str) or s not in MODES:
        raise ValueError(f"auto_pad must be one of {', '.join(MODES)}, got {v!r}")
    return s


def node_mode(node) -> str:
    """`mode` of a node's auto_pad attribute."""
    return mode(node.attrs.get("auto_pad"))


def _toward_zero_half(v: int) -> int:
    return v // 2 if v >= 0 else -((-v) // 2)


def pads(auto_pad, sizes, kernel, strides, dilations, explicit, *, pool: bool) -> list[int]:
    """The pads (heads..., tails...) ORT uses for input spatial `sizes`; they may be negative (see the module doc).
    `explicit`: the node's pads (NOTSET; None: zeros). `pool`: ORT's pool rule (SAME with any dilation)."""
    m, r = mode(auto_pad), len(sizes)
    if m == "NOTSET":
        return [int(p) for p in explicit] if explicit is not None else [0] * (2 * r)
    if m == "VALID":
        return [0] * (2 * r)
    heads, tails = [], []
    for n, k, s, d in zip(sizes, kernel, strides, dilations, strict=True):
        n, k, s, d = int(n), int(k), int(s), int(d)
        if s < 1:
            raise ValueError(f"strides must be >= 1, got {list(strides)}")
        if d != 1 and not pool:
            raise ValueError(f"auto_pad {m} with dilations {list(dilations)}: ONNX Runtime supports only dilation 1 "
                             f"with SAME_UPPER or SAME_LOWER")
        need = (-(-n // s) - 1) * s + k - n
        # A convolution's negative total splits as if it were one larger: measured on ORT 1.31 (Conv, QLinearConv
        # and ConvInteger alike, need -1 to -5, both modes; tests/ops/test_conv_auto_pad.py), where the formula of
        # conv_attributes.h would put window o at o * s - need / 2. Pools follow their formula (measured too).
        split = need + 1 if need < 0 and not pool else need
        head = _toward_zero_half(split + 1 if m == "SAME_LOWER" else split)
        heads.append(head)
        tails.append(need - head)
    return heads + tails


def crop(x: np.ndarray, p) -> tuple[np.ndarray, list[int]]:
    """(x, pads) with every negative pad turned into a crop of x's spatial axes (axes 2...) and pads >= 0: the same
    windows a convolution reads (a window never reaches past n + tail, so the cropped tail is never read)."""
    r = len(p) // 2
    if min(p, default=0) >= 0:
        return x, list(p)
    sl = [slice(None), slice(None)]
    for i in range(r):
        n = x.shape[2 + i]
        sl.append(slice(max(0, -p[i]), n - max(0, -p[r + i])))
    return x[tuple(sl)], [max(0, v) for v in p]


def conv_pads(node, x_shape, w_shape) -> list[int]:
    """The pads of a convolution node (auto_pad resolved; may be negative) for input and weight shapes."""
    a, r = node.attrs, len(x_shape) - 2
    ones = [1] * r
    return pads(a.get("auto_pad"), x_shape[2:], w_shape[2:], a.get("strides") or ones, a.get("dilations") or ones,
                a.get("pads"), pool=False)


def pool_pads(node, x_shape) -> list[int]:
    """The pads of a pool node (auto_pad resolved; may be negative) for an input shape."""
    a = node.attrs
    k = [int(v) for v in a["kernel_shape"]]
    ones = [1] * len(k)
    return pads(a.get("auto_pad"), x_shape[2:], k, a.get("strides") or ones, a.get("dilations") or ones,
                a.get("pads"), pool=True)


def _explicit(node, shape: Callable[[str], tuple | None]) -> list[int] | None:
    """The node's pads as a device can take them (all >= 0, the same windows and output size), else None."""
    x = shape(node.inputs[0])
    if x is None or len(x) < 3:
        return None
    if node.op in CONV_OPS:
        w = shape(node.inputs[CONV_OPS[node.op]]) if len(node.inputs) > CONV_OPS[node.op] else None
        if w is None or len(w) != len(x):
            return None
        p = conv_pads(node, x, w)
    else:
        p = pool_pads(node, x)
    r = len(p) // 2
    if min(p[:r], default=0) < 0:
        return None  # shifted windows: only the reference (the host) runs them
    if min(p[r:], default=0) >= 0:
        return p
    a = node.attrs
    if node.op not in CONV_OPS:
        # A pool's negative tail: its windows start at o * s - head and are clipped to the input (not to n + tail),
        # so a tail of 0 gives the same windows when it gives the same output size; not in ceil mode, where the
        # last window may run past n + tail (a float AveragePool counts its padding from n + tail).
        from ._pool_shape import pool_geometry

        if int(a.get("ceil_mode", 0)):
            return None
        k, st, di = a["kernel_shape"], a.get("strides"), a.get("dilations")
        theirs = pool_geometry(x, k, st, None, di, 0, a.get("auto_pad"))[4]
        ours = [max(0, v) for v in p]
        return ours if pool_geometry(x, k, st, ours, di, 0)[4] == theirs else None
    # A convolution's negative tail: the windows end before n + tail (the output is sized from it), so a tail of
    # 0 changes nothing as long as the output size stays the same.
    k = [int(v) for v in (a.get("kernel_shape") or shape(node.inputs[CONV_OPS[node.op]])[2:])]
    st = [int(v) for v in a.get("strides") or [1] * r]
    di = [int(v) for v in a.get("dilations") or [1] * r]
    for i in range(r):
        if p[r + i] < 0:
            span = (k[i] - 1) * di[i] + 1
            ours, theirs = x[2 + i] + p[i] - span, x[2 + i] + p[i] + p[r + i] - span
            if theirs < 0 or ours // st[i] != theirs // st[i]:
                return None
            p[r + i] = 0
    return p


def resolve_graph(g, trace: Callable):
    """`g` with every convolution and pool that has auto_pad VALID or SAME_* given explicit pads instead (auto_pad
    NOTSET), so that every device sees explicit pads. Needs static graph input shapes (their declared shapes are
    traced with zeros: `trace(g, feed)` -> {tensor: (shape, dtype)}); otherwise, or where the trace fails or a pad
    would be negative at the head, the nodes keep auto_pad and their devices decide (the references resolve it
    themselves). Node names, inputs and outputs are kept."""
    todo = []
    for n in g.nodes:
        if n.op in CONV_OPS or n.op in POOL_OPS:
            try:
                if node_mode(n) != "NOTSET":
                    todo.append(n)
            except ValueError as e:
                raise ValueError(f"node {n.name!r} ({n.op}): {e}") from None
    if not todo:
        return g
    if any(t.shape is None or not all(isinstance(d, int) and d > 0 for d in t.shape) for t in g.inputs):
        return g
    # Sizes before memory: an input over the default per-tensor limit (2 GiB) is not made here (numpy's zeros take
    # its address space); the plan's trace refuses it by name, under the session's own limits.
    if any(math.prod(t.shape) * np.dtype(t.dtype).itemsize > _INPUT_BYTES for t in g.inputs):
        return g
    feed = {t.name: np.zeros(t.shape, t.dtype) for t in g.inputs}
    try:
        info = trace(g, feed)
    except (ValueError, TypeError):
        return g  # the plan's trace reports it, naming the node

    def shape(name: str):
        if name in g.consts:
            return tuple(np.shape(g.consts[name]))
        return tuple(info[name][0]) if name in info else None

    new = {}
    for n in todo:
        try:
            p = _explicit(n, shape)
        except (ValueError, TypeError, KeyError):
            continue  # e.g. SAME with dilation on a convolution: its kernel raises the node's error
        if p is not None and n.inputs[0] in info and info[n.inputs[0]][1].kind == "f" and any(p):
            # A float op keeps its auto_pad (its host kernel resolves it, as ORT does), and the device lowerings
            # read the pads from "_pads" (max_pool.pool_attrs; the graph's input shapes are static, so they hold
            # for every run).
            new[id(n)] = dataclasses.replace(n, attrs={**n.attrs, "_pads": p})
            continue
        if p is not None:
            attrs = {k: v for k, v in n.attrs.items() if k != "_proto"}  # the host's float ops rebuild it
            attrs.update(auto_pad="NOTSET", pads=p)
            new[id(n)] = dataclasses.replace(n, attrs=attrs)
    return dataclasses.replace(g, nodes=[new.get(id(n), n) for n in g.nodes]) if new else g
