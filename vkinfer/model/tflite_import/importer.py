"""`import_tflite`: a TFLite model's subgraphs -> one vkinfer Graph (read by reader.py, each op checked and built
by its entry in the op table, ops.py, the subgraphs and streaming state by subgraphs.py)."""

from __future__ import annotations

import os

import numpy as np

from ..graph import Graph, TensorInfo, gc_paused
from ..onnx_import import UnsupportedModelError, read_model_file
from ..passes import check_graph
from ..transpose_fold import fold_stream_transposes
from .builder import Builder
from .ops import validate
from .reader import DTYPES, builtin_names, file_meta, parse_all
from .subgraphs import Model, StateVariable, call_graph, check_subgraph, import_subgraph, key_name


def import_tflite(model: str | os.PathLike | bytes, supported: dict[str, str | None]) -> Graph:
    """Graph of an int8/uint8 TFLite model. `supported` is the session's op table (as for import_onnx).
    Unsupported ops raise UnsupportedModelError listing each (op index, builtin name, why); an unreadable file
    raises ValueError.

    Streaming models: CALL_ONCE of an init subgraph is evaluated here, once, into each variable's initial value;
    a resource variable the main subgraph reads before assigning it becomes an extra graph input (its value
    going into a run) and, when the run assigns it, an extra graph output (its value after the run), listed in
    the graph's `variables` (StateVariable) after its `user_outputs` first outputs. The session carries them."""
    with gc_paused():  # (graph.gc_paused: its full collections grew faster than the graph)
        return _import_tflite(model, supported)


def _import_tflite(model: str | os.PathLike | bytes, supported: dict[str, str | None]) -> Graph:
    if isinstance(model, bytes | bytearray | memoryview):
        blob = bytes(model)
    else:  # a regular file of bounded size only (never a FIFO or a device)
        blob = read_model_file(model)
    subgraphs = parse_all(blob)
    names = builtin_names()
    m = Model(subgraphs, names, supported)
    try:
        for k, (tensors, ops, ins, outs) in enumerate(subgraphs):
            try:
                validate(tensors, ops, ins, outs, names, main=k == 0)
            except ValueError as e:
                if k:
                    raise ValueError(f"subgraph {k}: {e}") from None
                raise
        order = call_graph(m)
    except ValueError:
        raise
    except Exception as e:  # options tables pointing outside the file
        raise ValueError(f"not a readable TFLite model ({type(e).__name__}: {e})") from None
    problems = []
    for k in order:
        problems += check_subgraph(m, k)
    if "Transpose" not in supported:
        problems.append("the session's op table lacks Transpose")
    if problems:
        raise UnsupportedModelError("the model has ops vkinfer cannot run:\n  " + "\n  ".join(problems))

    tensors, _, ins, outs, _ = m.subgraphs[0]
    imp = Builder(tensors)
    current, carried = import_subgraph(m, 0, imp)
    out_names = [imp.get(o) for o in outs]

    def info(i: int, name: str) -> TensorInfo:
        t = tensors[i]
        if t.dtype not in DTYPES:
            raise UnsupportedModelError(f"graph input/output {t.name!r} has unsupported TFLite type {t.dtype}")
        return TensorInfo(name, t.shape, np.dtype(DTYPES[t.dtype]))

    inputs = [info(i, imp.names[i]) for i in ins]
    outputs = [info(i, n) for i, n in zip(outs, out_names, strict=True)]
    variables = []
    for key, read in carried.items():
        init = m.initial[key]
        read, state_in = read
        if tuple(init.shape) != tuple(tensors[read].shape) or DTYPES.get(tensors[read].dtype) != init.dtype:
            raise ValueError(f"resource variable {key_name(key)!r} holds {init.dtype} {list(init.shape)} (from its "
                             f"init subgraph), READ_VARIABLE output {tensors[read].name!r} declares "
                             f"{DTYPES.get(tensors[read].dtype, tensors[read].dtype)} {list(tensors[read].shape)}")
        inputs.append(TensorInfo(state_in, init.shape, init.dtype))
        out, assigned = current[key], None
        if out == state_in:
            out = None
        elif out in imp.consts:
            out, assigned = None, imp.consts[out]
        elif out in {t.name for t in inputs}:
            copy = imp.fresh("state_out")
            imp.node("Identity", [out], [copy])
            out = copy
        if assigned is not None and (assigned.shape != init.shape or assigned.dtype != init.dtype):
            raise UnsupportedModelError(f"resource variable {key_name(key)!r} of {init.dtype} {list(init.shape)} "
                                        f"is assigned {assigned.dtype} {list(assigned.shape)}")
        variables.append(StateVariable(key_name(key), state_in, out, init, assigned))
    user_outputs = len(outputs)
    for v in variables:
        if v.output is not None and v.output not in {t.name for t in outputs}:
            outputs.append(TensorInfo(v.output, v.initial.shape, v.initial.dtype))

    graph = Graph(imp.nodes, inputs, outputs, imp.consts)
    if variables:  # ring buffers: their Transposes moved to the edges (model/transpose_fold.py)
        graph = fold_stream_transposes(graph)
    consts = [t.name for t in graph.outputs if t.name in graph.consts]
    if consts:
        raise UnsupportedModelError(f"graph outputs {consts} are constants (they depend on no graph input), which "
                                    "vkinfer does not support as outputs")
    check_graph(graph)  # ops writing a subgraph input or one another's outputs, reading what nothing writes
    graph.variables = variables
    graph.user_outputs = user_outputs
    try:
        graph.meta = file_meta(blob, ins, outs, [t.name for t in inputs[:len(ins)]], out_names, imp.names,
                               tensors)
    except Exception as e:  # noqa: BLE001 - flatbuffers reads lazily: a corrupt table fails here
        raise ValueError(f"not a readable TFLite model ({type(e).__name__}: {e})") from None
    return graph
