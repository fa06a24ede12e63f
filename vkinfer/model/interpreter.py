"""The interpreter: runs graph nodes on host arrays through the op table (vkinfer.model.op_table.OPS).

It is the reference device and the host's executor for nodes no device lowers: numpy only, it never calls a
device. `trace` gives every tensor's shape and dtype, with the shape rules (op_table.SHAPES) standing in for
the kernels too slow to run just for shapes.
"""

from __future__ import annotations

import numpy as np

from .graph import Graph, Node
from .op_table import OPS, SHAPES


class Memo(dict):
    """What an executor's kernels prepare once per node (node name -> the node's dict): kept by whoever runs the
    same graph repeatedly (a host segment, the reference session), never on the graph itself."""

    def node(self, g: Graph, node: Node) -> dict:
        m = self.get(node.name)
        if m is None:
            # A layer can be prepared once only if everything but its activation is a model constant.
            m = self[node.name] = {"static": all(not n or n in g.consts for n in node.inputs[1:])}
        return m


def _call(node: Node, args: list, fn, *extra) -> list:
    try:
        return fn(node, args, *extra)
    except (ValueError, TypeError) as e:
        raise type(e)(f"node {node.name} ({node.op}): {e}") from e
    except (KeyError, IndexError, AttributeError, ZeroDivisionError) as e:
        # A malformed model the importer's checks did not catch (a bug there): still the node's ValueError.
        raise ValueError(f"node {node.name} ({node.op}): malformed node ({type(e).__name__}: {e})") from e


def interpret(g: Graph, values: dict[str, np.ndarray], nodes: list[Node] | None = None,
              memo: Memo | None = None) -> None:
    """Run `nodes` (default: all) in order on host arrays, adding their outputs to `values`. `memo`: the
    caller's Memo when it runs the graph again (a fresh one otherwise)."""
    if memo is None:
        memo = Memo()
    for node in g.nodes if nodes is None else nodes:
        args = [values[n] if n else None for n in node.inputs]
        outs = _call(node, args, OPS[node.op], memo.node(g, node))
        for name, v in zip(node.outputs, outs, strict=False):
            if name:
                values[name] = v


# Ops whose output shape depends on their input values: a graph with one traces on real values throughout.
_VALUE_SHAPED = frozenset({"NonZero", "Unique", "NonMaxSuppression", "Compress"})


def trace(g: Graph, feed: dict[str, np.ndarray]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every tensor for `feed`, in numpy. Each node is run by its kernel, or checked by its
    shape rule (convolutions and matrix products), whose output stands in as zeros of the right shape: MobileNetV2
    traces in 12 ms, where running its convolutions in numpy took 130-200 ms. Values after a stand-in are not the
    model's, so where they make a later kernel refuse (a float Div of zeros is NaN, which QuantizeLinear refuses)
    the trace runs again on real values, which gives the model's own error if there is one; a graph with an op
    whose output shape depends on values traces on real values throughout."""
    if not any(n.op in _VALUE_SHAPED for n in g.nodes):
        try:
            return _trace(g, feed, SHAPES)
        except (ValueError, TypeError):
            pass
    return _trace(g, feed, {})


def _trace(g: Graph, feed: dict[str, np.ndarray], rules: dict) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    values: dict[str, np.ndarray] = dict(g.consts)
    values.update(feed)
    memo = Memo()
    for node in g.nodes:
        args = [values[n] if n else None for n in node.inputs]
        rule = rules.get(node.op)
        if rule is not None:
            outs = [np.zeros(shape, dt) for shape, dt in _call(node, args, rule)]
        else:
            outs = _call(node, args, OPS[node.op], memo.node(g, node))
        for name, v in zip(node.outputs, outs, strict=False):
            if name:
                values[name] = v
    return {k: (tuple(v.shape), v.dtype) for k, v in values.items() if isinstance(v, np.ndarray)}
