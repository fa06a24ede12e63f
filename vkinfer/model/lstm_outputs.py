"""An ONNX LSTM whose Y_h or Y_c is read, rewritten so that a device runs it: a lowered layer writes one tensor, so
`pack_lstm_state` (run by passes.optimize) makes such a node one `vkinfer:LSTMState` (vkinfer/reference/lstm.py:
the same inputs and attributes, one float32 output (seq + 2, dirs, batch, hidden) = Y, then Y_h, then Y_c, which is
what cpu_fallback/src/ops/lstm.c writes with its STATE flag) followed by one Slice per read output along axis 0
(Y: [0, -2), Y_h: [-2, -1), Y_c: [-1, end)) and, for Y_h and Y_c, a Squeeze of that axis; they keep the original
tensor names, and the packed node keeps the LSTM's name. The slices count from the end because the sequence length
is only known to the trace. An LSTM whose Y_h and Y_c are not read is left as it is."""

from __future__ import annotations

import numpy as np

from ..reference.lstm import PACKED
from .graph import Graph, Node

_END = np.iinfo(np.int64).max
_RANGES = ((0, -2), (-2, -1), (-1, _END))  # Y, Y_h, Y_c along axis 0 of the packed output


def _read(g: Graph) -> set[str]:
    """The tensors another node or the graph's outputs read."""
    return {t for n in g.nodes for t in n.inputs if t} | {o.name for o in g.outputs}


def pack_lstm_state(g: Graph) -> Graph:
    """Each LSTM whose Y_h or Y_c is read becomes vkinfer:LSTMState + Slice (+ Squeeze) nodes (module docstring)."""
    read = _read(g)
    nodes, changed = [], False
    for n in g.nodes:
        outs = list(n.outputs[:3])
        if n.op != "LSTM" or not any(o and o in read for o in outs[1:]):
            nodes.append(n)
            continue
        packed = f"{n.name}#state"
        nodes.append(Node(PACKED, n.name, list(n.inputs), [packed], dict(n.attrs)))
        for k, o in enumerate(outs):
            if not o or o not in read:
                continue
            part = ("Y", "Y_h", "Y_c")[k]
            base = f"{n.name}#{part}"
            names = [f"{base}__{p}" for p in ("starts", "ends", "axes")]
            g.consts[names[0]] = np.array([_RANGES[k][0]], np.int64)
            g.consts[names[1]] = np.array([_RANGES[k][1]], np.int64)
            g.consts[names[2]] = np.array([0], np.int64)
            if k == 0:
                nodes.append(Node("Slice", base, [packed, *names], [o]))
                continue
            sliced = f"{base}#4d"
            nodes.append(Node("Slice", base, [packed, *names], [sliced]))
            g.consts[f"{base}__squeeze"] = np.array([0], np.int64)
            nodes.append(Node("Squeeze", f"{base}#squeeze", [sliced, f"{base}__squeeze"], [o]))
        changed = True
    return Graph(nodes, g.inputs, g.outputs, g.consts, g.meta) if changed else g
