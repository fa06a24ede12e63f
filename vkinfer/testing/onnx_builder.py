"""The one ONNX graph builder of the test models, the zoos and the benches (`onnx.helper` underneath).

Two forms of the same thing:

- `make_model(nodes, inputs, outputs, consts)`: a model of NodeProtos written out by hand (a test's one-node
  model); inputs and outputs map a name to an array (its dtype and shape are declared), a (dtype, shape) pair, or
  a dtype alone (shape left unknown).
- `GraphBuilder`: accumulates inputs, initializers and nodes, each helper returning the name of the tensor it made
  (fresh names ``<kind>_<n>`` unless told), plus the quantized ops' (scale, zero point) constants; `build` gives
  the checked ModelProto. vkinfer.testing.zoo's float CNNs and field_onnx's field models extend it with layers.

Both stamp the IR version ONNX Runtime's Python API loads (`ir_version`: 8 up to opset 18, where ORT 1.31 refuses
what onnx writes by default, else the lowest the opsets need).

    from vkinfer.testing.onnx_builder import GraphBuilder, make_model
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (np.float32, [1, 4])}, {"y": np.float32})
    g = GraphBuilder(seed=0)
    x = g.input("x", np.uint8, [1, 8, 4, 4])
    y = g.qlinear_conv(x, g.quant("x", 0.02, 128), w, w_scale, w_zp, g.quant("y", 0.05, 128), kernel_shape=[1, 1])
    m = g.build("conv", {y: (np.uint8, [1, 16, 4, 4])})   # checked: graph outputs need a shape
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 13
IR_VERSION = 8  # ORT 1.31's Python API refuses IR 14 (what onnx 1.23 writes); 8 covers opsets up to 18
ELEM = {np.dtype(np.uint8): TensorProto.UINT8, np.dtype(np.int8): TensorProto.INT8,
        np.dtype(np.uint16): TensorProto.UINT16, np.dtype(np.int16): TensorProto.INT16,
        np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.float16): TensorProto.FLOAT16,
        np.dtype(np.float64): TensorProto.DOUBLE, np.dtype(np.int32): TensorProto.INT32,
        np.dtype(np.int64): TensorProto.INT64, np.dtype(np.bool_): TensorProto.BOOL}
MS = {"com.microsoft": 1}  # the contrib domain of ORT's quantized ops (QGemm, QLinearAdd, ...)

# A declared tensor: an array (its dtype and shape), a (dtype, shape) pair (shape None: unknown) or a dtype.
Spec = Any


def ir_version(opset: int, domains: Mapping[str, int] | None = None) -> int:
    """The IR version to stamp on a model of default-domain `opset` (and `domains`): IR_VERSION, or the lowest
    the opsets need where that is higher (opset 19-20: 9, 21-22: 10)."""
    ids = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in (domains or {}).items())]
    return max(IR_VERSION, helper.find_min_ir_version_for(ids, ignore_unknown=True))


def tensor_info(name: str, spec: Spec) -> onnx.ValueInfoProto:
    """A graph input's or output's declaration; `spec` an array, a (dtype, shape) pair or a dtype."""
    if isinstance(spec, np.ndarray):
        dtype, shape = spec.dtype, list(spec.shape)
    elif isinstance(spec, tuple):
        dtype, shape = spec[0], None if spec[1] is None else list(spec[1])
    else:
        dtype, shape = spec, None
    dt = np.dtype(dtype)
    if dt not in ELEM:
        raise TypeError(f"tensor {name!r}: no ONNX element type for numpy {dt}")
    return helper.make_tensor_value_info(name, ELEM[dt], shape)


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Mapping[str, Spec], outputs: Mapping[str, Spec],
               consts: Mapping[str, Any] | None = None, *, opset: int = OPSET, domains: Mapping[str, int] | None = None,
               ir: int | None = None, name: str = "g", producer: str | None = None, check: bool = False,
               infer_shapes: bool = False) -> onnx.ModelProto:
    """A model of `nodes` with graph inputs `inputs`, outputs `outputs` (name -> spec, see `tensor_info`) and
    initializers `consts` (name -> array-like), default-domain `opset` plus `domains` (e.g. MS), IR version `ir`
    (default `ir_version(opset, domains)`). `infer_shapes`: ONNX shape inference in strict mode (every output must
    get a shape); `check`: onnx.checker. Raises TypeError for a dtype ONNX has no element type for."""
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (consts or {}).items()]
    graph = helper.make_graph(list(nodes), name, [tensor_info(k, v) for k, v in inputs.items()],
                              [tensor_info(k, v) for k, v in outputs.items()], initializer=inits)
    ids = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in (domains or {}).items())]
    m = helper.make_model(graph, opset_imports=ids, **({"producer_name": producer} if producer else {}))
    m.ir_version = ir_version(opset, domains) if ir is None else ir
    if infer_shapes:
        m = onnx.shape_inference.infer_shapes(m, strict_mode=True)
        missing = [o.name for o in m.graph.output if not o.type.tensor_type.HasField("shape")]
        if missing:
            raise ValueError(f"{name}: shape inference left {missing} without a shape")
    if check:
        onnx.checker.check_model(m)
    return m


class GraphBuilder:
    """Inputs, initializers and nodes of one graph; every helper returns the name of the tensor it produced.

    `rng` is a numpy generator seeded with `seed` for the caller's weights. Names made here are ``<kind>_<n>``
    with one counter for the whole graph (so a model's names do not depend on which helper made a tensor)."""

    def __init__(self, seed: int | None = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.consts: dict[str, np.ndarray] = {}
        self.inputs: dict[str, Spec] = {}
        self._n = 0

    def name(self, kind: str) -> str:
        """A fresh tensor name ``<kind>_<n>``."""
        self._n += 1
        return f"{kind}_{self._n}"

    def const(self, kind: str, value) -> str:
        """An initializer under a fresh name."""
        return self.initializer(self.name(kind), value)

    def initializer(self, name: str, value) -> str:
        """An initializer named `name` (ValueError if the name is taken)."""
        if name in self.consts or name in self.inputs:
            raise ValueError(f"tensor {name!r} is already defined")
        self.consts[name] = np.asarray(value)
        return name

    def i64(self, kind: str, values) -> str:
        """An int64 initializer (shapes, axes, pads)."""
        return self.const(kind, np.array(values, np.int64))

    def f32(self, kind: str, value) -> str:
        """A float32 initializer."""
        return self.const(kind, np.asarray(value, np.float32))

    def input(self, name: str, dtype, shape: Sequence[int | str] | None) -> str:
        """A graph input (`shape` may hold symbolic dimensions; None: unknown)."""
        if name in self.consts or name in self.inputs:
            raise ValueError(f"tensor {name!r} is already defined")
        self.inputs[name] = (np.dtype(dtype), None if shape is None else list(shape))
        return name

    def node(self, op: str, inputs: Sequence[str], *, outputs: Sequence[str] | None = None, name: str | None = None,
             domain: str | None = None, **attrs) -> str:
        """A node; its output is a fresh ``<op>_<n>`` (node name that plus "_node") unless `outputs` names them.
        Returns the (first) output's name."""
        outs = [self.name(op.lower())] if outputs is None else list(outputs)
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=name or outs[0] + "_node", domain=domain,
                                           **attrs))
        return outs[0]

    def nodes_out(self, op: str, inputs: Sequence[str], n: int, **attrs) -> list[str]:
        """A node with `n` fresh outputs ``<op>_<k>_<i>`` (Split)."""
        base = self.name(op.lower())
        outs = [f"{base}_{i}" for i in range(n)]
        self.node(op, inputs, outputs=outs, name=base + "_node", **attrs)
        return outs

    # --- quantized ops ------------------------------------------------------------------------------------------

    def quant(self, kind: str, scale, zero_point, dtype=np.uint8) -> list[str]:
        """A quantized tensor's (scale, zero point) as two initializers ``<kind>_scale_<n>``, ``<kind>_zp_<n>``:
        the scale float32, the zero point of `dtype` (arrays: per channel)."""
        return [self.const(f"{kind}_scale", np.asarray(scale, np.float32)),
                self.const(f"{kind}_zp", np.asarray(zero_point, np.dtype(dtype)))]

    def qlinear_conv(self, x: str, x_q: Sequence[str], w, w_scale, w_zp, y_q: Sequence[str], bias=None,
                     **attrs) -> str:
        """QLinearConv of `x` (its (scale, zero point) names `x_q`) by constant weights `w` (OIHW, with their
        scale and zero point), output parameters `y_q`, optional int32 `bias`; attributes as ONNX's."""
        ins = [x, *x_q, self.const("w", w), self.const("w_scale", np.asarray(w_scale, np.float32)),
               self.const("w_zp", np.asarray(w_zp, np.asarray(w).dtype)), *y_q]
        if bias is not None:
            ins.append(self.const("bias", np.asarray(bias, np.int32)))
        return self.node("QLinearConv", ins, **attrs)

    def qlinear_matmul(self, a: str, a_q: Sequence[str], b, b_scale, b_zp, y_q: Sequence[str]) -> str:
        """QLinearMatMul of activation `a` by the constant `b` (its scale and zero point), output `y_q`."""
        return self.node("QLinearMatMul", [a, *a_q, self.const("b", b),
                                           self.const("b_scale", np.asarray(b_scale, np.float32)),
                                           self.const("b_zp", np.asarray(b_zp, np.asarray(b).dtype)), *y_q])

    # --- the model ----------------------------------------------------------------------------------------------

    def rename(self, names: Mapping[str, str]) -> None:
        """Rename tensors (old -> new) wherever a node reads or writes them (graph outputs' public names)."""
        for n in self.nodes:
            n.output[:] = [names.get(o, o) for o in n.output]
            n.input[:] = [names.get(i, i) for i in n.input]

    def build(self, name: str, outputs: Mapping[str, Spec], *, opset: int = OPSET,
              domains: Mapping[str, int] | None = None, ir: int | None = None, producer: str | None = None,
              check: bool = True, infer_shapes: bool = False) -> onnx.ModelProto:
        """The model: this builder's inputs, initializers and nodes, graph outputs `outputs` (name -> spec, see
        `tensor_info`); checked by onnx.checker unless `check` is False; see `make_model`."""
        return make_model(self.nodes, self.inputs, outputs, self.consts, opset=opset, domains=domains, ir=ir,
                          name=name, producer=producer, check=check, infer_shapes=infer_shapes)


__all__ = ["OPSET", "IR_VERSION", "ELEM", "MS", "ir_version", "tensor_info", "make_model", "GraphBuilder"]
