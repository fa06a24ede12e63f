"""Lowering: which device form a node runs in, registered per (device kind, op type) by the op's own file.

A lowering is `fn(ctx, node) -> Layer | None`: the node in the device's form (a Layer), or None when that
device does not run this node (it then runs on the host, or a hand-given placement is refused with the
reason). A ValueError from a lowering is such a refusal with its reason (a device limit, say). Each op's
lowering lives in a file named after the op and registers itself with `@lower(kind, *ops)`:
vkinfer/cpu/<op>.py for the native CPU graph, vkinfer/vulkan/<op>.py for Vulkan. The helpers below are
what lowerings share: constants and traced shapes (`Ctx`), and the conditions under which a node keeps a
device's form (channel concat, broadcast kinds of binary ops, reshapes that keep the bytes).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable

import numpy as np

from ..layout import aliases
from ..reference._opdef import definitions
from ..reference.qlinear_concat import qlinear_concat
from .graph import Graph, Node

LoweringFn = Callable[..., "Layer | None"]  # fn(ctx, node, backend)
_REGISTRY: dict[tuple[str, str], list[LoweringFn]] = {}
# The modules whose import registers each device kind's lowerings.
_MODULES = {"cpu": "vkinfer.cpu._discover", "vulkan": "vkinfer.vulkan._discover"}


def lower(kind: str, *ops: str, fallback: bool = False) -> Callable[[LoweringFn], LoweringFn]:
    """Register `fn` as the lowering of `ops` on device kind `kind` ("cpu", "vulkan"). Lowerings of one op are
    tried in registration order, `fallback` ones (a general form such as a lookup table) after the others."""
    def deco(fn: LoweringFn) -> LoweringFn:
        fn._fallback = fallback  # type: ignore[attr-defined]
        for op in ops:
            fns = _REGISTRY.setdefault((kind, op), [])
            fns.append(fn)
            fns.sort(key=lambda f: getattr(f, "_fallback", False))  # stable: registration order otherwise
        return fn
    return deco


_LOADED: set[str] = set()  # kinds whose op files are imported (import_module per node was 3 us of a chain's node)


def lowerings(kind: str, op: str) -> list[LoweringFn]:
    """The lowerings registered for `op` on `kind` (importing that kind's op files on first use)."""
    if kind not in _LOADED:
        importlib.import_module(_MODULES[kind])
        _LOADED.add(kind)
    return _REGISTRY.get((kind, op), [])


def lowered_ops(kind: str) -> set[str]:
    """Every op type some lowering of `kind` may take."""
    importlib.import_module(_MODULES[kind])
    return {op for k, op in _REGISTRY if k == kind}


def lower_node(kind: str, ctx: Ctx, node: Node, backend) -> Layer | None:
    """The first registered lowering of `node` on `kind` that takes it; raises ValueError with the last
    refusal's reason when one refused with a reason."""
    if kind == "vulkan":
        _check_buffer_range(ctx, node)
    why = None
    for fn in lowerings(kind, node.op):
        try:
            layer = fn(ctx, node, backend)
        except ValueError as e:
            why = e
            continue
        if layer is not None:
            return layer
    if why is not None:
        raise why
    return None


# The storage buffer range every Vulkan device guarantees (the spec's minimum maxStorageBufferRange, 2**27 bytes):
# a node with a larger tensor is refused at lowering and runs on the CPU, on every device alike and without
# opening one (fuzz finding tflite-libfuzzer-624645b6: a 512 MiB QLinearConcat loaded on device="vulkan" and then
# failed at run, "exceeds this device's maxStorageBufferRange", where cpu and the reference ran it).
VULKAN_BUFFER_RANGE = 1 << 27


def _check_buffer_range(ctx: Ctx, node: Node) -> None:
    """ValueError when one of the node's tensors would not fit one Vulkan storage buffer (8-bit activations in the
    packed form: rows padded to whole words)."""
    import math

    from ..layout import packed_words

    for t in (*node.inputs, *node.outputs):
        if not t or t not in ctx.info:
            continue
        shape, dt = ctx.info[t]
        nbytes = 4 * packed_words(tuple(shape)) if dt in EIGHT_BIT and len(shape) else \
            math.prod(shape) * dt.itemsize
        if nbytes > VULKAN_BUFFER_RANGE:
            raise ValueError(f"tensor {t!r} of shape {list(shape)} takes {nbytes} bytes, over the {VULKAN_BUFFER_RANGE}"
                             f"-byte storage buffer range every Vulkan device guarantees")


EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))
ALIAS_OPS = ("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze")


@dataclasses.dataclass
class Layer:
    """A node the backend runs in its own form: `acts` are its activation inputs (in that form); `alias`
    layers only reinterpret their input (a reshape that keeps the packed bytes); `impl` is the backend's, or
    `make()` builds it when the layer is first used (Vulkan: weights uploaded, tables made only for the nodes the
    placement puts there, so the dispatcher can ask every device whether it runs a node for free)."""

    node: Node
    acts: list[str]
    out: str
    impl: object = None
    alias: bool = False
    scratch: int = 0  # CPU: bytes of temporary arena space the layer's operators need
    # CPU: a pure permutation of the input's form bytes, (shape, perm) as numpy's transpose: edges fold it
    # into their own conversion (one move instead of two, or none)
    move: tuple | None = None
    # CPU: another emitter writing the same values in the host's element order (quantize of a 4-D tensor)
    plain: object = None
    # CPU: another emitter writing the values in the Vulkan device layout (vkinfer/layout.py's packed form: rows padded
    # to words, raw bytes), for a tensor only Vulkan segments read (a quantize: the model's input)
    packed: object = None
    make: Callable[[], object] | None = None

    def build(self) -> object:
        """The backend's form (made on first call when the lowering deferred it)."""
        if self.impl is None and self.make is not None:
            self.impl, self.make = self.make(), None
        return self.impl


def alias_roots(layers: list[Layer]) -> dict[str, str]:
    """Alias layer output -> the tensor whose storage it shares (through chains of aliases)."""
    root: dict[str, str] = {}
    for lay in layers:
        if lay.alias:
            root[lay.out] = root.get(lay.acts[0], lay.acts[0])
    return root


class Ctx:
    """What a layer factory may look at: constants, traced shapes/dtypes."""

    def __init__(self, g: Graph, info: dict):
        self.g, self.info = g, info

    def const(self, name: str) -> bool:
        return not name or name in self.g.consts

    def shape(self, name: str) -> tuple[int, ...]:
        return self.info[name][0]

    def dtype(self, name: str) -> np.dtype:
        return self.info[name][1]

    def args(self, node: Node, acts: int = 1) -> list:
        """The node's input values for spec building: zeros for activations, constants for the rest."""
        out = []
        for i, n in enumerate(node.inputs):
            if not n:
                out.append(None)
            elif n in self.g.consts:
                out.append(self.g.consts[n])
            elif i < acts:
                out.append(np.zeros(self.shape(n), self.dtype(n)))
            else:
                raise ValueError("not constant")
        return out

    def quantized(self, *names: str) -> bool:
        info = self.info
        for n in names:
            e = info.get(n)
            if e is None or e[1] not in EIGHT_BIT:
                return False
        return True


def pool_qparams(ctx: Ctx, node: Node) -> tuple:
    """(x_scale, x_zero_point, y_scale, y_zero_point) of a com.microsoft quantized pool node (inputs x, x_scale,
    x_zero_point, y_scale, y_zero_point; zero points optional), checked as the reference checks them."""
    from ..reference import _qcheck as qc

    ins, c, dt = node.inputs, ctx.g.consts, ctx.dtype(node.inputs[0])
    xs, ys = qc.scale("x_scale", c[ins[1]]), qc.scale("y_scale", c[ins[3]])
    xz = qc.zero_point("x_zero_point", c[ins[2]] if ins[2:3] and ins[2] else None, dt)
    yz = qc.zero_point("y_zero_point", c[ins[4]] if ins[4:5] and ins[4] else None, dt)
    return xs, xz, ys, yz


def _once(ctx: Ctx, key: tuple, make: Callable[[], object]):
    """`make()` once per Ctx and key (a spec both devices' lowerings ask for when the dispatcher weighs them; 0.3
    ms per convolution), its ValueError (a refusal) remembered as well."""
    memo = ctx.__dict__.setdefault("_once", {})
    if key not in memo:
        try:
            memo[key] = (make(), None)
        except ValueError as e:
            memo[key] = (None, e)
    value, error = memo[key]
    if error is not None:
        raise error
    return value


def memo(ctx: Ctx, key: tuple | None, make: Callable[[], object]):
    """`make()` once per Ctx and `key` (None: no memo, `make()` every time), its ValueError remembered as well.
    For lowerings' pure functions of shapes and constant values: a chain's nodes repeat them (QLinearAdd's
    constants, strides and collapsed axes were 90 us a node, 20k times)."""
    if key is None:
        return make()
    return _once(ctx, ("memo", key), make)


def attrs_key(node: Node) -> tuple | None:
    """The node's attributes as a hashable key, or None where a value is not a plain int, float, str or a
    list of them (a tensor attribute: no memo). The importer's `_proto` (the node's own proto, names included;
    its attributes are the others) is left out: no memoised lowering reads it."""
    out = []
    for k, v in node.attrs.items():
        if k == "_proto":
            continue
        if isinstance(v, (list, tuple)):
            if not all(type(e) in (int, float, str) for e in v):
                return None
            v = (type(v).__name__, tuple((type(e).__name__, e) for e in v))
        elif v is not None and type(v) not in (int, float, str):
            return None
        out.append((k, type(v).__name__, v))
    return tuple(sorted(out))


def value_key(ctx: Ctx, names, by_shape=()) -> tuple | None:
    """A hashable key of tensors `names`: a constant by its dtype, shape and bytes (those at positions `by_shape`
    by dtype and shape only), an activation by its traced (shape, dtype), an empty name as None; None where a
    constant is not a numpy array or scalar, or an activation has no traced shape. Each constant's full entry is
    made once per Ctx (a chain's nodes share their scales and zero points: 30 us a node otherwise); an activation's is
    the trace's own (shape, dtype) pair, looked up (making and caching an entry per activation, unique to a node,
    was 60% of the 20k-node QLinearAdd chain's value_key time: 3 entries a node, never reused)."""
    full = ctx.__dict__.get("_value_keys")
    if full is None:
        full = ctx.__dict__["_value_keys"] = {}  # constants' full entries by name (a few, shared by many nodes)
    consts, info = ctx.g.consts, ctx.info
    out = []
    append = out.append
    for i, n in enumerate(names):
        if not n:
            append(None)
            continue
        # a shape-only entry is made each time (a node's own weights or operand: caching 100k of them, each read
        # once, cost more than making them); a full one is looked up first, before the model's 100k constants
        shape_only = i in by_shape
        e = None if shape_only else full.get(n)
        if e is None and n in consts:
            e = _value_entry(ctx, n, shape_only)
            if not shape_only:
                full[n] = e
        if e is False:
            return None
        if e is None:
            e = info.get(n)
            if e is None:
                return None
            if type(e[0]) is not tuple or not isinstance(e[1], np.dtype):
                e = (tuple(e[0]), np.dtype(e[1]))  # (the trace's pairs are these already)
        append(e)
    return tuple(out)


def _value_entry(ctx: Ctx, n: str, shape_only: bool):
    """value_key's entry of constant `n`: (type, dtype, shape, bytes or None), or False where none can be made."""
    v = ctx.g.consts[n]
    t = type(v)
    if t is not np.ndarray and not isinstance(v, (np.ndarray, np.generic)):
        return False
    dt = v.dtype  # the dtype itself (equal and hashing equal for the same type and byte order)
    if dt.hasobject:
        return False
    return t, dt, v.shape, None if shape_only else v.tobytes()


def _shape_only(spec):
    """`spec` with its activation as a zero broadcast to its shape (read-only, no memory): the devices' lowerings
    read its shape and dtype only, and the plan keeps the spec, so Ctx.args' np.zeros of the activation (untouched
    pages, but address space) stayed mapped: 1 GiB per session for a legal 1x8x8x16777216 input, where the fuzz
    regressions' check runs three sessions under a 6 GiB RLIMIT_AS."""
    x = spec.x
    object.__setattr__(spec, "x", np.broadcast_to(np.zeros((), x.dtype), x.shape))
    return spec


def conv_spec_of(ctx: Ctx, node: Node):
    """The ConvSpec of a QLinearConv(Clamp) node with constant weights on a quantized 4-D input, else None (a
    ValueError from the spec is a refusal with its reason).

    Computed once per distinct (input shape, attributes, scales, zero points, weight and bias dtypes and shapes):
    another node of the same gets that spec with its own weights and bias (the spec's only parts taken from
    their values; conv_node_spec checks them by dtype and shape), 120 us a node otherwise."""
    x = node.inputs[0]
    if not (static(ctx, node, 1) and ctx.quantized(x)) or len(ctx.shape(x)) != 4:
        return None
    ins = node.inputs
    w_name, b_name = ins[3] if len(ins) > 3 else "", ins[8] if len(ins) > 8 else ""
    act, attrs = node.attrs.get("activation"), attrs_key(node)
    key = vk = None
    if attrs is not None and w_name and (act is None or isinstance(act, (str, tuple))):
        vk = value_key(ctx, ins, by_shape=(3, 8))
        key = None if vk is None else ("conv", node.op, attrs, vk)
    try:
        hash(key)
    except TypeError:  # an activation tuple holding something unhashable
        key = None
    if key is None:
        return _once(ctx, ("conv", node.name), lambda: _conv_node_spec(ctx, node, node.attrs.get("activation")))
    memo_ = ctx.__dict__.setdefault("_conv_specs", {})
    base = memo_.get(key)
    if base is None:
        spec = _once(ctx, ("conv", node.name), lambda: _conv_node_spec(ctx, node, act))
        memo_[key] = (spec, w_name, b_name)
        return spec
    spec, w0, b0 = base
    if w0 == w_name and b0 == b_name:
        return spec
    c = ctx.g.consts
    w = np.asarray(c[w_name])
    if w.ndim == 3:  # as conv_node_spec: a 1-D convolution's weights get H = 1
        w = w[:, :, None, :]
    bias = np.ascontiguousarray(c[b_name]) if b_name else np.zeros(spec.bias.shape, np.int32)
    # dataclasses.replace with the two fields, without its per-field __init__ (6 us a node): the same state
    out = object.__new__(type(spec))
    out.__dict__.update(spec.__dict__)
    object.__setattr__(out, "w", np.ascontiguousarray(w))
    object.__setattr__(out, "bias", bias)
    return out


def _conv_node_spec(ctx: Ctx, node: Node, act):
    """conv_spec_of's spec made afresh (imported here, on a memo miss only: an import statement in conv_spec_of
    was 2.3% of a 100k-node QLinearConv chain's loading)."""
    from ..reference.qlinear_conv import conv_node_spec

    return _shape_only(conv_node_spec(node, ctx.args(node), act))


def qgemm_spec_of(ctx: Ctx, node: Node):
    """The ConvSpec (a 1x1 convolution over rows) of a QGemm(Clamp) node with constant B on a quantized 2-D A
    that is not transposed, else None."""
    from ..reference.qgemm import qgemm_node_spec

    x = node.inputs[0]
    if not (static(ctx, node, 1) and ctx.quantized(x)) or node.attrs.get("transA", 0) or len(ctx.shape(x)) != 2:
        return None
    return _once(ctx, ("qgemm", node.name),
                 lambda: qgemm_node_spec(node, ctx.args(node), node.attrs.get("activation")))


def channel_concat(ctx: Ctx, node: Node) -> tuple[list[str], list[np.ndarray | None]] | None:
    """(inputs, each input's 256-byte requantization table indexed by raw byte, or None: copied as is) of a
    (QLinear)Concat along the channel axis of quantized tensors, else None."""
    parts = concat_parts(ctx, node)
    if parts is None or not channel_concat_ok(ctx, node, parts[0], int(node.attrs["axis"])):
        return None
    xs, params, y = parts
    dt = ctx.dtype(xs[0])
    return xs, [concat_table(dt, p, y) for p in params]


def static(ctx: Ctx, node: Node, acts: int) -> bool:
    """Whether every input of `node` after its first `acts` is a constant or absent (Ctx.const of each, without
    a call per input: 2% of a QLinearConv chain's plan)."""
    return all(map(ctx.g.consts.__contains__, filter(None, node.inputs[acts:])))


def transpose_perm(node: Node, rank: int) -> tuple[int, ...]:
    """A Transpose node's permutation (ONNX's default: the axes reversed)."""
    perm = node.attrs.get("perm")
    return tuple(range(rank))[::-1] if perm is None else tuple(int(p) for p in perm)


def reshape_like(ctx: Ctx, node: Node) -> bool:
    """A node that keeps the row-major order of a quantized tensor's elements: the reshape family, or a
    Transpose that only moves size-1 axes."""
    x, y = node.inputs[0], node.outputs[0] if node.outputs else ""
    if not x or not ctx.quantized(x, y):
        return False
    if node.op in ALIAS_OPS:
        return True
    if node.op == "Transpose":
        shape = ctx.shape(x)
        moved = [p for p in transpose_perm(node, len(shape)) if shape[p] != 1]
        return moved == sorted(moved)
    return False


def alias_ok(ctx: Ctx, node: Node, kind: str) -> bool:
    """Whether a layout-changing node (the reshape family or any Transpose) on quantized tensors shares its
    input's storage on device kind `kind` ("cpu", "vulkan"): vkinfer.layout.aliases, the one rule every device's
    lowering of these ops asks. Elsewhere the lowering moves the bytes into the output's own form."""
    x, y = node.inputs[0] if node.inputs else "", node.outputs[0] if node.outputs else ""
    if not x or not y or not ctx.quantized(x, y):
        return False
    xs, ys = ctx.shape(x), ctx.shape(y)
    if node.op in ALIAS_OPS:
        return aliases(kind, xs, ys)
    if node.op == "Transpose":
        perm = transpose_perm(node, len(xs))
        if sorted(perm) != list(range(len(xs))) or [xs[p] for p in perm] != list(ys):
            return False
        return aliases(kind, xs, ys, perm)
    return False


def channel_concat_ok(ctx: Ctx, node: Node, xs: list[str], axis: int) -> bool:
    rank = len(ctx.shape(xs[0]))
    axis = axis % rank if rank else 0
    return rank >= 1 and ctx.quantized(*xs, node.outputs[0]) and axis == (1 if rank == 4 else rank - 1)


def binary_mode(ctx: Ctx, node: Node, general: bool = False) -> str | None:
    """How a QLinearAdd/Mul runs on a device: "equal" shapes, "row" (b is one row of a's channels, broadcast:
    the table lookups' forms), or None (the host runs it). The tables are built on flat operands, where ONNX
    Runtime never swaps the operands, so "row" excludes broadcasts for which it would swap them. `general`:
    "general" for any other numpy broadcast (either side, scalars, ranks up to 6) whose output has the
    broadcast shape, run at per-axis strides (cpu/qlinear_add.py, vulkan/qlinear_lut.py), the operand swap
    included."""
    a, b, y = node.inputs[0], node.inputs[3], node.outputs[0]
    if not (ctx.quantized(a, b) and y in ctx.info and static_params(ctx, node, (1, 2, 4, 5, 6, 7))):
        return None
    sa, sb, sy = tuple(ctx.shape(a)), tuple(ctx.shape(b)), tuple(ctx.shape(y))
    key = ("binary_mode", sa, sb, sy, general and ctx.quantized(y))
    return memo(ctx, key, lambda: _binary_mode(sa, sb, sy, key[-1]))


def _binary_mode(sa: tuple, sb: tuple, sy: tuple, general: bool) -> str | None:
    """binary_mode of operand shapes `sa`, `sb` and output shape `sy` (`general`: asked for, on a quantized
    output)."""
    from ..reference.qlinear_add import _input0_is_scalar

    broadcast = None
    if general and len(sa) <= 6 and len(sb) <= 6:
        try:
            broadcast = tuple(np.broadcast_shapes(sa, sb))
        except ValueError:
            broadcast = None
    wide = "general" if broadcast is not None and sy == broadcast else None
    if sy != sa or not sa or _input0_is_scalar(sa, sb):
        return wide
    if sa == sb:
        return "equal"
    if len(sa) > 4:
        # A 5-D tensor's device form is (N, A, B, H, W) with A*B channels: its last axis is not a row of them
        # (tests/ops found Vulkan giving 44 of 48 values wrong for (1, 2, 3, 2, 4) + (1, 1, 1, 1, 4)).
        return wide
    ch = 1 if len(sa) == 4 else len(sa) - 1
    row = tuple(sa[ch] if i == ch else 1 for i in range(len(sa)))
    if sb == row or (len(sa) < 4 and sb == (sa[-1],)):
        return "row"
    return wide


def channel_perm(ctx: Ctx, node: Node) -> np.ndarray | None:
    """A Transpose that only permutes channels in the packed form (5-D (N, A, B, H, W) with perm
    (0, 2, 1, 3, 4)): output channel -> input channel, else None."""
    x = node.inputs[0]
    if not ctx.quantized(x) or len(ctx.shape(x)) != 5:  # before the perm: most transposes are not 5-D
        return None
    perm = tuple(int(p) for p in node.attrs.get("perm") or ())
    if perm != (0, 2, 1, 3, 4):
        return None
    _, a, b, _, _ = ctx.shape(x)
    return np.arange(a * b).reshape(a, b).T.reshape(-1)


def static_params(ctx: Ctx, node: Node, idx) -> bool:
    return all(i >= len(node.inputs) or ctx.const(node.inputs[i]) for i in idx)


def binary_fn(node: Node, consts: dict) -> Callable:
    """The reference of a binary table op (its OpDef's `binary`: QLinearAdd, QLinearMul, TFLite ADD) as fn(a, b)
    over the node's constant parameters."""
    return definitions()[node.op].binary(node, consts)


def unary_fn(node: Node, consts: dict) -> Callable:
    """The reference of a unary table op (its OpDef's `unary`: QLinearLeakyRelu, QLinearSigmoid, ...) as fn(x)."""
    return definitions()[node.op].unary(node, consts)


def table_ops(kind: str) -> tuple[str, ...]:
    """The ops whose definition gives a `kind` ("unary" or "binary") table function: what the lookup table
    lowerings take (cpu/qlinear_lut.py, vulkan/qlinear_lut.py), so a new such op needs no edit there."""
    return tuple(op for op, d in definitions().items() if getattr(d, kind) is not None)


def concat_parts(ctx: Ctx, node: Node) -> tuple[list[str], list, Callable | None] | None:
    """(activation inputs, per-input (scale, zp) or None, output (scale, zp)) of a (QLinear)Concat node."""
    if node.op == "Concat":
        return node.inputs, [None] * len(node.inputs), None
    if not static_params(ctx, node, [0, 1] + [i for i in range(2, len(node.inputs)) if (i - 2) % 3]):
        return None
    c = ctx.g.consts
    xs = [node.inputs[i] for i in range(2, len(node.inputs), 3)]
    params = [(c[node.inputs[i + 1]], c[node.inputs[i + 2]]) for i in range(2, len(node.inputs), 3)]
    return xs, params, (c[node.inputs[0]], c[node.inputs[1]])


def concat_table(dtype, p, y) -> np.ndarray | None:
    """The 256-byte requantization table of one QLinearConcat input (None: copied as is), from the reference."""
    if p is None:
        return None
    from ..reference._lookup import unary_table

    xs, xz = p
    if np.float32(xs) == np.float32(y[0]) and np.asarray(xz) == np.asarray(y[1]):
        return None
    return unary_table(dtype, lambda v: qlinear_concat(y[0], y[1], [(v, xs, xz)], axis=0))


