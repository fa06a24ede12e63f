"""Quantized transposed convolution: QDQ folding, the interpreter's kernels, and the rewrite that runs it on devices.

ONNX Runtime 1.31 (CPU EP) runs a QDQ model's DequantizeLinear(x), DequantizeLinear(w) -> ConvTranspose ->
QuantizeLinear in float: its optimized graph keeps the float ConvTranspose (measured with
SessionOptions.optimized_model_filepath, per-tensor and per-channel weights, uint8 and int8 activations, with and
without session.qdqisint8allowed), and the QOperator format leaves ConvTranspose unquantized (float weights).

- `fold_conv_transpose` (called by passes.fold_qdq) makes the QDQ pattern `vkinfer:QDQConvTranspose` where ORT's
  float order is reproduced (non-overlapping taps, <= 128 channels per group: reference/float_conv_transpose.py,
  ORT's bits; slider_yoloseg's proto upsample), else `vkinfer:QLinearConvTranspose`: the exact
  integer value of the float expression (vkinfer/reference/qlinear_conv_transpose.py), int32 accumulation and
  QLinearConv's requantization. ORT's float result differs from it by at most one step, only where the real value
  lies within float32 rounding of a .5 tie (tests/numerics/test_conv_transpose.py measures the bound).
- `expand_conv_transpose` (called by passes.optimize after fold_qdq) rewrites it into what the devices already
  run: `vkinfer:ZeroInsert` (stride - 1 zero-point bytes after every input pixel, rows and columns; a move) and a
  stride-1 QLinearConv over the result with the weights transposed to (M, C/group, kH, kW) and flipped spatially,
  its pads (k - 1) * d - pad at the start and what the output size needs at the end. The inserted bytes and the
  conv's padding equal the input zero point, so they add nothing to the int32 sums: the same bits as the
  definition. Nodes whose geometry depends on the input size (output_shape, SAME auto_pad) or that would need a
  negative pad (pads beyond the kernel's reach) stay `vkinfer:QLinearConvTranspose` on the host.
- A float `ConvTranspose` (QOperator models, or a QDQ one that does not fold) runs on the host: the real sum
  (float64) rounded once to float32.
"""

from __future__ import annotations

import numpy as np

from ..reference.dequantize_linear import dequantize_linear
from ..reference.float_conv_transpose import MAX_CHAIN, overlapping
from ..reference.float_conv_transpose import OP as FOP
from ..reference.qlinear_conv_transpose import (
    check_shapes,
    conv_transpose_float,
    conv_transpose_geometry,
    qlinear_conv_transpose,
)
from .graph import Graph, Node
from .op_table import REQUIRED_INPUTS, _op

QOP = "vkinfer:QLinearConvTranspose"
ZERO_INSERT = "vkinfer:ZeroInsert"
ATTRS = ("strides", "pads", "dilations", "group", "output_padding", "output_shape", "auto_pad", "kernel_shape")

REQUIRED_INPUTS.update({QOP: (8, (0, 1, 3, 4, 6)), "ConvTranspose": (2, (0, 1)), ZERO_INSERT: (1, (0,))})


def _attrs(node: Node) -> dict:
    a = {k: v for k, v in node.attrs.items() if k in ATTRS}
    for k in ("strides", "pads", "dilations", "output_padding", "output_shape", "kernel_shape"):
        if k in a:
            a[k] = [int(v) for v in a[k]]
    if "group" in a:
        a["group"] = int(a["group"])
    return a


@_op(QOP)
def _qlinear_conv_transpose(node, x, memo):
    """Inputs as QLinearConv's (x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, bias),
    weights (C, M/group, kH, kW) with per-channel parameters along axis 1; ConvTranspose's attributes."""
    return [qlinear_conv_transpose(*x[:8], x[8] if len(x) > 8 else None, **_attrs(node))]


@_op("ConvTranspose")
def _conv_transpose(node, x, memo):
    """float32 ConvTranspose (x, w, optional bias): see conv_transpose_float."""
    return [conv_transpose_float(x[0], x[1], x[2] if len(x) > 2 else None, **_attrs(node))]


def zero_insert(x: np.ndarray, fill, strides) -> np.ndarray:
    """(N, C, H, W) -> (N, C, H * s_h, W * s_w): x[n, c, i, j] at (i * s_h, j * s_w), `fill` everywhere else."""
    if not isinstance(x, np.ndarray) or x.ndim != 4:
        raise ValueError(f"ZeroInsert needs a 4-D input, got shape {list(np.shape(x))}")
    sh, sw = (int(s) for s in strides)
    if sh < 1 or sw < 1:
        raise ValueError(f"strides must be positive, got {[sh, sw]}")
    f = np.asarray(0 if fill is None else fill)
    if f.size != 1 or (fill is not None and f.dtype != x.dtype):
        raise ValueError(f"fill must be one {x.dtype} value, got {f.dtype} of shape {list(f.shape)}")
    n, c, h, w = x.shape
    y = np.full((n, c, h, sh, w, sw), f.reshape(()), x.dtype)
    y[:, :, :, 0, :, 0] = x
    return y.reshape(n, c, h * sh, w * sw)


@_op(ZERO_INSERT)
def _zero_insert(node, x, memo):
    """Inputs (x, fill): see zero_insert; attribute strides (2 integers)."""
    strides = node.attrs.get("strides")
    if strides is None or len(strides) != 2:
        raise ValueError(f"strides must be 2 integers, got {strides!r}")
    return [zero_insert(x[0], x[1] if len(x) > 1 else None, strides)]


# ------------------------------------------------------------------------------------------------ QDQ folding


def _weight_params_ok(g: Graph, wdq: Node, mg: int) -> bool:
    """Per-tensor weight parameters, or per-channel along weights axis 1 (M/group values)."""
    s = np.asarray(g.consts[wdq.inputs[1]])
    if s.size == 1:
        return True
    axis = int(wdq.attrs.get("axis", 1))
    return s.ndim == 1 and s.size == mg and axis in (1, -3)


def _dequantized(g: Graph, dq: Node) -> np.ndarray | None:
    """The float32 value of a DequantizeLinear of constants (ORT's arithmetic), or None."""
    if not all(not t or t in g.consts for t in dq.inputs):
        return None
    vals = [g.consts[t] if t else None for t in dq.inputs] + [None] * (3 - len(dq.inputs))
    try:
        return dequantize_linear(*vals[:3], axis=int(dq.attrs.get("axis", 1)))
    except (ValueError, TypeError):
        return None


def _fold_float(g: Graph, n: Node, ins: list, q: Node) -> Node | None:
    """The group as one vkinfer:QDQConvTranspose (ORT's float arithmetic, reference/float_conv_transpose.py), or
    None where that op's order is not known to be ORT's: overlapping taps or more than MAX_CHAIN channels per
    group (the exact integer QLinearConvTranspose runs those)."""
    x, wdq = ins[0], ins[1]
    if len(x.inputs) < 3 or not x.inputs[2] or len(q.inputs) < 3 or not q.inputs[2]:
        return None
    if not all(t in g.consts for t in (x.inputs[2], q.inputs[2])):
        return None
    w = _dequantized(g, wdq)
    a = _attrs(n)
    group = a.get("group", 1)
    if w is None or w.ndim != 4 or w.dtype != np.float32 or group < 1 or w.shape[0] % group:
        return None
    if w.shape[0] // group > MAX_CHAIN or ("kernel_shape" in a and tuple(a["kernel_shape"]) != w.shape[2:]):
        return None
    if overlapping(w.shape[2:], a.get("strides", [1, 1]), a.get("dilations", [1, 1])):
        return None
    bias = ""
    if len(ins) > 2 and n.inputs[2]:
        b = _dequantized(g, ins[2])
        if b is None or b.dtype != np.float32 or b.shape != (w.shape[1] * group,):
            return None
        bias = f"{n.name}__float_bias"
        g.consts[bias] = b
    wname = f"{n.name}__float_weights"
    g.consts[wname] = np.ascontiguousarray(w)
    return Node(FOP, n.name, [x.inputs[0], x.inputs[1], x.inputs[2], wname, bias, q.inputs[1], q.inputs[2]],
                [q.outputs[0]], {k: v for k, v in n.attrs.items() if k in ATTRS})


def fold_conv_transpose(g: Graph, n: Node, ins: list, q: Node) -> Node | None:
    """DQ(x), DQ(w) [, DQ(bias)] -> ConvTranspose -> Q as one vkinfer:QDQConvTranspose node where its float order
    is ORT's (_fold_float), else one vkinfer:QLinearConvTranspose node, or None when the pattern does not hold
    (the float ops then run as they are). `ins` are the DequantizeLinear nodes producing n's inputs (None where
    another node does); `q` the QuantizeLinear reading its output."""
    if len(ins) < 2 or ins[0] is None or ins[1] is None or (len(ins) > 2 and n.inputs[2] and ins[2] is None):
        return None
    if ins[1].inputs[0] in g.consts and np.asarray(g.consts[ins[0].inputs[1]]).size == 1 and \
            np.asarray(g.consts[q.inputs[1]]).size == 1:
        node = _fold_float(g, n, ins, q)
        if node is not None:
            return node
    x, w = ins[0], ins[1]
    if w.inputs[0] not in g.consts or np.asarray(g.consts[x.inputs[1]]).size != 1:
        return None
    if np.asarray(g.consts[q.inputs[1]]).size != 1:
        return None
    wv = np.asarray(g.consts[w.inputs[0]])
    group = n.attrs.get("group", 1)
    if wv.ndim != 4 or isinstance(group, bool) or not isinstance(group, (int, np.integer)) or group < 1:
        return None  # the float kernel reports what is wrong, naming the node
    if not _weight_params_ok(g, w, wv.shape[1]):
        return None
    args = [x.inputs[0], x.inputs[1], _zp(x), w.inputs[0], w.inputs[1], _zp(w), q.inputs[1], _zp(q)]
    if len(ins) > 2 and n.inputs[2]:
        b = ins[2]
        bv = g.consts.get(b.inputs[0])
        if bv is None or bv.dtype != np.int32 or bv.shape != (wv.shape[1] * int(group),):
            return None
        args.append(b.inputs[0])  # int32 bias, quantized with scale x_scale * w_scale
    return Node(QOP, n.name, args, [q.outputs[0]], {k: v for k, v in n.attrs.items() if k in ATTRS})


def _zp(node: Node) -> str:
    return node.inputs[2] if len(node.inputs) > 2 else ""


# ------------------------------------------------------------------------------------------------ device rewrite


def conv_weights(w: np.ndarray, group: int) -> np.ndarray:
    """ConvTranspose weights (C, M/group, kH, kW) as the equivalent stride-1 convolution's (M, C/group, kH, kW):
    transposed within each group and flipped spatially."""
    c, mg, kh, kw = w.shape
    cg = c // group
    t = w.reshape(group, cg, mg, kh, kw).transpose(0, 2, 1, 3, 4).reshape(group * mg, cg, kh, kw)
    return np.ascontiguousarray(t[:, :, ::-1, ::-1])


def _rewrite(g: Graph, n: Node) -> list[Node] | None:
    """ZeroInsert + QLinearConv for one vkinfer:QLinearConvTranspose node, or None (it stays on the host)."""
    c = g.consts
    if not all(not i or i in c for i in n.inputs[1:]):
        return None
    a = _attrs(n)
    mode = a.get("auto_pad", "NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if a.get("output_shape") or mode not in ("NOTSET", "VALID"):
        return None  # the pads depend on the input size
    w = np.asarray(c[n.inputs[3]])
    group = a.get("group", 1)
    if w.ndim != 4 or w.shape[0] % group:
        return None
    kh, kw = w.shape[2:]
    try:
        # Any input size gives the same pads here; a large one so that no "no output" refusal comes from it.
        (pt, pl), _ = conv_transpose_geometry((1 << 20, 1 << 20), (kh, kw), **{
            k: v for k, v in a.items() if k in ("strides", "pads", "dilations", "output_padding", "auto_pad")})
        check_shapes((1, w.shape[0], 1, 1), w.shape, group)
    except ValueError:
        return None  # the host kernel raises it, naming the node
    if "kernel_shape" in a and tuple(a["kernel_shape"]) != (kh, kw):
        return None
    sh, sw = a.get("strides", [1, 1])
    dh, dw = a.get("dilations", [1, 1])
    oph, opw = a.get("output_padding", [0, 0])
    pads = a.get("pads", [0, 0, 0, 0]) if mode == "NOTSET" else [0, 0, 0, 0]
    # The zero-inserted input has H * s rows (s - 1 fill rows after the last pixel): the conv's bottom pad is what
    # is left of OH + (k - 1) * d rows, OH = s * (H - 1) + output_padding + (k - 1) * d + 1 - pad_top - pad_bottom.
    top, left = (kh - 1) * dh - pt, (kw - 1) * dw - pl
    bottom = oph + (kh - 1) * dh + 1 - pads[2] - sh
    right = opw + (kw - 1) * dw + 1 - pads[3] - sw
    if min(top, left, bottom, right) < 0:
        return None
    mg = w.shape[1]
    conv_w = f"{n.name}__conv_weights"
    c[conv_w] = conv_weights(w, group)
    ins = list(n.inputs)
    ins[3] = conv_w
    for i in (4, 5):  # per-channel along ConvTranspose weights axis 1 -> along the conv's output channels
        if ins[i] and np.asarray(c[ins[i]]).size > 1:
            v = np.asarray(c[ins[i]]).reshape(-1)
            if v.size != mg:
                return None
            name = f"{n.name}__conv_{'scale' if i == 4 else 'zero_point'}"
            c[name] = np.ascontiguousarray(np.tile(v, group))
            ins[i] = name
    nodes = []
    if (sh, sw) != (1, 1):
        inserted = f"{n.name}__zero_inserted"
        nodes.append(Node(ZERO_INSERT, f"{n.name}__zero_insert", [ins[0], ins[2]], [inserted],
                          {"strides": [sh, sw]}))
        ins[0] = inserted
    nodes.append(Node("QLinearConv", n.name, ins, list(n.outputs),
                      {"strides": [1, 1], "dilations": [dh, dw], "group": group, "kernel_shape": [kh, kw],
                       "pads": [top, left, bottom, right]}))
    return nodes


def expand_conv_transpose(g: Graph) -> Graph:
    """Every vkinfer:QLinearConvTranspose with constant weights and input-size-independent pads as ZeroInsert +
    QLinearConv (module docstring); the rest unchanged."""
    if not any(n.op == QOP for n in g.nodes):
        return g
    nodes: list[Node] = []
    for n in g.nodes:
        new = _rewrite(g, n) if n.op == QOP else None
        nodes.extend(new if new is not None else [n])
    return Graph(nodes, g.inputs, g.outputs, g.consts)
