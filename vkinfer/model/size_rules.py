"""Size rules: what a node's kernel will allocate, from its inputs' shapes, its shape-giving input values and its
attributes, without running it (vkinfer/model/sizes.py checks the sizes against the session's limits).

Two tables, for the ops whose output (or scratch) can be far larger than their inputs; every other op makes
outputs no larger than a small multiple of its inputs, which the trace checks once they exist:
- `BOUNDS[op](node, args)` -> [(output index, shape, itemsize)]: an upper bound of each output's shape, for the
  ops without a shape rule (op_table.SHAPES) whose kernel the trace runs. Where the bound cannot be made (an
  attribute the kernel will refuse anyway), a rule raises and the kernel gives the node's own error.
- `WORK[op](node, args, out_shapes)` -> [(what, shape, itemsize)]: the kernel's own scratch arrays (a padded
  input, im2col panels, float64 accumulators), checked only where the trace runs the kernel: a plan's devices
  never make them.
Bounds may overstate (the larger of two broadcast dims), never understate, for any node the kernel accepts.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from .graph import Node

Need = tuple[object, tuple[int, ...], int]  # (output index or what, shape, itemsize)
BOUNDS: dict[str, Callable[[Node, list], list[Need]]] = {}
WORK: dict[str, Callable[[Node, list, list], list[Need]]] = {}


def _rule(table: dict, *ops: str):
    def register(fn):
        for op in ops:
            table[op] = fn
        return fn
    return register


def _shape(v) -> tuple[int, ...]:
    return tuple(int(d) for d in np.shape(v))


def _size(v) -> int:
    return int(np.size(v)) if v is not None else 0


def _ints(v) -> list[int]:
    """Integer values of a small shape-giving input (pads, repeats, a shape), as Python ints."""
    a = np.asarray(v)
    if a.dtype.kind not in "iu":
        raise TypeError(f"expected integers, got {a.dtype}")
    return [int(i) for i in a.reshape(-1)]


def _item(v) -> np.dtype | int:
    """An input's dtype (the sizes of outputs of its type), 1 byte for an absent one."""
    return np.asarray(v).dtype if v is not None else 1


def _bcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    """The largest dim at each (right-aligned) position: numpy's broadcast shape wherever broadcasting is valid."""
    r = max((len(s) for s in shapes), default=0)
    out = [0 if not shapes else 1] * r
    for s in shapes:
        for i, d in enumerate(s):
            j = r - len(s) + i
            out[j] = max(out[j], d)
    return tuple(out)


def _axis(v, r: int) -> int:
    a = int(v)
    a += r if a < 0 else 0
    if not 0 <= a < max(r, 1):
        raise ValueError(f"axis {v} out of range for rank {r}")
    return a


# ---- element-wise ops that broadcast: the output is as large as the broadcast of the inputs ----
_COMPARE = ("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor")
_BROADCAST = ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean", "PRelu", "BitShift",
              "BitwiseAnd", "BitwiseOr", "BitwiseXor", "vkinfer:TFLiteAdd")


@_rule(BOUNDS, *_BROADCAST, *_COMPARE, "Where", "com.microsoft:QLinearAdd", "com.microsoft:QLinearMul")
def _broadcast(node, x):
    arrays = [v for v in x if v is not None]
    item = 1 if node.op in _COMPARE else _item(x[1] if node.op == "Where" else x[0])
    return [(0, _bcast([_shape(v) for v in arrays]), item)]


@_rule(BOUNDS, "Tile")
def _tile(node, x):
    s, reps = _shape(x[0]), _ints(x[1])
    r = max(len(s), len(reps))
    s, reps = (1,) * (r - len(s)) + s, [1] * (r - len(reps)) + reps
    return [(0, tuple(d * max(k, 0) for d, k in zip(s, reps, strict=True)), _item(x[0]))]


@_rule(BOUNDS, "Expand")
def _expand(node, x):
    return [(0, _bcast([_shape(x[0]), tuple(max(d, 0) for d in _ints(x[1]))]), _item(x[0]))]


@_rule(BOUNDS, "Pad")
def _pad(node, x):
    s = list(_shape(x[0]))
    r = len(s)
    if len(x) > 1 and x[1] is not None:
        pads = _ints(x[1])
        axes = [_axis(a, r) for a in _ints(x[3])] if len(x) > 3 and x[3] is not None else list(range(r))
    else:
        pads, axes = [int(p) for p in node.attrs.get("pads") or ()], list(range(r))
    if len(pads) != 2 * len(axes):
        raise ValueError(f"{len(pads)} pads for {len(axes)} axes")
    for i, a in enumerate(axes):
        s[a] += max(pads[i], 0) + max(pads[i + len(axes)], 0)
    return [(0, tuple(s), _item(x[0]))]


@_rule(BOUNDS, "CenterCropPad")
def _center_crop_pad(node, x):
    s, want = list(_shape(x[0])), _ints(x[1])
    axes = [_axis(a, len(s)) for a in node.attrs.get("axes") or range(len(s))]
    for a, w in zip(axes, want, strict=False):
        s[a] = max(s[a], w)
    return [(0, tuple(s), _item(x[0]))]


@_rule(BOUNDS, "Resize")
def _resize(node, x):
    from .resize import resize_params

    return [(0, tuple(resize_params(node, _shape(x[0]), x)["out"]), _item(x[0]))]


@_rule(BOUNDS, "Upsample")
def _upsample(node, x):
    scales = x[1] if len(x) > 1 and x[1] is not None else node.attrs.get("scales")
    sc = [float(v) for v in np.asarray(scales, np.float64).reshape(-1)]
    s = _shape(x[0])
    if len(sc) != len(s) or not all(math.isfinite(v) and v > 0 for v in sc):
        raise ValueError(f"Upsample scales {sc} do not fit shape {list(s)}")
    return [(0, tuple(math.floor(d * v) for d, v in zip(s, sc, strict=True)), _item(x[0]))]


@_rule(BOUNDS, "vkinfer:TFLiteResizeBilinear")
def _tflite_resize(node, x):
    s = _shape(x[0])
    oh, ow = (int(v) for v in node.attrs["size"])
    return [(0, (*s[:2], oh, ow), _item(x[0])), ("int64 copy of its input", s, 8),
            ("int64 taps", (*s[:2], oh, ow), 8 * 4)]


@_rule(BOUNDS, "vkinfer:ZeroInsert")
def _zero_insert(node, x):
    n, c, h, w = _shape(x[0])
    sh, sw = (int(v) for v in node.attrs.get("strides"))
    return [(0, (n, c, h * sh, w * sw), _item(x[0]))]


@_rule(BOUNDS, "ConstantOfShape")
def _constant_of_shape(node, x):
    return [(0, tuple(_ints(x[0])), 4 if node.attrs.get("value") is None else 8)]


@_rule(BOUNDS, "Range")
def _range(node, x):
    start, limit, delta = (float(np.asarray(v).reshape(-1)[0]) for v in x[:3])
    count = math.ceil((limit - start) / delta) if delta else 0
    return [(0, (max(count, 0),), _item(x[0]))]


@_rule(BOUNDS, "OneHot")
def _one_hot(node, x):
    s = list(_shape(x[0]))
    depth = int(np.asarray(x[1]).reshape(-1)[0])
    a = int(node.attrs.get("axis", -1))
    a += len(s) + 1 if a < 0 else 0
    s.insert(min(max(a, 0), len(s)), max(depth, 0))
    return [(0, tuple(s), _item(x[2]))]


@_rule(BOUNDS, "Concat")
def _concat(node, x):
    s = list(_shape(x[0]))
    a = _axis(node.attrs.get("axis", 0), len(s))
    s[a] = sum(_shape(v)[a] if len(_shape(v)) > a else 0 for v in x if v is not None)
    return [(0, tuple(s), max((_item(v) for v in x if v is not None), key=lambda d: d.itemsize))]


@_rule(BOUNDS, "com.microsoft:QLinearConcat")
def _qlinear_concat(node, x):
    data = [v for v in x[2::3] if v is not None]
    s = list(_shape(data[0]))
    a = _axis(node.attrs.get("axis", 0), len(s))
    s[a] = sum(_shape(v)[a] if len(_shape(v)) > a else 0 for v in data)
    return [(0, tuple(s), _item(data[0]))]


@_rule(BOUNDS, "Gather")
def _gather(node, x):
    s, i = _shape(x[0]), _shape(x[1])
    a = _axis(node.attrs.get("axis", 0), len(s))
    return [(0, (*s[:a], *i, *s[a + 1:]), _item(x[0]))]


@_rule(BOUNDS, "GatherND")
def _gather_nd(node, x):
    s, i = _shape(x[0]), _shape(x[1])
    b = int(node.attrs.get("batch_dims", 0))
    return [(0, (*i[:-1], *s[b + (i[-1] if i else 0):]), _item(x[0])), ("int64 index tuples", i, 8)]


@_rule(BOUNDS, "MatMulInteger", "vkinfer:TFLiteBatchMatMul")
def _matmul(node, x):
    a, b = _shape(x[0]), _shape(x[1])
    a, b = ((1, *a) if len(a) == 1 else a), ((*b, 1) if len(b) == 1 else b)
    m, n = max(a[-2:]), max(b[-2:])  # adjoint flags (TFLite) may swap either pair: the larger of each
    k = max(a[-2:] + b[-2:])
    batch = _bcast([a[:-2], b[:-2]])
    return [(0, (*batch, m, n), 4), ("int64 operands", (*batch, m + n, k), 8)]


# ---- convolutions and pools: output from the geometry (pads only add), scratch from the reference kernels ----
def _spatial(node, xs: tuple[int, ...], k: list[int]) -> tuple[list[int], list[int]]:
    """(padded input, output) spatial sizes bounds of a window op over `xs` (N, C, *spatial), kernel `k`."""
    r = len(k)
    a = node.attrs
    st = [max(int(v), 1) for v in a.get("strides") or [1] * r]
    di = [max(int(v), 1) for v in a.get("dilations") or [1] * r]
    pads = [max(int(v), 0) for v in a.get("_pads") or a.get("pads") or [0] * (2 * r)]
    if len(st) != r or len(di) != r or len(pads) != 2 * r:
        raise ValueError("strides, dilations or pads do not fit the kernel")
    padded, out = [], []
    auto = str(a.get("auto_pad", "NOTSET")).strip("b'\"") not in ("NOTSET", "")
    ceil = 1 if int(a.get("ceil_mode", 0) or 0) else 0
    for i in range(r):
        span = di[i] * (k[i] - 1) + 1
        p = xs[2 + i] + (pads[i] + pads[i + r] if not auto else span + st[i])
        # + ceil: ceil_mode's extra window (only then: a stride of 2**31 - 1 keeps one window and needs no more
        # input than the padded one; counting a second window asked for 2**31 rows)
        o = max(p - span, 0) // st[i] + 1 + ceil
        padded.append(max(p, (o - 1) * st[i] + span))
        out.append(o)
    return padded, out


@_rule(BOUNDS, "MaxPool", "AveragePool", "com.microsoft:QLinearAveragePool", "vkinfer:TFLiteAveragePool")
def _pool(node, x):
    xs = _shape(x[0])
    k = [int(v) for v in node.attrs.get("kernel_shape") or ()]
    if len(xs) != len(k) + 2:
        raise ValueError(f"kernel_shape {k} does not fit input shape {list(xs)}")
    padded, out = _spatial(node, xs, k)
    item = _item(x[0]) if node.op == "MaxPool" else 8
    return [(0, (*xs[:2], *out), _item(x[0])), ("padded input", (*xs[:2], *padded), item)]


@_rule(BOUNDS, "ConvInteger")
def _conv_integer(node, x):
    # The integer convolutions' reference (vkinfer/reference/qlinear_conv.py) works tile by tile in at most 64 MiB
    # of float64 scratch: their output is what grows (QLinearConv's is its shape rule's).
    xs, ws = _shape(x[0]), _shape(x[1])
    _, out = _spatial(node, xs, list(ws[2:]))
    return [(0, (xs[0], ws[0], *out), 4)]


def _conv_work(node, x, outs):
    """The float Conv's scratch: its padded input, im2col panel and float64 accumulator."""
    xs, ws = _shape(x[0]), _shape(x[1])
    padded, _ = _spatial(node, xs, list(ws[2:]))
    o = outs[0][0] if outs else ()
    return [("padded input", (*xs[:2], *padded), 4), ("im2col panel", (xs[0], xs[1] * math.prod(ws[2:]), *o[2:]), 4),
            ("accumulator", tuple(o), 8)]


WORK["Conv"] = _conv_work


@_rule(BOUNDS, "ConvTranspose", "vkinfer:QLinearConvTranspose", "vkinfer:QDQConvTranspose",
       "vkinfer:TFLiteTransposeConv")
def _conv_transpose(node, x):
    wi = 1 if node.op == "ConvTranspose" else 3
    xs, ws = _shape(x[0]), _shape(x[wi])
    r = len(xs) - 2
    a = node.attrs
    st = [int(v) for v in a.get("strides") or [1] * r]
    di = [int(v) for v in a.get("dilations") or [1] * r]
    op = [int(v) for v in a.get("output_padding") or [0] * r]
    shape = [int(v) for v in a.get("output_shape") or [0] * r][-r:]
    full = [max(s, 1) * (h - 1) + p + (k - 1) * max(d, 1) + 1 + o
            for s, h, p, k, d, o in zip(st, xs[2:], op, ws[2:], di, shape, strict=True)]
    m = ws[1] * int(a.get("group", 1))
    return [(0, (xs[0], m, *full), _item(x[0])), ("float64 scatter buffer", (xs[0], m, *full), 8)]
