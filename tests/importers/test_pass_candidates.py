"""passes.optimize calls fold_constants, fold_constant_operands and fold_self_products only where one scan of the
graph (pass_candidates._may_change) finds a node that gets past the pass's first tests: where it finds none, the pass
returns its graph as it is (checked on each pass directly, on graphs before and after the passes), and the
import gives the same graph as with every pass called (zoo models, chains, mutants, models where each pass has
work)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from support.load_chains import chain_model

from importers.test_import_time import _graph_key
from importers.test_mutations import _onnx_bases, _onnx_proto_case
from vkinfer.model import onnx_import, pass_candidates, passes, tables
from vkinfer.model.op_table import OPS
from vkinfer.testing.onnx_builder import MS, OPSET, ir_version

SUPPORTED = {name: None for name in OPS}
PASSES = {"fold_constants": passes.fold_constants, "fold_constant_operands": tables.fold_constant_operands,
          "fold_self_products": tables.fold_self_products}


def _model(nodes, inits, elem=TensorProto.UINT8) -> bytes:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", elem, [1, 4, 3, 5])],
                          [helper.make_tensor_value_info(nodes[-1].output[0], elem, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET),
                                            *(helper.make_opsetid(d, v) for d, v in MS.items())])
    m.ir_version = ir_version(OPSET, MS)
    return m.SerializeToString()


def _with_work() -> dict[str, bytes]:
    """Models in which each of the three passes changes the graph (and one in which a constant operand is not one
    8-bit value, or its parameters are computed)."""
    p = [numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.uint8(128), "z"),
         numpy_helper.from_array(np.float32(0.1), "s_out"), numpy_helper.from_array(np.uint8(3), "one"),
         numpy_helper.from_array(np.full((1, 4, 3, 5), 3, np.uint8), "many"),
         numpy_helper.from_array(np.int8(3), "one_int8"), numpy_helper.from_array(np.int8(-3), "zi")]

    def op(kind, a, b, y, name, z="z"):
        return helper.make_node(f"QLinear{kind}", [a, "s", z, b, "s", z, "s_out", z], [y], name,
                                domain="com.microsoft")

    return {
        "constant operand": _model([op("Add", "x", "one", "y", "a")], p),
        "constant operand first": _model([op("Mul", "one", "x", "y", "a")], p),
        "constant operand of many values": _model([op("Add", "x", "many", "y", "a")], p),
        "constant operand int8": _model([op("Add", "x", "one_int8", "y", "a", "zi")], p, TensorProto.INT8),
        "self product": _model([op("Mul", "x", "x", "y", "a")], p),
        "self sum after a constant operand": _model([op("Add", "x", "one", "t", "a"), op("Add", "t", "t", "y", "b")],
                                                    p),
        "constants fold": _model([op("Add", "one", "one", "c", "a"), op("Add", "x", "c", "y", "b")], p),
        "a node without inputs": _model([helper.make_node("Transpose", [], ["t"], "t", perm=[0, 2, 3, 1]),
                                         op("Add", "x", "one", "y", "a")], p),
        "short QLinearAdd": _model([helper.make_node("QLinearAdd", ["x", "s", "z", "one"], ["y"], "a",
                                                     domain="com.microsoft")], p),
    }


def _models() -> dict[str, bytes]:
    models = {name: m.SerializeToString() for name, m in _onnx_bases().items()}
    models.update({kind: chain_model(kind, 12) for kind in ("transpose", "qlinear_add", "qlinear_conv", "qdq_conv")})
    models.update(_with_work())
    return models


def _outcome(blob: bytes):
    try:
        return _graph_key(onnx_import.import_onnx(blob, SUPPORTED))
    except Exception as e:  # noqa: BLE001 - the outcome compared
        return ("error", type(e).__name__, str(e))


def test_a_pass_the_scan_rules_out_returns_its_graph(monkeypatch):
    """On the graph each model's import hands to optimize, and on the one it returns: every pass _may_change leaves
    out returns its graph as it is (the claim the skip rests on), and each pass is found to have work somewhere."""
    graphs = []
    optimize = passes.optimize

    def spy(g):
        graphs.append(g)
        graphs.append(optimize(g))
        return graphs[-1]

    monkeypatch.setattr(onnx_import, "optimize", spy)
    for blob in _models().values():
        try:
            onnx_import.import_onnx(blob, SUPPORTED)
        except ValueError:
            pass
    assert len(graphs) > 20
    found = set()
    for g in graphs:
        may = pass_candidates._may_change(g)
        found |= may
        for name, run in PASSES.items():
            if name not in may:
                assert run(g) is g, name
    assert found == set(PASSES)


def test_the_import_gives_the_graph_every_pass_gives(monkeypatch):
    """With _Candidates answering yes every time (every gated pass called), the same graph or error, on the zoo
    models, the chains, models where the passes have work, and 40 mutants."""
    bases = _onnx_bases()
    models = _models()
    models.update({f"mutant {seed}": _onnx_proto_case(bases, seed)[1] for seed in range(40)})
    for name, blob in models.items():
        gated = _outcome(blob)
        with monkeypatch.context() as m:
            m.setattr(pass_candidates._Candidates, "__call__", lambda self, g, name: True)
            assert _outcome(blob) == gated, name


def test_a_qlinear_add_chain_calls_none_of_the_three(monkeypatch):
    """A QLinearAdd chain's nodes each read the one before and a constant of many values: no pass of the three is
    called (they cost a scan of every node each: 0.15 s of a 100k-node chain)."""
    def refuse(*a, **k):
        raise AssertionError("called")

    monkeypatch.setattr(passes, "fold_constants", refuse)
    monkeypatch.setattr(tables, "fold_constant_operands", refuse)
    monkeypatch.setattr(tables, "fold_self_products", refuse)
    g = onnx_import.import_onnx(chain_model("qlinear_add", 5), SUPPORTED)
    assert [n.op for n in g.nodes] == ["com.microsoft:QLinearAdd"] * 5
