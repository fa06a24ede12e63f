"""The model's float edges in the native CPU graph, per tensor: ONNX QuantizeLinear (ORT's division), TFLite's
float QUANTIZE (a multiply by the float32 reciprocal) and DequantizeLinear (TFLite's DEQUANTIZE imports as it),
with the NCHW <-> NHWC move of 4-D tensors folded in. Per-axis parameters stay on the host."""

from __future__ import annotations

import numpy as np

from ..layout import PAD_BYTE, WORD_VALUES, is_8bit
from ..model.lowering import Layer, lower
from ..reference.quantize_linear import _params

# The packed form cpu_fallback/src/ops/quantize.c writes in its VKI_QUANT_PACKED mode (rows of values padded
# with zero bytes to whole 4-byte words; its 3-channel loops store a pixel as one word). vkinfer/layout.py defines
# the form: where the two part, the quantize writes the plain form and the segment packs it as layout says.
_C_PACKED_FORM = (4, 0)
_PACKS_AS_LAYOUT = (WORD_VALUES, PAD_BYTE) == _C_PACKED_FORM


def _per_tensor(ctx, node, x, dtype):
    """(scale, zero point) of a node with constant per-tensor parameters, else None."""
    ins = node.inputs
    if len(ins) < 2 or not all(ctx.const(n) for n in ins[1:3]) or not ins[1]:
        return None
    scale = np.asarray(ctx.g.consts[ins[1]])
    zp = ctx.g.consts[ins[2]] if len(ins) > 2 and ins[2] else None
    if scale.size != 1:
        return None
    s, z = _params(np.zeros((1,) * max(1, len(ctx.shape(x))), np.float32), scale, zp, 0, dtype)
    return float(np.float32(s)), int(z)


def _geometry(shape):
    """(n, c, hw, nchw) of the C operator: 4-D tensors move between NCHW and NHWC."""
    if len(shape) == 4:
        n, c, h, w = shape
        return n, c, h * w, 1
    return 1, 1, int(np.prod(shape)), 0


REFUSE_NAN = 4  # VKI_QUANT_REFUSE_NAN (vkinfer_graph.h)
PACKED = 8  # VKI_QUANT_PACKED: the output in the Vulkan device layout (rows padded to words, raw bytes)


@lower("cpu", "QuantizeLinear", "vkinfer:TFLiteQuantize")
def lower_quantize(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    if ctx.dtype(x) != np.float32 or not ctx.quantized(y) or len(ctx.shape(x)) == 5:
        return None
    if node.op == "vkinfer:TFLiteQuantize" and len(node.inputs) != 3:
        return None
    p = _per_tensor(ctx, node, x, ctx.dtype(y))
    if p is None:
        return None
    mode = 1 if node.op == "vkinfer:TFLiteQuantize" else 0
    with np.errstate(over="ignore", divide="ignore"):
        if mode == 1 and not np.isfinite(np.float32(1) / np.float32(p[0])):
            return None  # an infinite reciprocal: the C operator refuses it, the interpreter's kernel runs it
    n, c, hw, nchw = _geometry(ctx.shape(x))
    signed = int(ctx.dtype(y) == np.int8)

    # The references refuse NaN: the operator checks each span it quantizes (VKI_QUANT_REFUSE_NAN), the run
    # returns VKI_ENAN and the segment names the input (cpu/segment.py). A separate pass over MobileNetV2's
    # 224x224x3 input cost 20-38 us, 1.2-2.2% of its run.
    refuse = mode | REFUSE_NAN

    def emit(g, refs, out, scratch):
        g.add("quantize", refuse, n, c, hw, nchw, p[0], p[1], signed, refs[0], out)
    layer = Layer(node, [x], y, emit)
    # For a Vulkan segment: the device layout straight into its input buffer (NativePlan maps it there). The
    # 224x224x3 input: quantize 20 us + row pack 22 us -> 11 us (Zen 5, lavapipe).
    shape = ctx.shape(x)
    pc = (n, c, hw, 1) if nchw else (1, shape[-1] if shape else 1, int(np.prod(shape[:-1], dtype=np.int64)), 0)

    def packed(g, refs, out, scratch):
        g.add("quantize", refuse | PACKED, *pc, p[0], p[1], signed, refs[0], out)
    if pc[1] > 0 and pc[2] > 0 and _PACKS_AS_LAYOUT:
        layer.packed = packed
    if nchw:
        # The same values in the host's element order: a TFLite model's NHWC input, quantized and then
        # transposed to NCHW, is already in the CPU form that way (segment.py folds the Transpose into it).
        def plain(g, refs, out, scratch):
            g.add("quantize", refuse, 1, 1, n * c * hw, 0, p[0], p[1], signed, refs[0], out)
        layer.plain = plain
    return layer


@lower("cpu", "DequantizeLinear")
def lower_dequantize(ctx, node, backend):
    x, y = node.inputs[0], node.outputs[0]
    if not is_8bit(ctx.dtype(x)) or ctx.dtype(y) != np.float32 or len(ctx.shape(x)) == 5:
        return None
    p = _per_tensor(ctx, node, x, ctx.dtype(x))
    if p is None:
        return None
    n, c, hw, nchw = _geometry(ctx.shape(x))
    signed = int(ctx.dtype(x) == np.int8)

    def emit(g, refs, out, scratch):
        g.add("dequantize", n, c, hw, nchw, p[0], p[1], signed, refs[0], out)
    return Layer(node, [x], y, emit)
