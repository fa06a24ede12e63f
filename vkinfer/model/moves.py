"""Data-movement ops: the interpreter's kernels, and each op as a byte gather for the devices.

Kernels (registered in kernels.OPS): Slice, Split, Gather, DepthToSpace, SpaceToDepth, Tile, Expand and Resize,
on any tensor type (Concat, Transpose and Pad live in kernels.py). Each follows ONNX Runtime 1.31's CPU kernel,
including its float32 coordinate arithmetic for Resize (vkinfer/model/moves.py `_resize_maps`); every op here
except Resize in mode "linear" only moves values, so on 8-bit tensors (which ORT runs these ops on directly,
QDQ models included: it drops DQ/Q around Slice, Split, Gather, Transpose, DepthToSpace, Tile, Expand and
nearest Resize) it is exact by construction.

Byte gathers: a move node's output element i is input k's element j, or a fill byte (Pad's constant,
Resize's extrapolation value). `source_codes` runs the op's own kernel on int64 code arrays (k * 2**32 + flat
index of input k, fill -1) to get that map, and `gather_rows` describes it in the devices' element order (the
CPU form's order, which is the Vulkan packed form's order without the channel padding) as rows of L output
elements, each row a strided run of one input with fill bytes on both sides. The CPU (cpu_fallback/src/ops/gather.c)
and Vulkan (shaders/byte_gather.comp) operators execute that table; the lowerings are vkinfer/cpu/byte_gather.py
and vkinfer/vulkan/byte_gather.py.

Split has several outputs and device layers have one: `split_to_slices` (run by passes.optimize) rewrites each
Split as one Slice per output (named "<split>#<k>"), which QDQ folding then folds like any move.
"""

from __future__ import annotations

import math

import numpy as np

from .attrs import _axis, _ints1, _opt, _text
from .graph import Graph, Node
from .op_table import REQUIRED_INPUTS, _op
from .resize import _extrapolation, resize_nearest, resize_params

FILL = -1  # code of a fill element
_SHIFT = 32


# ----------------------------------------------------------------------------------------------- Slice / Split

def slice_ranges(shape: tuple[int, ...], starts, ends, axes=None, steps=None) -> list[range]:
    """ONNX Slice: each axis's selected indices (starts/ends clamped as ONNX and ORT clamp them)."""
    r = len(shape)
    starts, ends = _ints1(starts, "starts"), _ints1(ends, "ends")
    axes = list(range(len(starts))) if axes is None else _ints1(axes, "axes")
    steps = [1] * len(starts) if steps is None else _ints1(steps, "steps")
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ValueError(f"starts, ends, axes and steps must have one length, got {len(starts)}, {len(ends)}, "
                         f"{len(axes)}, {len(steps)}")
    axes = [_axis(a, r, "Slice axis") for a in axes]
    if len(set(axes)) != len(axes):
        raise ValueError(f"Slice axes {axes} repeat an axis")
    out = [range(n) for n in shape]
    for a, s, e, st in zip(axes, starts, ends, steps, strict=True):
        n = shape[a]
        if st == 0:
            raise ValueError(f"Slice step on axis {a} is 0")
        s = s + n if s < 0 else s
        e = e + n if e < 0 else e
        if st > 0:
            s, e = min(max(s, 0), n), min(max(e, 0), n)
        else:
            s, e = min(max(s, 0), n - 1), min(max(e, -1), n - 1)
        out[a] = range(s, e, st)
    return out


def _take(x: np.ndarray, ranges: list[range]) -> np.ndarray:
    idx = tuple(slice(rg.start, rg.stop if rg.stop >= 0 else None, rg.step) for rg in ranges)
    return np.ascontiguousarray(x[idx])


@_op("Slice")
def _slice(node: Node, x: list, memo: dict) -> list:
    """ONNX Slice: opset 10+ inputs (data, starts, ends, axes, steps) or opset 1 attributes."""
    a = node.attrs
    if "_split" in a:  # one output of a Split (split_to_slices): the Split's own check
        axis, sizes = a["_split"]
        dim = x[0].shape[_axis(axis, x[0].ndim)] if x[0].ndim else 0
        if x[0].ndim == 0 or sum(sizes) != dim:
            raise ValueError(f"Split sizes {sizes} must sum to the axis length {dim}")
    if len(x) > 1:
        if len(x) < 3 or x[1] is None or x[2] is None:
            raise ValueError("Slice needs starts and ends")
        ranges = slice_ranges(x[0].shape, x[1], x[2], _opt(x, 3), _opt(x, 4))
    else:
        if "starts" not in a or "ends" not in a:
            raise ValueError("Slice (opset 1) needs the attributes starts and ends")
        ranges = slice_ranges(x[0].shape, a["starts"], a["ends"], a.get("axes"))
    return [_take(x[0], ranges)]


def split_sizes(node: Node, dim: int, split) -> list[int]:
    """The sizes of a Split node's outputs along its axis (input `split`, attribute split / num_outputs, or even)."""
    n_out = len(node.outputs)
    if split is None and "split" in node.attrs:
        split = node.attrs["split"]
    if split is not None and np.asarray(split).size:
        sizes = _ints1(split, "split")
        if len(sizes) != n_out:
            raise ValueError(f"split has {len(sizes)} sizes for {n_out} outputs")
        if any(s < 0 for s in sizes) or sum(sizes) != dim:
            raise ValueError(f"split sizes {sizes} must be non-negative and sum to the axis length {dim}")
        return sizes
    num = node.attrs.get("num_outputs")
    if num is not None:
        num = int(num)
        if num != n_out or num < 1:
            raise ValueError(f"num_outputs={num} but the node has {n_out} outputs")
        chunk = -(-dim // num)
        sizes = [chunk] * (num - 1) + [dim - chunk * (num - 1)]
        if sizes[-1] < 0:
            raise ValueError(f"axis length {dim} cannot be split into {num} outputs")
        return sizes
    if n_out < 1 or dim % n_out:
        raise ValueError(f"axis length {dim} does not split evenly into {n_out} outputs")
    return [dim // n_out] * n_out


@_op("Split")
def _split(node: Node, x: list, memo: dict) -> list:
    """ONNX Split (opset 2-18): sizes from the `split` input or attribute, `num_outputs`, or an even split."""
    v = x[0]
    if v.ndim == 0:
        raise ValueError("Split needs a tensor of rank >= 1")
    axis = _axis(int(node.attrs.get("axis", 0)), v.ndim)
    sizes = split_sizes(node, v.shape[axis], _opt(x, 1))
    bounds = np.cumsum([0] + sizes)
    return [np.ascontiguousarray(np.take(v, range(bounds[i], bounds[i + 1]), axis=axis))
            for i in range(len(sizes))]


def split_to_slices(g: Graph) -> Graph:
    """Each Split with explicit sizes (a constant `split` input or the opset < 13 attribute) becomes one Slice per
    output, named "<split>#<k>", so that the devices (whose layers have one output) run it and QDQ folding folds
    each output's DQ/Q. An even split (no sizes, or `num_outputs`) needs the axis length, which only the trace
    knows: it stays a Split and runs on the host."""
    nodes, changed = [], False
    for n in g.nodes:
        if n.op != "Split" or len(n.outputs) < 1:
            nodes.append(n)
            continue
        split = n.inputs[1] if len(n.inputs) > 1 and n.inputs[1] else ""
        if split and split not in g.consts:
            nodes.append(n)
            continue
        sizes = g.consts[split] if split else n.attrs.get("split")
        if sizes is None or not np.asarray(sizes).size:
            nodes.append(n)  # even split: needs the axis length, which only the trace knows
            continue
        sizes = [int(s) for s in np.asarray(sizes).reshape(-1)]
        if len(sizes) != len(n.outputs) or any(s < 0 for s in sizes):
            nodes.append(n)  # malformed: the kernel reports it at run time, naming the node
            continue
        axis = int(n.attrs.get("axis", 0))
        starts = np.cumsum([0] + sizes)
        for k, o in enumerate(n.outputs):
            if not o:
                continue
            names = [f"{n.name}#{k}__{p}" for p in ("starts", "ends", "axes")]
            g.consts[names[0]] = np.array([starts[k]], np.int64)
            g.consts[names[1]] = np.array([starts[k + 1]], np.int64)
            g.consts[names[2]] = np.array([axis], np.int64)
            nodes.append(Node("Slice", f"{n.name}#{k}", [n.inputs[0], *names], [o], {"_split": (axis, sizes)}))
        changed = True
    return Graph(nodes, g.inputs, g.outputs, g.consts) if changed else g


# ------------------------------------------------------------------------------------------- Gather and friends

@_op("Gather")
def _gather(node: Node, x: list, memo: dict) -> list:
    """ONNX Gather: indices in [-n, n) along `axis` (default 0); others are a ValueError, as in ORT."""
    v, idx = x[0], np.asarray(x[1])
    if idx.dtype.kind not in "iu":
        raise TypeError(f"Gather indices must be integers, got {idx.dtype}")
    if v.ndim == 0:
        raise ValueError("Gather needs data of rank >= 1")
    axis = _axis(int(node.attrs.get("axis", 0)), v.ndim)
    n = v.shape[axis]
    i64 = idx.astype(np.int64)
    if i64.size and (i64.min() < -n or i64.max() >= n):
        raise ValueError(f"Gather indices {sorted({int(i) for i in i64.reshape(-1) if not -n <= i < n})[:5]} are "
                         f"out of range [-{n}, {n}) on axis {axis}")
    return [np.ascontiguousarray(np.take(v, np.where(i64 < 0, i64 + n, i64), axis=axis))]


def _block(node: Node) -> int:
    b = node.attrs.get("blocksize")
    if b is None:
        raise ValueError("missing attribute 'blocksize'")
    b = int(b)
    if b < 1:
        raise ValueError(f"blocksize must be >= 1, got {b}")
    return b


@_op("DepthToSpace")
def _depth_to_space(node: Node, x: list, memo: dict) -> list:
    """ONNX DepthToSpace on (N, C, H, W), mode DCR (default) or CRD."""
    v, b = x[0], _block(node)
    if v.ndim != 4:
        raise ValueError(f"DepthToSpace needs a 4-D input, got shape {list(v.shape)}")
    n, c, h, w = v.shape
    if c % (b * b):
        raise ValueError(f"channels {c} are not divisible by blocksize^2 = {b * b}")
    mode = _text(node.attrs.get("mode"), "DCR")
    if mode == "DCR":
        t = v.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        t = v.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise ValueError(f"DepthToSpace mode must be DCR or CRD, got {mode!r}")
    return [np.ascontiguousarray(t).reshape(n, c // (b * b), h * b, w * b)]


@_op("SpaceToDepth")
def _space_to_depth(node: Node, x: list, memo: dict) -> list:
    """ONNX SpaceToDepth on (N, C, H, W)."""
    v, b = x[0], _block(node)
    if v.ndim != 4:
        raise ValueError(f"SpaceToDepth needs a 4-D input, got shape {list(v.shape)}")
    n, c, h, w = v.shape
    if h % b or w % b:
        raise ValueError(f"height {h} and width {w} must be divisible by blocksize {b}")
    t = v.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return [np.ascontiguousarray(t).reshape(n, c * b * b, h // b, w // b)]


@_op("Tile")
def _tile(node: Node, x: list, memo: dict) -> list:
    """ONNX Tile: `repeats` (one non-negative count per axis)."""
    v = x[0]
    reps = _ints1(x[1], "repeats")
    if len(reps) != v.ndim or any(r < 0 for r in reps):
        raise ValueError(f"repeats {reps} must be {v.ndim} non-negative counts")
    return [np.ascontiguousarray(np.tile(v, reps))]


@_op("Expand")
def _expand(node: Node, x: list, memo: dict) -> list:
    """ONNX Expand: numpy broadcasting of the input against `shape` (both ways)."""
    v = x[0]
    shape = _ints1(x[1], "shape")
    if any(s < 0 for s in shape):
        raise ValueError(f"Expand shape {shape} has a negative dimension")
    try:
        out = np.broadcast_shapes(v.shape, tuple(shape))
    except ValueError:
        raise ValueError(f"input shape {list(v.shape)} does not broadcast to {shape}") from None
    return [np.ascontiguousarray(np.broadcast_to(v, out))]


# ------------------------------------------------------------------------------------------------------ Resize


REQUIRED_INPUTS.update({
    "Slice": (1, (0,)), "Split": (1, (0,)), "Gather": (2, (0, 1)), "DepthToSpace": (1, (0,)),
    "SpaceToDepth": (1, (0,)), "Tile": (2, (0, 1)), "Expand": (2, (0, 1)), "Resize": (2, (0,)),
})


# ------------------------------------------------------------------------------------------------- byte gathers

# Ops that only move values: a node of one of these on 8-bit tensors with constant parameters is a byte gather.
GATHER_OPS = ("Slice", "Concat", "com.microsoft:QLinearConcat", "Transpose", "Pad", "Gather", "DepthToSpace",
              "SpaceToDepth", "Tile", "Expand", "Resize", "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
              "vkinfer:ZeroInsert", "GatherElements")


def raw_value(v, dtype) -> int:
    """The raw bytes of one value of `dtype` as an unsigned integer (little-endian): a gather's fill element."""
    return int.from_bytes(np.asarray(v).astype(dtype).reshape(-1)[:1].tobytes(), "little")


def source_codes(node: Node, shapes: list[tuple[int, ...] | None], consts: list, dtype) -> tuple[
        list[int], np.ndarray, int | None]:
    """(activation input indices, the output's codes, the fill value or None) of a move node whose inputs
    `shapes[i]` are activations (None: constant, value in consts[i]). Code k * 2**32 + j: element j (flat) of
    activation k; FILL: the fill value (of `dtype`, returned as its raw bytes, `raw_value`). ValueError when the
    node is not a pure move here (Resize linear, a QLinearConcat that requantizes, non-constant parameters)."""
    from .op_table import OPS

    acts = [i for i, s in enumerate(shapes) if s is not None]
    args: list = []
    for i, s in enumerate(shapes):
        if s is None:
            args.append(consts[i])
        else:
            k = acts.index(i)
            args.append((np.int64(k) << _SHIFT) + np.arange(math.prod(s), dtype=np.int64).reshape(s))
    fill = None
    op = node.op
    dt = np.dtype(dtype)
    if op == "Pad":
        from ..reference.pad import pad as ref_pad

        a = node.attrs
        if len(args) > 1:
            pads, value, axes = args[1], _opt(args, 2), _opt(args, 3)
        else:
            pads, value, axes = a.get("pads"), a.get("value", 0.0), None
        if pads is None:
            raise ValueError("Pad without pads")
        mode = _text(a.get("mode"), "constant")
        if mode == "constant":
            v = np.asarray(0 if value is None else value).reshape(-1)
            if v.size != 1 or v[0] != np.asarray(v[0]).astype(dt):
                raise ValueError(f"constant value {v} is not representable in {dt}")
            fill = raw_value(v[0], dt)
        out = ref_pad(args[0], pads, np.int64(FILL), axes, mode)
    elif op == "Resize":
        p = resize_params(node, shapes[0], args)
        if p["mode"] != "nearest":
            raise ValueError("Resize linear computes, it does not only move bytes")
        if p["ctm"] == "tf_crop_and_resize":
            fill = raw_value(_extrapolation(p["extrapolation"], dt), dt)
        out = resize_nearest(args[0], p, np.int64(FILL))
    elif op == "vkinfer:ZeroInsert":  # a quantized ConvTranspose's input spread out (vkinfer/model/conv_transpose.py)
        from .conv_transpose import zero_insert

        v = np.asarray(0 if _opt(args, 1) is None else args[1]).reshape(-1)
        if v.size != 1 or np.asarray(v).dtype != dt:
            raise ValueError(f"ZeroInsert fill must be one {dt} value")
        fill = raw_value(v[0], dt)
        out = zero_insert(args[0], np.int64(FILL), node.attrs.get("strides") or (1, 1))
    elif op == "com.microsoft:QLinearConcat":
        ys, yz = np.asarray(args[0]), np.asarray(args[1])
        for i in range(2, len(args), 3):
            if not (np.float32(np.asarray(args[i + 1]).reshape(-1)[0]) == np.float32(ys.reshape(-1)[0])
                    and np.asarray(args[i + 2]).size == 1 and yz.size == 1
                    and int(np.asarray(args[i + 2]).reshape(())) == int(yz.reshape(()))):
                raise ValueError("QLinearConcat input requantizes")
        out = np.concatenate(args[2::3], axis=int(node.attrs["axis"]))
    else:
        out = OPS[op](node, args, {})[0]
    if fill is not None and not np.any(out == FILL):
        fill = None
    return acts, np.asarray(out, np.int64), fill


def gather_rows(codes_form: np.ndarray, in_sizes: list[int]) -> tuple[int, np.ndarray]:
    """(L, rows): the output (codes in the device element order, flat, each code k * 2**32 + j with j in input
    k's device order) as rows of L elements; row = (input, lo, hi, start, stride): elements [lo, hi) copy input
    `input`'s elements start, start + stride, ...; the others are the fill byte (input = len(in_sizes): all fill).
    L is the largest trailing block of the output for which every row has that form (1 always does)."""
    n = codes_form.size
    n_in = len(in_sizes)
    cands = sorted({d for d in _divisor_chain(codes_form.shape) if n % d == 0}, reverse=True) + [1]
    for L in cands:
        rows = _rows_of(codes_form.reshape(-1, L) if n else codes_form.reshape(0, max(L, 1)), n_in)
        if rows is not None:
            return L, rows
    raise AssertionError("unreachable: rows of one element are always affine")


def _divisor_chain(shape: tuple[int, ...]) -> list[int]:
    out, p = [], 1
    for d in reversed(shape):
        p *= d
        out.append(p)
    return [d for d in out if d > 1]


def _rows_of(c: np.ndarray, n_in: int) -> np.ndarray | None:
    """The row table of code rows `c` (n_rows x L), or None when some row is not one strided run with fill on
    both sides."""
    nr, L = c.shape
    valid = c >= 0
    anyv = valid.any(1)
    lo = np.where(anyv, valid.argmax(1), 0)
    hi = np.where(anyv, L - valid[:, ::-1].argmax(1), 0)
    if not np.array_equal(valid.sum(1), hi - lo):
        return None
    r = np.arange(nr)
    first = c[r, lo]
    k = np.where(anyv, first >> _SHIFT, n_in)
    start = np.where(anyv, first & 0xFFFFFFFF, 0)
    nxt = c[r, np.minimum(lo + 1, L - 1)]
    stride = np.where(anyv & (hi - lo > 1), (nxt & 0xFFFFFFFF) - start, 0)
    j = np.arange(L)[None, :]
    want = (k[:, None] << _SHIFT) + start[:, None] + (j - lo[:, None]) * stride[:, None]
    if not np.array_equal(np.where(valid, c, 0), np.where(valid, want, 0)):
        return None
    return np.stack([k, lo, hi, start, stride], 1).astype(np.int64)


def data_inputs(node: Node) -> list[int]:
    """Indices of a move node's data inputs (the tensors whose bytes move)."""
    if node.op == "Concat":
        return list(range(len(node.inputs)))
    if node.op == "com.microsoft:QLinearConcat":
        return list(range(2, len(node.inputs), 3))
    return [0]


MAX_ROWS = 1 << 22  # a gather table of more rows (40 bytes each) stays on the host
# Elements (output and data inputs) past which a gather's table is not built and the node stays on the host: the
# table is found from int64 codes of every element, about 80 bytes each at the peak. A fuzzed TFLite resize of a
# 1x1048576x4x8 tensor (33554432 elements) took 52 s and 5 GB here before its table was refused by MAX_ROWS; the
# zoo's and the real models' largest 8-bit moves are under 2 M elements.
MAX_GATHER_ELEMENTS = 1 << 24
# Element types a wide gather moves (vkinfer/cpu/float_moves.py): float32 and int32 (4 bytes), int64 (8 bytes), all
# kept in the CPU graph in the host's plain row-major order.
WIDE = (np.dtype(np.float32), np.dtype(np.int32), np.dtype(np.int64))


def gather_spec(ctx, node: Node, wide: bool = False) -> tuple | None:
    """The element gather of `node` in the devices' element order, once per plan: (data inputs, row length L,
    rows (n x 5 int64), raw fill element (`raw_value`), per-input element counts), or None when the node is no
    gather of 8-bit tensors of one type with constant parameters. `wide`: of tensors of one type in `WIDE`
    instead, in plain row-major order (the CPU graph's float32 and integer form). A ValueError is a refusal with
    its reason."""
    from ..layout import form_perm
    from .lowering import _once

    def order(s: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(range(len(s))) if wide else tuple(form_perm(s))

    if node.op not in GATHER_OPS or len([o for o in node.outputs if o]) != 1 or not node.outputs[0]:
        return None
    y = node.outputs[0]
    data = data_inputs(node)
    names = [node.inputs[i] for i in data]
    if not names or not all(names) or not all(t in ctx.info for t in (*names, y)):
        return None
    if not (all(np.dtype(ctx.dtype(t)) in WIDE for t in (*names, y)) if wide else ctx.quantized(*names, y)):
        return None
    dt = ctx.dtype(y)
    if any(ctx.dtype(t) != dt for t in names):
        return None
    if not all(ctx.const(t) for i, t in enumerate(node.inputs) if i not in data):
        return None
    if any(math.prod(ctx.shape(t)) == 0 for t in (*names, y)) or math.prod(ctx.shape(y)) >= 2 ** 31:
        return None  # nothing to move (or past the devices' int32 element indices): the host
    total = sum(math.prod(ctx.shape(t)) for t in (*names, y))
    if total > MAX_GATHER_ELEMENTS:
        raise ValueError(f"its byte gather table would be found from {total} elements (limit {MAX_GATHER_ELEMENTS})")

    def make():
        shapes = [ctx.shape(node.inputs[i]) if i in data else None for i in range(len(node.inputs))]
        consts = [ctx.g.consts.get(t) if t and i not in data else None for i, t in enumerate(node.inputs)]
        _, codes, fill = source_codes(node, shapes, consts, dt)
        out_shape = ctx.shape(y)
        if tuple(codes.shape) != tuple(out_shape):
            raise ValueError(f"internal: gather of shape {codes.shape}, traced {out_shape}")
        form = codes.transpose(order(out_shape))
        flat = form.reshape(-1)
        k = np.where(flat >= 0, flat >> _SHIFT, -1)
        j = flat & 0xFFFFFFFF
        dev = np.full_like(flat, FILL)
        sizes = []
        for i, t in enumerate(names):
            s = ctx.shape(t)
            n = math.prod(s)
            sizes.append(n)
            # host flat index -> position in the input's device order
            pos = np.empty(n, np.int64)
            pos[np.arange(n, dtype=np.int64).reshape(s).transpose(order(s)).reshape(-1)] = np.arange(n)
            m = k == i
            dev[m] = (np.int64(i) << _SHIFT) + pos[j[m]]
        L, rows = gather_rows(dev.reshape(form.shape), sizes)
        if len(rows) > MAX_ROWS:
            raise ValueError(f"its byte gather needs {len(rows)} table rows (limit {MAX_ROWS})")
        return names, L, np.ascontiguousarray(rows), 0 if fill is None else int(fill), sizes
    return _once(ctx, ("wide_gather" if wide else "byte_gather", node.name), make)
