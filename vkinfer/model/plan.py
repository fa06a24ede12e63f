"""Execution plans: a graph compiled once per input signature for the CPU or a Vulkan device.

The interpreter (`interpret`) runs every node on host numpy arrays in ONNX layout (NCHW). A plan
instead keeps activations in the backend's own form between the nodes that backend runs:
- Vulkan: packed device buffers (NHWC, 4 channels per 32-bit word; vkinfer/vulkan/_layout.py). All
  device nodes between two host nodes are recorded once into one command sequence (uploads, every
  dispatch with a barrier before it, downloads), so a model whose nodes all run on the device is one
  submit per inference. Buffers are assigned by lifetime: a buffer is reused once its last reader has run.
- CPU: NHWC numpy arrays for 4-D tensors, converted once at the edges instead of around every layer.
Nodes a backend does not run in its form (float ops, shape ops that move data, broadcasting adds...)
run on the host through the interpreter's kernels; the plan inserts the conversions.

Shapes come from one trace run of the interpreter (on the CPU) on zero inputs of the declared shapes (or,
when zeros are not valid input, on the first run's inputs), so every op's own shape rules apply and nothing
is guessed. The numerics are unchanged: every device op is bit-exact with the interpreter's kernel for the
same node (tests/test_plan.py).
"""

from __future__ import annotations

import dataclasses
from collections import ChainMap
from collections.abc import Callable

import numpy as np

from ..reference.qlinear_add import qlinear_add
from ..reference.qlinear_concat import qlinear_concat
from ..reference.qlinear_global_average_pool import qlinear_global_average_pool
from ..reference.qlinear_leaky_relu import qlinear_leaky_relu
from ..reference.qlinear_mul import qlinear_mul
from ..reference.qlinear_sigmoid import qlinear_sigmoid
from ..reference.requant import QRANGE
from .graph import Graph, Node
from .kernels import OPS, conv_node_spec, qgemm_node_spec

EIGHT_BIT = (np.dtype(np.uint8), np.dtype(np.int8))
ALIAS_OPS = ("Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze")


def interpret(g: Graph, values: dict[str, np.ndarray], device: str, nodes: list[Node] | None = None) -> None:
    """Run `nodes` (default: all) in order on host arrays, adding their outputs to `values`."""
    for node in g.nodes if nodes is None else nodes:
        args = [values[n] if n else None for n in node.inputs]
        try:
            outs = OPS[node.op](node, args, device)
        except (ValueError, TypeError) as e:
            raise type(e)(f"node {node.name} ({node.op}): {e}") from e
        for name, v in zip(node.outputs, outs, strict=False):
            if name:
                values[name] = v


def trace(g: Graph, feed: dict[str, np.ndarray]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """Shape and dtype of every tensor, from one CPU run of the interpreter on `feed`."""
    values: dict[str, np.ndarray] = dict(g.consts)
    values.update(feed)
    interpret(g, values, "cpu")
    return {k: (tuple(v.shape), v.dtype) for k, v in values.items() if isinstance(v, np.ndarray)}


def rows_width(shape: tuple[int, ...]) -> tuple[int, int]:
    from ..vulkan._layout import rows_width as rw

    return rw(shape)


@dataclasses.dataclass
class Layer:
    """A node the backend runs in its own form: `acts` are its activation inputs (in that form); `alias`
    layers only reinterpret their input (a reshape that keeps the packed bytes); `impl` is the backend's."""

    node: Node
    acts: list[str]
    out: str
    impl: object = None
    alias: bool = False


class _Ctx:
    """What a layer factory may look at: constants, traced shapes/dtypes."""

    def __init__(self, g: Graph, info: dict):
        self.g, self.info = g, info

    def const(self, name: str) -> bool:
        return not name or name in self.g.consts

    def shape(self, name: str) -> tuple[int, ...]:
        return self.info[name][0]

    def dtype(self, name: str) -> np.dtype:
        return self.info[name][1]

    def args(self, node: Node, acts: int = 1) -> list:
        """The node's input values for spec building: zeros for activations, constants for the rest."""
        out = []
        for i, n in enumerate(node.inputs):
            if not n:
                out.append(None)
            elif n in self.g.consts:
                out.append(self.g.consts[n])
            elif i < acts:
                out.append(np.zeros(self.shape(n), self.dtype(n)))
            else:
                raise ValueError("not constant")
        return out

    def quantized(self, *names: str) -> bool:
        return all(n in self.info and self.info[n][1] in EIGHT_BIT for n in names)


def _static(ctx: _Ctx, node: Node, acts: int) -> bool:
    return all(ctx.const(n) for n in node.inputs[acts:])


def _reshape_like(ctx: _Ctx, node: Node) -> bool:
    """A node that keeps the row-major order of a quantized tensor's elements: the reshape family, or a
    Transpose that only moves size-1 axes."""
    x, y = node.inputs[0], node.outputs[0] if node.outputs else ""
    if not x or not ctx.quantized(x, y):
        return False
    if node.op in ALIAS_OPS:
        return True
    if node.op == "Transpose":
        shape, perm = ctx.shape(x), node.attrs.get("perm")
        perm = list(range(len(shape)))[::-1] if perm is None else [int(p) for p in perm]
        moved = [p for p in perm if shape[p] != 1]
        return moved == sorted(moved)
    return False


def _alias_ok(ctx: _Ctx, node: Node) -> bool:
    """A reshape-like node whose input and output share one packed form: nothing to run."""
    return _reshape_like(ctx, node) and rows_width(ctx.shape(node.inputs[0])) == rows_width(ctx.shape(node.outputs[0]))


def _channel_concat_ok(ctx: _Ctx, node: Node, xs: list[str], axis: int) -> bool:
    rank = len(ctx.shape(xs[0]))
    axis = axis % rank if rank else 0
    return rank >= 1 and ctx.quantized(*xs, node.outputs[0]) and axis == (1 if rank == 4 else rank - 1)


def _binary_mode(ctx: _Ctx, node: Node) -> str | None:
    """How a QLinearAdd/Mul runs as a table lookup: "equal" shapes, "row" (b is one row of a's channels,
    broadcast), or None (the host runs it). The table is built on flat operands, where ONNX Runtime never
    swaps the operands, so broadcasts for which it would swap them stay on the host."""
    from ..reference.qlinear_add import _input0_is_scalar

    a, b, y = node.inputs[0], node.inputs[3], node.outputs[0]
    if not (ctx.quantized(a, b) and _static_params(ctx, node, (1, 2, 4, 5, 6, 7))):
        return None
    sa, sb = ctx.shape(a), ctx.shape(b)
    if ctx.shape(y) != sa or not sa or _input0_is_scalar(sa, sb):
        return None
    if sa == sb:
        return "equal"
    ch = 1 if len(sa) == 4 else len(sa) - 1
    row = tuple(sa[ch] if i == ch else 1 for i in range(len(sa)))
    if sb == row or (len(sa) < 4 and sb == (sa[-1],)):
        return "row"
    return None


def _channel_perm(ctx: _Ctx, node: Node) -> np.ndarray | None:
    """A Transpose that only permutes channels in the packed form (5-D (N, A, B, H, W) with perm
    (0, 2, 1, 3, 4)): output channel -> input channel, else None."""
    x = node.inputs[0]
    perm = tuple(int(p) for p in node.attrs.get("perm") or ())
    if not ctx.quantized(x) or len(ctx.shape(x)) != 5 or perm != (0, 2, 1, 3, 4):
        return None
    _, a, b, _, _ = ctx.shape(x)
    return np.arange(a * b).reshape(a, b).T.reshape(-1)


def _static_params(ctx: _Ctx, node: Node, idx) -> bool:
    return all(i >= len(node.inputs) or ctx.const(node.inputs[i]) for i in idx)


def _binary_fn(node: Node, consts: dict) -> Callable:
    """The reference of a QLinearAdd/Mul node as fn(a, b) over its constant parameters."""
    p = [consts.get(n) if n else None for n in node.inputs]
    if node.op == "vkinfer:TFLiteAdd":
        from ..reference.tflite_add import tflite_add

        lo, hi = node.attrs.get("activation_min"), node.attrs.get("activation_max")
        return lambda a, b: tflite_add(a, p[1], p[2], b, p[4], p[5], p[6], p[7], lo, hi)
    ref = qlinear_add if node.op.endswith("QLinearAdd") else qlinear_mul
    return lambda a, b: ref(a, p[1], p[2], b, p[4], p[5], p[6], p[7])


def _unary_fn(node: Node, consts: dict) -> Callable:
    p = [consts.get(n) if n else None for n in node.inputs]
    if node.op.endswith("QLinearSigmoid"):
        return lambda x: qlinear_sigmoid(x, *p[1:5])
    alpha = float(node.attrs.get("alpha", 0.01))
    return lambda x: qlinear_leaky_relu(x, *p[1:5], alpha=alpha)


def _concat_parts(ctx: _Ctx, node: Node) -> tuple[list[str], list, Callable | None] | None:
    """(activation inputs, per-input (scale, zp) or None, output (scale, zp)) of a (QLinear)Concat node."""
    if node.op == "Concat":
        return node.inputs, [None] * len(node.inputs), None
    if not _static_params(ctx, node, [0, 1] + [i for i in range(2, len(node.inputs)) if (i - 2) % 3]):
        return None
    c = ctx.g.consts
    xs = [node.inputs[i] for i in range(2, len(node.inputs), 3)]
    params = [(c[node.inputs[i + 1]], c[node.inputs[i + 2]]) for i in range(2, len(node.inputs), 3)]
    return xs, params, (c[node.inputs[0]], c[node.inputs[1]])


def _concat_table(dtype, p, y) -> np.ndarray | None:
    """The 256-byte requantization table of one QLinearConcat input (None: copied as is), from the reference."""
    if p is None:
        return None
    from ..vulkan.qlinear_lut import unary_table

    xs, xz = p
    if np.float32(xs) == np.float32(y[0]) and np.asarray(xz) == np.asarray(y[1]):
        return None
    return unary_table(dtype, lambda v: qlinear_concat(y[0], y[1], [(v, xs, xz)], axis=0))


# ---------------------------------------------------------------------------------------------------
# Backends: `layer(ctx, node)` returns a Layer (the node runs in the backend's form) or None (host).


class VulkanBackend:
    """Layers over packed device buffers (vkinfer/vulkan/)."""

    name = "vulkan"

    def __init__(self, dev):
        self.dev = dev

    def layer(self, ctx: _Ctx, node: Node) -> Layer | None:
        from .. import vulkan
        from ..vulkan.max_pool import MaxPool
        from ..vulkan.qlinear_concat import QLinearConcat
        from ..vulkan.qlinear_global_average_pool import QLinearGlobalAveragePool
        from ..vulkan.qlinear_lut import QLinearLut, binary_table, unary_table

        op, ins, out = node.op, node.inputs, node.outputs[0] if node.outputs else ""
        dev = self.dev
        if op in ("QLinearConv", "vkinfer:QLinearConvClamp") and _static(ctx, node, 1) and ctx.quantized(ins[0]):
            spec = conv_node_spec(node, ctx.args(node), node.attrs.get("activation"))
            return Layer(node, [ins[0]], out, vulkan.QLinearConv(spec, dev))
        if op in ("com.microsoft:QGemm", "vkinfer:QGemmClamp") and _static(ctx, node, 1) and ctx.quantized(ins[0]):
            if node.attrs.get("transA", 0) or len(ctx.shape(ins[0])) != 2:
                return None
            spec = qgemm_node_spec(node, ctx.args(node), node.attrs.get("activation"))
            return Layer(node, [ins[0]], out, vulkan.QLinearConv(spec, dev))
        if op == "QLinearMatMul" and _static(ctx, node, 1) and ctx.quantized(ins[0]):
            from ..ops._spec import matmul_spec

            spec = matmul_spec(*ctx.args(node)[:8])
            a_shape = ctx.shape(ins[0])
            if len(a_shape) > 3 or a_shape[:-2] != spec.out_shape[:-2]:
                return None  # A broadcast over B's batch: rows would not match the packed form
            return Layer(node, [ins[0]], out, vulkan.QLinearMatMul(spec, dev))
        if op in ("com.microsoft:QLinearAdd", "com.microsoft:QLinearMul", "vkinfer:TFLiteAdd") \
                and (mode := _binary_mode(ctx, node)):
            table = binary_table(ctx.dtype(ins[0]), _binary_fn(node, ctx.g.consts))
            return Layer(node, [ins[0], ins[3]], out, QLinearLut(table, ctx.shape(ins[0]), dev, mode == "row"))
        if op in ("com.microsoft:QLinearLeakyRelu", "com.microsoft:QLinearSigmoid") and ctx.quantized(ins[0]) \
                and _static_params(ctx, node, (1, 2, 3, 4)):
            table = unary_table(ctx.dtype(ins[0]), _unary_fn(node, ctx.g.consts))
            return Layer(node, [ins[0]], out, QLinearLut(table, ctx.shape(ins[0]), dev))
        if op == "com.microsoft:QLinearGlobalAveragePool" and ctx.quantized(ins[0]) and len(ctx.shape(ins[0])) == 4 \
                and not node.attrs.get("channels_last", 0) and _static_params(ctx, node, (1, 2, 3, 4)):
            c = ctx.g.consts
            dt = ctx.dtype(ins[0])
            lo, hi = QRANGE[dt]
            return Layer(node, [ins[0]], out, QLinearGlobalAveragePool(
                ctx.shape(ins[0]), dt, c[ins[1]], c[ins[2]] if ins[2:3] and ins[2] else 0, c[ins[3]],
                c[ins[4]] if ins[4:5] and ins[4] else 0, lo, hi, dev))
        if op == "MaxPool" and ctx.quantized(ins[0]) and len(ctx.shape(ins[0])) == 4 \
                and not node.attrs.get("storage_order", 0) and len(node.outputs) == 1:
            a = node.attrs
            k = tuple(int(v) for v in a["kernel_shape"])
            st = tuple(int(v) for v in a.get("strides") or (1, 1))
            di = tuple(int(v) for v in a.get("dilations") or (1, 1))
            pads = tuple(int(v) for v in a.get("pads") or (0, 0, 0, 0))
            if len(k) != 2 or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
                return None
            return Layer(node, [ins[0]], out, MaxPool(ctx.shape(ins[0]), ctx.shape(out), ctx.dtype(ins[0]), k, st, di,
                                                      pads, dev))
        if op == "vkinfer:TFLiteAveragePool" and ctx.quantized(ins[0]) and len(ctx.shape(ins[0])) == 4:
            from ..reference.requant import QRANGE as qr
            from ..vulkan.tflite_average_pool import TFLiteAveragePool

            a, dt = node.attrs, ctx.dtype(ins[0])
            k = tuple(int(v) for v in a["kernel_shape"])
            st = tuple(int(v) for v in a.get("strides") or (1, 1))
            pads = tuple(int(v) for v in a.get("pads") or (0, 0, 0, 0))
            lo = qr[dt][0] if a.get("activation_min") is None else int(a["activation_min"])
            hi = qr[dt][1] if a.get("activation_max") is None else int(a["activation_max"])
            return Layer(node, [ins[0]], out, TFLiteAveragePool(ctx.shape(ins[0]), ctx.shape(out), dt, k, st, pads,
                                                                lo, hi, dev))
        if op in ("Concat", "com.microsoft:QLinearConcat"):
            parts = _concat_parts(ctx, node)
            if parts is None or not _channel_concat_ok(ctx, node, parts[0], int(node.attrs["axis"])):
                return None
            xs, params, y = parts
            dt = ctx.dtype(xs[0])
            inputs = [(ctx.shape(x), _concat_table(dt, p, y)) for x, p in zip(xs, params, strict=True)]
            return Layer(node, xs, out, QLinearConcat(inputs, dev))
        if op == "Transpose" and (perm := _channel_perm(ctx, node)) is not None:
            from ..vulkan.channel_gather import ChannelGather

            return Layer(node, [ins[0]], out, ChannelGather(rows_width(ctx.shape(ins[0]))[0], perm, dev))
        if _alias_ok(ctx, node):
            return Layer(node, [ins[0]], out, alias=True)
        if _reshape_like(ctx, node):
            from ..vulkan.repack import Repack

            return Layer(node, [ins[0]], out, Repack(ctx.shape(ins[0]), ctx.shape(out), dev))
        return None


class CpuBackend:
    """Layers over NHWC numpy arrays (4-D tensors; other ranks keep their shape) on the C library."""

    name = "cpu"

    def __init__(self, variant: str | None):
        self.variant = variant

    @staticmethod
    def form_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
        """The array shape of the form: NHWC for 4-D, (N, H, W, A*B) for 5-D, else unchanged."""
        if len(shape) == 4:
            return shape[0], shape[2], shape[3], shape[1]
        if len(shape) == 5:
            return shape[0], shape[3], shape[4], shape[1] * shape[2]
        return shape

    @staticmethod
    def form(x: np.ndarray) -> np.ndarray:
        if x.ndim in (4, 5):
            return np.ascontiguousarray(np.moveaxis(x, (-2, -1), (1, 2))).reshape(CpuBackend.form_shape(x.shape))
        return x

    @staticmethod
    def unform(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        if len(shape) in (4, 5):
            n, h, w = shape[0], shape[-2], shape[-1]
            return np.ascontiguousarray(np.moveaxis(x.reshape(n, h, w, *shape[1:-2]), (1, 2), (-2, -1)))
        return x

    def _conv(self, spec, out_dtype) -> Callable:
        from .. import cpu

        conv = cpu.QLinearConv(spec, self.variant).conv
        signed_in, signed_out = spec.x.dtype == np.int8, out_dtype == np.int8

        def run(x):
            b = x.view(np.uint8)
            y = conv.run(b ^ np.uint8(0x80) if signed_in else np.ascontiguousarray(b))
            return y.view(np.int8) if signed_out else y  # the C output is already in the output's type
        return run

    def layer(self, ctx: _Ctx, node: Node) -> Layer | None:
        op, ins, out = node.op, node.inputs, node.outputs[0] if node.outputs else ""
        if op in ("QLinearConv", "vkinfer:QLinearConvClamp") and _static(ctx, node, 1) and ctx.quantized(ins[0]):
            spec = conv_node_spec(node, ctx.args(node), node.attrs.get("activation"))
            return Layer(node, [ins[0]], out, self._conv(spec, spec.out.dtype))
        if op in ("com.microsoft:QGemm", "vkinfer:QGemmClamp") and _static(ctx, node, 1) and ctx.quantized(ins[0]):
            if node.attrs.get("transA", 0) or len(ctx.shape(ins[0])) != 2:
                return None
            spec = qgemm_node_spec(node, ctx.args(node), node.attrs.get("activation"))
            run, (m, k), n = self._conv(spec, spec.out.dtype), ctx.shape(ins[0]), spec.w.shape[0]
            return Layer(node, [ins[0]], out, lambda a: run(a.reshape(m, 1, 1, k)).reshape(m, n))
        if op == "QLinearMatMul" and _static(ctx, node, 1) and ctx.quantized(ins[0]):
            from .. import cpu
            from ..ops._spec import matmul_spec

            spec = matmul_spec(*ctx.args(node)[:8])
            if len(ctx.shape(ins[0])) > 3 or ctx.shape(ins[0])[:-2] != spec.out_shape[:-2]:
                return None
            mm = cpu.QLinearMatMul(spec, self.variant)
            return Layer(node, [ins[0]], out, mm.run)
        if op == "com.microsoft:QLinearAdd" and _binary_mode(ctx, node) == "equal":
            from .. import cpu
            from ..reference import _qcheck as qc

            c, dt = ctx.g.consts, ctx.dtype(ins[0])
            zps = [qc.zero_point("zero_point", c[n], dt) if n else 0 for n in (ins[2], ins[5], ins[7])]
            scales = [qc.scale("scale", c[n]) for n in (ins[1], ins[4], ins[6])]
            add = cpu.prepare_qlinear_add(scales[0], zps[0], scales[1], zps[1], scales[2], zps[2], dt)
            return Layer(node, [ins[0], ins[3]], out, add)  # vectorised FMA in C: ORT's own arithmetic
        if op in ("com.microsoft:QLinearAdd", "com.microsoft:QLinearMul", "vkinfer:TFLiteAdd") \
                and _binary_mode(ctx, node):
            from .. import cpu
            from ..vulkan.qlinear_lut import binary_table

            table = binary_table(ctx.dtype(ins[0]), _binary_fn(node, ctx.g.consts))
            return Layer(node, [ins[0], ins[3]], out, lambda a, b: cpu.lut2(a, b.reshape(-1) if b.shape != a.shape
                                                                                else b, table))
        if op in ("com.microsoft:QLinearLeakyRelu", "com.microsoft:QLinearSigmoid") and ctx.quantized(ins[0]) \
                and _static_params(ctx, node, (1, 2, 3, 4)):
            from ..vulkan.qlinear_lut import unary_table

            table = unary_table(ctx.dtype(ins[0]), _unary_fn(node, ctx.g.consts)).view(ctx.dtype(ins[0]))
            return Layer(node, [ins[0]], out, lambda x: table[x.view(np.uint8)])
        if op == "com.microsoft:QLinearGlobalAveragePool" and ctx.quantized(ins[0]) and len(ctx.shape(ins[0])) == 4 \
                and not node.attrs.get("channels_last", 0) and _static_params(ctx, node, (1, 2, 3, 4)):
            p = [ctx.g.consts.get(n) if n else None for n in ins]
            return Layer(node, [ins[0]], out, lambda x: qlinear_global_average_pool(x, *p[1:5], channels_last=1))
        if op in ("Concat", "com.microsoft:QLinearConcat"):
            parts = _concat_parts(ctx, node)
            if parts is None or not _channel_concat_ok(ctx, node, parts[0], int(node.attrs["axis"])):
                return None
            xs, params, y = parts
            if y is None:
                return Layer(node, xs, out, lambda *v: np.concatenate(v, axis=-1))
            triples = params
            return Layer(node, xs, out, lambda *v: qlinear_concat(
                y[0], y[1], [(x, s, z) for x, (s, z) in zip(v, triples, strict=True)], axis=-1))
        if op == "Transpose" and (perm := _channel_perm(ctx, node)) is not None:
            return Layer(node, [ins[0]], out, lambda x: np.ascontiguousarray(x[..., perm]))
        if _alias_ok(ctx, node):
            oshape = CpuBackend.form_shape(ctx.shape(out))
            return Layer(node, [ins[0]], out, lambda x: x.reshape(oshape), alias=True)
        if _reshape_like(ctx, node):
            ishape, oshape = ctx.shape(ins[0]), ctx.shape(out)
            return Layer(node, [ins[0]], out,
                         lambda x: CpuBackend.form(CpuBackend.unform(x, ishape).reshape(oshape)))
        return None


# ---------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Step:
    kind: str  # "host" (node on host arrays), "dev" (Layer), "to_dev" / "to_host" (tensor conversion)
    node: Node | None = None
    layer: Layer | None = None
    tensor: str = ""
    fast: Callable | None = None  # host steps: the node with its constant parameters checked once


def _fast_host(g: Graph, node: Node) -> Callable | None:
    """The model's edges, QuantizeLinear / DequantizeLinear with constant parameters, with the parameter
    checks done once (the interpreter's kernels check them on every call; that dominated small models)."""
    from ..reference.quantize_linear import _params, quantize_values

    if node.op not in ("QuantizeLinear", "DequantizeLinear") or not all(
            not n or n in g.consts for n in node.inputs[1:]) or len(node.inputs) < 2:
        return None
    scale = g.consts[node.inputs[1]]
    zp = g.consts[node.inputs[2]] if len(node.inputs) > 2 and node.inputs[2] else None
    axis = int(node.attrs.get("axis", 1))
    x_name, y_name = node.inputs[0], node.outputs[0]
    dtype = np.dtype(zp.dtype) if zp is not None else np.dtype(np.uint8)
    if scale.size != 1 or dtype not in EIGHT_BIT:
        return None  # per-axis parameters: the interpreter's kernel
    try:
        s, z = _params(np.zeros(1, np.float32), scale, zp, axis, dtype)
    except (ValueError, TypeError):
        return None  # the interpreter's kernel reports it

    def quantize(values):
        x = values[x_name]
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or np.isnan(x).any():
            return interpret(g, values, "reference", [node])  # the kernel's own error
        values[y_name] = quantize_values(x, s, z, dtype)

    def dequantize(values):
        x = values[x_name]
        if x.dtype not in EIGHT_BIT or (zp is not None and x.dtype != dtype):
            return interpret(g, values, "reference", [node])
        values[y_name] = (x.astype(np.int32) - z).astype(np.float32) * s
    return quantize if node.op == "QuantizeLinear" else dequantize


class Plan:
    """A graph compiled for one input signature on one backend (module docstring)."""

    def __init__(self, g: Graph, feed: dict[str, np.ndarray], backend, host_device: str):
        self.g, self.backend, self.host_device = g, backend, host_device
        self.info = trace(g, feed)
        ctx = _Ctx(g, self.info)
        self.placement: dict[str, str] = {}
        self.why_host: dict[str, str] = {}
        steps: list[Step] = []
        on_dev: set[str] = set()  # tensors available in the backend's form
        on_host: set[str] = set(g.consts) | set(feed)
        for node in g.nodes:
            try:
                layer = backend.layer(ctx, node)
            except ValueError as e:  # e.g. a device limit: the node runs on the host instead
                layer, self.why_host[node.name] = None, str(e)
            if layer is not None:
                for t in dict.fromkeys(layer.acts):
                    if t not in on_dev:
                        steps.append(Step("to_dev", tensor=t))
                        on_dev.add(t)
                steps.append(Step("dev", layer=layer))
                on_dev.add(layer.out)
                self.placement[node.name] = backend.name
            else:
                for t in dict.fromkeys(i for i in node.inputs if i):
                    if t not in on_host:
                        steps.append(Step("to_host", tensor=t))
                        on_host.add(t)
                steps.append(Step("host", node=node, fast=_fast_host(g, node)))
                on_host.update(o for o in node.outputs if o)
                self.placement[node.name] = "host"
        for t in g.outputs:
            if t.name not in on_host:
                steps.append(Step("to_host", tensor=t.name))
                on_host.add(t.name)
        self.steps = steps
        self.segments = self._segments()
        self.runner = backend_runner(self)

    def _segments(self) -> list[list[Step]]:
        """Runs of steps with no host node in between: one command sequence each on Vulkan."""
        out, cur = [], []
        for s in self.steps:
            if s.kind == "host":
                if cur:
                    out.append(cur)
                out.append([s])
                cur = []
            else:
                cur.append(s)
        if cur:
            out.append(cur)
        return out

    @property
    def submits(self) -> int:
        """Device submissions per run (Vulkan: one per segment with device work)."""
        return sum(1 for seg in self.segments if seg[0].kind != "host")

    def run(self, feed: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        return self.runner.run(feed, names)


def _bind(impl, ins: list, y) -> list:
    """Programs of a Vulkan layer: convolutions and matmuls bind one input, the others a list."""
    from .. import vulkan

    if isinstance(impl, vulkan.QLinearConv | vulkan.QLinearMatMul):
        return [impl.bind(ins[0], y)]
    return impl.bind(ins, y)


def backend_runner(plan: Plan):
    return _VulkanRunner(plan) if isinstance(plan.backend, VulkanBackend) else _CpuRunner(plan)


class _CpuRunner:
    def __init__(self, plan: Plan):
        self.plan = plan
        # Constant operands (a quantized bias row, say) are put in the backend's form once.
        self.const_forms = {s.tensor: CpuBackend.form(plan.g.consts[s.tensor]) for s in plan.steps
                            if s.kind == "to_dev" and s.tensor in plan.g.consts}

    def run(self, feed, names):
        p, g = self.plan, self.plan.g
        host = ChainMap(dict(feed), g.consts)  # outputs go to the first map; the constants are not copied
        dev: dict[str, np.ndarray] = dict(self.const_forms)
        for s in p.steps:
            if s.kind == "host":
                if s.fast is not None:
                    s.fast(host)
                else:
                    interpret(g, host, p.host_device, [s.node])
            elif s.kind == "dev":
                dev[s.layer.out] = s.layer.impl(*[dev[t] for t in s.layer.acts])
            elif s.kind == "to_dev":
                if s.tensor not in self.const_forms:
                    dev[s.tensor] = CpuBackend.form(host[s.tensor])
            else:
                host[s.tensor] = CpuBackend.unform(dev[s.tensor], p.info[s.tensor][0])
        return [host[n] for n in names]


class _VulkanRunner:
    """Each device segment recorded once into a sequence over lifetime-planned buffers."""

    def __init__(self, plan: Plan):
        from ..vulkan._layout import packed_words, to_packed

        self.plan = plan
        dev = plan.backend.dev
        root: dict[str, str] = {}  # alias tensor -> the tensor whose buffer it shares
        for s in plan.steps:
            if s.kind == "dev" and s.layer.alias:
                root[s.layer.out] = root.get(s.layer.acts[0], s.layer.acts[0])

        def r(t):
            return root.get(t, t)
        # Constant operands get their own buffers, uploaded once; they take no part in the lifetime plan.
        consts = {s.tensor for s in plan.steps if s.kind == "to_dev" and s.tensor in plan.g.consts}
        self.const_bufs = {}
        for name in consts:
            b = dev.buffer(max(4, 4 * packed_words(plan.info[name][0])))
            b.write(to_packed(plan.g.consts[name]))
            seq = dev.sequence()
            seq.upload(b)
            seq.barrier()
            seq.run()
            self.const_bufs[name] = b
        # Timeline: per segment, uploads at one time, each dispatch at the next, downloads at the end.
        events: list[tuple[int, str, list[str], list[str]]] = []  # (time, kind, writes, reads)
        t = 0
        for seg in plan.segments:
            if seg[0].kind == "host":
                continue
            ups = [r(s.tensor) for s in seg if s.kind == "to_dev" and s.tensor not in consts]
            if ups:
                events.append((t, "up", ups, []))
                t += 1
            for s in seg:
                if s.kind == "dev" and not s.layer.alias:
                    events.append((t, "dev", [r(s.layer.out)], [r(a) for a in s.layer.acts]))
                    t += 1
            downs = [r(s.tensor) for s in seg if s.kind == "to_host"]
            if downs:
                events.append((t, "down", [], downs))
                t += 1
        last: dict[str, int] = {}
        staged: set[str] = set()
        for time, kind, writes, reads in events:
            for x in writes + reads:
                last[x] = time
            if kind in ("up", "down"):
                staged.update(writes + reads)
        # Greedy lifetime allocation: outputs take a free buffer (the smallest that fits, else the
        # largest, grown), inputs whose last use has passed give theirs back.
        sizes, slot_of, free, live = [], {}, [], {}
        need = {x: 4 * packed_words(plan.info[x][0]) for x in last}
        stag = []
        for time, _kind, writes, _reads in events:
            for x in writes:
                if x in slot_of:
                    continue
                fits = [b for b in free if sizes[b] >= need[x]]
                b = min(fits, key=lambda b: sizes[b]) if fits else (max(free, key=lambda b: sizes[b]) if free else None)
                if b is None:
                    sizes.append(need[x])
                    stag.append(False)
                    b = len(sizes) - 1
                else:
                    free.remove(b)
                    sizes[b] = max(sizes[b], need[x])
                slot_of[x] = b
                stag[b] = stag[b] or x in staged
                live[x] = b
            for x in [x for x in live if last[x] <= time]:
                free.append(live.pop(x))
        self.peak_bytes = sum(sizes)
        self.buffers = [dev.buffer(max(n, 4), staged=st) for n, st in zip(sizes, stag, strict=True)]

        def buf(x):
            return self.const_bufs[x] if x in self.const_bufs else self.buffers[slot_of[r(x)]]
        self.dev = dev
        self.segments = []  # ("host", node) or ("dev", sequence, uploads, downloads)
        for seg in plan.segments:
            if seg[0].kind == "host":
                self.segments.append(("host", seg[0]))
                continue
            ups = [(s.tensor, buf(s.tensor)) for s in seg if s.kind == "to_dev" and s.tensor not in consts]
            downs = [(s.tensor, buf(s.tensor), packed_words(plan.info[s.tensor][0]), *plan.info[s.tensor])
                     for s in seg if s.kind == "to_host"]
            seq = dev.sequence()
            seq.barrier()  # the previous run's (or segment's) reads finish before we overwrite
            if ups:
                seq.upload(*dict.fromkeys(b for _, b in ups))
            for s in seg:
                if s.kind == "dev" and not s.layer.alias:
                    for prog in _bind(s.layer.impl, [buf(a) for a in s.layer.acts], buf(s.layer.out)):
                        seq.barrier()
                        seq.dispatch(prog)
            seq.barrier()
            if downs:
                seq.download(*dict.fromkeys(b for _, b, *_ in downs))
                seq.barrier()
            self.segments.append(("dev", seq, ups, downs))

    def run(self, feed, names):
        from ..vulkan._layout import from_packed, to_packed

        p, g = self.plan, self.plan.g
        host = ChainMap(dict(feed), g.consts)  # outputs go to the first map; the constants are not copied
        with self.dev.lock:  # the planned buffers are shared by every caller of this plan
            for item in self.segments:
                if item[0] == "host":
                    if item[1].fast is not None:
                        item[1].fast(host)
                    else:
                        interpret(g, host, p.host_device, [item[1].node])
                    continue
                _, seq, ups, downs = item
                for name, b in ups:
                    b.write(to_packed(host[name]))
                seq.run()
                for name, b, words, shape, dtype in downs:
                    host[name] = from_packed(b.read(np.uint32, words), shape, dtype)
        return [host[n] for n in names]
