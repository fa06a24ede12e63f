"""Data movement and elementwise-table ops of the TFLite importer: each op's check, build and entry in the op table
(ops.py).

Data movement becomes ONNX-style nodes on the 8-bit tensor (Slice, Concat, Reshape, Gather, DepthToSpace: pure
byte moves, exact by construction, run on every device through vkinfer/model/moves.py); elementwise ops become
vkinfer:Table / vkinfer:Table2 lookups (vkinfer/model/tables.py) whose entries are TFLite's arithmetic
(vkinfer/reference/tflite_elementwise.py, tflite_hard_swish.py)."""

from __future__ import annotations

from functools import partial

import numpy as np

from ..onnx_import import UnsupportedModelError
from .builder import ACTIVATIONS, Op, act_range, expect_shape, same_q
from .reader import DTYPES, QRANGE


def _const_ints(tensors, i: int, what: str) -> np.ndarray:
    t = tensors[i]
    if t.data is None or t.dtype not in (2, 4):
        raise ValueError(f"{what} {t.name!r} must be a constant int32/int64 tensor")
    return np.frombuffer(t.data, DTYPES[t.dtype]).astype(np.int64)


def _nearest_indices(in_size: int, out_size: int, align_corners: bool, half_pixel: bool) -> np.ndarray:
    """TFLite's resize_nearest_neighbor source index per output index (float32 scale, as its kernel)."""
    if align_corners and out_size > 1:
        scale = np.float32(in_size - 1) / np.float32(out_size - 1)
    else:
        scale = np.float32(in_size) / np.float32(out_size)
    offset = np.float32(0.5) if half_pixel else np.float32(0.0)
    v = (np.arange(out_size, dtype=np.float32) + offset) * scale
    idx = (np.floor(np.abs(v) + np.float32(0.5)) * np.sign(v) if align_corners else np.floor(v)).astype(np.int64)
    idx = np.minimum(idx, in_size - 1)
    return np.maximum(idx, 0) if half_pixel else idx



# ---- builds: the nodes of one checked op ----------------------------------------------------------------------

def slice_axis(imp, src: str, dst: str, axis: int, start: int, stop: int, step: int = 1) -> None:
    imp.node("Slice", [src, imp.const("starts", np.array([start], np.int64)),
                       imp.const("ends", np.array([stop], np.int64)),
                       imp.const("axes", np.array([axis], np.int64)),
                       imp.const("steps", np.array([step], np.int64))], [dst])


def strided_slice(imp, ins, outs, opts) -> None:
    x = ins[0]
    shape = imp.t[x].shape
    r = len(shape)
    begin, end, strides = (_const_ints(imp.t, i, w) for i, w in zip(ins[1:4], ("begin", "end", "strides"),
                                                                    strict=True))
    if not begin.size == end.size == strides.size == r:
        raise ValueError(f"begin/end/strides have {begin.size}/{end.size}/{strides.size} entries for a rank-{r} "
                         "input")
    if np.any(strides == 0):
        raise ValueError(f"strides {strides.tolist()} contain 0")
    bm, em, sm = opts.BeginMask(), opts.EndMask(), opts.ShrinkAxisMask()
    if getattr(opts, "Offset", lambda: False)():
        end = begin + end
    starts, ends, steps, dims = [], [], [], []
    for i, d in enumerate(shape):
        s = int(strides[i])
        if sm >> i & 1:
            b = int(begin[i]) + (d if begin[i] < 0 else 0)
            if not 0 <= b < d:
                raise ValueError(f"shrink axis {i}: begin {int(begin[i])} is outside [-{d}, {d})")
            starts.append(b), ends.append(b + 1), steps.append(1)
            continue
        lo, hi = (0, d) if s > 0 else (-1, d - 1)
        b = (0 if s > 0 else d - 1) if bm >> i & 1 else int(begin[i]) + (d if begin[i] < 0 else 0)
        e = (d if s > 0 else -1) if em >> i & 1 else int(end[i]) + (d if end[i] < 0 else 0)
        b, e = min(max(b, lo), hi), min(max(e, lo), hi)
        n = max(0, -(-(e - b) // s))
        starts.append(b), ends.append(-(d + 1) if s < 0 and e == -1 else e), steps.append(s)
        dims.append(n)
    expect_shape(imp, outs[0], dims, f"strided slice {list(zip(starts, ends, steps, strict=True))} of "
                                       f"{imp.t[x].name!r} {list(shape)}")
    if 0 in dims:
        raise UnsupportedModelError("an empty strided slice")
    reshape = len(dims) != r
    y = imp.fresh("strided_slice") if reshape else imp.put(outs[0])
    imp.node("Slice", [imp.get(x), imp.const("starts", np.array(starts, np.int64)),
                       imp.const("ends", np.array(ends, np.int64)),
                       imp.const("axes", np.arange(r, dtype=np.int64)),
                       imp.const("steps", np.array(steps, np.int64))], [y])
    if reshape:
        imp.node("Reshape", [y, imp.const("shape", np.array(dims, np.int64))], [imp.put(outs[0])])


def split(imp, ins, outs, opts, *, kind: str) -> None:
    """SPLIT / SPLIT_V / UNPACK -> one Slice per output along the axis (UNPACK: then a Reshape dropping it)."""
    if kind == "SPLIT":
        x, axis = ins[1], _const_ints(imp.t, ins[0], "axis")
    elif kind == "SPLIT_V":
        x, axis = ins[0], _const_ints(imp.t, ins[2], "axis")
    else:
        x, axis = ins[0], np.array([opts.Axis()])
    shape = imp.t[x].shape
    if axis.size != 1 or not -len(shape) <= int(axis[0]) < len(shape):
        raise ValueError(f"axis {axis.tolist()} is not one axis of a rank-{len(shape)} input")
    a = int(axis[0]) % len(shape)
    d = shape[a]
    n = len(outs)
    if kind == "SPLIT_V":
        sizes = _const_ints(imp.t, ins[1], "size_splits").tolist()
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = d - (sum(sizes) + 1)
        if len(sizes) != n or any(v < 0 for v in sizes) or sum(sizes) != d:
            raise ValueError(f"size_splits {sizes} do not split {d} into {n} outputs")
    else:
        num = opts.NumSplits() if kind == "SPLIT" else opts.Num()
        if num != n or d % max(n, 1):
            raise ValueError(f"{num} splits / {n} outputs do not divide axis {a} of size {d}")
        sizes = [d // n] * n
    start = 0
    for o, size in zip(outs, sizes, strict=True):
        want = list(shape)
        want[a] = size
        if kind == "UNPACK":
            expect_shape(imp, o, want[:a] + want[a + 1:], f"unpacking axis {a} of {list(shape)}")
            y = imp.fresh("unpack")
            slice_axis(imp, imp.get(x), y, a, start, start + size)
            imp.node("Reshape", [y, imp.const("shape", np.array(imp.t[o].shape, np.int64))], [imp.put(o)])
        else:
            expect_shape(imp, o, want, f"splitting axis {a} of {list(shape)} by {sizes}")
            slice_axis(imp, imp.get(x), imp.put(o), a, start, start + size)
        start += size


def pack(imp, ins, outs, opts) -> None:
    shape = imp.t[ins[0]].shape
    r = len(shape) + 1
    axis = opts.Axis()
    if not -r <= axis < r or any(imp.t[i].shape != shape for i in ins):
        raise ValueError(f"cannot pack inputs of shapes {[list(imp.t[i].shape) for i in ins]} on axis {axis}")
    a = axis % r
    one = [*shape[:a], 1, *shape[a:]]
    expect_shape(imp, outs[0], [*shape[:a], len(ins), *shape[a:]], f"packing {len(ins)} inputs")
    parts = []
    for i in ins:
        name = imp.fresh("pack")
        imp.node("Reshape", [imp.get(i), imp.const("shape", np.array(one, np.int64))], [name])
        parts.append(name)
    imp.node("Concat", parts, [imp.put(outs[0])], axis=a)


def squeeze(imp, ins, outs, opts) -> None:
    x = ins[0]
    if int(np.prod(imp.t[x].shape)) != int(np.prod(imp.t[outs[0]].shape)):
        raise ValueError(f"output {list(imp.t[outs[0]].shape)} does not hold input {list(imp.t[x].shape)}")
    imp.node("Reshape", [imp.get(x), imp.const("shape", np.array(imp.t[outs[0]].shape, np.int64))],
             [imp.put(outs[0])])


def transpose(imp, ins, outs, opts) -> None:
    """TRANSPOSE (a constant permutation) -> Transpose of the tensor in TFLite's own layout."""
    x = ins[0]
    shape = imp.t[x].shape
    perm = _const_ints(imp.t, ins[1], "perm") if len(ins) > 1 else np.arange(len(shape))[::-1]
    if sorted(perm.tolist()) != list(range(len(shape))):
        raise ValueError(f"perm {perm.tolist()} is not a permutation of the {len(shape)} axes of the input")
    expect_shape(imp, outs[0], [shape[p] for p in perm], f"transposing by {perm.tolist()}")
    imp.node("Transpose", [imp.get(x)], [imp.put(outs[0])], perm=[int(p) for p in perm])


def gather(imp, ins, outs, opts) -> None:
    x, idx = ins[0], ins[1]
    shape = imp.t[x].shape
    axis = opts.Axis()
    if not -len(shape) <= axis < len(shape):
        raise ValueError(f"axis {axis} is outside a rank-{len(shape)} input")
    a = axis % len(shape)
    if imp.t[idx].dtype not in (2, 4):
        raise ValueError(f"indices {imp.t[idx].name!r} must be int32/int64")
    expect_shape(imp, outs[0], [*shape[:a], *imp.t[idx].shape, *shape[a + 1:]], "gathering")
    if imp.t[idx].data is not None:
        v = imp.array(idx).astype(np.int64)
        if v.size and (v.min() < 0 or v.max() >= shape[a]):
            raise ValueError(f"indices {sorted({int(i) for i in v.ravel() if not 0 <= i < shape[a]})[:5]} are "
                             f"outside [0, {shape[a]})")
        ind = imp.const("indices", v)
    else:
        ind = imp.get(idx)
    imp.node("Gather", [imp.get(x), ind], [imp.put(outs[0])], axis=a)


def depth_to_space(imp, ins, outs, opts) -> None:
    x = ins[0]
    n, h, w, c = imp.t[x].shape
    b = opts.BlockSize()
    if b < 1 or c % (b * b):
        raise ValueError(f"block size {b} does not divide {c} channels into blocks")
    expect_shape(imp, outs[0], [n, h * b, w * b, c // (b * b)], f"depth to space by {b}")
    imp.node("DepthToSpace", [imp.get(x, "NCHW")], [imp.put(outs[0], "NCHW")], blocksize=b, mode="DCR")


def resize_nearest(imp, ins, outs, opts) -> None:
    """RESIZE_NEAREST_NEIGHBOR -> Gather along H, then W, of the source rows and columns TFLite picks."""
    x = ins[0]
    n, h, w, c = imp.t[x].shape
    size = _const_ints(imp.t, ins[1], "size")
    if size.size != 2 or size.min() < 1:
        raise ValueError(f"size {size.tolist()} must be two positive integers")
    oh, ow = (int(v) for v in size)
    expect_shape(imp, outs[0], [n, oh, ow, c], f"resizing to {[oh, ow]}")
    ac, hp = bool(opts.AlignCorners()), bool(opts.HalfPixelCenters())
    layout = imp.layout_of([x], outs)
    ah, aw = (2, 3) if layout == "NCHW" else (1, 2)
    mid = imp.fresh("resize_rows")
    imp.node("Gather", [imp.get(x, layout), imp.const("rows", _nearest_indices(h, oh, ac, hp))], [mid],
             axis=ah)
    imp.node("Gather", [mid, imp.const("cols", _nearest_indices(w, ow, ac, hp))],
             [imp.put(outs[0], layout)], axis=aw)


def unary_table(imp, ins, outs, opts, *, name: str) -> None:
    from ...reference.tflite_elementwise import leaky_relu_table, tanh_table
    from ...reference.tflite_hard_swish import tflite_hard_swish_table

    x, y = imp.t[ins[0]], imp.t[outs[0]]
    expect_shape(imp, outs[0], x.shape, "an elementwise op")
    dt = DTYPES[y.dtype]
    args = (x.scale[0], int(x.zero_point[0]), y.scale[0], int(y.zero_point[0]))
    if name == "TANH":
        table = tanh_table(*args, dt)
    elif name == "HARD_SWISH":
        table = tflite_hard_swish_table(*args, dt)
    else:
        table = leaky_relu_table(*args, opts.Alpha(), dt)
    layout = imp.layout_of(ins[:1], outs)
    imp.node("vkinfer:Table", [imp.get(ins[0], layout), imp.const("table", table.view(np.uint8))],
             [imp.put(outs[0], layout)], dtype=np.dtype(dt).name)


def binary_table(imp, ins, outs, opts, *, name: str) -> None:
    from ...reference.tflite_elementwise import max_min_table, prelu_table, sub_table

    a, b, y = imp.t[ins[0]], imp.t[ins[1]], imp.t[outs[0]]
    try:
        want = np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"input shapes {list(a.shape)} and {list(b.shape)} do not broadcast") from None
    expect_shape(imp, outs[0], want, "broadcasting the inputs")
    dt = DTYPES[y.dtype]
    if name == "SUB":
        act = opts.FusedActivationFunction() if opts is not None else 0
        lo, hi = act_range(act, y.scale[0], int(y.zero_point[0]), dt) or QRANGE[np.dtype(dt)]
        table = sub_table(a.scale[0], int(a.zero_point[0]), b.scale[0], int(b.zero_point[0]), y.scale[0],
                          int(y.zero_point[0]), dt, lo, hi)
    elif name == "PRELU":
        table = prelu_table(a.scale[0], int(a.zero_point[0]), b.scale[0], int(b.zero_point[0]), y.scale[0],
                            int(y.zero_point[0]), dt, DTYPES[b.dtype])
    else:
        table = max_min_table(dt, name == "MAXIMUM")
    layout = imp.layout_of(ins[:2], outs) if len(a.shape) == len(b.shape) else "NHWC"
    imp.node("vkinfer:Table2", [imp.get(ins[0], layout), imp.get(ins[1], layout),
                                imp.const("table", table.view(np.uint8))], [imp.put(outs[0], layout)],
             dtype=np.dtype(dt).name)


# ---- checks: why an op cannot be imported, or None (ops.check first reports missing options) -------------------

def _q8(tensors, i) -> bool:
    return DTYPES.get(tensors[i].dtype) in (np.uint8, np.int8) and tensors[i].scale is not None and \
        tensors[i].scale.size == 1


def _one_type(tensors, data, outs) -> str | None:
    """Data inputs and outputs of one type the importer knows."""
    if not all(tensors[i].dtype in DTYPES for i in data + outs) or any(
            tensors[o].dtype != tensors[data[0]].dtype for o in outs):
        return "inputs and outputs must have one supported type"
    return None


def check_strided_slice(ins, outs, opts, tensors) -> str | None:
    why = _one_type(tensors, ins[:1], outs)
    if not why and (opts.EllipsisMask() or opts.NewAxisMask()):
        return "ellipsis_mask and new_axis_mask are not supported"
    return why


def check_moved(ins, outs, opts, tensors, *, kind: str = "") -> str | None:
    """SPLIT (its data is input 1), SPLIT_V, UNPACK, SQUEEZE: the data and outputs' type only."""
    return _one_type(tensors, ins[1:2] if kind == "SPLIT" else ins[:1], outs)


def check_pack(ins, outs, opts, tensors) -> str | None:
    why = _one_type(tensors, list(ins), outs)
    if not why and any(tensors[i].scale is not None and not same_q(tensors[i], tensors[outs[0]]) for i in ins):
        return "inputs and output must share one scale and zero point"
    return why


def check_gather(ins, outs, opts, tensors) -> str | None:
    why = _one_type(tensors, ins[:1], outs)
    if not why and opts.BatchDims() != 0:
        return "batch_dims != 0 is not supported"
    return why


def check_4d(ins, outs, opts, tensors) -> str | None:
    """DEPTH_TO_SPACE, RESIZE_NEAREST_NEIGHBOR."""
    why = _one_type(tensors, ins[:1], outs)
    if not why and len(tensors[ins[0]].shape) != 4:
        return "input is not 4-D"
    return why


def check_transpose(ins, outs, opts, tensors) -> str | None:
    why = _one_type(tensors, ins[:1], outs)
    if not why and tensors[ins[0]].scale is not None and not same_q(tensors[ins[0]], tensors[outs[0]]):
        return "input and output must share one scale and zero point"
    return why


def check_unary_table(ins, outs, opts, tensors) -> str | None:
    if not (_q8(tensors, ins[0]) and _q8(tensors, outs[0])) or tensors[ins[0]].dtype != tensors[outs[0]].dtype:
        return "only per-tensor int8/uint8 input and output of one type are supported"
    return None


def check_binary_table(ins, outs, opts, tensors) -> str | None:
    if not all(_q8(tensors, i) for i in (ins[0], ins[1], outs[0])) or len({tensors[i].dtype for i in (
            ins[0], ins[1], outs[0])}) != 1:
        return "only per-tensor int8/uint8 inputs and output of one type are supported"
    act = getattr(opts, "FusedActivationFunction", None)
    if act is not None and act() not in ACTIVATIONS:
        return f"fused activation {act()} is not supported"
    return None


# ---- the op table's entries (ops.py joins them) ------------------------------------------------------------------

def _table(name: str, options: str | None = None, no_options: str = "ok") -> Op:
    return Op(options, check_unary_table, partial(unary_table, name=name), ("vkinfer:Table",),
              no_options=no_options)


def _table2(name: str, options: str | None = None) -> Op:
    return Op(options, check_binary_table, partial(binary_table, name=name), ("vkinfer:Table2",), min_inputs=2)


OPS = {
    "STRIDED_SLICE": Op("StridedSliceOptions", check_strided_slice, strided_slice, ("Slice", "Reshape"),
                        min_inputs=4, no_options="unsupported"),
    "SPLIT": Op("SplitOptions", partial(check_moved, kind="SPLIT"), partial(split, kind="SPLIT"), ("Slice",),
                min_inputs=2, no_options="unsupported"),
    "SPLIT_V": Op("SplitVOptions", check_moved, partial(split, kind="SPLIT_V"), ("Slice",),
                  min_inputs=3, no_options="unsupported"),
    "PACK": Op("PackOptions", check_pack, pack, ("Reshape", "Concat"), no_options="unsupported"),
    "UNPACK": Op("UnpackOptions", check_moved, partial(split, kind="UNPACK"),
                 ("Slice", "Reshape"), no_options="unsupported"),
    "SQUEEZE": Op("SqueezeOptions", check_moved, squeeze, ("Reshape",)),
    "GATHER": Op("GatherOptions", check_gather, gather, ("Gather",), min_inputs=2, no_options="unsupported"),
    "DEPTH_TO_SPACE": Op("DepthToSpaceOptions", check_4d, depth_to_space, ("DepthToSpace",),
                         no_options="unsupported"),
    "RESIZE_NEAREST_NEIGHBOR": Op("ResizeNearestNeighborOptions", check_4d, resize_nearest, ("Gather",),
                                  min_inputs=2, no_options="unsupported"),
    "TRANSPOSE": Op("TransposeOptions", check_transpose, transpose, ("Transpose",)),
    "TANH": _table("TANH"),
    "HARD_SWISH": _table("HARD_SWISH"),
    "LEAKY_RELU": _table("LEAKY_RELU", "LeakyReluOptions", no_options="unsupported"),
    "SUB": _table2("SUB", "SubOptions"),
    "MAXIMUM": _table2("MAXIMUM"),
    "MINIMUM": _table2("MINIMUM"),
    "PRELU": _table2("PRELU"),
}
