"""Reshapes and transposes of 8-bit tensors in the native CPU graph: aliases when the form's bytes stay in
place, else one or two permutations (form -> host order -> the output's form), and the channel shuffle of a
5-D transpose (0, 2, 1, 3, 4) as one permutation inside each pixel."""

from __future__ import annotations

import numpy as np

from ..layout import form_perm, same_bytes, u32, unform_perm
from ..model.lowering import (
    ALIAS_OPS,
    Layer,
    alias_ok,
    attrs_key,
    channel_perm,
    lower,
    memo,
    reshape_like,
    transpose_perm,
    value_key,
)


@lower("cpu", "Transpose")
def lower_channel_shuffle(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    if channel_perm(ctx, node) is None:
        return None
    n, a, b, h, w = ctx.shape(x)
    shape = u32([n * h * w, a, b])

    def emit(g, refs, out, scratch):
        g.add("transpose", 3, shape, u32([0, 2, 1]), 1, 0, refs[0], out)
    return Layer(node, [x], y, emit, move=((n, h, w, a, b), (0, 1, 2, 4, 3)))  # on the form (N, H, W, A, B)


@lower("cpu", *ALIAS_OPS, "Transpose")
def lower_reshape(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0] if node.outputs else ""
    if not reshape_like(ctx, node):
        return None
    xs, ys = ctx.shape(x), ctx.shape(y)
    if alias_ok(ctx, node, "cpu"):  # the one rule (vkinfer/layout.py): the same element order
        return Layer(node, [x], y, alias=True)
    nbytes = int(np.prod(xs))
    fx = [xs[p] for p in form_perm(xs)]
    unform = u32(unform_perm(xs))
    to_y = u32(form_perm(ys))
    both = not same_bytes(xs) and not same_bytes(ys)

    def emit(g, refs, out, scratch):
        mid = scratch if both else out
        if not same_bytes(xs):
            g.add("transpose", len(xs), u32(fx), unform, 1, 0, refs[0], mid)
        if not same_bytes(ys):
            g.add("transpose", len(ys), u32(ys), to_y, 1, 0, mid if both else refs[0], out)
    # cpu/segment.py's _move_of reads a one-transpose reshape as that transpose's move, to compose it with the
    # moves around it; a marker, not Layer.move, which edges would fold into their conversions (that broke
    # 1-D convolutions, b5c7b7a)
    emit.one_transpose_reshape = not both
    return Layer(node, [x], y, emit, scratch=nbytes if both else 0)


def _compose(p1, p2) -> tuple[int, ...]:
    """The permutation of a.transpose(p1).transpose(p2)."""
    return tuple(p1[i] for i in p2)


@lower("cpu", "Transpose")
def lower_transpose(ctx, node, backend):
    """Any transpose of an 8-bit tensor: one permutation from the input's form to the output's (an alias when
    only size-1 axes move), e.g. a TFLite model's NHWC input turned NCHW, which is the CPU form already."""
    x, y = node.inputs[0], node.outputs[0] if node.outputs else ""
    if not y or not ctx.quantized(x, y):
        return None
    # A pure function of the shapes, types and perm: once per distinct one (a chain's nodes repeat it; 45 us a node)
    ak = attrs_key(node)
    vk = None if ak is None else value_key(ctx, node.inputs + [y])
    form = memo(ctx, None if vk is None else ("transpose", ak, vk), lambda: _transpose_form(ctx, node))
    if form is None:
        return Layer(node, [x], y, alias=True)
    rank, shape, qq, move = form

    def emit(g, refs, out, scratch):
        g.add("transpose", rank, shape, qq, 1, 0, refs[0], out)
    return Layer(node, [x], y, emit, move=move)


def _transpose_form(ctx, node) -> tuple | None:
    """None where the transpose is an alias on the CPU, else (rank, form shape, permutation, move) of its one
    permutation from the input's form to the output's."""
    x, y = node.inputs[0], node.outputs[0]
    xs, ys = ctx.shape(x), ctx.shape(y)
    if alias_ok(ctx, node, "cpu"):  # the one rule (vkinfer/layout.py): only size-1 axes move in the form
        return None
    q = _compose(_compose(unform_perm(xs), transpose_perm(node, len(xs))), form_perm(ys))
    fx = [xs[p] for p in form_perm(xs)]
    return len(fx), u32(fx), u32(q), (tuple(fx), tuple(q))
