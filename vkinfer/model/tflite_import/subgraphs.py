"""A TFLite model's subgraphs: checking each op of a subgraph against the op table, the CALL_ONCE call graph,
resource variables (VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE) and the init subgraphs evaluated once into the
streaming state's initial values (`StateVariable`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Graph
from .builder import Builder
from .ops import check, table
from .reader import options

_CONTROL = ("WHILE", "IF")



@dataclass
class StateVariable:
    """A TFLite resource variable the main subgraph reads before assigning it: its value is carried from one
    `run` to the next by the session (vkinfer.InferenceSession keeps it per session; `reset_state` restores
    `initial`, the value the CALL_ONCE init subgraph assigns).

    name: "container/shared_name"; input: the graph input carrying the value into a run; output: the graph
    output carrying the value out (None when the run leaves it unchanged or assigns the constant `assigned`)."""

    name: str
    input: str
    output: str | None
    initial: np.ndarray
    assigned: np.ndarray | None = None


class Model:
    """What importing the subgraphs of one model shares: the parsed subgraphs, the session's op table, the
    values the init subgraphs assigned to each variable key, and the subgraphs already called once."""

    def __init__(self, subgraphs, names, supported):
        self.subgraphs, self.names, self.supported = subgraphs, names, supported
        self.initial: dict[tuple[str, str], np.ndarray] = {}
        self.called: set[int] = set()


def key_name(key: tuple[str, str]) -> str:
    return f"{key[0]}/{key[1]}" if key[0] else key[1]


def check_subgraph(model: Model, k: int) -> list[str]:
    """The problems (unsupported ops) of subgraph k, each 'op i (NAME): why', prefixed for k > 0."""
    tensors, ops, _, _ = model.subgraphs[k]
    where = f"subgraph {k} " if k else ""
    problems, parsed = [], []
    ops_table, per_code = table(), {}
    for i, (code, op_in, op_out, _, tab) in enumerate(ops):
        known = per_code.get(code)
        if known is None:  # once per builtin code, not per op: its name, entry, options class, the vkinfer ops the
            op = ops_table.get(code)  # table lacks
            known = per_code[code] = (model.names.get(code, f"builtin {code}"), op,
                                      op.options_class() if op is not None else None,
                                      [n for n in (op.needs if op is not None else ()) if n not in model.supported])
        name, op, kind, missing = known
        opts = None
        try:
            opts = options(kind, tab) if kind is not None else None
            if op is None or (opts is None and op.no_options == "unsupported"):
                why = check(code, op_in, op_out, opts, tensors)
            else:  # (ops.check without looking its entry up again)
                why = op.check(op_in, op_out, opts, tensors)
            if why == "op not supported" and name in _CONTROL:
                why = "control flow (WHILE, IF) is not supported; only CALL_ONCE of an init subgraph"
        except Exception as e:  # malformed options or tensor references
            why = f"cannot read the op ({type(e).__name__}: {e})"
        if not why and missing:
            why = f"the session's op table lacks {missing}"
        if why:
            problems.append(f"{where}op {i} ({name}): {why}")
        parsed.append((code, op_in, op_out, opts if not why else None))
    model.subgraphs[k] = (*model.subgraphs[k][:4], parsed)
    return problems


def call_graph(model: Model) -> list[int]:
    """The subgraphs CALL_ONCE reaches from subgraph 0, in order; ValueError for an index out of range, missing
    CallOnceOptions or a cycle."""
    import tflite

    n = len(model.subgraphs)
    state: dict[int, int] = {}  # 1: being visited, 2: done
    order: list[int] = []

    def visit(k: int, path: list[int]) -> None:
        if state.get(k) == 2:
            return
        if state.get(k) == 1:
            raise ValueError(f"CALL_ONCE cycle through subgraphs {' -> '.join(map(str, [*path, k]))}")
        state[k] = 1
        order.append(k)
        for i, (code, _, _, otype, tab) in enumerate(model.subgraphs[k][1]):
            if code != tflite.BuiltinOperator.CALL_ONCE:
                continue
            where = f"subgraph {k} op {i} (CALL_ONCE)"
            if tab is None or otype != tflite.BuiltinOptions.CallOnceOptions:
                raise ValueError(f"{where} has no CallOnceOptions")
            try:
                init = int(options(tflite.CallOnceOptions, tab).InitSubgraphIndex())
            except Exception as e:
                raise ValueError(f"{where}: unreadable CallOnceOptions ({type(e).__name__}: {e})") from None
            if not 0 <= init < n:
                raise ValueError(f"{where}: init subgraph index {init} is out of range (the model has {n} "
                                 "subgraphs)")
            visit(init, [*path, k])
        state[k] = 2

    visit(0, [])
    return order


def import_subgraph(model: Model, k: int, imp: Builder):
    """Adds the nodes of subgraph k to `imp`; returns {variable key: graph name of its value at the end} and the
    variables read before this subgraph assigned them ({key: (first READ's output tensor, the graph name of the
    value it read)}), in order."""
    import tflite

    B = tflite.BuiltinOperator
    tensors, _, ins, _, parsed = model.subgraphs[k]
    where_sg = f"subgraph {k} " if k else ""
    handles: dict[int, tuple[str, str]] = {}
    current: dict[tuple[str, str], str] = {}
    carried: dict[tuple[str, str], int] = {}
    for i in ins:
        imp.put(i)
    ops_table = table()
    special = (B.CALL_ONCE, B.VAR_HANDLE, B.READ_VARIABLE, B.ASSIGN_VARIABLE)
    for j, (code, op_in, op_out, opts) in enumerate(parsed):
        try:
            if code not in special:
                ops_table[code].build(imp, op_in, op_out, opts)
            elif code == B.CALL_ONCE:
                init = int(opts.InitSubgraphIndex())
                if init not in model.called:
                    model.called.add(init)
                    run_init(model, init)
            elif code == B.VAR_HANDLE:
                key = ((opts.Container() or b"").decode(), (opts.SharedName() or b"").decode())
                handles[op_out[0]] = key
            elif code in (B.READ_VARIABLE, B.ASSIGN_VARIABLE):
                if op_in[0] not in handles:
                    raise ValueError(f"resource tensor {tensors[op_in[0]].name!r} is not the output of an "
                                     "earlier VAR_HANDLE")
                key = handles[op_in[0]]
                if code == B.ASSIGN_VARIABLE:
                    current[key] = imp.get(op_in[1])
                    carried.setdefault(key, None)
                    continue
                if key not in current:
                    if k != 0 or key not in model.initial:
                        raise ValueError(f"resource variable {key_name(key)!r} is read before it is assigned")
                    current[key] = imp.fresh(f"state_{key_name(key)}")
                    carried[key] = (op_out[0], current[key])
                imp.layouts[op_out[0]] = {"NHWC": current[key]}
        except (ValueError, TypeError) as e:
            raise type(e)(f"{where_sg}op {j} ({model.names.get(code, code)}): {e}") from e
        except Exception as e:  # options fields are read lazily: a corrupt table fails here
            raise ValueError(f"{where_sg}op {j} ({model.names.get(code, code)}): unreadable "
                             f"({type(e).__name__}: {e})") from e
    return current, {key: t for key, t in carried.items() if t is not None}


def run_init(model: Model, k: int) -> None:
    """Import init subgraph k as a graph of its own and evaluate it once (it has no inputs): the values it
    assigns become the variables' initial values."""
    from ..interpreter import interpret

    tensors, _, ins, _, _ = model.subgraphs[k]
    if ins:
        raise ValueError(f"init subgraph {k} has {len(ins)} inputs (CALL_ONCE passes none)")
    imp = Builder(tensors)
    current, carried = import_subgraph(model, k, imp)
    if carried:
        raise ValueError(f"init subgraph {k} reads variable {key_name(next(iter(carried)))!r} before assigning it")
    values: dict[str, np.ndarray] = dict(imp.consts)
    interpret(Graph(imp.nodes, [], [], imp.consts), values)
    for key, name in current.items():
        model.initial[key] = np.array(values[name], copy=True)

