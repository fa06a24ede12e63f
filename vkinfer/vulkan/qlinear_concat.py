"""Channel concatenation on Vulkan (shaders/qlinear_concat.comp): com.microsoft QLinearConcat and Concat
on the channel axis of packed tensors. One dispatch per input (the caller puts barriers between them);
inputs whose quantization differs from the output's go through their 256-entry reference table."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4, rows_width
from .qlinear_conv import _upload_const


class QLinearConcat:
    """inputs: (shape, table or None) per input, shapes equal except in the channel (packed width) axis."""

    def __init__(self, inputs: list[tuple[tuple[int, ...], np.ndarray | None]], dev: Device):
        self.dev = dev
        forms = [rows_width(s) for s, _ in inputs]
        rows = forms[0][0]
        if any(r != rows for r, _ in forms):
            raise ValueError("internal: concat inputs differ outside the channel axis")
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
            spec = [rows, wd, ceil4(wd), c_out, ceil4(c_out), off, table is None, last]
            self.parts.append((t_buf, spec, (-(-nw // 64), gy, -(-rows // gy))))
            off += wd

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        return [self.dev.program("qlinear_concat", [x, t, y], groups, spec)
                for x, (t, spec, groups) in zip(ins, self.parts, strict=True)]


# --- lowering (vkinfer/model/lowering.py) ---
from ..model.lowering import Layer, channel_concat, lower  # noqa: E402


@lower("vulkan", "Concat", "com.microsoft:QLinearConcat")
def lower_concat(ctx, node, backend):
    if (cc := channel_concat(ctx, node)) is None:
        return None
    xs, tables = cc
    inputs = [(ctx.shape(x), t) for x, t in zip(xs, tables, strict=True)]
    return Layer(node, xs, node.outputs[0], make=lambda: QLinearConcat(inputs, backend.dev))
