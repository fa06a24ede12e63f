"""Graph rewriting passes.

fold_qdq: QDQ-format models (DequantizeLinear -> float op -> QuantizeLinear, as
onnxruntime.quantization.quantize_static writes by default) become the quantized ops ONNX Runtime
fuses them into, so the arithmetic is the integer arithmetic ORT runs:
  Conv -> QLinearConv, MatMul -> QLinearMatMul, Gemm -> com.microsoft:QGemm, Add -> QLinearAdd,
  GlobalAveragePool -> QLinearGlobalAveragePool, Concat -> QLinearConcat; and data-movement ops
  (Reshape, Flatten, Transpose, Squeeze, Unsqueeze, MaxPool) between a DQ and a Q with the same
  scale and zero point run on the 8-bit tensor directly (exact: they only move values). Pad likewise,
  with its float constant_value quantized once by the Q's parameters (what the float path's Q makes of
  the padded elements; exact since Q(DQ(v)) = v for every 8-bit v at a per-tensor scale).
DequantizeLinear/QuantizeLinear nodes left over (the model's edges) run as ops.
"""

from __future__ import annotations

import numpy as np

from .graph import Graph, Node

MOVE_OPS = {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "MaxPool"}


def _maps(g: Graph) -> tuple[dict[str, Node], dict[str, list[Node]]]:
    producer, consumers = {}, {}
    for n in g.nodes:
        for o in n.outputs:
            producer[o] = n
        for i in n.inputs:
            consumers.setdefault(i, []).append(n)
    return producer, consumers


def fold_qdq(g: Graph) -> Graph:
    outputs = {t.name for t in g.outputs}
    producer, consumers = _maps(g)

    def dq(name: str) -> Node | None:
        """The DequantizeLinear producing `name`, when its scale and zero point are constants."""
        n = producer.get(name)
        if n is None or n.op != "DequantizeLinear":
            return None
        return n if all(not i or i in g.consts for i in n.inputs[1:]) else None

    def single_q(name: str) -> Node | None:
        """The only consumer of `name`, when it is a QuantizeLinear with constant parameters."""
        users = consumers.get(name, [])
        if name in outputs or len(users) != 1 or users[0].op != "QuantizeLinear":
            return None
        q = users[0]
        return q if all(not i or i in g.consts for i in q.inputs[1:]) else None

    def zp(node: Node) -> str:
        return node.inputs[2] if len(node.inputs) > 2 else ""

    replaced: dict[int, Node] = {}  # id(float node) -> quantized node; its Q is dropped
    dropped: set[int] = set()
    for n in g.nodes:
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
        elif n.op == "Add" and ins[0] and ins[1]:
            a, b = ins
            new = Node("com.microsoft:QLinearAdd", n.name, [a.inputs[0], a.inputs[1], zp(a), b.inputs[0], b.inputs[1],
                                                            zp(b), q.inputs[1], zp(q)], [q.outputs[0]])
        elif n.op == "GlobalAveragePool" and ins[0]:
            x = ins[0]
            new = Node("com.microsoft:QLinearGlobalAveragePool", n.name,
                       [x.inputs[0], x.inputs[1], zp(x), q.inputs[1], zp(q)], [q.outputs[0]], {"channels_last": 0})
        elif n.op == "Concat" and all(ins):
            args = [q.inputs[1], zp(q)]
            for x in ins:
                args += [x.inputs[0], x.inputs[1], zp(x)]
            new = Node("com.microsoft:QLinearConcat", n.name, args, [q.outputs[0]], {"axis": n.attrs["axis"]})
        elif n.op in MOVE_OPS and ins[0] and _same_qparams(g, ins[0], q):
            new = Node(n.op, n.name, [ins[0].inputs[0]] + n.inputs[1:], [q.outputs[0]], dict(n.attrs))
        elif n.op == "Pad" and ins[0] and _same_qparams(g, ins[0], q) and _exact_roundtrip(g, q):
            new = _fold_pad(g, n, ins[0], q, dq)
        if new is not None:
            replaced[id(n)] = new
            dropped.add(id(q))
    nodes = [replaced.get(id(n), n) for n in g.nodes if id(n) not in dropped]
    # DequantizeLinear nodes nobody reads any more (their float outputs were only fused away).
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


def _fold_pad(g: Graph, n: Node, x: Node, q: Node, dq) -> Node | None:
    """Pad on the 8-bit tensor: DQ -> Pad(c) -> Q is Pad(Q(c)) when both sides share (scale, zero point)."""
    from ..reference.dequantize_linear import dequantize_linear
    from ..reference.quantize_linear import quantize_linear

    mode = n.attrs.get("mode", "constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if len(n.inputs) > 1:  # opset 11+: pads, constant_value, axes as inputs
        pads = n.inputs[1]
        axes = n.inputs[3] if len(n.inputs) > 3 else ""
        cname = n.inputs[2] if len(n.inputs) > 2 else ""
        if not cname:
            c = np.float32(0)
        elif cname in g.consts:
            c = g.consts[cname]
        elif (cdq := dq(cname)) is not None and cdq.inputs[0] in g.consts:
            c = dequantize_linear(g.consts[cdq.inputs[0]], *(g.consts[i] for i in cdq.inputs[1:] if i))
        else:
            return None
    else:  # opset 2: attributes
        pads = f"{n.name}__pads"
        g.consts[pads] = np.asarray(n.attrs["pads"], np.int64)
        axes, c = "", np.float32(n.attrs.get("value", 0.0))
    c = np.asarray(c)
    if c.size != 1 or c.dtype != np.float32 or np.isnan(c).any():
        return None
    scale, zero = g.consts[q.inputs[1]], g.consts[q.inputs[2]] if len(q.inputs) > 2 and q.inputs[2] else None
    value = f"{n.name}__qpad_value"
    g.consts[value] = np.asarray(quantize_linear(c.reshape(()), scale.reshape(()),
                                                 None if zero is None else zero.reshape(()), dtype=_q_dtype(g, q)))
    args = [x.inputs[0], pads, value if mode == "constant" else ""] + ([axes] if axes else [])
    return Node("Pad", n.name, args, [q.outputs[0]], {"mode": mode})


def _q_dtype(g: Graph, q: Node):
    """The 8-bit type of the folded tensor: the Q's zero point type, else uint8 (ONNX's default)."""
    return g.consts[q.inputs[2]].dtype if len(q.inputs) > 2 and q.inputs[2] else np.dtype(np.uint8)
