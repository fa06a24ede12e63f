"""Which of optimize's passes can change a graph (vkinfer/model/passes.py): `_Ops` (whether a graph has an op a pass
rewrites) and `_Candidates` (one scan for the passes whose first tests are per node), so that a pass finding
nothing to do is not called at a cost per node."""

from __future__ import annotations

import numpy as np

from .graph import Graph


class _Ops:
    """has(g, *ops): whether `g` has a node of one of `ops` (its op set kept until another graph is asked about)."""
    def __init__(self) -> None:
        self.g, self.ops = None, frozenset()

    def __call__(self, g: Graph, *ops: str) -> bool:
        if g is not self.g:
            self.g, self.ops = g, frozenset(n.op for n in g.nodes)
        return not self.ops.isdisjoint(ops)


class _Candidates:
    """may(g, pass name): whether fold_constants, fold_constant_operands or fold_self_products may change `g`, from
    one scan of its nodes for all three (kept until another graph, or more constants, is asked about). Each is
    False only where no node passes the pass's own first tests, so that the pass would return `g` as it is: on a
    100k-node QLinearAdd chain the scan is 0.035 s where the four calls were 0.15 s."""
    def __init__(self) -> None:
        self.key: tuple | None = None
        self.may: frozenset[str] = frozenset()

    def __call__(self, g: Graph, name: str) -> bool:
        if self.key is None or self.key[0] is not g or self.key[1] != len(g.consts):
            self.key, self.may = (g, len(g.consts)), _may_change(g)
        return name in self.may


def _may_change(g: Graph) -> frozenset[str]:
    """The passes of _Candidates that a node of `g` gets past the first tests of (their conditions, the same)."""
    from .tables import BINARY_QOPS, EIGHT_BIT, TABLE2

    consts = g.consts
    fold = operands = products = False
    ndarray = np.ndarray
    for n in g.nodes:
        ins, op = n.inputs, n.op
        if op in BINARY_QOPS and len(ins) >= 8:
            x, a, b = ins[0], ins[0] in consts, ins[3] in consts
            if not fold and (a or not x):
                fold = True  # fold_constants: a node whose first input is a constant or empty (or which has none)
            if not a and not b:
                products = True  # fold_self_products: both operands computed
            elif a != b and not operands:  # fold_constant_operands: one constant operand of one 8-bit value
                c = consts[x if a else ins[3]]
                if type(c) is not ndarray or c.size == 1:  # (a test per node: the cheap one first)
                    c = np.asarray(c)
                    operands = c.size == 1 and c.ndim <= 1 and c.dtype in EIGHT_BIT
        else:
            if not fold and not (ins and ins[0] and ins[0] not in consts):
                fold = True
            if op == TABLE2 and len(ins) == 3 and ins[2] in consts:
                products = True
        if fold and operands and products:
            break
    return frozenset(name for name, yes in (("fold_constants", fold), ("fold_constant_operands", operands),
                                            ("fold_self_products", products)) if yes)
