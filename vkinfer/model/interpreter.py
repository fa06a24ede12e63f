"""The interpreter: runs graph nodes on host arrays through the op table (vkinfer.model.op_table.OPS).

It is the reference device and the host's executor for nodes no device lowers: numpy only, it never calls a
device. `trace` gives every tensor's shape and dtype, with the shape rules (op_table.SHAPES) standing in for
the kernels too slow to run just for shapes.
"""

from __future__ import annotations

import math

import numpy as np

from .graph import Graph, Node
from .op_table import OPS, SHAPES, VALUE_FREE
from .size_rules import BOUNDS, WORK
from .sizes import CURRENT, DEFAULT, Arena, Limits, SizeLimitError, needs_bytes
from .slab import DATA, SLAB_BYTES, scratch, slab
from .value_shapes import SHAPE_INPUTS


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


def trace(g: Graph, feed: dict[str, np.ndarray],
          limits: Limits | None = None) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every tensor for `feed`, in numpy. Each node is run by its kernel, or checked by its
    shape rule (convolutions, matrix products, QLinearAdd/Mul, TFLite's ADD), whose output stands in as zeros of
    the right shape: MobileNetV2 traces in 12 ms, where running its convolutions in numpy took 130-200 ms. A rule's
    answer serves every node alike (`_Answers`: a 20k-node QLinearAdd chain traces in 0.17 s, 2.9 s when each
    node ran its kernel), and nodes whose outputs' values reach a shape-deciding input run their kernels. Values
    after a stand-in are not the model's, so where they make a later kernel refuse (a float Div of zeros is NaN,
    which QuantizeLinear refuses) the trace runs again on real values, which gives the model's own error if there
    is one; a graph with an op whose output shape depends on values traces on real values throughout.

    Sizes before memory (vkinfer/model/sizes.py): the feed, each node's outputs (from its shape rule, or from its
    size rule before its kernel runs: model/size_rules.py) and the scratch of each kernel run are checked against
    `limits` (default sizes.DEFAULT) before they are allocated; past them, SizeLimitError (a ValueError) names
    the node, the tensor, its shape and the limit."""
    limits = DEFAULT if limits is None else limits
    token = CURRENT.set(limits)  # for the guarded kernels (op_table.guard)
    try:
        if not any(n.op in _VALUE_SHAPED for n in g.nodes):
            try:
                return _trace(g, feed, SHAPES, limits)
            except (SizeLimitError, ShapeError):
                raise
            except _ModelError as m:
                raise m.error from None
            except (ValueError, TypeError):
                pass
        return _trace(g, feed, {}, limits)
    finally:
        CURRENT.reset(token)


class ShapeError(ValueError):
    """A node whose input shapes alone make its kernel refuse (a broadcast or a Reshape that cannot be): the model's
    own error in either pass of the trace, so it is raised at once (the values pass would run every kernel on the
    whole tensors only to raise it again: a mutated batch-65536 ShuffleNet took 21 s and 2.3 GB)."""


def _shape_check(node: Node, args: list, stood_in: set[str]) -> None:
    """ShapeError where `node` cannot run for its input shapes, whatever the values (see ShapeError)."""
    data = DATA.get(node.op, ())
    if node.op in DATA or node.op == "Where":
        idx = range(len(args)) if data is None else data
        shapes = [np.shape(args[i]) for i in idx if i < len(args) and isinstance(args[i], np.ndarray)]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            raise ShapeError(f"node {node.name} ({node.op}): input shapes {[list(s) for s in shapes]} do not "
                             f"broadcast") from None
    elif node.op == "Reshape" and len(args) > 1 and isinstance(args[0], np.ndarray) and node.inputs[1] not in stood_in:
        want = [int(v) for v in np.asarray(args[1]).reshape(-1)]
        if not node.attrs.get("allowzero", 0):
            want = [args[0].shape[i] if v == 0 and i < args[0].ndim else v for i, v in enumerate(want)]
        known = [v for v in want if v != -1]
        if want.count(-1) <= 1 and all(v >= 0 for v in known) and (
                (-1 not in want and math.prod(known) != args[0].size)
                or (-1 in want and (math.prod(known) == 0 or args[0].size % math.prod(known)))):
            raise ShapeError(f"node {node.name} ({node.op}): cannot reshape {list(args[0].shape)} "
                             f"({args[0].size} elements) into {want}")


def _trace(g: Graph, feed: dict[str, np.ndarray], rules: dict,
           limits: Limits) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    arena = Arena(g, limits)
    info = {k: (v.shape, v.dtype) for k, v in g.consts.items() if isinstance(v, np.ndarray)}
    values: dict[str, np.ndarray] = dict(g.consts)
    for k, v in feed.items():
        if isinstance(v, np.ndarray):
            arena.made(None, k, v.shape, v.dtype)
            info[k] = (tuple(v.shape), v.dtype)
        values[k] = v
    memo = Memo()
    stood_in: set[str] = set()  # tensors whose values come from a stand-in (zeros), directly or through nodes
    answers = _Answers(g, info)
    shaping = _shape_valued(g) if rules else frozenset()
    for i, node in enumerate(g.nodes):
        rule = rules.get(node.op)
        try:
            try:
                ruled = rule is not None and (not shaping or shaping.isdisjoint(node.outputs)) \
                    and _stand_in(node, values, rule, arena, answers, stood_in)
            except SizeLimitError:
                raise
            except (ValueError, TypeError) as e:
                if rules and _own_error(node, stood_in):
                    raise _ModelError(e) from e
                raise
            if ruled:
                standin = True
            else:
                args = [values[n] if n else None for n in node.inputs]
                _shape_check(node, args, stood_in)
                outs, standin = _checked(g, node, args, arena, memo)
                if len(node.outputs) > len(outs):
                    _unmade(g, node, len(outs))
                for j, (name, v) in enumerate(zip(node.outputs, outs, strict=False)):
                    if name:
                        values[name] = v
                        if isinstance(v, np.ndarray):
                            info[name] = (tuple(v.shape), v.dtype)
                            arena.made(node, name, v.shape, v.dtype, j)
        except TypeError as e:
            # A type error is the model's own whatever the values: stand-ins have the real dtypes (ONNX's types
            # never depend on values). A Mul of a float32 Softmax and a uint8 constant after a [16777216, 8] input
            # re-ran the Softmax exactly in numpy (33 s a device) only to raise it again (fuzz finding
            # hang/onnx-libfuzzer-35a6540b).
            if rules:
                raise _ModelError(e) from e
            raise
        except SizeLimitError:
            shape_from = [node.inputs[k] for k in SHAPE_INPUTS.get(node.op, ()) if k < len(node.inputs)]
            if rules and any(t in stood_in for t in shape_from):  # a size from stand-in values: retry on real ones
                raise ValueError("a size computed from stand-in values") from None
            raise
        if standin or node.op not in ("Shape", "Size") and any(t in stood_in for t in node.inputs):
            stood_in.update(node.outputs)
        for t in arena.done(i):  # read for the last time (never a constant): only its shape is kept
            values.pop(t, None)
    return info


class _ModelError(Exception):
    """The model's own error found by a shape rule in the first pass of the trace (`_own_error`): raised as it is,
    without the pass on real values."""

    def __init__(self, error: Exception):
        super().__init__(str(error))
        self.error = error


def _own_error(node: Node, stood_in: set[str]) -> bool:
    """Whether a shape rule's refusal of `node` is the model's own, whatever the values before it: every input that
    holds a stand-in's zeros is one whose values the rule never reads (op_table.VALUE_FREE). A QLinearConv with a
    zero weight scale after four convolutions of a 25M-pixel image was refused only after the pass on real values
    had run them all in numpy (11-60 s: fuzz finding hang/onnx-libfuzzer-7d5ad253)."""
    free = VALUE_FREE.get(node.op)
    return free is not None and all(k in free for k, t in enumerate(node.inputs) if t and t in stood_in)


def _shape_valued(g: Graph) -> set[str]:
    """The tensors whose values can reach a shape-deciding input (value_shapes.SHAPE_INPUTS) through any nodes but
    Shape and Size: their nodes run their kernels in the trace, as a stand-in's zeros would decide a shape."""
    stack = [n.inputs[k] for n in g.nodes for k in SHAPE_INPUTS.get(n.op, ()) if k < len(n.inputs) and n.inputs[k]]
    if not stack:
        return set()
    producer = {o: n for n in g.nodes for o in n.outputs if o}
    seen: set[str] = set()
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        p = producer.get(t)
        if p is not None and p.op not in ("Shape", "Size"):
            stack.extend(x for x in p.inputs if x)
    return seen


_ATOMS = frozenset({int, str, bytes, bool, type(None)})
_ABSENT = ("absent",)  # an optional input left out, in a key
_SCALARS = (np.number, np.bool_)


def _atom(v) -> object:
    """An attribute value as a key part, or a TypeError: types kept apart (1, 1.0 and True are equal in Python)
    and floats by their bits (0.0 and -0.0 too)."""
    t = type(v)
    if t in _ATOMS:
        return t, v
    if t is float:
        return t, v.hex()
    if t is list or t is tuple:
        return t, tuple(_atom(e) for e in v)
    raise TypeError(t)


class _Answers(dict):
    """Shape rules' answers by what they read (`key`), so a rule checks a node once for all nodes alike: a
    20k-node chain of QLinearAdds, or of QLinearConvs each with its own weights, is one rule call. A rule reads
    the node's attributes, the values of its inputs but those in op_table.VALUE_FREE, and their shapes and dtypes
    (the values of a stand-in's zeros are its shape and dtype); only its answers, never its errors, are kept."""

    def __init__(self, g: Graph, info: dict):
        super().__init__()
        self.consts, self.info, self.graph = g.consts, info, g
        # tensor -> what a rule reads of its values: a stand-in's zeros, their (shape, dtype); a constant, `_const`
        # scalars (TFLite's scales and zero points, 6 a node) at once: 2x faster than one by one in `_const`
        self.known: dict[str, tuple] = {
            t: (type(v), bytes(v.data)) if isinstance(v, _SCALARS) else (v.dtype, (), v.tobytes())
            for t, v in g.consts.items() if isinstance(v, _SCALARS) or type(v) is np.ndarray and not v.ndim}
        self._arrays: dict[tuple, np.ndarray] = {}

    def key(self, node: Node) -> tuple | None:
        """What the node's rule reads, or None where it reads a value that is not a constant's."""
        ins = node.inputs
        vals = list(map(self.known.get, ins))
        free = VALUE_FREE.get(node.op)
        if free:
            for j in free:
                if j < len(ins):
                    vals[j] = self.info.get(ins[j]) if ins[j] else _ABSENT
        if None in vals:  # a constant seen first, an absent input, or a value no rule may be answered for
            for j, t in enumerate(ins):
                if vals[j] is None:
                    c = self._const(t) if t else _ABSENT
                    if c is None or free and j in free:
                        return None
                    vals[j] = c
        attrs: list = []
        for a, v in node.attrs.items():
            t = type(v)
            if t is int or t is str:
                attrs.append((a, t, v))
            elif a != "_proto":  # the node as the model wrote it (its attributes are in attrs): read by no rule
                try:
                    attrs.append((a, *_atom(v)))
                except TypeError:
                    return None
        return (node.op, len(node.outputs), tuple(attrs), *vals)

    def _const(self, t: str) -> tuple | None:
        v = self.consts.get(t)
        # a small constant (a scale, a zero point) by value: nodes share those more than names
        if type(v) is np.ndarray:
            c = (v.dtype, v.shape, v.tobytes()) if v.nbytes <= 256 else ("name", t)
        elif isinstance(v, _SCALARS):
            c = (type(v), bytes(v.data))  # its type is its dtype; 4x faster than tobytes
        elif v is None:
            return None
        else:
            c = ("name", t)
        self.known[t] = c
        return c

    def zeros_of(self, shape, dtype) -> np.ndarray:
        """Zeros of `shape` and `dtype`: read-only and shared where small (a kernel that would write into its
        input makes the trace retry on real values), fresh where large (numpy takes zeroed pages, touched only if
        written, and they are freed after their last reader)."""
        k = (tuple(shape), dtype)
        z = self._arrays.get(k)
        if z is None:
            z = np.zeros(shape, dtype)
            if z.nbytes > SLAB_BYTES:
                return z
            z.flags.writeable = False
            self._arrays[k] = z
        return z


def _stand_in(node: Node, values: dict, rule, arena: Arena, answers: _Answers, stood_in: set[str]) -> bool:
    """The node checked by its shape rule (or by the answer it gave a node alike: `_Answers`), its outputs' sizes
    checked by `arena`, then zeros of their shapes standing in for its outputs; False where the rule leaves the
    node to its kernel (it returns None: the kernel's outputs are not arrays of the rule's shapes)."""
    key = answers.key(node)
    got = answers.get(key, False) if key is not None else False
    if got is False:
        args = [values[n] if n else None for n in node.inputs]
        _shape_check(node, args, stood_in)
        # A slab's broadcast view is given to the rule as zeros (which a rule may make contiguous at no cost: numpy
        # takes zeroed pages from the kernel for large arrays, touched only when written).
        args = [np.zeros(v.shape, v.dtype) if isinstance(v, np.ndarray) and v.nbytes > SLAB_BYTES
                and not v.flags.c_contiguous else v for v in args]
        shapes = _call(node, args, rule)
        if shapes is not None:
            needs = [(j, s, dt) for j, (s, dt) in enumerate(shapes)]
            sizes = needs_bytes(needs)
            # per output: (index, its shared zeros and their (shape, dtype), or None where they are made fresh,
            # shape, dtype, bytes): a node answered before takes them with no zeros_of call or pair per output
            made = []
            for (j, s, dt), n in zip(needs, sizes, strict=True):
                z = answers.zeros_of(s, dt) if n <= SLAB_BYTES else None
                made.append((j, z, None if z is None else (z.shape, z.dtype), s, dt, n))
            got = (needs, made, max(sizes, default=0), sum(sizes))
        else:
            got = None
        if key is not None:
            answers[key] = got
    if got is None:
        return False
    needs, made, largest, total = got
    outs = node.outputs
    if len(outs) > len(needs):
        _unmade(answers.graph, node, len(needs))
    if largest > arena.limits.tensor_bytes or arena.total + total > arena.limits.session_bytes:
        arena.expect(node, needs)  # raises SizeLimitError naming the output
    info, known = answers.info, answers.known
    for j, v, pair, s, dt, n in made:
        if v is None:
            v = answers.zeros_of(s, dt)
            pair = (v.shape, v.dtype)
        name = outs[j] if j < len(outs) else None
        if name:
            values[name] = v
            info[name] = known[name] = pair
            arena.add(name, n)
    return True


def _unmade(g: Graph, node: Node, made: int) -> None:
    """A ValueError naming the node's first output past the `made` its kernel computes that a node or the graph
    reads (a MaxPool's Indices: its reader found no value, a KeyError in the fuzzers' hands); one nothing reads
    may stay named, as exporters leave it."""
    extra = {t for t in node.outputs[made:] if t}
    read = extra & ({t.name for t in g.outputs} | {t for n in g.nodes for t in n.inputs if t in extra})
    for j in range(made, len(node.outputs)):
        if node.outputs[j] in read:
            raise ValueError(f"node {node.name!r} ({node.op}): output {j} ({node.outputs[j]!r}) is not supported: "
                             f"vkinfer computes the first {made} output(s) of this node")


def _checked(g: Graph, node: Node, args: list, arena: Arena, memo: Memo) -> tuple[list, bool]:
    """A node's outputs in the trace by its kernel, and whether they stand in for the model's values: a slab of an
    element-wise op on large inputs (model/slab.py) does, its kernel's do not; each size checked by `arena` before
    the allocation, from the shape rule, else from the size rule (outputs and the kernel's own scratch); ops with
    neither make outputs no larger than a small multiple of their inputs."""
    got = _call(node, args, lambda n, a: slab(n, a, lambda n2, a2: OPS[n2.op](n2, a2, memo.node(g, n2))))
    if got is not None:
        views, shapes = got
        arena.expect(node, [(j, s, dt) for j, (s, dt) in enumerate(shapes)])
        return views, True
    needs = _needs(node, args)
    if node.op not in WORK and node.op not in BOUNDS:
        needs += scratch(node, args)
    arena.expect(node, needs)
    return _call(node, args, OPS[node.op], memo.node(g, node)), False


def _needs(node: Node, args: list) -> list:
    """What running the node's kernel on `args` allocates, as far as its rules tell: its outputs (shape rule, else
    size rule) and its scratch."""
    rule = SHAPES.get(node.op)
    if rule is None:
        return _bound(node, args, BOUNDS[node.op]) if node.op in BOUNDS else []
    needs = [(j, s, dt) for j, (s, dt) in enumerate(_bound(node, args, rule) or [])]  # None: the rule's "no"
    if needs and node.op in WORK:
        needs += _bound(node, args, WORK[node.op], [(s, dt) for _, s, dt in needs])
    return needs


def _bound(node: Node, args: list, fn, *extra) -> list:
    """A size rule's needs; none where it cannot read the node (an attribute or input the kernel refuses: the
    kernel gives the node's own error before allocating)."""
    try:
        return fn(node, args, *extra)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, ZeroDivisionError):
        return []
