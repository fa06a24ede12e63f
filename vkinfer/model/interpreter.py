"""The interpreter: runs graph nodes on host arrays through the op table (vkinfer.model.op_table.OPS).

It is the reference device and the host's fallback for nodes no device lowers; it never calls a device. `trace`
gives every tensor's shape and dtype from one run on a feed.
"""

from __future__ import annotations

import numpy as np

from .graph import Graph, Node
from .op_table import OPS


def interpret(g: Graph, values: dict[str, np.ndarray], device: str, nodes: list[Node] | None = None) -> None:
    """Run `nodes` (default: all) in order on host arrays, adding their outputs to `values`."""
    for node in g.nodes if nodes is None else nodes:
        args = [values[n] if n else None for n in node.inputs]
        try:
            outs = OPS[node.op](node, args, device)
        except (ValueError, TypeError) as e:
            raise type(e)(f"node {node.name} ({node.op}): {e}") from e
        except (KeyError, IndexError, AttributeError, ZeroDivisionError) as e:
            # A malformed model the importer's checks did not catch (a bug there): still the node's ValueError.
            raise ValueError(f"node {node.name} ({node.op}): malformed node ({type(e).__name__}: {e})") from e
        for name, v in zip(node.outputs, outs, strict=False):
            if name:
                values[name] = v


def trace(g: Graph, feed: dict[str, np.ndarray]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every tensor, from one CPU run of the interpreter on `feed`."""
    values: dict[str, np.ndarray] = dict(g.consts)
    values.update(feed)
    interpret(g, values, "cpu")
    return {k: (tuple(v.shape), v.dtype) for k, v in values.items() if isinstance(v, np.ndarray)}
