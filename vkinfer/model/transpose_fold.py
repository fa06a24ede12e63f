"""Moving Transposes off a streaming model's ring buffers (exact by construction: only data movement reorders).

A TFLite streaming model keeps each ring buffer in NHWC (1, T, 1, C) and the importer makes its convolutions
NCHW, so every update reads Transpose -> Concat (time) -> Transpose -> Slice (drop the oldest frame) -> the
variable. On the devices a 4-D tensor is stored NHWC (vkinfer.layout.form_perm), so the NCHW concat is a
contiguous copy while the TFLite-layout tensors in between are stored channel-major and cost real transposes.
Two rewrites move those Transposes to the graph's edges, where the CPU graph folds them into its edge
conversions (vkinfer/cpu/segment.py) or, for the state, into the form the runner keeps it in:

- Slice of a Transpose is the Transpose of a Slice on the permuted axes: Slice(Transpose(x, p), axes) ->
  Transpose(Slice(x, p[axes]), p). Applied where the Slice's result is a graph output (the next state) or the
  Transpose has no other reader (it then disappears).
- A Transpose of a Concat whose other readers are all Slices, where the permuted axis lies further out in the
  storage order (so the concat becomes whole-block copies), is a Concat of Transposes on the permuted axis:
  Transpose(Concat(a, b, axis), p) -> Concat(Transpose(a, p), Transpose(b, p), p.index(axis)), the Concat kept
  for the Slices as the inverse Transpose of the new one (the first rewrite then removes it). A Transpose of a
  Transpose that cancels it is the tensor itself.

micro_wakeword's alexa (pymicro-wakeword 2.5.0): the 6 ring buffers lose 5 transposes of the concatenated window
and the first one's interleaved concat (measured in the issue 25 report).
"""

from __future__ import annotations

import numpy as np

from ..layout import form_perm
from .graph import Graph, Node

_SLICE_PARAMS = 5  # data, starts, ends, axes, steps


def _perm(node: Node) -> tuple[int, ...] | None:
    p = node.attrs.get("perm")
    if p is None:
        return None
    p = tuple(int(a) for a in p)
    return p if sorted(p) == list(range(len(p))) else None


def _inverse(p: tuple[int, ...]) -> tuple[int, ...]:
    inv = [0] * len(p)
    for i, a in enumerate(p):
        inv[a] = i
    return tuple(inv)


class _Rewriter:
    def __init__(self, g: Graph):
        self.g = g
        self.nodes = list(g.nodes)
        self.consts = dict(g.consts)
        self.outs = {t.name for t in g.outputs}
        self.used = {t for n in self.nodes for t in (*n.inputs, *n.outputs)} | set(self.consts) | \
            {t.name for t in g.inputs} | self.outs

    def fresh(self, base: str) -> str:
        k = 0
        while f"{base}_tf{k}" in self.used:
            k += 1
        name = f"{base}_tf{k}"
        self.used.add(name)
        return name

    def maps(self) -> tuple[dict[str, Node], dict[str, list[Node]]]:
        made = {o: n for n in self.nodes for o in n.outputs if o}
        read: dict[str, list[Node]] = {}
        for n in self.nodes:
            for t in dict.fromkeys(n.inputs):
                if t:
                    read.setdefault(t, []).append(n)
        return made, read

    def slice_axes(self, s: Node, rank: int) -> list[int] | None:
        """The Slice's axes (non-negative), or None where its parameters are not constants it can remap."""
        ins = s.inputs
        if s.attrs or len(ins) < 3 or any(t and t not in self.consts for t in ins[1:]):
            return None
        starts = np.asarray(self.consts[ins[1]])
        if len(ins) > 3 and ins[3]:
            axes = [int(a) for a in np.asarray(self.consts[ins[3]]).reshape(-1)]
        else:
            axes = list(range(starts.size))
        if any(not -rank <= a < rank for a in axes):
            return None
        return [a % rank for a in axes]

    def swap_slice(self) -> bool:
        made, read = self.maps()
        for i, s in enumerate(self.nodes):
            if s.op != "Slice" or not s.inputs or len(s.outputs) != 1:
                continue
            t = made.get(s.inputs[0])
            p = _perm(t) if t is not None and t.op == "Transpose" else None
            # Only Slices read the Transpose (each swaps in turn, then it dies) or the Slice is the next state.
            if p is None or (s.outputs[0] not in self.outs and not all(
                    r.op == "Slice" and len(r.outputs) == 1 and self.slice_axes(r, len(p)) is not None
                    for r in read.get(t.outputs[0], []))):
                continue
            axes = self.slice_axes(s, len(p))
            if axes is None:
                continue
            ax = self.fresh(s.name + "_axes")
            self.consts[ax] = np.asarray([p[a] for a in axes], np.int64)
            ins = list(s.inputs) + [""] * (_SLICE_PARAMS - len(s.inputs))
            y = self.fresh(s.outputs[0])
            params = [ins[1], ins[2], ax] + ([ins[4]] if ins[4] else [])
            self.nodes[i:i + 1] = [Node("Slice", s.name, [t.inputs[0], *params], [y]),
                                   Node("Transpose", self.fresh(s.name + "_transpose"), [y], [s.outputs[0]],
                                        {"perm": list(p)})]
            return True
        return False

    def push_concat(self) -> bool:
        made, read = self.maps()
        for t in self.nodes:
            p = _perm(t) if t.op == "Transpose" else None
            c = made.get(t.inputs[0]) if p is not None and t.inputs else None
            if c is None or c.op != "Concat" or c.outputs[0] in self.outs or "axis" not in c.attrs:
                continue
            others = [r for r in read.get(c.outputs[0], []) if r is not t]
            if all(r.op == "Slice" for r in read.get(t.outputs[0], [])) and t.outputs[0] not in self.outs:
                continue  # only Slices read the Transpose: the Slices swap instead (pushing would ping-pong)
            if not others or any(r.op != "Slice" for r in others) or \
                    any(self.slice_axes(r, len(p)) is None for r in others) or c.outputs[0] in t.inputs[1:]:
                continue
            axis = int(c.attrs["axis"])
            if not -len(p) <= axis < len(p):
                continue
            order = form_perm([2] * len(p))  # the devices' storage order of the axes
            if order.index(p.index(axis % len(p))) >= order.index(axis % len(p)):
                continue  # the Concat would not move to an outer axis of the storage order: no contiguous copy won
            new: list[Node] = []
            parts = []
            for a in c.inputs:
                src = made.get(a)
                q = _perm(src) if src is not None and src.op == "Transpose" else None
                if q is not None and len(q) == len(p) and all(q[p[k]] == k for k in range(len(p))):
                    parts.append(src.inputs[0])  # Transpose(Transpose(x, q), p) = x
                    continue
                y = self.fresh(a)
                new.append(Node("Transpose", self.fresh(c.name + "_transpose"), [a], [y], {"perm": list(p)}))
                parts.append(y)
            new.append(Node("Concat", c.name, parts, [t.outputs[0]], {"axis": p.index(axis % len(p))}))
            new.append(Node("Transpose", self.fresh(t.name + "_inverse"), [t.outputs[0]], [c.outputs[0]],
                            {"perm": list(_inverse(p))}))
            at = self.nodes.index(c)
            self.nodes.remove(t)
            self.nodes[at:at + 1] = new
            return True
        return False

    def cancel(self) -> bool:
        """Transpose(Transpose(x, q), p) with q then p the identity: its readers read x (okay_nabu's split ring
        buffer, Slices swapped out from between a Transpose and its inverse)."""
        made, _ = self.maps()
        for n in self.nodes:
            p = _perm(n) if n.op == "Transpose" and n.inputs else None
            m = made.get(n.inputs[0]) if p is not None else None
            q = _perm(m) if m is not None and m.op == "Transpose" and m.inputs else None
            y = n.outputs[0] if n.outputs else ""
            if q is None or len(q) != len(p) or any(q[p[k]] != k for k in range(len(p))) or not y or y in self.outs:
                continue
            x = m.inputs[0]
            self.nodes = [Node(r.op, r.name, [x if a == y else a for a in r.inputs], r.outputs, r.attrs)
                          if y in r.inputs else r for r in self.nodes if r is not n]
            return True
        return False

    def drop_dead(self) -> None:
        while True:
            _, read = self.maps()
            dead = [n for n in self.nodes if n.op == "Transpose" and n.outputs[0] not in self.outs
                    and not read.get(n.outputs[0])]
            if not dead:
                return
            gone = {id(n) for n in dead}  # one sweep (a list.remove per dead node was a scan each)
            self.nodes = [n for n in self.nodes if id(n) not in gone]


def fold_stream_transposes(g: Graph) -> Graph:
    """`g` with the Transposes around its Concats and Slices moved as the module docstring says (a new Graph;
    `g` is not changed). Graphs without the pattern come back with the same nodes."""
    ops = [n.op for n in g.nodes]
    transposes = ops.count("Transpose")
    if not transposes or (transposes == 1 and "Slice" not in ops and "Concat" not in ops):
        return g  # no rewrite applies (each needs a Transpose read by a Slice, of a Concat, or of a Transpose)
    rw = _Rewriter(g)
    for _ in range(4 * len(rw.nodes) + 4):  # each rewrite removes a Transpose's reader: a bounded number of steps
        if not (rw.swap_slice() or rw.push_concat() or rw.cancel()):
            break
        rw.drop_dead()
    if rw.nodes == list(g.nodes):
        return g
    used = {t for n in rw.nodes for t in n.inputs if t}
    consts = {k: v for k, v in rw.consts.items() if k in used or k not in rw.g.consts}
    out = Graph(rw.nodes, list(g.inputs), list(g.outputs), consts, dict(g.meta))
    for attr in ("variables", "user_outputs"):
        if hasattr(g, attr):
            setattr(out, attr, getattr(g, attr))
    return out
