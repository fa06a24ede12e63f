"""Float elementwise chains between 8-bit tensors, folded into lookup tables.

ONNX Runtime's quantizer leaves float ops it has no quantized form for between a DequantizeLinear and a
QuantizeLinear: HardSigmoid, HardSwish, SiLU (x * Sigmoid(x)), GELU (Erf), Div/Mul/Add by constants, Clip,
Tanh... When every value such a chain reads comes from one 8-bit tensor (through a DequantizeLinear with one
scale and zero point) and scalar constants, the chain's 8-bit result is a function of one input byte: its 256
values are computed once by running the chain's own float kernels (the host's, vkinfer/model/op_table.py OPS,
which follow ONNX Runtime's float arithmetic where it can be reproduced: vkinfer/model/host_float.py) on the
256 dequantized values, and the chain becomes one `vkinfer:Table` node, which every device runs as a byte
lookup. Exact by construction: each table entry is the float path's result for that byte. Chains reading two
8-bit tensors become `vkinfer:Table2` nodes (65536 entries, indexed by a_byte * 256 + b_byte; numpy
broadcasting between the operands).

    vkinfer:Table(x, table)      table: uint8[256], indexed by x's raw byte; attribute dtype: output type
    vkinfer:Table2(a, b, table)  table: uint8[65536], indexed by a's raw byte * 256 + b's raw byte

`fold_tables` runs after QDQ folding (vkinfer/model/passes.py optimize), on what ORT's fusions left in float.
"""

from __future__ import annotations

import numpy as np

from .graph import Graph, Node
from .host_eigen import scalar_path
from .op_table import OPS, REQUIRED_INPUTS, _attr, _op

TABLE, TABLE2 = "vkinfer:Table", "vkinfer:Table2"
EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))
# Ops that act on each element alone: with scalar constant operands their result at an element depends only on
# the operands' values there. (Clip reads its bounds from inputs 1-2; PRelu's slope must be a scalar then.)
ELEMENTWISE = frozenset({
    "Abs", "Add", "Ceil", "Celu", "Clip", "Div", "Elu", "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish",
    "Identity", "LeakyRelu", "Log", "Max", "Min", "Mish", "Mul", "Neg", "Pow", "PRelu", "Reciprocal", "Relu",
    "Round", "Selu", "Sigmoid", "Sign", "Softplus", "Softsign", "Sqrt", "Sub", "Tanh", "ThresholdedRelu",
})
MAX_CHAIN = 64  # nodes per chain: a bound on the backward walk (MobileNetV3's longest chain has 3)

REQUIRED_INPUTS[TABLE] = (2, (0, 1))
REQUIRED_INPUTS[TABLE2] = (3, (0, 1, 2))


def _table_arg(t, size: int) -> np.ndarray:
    t = np.asarray(t)
    if t.dtype != np.uint8 or t.shape != (size,):
        raise ValueError(f"the table must be uint8[{size}], got {t.dtype}{list(t.shape)}")
    return t


def _out_dtype(node: Node) -> np.dtype:
    dt = _attr(node, "dtype")
    dt = np.dtype(dt.decode() if isinstance(dt, bytes) else dt)
    if dt not in EIGHT_BIT:
        raise ValueError(f"attribute dtype must be uint8 or int8, got {dt}")
    return dt


def _byte(x, what: str) -> np.ndarray:
    if not isinstance(x, np.ndarray) or x.dtype not in EIGHT_BIT:
        raise TypeError(f"{what} must be a uint8 or int8 tensor, got {getattr(x, 'dtype', type(x).__name__)}")
    return x.view(np.uint8)


@_op(TABLE)
def _table(node, x, memo):
    """y[i] = table[raw byte of x[i]], as the attribute dtype."""
    t = _table_arg(x[1], 256)
    return [t[_byte(x[0], "input x")].view(_out_dtype(node))]


@_op(TABLE2)
def _table2(node, x, memo):
    """y = table[a_byte * 256 + b_byte] with numpy broadcasting of a and b, as the attribute dtype."""
    t = _table_arg(x[2], 65536)
    a, b = _byte(x[0], "input a"), _byte(x[1], "input b")
    try:
        idx = np.add(a.astype(np.int32) * 256, b, dtype=np.int32)
    except ValueError as e:
        raise ValueError(f"inputs of shapes {list(a.shape)} and {list(b.shape)} do not broadcast") from e
    return [t[idx].view(_out_dtype(node))]


# ---------------------------------------------------------------------------------------------- the pass

def _scalar_param(g: Graph, name: str) -> bool:
    return not name or (name in g.consts and np.asarray(g.consts[name]).size == 1)


def _per_tensor(g: Graph, n: Node) -> bool:
    """A Q/DQ node with constant single-valued scale and zero point on an 8-bit side."""
    if len(n.inputs) < 2 or not all(_scalar_param(g, i) for i in n.inputs[1:3]) or not n.inputs[1]:
        return False
    if n.attrs.get("block_size", 0):
        return False
    zp = n.inputs[2] if len(n.inputs) > 2 else ""
    dt = np.asarray(g.consts[zp]).dtype if zp else np.dtype(np.uint8)
    return dt in EIGHT_BIT and np.asarray(g.consts[n.inputs[1]]).dtype == np.float32


def _chain(g: Graph, q: Node, producer) -> tuple[list[Node], list[Node]] | None:
    """(the elementwise nodes computing q's input, in graph order; the DequantizeLinear nodes they read), or None
    when q's input is not such a chain of one or two 8-bit sources."""
    seen: dict[int, Node] = {}
    sources: dict[int, Node] = {}
    stack = [q.inputs[0]]
    while stack:
        t = stack.pop()
        if t in g.consts:
            if np.asarray(g.consts[t]).size != 1:
                return None  # a per-channel constant: the result depends on the position, not only the byte
            continue
        n = producer.get(t)
        if n is None:
            return None  # a graph input
        if id(n) in seen or id(n) in sources:
            continue
        if n.op == "DequantizeLinear":
            if not _per_tensor(g, n) or n.inputs[0] in g.consts:
                return None
            sources[id(n)] = n
            if len(sources) > 2:
                return None
            continue
        if n.op not in ELEMENTWISE or len([o for o in n.outputs if o]) != 1:
            return None
        seen[id(n)] = n
        if len(seen) > MAX_CHAIN:
            return None
        for i in n.inputs:
            if i:
                stack.append(i)
    if not seen or not sources:
        return None  # DQ -> Q alone (a requantization, left as it is), or a chain of constants only
    order = {id(n): k for k, n in enumerate(g.nodes)}
    return sorted(seen.values(), key=lambda n: order[id(n)]), sorted(sources.values(), key=lambda n: order[id(n)])


def _evaluate(g: Graph, chain: list[Node], sources: list[Node], q: Node, inputs: list[np.ndarray]) -> np.ndarray:
    """The chain and q run by the host kernels on `inputs` (the sources' 8-bit values): q's raw output bytes."""
    values: dict[str, np.ndarray | None] = {}

    def get(name: str):
        if not name:
            return None
        return values[name] if name in values else g.consts[name]
    for src, x in zip(sources, inputs, strict=True):
        values[src.outputs[0]] = OPS["DequantizeLinear"](src, [x, *(get(i) for i in src.inputs[1:])], {})[0]
    with np.errstate(all="ignore"):  # inf / nan where the float path gives them: Q saturates them as ORT does
        for n in chain:
            values[n.outputs[0]] = np.asarray(OPS[n.op](n, [get(i) for i in n.inputs], {})[0])
        y = OPS["QuantizeLinear"](q, [get(i) for i in q.inputs], {})[0]
    return np.ascontiguousarray(np.asarray(y).reshape(-1)).view(np.uint8)


def fold_tables(g: Graph) -> Graph:
    """Each QuantizeLinear whose input is an elementwise float chain over one or two per-tensor-quantized 8-bit
    tensors becomes a vkinfer:Table / vkinfer:Table2 node (module docstring); the chain's nodes then go unless
    something else reads them. A chain whose kernels refuse the values (a ValueError/TypeError) is left as it
    is: it runs on the host and reports its error there."""
    from .passes import _maps

    outputs = {t.name for t in g.outputs}
    producer, _ = _maps(g)
    replace: dict[int, Node] = {}
    for q in g.nodes:
        if q.op != "QuantizeLinear" or not q.inputs or not q.inputs[0] or not _per_tensor(g, q):
            continue
        found = _chain(g, q, producer)
        if found is None:
            continue
        chain, sources = found
        dts = [np.asarray(g.consts[s.inputs[2]]).dtype if len(s.inputs) > 2 and s.inputs[2] else np.dtype(np.uint8)
               for s in sources]
        codes = np.arange(256, dtype=np.uint8)
        if len(sources) == 1:
            ins = [codes.view(dts[0])]
        else:
            ins = [np.repeat(codes, 256).view(dts[0]), np.tile(codes, 256).view(dts[1])]
        try:
            table = _evaluate(g, chain, sources, q, ins)
            with scalar_path():  # the chain as ORT runs it on a tensor's last len % 4 elements (host_eigen.py)
                tail = _evaluate(g, chain, sources, q, ins)
        except (ValueError, TypeError, KeyError, IndexError, ArithmeticError):
            continue
        if table.size != 256 ** len(sources):
            continue  # some op broadcast the values into another shape: not elementwise after all
        if not np.array_equal(tail, table):
            # ORT computes Log, Sin, Elu, Softplus... on the last len % 4 elements with the C library's functions
            # and on the rest with Eigen's packets; where the two quantize apart, no one table gives ORT's bytes at
            # every position, so the chain runs op by op (exact). None of the real models' tables differ.
            continue
        out_dt = np.dtype(np.asarray(g.consts[q.inputs[2]]).dtype) if len(q.inputs) > 2 and q.inputs[2] \
            else np.dtype(np.uint8)
        name = f"{q.name or q.outputs[0]}__table"
        g.consts[name] = np.ascontiguousarray(table)
        op = TABLE if len(sources) == 1 else TABLE2
        replace[id(q)] = Node(op, q.name or f"{chain[-1].name}__table", [s.inputs[0] for s in sources] + [name],
                              list(q.outputs), {"dtype": out_dt.name, "folded": [n.name for n in chain],
                               "folded_ops": [n.op for n in chain]})
    if not replace:
        return g
    nodes = [replace.get(id(n), n) for n in g.nodes]
    # Drop what nothing reads any more (the chains, and DequantizeLinear nodes only they read): one sweep from the
    # end, as nodes come in topological order (dropping round by round took a round per chain link).
    used = set(outputs)
    keep = []
    for n in reversed(nodes):
        if any(o and o in used for o in n.outputs):
            keep.append(n)
            used.update(n.inputs)
    return Graph(keep[::-1], g.inputs, g.outputs, g.consts)


BINARY_QOPS = ("com.microsoft:QLinearAdd", "com.microsoft:QLinearMul", "vkinfer:TFLiteAdd")


def fold_constant_operands(g: Graph) -> Graph:
    """A QLinearAdd / QLinearMul / TFLite ADD whose other operand is one constant value (a layer norm's
    epsilon, GELU's + 1) is a function of its 8-bit activation's byte: a vkinfer:Table made by the op's own
    reference on the 256 values against that constant (the same broadcast kind as in the graph: a scalar
    operand, first or second), so the devices run it as a lookup instead of the host."""
    from .lowering import binary_fn

    replace: dict[int, Node] = {}
    consts = g.consts
    for n in g.nodes:
        ins = n.inputs
        if n.op not in BINARY_QOPS or len(ins) < 8:
            continue
        # The operands first: a QLinearAdd chain's constant operand is a whole tensor, and the parameter checks on
        # every node were most of this pass (0.2 s on 100k nodes); the conditions are the same, in another order.
        a, b = ins[0], ins[3]
        if (a in consts) == (b in consts):
            continue
        k, x = (a, b) if a in consts else (b, a)
        c = np.asarray(consts[k])
        if c.size != 1 or c.ndim > 1 or c.dtype not in EIGHT_BIT:
            continue
        if not (ins[1] in consts and ins[4] in consts and ins[6] in consts):
            continue
        if not all(not ins[i] or ins[i] in consts for i in (2, 5, 7)):
            continue
        yz = ins[7]
        out_dt = np.asarray(consts[yz]).dtype if yz else np.dtype(np.uint8)
        if out_dt not in EIGHT_BIT:
            continue
        codes = np.arange(256, dtype=np.uint8).view(c.dtype)
        fn = binary_fn(n, g.consts)
        try:
            y = np.asarray(fn(c, codes) if k == a else fn(codes, c))
        except (ValueError, TypeError, ArithmeticError):
            continue  # the host kernel reports it at run time
        if y.size != 256 or y.dtype != out_dt:
            continue
        name = f"{n.name}__table"
        g.consts[name] = np.ascontiguousarray(y.reshape(-1)).view(np.uint8)
        replace[id(n)] = Node(TABLE, n.name, [x, name], list(n.outputs), {"dtype": out_dt.name})
    if not replace:
        return g
    return Graph([replace.get(id(n), n) for n in g.nodes], g.inputs, g.outputs, g.consts)


def fold_self_products(g: Graph) -> Graph:
    """A binary 8-bit op whose two operands are one tensor x or lookups of it, Mul(x, Table(x)) (SiLU as ORT's
    quantizer leaves it: x * Sigmoid(x)), Add(x, x), Table2(Table(x), x), is a function of x's byte: one
    vkinfer:Table on x, made by the op's own reference on the 256 bytes (exact by construction), where the
    devices ran a table lookup and then a product per value. A Table no other node reads any more goes too.
    YOLOX-tiny's 74 SiLU (ddddocr_det, 1 Zen 4 core): 11.1 ms of a 32 ms run in the two passes."""
    from .lowering import binary_fn, table_ops, unary_fn

    producers: list[dict[str, Node]] = []  # made at the first operand looked up (most graphs have none)
    codes = np.arange(256, dtype=np.uint8)
    unary = frozenset(table_ops("unary"))  # QLinearSigmoid, QLinearLeakyRelu, ...: ORT's QOperator SiLU

    def lookup(t: str) -> tuple[str, np.ndarray | None, np.dtype | None]:
        """(source tensor, table or None, the table's output type) of operand t."""
        if not producers:
            producers.append({o: n for n in g.nodes for o in n.outputs if o})
        p = producers[0].get(t)
        if p is not None and p.op == TABLE and len(p.inputs) == 2 and p.inputs[1] in g.consts:
            tab = np.asarray(g.consts[p.inputs[1]])
            if tab.dtype == np.uint8 and tab.shape == (256,):
                return p.inputs[0], tab, _out_dtype(p)
        if p is not None and p.op in unary and len(p.inputs) >= 3 and all(
                not i or i in g.consts for i in p.inputs[1:]) and p.inputs[2]:
            x_dt = np.asarray(g.consts[p.inputs[2]]).dtype  # the input's zero point: its type
            if x_dt in EIGHT_BIT:
                try:
                    y = np.asarray(unary_fn(p, g.consts)(codes.view(x_dt)))
                except (ValueError, TypeError, ArithmeticError):
                    return t, None, None
                if y.shape == (256,) and y.dtype in EIGHT_BIT:
                    return p.inputs[0], np.ascontiguousarray(y).view(np.uint8), y.dtype
        return t, None, None

    def values(tab, tab_dt, dt) -> np.ndarray:
        """The operand's value for each byte of the source, as dtype `dt` (the op's view of it)."""
        raw = codes if tab is None else tab[codes]
        if tab is not None and np.dtype(tab_dt) != np.dtype(dt):
            raise TypeError("operand type")
        return raw.view(dt)

    replace: dict[int, Node] = {}
    consts = g.consts
    for n in g.nodes:
        ins = n.inputs
        # A constant operand first (a QLinearAdd chain's every node: the parameter checks were 0.2 s on 100k nodes);
        # the conditions are the same, in another order.
        if n.op in BINARY_QOPS:
            if len(ins) < 8 or ins[0] in consts or ins[3] in consts:
                continue
            if not (ins[1] in consts and ins[4] in consts and ins[6] in consts) \
                    or not all(ins[i] and ins[i] in consts for i in (2, 5, 7)):
                continue
            a, b = ins[0], ins[3]
            dts = [np.asarray(consts[ins[i]]).dtype for i in (2, 5, 7)]
        elif n.op == TABLE2 and len(ins) == 3 and ins[2] in consts:
            a, b = ins[0], ins[1]
            dts = [np.dtype(np.uint8), np.dtype(np.uint8), _out_dtype(n)]  # (its error, as before)
            if a in consts or b in consts:
                continue
        else:
            continue
        (xa, ta, da), (xb, tb, db) = lookup(a), lookup(b)
        if xa != xb or (ta is None and tb is None and a != b) or any(d not in EIGHT_BIT for d in dts):
            continue
        try:
            if n.op == TABLE2:
                ra, rb = (codes if ta is None else ta), (codes if tb is None else tb)
                y = np.asarray(g.consts[n.inputs[2]])[ra.astype(np.int32) * 256 + rb].view(dts[2])
            else:
                va = values(ta, da, dts[0]) if ta is not None else codes.view(dts[0])
                vb = values(tb, db, dts[1]) if tb is not None else codes.view(dts[1])
                with np.errstate(all="ignore"):
                    y = np.asarray(binary_fn(n, g.consts)(va, vb))
        except (ValueError, TypeError, ArithmeticError):
            continue  # the op as it stands reports it
        if y.shape != (256,) or y.dtype != dts[2]:
            continue
        name = f"{n.name}__table"
        g.consts[name] = np.ascontiguousarray(y).view(np.uint8)
        replace[id(n)] = Node(TABLE, n.name, [xa, name], list(n.outputs), {"dtype": dts[2].name})
    if not replace:
        return g
    nodes = [replace.get(id(n), n) for n in g.nodes]
    outs = {t.name for t in g.outputs}
    read = {i for n in nodes for i in n.inputs if i}
    # Lookups whose only readers were folded here: dead now.
    nodes = [n for n in nodes if not ((n.op == TABLE or n.op in unary) and id(n) not in replace
                                      and not (set(n.outputs) & (read | outs)))]
    return Graph(nodes, g.inputs, g.outputs, g.consts)


def table2_operands(shape_a: tuple, shape_b: tuple, shape_y: tuple) -> tuple[str, bool] | None:
    """How the device table lookups run a vkinfer:Table2 of these shapes: ("equal" | "row", swapped), where
    "row" means the second operand is one row of the first's channels broadcast over it (a per-channel gate)
    and `swapped` that a and b trade places (the table transposed); None: only the host runs it."""
    def row_of(full, part):
        if not full or len(full) > 4:  # 5-D: the device form's row is not the last axis (lowering.binary_mode)
            return False
        ch = 1 if len(full) == 4 else len(full) - 1
        row = tuple(full[ch] if i == ch else 1 for i in range(len(full)))
        return tuple(part) == row or (len(full) < 4 and tuple(part) == (full[-1],))
    sa, sb, sy = tuple(shape_a), tuple(shape_b), tuple(shape_y)
    if sa == sb == sy and sy:
        return "equal", False
    if sy == sa and row_of(sa, sb):
        return "row", False
    if sy == sb and row_of(sb, sa):
        return "row", True
    return None


def swapped_table2(table: np.ndarray) -> np.ndarray:
    """The 65536-entry table with its operands' roles exchanged: t'[b * 256 + a] = t[a * 256 + b]."""
    return np.ascontiguousarray(np.asarray(table, np.uint8).reshape(256, 256).T.reshape(-1))


def table2_lookup(ctx, node: Node) -> tuple[str, str, np.ndarray, str] | None:
    """(a, b, raw 65536-entry table, mode "equal" | "row") with which a device's table lookup runs a
    vkinfer:Table2 node (operands swapped and the table transposed where the broadcast one comes first), or
    None when no device form takes it (lowerings' shared conditions; `ctx` is lowering.Ctx)."""
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    if not (ctx.quantized(a, b, y) and ctx.const(node.inputs[2])) or ctx.dtype(a) != ctx.dtype(b):
        return None
    how = table2_operands(ctx.shape(a), ctx.shape(b), ctx.shape(y))
    if how is None:
        return None
    mode, swap = how
    raw = np.asarray(ctx.g.consts[node.inputs[2]])
    return (b, a, swapped_table2(raw), mode) if swap else (a, b, raw, mode)
