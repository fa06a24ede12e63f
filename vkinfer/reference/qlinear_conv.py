"""QLinearConv, the readable definition (ONNX semantics, ONNX Runtime's requantization).

acc[n, m, oh, ow] = bias[m] + sum_{c in group(m), kh, kw} (x[n, c, ih, iw] - x_zp) * (w[m, c, kh, kw] - w_zp[m])
with padding contributing zero real value, accumulated in int32; then requantize().
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import _auto_pad
from ._opdef import OpDef, attr, cached_spec, check_auto_pad, ints
from .requant import requantize

# Float64 scratch one tile of output may take (its padded input slice, tap panel and accumulator): 64 MiB. A model's
# layer (224x224, 64 channels: 25 MB) is one tile, as before; a legal but huge output (a fuzzed 1x8x8x1048583 one:
# 21 s and 2.2 GB computed whole) is computed tile by tile, and its windows that read only padding not at all.
TILE_BYTES = 64 << 20


def touched(n: int, head: int, k: int, stride: int, dilation: int, n_out: int) -> tuple[int, int]:
    """[lo, hi) of the output positions along one axis (input size `n`, head pad `head`, kernel `k`) whose window
    reads an input element; the others read padding only, which is zero once the zero point is subtracted."""
    lo = max(0, -(-(head - (k - 1) * dilation) // stride))  # o * stride + (k - 1) * dilation >= head
    hi = min(n_out, -(-(head + n) // stride))  # o * stride < head + n
    return lo, max(lo, hi)


def _tile(s, wi: np.ndarray, hs: tuple[int, int], ws: tuple[int, int]) -> np.ndarray:
    """float64 sums (N, G, th, tw, M/G) of output rows hs[0]:hs[1], columns ws[0]:ws[1] (no bias), from `wi`
    (G, M/G, C/G, kH, kW; w less its zero points): the slice of x those windows read, less its zero point, padded
    on its own (the same windows, so the same exact sums)."""
    n, c, h, w = s.x.shape
    g, mg, cg, kh, kw = wi.shape
    (sh, sw), (dh, dw), (pt, pl, _, _) = s.strides, s.dilations, s.pads
    th, tw = hs[1] - hs[0], ws[1] - ws[0]
    rows = (hs[0] * sh, (hs[1] - 1) * sh + (kh - 1) * dh + 1)  # padded coordinates read
    cols = (ws[0] * sw, (ws[1] - 1) * sw + (kw - 1) * dw + 1)
    r0, r1 = min(max(rows[0] - pt, 0), h), min(max(rows[1] - pt, 0), h)
    c0, c1 = min(max(cols[0] - pl, 0), w), min(max(cols[1] - pl, 0), w)
    top, left = max(pt - rows[0], 0), max(pl - cols[0], 0)
    # Integer products summed in float64 are exact: |sum| <= K * 255 * 255 < 2**53 for any real K.
    part = np.pad(s.x[:, :, r0:r1, c0:c1].astype(np.float64) - s.x_zp,
                  ((0, 0), (0, 0), (top, rows[1] - rows[0] - top - (r1 - r0)),
                   (left, cols[1] - cols[0] - left - (c1 - c0))))
    xg = part.reshape(n, g, cg, *part.shape[2:])
    acc = np.zeros((n, g, th, tw, mg), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xg[:, :, :, i * dh: i * dh + (th - 1) * sh + 1: sh, j * dw: j * dw + (tw - 1) * sw + 1: sw]
            # (n, g, th, tw, cg) @ (g, cg, mg) -> (n, g, th, tw, mg)
            acc += np.matmul(patch.transpose(0, 1, 3, 4, 2), wi[:, :, :, i, j].transpose(0, 2, 1)[None, :, None])
    return acc


def _tiles(s):
    """(rows, cols, wi, tiles): the output block whose windows read input (`touched`) and its tiles of at most
    TILE_BYTES of scratch, each (rows range, cols range)."""
    n, c, h, w = s.x.shape
    m, cg, kh, kw = s.w.shape
    _, _, oh, ow = s.out_shape
    (sh, sw), (dh, dw), (pt, pl, _, _) = s.strides, s.dilations, s.pads
    g, mg = s.group, m // s.group
    hs, ws = touched(h, pt, kh, sh, dh, oh), touched(w, pl, kw, sw, dw, ow)
    wi = (s.w.astype(np.float64) - s.w_zp[:, None, None, None]).reshape(g, mg, cg, kh, kw)
    # Per output pixel: its accumulators and tap panel, and the input rows and columns its window steps over.
    per_pixel = max(1, 8 * n * (m + c) + 8 * n * c * sh * sw)
    pixels = max(1, TILE_BYTES // per_pixel)
    bw = min(max(ws[1] - ws[0], 1), pixels)
    bh = max(1, pixels // bw)
    tiles = [((r, min(r + bh, hs[1])), (q, min(q + bw, ws[1])))
             for r in range(hs[0], hs[1], bh) for q in range(ws[0], ws[1], bw)]
    return hs, ws, wi, tiles


def _acc_int32(s, acc: np.ndarray) -> np.ndarray:
    """float64 sums (N, G, th, tw, M/G) -> int32 accumulators (N, M, th, tw), bias added, wrapped as int32 would."""
    n, g, th, tw, mg = acc.shape
    acc = acc.transpose(0, 1, 4, 2, 3).reshape(n, g * mg, th, tw).astype(np.int64) + s.bias[None, :, None, None]
    return acc.astype(np.int32)


def conv_accumulate(s) -> np.ndarray:
    """int32 accumulators (N, M, OH, OW) of a validated ConvSpec, bias included."""
    n, m, oh, ow = s.out_shape
    hs, ws, wi, tiles = _tiles(s)
    out = np.empty((n, m, oh, ow), np.int32)
    out[...] = np.asarray(s.bias, np.int64).astype(np.int32)[None, :, None, None]  # windows of padding only
    for th, tw in tiles:
        out[:, :, th[0]:th[1], tw[0]:tw[1]] = _acc_int32(s, _tile(s, wi, th, tw))
    return out


def qlinear_conv(s) -> np.ndarray:
    """Quantized output (N, M, OH, OW) of a validated ConvSpec (see vkinfer.ops.qlinear_conv): the accumulators
    requantized tile by tile; the windows that read padding only hold the bias, requantized once per channel."""
    n, m, oh, ow = s.out_shape
    mult = s.out.m[None, :, None, None]
    hs, ws, wi, tiles = _tiles(s)
    y = np.empty((n, m, oh, ow), s.out.dtype)
    if hs[1] - hs[0] < oh or ws[1] - ws[0] < ow:
        bias = np.asarray(s.bias, np.int64).astype(np.int32)[None, :, None, None]
        y[...] = requantize(bias, mult, s.out.zero_point, s.out.lo, s.out.hi).astype(s.out.dtype)
    for th, tw in tiles:
        acc = _acc_int32(s, _tile(s, wi, th, tw))
        y[:, :, th[0]:th[1], tw[0]:tw[1]] = requantize(acc, mult, s.out.zero_point, s.out.lo, s.out.hi)
    return y


# --- the op (vkinfer/reference/_opdef.py) ---------------------------------------------------------------------
def _as_2d(node, x: np.ndarray, w_shape) -> tuple[np.ndarray, dict]:
    """The activation as the 2-D convolution computes it, and that convolution's geometry: auto_pad resolved as
    ONNX Runtime resolves it (vkinfer/reference/_auto_pad.py; a negative pad crops x), and a 1-D convolution
    (x (N, C, L), w (M, C/group, k)) as a 2-D one over a height of 1 (ORT's 1-D convolution is its N-D one: the
    same sums in the same order)."""
    if x.ndim not in (3, 4) or len(w_shape) != x.ndim:
        raise ValueError(f"x and w must both be 3-D (N, C, L) or both 4-D NCHW, got shapes {x.shape} and "
                         f"{tuple(w_shape)}")
    r = x.ndim - 2
    a = node.attrs
    p = _auto_pad.conv_pads(node, x.shape, w_shape)
    if len(p) != 2 * r:
        raise ValueError(f"pads must have {2 * r} values for a {r}-D convolution, got {list(p)}")
    if _auto_pad.node_mode(node) != "NOTSET":  # explicit pads are checked (>= 0) by conv_spec
        x, p = _auto_pad.crop(x, p)
    geo = {"strides": ints(a.get("strides"), r, 1), "dilations": ints(a.get("dilations"), r, 1), "pads": p}
    if r == 1:
        x = x[:, :, None, :]
        geo = {"strides": (1, *geo["strides"]), "dilations": (1, *geo["dilations"]), "pads": (0, p[0], 0, p[1])}
    return x, geo


def conv_node_spec(node, x: list, activation=None, *, shifted: bool = False):
    """The ConvSpec of a QLinearConv node for input values `x` (x[0] may be any array of the input's shape): always
    2-D (a 1-D node's spec has H = 1). A pad that auto_pad makes negative (the stride exceeds the kernel) shifts or
    trims the windows, which only the reference runs (`shifted`): the devices take the node as the spec says."""
    from ._spec import conv_spec

    check_auto_pad(node)
    w = np.asarray(x[3]) if x[3] is not None else None
    if w is None:
        raise ValueError("w is empty")
    x0, geo = _as_2d(node, np.asarray(x[0]), w.shape)
    if not shifted and _auto_pad.node_mode(node) != "NOTSET" and min(
            _auto_pad.conv_pads(node, np.shape(x[0]), w.shape)) < 0:
        raise ValueError(f"auto_pad {_auto_pad.node_mode(node)} makes a negative pad "
                         f"{_auto_pad.conv_pads(node, np.shape(x[0]), w.shape)} (ONNX Runtime shifts or trims the "
                         f"windows); only the reference runs it")
    if w.ndim == 3:
        w = w[:, :, None, :]
    bias = x[8] if len(x) > 8 else None
    return conv_spec(x0, *x[1:3], w, *x[4:8], bias, group=int(node.attrs.get("group", 1)), activation=activation,
                     **geo)


def _kernel(node, x, memo, activation=None):
    check_auto_pad(node)
    # Only the activation varies between runs; everything else is a constant of the model.
    spec = cached_spec(memo, (x[0].shape, x[0].dtype.str),
                       lambda: conv_node_spec(node, x, activation, shifted=True))
    x0, _ = _as_2d(node, x[0], np.shape(x[3]))
    y = qlinear_conv(dataclasses.replace(spec, x=np.ascontiguousarray(x0)))
    return [y[:, :, 0, :] if x[0].ndim == 3 else y]


def _shape(node, x, activation=None):
    spec = conv_node_spec(node, x, activation, shifted=True)
    shape = spec.out_shape
    return [((shape[0], shape[1], shape[3]) if np.ndim(x[0]) == 3 else shape, spec.out.dtype)]


def _clamp_kernel(node, x, memo):
    """QLinearConv with a fused activation (attribute `activation`: "relu", "relu6" or ("clip", lo, hi)) applied
    by narrowing the output clamp; the TFLite importer and the fusion pass emit it."""
    return _kernel(node, x, memo, attr(node, "activation"))


def _clamp_shape(node, x):
    return _shape(node, x, attr(node, "activation"))


_INPUTS = (8, (0, 1, 3, 4, 6))
DEFINITIONS = (
    OpDef("QLinearConv", _kernel, "conv", _INPUTS, y_params=(6, 7), weights=3, shape=_shape),
    OpDef("vkinfer:QLinearConvClamp", _clamp_kernel, "conv", _INPUTS, weights=3, shape=_clamp_shape),
)


def conv1d_as_2d(g):
    """`g` with every 1-D QLinearConv(Clamp) (constant 3-D weights) as Unsqueeze (N, C, L) -> (N, C, 1, L), the 2-D
    convolution over a height of 1 (weights (M, C/group, 1, k); strides, dilations, pads and kernel_shape with the
    height's 1, 1, 0 and 1) and Squeeze back, so the devices run it with their 2-D kernels and the plan moves the
    8-bit tensors between the forms (vkinfer/model/passes.optimize calls it). The convolution keeps its name; the
    two moves are named "<node>/unsqueeze" and "<node>/squeeze". Graph and nodes are dataclasses of
    vkinfer.model.graph, copied with dataclasses.replace (the reference layer does not import the model's)."""
    consts, nodes, changed = dict(g.consts), [], False
    taken: set[str] = set()  # every tensor name, gathered at the first 1-D convolution (most graphs have none)

    def fresh(base: str) -> str:
        if not taken:
            taken.update(consts, (o for n in g.nodes for o in n.outputs), (t.name for t in g.inputs))
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}#{k}"
        taken.add(name)
        return name

    for n in g.nodes:
        w = consts.get(n.inputs[3]) if n.op in ("QLinearConv", "vkinfer:QLinearConvClamp") and len(n.inputs) > 3 \
            else None
        if w is None or (w.ndim if type(w) is np.ndarray else np.ndim(w)) != 3 or not n.outputs or not n.outputs[0]:
            nodes.append(n)
            continue
        a = n.attrs
        attrs = {k: v for k, v in a.items() if k != "_proto"}
        for key, head in (("strides", [1]), ("dilations", [1]), ("kernel_shape", [1])):
            if a.get(key) is not None:
                attrs[key] = head + [int(v) for v in a[key]]
        if a.get("pads") is not None:
            p = [int(v) for v in a["pads"]]
            attrs["pads"] = [0, *p[:1], 0, *p[1:]]
        axes, w2 = fresh(f"{n.name}/axes"), fresh(f"{n.inputs[3]}/2d")
        consts[axes], consts[w2] = np.array([2], np.int64), np.asarray(w)[:, :, None, :]
        x4, y4 = fresh(f"{n.name}/x_2d"), fresh(f"{n.name}/y_2d")
        ins = [x4, *n.inputs[1:3], w2, *n.inputs[4:]]
        nodes += [dataclasses.replace(n, op="Unsqueeze", name=f"{n.name}/unsqueeze", inputs=[n.inputs[0], axes],
                                      outputs=[x4], attrs={}),
                  dataclasses.replace(n, inputs=ins, outputs=[y4], attrs=attrs),
                  dataclasses.replace(n, op="Squeeze", name=f"{n.name}/squeeze", inputs=[y4, axes],
                                      outputs=[n.outputs[0]], attrs={})]
        changed = True
    return dataclasses.replace(g, nodes=nodes, consts=consts) if changed else g
