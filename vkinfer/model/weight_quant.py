"""ONNX Runtime's load-time quantization of float weights and biases (its WeightBiasQuantization transformer).

ORT 1.31 rewrites, at its basic optimization level (so by default), a Conv, ConvTranspose or Gemm whose input 0 is a
DequantizeLinear with a per-tensor scale and whose output goes (alone, through Relu/Clip only) into a QuantizeLinear,
when its weight is a float32 constant and/or its bias a 1-D constant:
- a float32 weight becomes DequantizeLinear(int8 weight, scale, zero point), quantized per tensor and asymmetric
  with core/util/qmath.h GetQuantizationParameter: min/max over the weights widened to include 0,
  scale = float32((max - min) / 255), zero point = round_half_even(clamp(-128 - min / scale, -128, 127)); the
  values as QuantizeLinear: round_half_even(w / scale) + zero point, saturated;
- a bias becomes DequantizeLinear(int32 bias, x_scale * w_scale) (axis 0 where the weight scale is per channel):
  bias_scale = float32(x_scale * w_scale), int32(round_half_even(float32(bias / bias_scale))).
The QOperator format leaves ConvTranspose in float with float weights (slider_yoloseg's proto upsample), so ORT
runs it with these int8 weights; without this pass vkinfer's float weights missed ORT's output by a step on about
one element in eight (measured on slider_yoloseg.qop: 426,223 of 3,276,800). The rewritten pattern is the QDQ one
that passes.fold_qdq folds (vkinfer:QLinearConvTranspose, QLinearConv, QGemm).
"""

from __future__ import annotations

import numpy as np

from .graph import Graph, Node

OPS = ("Conv", "ConvTranspose", "Gemm")


def weight_params(w: np.ndarray) -> tuple[np.float32, np.int8]:
    """(scale, zero point) of ORT's per-tensor int8 quantization of float32 weights (GetQuantizationParameter)."""
    w = np.asarray(w, np.float32)
    lo = min(np.float32(w.min()) if w.size else np.float32(0), np.float32(0))
    hi = max(np.float32(w.max()) if w.size else np.float32(0), np.float32(0))
    scale = np.float32(1) if hi == lo else np.float32((hi - lo) / np.float32(255))
    zp = np.float32(-128) - np.float32(lo / scale)
    zp = np.rint(np.clip(zp, np.float32(-128), np.float32(127)))
    return np.float32(scale), np.int8(zp)


def quantize_weights(w: np.ndarray) -> tuple[np.ndarray, np.float32, np.int8]:
    """(int8 weights, scale, zero point) as ORT's folded QuantizeLinear makes them (float32 division, ties to
    even, saturation)."""
    scale, zp = weight_params(w)
    q = np.rint(np.asarray(w, np.float32) / scale) + np.float32(zp)
    return np.clip(q, -128, 127).astype(np.int8), scale, zp


def quantize_bias(b: np.ndarray, x_scale, w_scale) -> tuple[np.ndarray, np.ndarray]:
    """(int32 bias, float32 bias scale): ORT's Mul, Div, Round and Cast nodes, folded."""
    bs = (np.asarray(x_scale, np.float32) * np.asarray(w_scale, np.float32)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = np.rint((np.asarray(b, np.float32) / bs).astype(np.float32))
    return np.clip(r, -2.0**31, 2.0**31 - 128).astype(np.int32), bs


def _scalar(v) -> bool:
    v = np.asarray(v)
    return v.ndim == 0 or (v.ndim == 1 and v.shape[0] == 1)


def quantize_float_weights(g: Graph) -> Graph:
    """The graph with ORT's WeightBiasQuantization applied (module docstring); `g` itself when nothing matches."""
    consts = g.consts

    def may_match(n: Node) -> bool:  # the conditions below that need no producer or reader maps
        if n.op not in OPS or len(n.inputs) < 2:
            return False
        bias = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else ""
        if bias:
            return bias in consts and np.asarray(consts[bias]).ndim == 1
        return n.inputs[1] in consts and consts[n.inputs[1]].dtype == np.float32  # (no bias: no DQ'd weights)

    if not any(may_match(n) for n in g.nodes):
        return g  # (the maps of a QDQ conv chain, whose weights are all DQ'd without a bias, were 0.2 s on 100k nodes)
    producer = {o: n for n in g.nodes for o in n.outputs if o}
    consumers: dict[str, list[Node]] = {}
    for n in g.nodes:
        for i in n.inputs:
            if i:
                consumers.setdefault(i, []).append(n)

    def to_q(n: Node) -> bool:  # ORT's IsNoBranchPathToQuantizeLinear
        while True:
            if len(n.outputs) != 1 or len(users := consumers.get(n.outputs[0], [])) != 1:
                return False
            if users[0].op == "QuantizeLinear":
                return True
            if users[0].op not in ("Relu", "Clip"):
                return False
            n = users[0]

    nodes: list[Node] = []
    changed = False
    for n in g.nodes:
        if n.op not in OPS or len(n.inputs) < 2:
            nodes.append(n)
            continue
        x = producer.get(n.inputs[0])
        if (x is None or x.op != "DequantizeLinear" or len(x.inputs) < 2 or x.inputs[1] not in consts
                or not _scalar(consts[x.inputs[1]]) or not to_q(n)):
            nodes.append(n)
            continue
        wdq = producer.get(n.inputs[1])
        if wdq is not None and wdq.op != "DequantizeLinear":
            wdq = None
        if wdq is None and (n.inputs[1] not in consts or consts[n.inputs[1]].dtype != np.float32):
            nodes.append(n)
            continue
        bias = n.inputs[2] if len(n.inputs) > 2 and n.inputs[2] else ""
        if bias and (bias not in consts or np.asarray(consts[bias]).ndim != 1):
            nodes.append(n)
            continue
        if wdq is not None and (not bias or len(wdq.inputs) < 2 or wdq.inputs[1] not in consts):
            nodes.append(n)
            continue
        if wdq is not None and not _scalar(consts[wdq.inputs[1]]):
            ws = np.asarray(consts[wdq.inputs[1]])
            if ws.ndim != 1 or ws.shape[0] != consts[bias].shape[0] or int(wdq.attrs.get("block_size", 0)):
                nodes.append(n)
                continue
            wrank = np.asarray(consts[wdq.inputs[0]]).ndim if wdq.inputs[0] in consts else None
            axis = int(wdq.attrs.get("axis", 1))
            if axis < 0:
                if wrank is None:
                    nodes.append(n)
                    continue
                axis += wrank
            want = (0 if int(n.attrs.get("transB", 0)) else 1) if n.op == "Gemm" else 0
            if axis != want:
                nodes.append(n)
                continue
        ins = list(n.inputs)
        if wdq is None:
            q, s, z = quantize_weights(consts[n.inputs[1]])
            names = [f"{n.name}__weight_{k}" for k in ("q", "scale", "zp", "dq")]
            consts[names[0]], consts[names[1]], consts[names[2]] = q, np.asarray(s), np.asarray(z)
            nodes.append(Node("DequantizeLinear", f"{n.name}__weight_dq", names[:3], [names[3]]))
            ins[1] = names[3]
            w_scale = consts[names[1]]
        else:
            w_scale = consts[wdq.inputs[1]]
        if bias:
            bq, bs = quantize_bias(consts[bias], consts[x.inputs[1]], w_scale)
            names = [f"{n.name}__bias_{k}" for k in ("int32", "scale", "dq")]
            consts[names[0]], consts[names[1]] = bq, bs
            attrs = {} if _scalar(w_scale) else {"axis": 0}
            nodes.append(Node("DequantizeLinear", f"{n.name}__bias_dq", names[:2], [names[2]], attrs))
            ins[2] = names[2]
        nodes.append(Node(n.op, n.name, ins, list(n.outputs), dict(n.attrs)))
        changed = True
    return Graph(nodes, g.inputs, g.outputs, consts, g.meta) if changed else g
