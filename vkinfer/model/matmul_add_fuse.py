"""ONNX Runtime's MatMulAddFusion (onnxruntime/core/optimizer/matmul_add_fusion.cc, a Level 1 transformer, so on at
ORT_ENABLE_BASIC and above): a float MatMul whose one reader is an Add of a bias becomes a Gemm with the bias as C.
The bits change: MLAS's SGEMM copies C into the output and accumulates the first K block onto it, where MatMul then
Add adds the bias after the whole sum (within 0.5 ulp of the largest partial sum, measured). Real models are
compared with ORT at ORT_ENABLE_ALL, so vkinfer makes the same Gemm under the same conditions, and its float Gemm
(vkinfer/reference/float_matmul.py, cpu_fallback/src/ops/float_gemm.c: C copied, then the K blocks) gives ORT's
bits.

ORT's conditions, as its shape inference sees the graph (vkinfer traces the declared input shapes; a dimension that
changes with a symbolic input dimension is unknown, as it is to ORT):
- MatMul with exactly one reader edge, the Add (Add-7 and later), its output not a graph output; both float32;
- B 2-D; A 2-D (any dimensions), or of another rank with every dimension known (B's too): then A is reshaped to
  (M, K) first and the Gemm's (M, N) back to A's leading dimensions and N. ORT 1.31.1 fuses attention projections
  too (newer sources skip an A made by Reshape(Transpose(MatMul(Softmax))) and, optionally, the MatMuls around a
  LayerNormalization feeding Q, K, V: measured, 1.31.1 does neither, tests/importers/test_matmul_add_fusion.py);
- the bias (the Add's other input) of shape (N,), or, for a 2-D A only, (1, N), (M, 1) or (M, N).
The Gemm is named `<MatMul's name>/MatMulAddFusion` as in ORT, and writes the Add's output.

In a QDQ model DQ(a), DQ(w) -> MatMul -> Add(bias) with no Q reading it becomes DQ, DQ -> Gemm(bias) here too (this
pass runs before the QDQ ones, as in ORT), which ORT keeps a float Gemm with a float bias and makes a QGemm with a
float output where the bias is a DequantizeLinear of an int32 constant; where the bias does not fit, ORT makes the
MatMul a MatMulIntegerToFloat before the Add (measured with optimized_model_filepath; vkinfer/model/qdq_rules.py
fold_matmul_to_float does all three)."""

from __future__ import annotations

import numpy as np

from .graph import Graph, Node

__all__ = ["fuse_matmul_add"]

_F32 = np.dtype(np.float32)


def _add_since(opset: int | None) -> int | None:
    """Add's since-version at the model's default-domain `opset` (ORT fuses Add-7, 13 and 14)."""
    return None if opset is None else max(v for v in (1, 6, 7, 13, 14) if v <= opset)


def _no_op(n: Node) -> bool:
    """Identity, or a Cast to float32 (of the MatMul's float32 output): ORT's Level 1 rules EliminateIdentity and
    CastElimination remove them before its MatMulAddFusion sees the graph again (open_nsfw's MatMul -> Cast -> Add)."""
    return len(n.outputs) == 1 and (n.op == "Identity" or (n.op == "Cast" and int(n.attrs.get("to", 0)) == 1))


def _candidates(g: Graph) -> list[tuple[Node, Node, str, list[Node]]]:
    """(MatMul, Add, the tensor the Add reads, the no-op nodes between): the MatMul's output read by one edge, the
    Add's (through Identity / float Cast nodes, each the one reader of the one before), and not a graph output."""
    outputs = {t.name for t in g.outputs}
    edges: dict[str, list[Node]] = {}
    for n in g.nodes:
        for i in n.inputs:
            if i:
                edges.setdefault(i, []).append(n)
    pairs = []
    for n in g.nodes:
        if n.op != "MatMul" or len(n.inputs) != 2 or len(n.outputs) != 1:
            continue
        t, chain = n.outputs[0], []
        while t not in outputs and len(edges.get(t, [])) == 1 and _no_op(edges[t][0]):
            chain.append(edges[t][0])
            t = chain[-1].outputs[0]
        readers = edges.get(t, [])
        if t in outputs or len(readers) != 1 or readers[0].op != "Add" or len(readers[0].inputs) != 2:
            continue
        add = readers[0]
        since = _add_since(add.attrs.get("_opset"))
        if since is not None and since < 7 or add.inputs[0] == add.inputs[1]:
            continue
        pairs.append((n, add, t, chain))
    return pairs


def _shapes(g: Graph) -> dict[str, tuple[tuple, np.dtype]] | None:
    """Every tensor's (shape, dtype), the shape as ORT's inference would know it: dimensions as ints, None where
    unknown (one that follows a symbolic input dimension). Traces the declared input shapes (a symbolic dimension
    as 2, then 3); None when an input's rank is unknown or the trace fails."""
    from .interpreter import trace

    def feed(sym: int) -> dict | None:
        f = {}
        for t in g.inputs:
            if t.shape is None:
                return None
            f[t.name] = np.zeros(tuple(d if isinstance(d, int) and d > 0 else sym for d in t.shape), t.dtype)
        return f

    first = feed(2)
    if first is None:
        return None
    try:
        one = trace(g, first)
    except (ValueError, TypeError):
        return None
    symbolic = any(not (isinstance(d, int) and d > 0) for t in g.inputs for d in t.shape)
    two = one
    if symbolic:
        try:
            two = trace(g, feed(3))
        except (ValueError, TypeError):
            two = {}
    out = {}
    for name, (shape, dtype) in one.items():
        other = two.get(name, (None, None))[0]
        if other is not None and len(other) != len(shape):
            continue  # the rank itself follows the input's size: unknown
        dims = tuple(int(d) if other is not None and d == other[i] else None for i, d in enumerate(shape))
        out[name] = (dims, np.dtype(dtype))
    out.update({k: (tuple(np.shape(v)), np.asarray(v).dtype) for k, v in g.consts.items()})
    return out


def fuse_matmul_add(g: Graph) -> Graph:
    """`g` with each MatMul -> Add(bias) that ORT's MatMulAddFusion fuses as the same Gemm (module docstring)."""
    pairs = _candidates(g)
    if not pairs:
        return g
    info = _shapes(g)
    if info is None:
        return g
    taken = {n.name for n in g.nodes} | set(g.consts) | {o for n in g.nodes for o in n.outputs}
    consts = dict(g.consts)

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        return name

    replace: dict[int, list[Node]] = {}
    drop: set[int] = set()
    for mm, add, read, chain in pairs:
        a, b = mm.inputs
        bias = add.inputs[1] if add.inputs[0] == read else add.inputs[0]
        if not all(t in info for t in (a, b, bias, add.inputs[0])):
            continue
        (sa, ta), (sb, _), (sc, _) = info[a], info[b], info[bias]
        if len(sb) != 2 or ta != _F32 or info[add.inputs[0]][1] != _F32:  # ORT: Gemm's float types, A's = the Add's
            continue
        reshape = len(sa) != 2
        n_dim = sb[1]
        if reshape and (None in sa or None in sb):
            continue

        def same(x, y) -> bool:
            return x is not None and x == y
        ok = ((len(sc) == 1 and same(sc[0], n_dim))
              or (not reshape and len(sc) == 2 and sc[0] == 1 and same(sc[1], n_dim))
              or (not reshape and len(sc) == 2 and same(sc[0], sa[0]) and (sc[1] == 1 or same(sc[1], n_dim))))
        if not ok:
            continue
        keep = {k: v for k, v in mm.attrs.items() if k in ("_opset", "_b_initializer")}
        gemm_name = fresh(f"{mm.name}/MatMulAddFusion")
        if not reshape:
            replace[id(add)] = [Node("Gemm", gemm_name, [a, b, bias], list(add.outputs), keep)]
        else:
            m = int(np.prod(sa[:-1], dtype=np.int64))
            k, n = int(sb[0]), int(sb[1])
            shp_in, shp_out = fresh(f"{mm.name}/gemm_input_shape"), fresh(f"{mm.name}/gemm_output_shape")
            consts[shp_in] = np.array([m, k], np.int64)
            consts[shp_out] = np.array([*sa[:-1], n], np.int64)
            a2, y2 = fresh(f"{mm.name}/gemm_input_reshape_arg"), fresh(f"{mm.name}/gemm_output_reshape_arg")
            ropset = {"_opset": mm.attrs.get("_opset")}
            replace[id(add)] = [
                Node("Reshape", fresh(f"{mm.name}/gemm_input_reshape"), [a, shp_in], [a2], dict(ropset)),
                Node("Gemm", gemm_name, [a2, b, bias], [y2], keep),
                Node("Reshape", fresh(f"{mm.name}/gemm_output_reshape"), [y2, shp_out], list(add.outputs),
                     dict(ropset))]
        drop.update(id(n) for n in (mm, *chain))
    if not replace:
        return g
    nodes: list[Node] = []
    for n in g.nodes:
        if id(n) in drop:
            continue
        nodes.extend(replace.get(id(n), [n]))
    return Graph(nodes, g.inputs, g.outputs, consts, dict(g.meta))

