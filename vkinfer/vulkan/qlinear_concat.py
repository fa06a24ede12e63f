"""Concatenation on Vulkan (shaders/qlinear_concat.comp): com.microsoft QLinearConcat and Concat on the channel
axis (the packed row) of packed tensors, and a QLinearConcat with requantizing inputs along an axis stored outside
the row (what the byte gather cannot take): there each input's part of an output block is whole padded rows, a
run of words. One dispatch per input (the caller puts barriers between them); inputs whose quantization differs
from the output's go through their 256-entry reference table, the rows' padding bytes kept zero."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4, rows_width
from .qlinear_conv import _upload_const


class QLinearConcat:
    """inputs: (shape, table or None) per input, shapes equal except in the channel (packed width) axis; or,
    with `outer` (rows, words per input, real bytes per padded row), blocks of whole padded rows."""

    def __init__(self, inputs: list[tuple[tuple[int, ...], np.ndarray | None]], dev: Device,
                 outer: tuple[int, list[int], int] | None = None):
        self.dev = dev
        row_w, row4 = 0, 0
        if outer is None:
            forms = [rows_width(s) for s, _ in inputs]
            rows = forms[0][0]
            if any(r != rows for r, _ in forms):
                raise ValueError("internal: concat inputs differ outside the channel axis")
        else:  # blocks of words as "channels" of 4 bytes each: no word is shared between inputs
            rows, words, row_w = outer
            forms = [(rows, 4 * w) for w in words]
            row4 = ceil4(row_w)
        c_out = sum(wd for _, wd in forms)
        self.in_words = [rows * ceil4(wd) for _, wd in forms]
        self.out_words = rows * ceil4(c_out)
        ident = _upload_const(dev, np.zeros(64, np.uint32))
        self.parts, off = [], 0
        for k, ((_, wd), (_, table)) in enumerate(zip(forms, inputs, strict=True)):
            last = k == len(inputs) - 1
            t_buf = ident if table is None else _upload_const(dev, np.ascontiguousarray(table).view(np.uint32))
            nw = (ceil4(c_out) if last else (off + wd + 3) // 4) - off // 4
            gy = min(rows, 65535)
            spec = [rows, wd, ceil4(wd), c_out, ceil4(c_out), off, table is None, last, row4, row_w]
            self.parts.append((t_buf, spec, (-(-nw // 64), gy, -(-rows // gy))))
            off += wd

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        return [self.dev.program("qlinear_concat", [x, t, y], groups, spec)
                for x, (t, spec, groups) in zip(ins, self.parts, strict=True)]


# --- lowering (vkinfer/model/lowering.py) ---
from ..cpu.qlinear_concat import requant_concat  # noqa: E402
from ..layout import form_perm, form_shape  # noqa: E402
from ..model.lowering import Layer, channel_concat, lower  # noqa: E402


def outer_blocks(shapes: list[tuple[int, ...]], axis: int) -> tuple[int, list[int], int] | str | None:
    """How a concatenation along `axis` runs on packed tensors (vkinfer/layout.py rows_width: 4-D rows of C,
    5-D of A*B, others of the last axis): "row" when the axis leads the packed row (each input a run of every
    row: the channel form), (rows, words per input, real bytes per packed row) when it is stored outside the
    row, None inside it (5-D along B)."""
    rank = len(shapes[0])
    if rank < 1 or any(len(s) != rank for s in shapes) or not -rank <= axis < rank:
        return None
    axis %= rank
    inner = 2 if rank == 5 else 1  # form axes making up the packed row
    p = form_perm(shapes[0]).index(axis)
    if p > rank - inner:
        return None
    forms = [form_shape(tuple(s)) for s in shapes]
    if any(f[:p] + f[p + 1:] != forms[0][:p] + forms[0][p + 1:] for f in forms):
        return None
    if p == rank - inner:
        return "row"
    row_w = int(np.prod(forms[0][rank - inner:], dtype=np.int64))
    rows = int(np.prod(forms[0][:p], dtype=np.int64))
    words = [int(np.prod(f[p:rank - inner], dtype=np.int64)) * ceil4(row_w) for f in forms]
    return rows, words, row_w


@lower("vulkan", "Concat", "com.microsoft:QLinearConcat")
def lower_concat(ctx, node, backend):
    outer = None
    if (cc := channel_concat(ctx, node)) is not None and len({rows_width(ctx.shape(x))[0] for x in cc[0]}) > 1:
        cc = None  # 5-D along W: the last axis is not the packed row (N*H*W rows of A*B)
    if cc is None:
        if (cc := requant_concat(ctx, node)) is None:
            return None
        outer = outer_blocks([ctx.shape(x) for x in cc[0]], int(node.attrs["axis"]))
        if outer is None:
            return None
        if outer == "row":
            outer = None
    xs, tables = cc
    inputs = [(ctx.shape(x), t) for x, t in zip(xs, tables, strict=True)]
    return Layer(node, xs, node.outputs[0], make=lambda: QLinearConcat(inputs, backend.dev, outer))
