"""ONNX Runtime 1.31's QDQ rewrites that vkinfer/model/passes.fold_qdq does not do itself (docs/numerics.md,
"ORT's QDQ fusions and vkinfer's folds", has the whole table; tests/importers/test_qdq_rules.py checks each rule
against ORT at ORT_ENABLE_ALL):

- `propagate_qdq` (ORT's QDQPropagationTransformer, before its QDQ fusions): a DequantizeLinear whose only reader
  is a MaxPool, Reshape, Transpose, Squeeze, Unsqueeze or Slice (input 0) gets a Q -> DQ pair with its own scalar
  parameters after that node (on every edge that does not already end in a Q, then on through the next such node);
  a QuantizeLinear whose input comes through such nodes gets one before each of them, back to a DQ or a graph input.
  Each pair is exact where it stands (those ops only move or compare values, so quantizing after them is
  quantizing before them), and it lets the move fold onto the 8-bit tensor and the float op behind it (a Conv, a
  MatMul) become its integer kernel, as in ORT: DQ -> Transpose -> MatMul(DQ w) -> Q is an 8-bit Transpose and a
  QLinearMatMul there, not a float MatMul.
- `fold_rule` (called by fold_qdq for ops it has no branch of its own for): ORT's
  "drop_no_int16_support_and_positive_scale"
  group, ReduceMax and ReduceMin between a DQ and a Q of the same (positive, scalar) parameters run on the 8-bit
  tensor (ORT runs its uint8/int8 reduce kernels there; Q(max(DQ(v))) = max(v) as Q and DQ are monotone and Q(DQ(v))
  = v). MaxPool's own fold (passes.MOVE_OPS) carries the same positive-scale condition (`positive_scale`): with a
  negative scale ORT keeps it in float, where max becomes min.
- `drop_argmax_dq` (ORT's "dropDQ" rule): ArgMax reading a DQ with constant scalar parameters that nothing else
  reads runs on the 8-bit tensor (ORT's uint8/int8 ArgMax), whatever the scale's sign.
- `fold_matmul_to_float` (ORT's MatMul rule with no Q after it): DQ(a) and DQ(constant b) -> MatMul with a float
  output becomes com.microsoft MatMulIntegerToFloat (ORT's int32-sum-then-one-multiply bits). Not yet called by
  passes.optimize: it waits for a native CPU lowering (the host would put Python on the hot path).
"""

from __future__ import annotations

import numpy as np
import onnx

from .graph import Graph, Node

# ORT's CanNodePropagate: op -> the ONNX since-versions it propagates through (a newer version of the op, as
# opset 21's Reshape, is not propagated: measured against ORT 1.31.1, tests/importers/test_qdq_rules.py).
PROPAGATE = {"MaxPool": (12,), "Reshape": (5, 13, 14, 19), "Transpose": (1, 13), "Squeeze": (1, 11, 13),
             "Unsqueeze": (1, 11, 13), "Slice": (1, 10, 11, 13)}
REDUCE_RULE = ("ReduceMax", "ReduceMin")


def _since(op: str, opset: int) -> int:
    try:
        return int(onnx.defs.get_schema(op, opset).since_version)
    except onnx.defs.SchemaError:
        return -1


def _scalar_params(g: Graph, n: Node) -> bool:
    """A Q or DQ with a constant scalar scale and (absent or) constant scalar zero point of 8 bits."""
    if len(n.inputs) < 2 or n.inputs[1] not in g.consts or np.asarray(g.consts[n.inputs[1]]).size != 1:
        return False
    if len(n.inputs) > 2 and n.inputs[2]:
        z = g.consts.get(n.inputs[2])
        return z is not None and np.asarray(z).size == 1 and np.asarray(z).dtype in (np.uint8, np.int8)
    return n.op == "DequantizeLinear" or "output_dtype" not in n.attrs


def positive_scale(g: Graph, n: Node) -> bool:
    """`n` (a Q or DQ) has one constant scale, a finite float32 > 0 (ORT's IsQOrDQScalePositiveConstantScalar)."""
    s = g.consts.get(n.inputs[1]) if len(n.inputs) > 1 else None
    if s is None or np.asarray(s).size != 1 or np.asarray(s).dtype != np.float32:
        return False
    v = np.float32(np.asarray(s).reshape(()))
    return bool(np.isfinite(v) and v > 0)


def _propagates(n: Node) -> bool:
    opset = n.attrs.get("_opset")
    return n.op in PROPAGATE and opset is not None and _since(n.op, int(opset)) in PROPAGATE[n.op]


def propagate_qdq(g: Graph) -> Graph:
    """ORT's QDQ propagation (module docstring) on `g` (each node's opset is its "_opset" attribute)."""
    if not any(_propagates(n) for n in g.nodes):
        return g
    # The DQs and Qs that may propagate: a DQ read by a node that may propagate, a Q reading one's output (their
    # readers and producers among the nodes of such ops only ever shrink below: rewired nodes keep their ops, and
    # the nodes added are Qs and DQs). The others' turns below change nothing and call no _propagates, so they are
    # skipped, and where none is left the indexes below are not made (a Transpose chain's 0.1 s).
    dqs = [n for n in g.nodes if n.op == "DequantizeLinear"]
    qs = [n for n in g.nodes if n.op == "QuantizeLinear"]
    if not dqs and not qs:
        return g
    read, written = set(), set()
    for n in g.nodes:
        if n.op in PROPAGATE:
            read.update(n.inputs)
            written.update(n.outputs)
    dqs = [n for n in dqs if n.outputs[0] in read and _scalar_params(g, n)]
    qs = [n for n in qs if len(n.inputs) > 1 and n.inputs[0] in written and _scalar_params(g, n)]
    if not dqs and not qs:
        return g
    outputs = {t.name for t in g.outputs}
    fresh = iter(range(1 << 30))
    # The node list as slots with sort keys (a node inserted after `src` sorts right after it, before anything
    # inserted there earlier) and reader / producer indexes kept up to date: scanning the list for each reader
    # and producer was quadratic on long QDQ models. A node replaced keeps its slot; a replaced node object
    # still names its slot (`slot_of`, with `held` keeping those objects, hence their ids, alive).
    key: list[tuple] = [(k,) for k in range(len(g.nodes))]
    node_at: list[Node] = []
    slot_of: dict[int, int] = {}
    held: list[Node] = []
    readers_of: dict[str, dict[int, None]] = {}
    producer_of: dict[str, int] = {}
    stamp = iter(range(1, 1 << 62))

    def put(slot: int, node: Node) -> Node:
        if slot == len(node_at):
            node_at.append(node)
        else:
            old = node_at[slot]
            for i in old.inputs:
                readers_of.get(i, {}).pop(slot, None)
            for o in old.outputs:
                if producer_of.get(o) == slot:
                    del producer_of[o]
            node_at[slot] = node
        slot_of[id(node)] = slot
        held.append(node)
        for i in node.inputs:
            readers_of.setdefault(i, {})[slot] = None
        for o in node.outputs:
            producer_of.setdefault(o, slot)
        return node

    node_at[:] = held[:] = g.nodes  # put(k, node) for each node in order, without its calls
    slot_of.update({id(n): k for k, n in enumerate(node_at)})
    # Indexed: the names the turns below look up, those of the moves' inputs and outputs (the DQs' and Qs' above
    # among them), or the names of the nodes put() adds (all with "__qdqp"); indexing every name was 0.2 s on a
    # 100k-node QDQ chain with one Transpose pair.
    scope = read | written
    for k, n in enumerate(node_at):
        for i in n.inputs:
            if i in scope or "__qdqp" in i:
                r = readers_of.get(i)
                if r is None:
                    readers_of[i] = {k: None}
                else:
                    r[k] = None
        for o in n.outputs:
            if o in scope or "__qdqp" in o:
                producer_of.setdefault(o, k)

    def readers(name: str) -> list[tuple[Node, int]]:
        slots = sorted(readers_of.get(name, ()), key=key.__getitem__)
        return [(node_at[s], k) for s in slots for k, i in enumerate(node_at[s].inputs) if i == name]

    def producer(name: str) -> Node | None:
        s = producer_of.get(name)
        return None if s is None else node_at[s]

    def insert_pair(name: str, edges: list[tuple[Node, int]], like: Node, src: Node | None) -> list[Node]:
        """Q(name) -> one DQ per reader edge (`like`'s parameters and opset); a graph output `name` keeps its
        name (a DQ writes it, the producer a fresh one). Returns the readers, rewired."""
        k = next(fresh)
        base = f"{name}__qdqp{k}"
        params = list(like.inputs[1:3])
        attrs = {a: v for a, v in like.attrs.items() if a == "_opset"}
        pre = name
        new: list[Node] = []
        src_slot = slot_of[id(src)] if src is not None else None
        if name in outputs and src is not None:
            pre = base + "_pre"
            src = node_at[src_slot]
            src = put(src_slot, Node(src.op, src.name, src.inputs, [pre if o == name else o for o in src.outputs],
                                     src.attrs))
            new.append(Node("DequantizeLinear", base + "_dqout", [base + "_q", *params], [name], dict(attrs)))
        new.insert(0, Node("QuantizeLinear", base + "_q", [pre, *params], [base + "_q"], dict(attrs)))
        rewired = []
        for e, (dst, arg) in enumerate(edges):
            out = f"{base}_dq{e}"
            new.append(Node("DequantizeLinear", out, [base + "_q", *params], [out], dict(attrs)))
            i = slot_of[id(dst)]
            cur = node_at[i]
            rewired.append(put(i, Node(cur.op, cur.name, [out if j == arg else v for j, v in enumerate(cur.inputs)],
                                       cur.outputs, cur.attrs)))
        at = (key[src_slot] if src_slot is not None else ()) + (-next(stamp),)
        for j, n in enumerate(new):
            key.append(at + (j,))
            put(len(node_at), n)
        return rewired

    # DQ forward (PropagateDQForward): only a DQ read by exactly one node, through node input 0.
    for dq in dqs:
        users = readers(dq.outputs[0])
        if len(users) != 1 or dq.outputs[0] in outputs:
            continue
        todo = list(users)
        while todo:
            node, arg = todo.pop()
            if not _propagates(node) or arg != 0:
                continue
            y = node.outputs[0]
            rs = readers(y)
            if y in outputs:
                if rs:
                    continue  # ORT: an output that is also read propagates nowhere
                edges = []
            else:
                edges = [(n, k) for n, k in rs if n.op != "QuantizeLinear"]
                if not edges:
                    continue
            for dst in insert_pair(y, edges, dq, node):
                todo.extend((dst, k) for k, i in enumerate(dst.inputs) if i.startswith(y + "__qdqp"))
    # Q backward (PropagateQBackward): through single-reader edges into input 0, up to a DQ, a graph input or an
    # initializer.
    for q in qs:
        x = q.inputs[0]
        p = producer(x)
        if p is None or x in outputs or len(readers(x)) != 1:
            continue
        while p is not None and _propagates(p):
            name = p.inputs[0]
            src = producer(name)
            if name in g.consts or (src is not None and src.op == "DequantizeLinear"):
                break
            if src is not None and (len(readers(name)) != 1 or name in outputs):
                break
            insert_pair(name, [(p, 0)], q, src)
            p = src
    if len(node_at) == len(g.nodes):
        return g
    nodes = [node_at[s] for s in sorted(range(len(node_at)), key=key.__getitem__)]
    return Graph(nodes, g.inputs, g.outputs, g.consts, dict(g.meta))


def fold_rule(g: Graph, n: Node, x: Node | None, q: Node, same_qparams) -> Node | None:
    """The 8-bit node fold_qdq puts in place of DQ(x) -> n -> Q, for the rules of this module, or None."""
    if n.op in REDUCE_RULE and x is not None and same_qparams(g, x, q) and positive_scale(g, q):
        return Node(n.op, n.name, [x.inputs[0], *n.inputs[1:]], [q.outputs[0]], dict(n.attrs))
    return None


def drop_argmax_dq(g: Graph) -> Graph:
    """ArgMax straight on the 8-bit tensor of a DQ (scalar constant parameters) it alone reads (ORT's dropDQ)."""
    outputs = {t.name for t in g.outputs}
    prod = {o: n for n in g.nodes for o in n.outputs}
    count: dict[str, int] = {}
    for n in g.nodes:
        for i in n.inputs:
            count[i] = count.get(i, 0) + 1
    nodes = []
    changed = False
    for n in g.nodes:
        d = prod.get(n.inputs[0]) if n.op == "ArgMax" and n.inputs else None
        if (d is not None and d.op == "DequantizeLinear" and _scalar_params(g, d) and count[d.outputs[0]] == 1
                and d.outputs[0] not in outputs):
            n = Node(n.op, n.name, [d.inputs[0], *n.inputs[1:]], n.outputs, n.attrs)
            changed = True
        nodes.append(n)
    return Graph(nodes, g.inputs, g.outputs, g.consts) if changed else g


def fold_matmul_to_float(g: Graph) -> Graph:
    """ORT's MatMul QDQ rule without a Q (MatMulReplaceWithQLinear's float branch): DequantizeLinear(a 8-bit
    activation, scalar parameters) and DequantizeLinear(b, constant, scalar or per-column parameters) -> MatMul whose
    output no QuantizeLinear reads becomes com.microsoft MatMulIntegerToFloat (int32 sums, one float32 multiply:
    vkinfer/reference/matmul_integer_to_float.py). A MatMul -> Add(bias) that ORT's MatMulAddFusion makes a Gemm is
    one already (vkinfer/model/matmul_add_fuse.py, which runs first): a float bias keeps it a float Gemm, an int32 DQ
    bias makes it a QGemm (below); one it does not fuse (a bias of another shape) becomes MatMulIntegerToFloat before
    the Add, as in ORT (measured against ORT 1.31.1, tests/importers/test_matmul_add_fusion.py). A Gemm (alpha 1,
    transA 0) without C is the same (ORT's QGemm with a float output: the same bits). Other Gemms ORT makes a QGemm
    with a float output become one here too (`_qgemm_float_ok`: alpha != 1 or transA without C, or an int32 C with
    alpha 1 and beta 1, added to the int32 sums before the multiply: vkinfer/reference/qgemm.py); a float C stays a
    float Gemm, as in ORT. int8 activations
    follow session.qdqisint8allowed=1, as fold_qdq's other int8 folds do (without it ORT on x86 keeps them float)."""
    prod = {o: n for n in g.nodes for o in n.outputs}
    readers: dict[str, list[Node]] = {}
    for n in g.nodes:
        for i in n.inputs:
            readers.setdefault(i, []).append(n)
    nodes, changed = [], False
    consts = dict(g.consts)
    for n in g.nodes:
        a, b = (prod.get(i) for i in (n.inputs + ["", ""])[:2]) if n.op in ("MatMul", "Gemm") else (None, None)
        trans_b = int(n.attrs.get("transB", 0)) if n.op == "Gemm" else 0
        gemm_ok = n.op == "MatMul" or ((len(n.inputs) < 3 or not n.inputs[2]) and not int(n.attrs.get("transA", 0))
                                        and float(n.attrs.get("alpha", 1.0)) == 1.0)
        qgemm = n.op == "Gemm" and not gemm_ok and _qgemm_float_ok(g, n, prod)
        if ((gemm_ok or qgemm) and a is not None and b is not None and a.op == b.op == "DequantizeLinear"
                and _scalar_params(g, a) and b.inputs[0] in g.consts and _column_params(g, b, 1 - trans_b)
                and _kernel_types(g, a, b)
                and not any(r.op == "QuantizeLinear" for r in readers.get(n.outputs[0], []))):
            if qgemm:  # ORT's QGemm with a float output: an int32 C joins the sums (reference/qgemm.py)
                c = prod[n.inputs[2]].inputs[0] if len(n.inputs) > 2 and n.inputs[2] else ""
                za, zb = (d.inputs[2] if len(d.inputs) > 2 else "" for d in (a, b))
                n = Node("com.microsoft:QGemm", n.name, [a.inputs[0], a.inputs[1], za, b.inputs[0], b.inputs[1], zb, c],
                         n.outputs, {k: v for k, v in n.attrs.items() if k in ("transA", "transB", "alpha")})
                changed = True
                nodes.append(n)
                continue
            zb = b.inputs[2] if len(b.inputs) > 2 else ""
            za = a.inputs[2] if len(a.inputs) > 2 else ""
            w = b.inputs[0]
            if trans_b:  # Gemm's B (N, K): the op takes (K, N)
                w = f"{w}__T{len(consts)}"
                consts[w] = np.ascontiguousarray(np.asarray(g.consts[b.inputs[0]]).T)
            n = Node("com.microsoft:MatMulIntegerToFloat", n.name, [a.inputs[0], w, a.inputs[1], b.inputs[1], za, zb],
                     n.outputs, {})
            changed = True
        nodes.append(n)
    if not changed:
        return g
    used = {i for n in nodes for i in n.inputs} | {t.name for t in g.outputs}
    nodes = [n for n in nodes if n.op != "DequantizeLinear" or any(o in used for o in n.outputs)]
    return Graph(nodes, g.inputs, g.outputs, consts, dict(g.meta))


def _qgemm_float_ok(g: Graph, n: Node, prod: dict) -> bool:
    """A float-output Gemm ORT 1.31 makes a QGemm of beyond the MatMulIntegerToFloat cases (measured): C absent
    (any alpha, transA), or C a DequantizeLinear of a constant int32 tensor with alpha 1 and beta 1 (C's scale and
    zero point are not read: ORT adds the raw int32 values)."""
    c = n.inputs[2] if len(n.inputs) > 2 else ""
    if not c:
        return True
    d = prod.get(c)
    return (d is not None and d.op == "DequantizeLinear" and d.inputs[0] in g.consts
            and np.asarray(g.consts[d.inputs[0]]).dtype == np.int32
            and float(n.attrs.get("alpha", 1.0)) == 1.0 and float(n.attrs.get("beta", 1.0)) == 1.0)


def _kernel_types(g: Graph, a: Node, b: Node) -> bool:
    """ORT's MatMulIntegerToFloat kernels: uint8 A with uint8 or int8 B, int8 A with int8 B only (measured: int8 A
    with uint8 B stays DQ, DQ, float MatMul in ORT 1.31.1)."""
    ta = np.asarray(g.consts[a.inputs[2]]).dtype if len(a.inputs) > 2 and a.inputs[2] else np.dtype(np.uint8)
    return ta == np.uint8 or np.asarray(g.consts[b.inputs[0]]).dtype == np.int8


def _column_params(g: Graph, dq: Node, axis: int) -> bool:
    """A constant 2-D 8-bit weight's DQ with a float32 scale (and zero point) scalar or one per output column (on
    the weight's `axis`: 1 for MatMul's (K, N), 0 for Gemm's transposed (N, K))."""
    w = np.asarray(g.consts[dq.inputs[0]])
    if w.ndim != 2 or w.dtype not in (np.uint8, np.int8) or len(dq.inputs) < 2 or dq.inputs[1] not in g.consts:
        return False
    s = np.asarray(g.consts[dq.inputs[1]])
    z = g.consts.get(dq.inputs[2]) if len(dq.inputs) > 2 and dq.inputs[2] else None
    if len(dq.inputs) > 2 and dq.inputs[2] and z is None:
        return False
    per_col = s.size != 1
    if s.dtype != np.float32 or (per_col and (s.shape != (w.shape[axis],) or int(dq.attrs.get("axis", 1)) % 2 != axis)):
        return False
    return z is None or (np.asarray(z).dtype == w.dtype and np.asarray(z).size == s.size)


def fold_pad(g: Graph, n: Node, x: Node, q: Node, dq) -> Node | None:
    """Pad on the 8-bit tensor: DQ -> Pad(c) -> Q is Pad(Q(c)) when both sides share (scale, zero point) (a fold of
    passes.fold_qdq; `dq` is its DequantizeLinear finder)."""
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
    elif "pads" not in n.attrs:
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
                                                 None if zero is None else zero.reshape(()), dtype=q_dtype(g, q)))
    args = [x.inputs[0], pads, value if mode == "constant" else ""] + ([axes] if axes else [])
    return Node("Pad", n.name, args, [q.outputs[0]], {"mode": mode})


def q_dtype(g: Graph, q: Node):
    """The 8-bit type of the folded tensor: the Q's zero point type, else uint8 (ONNX's default)."""
    return g.consts[q.inputs[2]].dtype if len(q.inputs) > 2 and q.inputs[2] else np.dtype(np.uint8)
