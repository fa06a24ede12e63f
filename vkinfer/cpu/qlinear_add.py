"""com.microsoft QLinearAdd and QLinearMul in the native CPU graph over any numpy broadcast (the `qadd` operator: each
operand read at its own byte strides per output axis), and the single op `qlinear_add` (equal shapes).

QLinearAdd runs ONNX Runtime's float arithmetic (vki_qlinear_add, FMAs as MLAS's AVX2 kernel), with the operands
swapped where ORT's broadcaster swaps them (reference/qlinear_add.py `_input0_is_scalar`: the swap changes the
constant and the FMA order, so the last bit of the sum). QLinearMul runs ORT's arithmetic too (vki_qlinear_mul: an
exact int32 product, two float32 roundings; symmetric, so no swap) in SIMD: it replaced a 65536-byte table lookup
per value (YOLOX-tiny's 74 SiLU products in ddddocr_det: 5.5 ms of a 32 ms run on one Zen 4 core). `form_strides`
and `broadcast_strides` give every device's strided view of an operand (vulkan/qlinear_lut.py reads the packed form
through them)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..layout import ceil4, form_perm, form_shape, table2
from ..model.lowering import Layer, attrs_key, binary_fn, binary_mode, lower, memo, value_key
from ..reference import _qcheck as qc
from ..reference.requant import QRANGE
from . import _check, _ptr, lib


def form_strides(shape: tuple[int, ...], packed: bool = False) -> list[int]:
    """Byte stride of each ONNX axis of an 8-bit tensor of `shape` in the CPU form (`packed`: the Vulkan packed
    form, vkinfer/layout.py: the form's row, 4-D C or 5-D A*B or else the last axis, padded to whole words)."""
    rank = len(shape)
    if rank == 0:
        return []
    perm, dims = form_perm(shape), form_shape(tuple(shape))
    inner = 2 if rank == 5 else 1
    row = int(np.prod(dims[rank - inner:], dtype=np.int64))
    step = 4 * ceil4(row) if packed else row
    strides = [0] * rank
    acc = 1
    for i in range(rank - 1, rank - inner - 1, -1):
        strides[perm[i]] = acc
        acc *= dims[i]
    acc = step
    for i in range(rank - inner - 1, -1, -1):
        strides[perm[i]] = acc
        acc *= dims[i]
    return strides


def broadcast_strides(out: tuple[int, ...], shape: tuple[int, ...], packed: bool = False) -> list[int]:
    """An operand of `shape` broadcast to `out`: its byte strides per axis of `out` in the devices' storage order
    of `out` (form_perm), 0 where it broadcasts."""
    own = form_strides(shape, packed)
    k = len(out) - len(shape)
    per_axis = [0 if j < k or shape[j - k] == 1 else own[j - k] for j in range(len(out))]
    return [per_axis[p] for p in form_perm(out)]


def collapse(dims: list[int], *strides: list[int]) -> tuple[list[int], list[list[int]]]:
    """Merge adjacent axes that every operand walks contiguously (and drop size-1 axes): the fewest axes
    for the C loop; at least one."""
    keep = [i for i, d in enumerate(dims) if d != 1]
    ds, ss = [dims[i] for i in keep], [[s[i] for i in keep] for s in strides]
    out_d, out_s = [], [[] for _ in strides]
    for i, d in enumerate(ds):
        if out_d and all(o[-1] == s[i] * d for o, s in zip(out_s, ss, strict=True)):
            out_d[-1] *= d
            for o, s in zip(out_s, ss, strict=True):
                o[-1] = s[i]
            continue
        out_d.append(d)
        for o, s in zip(out_s, ss, strict=True):
            o.append(s[i])
    if not out_d:
        return [1], [[1] for _ in strides]
    return out_d, out_s


def swapped(ctx, node) -> bool:
    """Whether ONNX Runtime's broadcaster swaps QLinearAdd's operands for this node's shapes."""
    from ..reference.qlinear_add import _input0_is_scalar

    return node.op == "com.microsoft:QLinearAdd" and _input0_is_scalar(ctx.shape(node.inputs[0]),
                                                                        ctx.shape(node.inputs[3]))


def strided_table(ctx, node) -> np.ndarray:
    """The raw 65536-byte table (a_byte * 256 + b_byte) of a binary node over any broadcast: the reference on
    every byte pair (QLinearAdd through the C kernel, qlinear_lut.binary_table_fn), with ORT's operand swap."""
    from ..reference._lookup import binary_table
    from .qlinear_lut import binary_table_fn

    fn = binary_table_fn(node, ctx.g.consts)
    if swapped(ctx, node):
        from ..reference.qlinear_add import qlinear_add as ref_add

        p = [ctx.g.consts.get(n) if n else None for n in node.inputs]
        fn = lambda a, b: ref_add(b, p[4], p[5], a, p[1], p[2], p[6], p[7])  # noqa: E731
    return binary_table(ctx.dtype(node.inputs[0]), fn)


@lower("cpu", "com.microsoft:QLinearAdd", "com.microsoft:QLinearMul")
def lower_qadd(ctx, node, backend):
    ins, y = node.inputs, node.outputs[0]
    # Whether it runs here, and its form: a pure function of the shapes, types and constant parameters (the key
    # holds whether each is a constant), once per distinct one (a chain's nodes repeat it; 90 us a node).
    ak = attrs_key(node)
    vk = None if ak is None else value_key(ctx, [ins[i] if i < len(ins) else "" for i in (0, 3, 1, 2, 4, 5, 6, 7)]
                                           + [y], by_shape=(0, 1))
    form = memo(ctx, None if vk is None else ("qadd", node.op, ak, vk), lambda: _qadd_plan(ctx, node))
    if form is None:
        return None
    swap, args = form

    def emit(g, refs, out_ref, scratch):
        ra_, rb_ = (refs[1], refs[0]) if swap else (refs[0], refs[1])
        g.add_form("qadd", args, ra_, rb_, out_ref)
    return Layer(node, [ins[0], ins[3]], y, emit)


def _qadd_plan(ctx, node) -> tuple[bool, tuple] | None:
    """_qadd_form of a node this lowering takes, else None."""
    mode = binary_mode(ctx, node, general=True)
    if mode is None or ctx.dtype(node.outputs[0]) != ctx.dtype(node.inputs[0]):
        return None
    return _qadd_form(ctx, node)


def _qadd_form(ctx, node) -> tuple[bool, tuple]:
    """(ORT's operand swap, the qadd operator's arguments before its refs) of a QLinearAdd/Mul node."""
    ins, y = node.inputs, node.outputs[0]
    c, dt = ctx.g.consts, ctx.dtype(ins[0])
    a, b = ins[0], ins[3]
    out = tuple(ctx.shape(y))
    sa, sb = broadcast_strides(out, ctx.shape(a)), broadcast_strides(out, ctx.shape(b))
    swap = swapped(ctx, node)
    table, ra, rb, fixed, mul, mza, mzb = None, 0.0, 0.0, 0.0, 0, 0, 0
    za, zb, zc = (qc.zero_point("zero_point", c[n], dt) if n else 0 for n in (ins[2], ins[5], ins[7]))
    pa, pb, pc = (qc.scale("scale", c[n]) for n in (ins[1], ins[4], ins[6]))
    if node.op == "com.microsoft:QLinearAdd":
        if swap:  # ORT's kernel reads input b as its "A"
            pa, za, pb, zb, a, b, sa, sb = pb, zb, pa, za, b, a, sb, sa
        ra, rb, fixed = qadd_constants(pa, za, pb, zb, pc, zc)
    else:  # ratio = float32(float32(a_scale * b_scale) / c_scale), as reference/qlinear_mul.py
        mul, mza, mzb = 1, int(za), int(zb)
        with np.errstate(over="ignore", invalid="ignore"):
            ratio = (np.float32(pa) * np.float32(pb)) / np.float32(pc)
        if not np.isfinite(ratio):
            table = table2(binary_table_of(node, c, dt), dt, dt)  # the reference's overflow, byte pair by pair
        ra, fixed = float(ratio), float(np.float32(zc))
    dims, (sa, sb) = collapse(list(form_shape(out)), sa, sb)
    lo, hi = QRANGE[np.dtype(dt)]
    signed = int(np.dtype(dt) == np.int8)
    shape_arr, sa_arr, sb_arr = (np.asarray(v, np.uint32 if k == 0 else np.uint64)
                                 for k, v in enumerate((dims, sa, sb)))
    return swap, (len(dims), shape_arr, sa_arr, sb_arr, signed, mul, mza, mzb, ra, rb, fixed, lo, hi, table)


def binary_table_of(node, consts, dt) -> np.ndarray:
    """QLinearMul's raw 65536-byte table from its reference (symmetric: no operand swap)."""
    from ..reference._lookup import binary_table

    return binary_table(dt, binary_fn(node, consts))


def qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point) -> np.ndarray:
    """com.microsoft QLinearAdd in C, bit-exact with ONNX Runtime; equal shapes only (broadcasting
    goes through vkinfer.reference.qlinear_add, which defines the numerics for every case)."""
    from ..reference.qlinear_add import _binary_setup, _input0_is_scalar

    shape, sa, sb, sc, za, zb, zc = _binary_setup(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale,
                                                  c_zero_point)
    if a.shape != b.shape:
        raise ValueError(f"cpu.qlinear_add needs equal shapes, got {a.shape} and {b.shape}")
    run = prepare_qlinear_add(sa, za, sb, zb, sc, zc, a.dtype, swap=_input0_is_scalar(a.shape, b.shape))
    return run(a, b)


def qadd_constants(sa, za, sb, zb, sc, zc) -> tuple[float, float, float]:
    """(ra, rb, fixed) of ONNX Runtime's QLinearAdd, folded in its order of operations (vki_qlinear_add)."""
    from ..reference._float32 import fma32

    ra, rb = np.float32(sa / sc), np.float32(sb / sc)
    fixed = float(np.float32(np.float32(zc) - fma32(ra, np.float32(za), np.float32(rb * np.float32(zb)))))
    return float(ra), float(rb), fixed


def prepare_qlinear_add(sa, za, sb, zb, sc, zc, dtype, swap: bool = False) -> Callable[[np.ndarray, np.ndarray],
                                                                                       np.ndarray]:
    """QLinearAdd over checked float32 scales and integer zero points, constants folded once:
    fn(a, b) on equal-shaped contiguous arrays of `dtype`. `swap`: ONNX Runtime's operand swap (see the
    reference), decided by the caller from the shapes."""
    from ..reference.requant import QRANGE

    if swap:  # ORT swaps the kernel's operands (see the reference)
        sa, za, sb, zb = sb, zb, sa, za
    ra, rb, fixed = qadd_constants(sa, za, sb, zb, sc, zc)
    lo, hi = QRANGE[np.dtype(dtype)]
    signed = int(np.dtype(dtype) == np.int8)
    fn = lib().vki_qlinear_add

    def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if swap:
            a, b = b, a
        a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
        if a.shape != b.shape or a.dtype != dtype or b.dtype != dtype:
            raise ValueError("internal: qlinear_add operands differ in shape or type")
        y = np.empty(a.shape, a.dtype)
        _check(fn(_ptr(a), _ptr(b), _ptr(y), a.size, signed, ra, rb, fixed, lo, hi), "qlinear_add")
        return y
    return run
