"""QLinearMatMul on Vulkan: with constant B, the qlinear_gemm kernel over (batched) rows of A; with both operands
activations (attention), shaders/qlinear_matmul_act.comp reading the packed operands at their byte strides
(output rank <= 4: the attention case; more falls to the CPU graph)."""

from __future__ import annotations

import dataclasses

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4, pad_last
from ..reference._spec import MatMulSpec
from .gemm_tiles import GemmConfig, fit_shape, gemm_config
from .qlinear_conv import GEMV_MAX_ROWS, _upload_const, kernel_defines, requant_table


def choose_matmul_kernel(s: MatMulSpec) -> str:
    """qlinear_gemv for few rows (a 32-row tile would be mostly waste), else qlinear_gemm."""
    return "qlinear_gemv" if s.a.shape[1] < GEMV_MAX_ROWS else "qlinear_gemm"


class QLinearMatMul:
    """A matmul prepared for one device: B packed per column and uploaded once (with a_zp folded
    into the per-column terms); `bind(a, y)` makes the pipeline over activation buffers."""

    def __init__(self, s: MatMulSpec, dev: Device, gemm: GemmConfig | None = None):
        """`gemm`: qlinear_gemm's tile and staging (default: gemm_tiles.gemm_config(dev))."""
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
            self.gemm = gemm or fit_shape(gemm_config(dev), m, n4)
            self.spec_consts = [k4, n4, m, m * k4, b_batch, m, m, 1, 1, sa, sb, int(np.any(s.b_zp != 0)), n,
                                q_batch, *self.gemm.spec()]
            self.groups = (-(-n4 // self.gemm.tile.words), -(-m // self.gemm.tile.rows), nb)
        self.push = [s.a_zp, s.out.zero_point, s.out.lo, s.out.hi]
        self.dot = bool(getattr(dev, "use_dot", False))  # both kernels have the variant (qlinear_conv.DOT_KERNELS)
        self.defines = kernel_defines(dev, self.dot, s.out.m)
        self.w_buf = _upload_const(dev, packed.view(np.uint32))
        self.q_buf = _upload_const(dev, q)

    def bind(self, a: Buffer, y: Buffer) -> Program:
        """The pipeline reading packed rows `a` and writing packed output `y`."""
        return self.dev.program(self.kernel, [a, self.w_buf, self.q_buf, y], self.groups,
                                self.spec_consts, self.push, self.defines)


# --- lowering (vkinfer/model/lowering.py) ---
from ..model.lowering import Layer, lower, static  # noqa: E402
from ._loops import check_loops, loop_cost  # noqa: E402


def check_matmul_act_loops(k: int) -> None:
    """ValueError past llvmpipe's loop limit (_loops) for shaders/qlinear_matmul_act.comp: one invocation computes
    an output word's 4 dot products of length `k` one after another (a K of 17,000 is 68,004 passes)."""
    check_loops(f"qlinear_matmul_act over K = {k}", 4 * loop_cost(k) + loop_cost(4))


@lower("vulkan", "QLinearMatMul")
def lower_matmul(ctx, node, backend):
    from ..reference._spec import matmul_spec

    if ctx.quantized(node.inputs[0], node.inputs[3]) and not ctx.const(node.inputs[3]) and static(ctx, node, 4):
        return lower_two_activations(ctx, node, backend)
    if not (static(ctx, node, 1) and ctx.quantized(node.inputs[0])):
        return None
    spec = matmul_spec(*ctx.args(node)[:8])
    a_shape = ctx.shape(node.inputs[0])
    if len(a_shape) > 3 or a_shape[:-2] != spec.out_shape[:-2]:
        return None  # A broadcast over B's batch: rows would not match the packed form
    # Only A's shape and dtype are read from here on: a zero-stride view instead of the zeros the spec was checked
    # on, which the plan kept as long as it lived (batch x K bytes a plan: 72 KB at batch 1,000 of moves_u8).
    spec = dataclasses.replace(spec, a=np.broadcast_to(np.zeros((), spec.a.dtype), spec.a.shape))
    # gemv/gemm loop over A's row words in one invocation: past llvmpipe's loop limit (_loops) the sum stops early.
    check_loops(f"QLinearMatMul over K = {a_shape[-1]}", loop_cost(ceil4(int(a_shape[-1]))))
    return Layer(node, [node.inputs[0]], node.outputs[0], make=lambda: QLinearMatMul(spec, backend.dev))


class QLinearMatMulAct:
    """A two-activation matmul over packed tensors (shaders/qlinear_matmul_act.comp)."""

    def __init__(self, shapes: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]], k: int,
                 strides: tuple[list[int], list[int], int, int], signed: tuple[bool, bool], push: list[int],
                 dev: Device):
        from ..layout import form_shape, packed_words, rows_width

        sa, sb, so = shapes
        xa, xb, ak, bk = strides
        dims = list(form_shape(so))
        rows, width = rows_width(so)
        self.dev = dev
        self.in_words = [packed_words(sa), packed_words(sb)]
        self.out_words = packed_words(so)
        pad = 4 - len(dims)
        self.spec_consts = ([self.out_words, ceil4(width), width, k, ak, bk, signed[0], signed[1]] + [1] * pad + dims
                            + [0] * pad + xa + [0] * pad + xb)
        self.push = push
        g = -(-self.out_words // 64)
        self.groups = (min(g, 65535), -(-g // 65535), 1)

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        return [self.dev.program("qlinear_matmul_act", [ins[0], ins[1], y], self.groups, self.spec_consts,
                                 self.push)]


def lower_two_activations(ctx, node, backend):
    """Both operands activations: per-tensor parameters, output rank <= 4, offsets below 2**31."""
    from ..cpu.qlinear_add import form_strides
    from ..layout import form_perm
    from ..reference._spec import matmul_spec
    from ..reference.requant import split_float32

    s = matmul_spec(*ctx.args(node, acts=4)[:8])
    a, b, y = node.inputs[0], node.inputs[3], node.outputs[0]
    sa, sb, so = (tuple(ctx.shape(t)) for t in (a, b, y))
    if (np.any(s.b_zp != s.b_zp[0]) or np.any(s.out.m != s.out.m[0]) or ctx.dtype(y) != s.out.dtype
            or len(so) > 4 or len(so) != max(len(sa), len(sb))):
        return None
    fa, fb = form_strides(sa, True), form_strides(sb, True)
    r = len(so)
    per_a, per_b = [0] * r, [0] * r
    for j in range(r - 2):
        for shape, st, per in ((sa, fa, per_a), (sb, fb, per_b)):
            i = j - (r - len(shape))
            per[j] = 0 if i < 0 or shape[i] == 1 else st[i]
    per_a[r - 2], per_b[r - 1] = fa[-2], fb[-1]
    perm = form_perm(so)
    xa, xb = [per_a[p] for p in perm], [per_b[p] for p in perm]
    if max(xa + xb + [4 * max(len(sa), 1) * int(np.prod(sa)) + 4 * int(np.prod(sb))]) >= 2 ** 30:
        return None
    mant, exp = split_float32(np.atleast_1d(s.out.m[:1]))
    push = [s.a_zp, int(s.b_zp[0]), s.out.zero_point, s.out.lo, s.out.hi, int(mant[0]), int(exp[0])]
    signed = (ctx.dtype(a) == np.int8, ctx.dtype(b) == np.int8)
    check_matmul_act_loops(int(sa[-1]))
    geom = (xa, xb, fa[-1], fb[-2])
    return Layer(node, [a, b], y, make=lambda: QLinearMatMulAct((sa, sb, so), sa[-1], geom, signed, push,
                                                               backend.dev))
