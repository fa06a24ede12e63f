"""TFLite's 8-bit MEAN over any axes on Vulkan (shaders/tflite_mean.comp) with XNNPACK's bits
(vkinfer/reference/tflite_mean.py): exact int32 sums, and the float32 scale, bias add and rounding emulated with
integers in the shader. Any axes set of a rank 1-6 tensor, read in place in the packed form (no transpose)."""

from __future__ import annotations

import numpy as np

from .._vk import Buffer, Device, Program
from ..layout import ceil4, form_perm, packed_words, rows_width
from ..reference import _qcheck as qc
from ..reference.tflite_mean import mean_lowering
from ._loops import check_loops, loop_cost, nested_iterations

_DIMS = 6  # the shader's K0..K5 and R0..R5


def packed_byte_strides(shape: tuple[int, ...]) -> list[int]:
    """The byte stride of each logical axis of `shape` in its Vulkan packed form (rows padded to whole words)."""
    perm = form_perm(shape)
    rows, width = rows_width(shape)
    padded = 4 * ceil4(width)
    st, acc = [0] * len(shape), 1
    for a in reversed(perm):
        st[a] = acc if acc < width else acc // width * padded
        acc *= int(shape[a])
    return st


def _merge(dims: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(size, stride) runs, outer to inner, without unit sizes and with contiguous neighbours merged."""
    out: list[tuple[int, int]] = []
    for n, s in dims:
        if n == 1:
            continue
        if out and out[-1][1] == n * s:
            out[-1] = (out[-1][0] * n, s)
        else:
            out.append((n, s))
    return out


def mean_geometry(x_shape, y_shape, axes, keep: bool) -> tuple[list[tuple[int, int]], list[tuple[int, int]], bool]:
    """(kept, reduced, vec): y's non-unit storage axes (size, x byte stride), the reduced axes' merged runs, and
    whether y's rows are x's rows byte for byte (then the reduced strides are in words)."""
    xst = packed_byte_strides(x_shape)
    x_of_y = list(range(len(x_shape))) if keep else [a for a in range(len(x_shape)) if a not in axes]
    kept = [(int(y_shape[a]), xst[x_of_y[a]]) for a in form_perm(y_shape) if y_shape[a] != 1]
    reduced = _merge([(int(x_shape[a]), xst[a]) for a in form_perm(x_shape) if a in axes])
    _, wy = rows_width(y_shape)
    _, wx = rows_width(x_shape)
    vec = wx == wy and _offsets(kept, wy) == list(range(wy))
    if vec:
        reduced = [(n, s // 4) for n, s in reduced]
    return kept, reduced, vec


def _offsets(kept: list[tuple[int, int]], count: int) -> list[int]:
    """x byte offsets of y indices 0..count-1 (the shader's base_of)."""
    out = []
    for L in range(count):
        b = 0
        for n, s in reversed(kept):
            b += (L % n) * s
            L //= n
        out.append(b)
    return out


_UNROLL = 16  # the shader's UNROLL: positions of the innermost reduced loop an iteration takes


def mean_loop_iterations(x_shape, y_shape, axes, keep: bool) -> int:
    """Loop iterations of one invocation of shaders/tflite_mean.comp (see _loops): the five outer reduced loops
    (unit ones included), the innermost one's unrolled and remainder loops at each entry, all once per byte of
    y's word unless VEC, and the byte loops."""
    _, reduced, vec = mean_geometry(x_shape, y_shape, axes, keep)
    trips = [1] * (_DIMS - len(reduced)) + [n for n, _ in reduced]
    entries = int(np.prod(trips[:-1], dtype=np.int64))
    inner = entries * (loop_cost(trips[-1] // _UNROLL) + loop_cost(trips[-1] % _UNROLL))
    _, wy = rows_width(y_shape)
    return (1 if vec else min(4, wy)) * (nested_iterations(trips[:-1]) + inner) + 2 * loop_cost(4)


class TFLiteMean:
    """Packed x of `x_shape` -> packed y of `y_shape`; `m`, `bias` the reference's float32 parameters."""

    def __init__(self, x_shape, y_shape, axes, keep: bool, signed: bool, m, bias, lo: int, hi: int,
                 dev: Device):
        self.dev = dev
        kept, reduced, vec = mean_geometry(x_shape, y_shape, axes, keep)
        if len(kept) > _DIMS or len(reduced) > _DIMS:
            raise ValueError(f"tflite_mean: {x_shape} over {axes} needs more than {_DIMS} strided axes")
        kept = [(1, 0)] * (_DIMS - len(kept)) + kept
        reduced = [(1, 0)] * (_DIMS - len(reduced)) + reduced
        _, wy = rows_width(y_shape)
        self.out_words = packed_words(y_shape)
        self.in_words = [packed_words(x_shape)]
        if 4 * max(self.in_words[0], self.out_words) >= 2**31:
            raise ValueError(f"tflite_mean: a tensor of shape {x_shape} is too large for the shader's int indices")
        self.spec = ([n for n, _ in kept] + [s for _, s in kept] + [n for n, _ in reduced] + [s for _, s in reduced]
                     + [wy, ceil4(wy), self.out_words, bool(signed), bool(vec)])
        self.push = [int(np.float32(m).view(np.int32)), int(np.float32(bias).view(np.int32)), int(lo), int(hi)]
        g = -(-self.out_words // 64)
        self.groups = (min(g, 65535), -(-g // 65535), 1)
        self.vec = vec

    def bind(self, ins: list[Buffer], y: Buffer) -> list[Program]:
        return [self.dev.program("tflite_mean", [ins[0], y], self.groups, self.spec, self.push)]


# --- lowering (vkinfer/model/lowering.py) ---
from ..model.lowering import Layer, lower  # noqa: E402


@lower("vulkan", "vkinfer:TFLiteMean")
def lower_tflite_mean(ctx, node, backend):
    geo = mean_lowering(ctx, node, _DIMS)
    if geo is None or not geo.y_shape:
        return None  # a rank-0 output has no device form
    x, y, dt = node.inputs[0], node.outputs[0], ctx.dtype(node.inputs[0])
    shape, y_shape, axes, keep, n, m, bias = geo
    lo, hi = qc.QRANGE[dt]
    # Past llvmpipe's loop limit the shader would sum a prefix (_loops): refused, the plan places it on the CPU.
    check_loops(f"tflite_mean over {n} values", mean_loop_iterations(shape, y_shape, axes, keep))
    return Layer(node, [x], y, make=lambda: TFLiteMean(shape, y_shape, axes, keep, dt == np.int8, m, bias, lo, hi,
                                                       backend.dev))
