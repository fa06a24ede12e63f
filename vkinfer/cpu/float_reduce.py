"""float32 ReduceSum, ReduceMean, ReduceMax and ReduceMin in the native CPU graph with ONNX Runtime 1.31's bits
(cpu_fallback/src/ops/float_reduce.c), where ORT's CPU kernel is a plain loop.

ORT (reduction_ops.cc) first merges neighbouring axes that are both reduced or both kept into its "fast shape"
(size-1 axes are not dropped: (1, 7, 7, 1024) over axes [1, 2] is K R K = [1, 49, 1024]) and names it: K, R, KR,
RK, KRK, RKR or none. Then, with the degree of parallelism P of its thread pool (1 for a session with one intra-op
thread, which is what vkinfer reproduces; tests/ops/test_float_reduce.py):

- RK with more than 16 P rows and more than 256 P rows or columns: the first row copied, each further row added
  in turn (ReduceMean then divides by (float)rows) -> reproduced, `init_first` = 1;
- RK otherwise, KRK with one outer block (fewer than max(2, P)), RKR with one kept element, and none (4 or more
  merged axes): the generic loop, one output at a time from 0.0f, its reduced elements in row-major order
  (ReduceMean: one division by (float)count) -> reproduced, `init_first` = 0 (so a column of -0 sums to +0);
- R (every axis) for ReduceMax/ReduceMin: Eigen's 4-lane maxCoeff/minCoeff (ORT's aggall), whose +-0 and NaN
  choices follow its packet order over ORT's 64-byte aligned buffer -> reproduced, `init_first` = 2
  (vkinfer/reference/float_reduce.py, probed against ORT at every position of +-0/NaN tables);
- KR, R for sums, KRK with several outer blocks, RKR with several kept elements: Eigen's vectorised
  reductions (sum(), colwise/rowwise maxCoeff) or MLAS's SGEMM against a vector of ones, whose summation order
  and NaN/+-0 choices follow the build's SIMD width and the data's alignment -> refused with that reason (the host
  runs them; measured against ORT: KR (300, 17), KRK (2, 49, 33) and (3, 130, 5) differ from both loops above).

Max keeps the running value unless the next one is greater (Min: smaller), so the first of +0/-0 wins, a NaN met
first stays and one met later is skipped, in both loops. With P > 1 ORT takes the RK path less often; the two
loops differ only in the sign of an all-zero column's sum (-0 against +0)."""

from __future__ import annotations

import numpy as np

from ..layout import u32
from ..model.lowering import Layer, lower
from ..reference.float_reduce import fast_shape, ort_loop, ort_order

__all__ = ["OPS", "fast_shape", "lower_float_reduce", "ort_loop", "reduce_axes"]

OPS = {"ReduceSum": 0, "ReduceMean": 1, "ReduceMax": 2, "ReduceMin": 3}
_F32 = np.dtype(np.float32)
_MAX_RANK = 6  # VKI_GRAPH_MAX_RANK


def reduce_axes(ctx, node) -> list[int] | None:
    """The node's reduced axes (normalised, sorted), [] for none, None when they are not constant."""
    rank = len(ctx.shape(node.inputs[0]))
    if len(node.inputs) > 1 and node.inputs[1]:
        if node.inputs[1] not in ctx.g.consts:
            return None
        axes = [int(a) for a in np.asarray(ctx.g.consts[node.inputs[1]]).reshape(-1)]
    else:
        axes = [int(a) for a in (node.attrs.get("axes") or [])]
    out = set()
    for a in axes:
        if not -rank <= a < rank:
            raise ValueError(f"{node.op}: axis {a} is out of range for rank {rank}")
        out.add(a % rank)
    return sorted(out)


@lower("cpu", *OPS)
def lower_float_reduce(ctx, node, backend):
    """A float32 reduction in an order vkinfer reproduces: one float_reduce (module docstring); others refused."""
    x, y = node.inputs[0], node.outputs[0]
    if not (x in ctx.info and y in ctx.info and ctx.dtype(x) == _F32 and ctx.dtype(y) == _F32):
        return None
    shape = tuple(int(s) for s in ctx.shape(x))
    axes = reduce_axes(ctx, node)
    if axes is None:
        raise ValueError(f"{node.op} with axes that are not constant (the host runs it)")
    if not shape or 0 in shape:
        return None  # a scalar or an empty tensor: the host
    if not axes:
        if int(node.attrs.get("noop_with_empty_axes", 0)):
            n = int(np.prod(shape)) * 4
            if n >= 2 ** 32:
                raise ValueError(f"{node.op}: {n} bytes, past the copy's 32-bit shape (the host runs it)")

            def copy(g, refs, out, scratch):  # ORT: a memcpy of the input
                g.add("transpose", 1, u32([n]), u32([0]), 1, 0, refs[0], out)
            return Layer(node, [x], y, copy)
        axes = list(range(len(shape)))
    sizes, red = fast_shape(shape, axes)
    loop = ort_order(node.op, sizes, red)
    if loop is None:
        kind = "".join("R" if r else "K" for r in red)
        raise ValueError(f"{node.op} of {list(shape)} over axes {axes}: ONNX Runtime reduces this {kind} shape "
                         f"{sizes} with Eigen's or MLAS's vectorised sums, whose order vkinfer does not reproduce "
                         "(the host runs it)")
    if len(sizes) > _MAX_RANK or max(sizes) >= 2 ** 32:
        raise ValueError(f"{node.op}: merged shape {sizes} past the native graph's rank 6 (the host runs it)")
    mask = sum(1 << i for i, r in enumerate(red) if r)
    op, rank, sh = OPS[node.op], len(sizes), u32(sizes)

    def emit(g, refs, out, scratch):
        g.add("float_reduce", op, rank, sh, mask, loop, refs[0], out)
    return Layer(node, [x], y, emit)
