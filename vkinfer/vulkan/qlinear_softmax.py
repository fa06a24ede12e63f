"""com.microsoft QLinearSoftmax on Vulkan (shaders/qlinear_softmax.comp) with ONNX Runtime's bits: the reference's
table (vkinfer/reference/qlinear_softmax.py) and its float32 arithmetic emulated with integers in the shader.

Two dispatches over one scratch buffer: per row its maximum and sequential float32 sum, then per output word its
bytes. Rows are the CPU lowering's view (vkinfer/cpu/qlinear_softmax.py, `softmax_view`) of the packed form, so any
axis runs without a transpose.
"""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4, packed_words, rows_width
from .qlinear_conv import _upload_const


class QLinearSoftmax:
    """Softmax rows (outer, len, inner) of a packed tensor of `shape`: `table` the reference's 256 float32 values,
    `y_mult` = floor(1 / y_scale), `y_zp` the output zero point."""

    def __init__(self, shape: tuple[int, ...], view: tuple[int, int, int], table: np.ndarray, y_mult: np.float32,
                 y_zp: int, signed: bool, dev: Device):
        self.dev = dev
        outer, n, inner = view
        _, width = rows_width(shape)
        self.out_words = packed_words(shape)
        self.in_words = [self.out_words]
        rows = outer * inner
        if max(rows * n, self.out_words, 2 * rows) >= 2**31:
            raise ValueError(f"qlinear_softmax: a tensor of shape {shape} is too large for the shader's int indices")
        self.t_buf = _upload_const(dev, np.ascontiguousarray(table, np.float32).view(np.uint32))
        self.s_buf = dev.buffer(8 * rows, staged=False)
        base = [outer, n, inner, width, ceil4(width), self.out_words, bool(signed)]
        self.spec = [base + [0], base + [1]]
        self.push = [int(np.float32(y_mult).view(np.int32)), int(y_zp)]
        self.groups = [self._groups(rows), self._groups(self.out_words)]

    @staticmethod
    def _groups(n: int) -> tuple[int, int, int]:
        g = -(-n // 64)
        return min(g, 65535), -(-g // 65535), 1

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        bufs = [ins[0], self.t_buf, self.s_buf, y]
        return [self.dev.program("qlinear_softmax", bufs, g, s, self.push)
                for g, s in zip(self.groups, self.spec, strict=True)]


# --- lowering (vkinfer/model/lowering.py) ---
from ..cpu.qlinear_softmax import softmax_params  # noqa: E402 (one definition of the rows and parameters)
from ..model.lowering import Layer, lower  # noqa: E402
from ._loops import check_loops, loop_cost  # noqa: E402


@lower("vulkan", "com.microsoft:QLinearSoftmax")
def lower_qlinear_softmax(ctx, node, backend):
    if (p := softmax_params(ctx, node)) is None:
        return None
    table, y_mult, yz, view = p
    # The per-row pass loops over the row twice (maximum, then sum): past llvmpipe's loop limit (_loops) it would
    # stop early (a softmax over 50,257 logits gave wrong bytes on lavapipe), so refused and placed on the CPU.
    check_loops(f"QLinearSoftmax over rows of {view[1]}", 2 * loop_cost(view[1]))
    x, y = node.inputs[0], node.outputs[0]
    signed = ctx.dtype(y) == np.int8
    return Layer(node, [x], y, make=lambda: QLinearSoftmax(ctx.shape(x), view, table, y_mult, yz, signed,
                                                           backend.dev))
