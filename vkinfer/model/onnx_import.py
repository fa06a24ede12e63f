"""ONNX -> vkinfer Graph: QOperator, QDQ and dynamically quantized models (onnxruntime.quantization's
quantize_static in both formats and quantize_dynamic).

Reads any IR version the installed `onnx` reads. The graph then goes through passes.optimize (constant
folding, ONNX Runtime's activation removal before QuantizeLinear, QDQ folding into the quantized ops ORT
fuses, activation fusion into the integer ops' clamps). Every node left is checked against the op table of
the session; all unsupported nodes are reported together, each with its name, op type and why.
"""

from __future__ import annotations

import os

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import VkInferError
from ..reference._opdef import definitions
from .graph import Graph, Node, TensorInfo
from .passes import optimize

_ELEM = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.INT8: np.int8,
         onnx.TensorProto.INT32: np.int32, onnx.TensorProto.INT64: np.int64}


class UnsupportedModelError(VkInferError, ValueError):
    """The model uses ops or patterns vkinfer cannot run; the message lists every offending node."""


def _load(model: str | os.PathLike | bytes | onnx.ModelProto) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    try:
        if isinstance(model, bytes | bytearray):
            return onnx.load_model_from_string(bytes(model))
        return onnx.load(os.fspath(model))
    except FileNotFoundError:
        raise
    except Exception as e:  # protobuf's DecodeError and friends: a corrupt or truncated file
        raise ValueError(f"not a readable ONNX model ({type(e).__name__}: {e})") from None


def _info(vi: onnx.ValueInfoProto) -> TensorInfo:
    t = vi.type.tensor_type
    if t.elem_type not in _ELEM:
        raise UnsupportedModelError(f"graph input/output {vi.name!r} has unsupported element type {t.elem_type}")
    shape = None
    if t.HasField("shape"):
        shape = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
    if shape is not None and np.prod([d for d in shape if isinstance(d, int) and d > 0], dtype=np.float64) >= 2 ** 31:
        raise ValueError(f"graph input/output {vi.name!r} has shape {list(shape)}: over {2 ** 31 - 1} elements")
    return TensorInfo(vi.name, shape, np.dtype(_ELEM[t.elem_type]))


def _array(t: onnx.TensorProto, what: str) -> np.ndarray:
    """An initializer's or a Constant's tensor as numpy; ValueError naming it when its type or data is bad."""
    try:
        return numpy_helper.to_array(t)
    except Exception as e:  # an unknown data_type (KeyError in onnx.helper), data not matching the dims, ...
        raise ValueError(f"{what}: unreadable tensor (data_type {t.data_type}, dims {list(t.dims)}): "
                         f"{type(e).__name__}: {e}") from e


def import_onnx(model, supported: dict[str, str | None]) -> Graph:
    """Graph of an ONNX model. `supported` maps op names (with 'domain:' prefix for non-default
    domains) to None, or to a reason string for ops recognised but not supported."""
    m = _load(model)
    g = m.graph
    consts = {t.name: _array(t, f"initializer {t.name!r}") for t in g.initializer}
    nodes, problems = [], []
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    for i, n in enumerate(g.node):
        domain = n.domain if n.domain not in ("", "ai.onnx") else ""
        op = f"{domain}:{n.op_type}" if domain else n.op_type
        name = n.name or f"{n.op_type}_{i}"
        attrs = {}
        for a in n.attribute:
            try:
                attrs[a.name] = helper.get_attribute_value(a)
            except Exception as e:  # an attribute type onnx does not know
                raise ValueError(f"node {name!r} ({n.op_type}): unreadable attribute {a.name!r} "
                                 f"(type {a.type}): {e}") from e
        if op == "Constant":
            value = attrs.get("value")
            if value is None:
                problems.append(f"{name} (Constant): only the 'value' attribute is supported")
                continue
            if not isinstance(value, onnx.TensorProto):
                raise ValueError(f"node {name!r} (Constant): attribute 'value' must be a tensor, got "
                                 f"{type(value).__name__}")
            if len(n.output) != 1 or not n.output[0]:
                raise ValueError(f"node {name!r} (Constant) must have one output, has {list(n.output)}")
            consts[n.output[0]] = _array(value, f"node {name!r} (Constant) attribute 'value'")
            continue
        # The op's version (kernels whose semantics changed between opsets read it) and the node itself (its
        # attributes, with the types the model gave them).
        attrs["_opset"] = opset if not domain else None
        attrs["_proto"] = n
        if not domain and opset is not None:
            _check_input_count(n, name, opset)
        if op == "Softmax" and opset is not None and opset < 13:
            attrs["_coerce_2d"] = True  # Softmax-1/11: over all axes from `axis` on, default axis 1
        if op in ("MatMul", "Gemm") and len(n.input) > 1:
            # ORT prepacks B (its K blocks of 256) only when B is an initializer, not when vkinfer folds it later
            # (a DequantizeLinear of a constant): vkinfer/reference/float_matmul.py
            attrs["_b_initializer"] = n.input[1] in consts
        nodes.append(Node(op, name, list(n.input), list(n.output), attrs))
    inputs = [_info(vi) for vi in g.input if vi.name not in consts]
    graph = optimize(Graph(nodes, inputs, [_info(vi) for vi in g.output], consts))
    nodes = graph.nodes
    for n in nodes:
        if n.op not in supported:
            problems.append(f"{n.name} ({n.op}): op not supported")
        elif supported[n.op] is not None:
            problems.append(f"{n.name} ({n.op}): {supported[n.op]}")
    problems += [f"graph output {t.name!r}: a constant (it depends on no graph input), which vkinfer does not "
                 f"support as an output" for t in graph.outputs if t.name in graph.consts]
    if problems:
        raise UnsupportedModelError("the model has nodes vkinfer cannot run:\n  " + "\n  ".join(problems))
    quant_ops = ("QuantizeLinear", "DequantizeLinear", "com.microsoft:QGemm", "ConvInteger", "MatMulInteger")
    eight_bit = any(t.dtype in (np.uint8, np.int8) for t in graph.inputs + graph.outputs)
    if not eight_bit and not any(n.op in quant_ops or n.op.split(":")[-1].startswith("QLinear") for n in nodes):
        raise UnsupportedModelError("the model has no quantized tensors or ops: vkinfer runs 8-bit models; "
                                    "quantize it first, e.g. with onnxruntime.quantization.quantize_static")
    graph.meta = _meta(m, consts, graph)
    return graph


def _check_input_count(n: onnx.NodeProto, name: str, opset: int) -> None:
    """More inputs than the ONNX op has at this opset: ValueError, as ONNX Runtime refuses the model (tests/ops
    found an Identity with two inputs running, its second ignored)."""
    try:
        schema = onnx.defs.get_schema(n.op_type, opset)
    except Exception:  # noqa: BLE001 - an op onnx does not define: the op table's check names it
        return
    if len(n.input) > schema.max_input:
        raise ValueError(f"node {name!r} ({n.op_type}) has {len(n.input)} inputs; opset {opset}'s {n.op_type} takes "
                         f"at most {schema.max_input}")


# Quantized ops as the model writes them: the input positions of their output's scale and zero point, and of
# their 8-bit data inputs (each followed by its own scale and zero point).
_Y_PARAMS = {"QuantizeLinear": (1, 2), "com.microsoft:QLinearSoftmax": (3, 4),
             "com.microsoft:QLinearReduceMean": (3, 4)}
_X_SLOTS = {"DequantizeLinear": (0,)}
# The ops defined in their own files carry theirs (vkinfer/reference/_opdef.py).
_Y_PARAMS.update({d.op: d.y_params for d in definitions().values() if d.y_params is not None})
_X_SLOTS.update({d.op: d.x_slots for d in definitions().values() if d.x_slots})


def _meta(m: onnx.ModelProto, consts: dict[str, np.ndarray], graph: Graph) -> dict:
    """Graph.meta of an ONNX model: ONNX Runtime's ModelMetadata fields, and the scale and zero point of each 8-bit
    graph input and output where the model gives them (the QuantizeLinear or QLinear op writing it, else the
    DequantizeLinear or QLinear op reading it: QDQ and QOperator models alike)."""
    def op(n) -> str:
        return f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type

    def params(n, i: int, j: int, dtype: np.dtype) -> tuple[float, int] | None:
        ins = list(n.input)
        scale = consts.get(ins[i]) if i < len(ins) else None
        zp = consts.get(ins[j]) if j < len(ins) and ins[j] else np.zeros((), dtype)
        if scale is None or zp is None or scale.size != 1 or zp.size != 1 or scale.dtype.kind != "f":
            return None
        return float(scale.reshape(())), int(zp.reshape(()))

    quant: dict[str, tuple[float, int]] = {}
    for t in [*graph.inputs, *graph.outputs]:
        if t.dtype not in (np.uint8, np.int8) or t.name in quant:
            continue
        for n in m.graph.node:
            o = op(n)
            if t.name in n.output and o in _Y_PARAMS and n.output[0] == t.name:
                q = params(n, *_Y_PARAMS[o], t.dtype)
            elif t.name in n.input and (o in _Y_PARAMS or o == "DequantizeLinear") and o != "QuantizeLinear":
                slots = _X_SLOTS.get(o, range(2, len(n.input), 3) if o.endswith("QLinearConcat") else (0,))
                i = next((i for i in slots if i < len(n.input) and n.input[i] == t.name), None)
                q = None if i is None else params(n, i + 1, i + 2, t.dtype)
            else:
                continue
            if q is not None:
                quant[t.name] = q
                break
    model = {"producer_name": m.producer_name, "producer_version": m.producer_version, "graph_name": m.graph.name,
             "domain": m.domain, "description": m.doc_string, "graph_description": m.graph.doc_string,
             "version": m.model_version if m.HasField("model_version") else 2 ** 63 - 1,
             "custom_metadata_map": {p.key: p.value for p in m.metadata_props}}
    return {"format": "onnx", "model": model, "quantization": quant}
