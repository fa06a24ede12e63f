"""Integer attributes checked at import, before any kernel sees them.

ONNX stores integer attributes as int64. The C kernels, the Vulkan shaders and the native plan take 32-bit
dimensions, so an attribute that does not fit int32 would be narrowed somewhere below: a mutated model with
`pads=[0, 0, 2**62, 0]` ran on the CPU as a small, meaningless convolution (2026-11, the reference, Vulkan and
ONNX Runtime refuse it). Every integer attribute of every node is therefore checked here for range, and the
geometry of the convolution and pooling ops (kernel_shape, strides, dilations, pads, group, output_padding,
output_shape) for sign, for lengths that agree with each other and with constant weights. A failure is a
ValueError naming the node and the attribute. Checks that need activation shapes (an axis against a rank, a
kernel against the padded input) run where the shapes are known: the ops' kernels and specs.
"""

from __future__ import annotations

import numbers

import numpy as np

from .graph import Graph, Node

INT32_MAX = 2 ** 31 - 1

# Attributes whose int64 values are meaningful beyond int32: ONNX clamps them (Slice-1's starts and ends, where
# INT64_MAX means "to the end"; Shape-15's start and end).
_WIDE = {("Slice", "starts"), ("Slice", "ends"), ("Shape", "start"), ("Shape", "end")}

# Ops with convolution or pooling geometry, and the input holding their weights (None: no weights).
_GEOMETRY = {
    "QLinearConv": 3, "Conv": 1, "ConvInteger": 1, "ConvTranspose": 1, "vkinfer:QLinearConvClamp": 3,
    "vkinfer:QLinearConvTranspose": 3, "MaxPool": None, "AveragePool": None, "LpPool": None,
    "com.microsoft:QLinearAveragePool": None, "vkinfer:TFLiteAveragePool": None,
}
_TRANSPOSED = {"ConvTranspose", "vkinfer:QLinearConvTranspose"}  # weights (C, M/group, kH, kW)


def _fail(node: Node, attr: str, value, why: str) -> ValueError:
    shown = value if not isinstance(value, list) or len(value) <= 8 else [*value[:8], "..."]
    return ValueError(f"node {node.name!r} ({node.op}): attribute {attr!r} = {shown}: {why}")


def _int_values(v) -> list[int] | None:
    """The attribute's integers (an INT or INTS attribute), else None (floats, strings, tensors, graphs)."""
    kind = type(v)  # plain ints and lists of them first: the abstract-class checks below were a cost per node
    if kind is int:
        return [v]
    if kind is list and v and all(type(i) is int for i in v):
        return list(v)
    if isinstance(v, bool):
        return [int(v)]
    if isinstance(v, numbers.Integral):
        return [int(v)]
    if isinstance(v, (list, tuple)) and v and all(isinstance(i, numbers.Integral) for i in v):
        return [int(i) for i in v]
    if isinstance(v, np.ndarray) and v.dtype.kind in "iu":
        return [int(i) for i in v.reshape(-1)]
    return None


def check_node_attrs(node: Node, consts: dict[str, np.ndarray]) -> None:
    """ValueError naming `node` and the attribute when one of its integer attributes is out of range or
    inconsistent (see the module's docstring)."""
    for name, value in node.attrs.items():
        if type(value) is int and -INT32_MAX <= value <= INT32_MAX:
            continue  # the common case, fine under every rule below (a check per node)
        if name.startswith("_"):
            continue  # the importer's own annotations
        ints = _int_values(value)
        if ints is None or (node.op, name) in _WIDE:
            continue
        bad = [i for i in ints if not -INT32_MAX <= i <= INT32_MAX]
        if bad:
            raise _fail(node, name, ints, f"{bad[0]} does not fit a 32-bit integer")
    if node.op in _GEOMETRY:
        _check_geometry(node, consts)


def _ints(node: Node, name: str, minimum: int) -> list[int] | None:
    if name not in node.attrs:
        return None
    ints = _int_values(node.attrs[name])
    if ints is None:
        if isinstance(node.attrs[name], (list, tuple)) and not node.attrs[name]:
            return []
        raise _fail(node, name, node.attrs[name], "must be integers")
    if any(i < minimum for i in ints):
        raise _fail(node, name, ints, f"every value must be >= {minimum}")
    return ints


def _check_geometry(node: Node, consts: dict[str, np.ndarray]) -> None:
    kernel = _ints(node, "kernel_shape", 1)
    strides = _ints(node, "strides", 1)
    dilations = _ints(node, "dilations", 1)
    pads = _ints(node, "pads", 0)
    out_pad = _ints(node, "output_padding", 0)
    out_shape = _ints(node, "output_shape", 1)
    group = _ints(node, "group", 1)
    if group is not None and len(group) != 1:
        raise _fail(node, "group", group, "must be one integer")
    w_index = _GEOMETRY[node.op]
    w = None
    if w_index is not None and len(node.inputs) > w_index and node.inputs[w_index] in consts:
        w = np.asarray(consts[node.inputs[w_index]])
    rank = None  # spatial rank
    if w is not None:
        if w.ndim < 3:
            raise ValueError(f"node {node.name!r} ({node.op}): weights {node.inputs[w_index]!r} of shape "
                             f"{list(w.shape)} need at least 3 dimensions")
        rank = w.ndim - 2
    elif kernel is not None:
        rank = len(kernel)
    if rank is None:
        if node.op in ("MaxPool", "AveragePool", "LpPool", "com.microsoft:QLinearAveragePool"):
            raise ValueError(f"node {node.name!r} ({node.op}): attribute 'kernel_shape' is required")
        return
    for name, v, per in (("kernel_shape", kernel, 1), ("strides", strides, 1), ("dilations", dilations, 1),
                         ("pads", pads, 2), ("output_padding", out_pad, 1), ("output_shape", out_shape, 1)):
        if v is not None and len(v) != per * rank:
            raise _fail(node, name, v, f"must have {per * rank} values for {rank} spatial dimensions")
    if w is not None and kernel is not None and list(w.shape[2:]) != kernel:
        raise _fail(node, "kernel_shape", kernel, f"contradicts the weights {node.inputs[w_index]!r} of shape "
                                                  f"{list(w.shape)}")
    if w is not None and group is not None:
        out_ch = w.shape[1] * group[0] if node.op in _TRANSPOSED else w.shape[0]
        if out_ch % group[0]:
            raise _fail(node, "group", group[0], f"does not divide the {out_ch} output channels of the weights "
                                                 f"{node.inputs[w_index]!r}")


_GEOMETRY_ATTRS = frozenset({"kernel_shape", "strides", "dilations", "pads", "output_padding", "output_shape",
                             "group"})


def _geometry_once(node: Node, consts: dict[str, np.ndarray], ok: set[tuple]) -> None:
    """_check_geometry(node, consts), skipped where a node of the same op, geometry attributes and weight shape
    passed it already (`ok`; its verdict depends on nothing else): a conv chain's 100k checks were 0.2 s."""
    parts = []
    for name, value in node.attrs.items() if not _GEOMETRY_ATTRS.isdisjoint(node.attrs) else ():
        if name in _GEOMETRY_ATTRS:
            if type(value) is int:
                parts.append((name, value))
            elif type(value) is list and all(type(i) is int for i in value):
                parts.append((name, tuple(value)))
            else:
                _check_geometry(node, consts)
                return
    w_index, ins = _GEOMETRY[node.op], node.inputs
    w = consts.get(ins[w_index]) if w_index is not None and len(ins) > w_index else None
    key = (node.op, tuple(parts), None if w is None else w.shape if type(w) is np.ndarray else np.shape(w))
    if key not in ok:
        _check_geometry(node, consts)
        ok.add(key)


def check_attrs(g: Graph) -> None:
    """check_node_attrs on every node of `g`."""
    for n in g.nodes:
        check_node_attrs(n, g.consts)


# Input and attribute readers the move and resize kernels share.

def _text(v, default: str) -> str:
    if v is None:
        return default
    return v.decode() if isinstance(v, bytes) else str(v)


def _axis(axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ValueError(f"{what} {axis} is out of range for a rank-{rank} input")
    return axis % rank


def _ints1(v, what: str) -> list[int]:
    a = np.asarray(v)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{what} must be integers, got {a.dtype}")
    return [int(i) for i in a.reshape(-1)]


def _opt(x: list, i: int):
    return x[i] if len(x) > i else None


def check_graph(g: Graph) -> None:
    """ValueError naming the node and tensor when `g` is not a well-formed graph: a node with no output, one
    reading a tensor that no initializer, graph input or earlier node produces (the nodes must be in
    topological order), one writing a tensor something else already produces, one missing an input its op
    needs (kernels.REQUIRED_INPUTS), a graph output nothing produces, an integer attribute out of range or
    inconsistent (vkinfer/model/attrs.py)."""
    from .op_table import REQUIRED_INPUTS

    known = set(g.consts)  # (updated in place: `|` copied the constants' names a second time)
    known.update(t.name for t in g.inputs)
    consts = g.consts
    geometry_ok: set[tuple] = set()
    int32_lists: set[tuple] = set()  # list attributes of int32 integers only (any equal list passes too)
    # op -> (REQUIRED_INPUTS' entry, _GEOMETRY's weights index or -1), looked up once per op
    per_op: dict[str, tuple[tuple[int, tuple[int, ...]] | None, int | None]] = {}
    only_opset = ("_opset",)  # the import's own annotation alone (most nodes): no attribute to check
    for n in g.nodes:
        ins, outs, attrs, op = n.inputs, n.outputs, n.attrs, n.op
        if not outs or not outs[0]:
            raise ValueError(f"{_where(n)} has no output")
        info = per_op.get(op)
        if info is None:
            info = per_op[op] = (REQUIRED_INPUTS.get(op), _GEOMETRY.get(op, -1))
        need, w_index = info
        if need is not None:
            count, required = need
            if len(ins) < count:
                raise ValueError(f"{_where(n)} has {len(ins)} inputs, needs at least {count}")
            if "" in ins:  # (no empty input: every required one is there)
                for i in required:
                    if not ins[i]:
                        raise ValueError(f"{_where(n)}: input {i} is empty, but the op needs it")
        # check_node_attrs' own fast path without its call per node, and lists of int32 integers seen before
        # (a Transpose chain's perm): attributes it would pass.
        if len(attrs) != 1 or tuple(attrs) != only_opset:
            for name, value in attrs.items():
                if (type(value) is int and -INT32_MAX <= value <= INT32_MAX) or name.startswith("_"):
                    continue  # (startswith: a name that is bytes raises TypeError, as check_node_attrs did)
                if type(value) is list:
                    try:
                        if tuple(value) in int32_lists:
                            continue
                    except TypeError:  # (elements that are no keys: the check below)
                        pass
                    if all(type(i) is int and -INT32_MAX <= i <= INT32_MAX for i in value):
                        int32_lists.add(tuple(value))
                        continue
                check_node_attrs(n, consts)  # (its geometry check included)
                w_index = -1
                break
        if w_index == -1:  # no geometry, or check_node_attrs checked it
            pass
        elif w_index is not None and len(ins) > w_index and type(w := consts.get(ins[w_index])) is np.ndarray \
                and _GEOMETRY_ATTRS.isdisjoint(attrs):  # _geometry_once's common case inline: its key
            if (key := (op, (), w.shape)) not in geometry_ok:
                _check_geometry(n, consts)
                geometry_ok.add(key)
        else:
            _geometry_once(n, consts, geometry_ok)
        if not known.issuperset(ins):  # (the loops below name the culprit; set operations are faster)
            for i in ins:
                if i and i not in known:
                    raise ValueError(f"{_where(n)} reads tensor {i!r}, which no initializer, graph input or "
                                     f"earlier node produces")
        if len(outs) == 1 and outs[0] not in known:  # (outs[0] is not empty: checked above)
            known.add(outs[0])
            continue
        for o in outs:
            if o in known:
                raise ValueError(f"{_where(n)} writes tensor {o!r}, which an initializer, a graph input or an "
                                 f"earlier node already produces")
            if o:
                known.add(o)
    for t in g.outputs:
        if t.name not in known:
            raise ValueError(f"graph output {t.name!r} is produced by no node, initializer or graph input")


def _where(n: Node) -> str:
    return f"node {n.name!r} ({n.op})"
