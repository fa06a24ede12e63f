"""float32 Max and Min with ONNX Runtime 1.31's CPU bits, in numpy: the reference device's kernels and the
specification cpu_fallback/src/ops/float_binary.c follows for them.

ORT runs Eigen's max/min<PropagateNaN> over "spans", its broadcaster's innermost merged dimension
(`merged_broadcast`). Eigen's 4-lane packet path and its scalar path part on equal operands: a packet returns the
second operand (max(+0, -0) = -0), the scalar path the first; any NaN gives NaN on both. Which elements a packet
takes follows the output's 16-byte alignment (ORT's outputs are 64-byte aligned): in a span starting at output
element o, the elements before the first multiple of 4 and the tail after the last whole packet are scalar. When
input 0 is the scalar of a span, ORT computes input1.max(input0) (operands swapped). Three or more inputs fold
left, each step a two-input Max/Min of the running output (ORT's variadic broadcast); one input is copied.
"""

from __future__ import annotations

import numpy as np

F32 = np.float32


def merged_broadcast(out: tuple[int, ...], a: tuple[int, ...], b: tuple[int, ...]
                     ) -> tuple[list[int], list[int], list[int]]:
    """(out, a, b) shapes as ONNX Runtime's broadcaster iterates them: output dimensions of size 1 dropped and
    neighbours where each input is broadcast alike merged, so the last dimension is ORT's span; a 1-element output
    is one dimension of 1."""
    r = len(out)
    a = (1,) * (r - len(a)) + tuple(a)
    b = (1,) * (r - len(b)) + tuple(b)
    dims: list[list] = []
    for o, x, y in zip(out, a, b, strict=True):
        if o == 1:
            continue
        pat = (x == 1, y == 1)
        if dims and dims[-1][1] == pat:
            dims[-1][0] *= o
        else:
            dims.append([o, pat])
    if not dims:
        return [1], [1], [1]
    return ([d[0] for d in dims], [1 if d[1][0] else d[0] for d in dims], [1 if d[1][1] else d[0] for d in dims])


def ort_spans(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[list[int], list[int], list[int]]:
    """`merged_broadcast` of input shapes a and b with ORT's one exception: where its broadcaster starts (Init) on
    an output dimension of size 1 (every dimension the two shapes share is 1, or one input is a scalar and the
    other's last dimension is 1), its spans are one element long with input 0 the scalar of each, whatever the
    dimensions before; a trailing dimension of 1 says so. Measured against ORT 1.31: Max((6, 1), (1,)) of +0 and
    -0 gives the second operand for all 6 elements, not the packet path's first."""
    out = tuple(np.broadcast_shapes(tuple(a), tuple(b)))
    o, sa, sb = merged_broadcast(out, a, b)
    r = min(len(a), len(b))
    common = (a[-1:] if a else b[-1:]) if r == 0 else (*a[len(a) - r:], *b[len(b) - r:])
    if int(np.prod(out, dtype=np.int64)) > 1 and all(d <= 1 for d in common):
        return [*o, 1], [*sa, 1], [*sb, 1]
    return o, sa, sb


def max_min2(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ORT's two-input float32 Max or Min (module docstring)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != F32 or b.dtype != F32:
        raise TypeError(f"{op}: the float kernel takes float32 inputs, got {a.dtype} and {b.dtype}")
    shape = np.broadcast_shapes(a.shape, b.shape)
    out, sa, sb = ort_spans(a.shape, b.shape)
    n = int(np.prod(shape, dtype=np.int64))
    y = np.empty(n, F32)
    if n == 0:
        return y.reshape(shape)
    x = np.broadcast_to(a, shape).reshape(-1)
    w = np.broadcast_to(b, shape).reshape(-1)
    span = out[-1]
    if sa[-1] == 1:  # input 0 is the span's scalar: input1.max(input0) (a 1-element output too: ORT tests
        # input 0 first, so Min([+0], [-0]) is -0)
        x, w = w, x
    pos = np.arange(n, dtype=np.int64)
    start = pos - pos % span  # output offset of the element's span
    head = np.minimum((4 - start % 4) % 4, span)
    body = (span - head) // 4 * 4
    j = pos - start
    packet = (j >= head) & (j < head + body)
    with np.errstate(invalid="ignore"):
        if op == "Max":
            scalar = np.where(np.isnan(w), w, np.where(x < w, w, x))
            vec = np.where(np.isnan(x), x, np.where(x > w, x, w))
        else:
            scalar = np.where(np.isnan(w), w, np.where(w < x, w, x))
            vec = np.where(np.isnan(x), x, np.where(x < w, x, w))
    y[:] = np.where(packet, vec, scalar)
    return y.reshape(shape)


def kernel(node, x: list, memo: dict) -> list:
    """A float32 Max/Min node of one or more inputs (the interpreter's kernel)."""
    ins = [v for v in x if v is not None]
    if not ins:
        raise ValueError(f"{node.op} needs at least one input")
    if len(ins) == 1:
        v = np.asarray(ins[0])
        if v.dtype != F32:
            raise TypeError(f"{node.op}: the float kernel takes float32, got {v.dtype}")
        return [v.copy()]
    y = ins[0]
    for v in ins[1:]:
        y = max_min2(node.op, y, v)
    return [y]
