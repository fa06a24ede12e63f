"""float32 ReduceSum, ReduceMean, ReduceMax and ReduceMin in the native CPU graph with ONNX Runtime 1.31's bits
(cpu_fallback/src/ops/float_reduce.c), in the order ORT's CPU kernel takes for the shape (its plain loops, Eigen's and
MLAS's vectorised paths).

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
- KR (the reduced axes innermost), and R for sums: Eigen's redux of each contiguous row as ORT maps it in place
  (FastReduceKR; aggall's sum() / mean()): 4-lane packets from the row's first 16-byte aligned element, two
  accumulators, the head and tail folded in after -> reproduced, `init_first` = 3 (reference/float_reduce.py
  eigen_rows; measured against ORT on random shapes and +-0/NaN tables);
- KRK with several outer blocks (FastReduceKRK): for sums per block MLAS's M = 1 SGEMM of a vector of ones (rows
  in groups of 4, 2, 1 added from +0), for Max/Min Eigen's rowwise maxCoeff (packetwise over the output row's
  aligned packets, in order elsewhere) -> reproduced, `init_first` = 4 (reference/float_reduce.py mlas_m1_sum,
  eigen_krk);
- RKR with several kept elements (FastReduceRKR): per kept index, Eigen's redux of each contiguous run folded in
  turn (sums from 0.0f, Max/Min from the first element) -> reproduced, `init_first` = 5.
Measured bit-equal to ORT on random shapes and axes with +-0, NaN and infinities (900 cases; the tables are
tests/ops/test_float_reduce.py). With NaN, Eigen's packet orders can give a result far from the plain loops' (a
NaN lane drops the values folded before it), so no order is left to the host.

In the plain loops Max keeps the running value unless the next one is greater (Min: smaller), so the first of
+0/-0 wins, a NaN met first stays and one met later is skipped. With P > 1 ORT takes the RK path less often; the two
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
                         f"{sizes} with Eigen's or MLAS's vectorised reductions in an order vkinfer does not "
                         "reproduce (the host runs it)")
    if len(sizes) > _MAX_RANK or max(sizes) >= 2 ** 32:
        raise ValueError(f"{node.op}: merged shape {sizes} past the native graph's rank 6 (the host runs it)")
    mask = sum(1 << i for i, r in enumerate(red) if r)
    op, rank, sh = OPS[node.op], len(sizes), u32(sizes)

    def emit(g, refs, out, scratch):
        g.add("float_reduce", op, rank, sh, mask, loop, refs[0], out)
    return Layer(node, [x], y, emit)
