"""Elementwise 8-bit ops on Vulkan as table lookups (shaders/qlinear_lut.comp).

The table is the numpy reference evaluated on every possible input byte (or byte pair), so the GPU
result is the reference's bit for bit with no float arithmetic on the device:
  unary (256 entries):    QLinearLeakyRelu, QLinearSigmoid
  binary (65536 entries): QLinearAdd, QLinearMul on operands of equal shape, or with the second one
                         a row of channels broadcast over the first (a per-channel bias), or any other
                         numpy broadcast: each output byte reads its operands at their own strides in the
                         packed form (cpu/qlinear_add.py broadcast_strides), QLinearAdd's table made with
                         ONNX Runtime's operand swap where its broadcaster swaps
"""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4, packed_words, rows_width
from ..reference._lookup import binary_table, unary_table  # noqa: F401 (vkinfer.vulkan.qlinear_lut API)
from .qlinear_conv import _upload_const


class QLinearLut:
    """An elementwise op over packed tensors of `shape`, defined by its lookup table (256 or 65536 bytes)."""

    def __init__(self, table: np.ndarray, shape: tuple[int, ...], dev: Device, z_row: bool = False,
                 general: tuple[tuple[int, ...], tuple[int, ...]] | None = None):
        """`general`: (a shape, b shape) broadcast to `shape` at their packed strides."""
        if table.dtype != np.uint8 or table.size not in (256, 65536):
            raise ValueError("internal: lookup table must be 256 or 65536 bytes")
        self.dev, self.binary = dev, table.size == 65536
        rows, width = rows_width(shape)
        self.out_words = packed_words(shape)
        self.in_words = [self.out_words] * (2 if self.binary else 1)
        if z_row:  # the second operand is one row broadcast over all rows
            self.in_words[1] = ceil4(width)
        self.t_buf = _upload_const(dev, np.ascontiguousarray(table).view(np.uint32))
        self.spec_consts = [self.out_words, ceil4(width), width, self.binary, z_row]
        if general is not None:
            dims = list(form_shape(tuple(shape))) or [1]
            xs, zs = (broadcast_strides(tuple(shape), tuple(s), packed=True) or [0] for s in general)
            if len(dims) > 6 or max(xs + zs + [int(np.prod(dims))]) >= 2 ** 31:
                raise ValueError(f"a broadcast of {general[0]} and {general[1]} past 6 axes or 2**31 bytes")
            pad = 6 - len(dims)
            self.in_words = [packed_words(tuple(s)) for s in general]
            self.spec_consts += [True] + [1] * pad + dims + [0] * pad + xs + [0] * pad + zs
        g = -(-self.out_words // 64)
        self.groups = (min(g, 65535), -(-g // 65535), 1)

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        z = ins[1] if self.binary else ins[0]
        return [self.dev.program("qlinear_lut", [ins[0], z, self.t_buf, y], self.groups, self.spec_consts)]


# --- lowering (vkinfer/model/lowering.py) ---
from ..cpu.qlinear_add import broadcast_strides, strided_table  # noqa: E402
from ..cpu.qlinear_lut import binary_table_fn  # noqa: E402 (the C kernel fills QLinearAdd tables)
from ..layout import form_shape  # noqa: E402
from ..model.lowering import Layer, binary_mode, lower, static_params, table_ops, unary_fn  # noqa: E402


@lower("vulkan", *table_ops("binary"))
def lower_binary(ctx, node, backend):
    ins, y = node.inputs, node.outputs[0]
    if not (mode := binary_mode(ctx, node, general=True)):
        return None
    if mode == "general":
        if ctx.dtype(y) != ctx.dtype(ins[0]):
            return None
        shapes = (tuple(ctx.shape(ins[0])), tuple(ctx.shape(ins[3])))
        return Layer(node, [ins[0], ins[3]], y,
                     make=lambda: QLinearLut(strided_table(ctx, node), tuple(ctx.shape(y)), backend.dev,
                                             general=shapes))
    fn = binary_table_fn(node, ctx.g.consts)
    # The 65536-entry table is made only if the node runs here.
    return Layer(node, [ins[0], ins[3]], node.outputs[0],
                 make=lambda: QLinearLut(binary_table(ctx.dtype(ins[0]), fn), ctx.shape(ins[0]), backend.dev,
                                         mode == "row"))


@lower("vulkan", *table_ops("unary"))
def lower_unary(ctx, node, backend):
    x = node.inputs[0]
    if not (ctx.quantized(x) and static_params(ctx, node, (1, 2, 3, 4))):
        return None
    table = unary_table(ctx.dtype(x), unary_fn(node, ctx.g.consts))
    return Layer(node, [x], node.outputs[0], make=lambda: QLinearLut(table, ctx.shape(x), backend.dev))


@lower("vulkan", "vkinfer:Table")
def lower_table(ctx, node, backend):
    """A folded float chain (vkinfer/model/tables.py): its 256-byte table as it is (raw bytes on both sides)."""
    x, y = node.inputs[0], node.outputs[0]
    if not (ctx.quantized(x, y) and ctx.const(node.inputs[1])):
        return None
    table = np.asarray(ctx.g.consts[node.inputs[1]])
    return Layer(node, [x], y, make=lambda: QLinearLut(table, ctx.shape(x), backend.dev))


@lower("vulkan", "vkinfer:Table2")
def lower_table2(ctx, node, backend):
    from ..model.tables import table2_lookup

    if (found := table2_lookup(ctx, node)) is None:
        return None
    a, b, table, mode = found
    y = node.outputs[0]
    return Layer(node, [a, b], y, make=lambda: QLinearLut(table, ctx.shape(y), backend.dev, mode == "row"))
