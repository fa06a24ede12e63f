"""QLinearConv on Vulkan: kernel choice, one-time weight packing, and binding to buffers.

Kernels (shaders/<name>.comp):
- qlinear_gemm:       1x1, no padding, group 1 (any stride): a GEMM over output pixels.
- qlinear_dwconv3x3:  depthwise 3x3, stride 1 or 2, dilation 1.
- qlinear_dwconv:     other depthwise (group == C == M).
- qlinear_conv:       everything else (grouped, dilated, strided, any kernel).
"""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import as_bytes, ceil4, pad_last
from ..reference._spec import ConvSpec
from ..reference.requant import split_float32
from ._loops import check_loops, loop_cost, nested_iterations
from .gemm_tiles import TILES, GemmConfig, Tile, fit_shape, gemm_config

# Every convolution kernel variant; the tests check the shape table reaches each one and the
# benchmark reports which one ran.
KERNELS = ("qlinear_gemm", "qlinear_gemv", "qlinear_dwconv3x3", "qlinear_dwconv", "qlinear_conv")
# The least maxComputeWorkGroupCount the Vulkan spec allows, in each dimension: a convolution that needs more is
# placed elsewhere (checked at lowering, without opening the device, so the placement is the same on every device).
MIN_WORKGROUP_COUNT = 65535
# Below this many output pixels (rows), a 32-row GEMM tile is mostly waste: stream K per row.
GEMV_MAX_ROWS = 8


def gemm_shared_tile(dev: Device) -> bool:
    """Whether qlinear_gemm stages tiles in shared memory on `dev` (gemm_tiles.gemm_config; $VKINFER_GEMM_TILE=
    shared|direct forces it)."""
    return gemm_config(dev).shared


#: Kernels with an integer-dot-product variant (compiled with VK_DOT, shaders/qcommon.glsl's dot8). Depthwise has
#: none: its four lanes are four channels, each with its own weights, so there is no sum along a packed word; a
#: dot product would need a 4x4 byte transpose of the input words per 4 taps (about 20 integer operations) plus a
#: second dot for the input sums, more work than the 16 multiply-adds it replaces.
DOT_KERNELS = ("qlinear_gemm", "qlinear_gemv", "qlinear_conv")


def uses_dot(dev: Device, s: ConvSpec, kernel: str) -> bool:
    """Whether this convolution runs `kernel`'s integer-dot-product variant on `dev`: the device uses the dot
    shaders (`Device.use_dot`) and, for qlinear_conv, every group starts on a packed word and no output word
    straddles two groups (one group, or channels per group in and out multiples of 4); the variant reads raw
    words and folds the input zero point into the per-channel term."""
    if not getattr(dev, "use_dot", False) or kernel not in DOT_KERNELS:
        return False
    if kernel != "qlinear_conv" or s.group == 1:
        return True
    m, cg = s.w.shape[:2]
    return cg % 4 == 0 and (m // s.group) % 4 == 0


def choose_kernel(s: ConvSpec) -> str:
    """The shader that runs this convolution (see KERNELS and the module docstring)."""
    n, c, h, w = s.x.shape
    m, cg, kh, kw = s.w.shape
    if s.group == c == m:
        if kh == kw == 3 and s.strides[0] == s.strides[1] in (1, 2) and s.dilations == (1, 1):
            return "qlinear_dwconv3x3"
        return "qlinear_dwconv"
    if kh == kw == 1 and s.group == 1 and s.pads == (0, 0, 0, 0):
        _, _, oh, ow = s.out_shape
        return "qlinear_gemv" if s.strides == (1, 1) and oh * ow < GEMV_MAX_ROWS else "qlinear_gemm"
    return "qlinear_conv"


def dispatch_groups(s: ConvSpec, kernel: str, tile: Tile = TILES["32x32"]) -> tuple[int, int, int]:
    """The workgroups `kernel` dispatches for this convolution (qlinear_gemm: with `tile`; the default, the
    smallest, gives the most workgroups: what the lowering checks against the device limits)."""
    n, c, _, _ = s.x.shape
    m = s.w.shape[0]
    _, _, oh, ow = s.out_shape
    c4, m4 = ceil4(c), ceil4(m)
    if kernel == "qlinear_gemv":
        return (-(-m4 // 64), oh * ow, n)
    if kernel == "qlinear_gemm":
        return (-(-m4 // tile.words), -(-(oh * ow) // tile.rows), n)
    if kernel == "qlinear_dwconv3x3":
        return (-(-c4 // 8), -(-ow // 32), n * oh)  # 8 x 8 invocations, 4 pixels each
    if kernel == "qlinear_dwconv":
        return (-(-c4 // 4), -(-ow // 16), n * oh)
    return (-(-m4 // 4), -(-ow // 64), n * oh)  # 16 invocations x 4 pixels along W


def conv_loop_iterations(s: ConvSpec, kernel: str) -> int:
    """Loop passes of one invocation of `kernel` (see _loops), before its short requantization loops: the K loop of
    gemv/gemm (one A row's words; gemm's 4-row inner loops are unrolled), the window of dwconv, the window and
    input words of conv (4 times where an output word straddles groups: one channel at a time); dwconv3x3 is a
    fixed 3x3 window."""
    c = s.x.shape[1]
    m, cg, kh, kw = s.w.shape
    if kernel in ("qlinear_gemm", "qlinear_gemv"):
        return loop_cost(ceil4(c))
    if kernel == "qlinear_dwconv3x3":
        return 0
    if kernel == "qlinear_dwconv":
        return nested_iterations((kh, kw))
    straddle = 4 if s.group > 1 and (m // s.group) % 4 else 1
    return straddle * nested_iterations((kh, kw, ceil4(cg)))


def requant_table(term: np.ndarray, w_zp: np.ndarray, m: np.ndarray, channels_padded: int) -> np.ndarray:
    """Per-channel ivec4 (term, w_zp, mant, exp), zero rows for padding channels."""
    mant, exp = split_float32(m)
    q = np.zeros((channels_padded, 4), np.int32)
    q[: len(term)] = np.stack([term.astype(np.int64).astype(np.int32), w_zp, mant, exp], axis=1)
    return q


class QLinearConv:
    """A convolution prepared for one Vulkan device: packed weights and requantization table
    uploaded once; `bind(x, y)` makes the pipeline over given activation buffers."""

    def __init__(self, s: ConvSpec, dev: Device, gemm: GemmConfig | None = None):
        """`gemm`: qlinear_gemm's tile and staging (default: gemm_tiles.gemm_config(dev))."""
        self.spec, self.dev = s, dev
        self.kernel = choose_kernel(s)
        self.gemm = None
        if self.kernel == "qlinear_gemm":  # the device's tile, or a narrower one where it would mostly pad
            self.gemm = gemm or fit_shape(gemm_config(dev), s.out_shape[2] * s.out_shape[3], ceil4(s.w.shape[0]))
        n, c, h, w = s.x.shape
        m, cg, kh, kw = s.w.shape
        _, _, oh, ow = s.out_shape
        self.in_shape, self.out_shape = s.x.shape, s.out_shape
        self.in_words, self.out_words = n * h * w * ceil4(c), n * oh * ow * ceil4(m)
        wb = as_bytes(s.w)  # raw bytes; signedness is a specialization constant
        sx, sw_ = s.x.dtype == np.int8, s.w.dtype == np.int8
        (sh, sww), (dh, dw), (pt, pl, _, _) = s.strides, s.dilations, s.pads
        c4, m4 = ceil4(c), ceil4(m)
        term = s.bias.astype(np.int64)
        if self.kernel in ("qlinear_gemm", "qlinear_gemv"):
            # B[m][k] words, zero padded; fold x_zp: term = bias - x_zp*sum_k w + K*x_zp*w_zp.
            packed = pad_last(wb.reshape(m, c), 4 * c4)
            packed = np.concatenate([packed, np.zeros((4 * m4 - m, 4 * c4), np.uint8)]).view(np.uint32)
            wsum = s.w.reshape(m, c).astype(np.int64).sum(axis=1)
            term = term - s.x_zp * wsum + c * s.x_zp * s.w_zp.astype(np.int64)
            rows = oh * ow
            if self.kernel == "qlinear_gemv":  # stride 1: row r is input pixel r
                self.spec_consts = [c4, m4, rows, h * w * c4, 0, sx, sw_, m, 0]
            else:
                self.spec_consts = [c4, m4, rows, h * w * c4, 0, ow, w, sh, sww, sx, sw_,
                                    int(np.any(s.w_zp != 0)), m, 0, *self.gemm.spec()]
        elif self.kernel.startswith("qlinear_dwconv"):
            # [C/4][kH][kW] words of 4 channels.
            b = np.zeros((4 * c4, kh, kw), np.uint8)
            b[:c] = wb.reshape(c, kh, kw)
            packed = np.ascontiguousarray(b.reshape(c4, 4, kh, kw).transpose(0, 2, 3, 1)).view(np.uint32)
            if self.kernel == "qlinear_dwconv3x3":
                self.spec_consts = [c4, h, w, oh, ow, c, sh, pt, pl, sx, sw_]
            else:
                self.spec_consts = [c4, h, w, oh, ow, c, kh, kw, sh, sww, dh, dw, pt, pl, sx, sw_]
        else:
            # [M/4][kH][kW][CG/4][4 output channels] words of 4 input channels; input channels past
            # the group padded with w_zp (cancels in the shader), padding output channels with 0.
            cg4 = 4 * ceil4(cg)
            b = np.zeros((4 * m4, kh, kw, cg4), np.uint8)
            zp_bytes = s.w_zp.astype(np.int64).astype(np.uint8)
            b[:m] = pad_last(np.ascontiguousarray(wb.transpose(0, 2, 3, 1)), cg4, zp_bytes[:, None, None])
            words = b.view(np.uint32).reshape(m4, 4, kh, kw, cg4 // 4)
            packed = np.ascontiguousarray(words.transpose(0, 2, 3, 4, 1))
            self.spec_consts = [c4, h, w, oh, ow, m, kh, kw, sh, sww, dh, dw, pt, pl, cg, m // s.group, sx, sw_]
        self.dot = uses_dot(dev, s, self.kernel)
        if self.dot and self.kernel == "qlinear_conv":
            # The dot variant sums raw x (padding taps read x_zp) against every packed weight lane, the group's
            # pad lanes (w_zp) included: term = bias - x_zp * sum(w) + taps * x_zp * w_zp (the shader subtracts
            # w_zp * sum(x)).
            lanes = packed.view(np.int8 if sw_ else np.uint8).reshape(m4, kh, kw, cg4 // 4, 4, 4)  # ..., j, lane
            per_channel = lanes.astype(np.int64).transpose(0, 4, 1, 2, 3, 5).reshape(4 * m4, -1).sum(axis=1)[:m]
            term = term - s.x_zp * per_channel + kh * kw * cg4 * s.x_zp * s.w_zp.astype(np.int64)
        self.groups = dispatch_groups(s, self.kernel, *([self.gemm.tile] if self.gemm else []))
        q = requant_table(term, s.w_zp, s.out.m, 4 * m4)
        self.push = [s.x_zp, s.out.zero_point, s.out.lo, s.out.hi]
        self.defines = kernel_defines(dev, self.dot, s.out.m)
        self.w_buf = _upload_const(dev, packed)
        self.q_buf = _upload_const(dev, q)

    def bind(self, x: Buffer, y: Buffer) -> Program:
        """The pipeline reading packed input `x` and writing packed output `y`."""
        if x.nbytes < 4 * self.in_words or y.nbytes < 4 * self.out_words:
            raise ValueError("activation buffer too small for this convolution")
        return self.dev.program(self.kernel, [x, self.w_buf, self.q_buf, y], self.groups,
                                self.spec_consts, self.push, self.defines)


#: The defines of the integer-dot-product shader variants (vkinfer/_glsl.py DEFINE_SETS lists them).
DOT_DEFINES = {"VK_DOT": 1}
#: The define of the float32 requantization variants (shaders/qcommon.glsl; every kernel of KERNELS has them).
FRQ_DEFINES = {"VK_FRQ": 1}


def float_rq_ok(m: np.ndarray) -> bool:
    """Whether multipliers `m` (float32) may be requantized in float32 on the GPU: each zero or a normal finite
    float32 (a device may flush a denormal multiplier to zero; the integer form handles every value)."""
    a = np.abs(np.asarray(m, np.float32))
    return bool(np.all((a == 0) | ((a >= np.finfo(np.float32).tiny) & np.isfinite(a))))


def kernel_defines(dev: Device, dot: bool, m: np.ndarray) -> dict | None:
    """The defines a convolution or matmul kernel is compiled with on `dev`: its dot variant (`dot`) and the float
    requantization where the device uses it (`Device.use_float_rq`) and `m` allows it (`float_rq_ok`)."""
    d = dict(DOT_DEFINES) if dot else {}
    if getattr(dev, "use_float_rq", False) and float_rq_ok(m):
        d.update(FRQ_DEFINES)
    return d or None


def _upload_const(dev: Device, a: np.ndarray) -> Buffer:
    """A device buffer holding `a`, uploaded once (weights, tables)."""
    buf = dev.buffer(a.nbytes, staged=True)
    buf.write(a)
    seq = dev.sequence()
    seq.upload(buf)
    seq.barrier()
    seq.run()
    return buf


# --- lowering (vkinfer/model/lowering.py) ---
from ..model.lowering import Layer, conv_spec_of, lower, qgemm_spec_of  # noqa: E402


def _layer(node, spec, backend):
    """The convolution layer of a spec (None: not this device's), built when first used. A dispatch past
    MIN_WORKGROUP_COUNT in any dimension is refused here, so the plan places the node on the CPU (the fuzzers'
    finding: a top pad of 65535 made 65541 rows of workgroups, and device="vulkan" refused a model the reference
    and the CPU run)."""
    if spec is None:
        return None
    kernel = choose_kernel(spec)
    groups = dispatch_groups(spec, kernel)
    if max(groups) > MIN_WORKGROUP_COUNT:
        raise ValueError(f"{kernel}: a dispatch of {groups} workgroups passes {MIN_WORKGROUP_COUNT}, the least "
                         "maxComputeWorkGroupCount Vulkan guarantees")
    # Past llvmpipe's loop limit one invocation would stop its sum early (_loops; a 1x1 conv over 270,000 channels
    # and a 32x32 kernel over 256 gave wrong bytes on lavapipe): refused, the plan places the node on the CPU.
    check_loops(kernel, conv_loop_iterations(spec, kernel))
    return Layer(node, [node.inputs[0]], node.outputs[0], make=lambda: QLinearConv(spec, backend.dev))


@lower("vulkan", "QLinearConv", "vkinfer:QLinearConvClamp")
def lower_conv(ctx, node, backend):
    return _layer(node, conv_spec_of(ctx, node), backend)


@lower("vulkan", "com.microsoft:QGemm", "vkinfer:QGemmClamp")
def lower_qgemm(ctx, node, backend):
    return _layer(node, qgemm_spec_of(ctx, node), backend)
