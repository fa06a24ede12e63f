"""The decomposed layer norm as one node: `fuse_layer_norm_chains` (run by passes.optimize) finds

    X -> ReduceMean(axes) -> Sub(X, mean) -> Pow(d, 2) -> ReduceMean(axes) -> Add(eps) -> Sqrt -> Div(d, std)
      [-> Mul(gamma)] [-> Add(beta)]

all in float32 (eps a float32 constant of one element, so by ONNX's type rules every tensor of the chain is
float32), each intermediate read only inside the chain and not a graph output, both ReduceMeans with the same
constant axes and keepdims=1, the Pow's exponent a constant of one element equal to 2, gamma / beta float32
constants, and replaces it with one vkinfer:LayerNormChain node (vkinfer/reference/layer_normalization.py) named
after the chain's last node and writing its output. That op's kernels (numpy and cpu_fallback/src/ops/layer_norm.c)
compute exactly the bits of running the ops one by one as vkinfer runs them (ReduceMean's generic loop, d * d, one
IEEE operation per step in the chain's operand order), so fusing never changes an output; the native graph runs
the whole chain in one pass over trailing axes (other axes: the host runs the fused node, still the same bits).

Transformers exported below opset 17 and text recognizers carry this chain; in a float model ORT fuses it into
LayerNormalization, in ORT's QDQ models Q/DQ pairs sit inside it (host_float.py's docstring) and only all-float
stretches match here.
"""

from __future__ import annotations

import numpy as np

from ..reference.layer_normalization import CHAIN
from .graph import Graph, Node

_F32 = np.dtype(np.float32)


def _axes(g: Graph, n: Node) -> tuple[int, ...] | None:
    """A ReduceMean's constant axes (attribute or input), None when absent or not constant."""
    if len(n.inputs) > 1 and n.inputs[1]:
        a = g.consts.get(n.inputs[1])
        return None if a is None else tuple(int(v) for v in np.asarray(a).reshape(-1))
    a = n.attrs.get("axes")
    return tuple(int(v) for v in a) if a is not None and len(a) else None


def _scalar(g: Graph, name: str) -> np.ndarray | None:
    """A constant of one element and rank <= 1 (so it broadcasts without widening), else None."""
    v = g.consts.get(name)
    if v is None:
        return None
    v = np.asarray(v)
    return v if v.size == 1 and v.ndim <= 1 else None


def _other(n: Node, name: str) -> tuple[str, bool] | None:
    """The binary node's operand that is not `name`, and whether it comes first; None unless exactly one is."""
    if len(n.inputs) != 2 or n.inputs.count(name) != 1:
        return None
    first = n.inputs[0] != name
    return n.inputs[0 if first else 1], first


def _match(g: Graph, r1: Node, consumers: dict, outputs: set) -> tuple[list[Node], Node] | None:
    """The chain starting at ReduceMean `r1`: (its nodes, the fused node), or None."""
    def only(t: str, op: str) -> Node | None:
        c = consumers.get(t, [])
        return c[0] if len(c) == 1 and c[0].op == op and t not in outputs else None

    axes = _axes(g, r1)
    if axes is None or int(r1.attrs.get("keepdims", 1)) != 1:
        return None
    x, mean = r1.inputs[0], r1.outputs[0]
    sub = only(mean, "Sub")
    if sub is None or sub.inputs != [x, mean]:
        return None
    d = sub.outputs[0]
    users = consumers.get(d, [])
    if d in outputs or len(users) != 2 or {u.op for u in users} != {"Pow", "Div"}:
        return None
    pw = next(u for u in users if u.op == "Pow")
    div = next(u for u in users if u.op == "Div")
    two = _scalar(g, pw.inputs[1]) if len(pw.inputs) == 2 and pw.inputs[0] == d else None
    if two is None or float(two.reshape(())) != 2.0:
        return None
    r2 = only(pw.outputs[0], "ReduceMean")
    if r2 is None or r2.inputs[0] != pw.outputs[0] or _axes(g, r2) != axes or int(r2.attrs.get("keepdims", 1)) != 1:
        return None
    add = only(r2.outputs[0], "Add")
    eps_op = None if add is None else _other(add, r2.outputs[0])
    if eps_op is None:
        return None
    eps = _scalar(g, eps_op[0])
    if eps is None or eps.dtype != _F32:
        return None
    sq = only(add.outputs[0], "Sqrt")
    if sq is None or only(sq.outputs[0], "Div") is not div or div.inputs != [d, sq.outputs[0]]:
        return None
    nodes = [r1, sub, pw, r2, add, sq, div]
    params = {"gamma": ("", False), "beta": ("", False)}
    last = div
    for op, key in (("Mul", "gamma"), ("Add", "beta")):
        nxt = only(last.outputs[0], op)
        p = None if nxt is None else _other(nxt, last.outputs[0])
        if p is None or p[0] not in g.consts or np.asarray(g.consts[p[0]]).dtype != _F32:
            continue
        params[key] = p
        nodes.append(nxt)
        last = nxt
    (gamma, gf), (beta, bf) = params["gamma"], params["beta"]
    inputs = [x, eps_op[0], gamma, beta]
    while not inputs[-1]:
        inputs.pop()
    attrs = {"axes": list(axes), "eps_first": int(eps_op[1]), "gamma_first": int(gf), "beta_first": int(bf)}
    return nodes, Node(CHAIN, last.name, inputs, [last.outputs[0]], attrs)


def fuse_layer_norm_chains(g: Graph) -> Graph:
    """Each all-float layer-norm chain becomes one vkinfer:LayerNormChain node (module docstring)."""
    if not any(n.op == "ReduceMean" for n in g.nodes):
        return g
    consumers: dict[str, list[Node]] = {}
    for n in g.nodes:
        for i in set(n.inputs):
            if i:
                consumers.setdefault(i, []).append(n)
    outputs = {t.name for t in g.outputs}
    drop: set[int] = set()
    fused: dict[int, Node] = {}
    for n in g.nodes:
        if n.op != "ReduceMean" or id(n) in drop:
            continue
        m = _match(g, n, consumers, outputs)
        if m is None or any(id(c) in drop for c in m[0]):
            continue
        drop.update(id(c) for c in m[0])
        fused[id(m[0][-1])] = m[1]
    if not fused:
        return g
    nodes = [fused.get(id(n), n) for n in g.nodes if id(n) not in drop or id(n) in fused]
    return Graph(nodes, g.inputs, g.outputs, g.consts, g.meta)
