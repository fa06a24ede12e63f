"""QLinearConv and QGemm (a 1x1 convolution over rows) in the native CPU graph."""

from __future__ import annotations

import numpy as np

from ..model.lowering import Layer, conv_spec_of, lower, qgemm_spec_of
from ..reference._spec import ConvSpec
from . import _Desc, _isa_index, _ptr, c_struct_values


def desc(*, n, h, w, c, m, kh, kw, strides, dilations, pads, groups, weights, w_zp, bias, scale, x_zp, x_dtype,
         out, isa) -> tuple[_Desc, list]:
    """The C descriptor with canonical zero points (int8 input and output: +128), and the arrays it points at
    (keep them alive until vki_graph_add_conv has packed them)."""
    x_shift = 128 if np.dtype(x_dtype) == np.int8 else 0
    y_shift = 128 if out.dtype == np.int8 else 0
    keep = [np.ascontiguousarray(weights).view(np.uint8), np.ascontiguousarray(w_zp, np.int32),
            np.ascontiguousarray(bias, np.int32), np.ascontiguousarray(scale, np.float32)]
    d = c_struct_values(_Desc, "convolution", (
        n, h, w, c, m, kh, kw, strides[0], strides[1], dilations[0], dilations[1], pads[0], pads[1], pads[2], pads[3],
        groups, _ptr(keep[0]), int(weights.dtype == np.int8), _ptr(keep[1]), _ptr(keep[2]), _ptr(keep[3]),
        x_zp + x_shift, out.zero_point + y_shift, out.lo + y_shift, out.hi + y_shift, _isa_index(isa)))
    return d, keep


def conv_desc(s: ConvSpec, isa: str | None) -> tuple[_Desc, list]:
    """`desc` of a validated QLinearConv spec."""
    n, c, h, w = s.x.shape
    m, _, kh, kw = s.w.shape
    return desc(n=n, h=h, w=w, c=c, m=m, kh=kh, kw=kw, strides=s.strides, dilations=s.dilations, pads=s.pads,
                groups=s.group, weights=s.w, w_zp=s.w_zp, bias=s.bias, scale=s.out.m, x_zp=s.x_zp,
                x_dtype=s.x.dtype, out=s.out, isa=isa)


def conv_emit(spec: ConvSpec, isa: str | None):
    def emit(g, ins, out, scratch):
        d, _keep = conv_desc(spec, isa)
        # the descriptor as an array over its own bytes (its address, `d` kept alive by it): the graph's packed
        # call takes arrays, where an address given as an int takes the direct ctypes call
        g.add("conv", np.frombuffer(d, np.uint8), ins[0], out)
    return emit


# The C convolution's indirection holds a pointer per tap of every output pixel (cpu_fallback/src/conv.c; past 64
# MiB it is built per tile at each run, so its memory is bounded). Past this many bytes of them, where the windows
# that read input (not only padding) would fit in it, the node runs on the host: the reference convolves those
# windows only and fills the rest with the bias, where the C layer computes every window. A fuzzed 1x8x8x8 input
# with a top pad of 2**24 asked for 9.6 GB of pointers (the reference answered in 2 s); a 224x224 3x3 layer takes
# 3.6 MB; a real batch of 2**20 (4.8 GB of them) stays native.
MAX_INDIRECTION_BYTES = 1 << 30
# conv.c's MAX_TAPS (its per-item pointer tiles live on the stack): a kernel of more taps runs on the host. The C
# layer refused it when the graph was built, so device="cpu" raised where the reference and Vulkan ran the model.
MAX_TAPS = 1024


def _padding_mostly(s: ConvSpec) -> bool:
    """Whether the indirection buffer is past MAX_INDIRECTION_BYTES, and the windows reading input are within it."""
    n, _, oh, ow = s.out_shape
    _, _, kh, kw = s.w.shape
    if n * oh * ow * kh * kw * 8 <= MAX_INDIRECTION_BYTES:
        return False
    from ..reference.qlinear_conv import touched  # (after the common case: an import statement is 1 us a node)

    h0, h1 = touched(s.x.shape[2], s.pads[0], kh, s.strides[0], s.dilations[0], oh)
    w0, w1 = touched(s.x.shape[3], s.pads[1], kw, s.strides[1], s.dilations[1], ow)
    return n * (h1 - h0) * (w1 - w0) * kh * kw * 8 <= MAX_INDIRECTION_BYTES


@lower("cpu", "QLinearConv", "vkinfer:QLinearConvClamp")
def lower_conv(ctx, node, backend):
    spec = conv_spec_of(ctx, node)
    if spec is not None and spec.w.shape[2] * spec.w.shape[3] > MAX_TAPS:
        raise ValueError(f"its {spec.w.shape[2]}x{spec.w.shape[3]} kernel has more than the native convolution's "
                         f"{MAX_TAPS} taps")
    if spec is not None and _padding_mostly(spec):
        raise ValueError(f"its indirection buffer would pass {MAX_INDIRECTION_BYTES} bytes for windows that mostly "
                         "read padding only (the host computes only those that read input)")
    return None if spec is None else Layer(node, [node.inputs[0]], node.outputs[0], conv_emit(spec, backend.variant))


@lower("cpu", "com.microsoft:QGemm", "vkinfer:QGemmClamp")
def lower_qgemm(ctx, node, backend):
    if node.op == "com.microsoft:QGemm" and (len(node.inputs) < 8 or not node.inputs[7]):  # a float output
        from .matmul_integer_to_float import lower_qgemm_float

        return lower_qgemm_float(ctx, node)
    spec = qgemm_spec_of(ctx, node)
    return None if spec is None else Layer(node, [node.inputs[0]], node.outputs[0], conv_emit(spec, backend.variant))
