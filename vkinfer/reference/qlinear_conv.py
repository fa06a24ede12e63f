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


def conv_accumulate(s) -> np.ndarray:
    """int32 accumulators (N, M, OH, OW) of a validated ConvSpec, bias included."""
    n, c, h, w = s.x.shape
    m, cg, kh, kw = s.w.shape
    _, _, oh, ow = s.out_shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = s.strides, s.dilations, s.pads
    g, mg = s.group, m // s.group
    # Integer products summed in float64 are exact: |sum| <= K * 255 * 255 < 2**53 for any real K.
    xi = np.pad(s.x.astype(np.float64) - s.x_zp, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    wi = (s.w.astype(np.float64) - s.w_zp[:, None, None, None]).reshape(g, mg, cg, kh, kw)
    xg = xi.reshape(n, g, cg, h + pt + pb, w + pl + pr)
    acc = np.zeros((n, g, oh, ow, mg), np.float64)
    for i in range(kh):
        for j in range(kw):
            patch = xg[:, :, :, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw]
            # (n, g, oh, ow, cg) @ (g, cg, mg) -> (n, g, oh, ow, mg)
            acc += np.matmul(patch.transpose(0, 1, 3, 4, 2), wi[:, :, :, i, j].transpose(0, 2, 1)[None, :, None])
    acc = acc.transpose(0, 1, 4, 2, 3).reshape(n, m, oh, ow).astype(np.int64) + s.bias[None, :, None, None]
    return acc.astype(np.int32)  # int32 wrap-around, as an int32 accumulator would


def qlinear_conv(s) -> np.ndarray:
    """Quantized output (N, M, OH, OW) of a validated ConvSpec (see vkinfer.ops.qlinear_conv)."""
    acc = conv_accumulate(s)
    q = requantize(acc, s.out.m[None, :, None, None], s.out.zero_point, s.out.lo, s.out.hi)
    return q.astype(s.out.dtype)


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
    taken = set(consts) | {o for n in g.nodes for o in n.outputs} | {t.name for t in g.inputs}

    def fresh(base: str) -> str:
        name, k = base, 0
        while name in taken:
            k += 1
            name = f"{base}#{k}"
        taken.add(name)
        return name

    for n in g.nodes:
        w = consts.get(n.inputs[3]) if n.op in ("QLinearConv", "vkinfer:QLinearConvClamp") and len(n.inputs) > 3 \
            else None
        if w is None or np.ndim(w) != 3 or not n.outputs or not n.outputs[0]:
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
