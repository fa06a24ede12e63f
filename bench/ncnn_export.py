"""Write a float ONNX CNN (vkinfer.testing.zoo's builders) as an ncnn model, float and int8, and time it in ncnn.

    .venv/bin/python bench/ncnn_export.py --model mobilenet_v2 --out DIR [--int8] [--calib N] [--method max|kl]
                                          [--width W] [--size S] [--num-classes K] [--onnx FILE.onnx] [--time]

writes DIR/NAME.param + DIR/NAME.bin (float) and, with --int8, DIR/NAME-int8.param + DIR/NAME-int8.bin, and
prints the paths (--time: also ncnn_time on the CPU, 1 thread, and on the first Vulkan device). NAME is the zoo
builder's name (mobilenet_v2 with its defaults is MobileNetV2 1.0/224, 1000 classes) or the --onnx file's stem.
For other scripts: ``export(onnx_model, out_dir, name, int8, calib)`` and ``ncnn_time(param, bin, x, vulkan,
threads, repeat)``.

Formats (ncnn's text .param and its .bin, https://github.com/Tencent/ncnn/wiki/param-and-model-file-structure):
- .param: the magic 7767517, "layer_count blob_count", then per layer "Type name n_in n_out in... out... k=v"
  (an array parameter as -233xx=n,v1,...,vn with xx its id). A blob read by several layers goes through a Split
  layer (one copy per reader, as ncnn's converters write it): ncnn frees a blob after its one consumer runs.
- .bin, per layer in order, each as its load_model reads it: a weight (ModelBin type 0) is a 4-byte tag then the
  data: tag 0 and float32 values (float export), or the int8 tag 0x000D4B38 and int8 values padded to 4 bytes
  (int8 export); biases and scales (type 1) are raw float32.
- Ops: Conv -> Convolution (group 1) or ConvolutionDepthWise (7=group), pads as 4/14/15/16 (left/top/right/bottom),
  with a following Relu / Clip(min, max) that is the Conv's only reader fused as activation_type 1 / 3;
  Gemm (alpha/beta folded, transB either way) and MatMul (+ a constant Add: the bias) -> InnerProduct, the same
  activation fusion; Add of two tensors -> BinaryOp 0=0; Relu -> ReLU, Clip -> Clip; GlobalAveragePool ->
  Pooling 0=1 4=1 (a 1-D blob of the channels); MaxPool (floor) -> Pooling 0=0 5=1; Flatten -> Flatten; a
  channel shuffle Reshape(1,g,c/g,h,w) -> Transpose(0,2,1,3,4) -> Reshape(1,c,h,w) -> ShuffleChannel 0=g; other
  Reshape -> Reshape (0=w 1=h 2=c); Concat -> Concat; Softmax -> Softmax (1=1, ncnn's fixed axis semantics). The
  batch dimension (1) is dropped, so ncnn axes are ONNX's minus one. Any other op (or an unsupported form of
  these) is a ValueError naming it.

int8 (ncnn's own scheme, what ncnn2table + ncnn2int8 write):
- weight_data_int8_scales = 127 / absmax per output channel (Convolution, InnerProduct) or per group
  (ConvolutionDepthWise); 31 / absmax (6-bit) for 3x3 stride-1 dilation-1 Convolution, as ncnn2table does for
  ncnn's int8 Winograd F(4,3); a zero channel gets scale 1. The weights are stored already quantized:
  round-half-away(w * scale) clamped to [-127, 127], with the int8 tag.
- bottom_blob_int8_scales: one per layer, from the float activations of its input on the calibration inputs
  (computed with ONNX Runtime on the float model). method "max" (default): 127 / absmax. "kl": ncnn2table's
  default KL method re-done here (2048-bin histogram of |x| without zeros, thresholds 128..2047, the KL divergence
  of the clipped distribution against its 128-level quantization, threshold (t + 0.5) * absmax / 2048).
- int8_scale_term: 2 for Convolution and InnerProduct (num_output weight scales + 1 input scale), 1 for
  ConvolutionDepthWise (group weight scales + 1 input scale), as ncnn2int8 sets them.
- requantize fusion (ncnn2int8's fuse_requantize): a Convolution / ConvolutionDepthWise whose output is read only
  by an int8 Convolution / ConvolutionDepthWise (directly, or through a Split all of whose outputs are) gets
  int8_scale_term + 100 and top_blob_int8_scales = that reader's input scale: it writes int8 and the next layer
  skips its quantize. Everything else (BinaryOp, Pooling, Softmax, ...) stays float, as in ncnn.
Non-int8 layers keep float32 weights (ncnn2int8 itself writes those as float16; none of the zoo's has any).

Seen with ncnn 1.0.20261020 (tests/benchmarks/test_ncnn_export.py): with the unpacked kernels
(opt.use_packing_layout off) ncnn's int8 output is exactly the integer arithmetic the stored weights and scales
define; the packed x86 depthwise kernel dequantizes with an approximate reciprocal (a few 1e-4 relative); the packed
x86 int8 grouped (not depthwise) convolution is wrong when a group has 8k output channels (shufflenet_like; run it
with use_packing_layout off); an int8 net asked for Vulkan stays on Vulkan. """

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

MAGIC = 7767517
INT8_TAG = 0x000D4B38  # ModelBin: int8 weight data follows
FLOAT_TAG = 0  # ModelBin: raw float32 follows
ACT_RELU, ACT_CLIP = 1, 3  # ncnn activation_type
FLT_MAX = 3.4028234663852886e38
CONV_TYPES = ("Convolution", "ConvolutionDepthWise")
INT8_TYPES = (*CONV_TYPES, "InnerProduct")


@dataclass
class Layer:
    """One ncnn layer: its .param line and what its load_model reads (filled in by `_quantize` for int8)."""

    type: str
    name: str
    bottoms: list[str]
    tops: list[str]
    params: dict[int, int | float | list[float]] = field(default_factory=dict)
    weight: np.ndarray | None = None  # float32 (O, ...) in ncnn's order; ModelBin type 0
    bias: np.ndarray | None = None
    src: str = ""  # the ONNX tensor the layer's first input is (before Split renaming): what calibration reads
    weight_int8: np.ndarray | None = None
    weight_scales: np.ndarray | None = None
    bottom_scale: float | None = None
    top_scale: float | None = None


def _clean(name: str) -> str:
    """ncnn reads names with %255s: no whitespace."""
    s = "_".join(name.split()) or "blob"
    return s[:255]


class _Converter:
    def __init__(self, model: onnx.ModelProto) -> None:
        model = onnx.shape_inference.infer_shapes(model)
        g = model.graph
        self.g = g
        self.consts: dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in g.initializer}
        for n in g.node:  # Constant nodes as initializers
            if n.op_type == "Constant":
                [a] = [a for a in n.attribute if a.name == "value"] or [None]
                if a is None:
                    raise ValueError(f"unsupported op Constant (node {n.name!r}) without a tensor 'value'")
                self.consts[n.output[0]] = numpy_helper.to_array(a.t)
        self.nodes = [n for n in g.node if n.op_type != "Constant"]
        self.shapes: dict[str, list[int]] = {}
        for vi in [*g.input, *g.value_info, *g.output]:
            dims = vi.type.tensor_type.shape.dim
            self.shapes[vi.name] = [d.dim_value if d.HasField("dim_value") else -1 for d in dims]
        self.inputs = [i.name for i in g.input if i.name not in self.consts]
        self.outputs = [o.name for o in g.output]
        self.readers: dict[str, list[int]] = {}
        for k, n in enumerate(self.nodes):
            for i in n.input:
                if i and i not in self.consts:
                    self.readers.setdefault(i, []).append(k)
        first = [self.shapes.get(i, []) for i in self.inputs]
        if not self.inputs:
            raise ValueError("the model has no (non-initializer) input")
        self.drop = all(s and s[0] == 1 for s in first)  # the batch dimension, dropped in ncnn
        for name, s in zip(self.inputs, first, strict=True):
            if not s or any(d <= 0 for d in s):
                raise ValueError(f"input {name!r} needs a static shape, has {s}")
            if not self.drop and len(s) != 2:
                raise ValueError(f"input {name!r} of shape {s}: ncnn runs one image (batch 1); only a 2-D "
                                 f"(rows, features) input may have another first dimension")
        self.layers: list[Layer] = []
        self.done: set[int] = set()
        self.rank: dict[str, int] = {}  # ncnn dims of each produced blob

    # ---- helpers
    def attrs(self, n: onnx.NodeProto) -> dict:
        return {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}

    def nrank(self, t: str) -> int:
        if t in self.rank:
            return self.rank[t]
        return len(self.shapes.get(t, [])) - int(self.drop)

    def sole_reader(self, t: str) -> int | None:
        """The index of the one node reading `t`, where it has exactly one and is not a graph output."""
        r = self.readers.get(t, [])
        if len(r) != 1 or t in self.outputs or r[0] in self.done:
            return None
        return r[0]

    def const(self, n: onnx.NodeProto, i: int, what: str) -> np.ndarray:
        if len(n.input) <= i or n.input[i] not in self.consts:
            raise ValueError(f"unsupported {n.op_type} (node {n.name!r}): its {what} must be a constant")
        return self.consts[n.input[i]]

    def fuse_activation(self, out: str, params: dict) -> str:
        """Fold a Relu or Clip that is the only reader of `out` into `params` (9/10); the tensor that is now the
        layer's output."""
        k = self.sole_reader(out)
        if k is None:
            return out
        n = self.nodes[k]
        if n.op_type == "Relu":
            params[9] = ACT_RELU
        elif n.op_type == "Clip":
            lo, hi = self.clip_bounds(n)
            params[9] = ACT_CLIP
            params[10] = [lo, hi]
        else:
            return out
        self.done.add(k)
        return n.output[0]

    def clip_bounds(self, n: onnx.NodeProto) -> tuple[float, float]:
        a = self.attrs(n)
        lo, hi = float(a.get("min", -FLT_MAX)), float(a.get("max", FLT_MAX))
        for i, which in ((1, "lo"), (2, "hi")):
            if len(n.input) > i and n.input[i]:
                v = float(self.const(n, i, "min/max").reshape(()))
                lo, hi = (v, hi) if which == "lo" else (lo, v)
        return max(lo, -FLT_MAX), min(hi, FLT_MAX)

    def add(self, layer: Layer) -> None:
        self.layers.append(layer)
        for t in layer.tops:
            self.rank.setdefault(t, self.nrank(t))

    # ---- ops
    def convert(self) -> list[Layer]:
        for name in self.inputs:
            s = self.shapes[name][1:] if self.drop else self.shapes[name]
            params = {i: int(v) for i, v in enumerate(reversed(s))}  # 0=w 1=h 2=c
            self.add(Layer("Input", _clean(name), [], [name], params))
            self.rank[name] = len(s)
        for k, n in enumerate(self.nodes):
            if k in self.done:
                continue
            self.done.add(k)
            handler = getattr(self, f"op_{n.op_type}", None)
            if handler is None or n.domain not in ("", "ai.onnx"):
                raise ValueError(f"unsupported ONNX op {n.op_type} (node {n.name!r}): the ncnn exporter handles "
                                 f"{', '.join(sorted(OPS))}")
            handler(n)
        return self.layers

    def op_Conv(self, n: onnx.NodeProto) -> None:
        a = self.attrs(n)
        w = self.const(n, 1, "weight").astype(np.float32)
        if w.ndim != 4:
            raise ValueError(f"unsupported Conv (node {n.name!r}): only 2-D convolutions, weight {w.shape}")
        if a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET"):
            raise ValueError(f"unsupported Conv (node {n.name!r}): auto_pad {a['auto_pad']!r}")
        if self.nrank(n.input[0]) != 3:
            raise ValueError(f"unsupported Conv (node {n.name!r}): its input is a {self.nrank(n.input[0])}-D ncnn "
                             f"blob, not (c, h, w)")
        b = self.const(n, 2, "bias").astype(np.float32) if len(n.input) > 2 and n.input[2] else None
        cout, _, kh, kw = w.shape
        group = int(a.get("group", 1))
        sh, sw = a.get("strides", [1, 1])
        dh, dw = a.get("dilations", [1, 1])
        pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
        p: dict = {0: cout, 1: kw, 11: kh, 2: dw, 12: dh, 3: sw, 13: sh, 4: pl, 14: pt, 15: pr, 16: pb,
                   5: int(b is not None), 6: int(w.size)}
        kind = "Convolution"
        if group != 1:
            kind = "ConvolutionDepthWise"
            p[7] = group
        top = self.fuse_activation(n.output[0], p)
        self.add(Layer(kind, _clean(n.name or top), [n.input[0]], [top], p, w, b, src=n.input[0]))

    def _inner_product(self, n: onnx.NodeProto, w: np.ndarray, b: np.ndarray | None, out: str) -> None:
        """InnerProduct with weight (num_output, num_input)."""
        x = n.input[0]
        if len(self.shapes.get(x, [])) != 2:
            raise ValueError(f"unsupported {n.op_type} (node {n.name!r}): input of shape {self.shapes.get(x)}, "
                             f"only 2-D (rows, features)")
        p: dict = {0: int(w.shape[0]), 1: int(b is not None), 2: int(w.size)}
        top = self.fuse_activation(out, p)
        self.add(Layer("InnerProduct", _clean(n.name or top), [x], [top], p, np.ascontiguousarray(w, np.float32),
                       None if b is None else np.ascontiguousarray(b, np.float32).reshape(-1), src=x))

    def op_Gemm(self, n: onnx.NodeProto) -> None:
        a = self.attrs(n)
        if a.get("transA", 0):
            raise ValueError(f"unsupported Gemm (node {n.name!r}): transA=1")
        w = self.const(n, 1, "B").astype(np.float32) * np.float32(a.get("alpha", 1.0))
        w = w if a.get("transB", 0) else w.T
        b = None
        if len(n.input) > 2 and n.input[2]:
            c = self.const(n, 2, "C").astype(np.float32) * np.float32(a.get("beta", 1.0))
            if c.size not in (1, w.shape[0]) or (c.ndim == 2 and c.shape[0] != 1):
                raise ValueError(f"unsupported Gemm (node {n.name!r}): C of shape {c.shape} is not a bias")
            b = np.broadcast_to(c.reshape(-1), (w.shape[0],))
        self._inner_product(n, w, b, n.output[0])

    def op_MatMul(self, n: onnx.NodeProto) -> None:
        w = self.const(n, 1, "second operand").astype(np.float32)
        if w.ndim != 2:
            raise ValueError(f"unsupported MatMul (node {n.name!r}): weight of shape {w.shape}")
        out, b = n.output[0], None
        k = self.sole_reader(out)
        if k is not None and self.nodes[k].op_type == "Add":
            add = self.nodes[k]
            other = add.input[1] if add.input[0] == out else add.input[0]
            if other in self.consts and self.consts[other].size == w.shape[1]:
                b = self.consts[other].astype(np.float32).reshape(-1)
                self.done.add(k)
                out = add.output[0]
        self._inner_product(n, w.T, b, out)

    def op_Add(self, n: onnx.NodeProto) -> None:
        x, y = n.input
        if x in self.consts or y in self.consts:
            raise ValueError(f"unsupported Add (node {n.name!r}) with a constant operand (only two tensors, or a "
                             f"MatMul's bias)")
        if self.shapes.get(x) != self.shapes.get(y):
            raise ValueError(f"unsupported Add (node {n.name!r}) with broadcasting {self.shapes.get(x)} + "
                             f"{self.shapes.get(y)}")
        self.add(Layer("BinaryOp", _clean(n.name or n.output[0]), [x, y], [n.output[0]], {0: 0}))

    def op_Relu(self, n: onnx.NodeProto) -> None:
        self.add(Layer("ReLU", _clean(n.name or n.output[0]), [n.input[0]], [n.output[0]]))

    def op_Clip(self, n: onnx.NodeProto) -> None:
        lo, hi = self.clip_bounds(n)
        self.add(Layer("Clip", _clean(n.name or n.output[0]), [n.input[0]], [n.output[0]], {0: lo, 1: hi}))

    def op_GlobalAveragePool(self, n: onnx.NodeProto) -> None:
        if self.nrank(n.input[0]) != 3:
            raise ValueError(f"unsupported GlobalAveragePool (node {n.name!r}): input is not (c, h, w)")
        self.add(Layer("Pooling", _clean(n.name or n.output[0]), [n.input[0]], [n.output[0]], {0: 1, 4: 1}))
        self.rank[n.output[0]] = 1  # ncnn's global pooling gives a 1-D blob of the channels

    def op_MaxPool(self, n: onnx.NodeProto) -> None:
        a = self.attrs(n)
        ks = a["kernel_shape"]
        if len(ks) != 2 or a.get("ceil_mode", 0) or any(d != 1 for d in a.get("dilations", [1, 1])) \
                or a.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET") or len(n.output) > 1:
            raise ValueError(f"unsupported MaxPool (node {n.name!r}): only 2-D, floor mode, explicit pads, "
                             f"no dilation or indices")
        sh, sw = a.get("strides", [1, 1])
        pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
        p = {0: 0, 1: ks[1], 11: ks[0], 2: sw, 12: sh, 3: pl, 13: pt, 14: pr, 15: pb, 5: 1}
        self.add(Layer("Pooling", _clean(n.name or n.output[0]), [n.input[0]], [n.output[0]], p))

    def op_Flatten(self, n: onnx.NodeProto) -> None:
        if int(self.attrs(n).get("axis", 1)) != 1 or not self.drop:
            raise ValueError(f"unsupported Flatten (node {n.name!r}): only axis 1 of a batch-1 tensor")
        self.add(Layer("Flatten", _clean(n.name or n.output[0]), [n.input[0]], [n.output[0]]))
        self.rank[n.output[0]] = 1

    def _shuffle(self, n: onnx.NodeProto) -> int | None:
        """The group count where `n` starts Reshape(1,g,c/g,h,w) -> Transpose(0,2,1,3,4) -> Reshape(1,c,h,w)."""
        s5 = self.consts.get(n.input[1]) if len(n.input) > 1 else None
        ins = self.shapes.get(n.input[0], [])
        if s5 is None or s5.size != 5 or len(ins) != 4 or ins[0] != 1:
            return None
        k = self.sole_reader(n.output[0])
        if k is None or self.nodes[k].op_type != "Transpose" or \
                list(self.attrs(self.nodes[k]).get("perm", [])) != [0, 2, 1, 3, 4]:
            return None
        k2 = self.sole_reader(self.nodes[k].output[0])
        if k2 is None or self.nodes[k2].op_type != "Reshape" or self.shapes.get(self.nodes[k2].output[0]) != ins:
            return None
        g = int(s5[1])
        if list(s5) != [1, g, ins[1] // g, ins[2], ins[3]] and list(s5) != [ins[0], g, -1, ins[2], ins[3]]:
            return None
        self.done.update((k, k2))
        return g

    def op_Reshape(self, n: onnx.NodeProto) -> None:
        g = self._shuffle(n)
        if g is not None:
            last = self.nodes[self.readers[self.nodes[self.readers[n.output[0]][0]].output[0]][0]]
            self.add(Layer("ShuffleChannel", _clean(n.name or last.output[0]), [n.input[0]], [last.output[0]],
                           {0: g, 1: 0}))
            return
        out = self.shapes.get(n.output[0], [])
        if not out or any(d <= 0 for d in out) or (self.drop and out[0] != 1) or len(out) - self.drop > 3:
            raise ValueError(f"unsupported Reshape (node {n.name!r}) to {out}: needs a static batch-1 shape of at "
                             f"most 3 dims after the batch")
        s = out[1:] if self.drop else out
        self.add(Layer("Reshape", _clean(n.name or n.output[0]), [n.input[0]], [n.output[0]],
                       {i: int(v) for i, v in enumerate(reversed(s))}))
        self.rank[n.output[0]] = len(s)

    def _axis(self, n: onnx.NodeProto, default: int) -> int:
        r = len(self.shapes.get(n.input[0], []))
        ax = int(self.attrs(n).get("axis", default))
        ax = ax + r if ax < 0 else ax
        if self.drop and ax == 0:
            raise ValueError(f"unsupported {n.op_type} (node {n.name!r}) over the batch axis")
        return ax - int(self.drop)

    def op_Concat(self, n: onnx.NodeProto) -> None:
        self.add(Layer("Concat", _clean(n.name or n.output[0]), list(n.input), [n.output[0]], {0: self._axis(n, 1)}))

    def op_Softmax(self, n: onnx.NodeProto) -> None:
        if n.input[0] in self.consts:
            raise ValueError(f"unsupported Softmax (node {n.name!r}) of a constant")
        r = len(self.shapes.get(n.input[0], []))
        ax = self._axis(n, -1)
        if int(self.attrs(n).get("axis", -1)) % r != r - 1:
            raise ValueError(f"unsupported Softmax (node {n.name!r}): only over the last axis")
        self.add(Layer("Softmax", _clean(n.name or n.output[0]), [n.input[0]], [n.output[0]], {0: ax, 1: 1}))


OPS = [name[3:] for name in vars(_Converter) if name.startswith("op_")]


def _splits(layers: list[Layer], outputs: list[str]) -> list[Layer]:
    """Layers with a Split after every blob read more than once (each reader gets its own copy)."""
    readers: dict[str, int] = {}
    for ly in layers:
        for b in ly.bottoms:
            readers[b] = readers.get(b, 0) + 1
    out: list[Layer] = []
    seen: dict[str, int] = {}
    split_tops: dict[str, list[str]] = {}
    for ly in layers:
        new_bottoms = []
        for b in ly.bottoms:
            if b in split_tops:
                new_bottoms.append(split_tops[b][seen[b]])
                seen[b] += 1
            else:
                new_bottoms.append(b)
        ly.bottoms = new_bottoms
        out.append(ly)
        for t in ly.tops:
            if readers.get(t, 0) > 1:
                split_tops[t] = [f"{t}_splitncnn_{i}" for i in range(readers[t])]
                seen[t] = 0
                out.append(Layer("Split", _clean(f"splitncnn_{t}"), [t], split_tops[t]))
    return out


# ---- int8


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C's round() (what ncnn's float2int8 uses)."""
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _weight_scales(ly: Layer) -> np.ndarray:
    """ncnn2table's weight scales: per output channel, per group for ConvolutionDepthWise."""
    w = ly.weight
    assert w is not None
    groups = ly.params.get(7, 1) if ly.type == "ConvolutionDepthWise" else w.shape[0]
    absmax = np.abs(w.reshape(groups, -1)).max(axis=1).astype(np.float32)
    p = ly.params
    six_bit = ly.type == "Convolution" and (p[1], p[11], p[3], p[13], p[2], p[12]) == (3, 3, 1, 1, 1, 1)
    top = np.float32(31.0 if six_bit else 127.0)
    return np.where(absmax == 0, np.float32(1), top / np.where(absmax == 0, 1, absmax)).astype(np.float32)


def _quantize_weight(ly: Layer) -> None:
    s = _weight_scales(ly)
    w = ly.weight
    assert w is not None
    rows = w.reshape(s.size, -1).astype(np.float32)
    q = np.clip(_round_half_away(rows * s[:, None]), -127, 127).astype(np.int8)
    ly.weight_int8, ly.weight_scales = q.reshape(-1), s


def _kl_threshold(absvals: list[np.ndarray], absmax: float, bins: int = 2048, target: int = 128) -> float:
    """ncnn2table's KL threshold for one blob: the histogram of |x| (zeros left out) over all calibration runs in
    `bins` bins up to absmax; for each candidate t in target..bins-1 the first t bins (the rest added to the last
    one, plus 1e-4 everywhere) against their quantization to `target` levels (each level the mean density over
    its t/target bins, spread back over them, plus 1e-4); the t of least KL divergence gives the threshold
    (t + 0.5) * absmax / bins. Vectorized over the candidates, a chunk at a time."""
    hist = np.zeros(bins, np.float64)
    for a in absvals:
        a = a[a != 0]
        hist += np.bincount(np.minimum((a / absmax * bins).astype(np.int64), bins - 1), minlength=bins)
    if hist.sum() == 0:
        return absmax
    p = hist / hist.sum()
    cum = np.concatenate([[0.0], np.cumsum(p)])  # integral of the bin density up to each bin edge
    tail = cum[-1] - cum  # mass at and beyond each bin
    eps = 1e-4

    def integral(x: np.ndarray) -> np.ndarray:
        i = np.minimum(np.floor(x).astype(np.int64), bins - 1)
        return cum[i] + (x - i) * p[i]

    best_t, best = target, np.inf
    for start in range(target, bins, 256):
        ts = np.arange(start, min(start + 256, bins))
        width = int(ts[-1])  # the bins any candidate of this chunk looks at
        k = np.arange(width + 1, dtype=np.float64)
        per = (ts / target)[:, None]
        inside = k[None, :width] < ts[:, None]
        clip = np.where(inside, p[None, :width] + eps, 0.0)
        clip[np.arange(ts.size), ts - 1] += tail[ts]
        q = np.diff(integral(np.arange(target + 1)[None, :] * per), axis=1) / per  # each level's mean density
        qcum = np.concatenate([np.zeros((ts.size, 1)), np.cumsum(q * per, axis=1)], axis=1)
        lv = np.minimum(np.floor(k[None, :] / per).astype(np.int64), target - 1)
        h = np.take_along_axis(qcum, lv, 1) + (k[None, :] - lv * per) * np.take_along_axis(q, lv, 1)
        expand = np.diff(h, axis=1) + eps
        kl = np.where(inside, clip * np.log(np.where(inside, clip, 1) / expand), 0.0).sum(axis=1)
        i = int(np.argmin(kl))
        if kl[i] < best:
            best, best_t = float(kl[i]), int(ts[i])
    return (best_t + 0.5) * absmax / bins


def _activations(model: onnx.ModelProto, names: list[str], calib: list[np.ndarray], inp: str) -> dict[str, list]:
    """|x| of each named tensor of the float model on each calibration input (ONNX Runtime, CPU)."""
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(model)
    inner = [n for n in names if n != inp]
    have = {o.name for o in m.graph.output}
    for n in inner:
        if n not in have:
            m.graph.output.append(onnx.helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None))
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    got: dict[str, list] = {n: [] for n in names}
    for x in calib:
        outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, {inp: x}), strict=True))
        for n in names:
            got[n].append(np.abs(np.asarray(x if n == inp else outs[n], np.float32)).ravel())
    return got


def _quantize(layers: list[Layer], model: onnx.ModelProto, inp: str, calib: list[np.ndarray], method: str,
              outputs: list[str]) -> None:
    qs = [ly for ly in layers if ly.type in INT8_TYPES]
    names = list(dict.fromkeys(ly.src for ly in qs))
    acts = _activations(model, names, calib, inp)
    scale: dict[str, float] = {}
    for n in names:
        absmax = float(max(a.max(initial=0.0) for a in acts[n]))
        if absmax == 0:
            scale[n] = 1.0
            continue
        thr = _kl_threshold(acts[n], absmax) if method == "kl" else absmax
        scale[n] = 127.0 / thr
    for ly in qs:
        _quantize_weight(ly)
        ly.bottom_scale = scale[ly.src]
        ly.params[8] = 1 if ly.type == "ConvolutionDepthWise" else 2
    # requantize fusion: conv -> int8 conv (directly or through a Split that feeds only int8 convs)
    reader: dict[str, Layer] = {b: ly for ly in layers for b in ly.bottoms}
    for ly in layers:
        if ly.type not in CONV_TYPES or ly.tops[0] in outputs:
            continue
        nxt = reader.get(ly.tops[0])
        if nxt is not None and nxt.type == "Split":
            heirs = [reader.get(t) for t in nxt.tops]
            nxt = heirs[0] if all(h is not None and h.type in CONV_TYPES and len(h.bottoms) == 1
                                  for h in heirs) else None
        if nxt is not None and nxt.type in CONV_TYPES and len(nxt.bottoms) == 1:
            ly.params[8] = int(ly.params[8]) + 100
            ly.top_scale = nxt.bottom_scale


# ---- writing


def _fmt(v: int | float | list[float]) -> str:
    if isinstance(v, list):
        return ",".join(_fmt(x) for x in [len(v), *v])
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return f"{float(v):.8e}"


def _param_line(ly: Layer) -> str:
    kv = []
    for k, v in sorted(ly.params.items()):
        kv.append(f"{-23300 - k if isinstance(v, list) else k}={_fmt(v)}")
    return " ".join([f"{ly.type:<20}", f"{ly.name:<24}", str(len(ly.bottoms)), str(len(ly.tops)),
                     *(_clean(b) for b in ly.bottoms), *(_clean(t) for t in ly.tops), *kv]).rstrip()


def _weight_bytes(ly: Layer) -> bytes:
    """What the layer's load_model reads, in order."""
    parts: list[bytes] = []
    if ly.weight_int8 is not None:
        raw = ly.weight_int8.tobytes()
        parts += [np.uint32(INT8_TAG).tobytes(), raw, b"\0" * (-len(raw) % 4)]
    elif ly.weight is not None:
        parts += [np.uint32(FLOAT_TAG).tobytes(), np.ascontiguousarray(ly.weight, "<f4").tobytes()]
    if ly.bias is not None:
        parts.append(np.ascontiguousarray(ly.bias, "<f4").tobytes())
    if ly.weight_scales is not None:
        parts += [ly.weight_scales.astype("<f4").tobytes(), np.float32(ly.bottom_scale).tobytes()]
        if ly.top_scale is not None:
            parts.append(np.float32(ly.top_scale).tobytes())
    return b"".join(parts)


def export(onnx_model: onnx.ModelProto | str | Path, out_dir: str | Path, name: str, int8: bool = False,
           calib: list[np.ndarray] | None = None, *, method: str = "max") -> tuple[Path, Path]:
    """Write `onnx_model` (a float ONNX CNN) as ncnn's OUT_DIR/NAME.param + .bin, or with `int8`
    OUT_DIR/NAME-int8.param + .bin calibrated on `calib` (the model's input arrays, batch dimension included;
    None: 8 seeded standard-normal inputs) by `method` "max" or "kl". Returns (param, bin). ValueError naming the
    op for anything the exporter does not handle."""
    if method not in ("max", "kl"):
        raise ValueError(f"calibration method must be 'max' or 'kl', not {method!r}")
    model = onnx_model if isinstance(onnx_model, onnx.ModelProto) else onnx.load(str(onnx_model))
    conv = _Converter(model)
    layers = _splits(conv.convert(), conv.outputs)
    if int8:
        if len(conv.inputs) != 1:
            raise ValueError(f"int8 calibration needs a one-input model, this one has {len(conv.inputs)}")
        inp = conv.inputs[0]
        shape = conv.shapes[inp]
        if not calib:
            from vkinfer.testing import zoo

            calib = [zoo.random_inputs(model, seed=i)[inp] for i in range(8)]
        calib = [np.asarray(x, np.float32).reshape(shape) for x in calib]
        _quantize(layers, model, inp, calib, method, conv.outputs)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    stem = f"{name}-int8" if int8 else name
    param, binf = out_dir / f"{stem}.param", out_dir / f"{stem}.bin"
    blobs = {t for ly in layers for t in ly.tops}
    param.write_text("\n".join([str(MAGIC), f"{len(layers)} {len(blobs)}", *(_param_line(ly) for ly in layers)])
                     + "\n")
    binf.write_bytes(b"".join(_weight_bytes(ly) for ly in layers))
    return param, binf


# ---- timing


def ncnn_runner(param: str | Path, bin: str | Path, input_array: np.ndarray, vulkan: bool, threads: int = 1, *,
                device: int | None = None, fp16: bool = True, int8: bool = True,
                opts: dict | None = None) -> tuple[Callable[[], np.ndarray], dict]:
    """(one inference -> the output without its batch dimension, {"device", "vulkan", "net", "batched"}) for an
    ncnn model: the net set up as `ncnn_time` describes, for callers that time it themselves (bench/gpu_check.py)."""
    import ncnn

    from vkinfer.benchmark.engines.ncnn import _ncnn_input, ncnn_param_blobs

    ins, last, _ = ncnn_param_blobs(str(param))
    if not ins:
        raise RuntimeError(f"ncnn model {param}: no Input layer")
    x = _ncnn_input(np.asarray(input_array), None)
    net = ncnn.Net()
    net.opt.num_threads = threads
    net.opt.openmp_blocktime = 0
    net.opt.use_int8_inference = int8
    for k in ("use_fp16_storage", "use_fp16_arithmetic", "use_fp16_packed"):
        setattr(net.opt, k, bool(fp16))
    for k, v in (opts or {}).items():
        setattr(net.opt, k, v)
    dev = "cpu"
    if vulkan:
        if ncnn.get_gpu_count() < 1:
            raise RuntimeError("ncnn sees no Vulkan device")
        i = ncnn.get_default_gpu_index() if device is None else device
        net.opt.use_vulkan_compute = True
        net.set_vulkan_device(i)
        dev = f"vulkan:{i} {ncnn.get_gpu_info(i).device_name()}"
    else:
        net.opt.use_vulkan_compute = False
    if net.load_param(str(param)) != 0:
        raise RuntimeError(f"ncnn could not load {param} (load_param failed)")
    if net.load_model(str(bin)) != 0:
        raise RuntimeError(f"ncnn could not load the weights {bin} for {param} (load_model failed)")
    on_gpu = bool(net.opt.use_vulkan_compute)

    def once() -> np.ndarray:
        with net.create_extractor() as ex:
            if ex.input(ins[0], ncnn.Mat(x)) != 0:
                raise RuntimeError(f"ncnn: no input blob {ins[0]!r} in {param}")
            r, m = ex.extract(last[-1])
            if r != 0:
                raise RuntimeError(f"ncnn could not compute blob {last[-1]!r} of {param} (extract returned {r})")
            return np.array(m)

    dev = dev if on_gpu or not vulkan else f"{dev} (ncnn fell back to the CPU)"
    # the input had a batch dimension that ncnn's blob drops: callers put it back on the output
    batched = np.asarray(input_array).ndim > x.ndim
    return once, {"device": dev, "vulkan": on_gpu, "net": net, "batched": batched}


def ncnn_time(param: str | Path, bin: str | Path, input_array: np.ndarray, vulkan: bool, threads: int = 1,
              repeat: int = 20, *, warmup: int = 2, device: int | None = None, fp16: bool = True,
              int8: bool = True, opts: dict | None = None) -> dict:
    """Run an ncnn model `repeat` times (after `warmup` untimed runs) on `input_array` (batch dimension optional)
    and return {"median_ms", "output" (numpy, batch dimension put back), "times_ms", "device", "vulkan"}.

    ncnn.Net with opt.num_threads `threads`, openmp_blocktime 0, use_int8_inference `int8`, use_vulkan_compute
    `vulkan` on Vulkan device `device` (default ncnn.get_default_gpu_index(); RuntimeError without one), fp16
    storage/arithmetic/packed `fp16` (ncnn's default True; False for float32 throughout). A time is one extractor:
    input set, output extracted and copied to numpy. Blobs: vkinfer bench's choice (the .param's first Input blob,
    the last layer's last output). "vulkan" is net.opt.use_vulkan_compute after loading: older ncnn turned it off for
    the whole net when a layer held int8 weights (int8 then ran on the CPU); ncnn 1.0.20261020 keeps int8 nets on
    the GPU. `opts`: other net.opt fields to set, e.g. {"use_packing_layout": False} (ncnn's x86 int8 grouped,
    not depthwise, convolution is wrong with the packing layout when a group has 8k output channels; the
    unpacked kernels are exact)."""
    once, info = ncnn_runner(param, bin, input_array, vulkan, threads, device=device, fp16=fp16, int8=int8,
                             opts=opts)
    out = None
    for _ in range(warmup):
        out = once()
    times = []
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        out = once()
        times.append((time.perf_counter() - t0) * 1e3)
    assert out is not None
    if info["batched"]:
        out = out[None]
    info["net"].clear()
    return {"median_ms": statistics.median(times), "output": out, "times_ms": times,
            "device": info["device"], "vulkan": info["vulkan"]}


# ---- CLI


def main(argv: list[str] | None = None) -> int:
    from vkinfer.testing import zoo

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=sorted(zoo.BUILDERS), help="a vkinfer.testing.zoo builder (its defaults)")
    ap.add_argument("--onnx", help="a float ONNX file instead of --model")
    ap.add_argument("--out", required=True, help="output folder")
    ap.add_argument("--int8", action="store_true", help="also write the int8 model NAME-int8.param/.bin")
    ap.add_argument("--calib", type=int, default=8, help="seeded standard-normal calibration inputs (default 8)")
    ap.add_argument("--method", choices=("max", "kl"), default="max", help="input-scale calibration (default max)")
    ap.add_argument("--width", type=float, help="zoo builder's width")
    ap.add_argument("--size", type=int, help="zoo builder's input size")
    ap.add_argument("--num-classes", type=int, help="zoo builder's classes")
    ap.add_argument("--time", action="store_true", help="time each written model: CPU 1 thread and Vulkan")
    ap.add_argument("--repeat", type=int, default=10, help="timed runs for --time (default 10)")
    a = ap.parse_args(argv)
    if (a.model is None) == (a.onnx is None):
        ap.error("give exactly one of --model and --onnx")
    if a.onnx:
        model, name = onnx.load(a.onnx), Path(a.onnx).stem
    else:
        kw = {k: v for k, v in (("width", a.width), ("size", a.size), ("num_classes", a.num_classes))
              if v is not None}
        model, name = zoo.BUILDERS[a.model](**kw), a.model
    try:
        written = [export(model, a.out, name, False)]
        if a.int8:
            inp = next(i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer})
            calib = [zoo.random_inputs(model, seed=1000 + i)[inp] for i in range(a.calib)]
            written.append(export(model, a.out, name, True, calib, method=a.method))
    except ValueError as e:
        print(f"ncnn_export: error: {e}", file=sys.stderr)
        return 2
    for p, b in written:
        print(p)
        print(b)
    if a.time:
        import ncnn

        [x] = zoo.random_inputs(model, seed=0).values()
        for p, b in written:
            for vk in ([False, True] if ncnn.get_gpu_count() else [False]):
                r = ncnn_time(p, b, x, vk, 1, a.repeat)
                print(f"{p.name}: {r['device']}: median {r['median_ms']:.2f} ms over {len(r['times_ms'])} runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
