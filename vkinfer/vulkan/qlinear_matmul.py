"""QLinearMatMul on Vulkan: the qlinear_gemm kernel over (batched) rows of A."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4, pad_last
from ..reference._spec import MatMulSpec
from .qlinear_conv import GEMV_MAX_ROWS, _upload_const, gemm_shared_tile, requant_table


def choose_matmul_kernel(s: MatMulSpec) -> str:
    """qlinear_gemv for few rows (a 32-row tile would be mostly waste), else qlinear_gemm."""
    return "qlinear_gemv" if s.a.shape[1] < GEMV_MAX_ROWS else "qlinear_gemm"


class QLinearMatMul:
    """A matmul prepared for one device: B packed per column and uploaded once (with a_zp folded
    into the per-column terms); `bind(a, y)` makes the pipeline over activation buffers."""

    def __init__(self, s: MatMulSpec, dev: Device):
        self.spec, self.dev = s, dev
        nb, m, k = s.a.shape
        bb, _, n = s.b.shape
        k4, n4 = ceil4(k), ceil4(n)
        self.in_words, self.out_words = nb * m * k4, nb * m * n4
        bt = np.ascontiguousarray(s.b.transpose(0, 2, 1)).view(np.uint8)  # (bb, N, K) raw bytes
        packed = np.zeros((bb, 4 * n4, 4 * k4), np.uint8)
        packed[:, :n] = pad_last(bt, 4 * k4)
        bsum = s.b.astype(np.int64).sum(axis=1)  # (bb, N)
        term = -s.a_zp * bsum + k * s.a_zp * s.b_zp.astype(np.int64)[None, :]
        q = np.concatenate([requant_table(t, s.b_zp, s.out.m, 4 * n4) for t in term])
        shared_b = bb == 1 and nb > 1
        b_batch, q_batch = (0, 0) if shared_b else (4 * n4 * k4, 4 * n4)
        sa, sb = s.a.dtype == np.int8, s.b.dtype == np.int8
        self.kernel = choose_matmul_kernel(s)
        if self.kernel == "qlinear_gemv":
            self.spec_consts = [k4, n4, m, m * k4, b_batch, sa, sb, n, q_batch]
            self.groups = (-(-n4 // 64), m, nb)
        else:
            self.spec_consts = [k4, n4, m, m * k4, b_batch, m, m, 1, 1, sa, sb, int(np.any(s.b_zp != 0)), n,
                                q_batch, gemm_shared_tile(dev)]
            self.groups = (-(-n4 // 8), -(-m // 32), nb)
        self.push = [s.a_zp, s.out.zero_point, s.out.lo, s.out.hi]
        self.w_buf = _upload_const(dev, packed.view(np.uint32))
        self.q_buf = _upload_const(dev, q)

    def bind(self, a: Buffer, y: Buffer) -> Program:
        """The pipeline reading packed rows `a` and writing packed output `y`."""
        return self.dev.program(self.kernel, [a, self.w_buf, self.q_buf, y], self.groups,
                                self.spec_consts, self.push)


# --- lowering (vkinfer/model/lowering.py) ---
from ..model.lowering import Layer, lower, static  # noqa: E402


@lower("vulkan", "QLinearMatMul")
def lower_matmul(ctx, node, backend):
    from ..reference._spec import matmul_spec

    if not (static(ctx, node, 1) and ctx.quantized(node.inputs[0])):
        return None
    spec = matmul_spec(*ctx.args(node)[:8])
    a_shape = ctx.shape(node.inputs[0])
    if len(a_shape) > 3 or a_shape[:-2] != spec.out_shape[:-2]:
        return None  # A broadcast over B's batch: rows would not match the packed form
    return Layer(node, [node.inputs[0]], node.outputs[0], make=lambda: QLinearMatMul(spec, backend.dev))
