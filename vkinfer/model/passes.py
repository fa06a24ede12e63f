"""Graph rewriting passes.

fold_qdq: QDQ-format models (DequantizeLinear -> float op -> QuantizeLinear, as
onnxruntime.quantization.quantize_static writes by default) become the quantized ops ONNX Runtime
fuses them into, so the arithmetic is the integer arithmetic ORT runs:
  Conv -> QLinearConv, MatMul -> QLinearMatMul, Gemm -> com.microsoft:QGemm, Add -> QLinearAdd, Mul -> QLinearMul,
  GlobalAveragePool -> QLinearGlobalAveragePool, AveragePool -> QLinearAveragePool, Concat -> QLinearConcat;
  and data-movement ops (Reshape, Flatten, Transpose, Squeeze, Unsqueeze, MaxPool) between a DQ and a Q with the same
  scale and zero point run on the 8-bit tensor directly (exact: they only move values). Pad likewise,
  with its float constant_value quantized once by the Q's parameters (what the float path's Q makes of
  the padded elements; exact since Q(DQ(v)) = v for every 8-bit v at a per-tensor scale).
DequantizeLinear/QuantizeLinear nodes left over (the model's edges) run as ops.

optimize() runs every pass in order (constant folding, activation passes, QDQ folding; see each).
"""

from __future__ import annotations

import functools
import struct

import numpy as np

from .attrs import check_graph  # noqa: F401 - defined beside the attribute checks it runs; imported from here
from .graph import Graph, Node
from .pass_candidates import _Candidates, _Ops

MOVE_OPS = {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "MaxPool",
            # ORT 1.31 drops DQ/Q around these too (tests/compiler/test_moves.py), Split's outputs each through their Q
            "Slice", "Gather", "DepthToSpace", "Tile", "Expand", "Resize",  # Resize: mode nearest only (linear
            # computes; ORT keeps it in float between DQ and Q); MaxPool: positive scale only (qdq_rules.py)
            "GatherElements"}
# Moves ORT keeps in float between DQ and Q: folded where Q(DQ(v)) == v makes it exact.
ROUNDTRIP_MOVE_OPS = {"SpaceToDepth"}


def _maps(g: Graph) -> tuple[dict[str, Node], dict[str, list[Node]]]:
    """(tensor -> the node writing it, tensor -> the nodes reading it, once per input slot, in order)."""
    producer, consumers = {}, {}
    get = consumers.get
    for n in g.nodes:
        for o in n.outputs:
            producer[o] = n
        for i in n.inputs:
            users = get(i)
            if users is None:
                consumers[i] = [n]
            else:
                users.append(n)
    return producer, consumers


def fold_qdq(g: Graph) -> Graph:
    from .qdq_rules import REDUCE_RULE, fold_pad, fold_rule, positive_scale

    outputs = {t.name for t in g.outputs}
    producer, consumers = _maps(g)

    def dq(name: str) -> Node | None:
        """The DequantizeLinear producing `name`, when its scale and zero point are constants."""
        n = producer.get(name)
        if n is None or n.op != "DequantizeLinear" or len(n.inputs) < 2:
            return None
        return n if all(not i or i in g.consts for i in n.inputs[1:]) else None

    def single_q(name: str) -> Node | None:
        """The only consumer of `name`, when it is a QuantizeLinear with constant parameters."""
        users = consumers.get(name, [])
        if name in outputs or len(users) != 1 or users[0].op != "QuantizeLinear" or len(users[0].inputs) < 2:
            return None
        q = users[0]
        return q if all(not i or i in g.consts for i in q.inputs[1:]) else None

    def zp(node: Node) -> str:
        return node.inputs[2] if len(node.inputs) > 2 else ""

    replaced: dict[int, Node] = {}  # id(float node) -> quantized node; its Q is dropped
    dropped: set[int] = set()
    for n in g.nodes:
        if n.op == "Split" and n.inputs and (x := dq(n.inputs[0])) is not None:
            qs = [single_q(o) if o else None for o in n.outputs]
            if qs and all(qq is not None and _same_qparams(g, x, qq) for qq in qs):
                replaced[id(n)] = Node("Split", n.name, [x.inputs[0], *n.inputs[1:]], [qq.outputs[0] for qq in qs],
                                       dict(n.attrs))
                dropped.update(id(qq) for qq in qs)
            continue
        q = single_q(n.outputs[0]) if n.outputs else None
        if q is None:
            continue
        ins = [dq(i) if i else None for i in n.inputs]
        new = None
        if n.op == "Conv" and ins[0] and ins[1] and (len(ins) < 3 or ins[2]):
            if n.inputs[1] in g.consts or ins[1].inputs[0] in g.consts:
                x, w = ins[0], ins[1]
                args = [x.inputs[0], x.inputs[1], zp(x), w.inputs[0], w.inputs[1], zp(w), q.inputs[1], zp(q)]
                if len(ins) > 2:
                    args.append(ins[2].inputs[0])  # int32 bias, quantized with scale x_scale * w_scale
                attrs = {k: v for k, v in n.attrs.items() if k in ("strides", "pads", "dilations", "group",
                                                                       "kernel_shape", "auto_pad")}
                new = Node("QLinearConv", n.name, args, [q.outputs[0]], attrs)
        elif n.op == "MatMul" and ins[0] and ins[1]:
            a, b = ins
            new = Node("QLinearMatMul", n.name, [a.inputs[0], a.inputs[1], zp(a), b.inputs[0], b.inputs[1], zp(b),
                                                  q.inputs[1], zp(q)], [q.outputs[0]])
        elif n.op == "Gemm" and ins[0] and ins[1] and (len(ins) < 3 or ins[2]):
            if float(n.attrs.get("alpha", 1.0)) == 1.0 and float(n.attrs.get("beta", 1.0)) == 1.0:
                a, b = ins[0], ins[1]
                c = ins[2].inputs[0] if len(ins) > 2 else ""
                new = Node("com.microsoft:QGemm", n.name, [a.inputs[0], a.inputs[1], zp(a), b.inputs[0], b.inputs[1],
                                                           zp(b), c, q.inputs[1], zp(q)], [q.outputs[0]],
                           {k: v for k, v in n.attrs.items() if k in ("transA", "transB")})
        elif n.op in ("Add", "Mul") and ins[0] and ins[1]:
            a, b = ins
            args = [a.inputs[0], a.inputs[1], zp(a), b.inputs[0], b.inputs[1], zp(b), q.inputs[1], zp(q)]
            new = Node(f"com.microsoft:QLinear{n.op}", n.name, args, [q.outputs[0]])
        elif n.op == "GlobalAveragePool" and ins[0]:
            x = ins[0]
            new = Node("com.microsoft:QLinearGlobalAveragePool", n.name,
                       [x.inputs[0], x.inputs[1], zp(x), q.inputs[1], zp(q)], [q.outputs[0]], {"channels_last": 0})
        elif n.op == "AveragePool" and ins[0] and "kernel_shape" in n.attrs:
            x = ins[0]  # ORT's QDQ unary rule: its integer QLinearAveragePool, not float pooling then Q
            keep = ("kernel_shape", "strides", "pads", "count_include_pad", "ceil_mode", "auto_pad")
            new = Node("com.microsoft:QLinearAveragePool", n.name, [x.inputs[0], x.inputs[1], zp(x), q.inputs[1],
                                                                    zp(q)], [q.outputs[0]],
                       {"channels_last": 0, **{k: v for k, v in n.attrs.items() if k in keep}})
        elif n.op == "Concat" and ins and all(ins) and "axis" in n.attrs:
            args = [q.inputs[1], zp(q)]
            for x in ins:
                args += [x.inputs[0], x.inputs[1], zp(x)]
            new = Node("com.microsoft:QLinearConcat", n.name, args, [q.outputs[0]], {"axis": n.attrs["axis"]})
        elif n.op in MOVE_OPS and ins[0] and _same_qparams(g, ins[0], q) and (
                n.op != "Resize" or n.attrs.get("mode", "nearest") in ("nearest", b"nearest")) and (
                n.op != "MaxPool" or positive_scale(g, q)):
            new = Node(n.op, n.name, [ins[0].inputs[0]] + n.inputs[1:], [q.outputs[0]], dict(n.attrs))
        elif n.op in ROUNDTRIP_MOVE_OPS and ins[0] and _same_qparams(g, ins[0], q) and _exact_roundtrip(g, q):
            new = Node(n.op, n.name, [ins[0].inputs[0]] + n.inputs[1:], [q.outputs[0]], dict(n.attrs))
        elif n.op == "Pad" and ins[0] and _same_qparams(g, ins[0], q) and _exact_roundtrip(g, q):
            new = fold_pad(g, n, ins[0], q, dq)
        elif n.op == "Softmax" and ins and ins[0]:  # ORT fuses it into com.microsoft:QLinearSoftmax
            from .quant_ops import fold_softmax

            new = fold_softmax(g, n, ins[0], q)
        elif n.op == "ConvTranspose":
            from .conv_transpose import fold_conv_transpose

            new = fold_conv_transpose(g, n, ins, q)
        elif n.op in REDUCE_RULE and ins:  # ORT's rules this module has no branch for: vkinfer/model/qdq_rules.py
            new = fold_rule(g, n, ins[0], q, _same_qparams)
        if new is not None:
            replaced[id(n)] = new
            dropped.add(id(q))
    nodes = [replaced.get(id(n), n) for n in g.nodes if id(n) not in dropped]
    # DequantizeLinear nodes nobody reads any more (their float outputs were only fused away): one sweep from the end
    # (nodes are in topological order; rounds over the whole graph were 0.15 s on 100k nodes), or rounds where a DQ
    if not any(n.op == "DequantizeLinear" and "" in n.outputs for n in nodes):  # writes "" (order says nothing of it)
        used, keep = set(outputs), []
        for n in reversed(nodes):
            if n.op != "DequantizeLinear" or any(o in used for o in n.outputs):
                keep.append(n)
                used.update(n.inputs)
        return Graph(keep[::-1], g.inputs, g.outputs, g.consts)
    while True:
        used = {i for n in nodes for i in n.inputs} | outputs
        keep = [n for n in nodes if n.op != "DequantizeLinear" or any(o in used for o in n.outputs)]
        if len(keep) == len(nodes):
            break
        nodes = keep
    return Graph(nodes, g.inputs, g.outputs, g.consts)


def _same_qparams(g: Graph, dq: Node, q: Node) -> bool:
    def params(n: Node):
        s = g.consts[n.inputs[1]]
        z = g.consts[n.inputs[2]] if len(n.inputs) > 2 and n.inputs[2] else np.zeros((), np.uint8)
        return s, z
    (s1, z1), (s2, z2) = params(dq), params(q)
    return s1.shape == s2.shape and np.array_equal(s1, s2) and z1.dtype == z2.dtype and np.array_equal(z1, z2)


def _exact_roundtrip(g: Graph, q: Node) -> bool:
    """Per-tensor scale for which Q(DQ(v)) == v for every 8-bit v (a normal float32 with 255 * s finite)."""
    s = np.asarray(g.consts[q.inputs[1]])
    if s.size != 1 or s.dtype != np.float32:
        return False
    v = float(s.reshape(()))
    return np.isfinite(np.float32(v) * np.float32(256)) and v >= float(np.finfo(np.float32).tiny)


# ------------------------------------------------------------------------------------- activations
#
# ORT removes a float Relu or Clip in front of a QuantizeLinear when the Q's own saturation already does its
# work (ReluQuantFusion / ClipQuantFusion, before the QDQ fusions), so DQ -> Conv -> Relu -> Q folds to a plain
# QLinearConv there. vkinfer applies the same rule with the same float32 bounds (drop_redundant_activations).
# What remains is fused into the producer's clamp (fuse_activations): QLinearConv / QGemm followed by
#   DQ -> Relu/Clip -> Q with the producer's scale and zero point (exact: Q(max(DQ(v), c)) = max(v, Q(c)) as
#       Q is monotone and Q(DQ(v)) = v), or by
#   Relu/Clip on the 8-bit tensor itself (exact: integer clamps),
# and float DQ -> Conv/Gemm/MatMul -> Relu/Clip -> Q that ORT leaves in float (the activation is not redundant):
# there vkinfer runs the integer QLinearConv/QGemm with the activation as its clamp (QLinearMatMul, which has
# no clamp form, with the activation between a DQ and a Q at its output's parameters: the same values), which
# ORT would compute were it to fuse; ORT's float op differs from the integer requantization by at most 1 step
# where the real value lies near a rounding tie.

ACT_OPS = ("Relu", "Clip")
CLAMP_OPS = {"QLinearConv": "vkinfer:QLinearConvClamp", "vkinfer:QLinearConvClamp": "vkinfer:QLinearConvClamp",
             "com.microsoft:QGemm": "vkinfer:QGemmClamp", "vkinfer:QGemmClamp": "vkinfer:QGemmClamp"}
_QRANGE = {np.dtype(np.uint8): (0, 255), np.dtype(np.int8): (-128, 127)}


def _clip_bounds(g: Graph, n: Node) -> tuple[float, float] | None:
    """(min, max) of a Relu or a Clip with constant bounds (missing ones: the float range), else None."""
    big = np.inf  # ORT reads a missing bound as the float range; infinity compares the same way
    if n.op == "Relu":
        return 0.0, big
    if len(n.inputs) > 1 or ("min" not in n.attrs and "max" not in n.attrs):
        vals = []
        for i, default in ((1, -big), (2, big)):
            name = n.inputs[i] if len(n.inputs) > i else ""
            if not name:
                vals.append(default)
            elif name in g.consts and np.asarray(g.consts[name]).size == 1:
                vals.append(float(np.asarray(g.consts[name]).reshape(())))
            else:
                return None
        return vals[0], vals[1]
    return float(n.attrs.get("min", -big)), float(n.attrs.get("max", big))


def _min_upper(scale: np.float32, zp: int, qmin: int) -> np.float32:
    """ORT's QuantizeDomain::MinUpper: the largest real value Q still maps to qmin (float32)."""
    biased = qmin - zp
    before = np.float32(biased) + np.float32(0.5)
    if biased > 0 and biased % 2 == 1:  # C's remainder: odd positive only
        before = np.nextafter(before, np.float32(biased))
    return np.float32(before * scale)


def _max_lower(scale: np.float32, zp: int, qmax: int) -> np.float32:
    """ORT's QuantizeDomain::MaxLower: the smallest real value Q still maps to qmax (float32)."""
    biased = qmax - zp
    before = np.float32(biased) - np.float32(0.5)
    if biased > 0 and biased % 2 == 1:
        before = np.nextafter(before, np.float32(biased))
    return np.float32(before * scale)


def drop_redundant_activations(g: Graph, maps: tuple | None = None) -> Graph:
    """ORT's ReluQuantFusion / ClipQuantFusion: a float Relu/Clip whose only reader is a QuantizeLinear (with
    constant scale and explicit constant zero point) is removed when the Q saturates at least as tightly.
    `maps`: _maps(g), where the caller has them."""
    outputs = {t.name for t in g.outputs}
    _, consumers = maps or _maps(g)
    drop: dict[int, str] = {}  # id(activation) -> its input, which its Q reads instead
    for n in g.nodes:
        if n.op not in ACT_OPS or n.outputs[0] in outputs:
            continue
        users = consumers.get(n.outputs[0], [])
        if len(users) != 1 or users[0].op != "QuantizeLinear":
            continue
        q = users[0]
        if len(q.inputs) != 3 or not q.inputs[2] or q.inputs[1] not in g.consts or q.inputs[2] not in g.consts:
            continue
        s, z = np.asarray(g.consts[q.inputs[1]]), np.asarray(g.consts[q.inputs[2]])
        if z.dtype not in _QRANGE or z.size != 1 or s.dtype != np.float32 or s.size < 1:
            continue
        qmin, qmax = _QRANGE[z.dtype]
        scale, zp = np.float32(s.reshape(-1)[0]), int(z.reshape(-1)[0])
        if n.op == "Relu":
            ok = _min_upper(scale, zp, qmin) >= 0
        else:
            bounds = _clip_bounds(g, n)
            ok = (bounds is not None and s.ndim == 0 and z.ndim == 0
                  and bounds[0] <= _min_upper(scale, zp, qmin) and _max_lower(scale, zp, qmax) <= bounds[1])
        if ok:
            drop[id(n)] = n.inputs[0]
    if not drop:
        return g
    renamed = {n.outputs[0]: drop[id(n)] for n in g.nodes if id(n) in drop}
    nodes = [Node(n.op, n.name, [renamed.get(i, i) for i in n.inputs], n.outputs, n.attrs)
             if any(i in renamed for i in n.inputs) else n for n in g.nodes if id(n) not in drop]
    return Graph(nodes, g.inputs, g.outputs, g.consts)


def _int_bounds(g: Graph, node: Node) -> tuple[int, int, np.float32, int, np.dtype] | None:
    """(lo, hi, y_scale, y_zero_point, dtype) of a QLinearConv/QGemm (clamp variants included) output."""
    si, zi = (6, 7) if "Conv" in node.op else (7, 8)
    if len(node.inputs) <= zi or not node.inputs[si] or not node.inputs[zi]:
        return None
    if node.inputs[si] not in g.consts or node.inputs[zi] not in g.consts:
        return None
    s, z = np.asarray(g.consts[node.inputs[si]]), np.asarray(g.consts[node.inputs[zi]])
    if s.size != 1 or z.size != 1 or z.dtype not in _QRANGE:
        return None
    act = node.attrs.get("activation")
    try:  # once per (scale, zero point, activation): a conv chain's layers share them
        return _bounds_of(s.dtype.str, s.tobytes(), z.dtype.str, z.tobytes(), act)
    except TypeError:  # an activation that is no key (the bounds below say what is wrong with it)
        return _bounds(s, z, act)


@functools.lru_cache(maxsize=256)
def _bounds_of(s_type: str, s: bytes, z_type: str, z: bytes, act) -> tuple[int, int, np.float32, int, np.dtype] | None:
    return _bounds(np.frombuffer(s, s_type), np.frombuffer(z, z_type), act)


def _bounds(s: np.ndarray, z: np.ndarray, act) -> tuple[int, int, np.float32, int, np.dtype] | None:
    from ..reference._spec import _activation_bounds

    if not _roundtrip_scale(s):
        return None
    scale, zp = np.float32(s.reshape(())), int(z.reshape(()))
    with np.errstate(over="ignore"):
        lo, hi = _activation_bounds(act, scale, zp, z.dtype)
    return lo, hi, scale, zp, z.dtype


def _clamped(g: Graph, node: Node, lo: int, hi: int, output: str) -> Node | None:
    """`node` as its clamp variant with the integer clamp [lo, hi] (intersected with its own), writing `output`."""
    b = _int_bounds(g, node)
    if b is None:
        return None
    lo0, hi0, scale, zp, dt = b
    qmin, qmax = _QRANGE[dt]
    lo, hi = max(lo, lo0), min(hi, hi0)
    if lo > hi:
        return None
    act = ("clip", -np.inf if lo == qmin else float((lo - zp) * np.float64(scale)),
           np.inf if hi == qmax else float((hi - zp) * np.float64(scale)))
    with np.errstate(over="ignore"):
        if _clip_to_int(act[1], act[2], scale, zp, dt) != (lo, hi):
            return None
    attrs = {k: v for k, v in node.attrs.items() if not k.startswith("_")}
    attrs["activation"] = act
    return Node(CLAMP_OPS[node.op], node.name, list(node.inputs), [output], attrs)


def _clip_to_int(lo: float, hi: float, scale: np.float32, zp: int, dt: np.dtype) -> tuple[int, int]:
    """_activation_bounds(("clip", lo, hi), scale, zp, dt) once per value (40k calls: 0.15 s of a QDQ conv chain)."""
    if type(lo) is float and type(hi) is float and type(scale) is np.float32 and type(zp) is int:
        return _clip_to_int_of(struct.pack("<dd", lo, hi), scale.tobytes(), zp, dt)
    from ..reference._spec import _activation_bounds
    return _activation_bounds(("clip", lo, hi), scale, zp, dt)


@functools.lru_cache(maxsize=256)
def _clip_to_int_of(bounds: bytes, scale: bytes, zp: int, dt: np.dtype) -> tuple[int, int]:
    from ..reference._spec import _activation_bounds
    lo, hi = struct.unpack("<dd", bounds)
    return _activation_bounds(("clip", lo, hi), np.frombuffer(scale, np.float32)[0], zp, dt)


def _roundtrip_scale(s) -> bool:
    v = np.float32(np.asarray(s).reshape(-1)[0])
    return bool(np.isfinite(v * np.float32(256)) and v >= np.finfo(np.float32).tiny)


def fuse_activations(g: Graph) -> Graph:
    """QLinearConv / QGemm followed by an activation on its 8-bit output become their clamp variants (see above).
    Repeats until nothing changes (a chain of activations narrows the clamp step by step).

    In one sweep: a fusion changes only the fused node (now writing the activation's output) and drops nodes
    read by it alone, so the nodes before it never fuse anew and the sweep retries the fused node in place; the
    former rescan of the whole graph after each fusion was quadratic (a 20k-layer conv + relu chain)."""
    from ..reference.quantize_linear import quantize_values

    outputs = {t.name for t in g.outputs}
    _, consumers = _maps(g)

    def only_user(name: str) -> Node | None:
        users = consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in outputs else None

    nodes = list(g.nodes)
    gone_ids: set[int] = set()
    k = 0
    while k < len(nodes):
        p = nodes[k]
        if id(p) in gone_ids or (change := _fusion(g, p, only_user, quantize_values)) is None:
            k += 1
            continue
        _, gone, new = change
        gone_ids.update(id(n) for n in gone)
        nodes[k] = new  # retried: a chain of activations narrows the clamp step by step
    if not gone_ids:
        return g
    return Graph([n for n in nodes if id(n) not in gone_ids], g.inputs, g.outputs, g.consts)


def _fusion(g: Graph, p: Node, only_user, quantize_values) -> tuple[Node, list[Node], Node] | None:
    """(p, the nodes fused away, p's clamp variant) where `p` fuses with the activation after it, else None."""
    if p.op not in CLAMP_OPS or not p.outputs or (u := only_user(p.outputs[0])) is None:
        return None
    b = _int_bounds(g, p)
    if b is None:
        return None
    _, _, scale, zp, dt = b
    qmin, qmax = _QRANGE[dt]
    if u.op in ACT_OPS and u.outputs:  # integer Relu / Clip on the 8-bit tensor
        bounds = None
        if u.op == "Relu":
            bounds = (0, qmax) if dt == np.int8 else None  # Relu has no uint8 form in ONNX
        elif (cb := _clip_bounds(g, u)) is not None and all(
                not name or np.asarray(g.consts[name]).dtype == dt for name in u.inputs[1:3]):
            bounds = (int(np.clip(np.ceil(cb[0]), qmin, qmax)), int(np.clip(np.floor(cb[1]), qmin, qmax)))
        if bounds is not None and (new := _clamped(g, p, bounds[0], bounds[1], u.outputs[0])) is not None:
            return p, [u], new
    elif u.op == "DequantizeLinear" and (a := only_user(u.outputs[0])) is not None and a.op in ACT_OPS:
        q = only_user(a.outputs[0])
        if q is None or q.op != "QuantizeLinear" or not all(not i or i in g.consts for i in u.inputs[1:]):
            return None
        if not all(not i or i in g.consts for i in q.inputs[1:]) or not _same_qparams(g, u, q):
            return None
        us = np.asarray(g.consts[u.inputs[1]])
        uz = (np.asarray(g.consts[u.inputs[2]]) if len(u.inputs) > 2 and u.inputs[2]
              else np.zeros((), np.uint8))
        if us.size != 1 or np.float32(us.reshape(())) != scale or int(uz.reshape(())) != zp or uz.dtype != dt:
            return None
        cb = _clip_bounds(g, a)
        if cb is None or np.isnan(cb).any() or cb[0] > cb[1]:
            return None
        with np.errstate(over="ignore"):
            lo, hi = (int(v) for v in quantize_values(np.array(cb, np.float32), scale, zp, dt))
        if (new := _clamped(g, p, lo, hi, q.outputs[0])) is not None:
            return p, [u, a, q], new
    return None


def _detach_float_activations(g: Graph, maps: tuple | None = None) -> tuple[Graph, list[tuple[Node, Node, Node]]]:
    """Float Conv/Gemm -> Relu/Clip -> Q that drop_redundant_activations kept: the activation is taken out so
    that fold_qdq can fold Conv -> Q; _reattach puts it back as a clamp, or as the node where nothing folded.
    `maps`: _maps(g), where the caller has them."""
    outputs = {t.name for t in g.outputs}
    producer, consumers = maps or _maps(g)
    taken = []
    for a in g.nodes:
        if a.op not in ACT_OPS or a.outputs[0] in outputs or _clip_bounds(g, a) is None:
            continue
        users, src = consumers.get(a.outputs[0], []), producer.get(a.inputs[0])
        if len(users) != 1 or users[0].op != "QuantizeLinear" or src is None or src.op not in ("Conv", "Gemm",
                                                                                                 "MatMul"):
            continue
        if len(consumers.get(src.outputs[0], [])) != 1 or src.outputs[0] in outputs:
            continue
        taken.append((src, a, users[0]))
    if not taken:
        return g, []
    drop = {id(a) for _, a, _ in taken}
    qs = {id(q): a for _, a, q in taken}
    nodes = []
    for n in g.nodes:
        if id(n) in drop:
            continue
        if id(n) in qs:
            n = Node(n.op, n.name, [qs[id(n)].inputs[0], *n.inputs[1:]], n.outputs, n.attrs)
        nodes.append(n)
    return Graph(nodes, g.inputs, g.outputs, g.consts), taken


def _reattach(g: Graph, taken: list[tuple[Node, Node, Node]]) -> Graph:
    if not taken:
        return g
    producer = {o: n for n in g.nodes for o in n.outputs}  # (_maps' producers: its readers lists went unused)
    # Each node's replacement list, spliced in once at the end (a search and an insertion per activation was
    # quadratic on a long conv chain).
    nodes: list[list[Node]] = [[n] for n in g.nodes]
    where = {id(n): k for k, n in enumerate(g.nodes)}
    for _src, a, q in taken:
        p = producer[q.outputs[0]]
        i = where[id(p)]
        if p.op == "QuantizeLinear":  # nothing folded: the activation goes back between its producer and the Q
            nodes[i] = [a, q]  # (the original Q, which reads the activation)
            continue
        new = None
        if p.op in CLAMP_OPS and (b := _int_bounds(g, p)) is not None:
            lo, hi = _clip_bounds(g, a)
            if lo <= hi:
                with np.errstate(over="ignore"):
                    qlo, qhi = _clip_to_int(lo, hi, b[2], b[3], b[4])
                new = _clamped(g, p, qlo, qhi, q.outputs[0])
        if new is not None:
            nodes[i] = [new]
            continue
        # Folded, but with no clamp form: the activation runs between a DQ and a Q with the output's parameters
        # (what the clamp would compute; fuse_activations may still turn it into one).
        tmp = f"{q.outputs[0]}__pre_activation"
        dq = Node("DequantizeLinear", f"{a.name}__dq", [tmp, *q.inputs[1:]], [a.inputs[0]], dict(q.attrs))
        nodes[i] = [Node(p.op, p.name, p.inputs, [tmp], p.attrs), dq, a, q]
    return Graph([n for run in nodes for n in run], g.inputs, g.outputs, g.consts)


def fold_constants(g: Graph, keep: frozenset[str] = frozenset()) -> Graph:
    """Nodes whose inputs are all constants run once now, with the op table's kernels on device "reference"
    (the numerics every device shares); their outputs become constants and the nodes go. Ops named in `keep`
    stay (QDQ folding needs its DequantizeLinear nodes), and so does a node whose kernel raises: the error
    then comes at run time, with the node's name."""
    from .op_table import OPS

    inputs = {t.name for t in g.inputs}
    consts = g.consts
    nodes = []
    for n in g.nodes:
        ins = n.inputs
        if ins and ins[0] and ins[0] not in consts:  # (most nodes: the loop below stops there)
            nodes.append(n)
            continue
        foldable = n.op in OPS and n.op not in keep
        if foldable:  # every input a constant (empty names skipped), and at least one given
            given = False
            for i in n.inputs:
                if i:
                    if i not in consts:
                        foldable = False
                        break
                    given = True
            foldable = foldable and given
        if foldable and not any(o in inputs for o in n.outputs):
            try:
                outs = OPS[n.op](Node(n.op, n.name, list(n.inputs), list(n.outputs), dict(n.attrs)),
                                 [consts[i] if i else None for i in n.inputs], {})
            except (ValueError, TypeError, KeyError, IndexError):
                nodes.append(n)
                continue
            for name, v in zip(n.outputs, outs, strict=False):
                if name:
                    consts[name] = np.asarray(v)
            continue
        nodes.append(n)
    return g if len(nodes) == len(g.nodes) else Graph(nodes, g.inputs, g.outputs, consts)


def optimize(g: Graph) -> Graph:
    """The import pipeline: constant folding (DequantizeLinear kept for the QDQ patterns), ORT's
    redundant-activation removal, QDQ folding, activation fusion, constant folding, float elementwise chains
    between 8-bit tensors into tables (vkinfer/model/tables.py), constant folding of what is left. A malformed
    graph raises ValueError (check_graph) before any pass."""
    from .conv_transpose import QOP, expand_conv_transpose
    from .layer_norm_fuse import fuse_layer_norm_chains
    from .lstm_outputs import pack_lstm_state
    from .matmul_add_fuse import fuse_matmul_add
    from .moves import split_to_slices
    from .qdq_rules import PROPAGATE, drop_argmax_dq, fold_matmul_to_float, propagate_qdq
    from .quant_ops import split_transposed_a
    from .tables import BINARY_QOPS, TABLE2, fold_constant_operands, fold_self_products, fold_tables
    from .weight_quant import OPS as WEIGHT_OPS
    from .weight_quant import quantize_float_weights

    check_graph(g)
    # Each pass runs only where an op it rewrites is in the graph (a pass finding none returns its graph as it is,
    # at a cost per node: the 20k-layer QLinearAdd chain spent 0.6 s in passes that had nothing to do).
    has, q, dq, act = _Ops(), "QuantizeLinear", "DequantizeLinear", ACT_OPS
    may = _Candidates()  # (fold_constants and the binary-op table passes: where a node passes their first tests)
    g = fold_constants(g, keep=frozenset({dq})) if may(g, "fold_constants") else g
    if has(g, "MatMul") and has(g, "Add"):
        g = fuse_matmul_add(g)  # ORT's MatMulAddFusion, before its QDQ passes (vkinfer/model/matmul_add_fuse.py)
    if has(g, q) and has(g, dq) and has(g, *WEIGHT_OPS):
        g = quantize_float_weights(g)  # ORT's WeightBiasQuantization: float weights before a Q become int8
    g = split_to_slices(g) if has(g, "Split") else g
    if has(g, "LSTM"):
        g = pack_lstm_state(g)  # an LSTM whose Y_h or Y_c is read: one output, then Slices (model/lstm_outputs.py)
    g = propagate_qdq(g) if has(g, *PROPAGATE) else g  # ORT's QDQ propagation and dropDQ (model/qdq_rules.py)
    g = drop_argmax_dq(g) if has(g, "ArgMax") else g
    taken = []
    if has(g, q) and has(g, *act):
        kept = drop_redundant_activations(g, maps := _maps(g))  # (one walk for both, where it changes nothing)
        g, taken = _detach_float_activations(kept, maps if kept is g else None)
    g = fold_qdq(g) if has(g, q, dq) else g
    g = _reattach(expand_conv_transpose(g) if has(g, QOP) else g, taken)
    g = fuse_activations(g) if has(g, *CLAMP_OPS) and has(g, dq, *act) else g
    # What QDQ folding left of DQ -> MatMul/Gemm with a float output: ORT's MatMulIntegerToFloat (qdq_rules.py)
    g = fold_matmul_to_float(g) if has(g, dq) and has(g, "MatMul", "Gemm") else g
    if has(g, "com.microsoft:QGemm", "vkinfer:QGemmClamp"):
        g = split_transposed_a(g)  # QGemm transA=1 -> Transpose + QGemm (vkinfer/model/quant_ops.py)
    g = folded = fold_constants(g) if may(g, "fold_constants") else g
    g = fold_tables(g) if has(g, q) else g
    g = fold_constant_operands(g) if has(g, *BINARY_QOPS) and may(g, "fold_constant_operands") else g
    g = fold_self_products(g) if has(g, *BINARY_QOPS, TABLE2) and may(g, "fold_self_products") else g
    g = fuse_layer_norm_chains(g) if has(g, "ReduceMean") else g  # one node, same bits (model/layer_norm_fuse.py)
    # fold_constants is idempotent: on the graph it made, nothing more folds
    return _explicit_pads(g if g is folded else fold_constants(g), has)


def _explicit_pads(g: Graph, has: _Ops) -> Graph:
    """1-D convolutions as 2-D ones over a height of 1, then auto_pad resolved into explicit pads for static input
    shapes (vkinfer/reference/qlinear_conv.py conv1d_as_2d, vkinfer/reference/_auto_pad.py resolve_graph)."""
    from ..reference._auto_pad import CONV_OPS, POOL_OPS, resolve_graph
    from ..reference.qlinear_conv import conv1d_as_2d
    from .interpreter import trace
    if has(g, "QLinearConv", "vkinfer:QLinearConvClamp") and 3 in {  # a 1-D one has 3-D constant weights
            w.ndim if type(w) is np.ndarray else np.ndim(w) for w in g.consts.values()}:
        g = conv1d_as_2d(g)
    auto = has(g, *CONV_OPS, *POOL_OPS) and any("auto_pad" in n.attrs for n in g.nodes)  # (NOTSET where absent)
    return resolve_graph(g, trace) if auto else g
