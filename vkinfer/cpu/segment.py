"""The CPU runner: a segment of CPU-placed nodes compiled into one native graph (vkinfer/cpu/graph.py), run by
one C call per inference.

At build time: every tensor of the segment gets storage (the memory planner's offsets in one arena, or the
run's external buffers for what crosses to and from the host), constant operands are written into the
arena once, the conversions at the segment's edges (host layout <-> the CPU form, int8 <-> canonical bytes)
become operators, and each layer's operators are added in order. A layer that only permutes bytes (a
Transpose, say a TFLite model's NHWC input turned NCHW) next to an edge is folded into the edge's
conversion, and a conversion that moves nothing is dropped: uint8 inputs are then read in place and the
last layer writes straight into the output array. At run time: the inputs are checked, the outputs
allocated, and the graph runs.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np

from ..layout import canonical, flip, form_key, form_perm, form_shape, is_8bit, packed_key, same_bytes, u32, unform_perm
from ..model.lowering import Layer, alias_roots
from ..model.memory import Lifetime
from ._arena import ArenaPlan, ArenaWalk
from .graph import NativeGraph, Ref

# Operators whose C form keeps an indirection buffer of input addresses, rebuilt when the input moves: reading
# the caller's array in place would rebuild it every run, which costs more than copying the input.
_INDIRECT = {"QLinearConv", "vkinfer:QLinearConvClamp", "com.microsoft:QGemm", "vkinfer:QGemmClamp", "QLinearMatMul"}


def refuse_nan(names: list[str], arrays: list[np.ndarray]) -> None:
    """After a native run refused NaN (VKI_ENAN: a quantize operator met one), the ValueError naming the float
    input that holds it, as the references word it; returns where none does (the caller re-raises its error)."""
    for t, a in zip(names, arrays, strict=True):
        if t and a.dtype.kind == "f" and a.size and np.isnan(a).any():
            raise ValueError(f"tensor {t!r} contains NaN (ONNX Runtime's QuantizeLinear result is position "
                             "dependent)")


def run_failed(status: int, names: list[str], arrays: list[np.ndarray]) -> None:
    """Raise the error of a failed native run (status != 0) over inputs `arrays` named `names` ("" for inputs
    that are not float): a refused NaN names its tensor, any other status the library's message."""
    from . import ENAN, _check

    if status == ENAN:
        refuse_nan(names, arrays)
    _check(status, "native graph run")


def packed_nbytes(shape) -> int:
    """Bytes of a tensor of `shape` in the device's packed layout."""
    from ..layout import packed_words

    return 4 * packed_words(tuple(shape))


def _compose(p1, p2) -> tuple[int, ...]:
    """The permutation of a.transpose(p1).transpose(p2)."""
    return tuple(p1[i] for i in p2)


def _identity(shape, perm) -> bool:
    """Whether transposing `shape` by `perm` leaves the bytes in place (only size-1 axes move)."""
    moved = [a for a in perm if shape[a] != 1]
    return moved == sorted(moved)


# Index maps are built to compose two moves across a reshape only up to this many bytes (build-time memory).
_MAP_LIMIT = 1 << 22


def _move_of(lay, info: dict) -> tuple | None:
    """The layer's effect on its input's form bytes as a move (shape, perm), or None where it is not one. An
    alias moves nothing; cpu/reshape.py's one-transpose reshape (one side's form is its host order) is the move
    of that transpose, read off its shapes the way its emitter does."""
    if lay.alias:
        n = int(np.prod(info[lay.out][0], dtype=np.int64))
        return (n,), (0,)
    if lay.move is not None:
        return tuple(lay.move[0]), tuple(lay.move[1])
    if lay.scratch or not getattr(lay.impl, "one_transpose_reshape", False) or len(lay.acts) != 1:
        return None
    xs, ys = tuple(info[lay.acts[0]][0]), tuple(info[lay.out][0])
    if same_bytes(xs):
        return ys, form_perm(ys)
    if same_bytes(ys):
        return form_shape(xs), unform_perm(xs)
    return None


def _chain(m1: tuple, m2: tuple) -> tuple | None:
    """The one move doing move m1 then m2 ((), () where the bytes stay in place), or None where the pair is not
    one transpose this can name. Memoised (a pure function of the shapes and perms; a Transpose chain folds the
    same pair 10k times, 20 us each with the index map)."""
    try:
        return _chain_memo(m1, m2)
    except TypeError:  # a list in a move: unhashable
        return _chain_of(m1, m2)


def _chain_of(m1: tuple, m2: tuple) -> tuple | None:
    (s1, p1), (s2, p2) = m1, m2
    mid = tuple(s1[p] for p in p1)
    if mid == tuple(s2):
        p = _compose(p1, p2)
        return ((), ()) if _identity(s1, p) else (tuple(s1), p)
    n = int(np.prod(s1, dtype=np.int64))
    if n > _MAP_LIMIT:
        return None
    idx = np.arange(n).reshape(s1).transpose(p1).reshape(s2).transpose(p2).reshape(-1)
    if (idx == np.arange(n)).all():
        return (), ()
    if _identity(s1, p1):  # the first only reinterprets: the second's transpose of the same bytes
        return tuple(s2), tuple(p2)
    if _identity(s2, p2):
        return tuple(s1), tuple(p1)
    return None


_chain_memo = functools.lru_cache(maxsize=4096)(_chain_of)


@functools.lru_cache(maxsize=4096)
def _transpose_args(shape: tuple, perm: tuple) -> tuple[int, np.ndarray, np.ndarray]:
    """(rank, shape, perm) as the transpose operator takes them, once per distinct move (read-only: shared by
    every emitter of it; u32's two arrays were 5% of a 20k-Transpose chain's plan, made at each fold)."""
    a, b = u32(shape), u32(perm)
    a.flags.writeable = b.flags.writeable = False
    return len(shape), a, b


def _transpose_emitter(shape: tuple, perm: tuple):
    """A layer emitter of one transpose of `shape` by `perm`."""
    try:
        rank, shape, perm = _transpose_args(tuple(shape), tuple(perm))
    except TypeError:  # an unhashable value in the move
        rank, shape, perm = len(shape), u32(shape), u32(perm)

    def emit(g, refs, out, scratch):
        g.add("transpose", rank, shape, perm, 1, 0, refs[0], out)
    return emit


def _fold_moves(layers: list, info: dict, keep: set[str]) -> list:
    """Layers where each pair of byte moves (Transposes, one-transpose reshapes, aliases in between) along a
    tensor with one reader becomes one move, or an alias where the bytes end where they started: micro_wakeword's
    input Reshape + Transpose and its last ring buffer's Transpose + Reshape (flatten) before the dense layer
    cost four transposes, ~0.45 us of its ~3 us run. `keep`: tensors others read (outputs), never folded away.

    Pairs fold first in layer order, each fold then rechecking the layers from the first one it can have changed:
    after the layer at i folds into its reader, only the producer of its input can fold anew (its reader is now
    the folded layer), so the scan goes on there, else at i (a rescan from the start each time was quadratic: a
    20k-Transpose chain took minutes)."""
    layers = list(layers)
    if not any(lay.alias or lay.move is not None or getattr(lay.impl, "one_transpose_reshape", False)
               for lay in layers):
        return layers  # no layer is a move (`_move_of`): nothing folds (a 100k-node QLinearAdd chain: 0.25 s)
    readers: dict[str, list[int]] = {}
    producer: dict[str, int] = {}
    for i, lay in enumerate(layers):
        for a in dict.fromkeys(lay.acts):
            readers.setdefault(a, []).append(i)
        producer.setdefault(lay.out, i)

    def fold(i: int):
        """(reader index, folded layer) of the layer at i, or None."""
        lay = layers[i]
        rd = readers.get(lay.out, [])
        if lay.out in keep or len(rd) != 1 or len(lay.acts) != 1:
            return None
        nxt = layers[rd[0]]
        if lay.alias and nxt.alias or len(nxt.acts) != 1 or nxt.alias and nxt.out in keep:
            return None  # an alias writes nothing: a segment output it made would stay unwritten
        m1 = _move_of(lay, info)  # most layers are no move: the reader's is not asked then
        m2 = None if m1 is None else _move_of(nxt, info)
        m = _chain(m1, m2) if m2 is not None else None
        if m is None:
            return None
        if m == ((), ()):
            return rd[0], Layer(nxt.node, list(lay.acts), nxt.out, alias=True)
        return rd[0], Layer(nxt.node, list(lay.acts), nxt.out, _transpose_emitter(*m), move=m)

    i, retry = 0, None  # every layer before i but `retry` is known not to fold
    while True:
        if retry is not None:
            at, retry = retry, None
            if (done := fold(at)) is None:
                continue
        else:
            while i < len(layers) and (layers[i] is None or (done := fold(i)) is None):
                i += 1
            if i == len(layers):
                break
            at = i
        r, new = done
        lay = layers[at]
        src = lay.acts[0]
        layers[r], layers[at] = new, None
        del readers[lay.out]
        readers[src] = [r if k == at else k for k in readers[src]]
        producer.pop(lay.out, None)
        p = producer.get(src)
        retry = p if p is not None and p < at and layers[p] is not None else None
    return [lay for lay in layers if lay is not None]


# Constant operands of at most this many bytes and closer than this in the arena are written in one call, the gap
# between them as the zeros the new arena holds (a 20k-node chain wrote 20k constants of 60 bytes one call each:
# 6.7 us a node); larger ones are written as they are (no copy).
_WRITE_GAP = 4096


def _canonical_consts(g: NativeGraph, pieces: list[tuple[int, np.ndarray]]) -> list[tuple[int, np.ndarray]]:
    """Write (offset, array) constants as layout.canonical bytes, 8-bit arrays of one shape and type converted
    together (one transpose and XOR of their stack: 20k constants of a chain took 5 us each one by one) and, where
    their offsets make one run, written in one call; returns the (offset, bytes) pieces left to `_write_consts`."""
    groups: dict[tuple, list[int]] = {}
    for k, (_, a) in enumerate(pieces):
        if a.dtype.itemsize == 1 and is_8bit(a.dtype):
            groups.setdefault((a.shape, a.dtype), []).append(k)
    done = set()
    left = []
    for (shape, dt), ks in groups.items():
        if len(ks) < 8:
            continue
        perm = form_perm(shape)
        stack = np.stack([pieces[k][1] for k in ks]).transpose(0, *(p + 1 for p in perm))
        rows = np.ascontiguousarray(stack).view(np.uint8).reshape(len(ks), -1) ^ np.uint8(flip(dt))
        offs = np.array([pieces[k][0] for k in ks], np.int64)
        order = np.argsort(offs, kind="stable")
        offs = offs[order]
        done.update(ks)
        step, width = np.diff(offs), rows.shape[1]
        d = int(step[0]) if step.size else width
        if (step == d).all() and width <= d <= width + _WRITE_GAP:
            # one run, each row at its offset; rows apart by a fixed step (the planner's aligned blocks: 60-byte
            # constants 64 apart) take the zeros between them, as _write_consts would (a fresh arena's bytes)
            run = rows[order] if d == width else np.zeros((len(ks), d), np.uint8)
            if d != width:
                run[:, :width] = rows[order]
            try:
                g.write(int(offs[0]), run.reshape(-1)[:(len(ks) - 1) * d + width])
                continue
            except ValueError:
                pass  # written piece by piece below, so an error names its piece
        left += [(int(offs[i]), rows[order[i]]) for i in range(len(ks))]
    return left + [(o, canonical(a)) for k, (o, a) in enumerate(pieces) if k not in done]


def _write_consts(g: NativeGraph, pieces: list[tuple[int, np.ndarray]]) -> None:
    """Write constant operands (arena offset, bytes) into a new graph's arena (nothing else written yet, so the
    zeros between neighbours stay zeros): neighbours within _WRITE_GAP bytes in one write. A failing merged write
    is redone piece by piece, so an error names the piece as a write of its own would."""
    pieces = sorted(((int(o), np.ascontiguousarray(b).view(np.uint8).reshape(-1)) for o, b in pieces),
                    key=lambda p: p[0])
    i = 0
    while i < len(pieces):
        start, end, j = pieces[i][0], pieces[i][0] + pieces[i][1].size, i + 1
        while j < len(pieces) and pieces[i][1].size <= _WRITE_GAP and pieces[j][1].size <= _WRITE_GAP \
                and end <= pieces[j][0] <= end + _WRITE_GAP:
            end = max(end, pieces[j][0] + pieces[j][1].size)
            j += 1
        if j == i + 1:
            g.write(start, pieces[i][1])
        else:
            buf = np.zeros(end - start, np.uint8)
            for o, b in pieces[i:j]:
                buf[o - start:o - start + b.size] = b
            try:
                g.write(start, buf)
            except ValueError:
                for o, b in pieces[i:j]:
                    g.write(o, b)
        i = j


class StateForm(NamedTuple):
    """How a CPU graph keeps a streaming model's state between runs: under `key`, the host array of `host_shape`
    and `dtype` as canonical bytes (XOR `xor`) transposed by `perm` (`shape`: the stored array's shape)."""

    key: str
    host_shape: tuple[int, ...]
    perm: tuple[int, ...]
    xor: int
    dtype: np.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.host_shape[p] for p in self.perm)

    def to_form(self, host: np.ndarray) -> np.ndarray:
        """The stored bytes (uint8 of `shape`) of a host array."""
        a = np.ascontiguousarray(host, self.dtype).reshape(self.host_shape).view(np.uint8) ^ np.uint8(self.xor)
        return np.ascontiguousarray(a.transpose(self.perm))

    def to_host(self, stored: np.ndarray) -> np.ndarray:
        """The host array of stored bytes (any uint8 array of the stored size)."""
        inv = [0] * len(self.perm)
        for i, a in enumerate(self.perm):
            inv[a] = i
        a = np.asarray(stored, np.uint8).reshape(self.shape).transpose(inv) ^ np.uint8(self.xor)
        return np.ascontiguousarray(a).view(self.dtype)


class CpuSegment:
    """Layers (vkinfer.model.lowering.Layer with CPU emitters) in order; `inputs` come from the host, `outputs`
    go to it; `info` maps every tensor to its traced (shape, dtype); `consts` are the model's constants."""

    kind = "cpu"

    def __init__(self, layers, inputs: list[str], outputs: list[str], info: dict, consts: dict,
                 form_io: frozenset[str] = frozenset(), packed_io: frozenset[str] = frozenset(),
                 state_io: dict[str, str] | None = None):
        """`form_io`: 8-bit inputs and outputs exchanged with another device's segment in this graph's own form
        (canonical bytes, 4-D as NHWC; see `form_key`): no transpose or XOR at the edge, and the Vulkan side
        packs rows, its own layout, from them. `packed_io`: outputs only Vulkan segments read, written by their
        producer's `packed` emitter in the device layout (see `packed_key`)."""
        self.info = info
        self.inputs = [t for t in inputs if t not in consts]
        self.outputs = list(outputs)
        packed_io = frozenset(t for t in packed_io if t in self.outputs)  # Plan._packed_handoffs chose them
        layers = _fold_moves(layers, info, set(self.outputs) | set(self.inputs))

        sized: dict[str, int] = {}

        def nbytes(t: str) -> int:
            n = sized.get(t)
            if n is None:  # memoised, with math.prod: np.prod per call was a quarter of a long chain's segment
                shape, dt = info[t]
                n = sized[t] = packed_nbytes(shape) if t in packed_io else math.prod(shape) * np.dtype(dt).itemsize
            return n

        readers: dict[str, list[int]] = {}
        for i, lay in enumerate(layers):
            for a in dict.fromkeys(lay.acts):
                readers.setdefault(a, []).append(i)
        n_in = len(self.inputs)
        ext_of_in = {t: k + 1 for k, t in enumerate(self.inputs)}
        ext_of_out = {t: n_in + k + 1 for k, t in enumerate(self.outputs)}
        outs = set(self.outputs)
        skip: set[int] = set()
        # Edge conversions: (tensor in the graph, ext buffer, source shape, perm, xor byte).
        in_conv: list[tuple[str, int, tuple, tuple, int]] = []
        out_conv: list[tuple[str, int, tuple, tuple, int]] = []
        for t in self.inputs:
            shape, dt = info[t]
            if not is_8bit(dt):
                continue  # float: read in place by its reader (the quantize operator)
            dst, perm, fshape = t, form_perm(shape), form_shape(shape)
            if t in form_io:
                shape, perm, dt = fshape, tuple(range(len(shape))), np.uint8
            rd = readers.get(t, [])
            if len(rd) == 1 and layers[rd[0]].move is not None and t not in outs \
                    and layers[rd[0]].out not in outs and tuple(layers[rd[0]].move[0]) == fshape:
                lay = layers[rd[0]]
                skip.add(rd[0])
                dst, perm = lay.out, _compose(perm, lay.move[1])
            in_conv.append((dst, ext_of_in[t], tuple(shape), perm, flip(dt)))
        # A quantize whose output only a move reads, where the move's result is the quantized values in the
        # host's element order: the quantize writes them so, straight into the move's output.
        replaced: dict[int, tuple] = {}
        for i, lay in enumerate(layers):
            plain = getattr(lay, "plain", None)
            rd = readers.get(lay.out, [])
            if plain is None or len(rd) != 1 or lay.out in outs or layers[rd[0]].move is None or rd[0] in skip:
                continue
            mv = layers[rd[0]]
            shape = info[lay.out][0]
            if tuple(mv.move[0]) == form_shape(shape) and mv.out not in outs \
                    and _identity(shape, _compose(form_perm(shape), mv.move[1])):
                skip.add(rd[0])
                replaced[i] = (plain, mv.out)
        producer = {lay.out: i for i, lay in enumerate(layers) if not lay.alias}
        for t in self.outputs:
            shape, dt = info[t]
            if not is_8bit(dt) or t in packed_io:
                continue
            src, perm, src_shape = t, unform_perm(shape), form_shape(shape)
            if t in form_io:
                perm, dt = tuple(range(len(shape))), np.uint8
            i = producer.get(t)
            # The move is folded into the output conversion only where no layer reads its result: another
            # reader would find the move's output never written (uninitialised arena bytes).
            if i is not None and layers[i].move is not None and i not in skip and not readers.get(t):
                s = layers[i].acts[0]
                if readers.get(s) == [i] and s not in outs and s not in ext_of_in \
                        and tuple(layers[i].move[0]) == form_shape(info[s][0]):
                    skip.add(i)
                    src, src_shape = s, form_shape(info[s][0])
                    perm = _compose(layers[i].move[1], perm)
            out_conv.append((src, ext_of_out[t], src_shape, perm, flip(dt)))
        # A streaming model's state: kept in the form its input's conversion writes (usually the bytes the first
        # reader wants: micro_wakeword's ring buffers need only the XOR then), so the input is read in place and
        # the output converts straight into that form (in place too where it is the same order).
        self.state_forms: dict[str, StateForm] = {}
        for t_in, t_out in (state_io or {}).items():
            ci = [c for c in in_conv if c[1] == ext_of_in.get(t_in)]
            co = [c for c in out_conv if c[1] == ext_of_out.get(t_out)]
            if len(ci) != 1 or len(co) != 1 or t_in in form_io or t_out in form_io or ci[0][4] != co[0][4] \
                    or tuple(info[t_in][0]) != tuple(info[t_out][0]) or info[t_in][1] != info[t_out][1]:
                continue
            (dst, k, shape, perm, xor), (src, ko, sshape, operm, _) = ci[0], co[0]
            form = StateForm(t_in + "\x00state", tuple(shape), tuple(perm), xor, np.dtype(info[t_in][1]))
            self.state_forms[t_in] = form
            self.state_forms[t_out] = form._replace(key=t_out + "\x00state")
            in_conv[in_conv.index(ci[0])] = (dst, k, form.shape, tuple(range(len(form.shape))), 0)
            out_conv[out_conv.index(co[0])] = (src, ko, sshape, _compose(operm, perm), 0)
        # Storage: ext buffers for what the edges can take in place, the arena for the rest.
        where: dict[str, Ref] = {}
        for t in self.inputs:
            if not is_8bit(info[t][1]):
                where[t] = Ref(ext_of_in[t], 0, nbytes(t))
        conv_read = {a for lay in layers if lay.node.op in _INDIRECT for a in lay.acts}
        for dst, k, shape, perm, xor in list(in_conv):
            if xor == 0 and _identity(shape, perm) and dst not in conv_read:
                where[dst] = Ref(k, 0, nbytes(dst))
                in_conv.remove((dst, k, shape, perm, xor))
        srcs = [c[0] for c in out_conv]
        for t in self.outputs:
            if (not is_8bit(info[t][1]) or t in packed_io) and t in producer:
                where[t] = Ref(ext_of_out[t], 0, nbytes(t))  # float or packed: written in place by its producer
        for src, k, shape, perm, xor in list(out_conv):
            i = producer.get(src)
            if xor == 0 and _identity(shape, perm) and i is not None and i not in skip and srcs.count(src) == 1 \
                    and src not in where:
                where[src] = Ref(k, 0, nbytes(src))
                out_conv.remove((src, k, shape, perm, xor))
        # Aliases share their root's storage.
        root = alias_roots(layers)
        rget = root.get  # a tensor's storage root: rget(t, t) (inline: 40k calls of a closure on a 20k chain)

        def r(t: str) -> str:
            return rget(t, t)

        live = [(i, lay) for i, lay in enumerate(layers) if i not in skip]
        const_in = [t for t in dict.fromkeys(a for _, lay in live for a in lay.acts) if t in consts]
        # Lifetimes over steps: 0 = input conversions, 1..n = layers, n + 1 = output conversions; kept as each
        # tensor's first and last step while walking the layers (steps only grow, so the last touch is the last
        # step), where a list of (step, writes, reads) events for memory.lifetimes cost 1.1 s on a 100k chain.
        # Arena tensors are numbered as first met (`ids`), their steps and sizes kept in lists for the C planner
        # (dicts by name were 0.1 s more of a 100k-node chain to read into arrays). A tensor's size is the last one
        # given to its name: by each read and write in the walk, then by the replaced outputs and the conversions
        # below (a tensor numbered without a size, `None`, is given one there).
        walk = ArenaWalk()
        ids, firsts, lasts, sizes, touch, resize = walk.ids, walk.first, walk.last, walk.sizes, walk.touch, walk.resize
        get = ids.get
        for c in in_conv:
            t0 = rget(c[0], c[0])
            if t0 not in where:
                touch(t0, 0)
        for i, lay in live:
            o, step = lay.out, i + 1
            special = lay.alias or i in replaced  # an output it does not write as itself (taken below)
            for a in (lay.acts if special else (*lay.acts, o)):  # its operands, then its output
                a0 = rget(a, a)
                n = sized.get(a)
                if n is None:
                    n = nbytes(a)
                if a0 not in where:  # touch(a0, step, n), inline (300k calls on a 100k chain)
                    k = get(a0)
                    if k is None:
                        ids[a0] = len(firsts)
                        firsts.append(step)
                        lasts.append(step)
                        sizes.append(n)
                    else:
                        lasts[k] = step
                        sizes[k] = n
            if special:
                n = sized.get(o)
                resize(rget(o, o), n if n is not None else nbytes(o))
                if lay.alias:
                    continue
                out = replaced[i][1]
                o0 = rget(out, out)
                if o0 not in where:
                    touch(o0, step)
            if lay.scratch:
                touch(f"#scratch{i}", step, lay.scratch)
        for c in out_conv:
            t0 = rget(c[0], c[0])
            if t0 not in where:
                touch(t0, len(layers) + 1)
        for _, o in replaced.values():
            resize(r(o), nbytes(o))
        for c in (*in_conv, *out_conv):
            resize(r(c[0]), nbytes(c[0]))
        # The plan of memory.spans + memory.plan_offsets, made in C (cpu_fallback/src/plan.c: 0.75-1.05 s of a
        # 100k-node chain's loading in Python, ~0.1 s here); `lifetimes` (below) is made when read.
        self._arena_plan = ArenaPlan(ids, firsts, lasts, sizes,
                                     [ids[r0] for t in const_in if (r0 := rget(t, t)) not in where], len(layers) + 1)
        offsets, arena = self._arena_plan.offsets, self._arena_plan.arena
        self.arena_bytes = arena
        self.ext_bytes = [nbytes(t) for t in self.inputs + self.outputs]
        g = self.graph = NativeGraph(arena, self.ext_bytes)

        made: dict[str, Ref] = {}  # a tensor's Ref, made once: its writer's and its readers' are one

        def ref(t: str) -> Ref:
            rf = made.get(t)
            if rf is None:
                t0 = rget(t, t)
                w = where.get(t0)
                rf = made[t] = Ref(w.buf, w.offset, nbytes(t)) if w is not None else Ref(0, offsets[t0], nbytes(t))
            return rf

        _write_consts(g, _canonical_consts(g, [(ref(t).offset, np.asarray(consts[t])) for t in const_in]))
        for dst, k, shape, perm, xor in in_conv:
            g.add("transpose", len(shape) or 1, u32(shape or [1]), u32(perm or [0]), 1, xor,
                  Ref(k, 0, nbytes(dst)), ref(dst))
        got = made.get  # (a Ref made before, else ref(): a call less per operand, 2 of a chain node's 3 refs)
        for i, lay in live:
            if not lay.alias:
                scratch = Ref(0, offsets[f"#scratch{i}"], lay.scratch) if lay.scratch else None
                emit, out = replaced[i] if i in replaced else \
                    (lay.packed if lay.out in packed_io else lay.impl, lay.out)
                emit(g, [got(a) or ref(a) for a in lay.acts], got(out) or ref(out), scratch)
        for src, k, shape, perm, xor in out_conv:
            g.add("transpose", len(shape) or 1, u32(shape or [1]), u32(perm or [0]), 1, xor, ref(src),
                  Ref(k, 0, nbytes(src)))
        self.form_io = frozenset(t for t in form_io if is_8bit(info[t][1]))
        self.packed_io = packed_io

        def spec(t: str) -> tuple[str, tuple[int, ...], np.dtype]:
            if t in self.state_forms:
                return self.state_forms[t].key, self.state_forms[t].shape, np.dtype(np.uint8)
            if t in packed_io:
                return packed_key(t), (nbytes(t),), np.dtype(np.uint8)
            if t in self.form_io:
                return form_key(t), form_shape(tuple(info[t][0])), np.dtype(np.uint8)
            return t, tuple(info[t][0]), np.dtype(info[t][1])
        self.in_specs = [spec(t) for t in self.inputs]
        self.out_specs = [spec(t) for t in self.outputs]
        # Per input, its name where it is float (named when a quantize operator refuses its NaN), else "".
        self.nan_checked = [t if np.dtype(info[t][1]) == np.float32 else "" for t in self.inputs]
        self.layers = [lay for _, lay in live]

    @property
    def lifetimes(self) -> list[Lifetime]:
        """The arena tensors' lifetimes (memory.spans' list), made on first use."""
        return self._arena_plan.lifetimes()

    def run_arrays(self, arrays: list[np.ndarray], threads: int = 0) -> list[np.ndarray]:
        """The outputs for input arrays already checked against `in_specs` (the session's fast path)."""
        arrays = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in arrays]
        outs = [np.empty(shape, dt) for _, shape, dt in self.out_specs]
        try:
            self.graph.run(arrays + outs, threads)
        except ValueError:
            refuse_nan(self.nan_checked, arrays)
            raise
        return outs

    def native_runner(self, threads: int):
        """The session's `run` for this segment as the whole model, on `threads` threads, in one native call: a
        vkinfer._planrun.Runner's `run_feed` (feed -> the list of outputs, a nonzero status for `run_failed`, or
        None for a feed the checked path must take), or None without the extension."""
        fast = self.graph._fast
        if fast is None:
            return None
        from .graph import _planrun

        n_in, n_out = len(self.in_specs), len(self.out_specs)
        raw = _planrun.Runner(n_in, n_out, list(fast[2]), {},
                              [("cpu", fast[0], fast[1], self.graph, list(range(n_in + n_out)), int(threads))])
        # No NaN scan in the runner: the quantize operators refuse NaN as they read (VKI_ENAN).
        raw.set_feed([t for t, _, _ in self.in_specs], [memoryview(np.empty(0, dt)).format for _, _, dt in
                                                        self.in_specs], [s for _, s, _ in self.in_specs],
                     [(s, dt) for _, s, dt in self.out_specs], np.ndarray, np.empty, [])
        return raw.run_feed

    def ops(self) -> list[str]:
        """The native operators in order."""
        return self.graph.ops()

    def run(self, values, threads: int = 0) -> None:
        """Read the inputs from `values` (host arrays), run the graph, write the outputs into `values`."""
        arrays = []
        for t, shape, dt in self.in_specs:
            a = values[t]
            if not isinstance(a, np.ndarray) or a.dtype != dt or a.shape != shape:
                raise ValueError(f"tensor {t!r} must be a {dt} array of shape {list(shape)}, got "
                                 f"{getattr(a, 'dtype', type(a).__name__)} {list(getattr(a, 'shape', ()))}")
            arrays.append(a)
        for (t, _, _), a in zip(self.out_specs, self.run_arrays(arrays, threads), strict=True):
            values[t] = a
