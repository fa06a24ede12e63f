"""com.microsoft QLinearGlobalAveragePool on Vulkan (shaders/qlinear_global_average_pool.comp)."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4
from ..reference.qlinear_global_average_pool import global_pool_multiplier
from ..reference.requant import split_float32


class QLinearGlobalAveragePool:
    """(N, C, H, W) packed -> (N, C, 1, 1) packed; parameters are numpy scalars as the reference takes them."""

    def __init__(self, shape, dtype, x_scale, x_zp, y_scale, y_zp, lo: int, hi: int, dev: Device):
        n, c, h, w = shape
        self.dev = dev
        m = global_pool_multiplier(np.float32(x_scale), np.float32(y_scale), h * w)
        mant, exp = (int(v.reshape(-1)[0]) for v in split_float32(np.asarray(m, np.float32).reshape(1)))
        self.in_words, self.out_words = [n * h * w * ceil4(c)], n * ceil4(c)
        self.spec_consts = [ceil4(c), c, h * w, np.dtype(dtype) == np.int8]
        self.push = [int(x_zp), int(mant), int(exp), int(y_zp), lo, hi]
        self.groups = (-(-ceil4(c) // 64), n, 1)

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        return [self.dev.program("qlinear_global_average_pool", [ins[0], y], self.groups, self.spec_consts,
                                 self.push)]


# --- lowering (vkinfer/model/lowering.py) ---
from ..model.lowering import Layer, lower, static_params  # noqa: E402
from ._loops import check_loops, loop_cost  # noqa: E402
from .qlinear_conv import MIN_WORKGROUP_COUNT  # noqa: E402


@lower("vulkan", "com.microsoft:QLinearGlobalAveragePool")
def lower_gap(ctx, node, backend):
    from ..reference.requant import QRANGE

    ins = node.inputs
    if not (ctx.quantized(ins[0]) and len(ctx.shape(ins[0])) == 4 and not node.attrs.get("channels_last", 0)
            and static_params(ctx, node, (1, 2, 3, 4))):
        return None
    n, ch = ctx.shape(ins[0])[:2]
    if max(-(-ceil4(ch) // 64), n) > MIN_WORKGROUP_COUNT:
        # As QLinearConv's: refused here, the plan places the node on the CPU (a batch of 65536, from
        # ../shared/regressions/hang/case_112893 and nonclean/case_125185, made device="vulkan" refuse at run what
        # cpu and the reference ran).
        raise ValueError(f"a dispatch of {(-(-ceil4(ch) // 64), n, 1)} workgroups passes {MIN_WORKGROUP_COUNT}, the "
                         "least maxComputeWorkGroupCount Vulkan guarantees")
    h, w = ctx.shape(ins[0])[2:]
    # One invocation sums a channel word's h * w positions (one loop) and requantizes 4 bytes: past llvmpipe's
    # loop limit it would sum a prefix (_loops), so refused and placed on the CPU.
    check_loops(f"QLinearGlobalAveragePool over {h}x{w}", loop_cost(h * w) + loop_cost(4))
    c, dt = ctx.g.consts, ctx.dtype(ins[0])
    lo, hi = QRANGE[dt]
    return Layer(node, [ins[0]], node.outputs[0], make=lambda: QLinearGlobalAveragePool(
        ctx.shape(ins[0]), dt, c[ins[1]], c[ins[2]] if ins[2:3] and ins[2] else 0, c[ins[3]],
        c[ins[4]] if ins[4:5] and ins[4] else 0, lo, hi, backend.dev))
