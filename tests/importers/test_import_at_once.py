"""The ONNX import reads initializers and nodes field by field for the whole graph at once
(onnx_import._initializers_at_once, _nodes_at_once) and gives up, for the one-at-a-time reading, on anything odd.
Both ways give the same graph (nodes, names, attributes with their types, constants with their dtypes, shapes and
bytes, inputs, outputs, meta) or the same error, message included: on the zoo models, the load chains, their
seeded mutants (tests/importers/test_mutations.py) and models made to be odd (nodes without names or of one name,
Constant nodes, attributes of every type, external data, initializers that are not plain raw data)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.load_chains import chain_model

from importers.test_mutations import _onnx_bases, _onnx_bytes_case, _onnx_proto_case
from vkinfer.model import onnx_import
from vkinfer.model.op_table import OPS
from vkinfer.testing.onnx_builder import MS, OPSET, ir_version

SUPPORTED = {name: None for name in OPS}


def _canon(v):
    """An attribute or constant as comparable values, its type included."""
    if isinstance(v, np.ndarray):
        return ("array", v.dtype.str, v.shape, v.tobytes(), v.flags.writeable, v.flags.c_contiguous)
    if isinstance(v, list | tuple):
        return (type(v).__name__, tuple(_canon(x) for x in v))
    if isinstance(v, dict):
        return ("dict", tuple((k, _canon(x)) for k, x in v.items()))
    if isinstance(v, float) and v != v:
        return ("float", "nan")
    if hasattr(v, "SerializeToString"):
        return (type(v).__name__, v.SerializeToString())
    return (type(v).__name__, v)


def _outcome(model, at_once: bool, monkeypatch, external_data_dir=None) -> tuple:
    """The graph import_onnx makes of `model` as comparable values (attributes in their order), or its error's
    type and message. `at_once`: False takes the one-at-a-time reading only (the general path)."""
    with monkeypatch.context() as m:
        if not at_once:
            m.setattr(onnx_import, "_initializers_at_once", lambda *a: (None, []))
            m.setattr(onnx_import, "_nodes_at_once", lambda *a: None)
        try:
            g = onnx_import.import_onnx(model, SUPPORTED, external_data_dir)
        except Exception as e:  # noqa: BLE001 - the outcome compared
            return ("error", type(e).__name__, str(e))
    return (tuple((n.op, n.name, tuple(n.inputs), tuple(n.outputs), _canon(n.attrs)) for n in g.nodes),
            repr(g.inputs), repr(g.outputs), tuple((k, _canon(v)) for k, v in g.consts.items()), _canon(g.meta))


def _used(model) -> tuple[bool, bool]:
    """Whether the import of `model` got its initializers and its nodes the at-once way."""
    m = onnx.load_model_from_string(model) if isinstance(model, bytes) else model
    kinds: dict = {}
    opset = next((o.version for o in m.opset_import if o.domain in ("", "ai.onnx")), None)
    consts, _ = onnx_import._initializers_at_once(m.graph)
    nodes = onnx_import._nodes_at_once(m.graph, opset, SUPPORTED, dict(consts or {}), kinds)
    return consts is not None, nodes is not None


def _model(nodes, inits=(), inputs=(("x", TensorProto.UINT8, [1, 4, 3, 5]),), outputs=None) -> onnx.ModelProto:
    outputs = outputs or [(nodes[-1].output[0], TensorProto.UINT8, None)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs], list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET),
                                            *(helper.make_opsetid(d, v) for d, v in MS.items())])
    m.ir_version = ir_version(OPSET, MS)
    return m


def _params() -> list[TensorProto]:
    return [numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.uint8(128), "z"),
            numpy_helper.from_array(np.float32(0.1), "s_out")]


def _qadd(x: str, b: str, y: str, name: str | None) -> onnx.NodeProto:
    return helper.make_node("QLinearAdd", [x, "s", "z", b, "s", "z", "s_out", "z"], [y], name,
                            domain="com.microsoft")


def _odd_models() -> dict[str, onnx.ModelProto]:
    """Models the at-once reading must read as the general one does, or leave to it."""
    rng = np.random.default_rng(0)
    b = numpy_helper.from_array(rng.integers(0, 256, (1, 4, 3, 5), dtype=np.uint8), "b")
    out: dict[str, onnx.ModelProto] = {}
    # names: none, some, clashing with the names made for the others, two alike
    for label, names in {"unnamed": [None, None, None], "some unnamed": ["QLinearAdd_1", None, "a"],
                         "made name taken": [None, "QLinearAdd_0", "QLinearAdd_0_1"],
                         "two alike": ["a", "b", "a"], "empty and alike": [None, "a", "a"]}.items():
        nodes = [_qadd(f"x{k}" if k else "x", "b", f"x{k + 1}", n) for k, n in enumerate(names)]
        out[f"names: {label}"] = _model(nodes, [*_params(), b])
    # a Constant node (its output a constant for the nodes after it), and one without a value
    c = helper.make_node("Constant", [], ["bc"], "c", value=numpy_helper.from_array(np.full((1, 4, 3, 5), 7, np.uint8)))
    out["constant"] = _model([c, _qadd("x", "bc", "y", "q")], _params())
    out["constant without value"] = _model([helper.make_node("Constant", [], ["bc"], "c", value_float=1.0),
                                            _qadd("x", "b", "y", "q")], [*_params(), b])
    # attributes of every type (on a Transpose, read as its attributes; most are then refused by the checks)
    values = {"perm": [0, 2, 3, 1], "i": 3, "f": 0.5, "s": b"text", "t": numpy_helper.from_array(np.int8(1)),
              "floats": [1.0, 2.5], "strings": [b"a", b"b"], "tensors": [numpy_helper.from_array(np.int8(1))],
              "big": 2 ** 40, "bigs": [1, 2 ** 40],
              "empty ints": helper.make_attribute("e", [], attr_type=onnx.AttributeProto.INTS)}
    for k, v in values.items():
        node = helper.make_node("Transpose", ["x"], ["y"], "t", **({} if k == "perm" else {"perm": [0, 2, 3, 1]}))
        node.attribute.append(v if isinstance(v, onnx.AttributeProto) else helper.make_attribute(k, v))
        out[f"attribute {k}"] = _model([node], outputs=[("y", TensorProto.UINT8, None)])
    g_attr = helper.make_node("Transpose", ["x"], ["y"], "t", perm=[0, 2, 3, 1])
    g_attr.attribute.append(helper.make_attribute("body", helper.make_graph([], "b", [], [])))
    out["attribute graph"] = _model([g_attr])
    unknown = helper.make_node("Transpose", ["x"], ["y"], "t", perm=[0, 2, 3, 1])
    unknown.attribute.append(onnx.AttributeProto(name="u", type=onnx.AttributeProto.UNDEFINED))
    out["attribute undefined"] = _model([unknown])
    ref = helper.make_node("Transpose", ["x"], ["y"], "t", perm=[0, 2, 3, 1])
    ref.attribute.append(onnx.AttributeProto(name="r", type=onnx.AttributeProto.INT, ref_attr_name="outer"))
    out["attribute referring to a function's"] = _model([ref])  # (unreadable: get_attribute_value raises)
    dup = helper.make_node("Transpose", ["x"], ["y"], "t", perm=[0, 2, 3, 1])
    dup.attribute.append(helper.make_attribute("perm", [0, 3, 1, 2]))
    out["attribute twice"] = _model([dup])
    # too many inputs or outputs, a missing output
    out["too many inputs"] = _model([helper.make_node("Transpose", ["x", "x"], ["y"], "t", perm=[0, 2, 3, 1])])
    out["too many outputs"] = _model([helper.make_node("QLinearAdd", ["x", "s", "z", "b", "s", "z", "s_out", "z"],
                                                       ["y", "y2"], "q", domain="com.microsoft")],
                                     [*_params(), b], outputs=[("y", TensorProto.UINT8, None)])
    out["too many inputs on a Relu between DQ and Q"] = _model(
        [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"], "dq"),
         helper.make_node("Relu", ["xf", "xf"], ["r"], "relu"),
         helper.make_node("QuantizeLinear", ["r", "s", "z"], ["y"], "q")], _params())
    out["no output"] = _model([helper.make_node("Transpose", ["x"], [], "t", perm=[0, 2, 3, 1]),
                               helper.make_node("Transpose", ["x"], ["y"], "t2", perm=[0, 2, 3, 1])])
    # the annotated ops: Softmax before opset 13, MatMul with an initializer B (QDQ around them)
    f = [numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.uint8(128), "z"),
         numpy_helper.from_array(rng.standard_normal((5, 5)).astype(np.float32), "wm")]
    qdq = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"], "dq"),
           helper.make_node("MatMul", ["xf", "wm"], ["m"], "mm"),
           helper.make_node("Softmax", ["m"], ["sm"], "sm"),
           helper.make_node("QuantizeLinear", ["sm", "s", "z"], ["y"], "q")]
    out["matmul softmax"] = _model(qdq, f)
    old = _model(qdq, f)
    old.opset_import[0].version = 11
    out["softmax opset 11"] = old
    # a QDQ convolution whose kernel_shape contradicts its DequantizeLinear'd weights (checked at import)
    w = numpy_helper.from_array(rng.integers(-8, 9, (4, 4, 1, 1), dtype=np.int8), "w")
    conv = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"], "dq"),
            helper.make_node("DequantizeLinear", ["w", "s", "zw"], ["wf"], "dqw"),
            helper.make_node("Conv", ["xf", "wf"], ["c"], "conv", kernel_shape=[3, 3]),
            helper.make_node("QuantizeLinear", ["c", "s", "z"], ["y"], "q")]
    out["conv kernel_shape"] = _model(conv, [*_params(), w, numpy_helper.from_array(np.int8(0), "zw")])
    # initializers that are not plain raw data, or whose raw data does not fit their dims
    for label, edit in {"float_data": lambda t: t.CopyFrom(numpy_helper.from_array(np.float32(0.05), "s")) or
                        (t.ClearField("raw_data"), t.float_data.append(0.05)),
                        "short raw": lambda t: setattr(t, "raw_data", t.raw_data[:2]),
                        "empty raw": lambda t: setattr(t, "raw_data", b""),
                        "negative dim": lambda t: (t.ClearField("dims"), t.dims.append(-1)),
                        "two negative dims": lambda t: (t.ClearField("dims"), t.dims.extend([-1, -4])),
                        "negative dim and one": lambda t: (t.ClearField("dims"), t.dims.extend([-1, 1])),
                        "dim -2": lambda t: (t.ClearField("dims"), t.dims.append(-2)),
                        "long raw": lambda t: setattr(t, "raw_data", t.raw_data + b"\0\0\0\0"),
                        "zero dim": lambda t: (t.ClearField("dims"), t.dims.append(0)),
                        "segment": lambda t: t.segment.SetInParent(),
                        "unknown type": lambda t: setattr(t, "data_type", 99),
                        "string type": lambda t: setattr(t, "data_type", TensorProto.STRING)}.items():
        m = _model([_qadd("x", "b", "y", "q")], [*_params(), b])
        edit(m.graph.initializer[0])
        out[f"initializer {label}"] = m
    twice = _model([_qadd("x", "b", "y", "q")], [*_params(), b, numpy_helper.from_array(np.float32(0.5), "s")])
    out["initializer twice"] = twice
    types = _model([_qadd("x", "b", "y", "q")], [*_params(), b, *(
        numpy_helper.from_array((rng.standard_normal((2, 3)) * 50).astype(dt), f"t_{np.dtype(dt).name}")
        for dt in (np.float16, np.float64, np.int16, np.uint16, np.int32, np.int64, np.uint32, np.uint64, bool))])
    out["initializers of every raw type"] = types
    return out



@pytest.mark.parametrize("name", sorted(_odd_models()))
def test_odd_models_import_alike(name, monkeypatch):
    model = _odd_models()[name]
    assert _outcome(model, True, monkeypatch) == _outcome(model, False, monkeypatch)


def test_the_at_once_reading_is_used_where_it_can_be():
    """It reads the zoo models, the chains and unnamed nodes; it leaves Constant nodes, clashing names, odd
    initializers and unreadable attributes to the general reading."""
    odd = _odd_models()
    for name, m in [*_onnx_bases().items(), *((k, chain_model(k, 12)) for k in ("transpose", "qlinear_add",
                                                                                  "qlinear_conv", "qdq_conv"))]:
        assert _used(m)[1], name
    assert _used(chain_model("qlinear_add", 12)) == (True, True)
    assert _used(odd["names: unnamed"]) == (True, True)
    assert _used(odd["names: made name taken"]) == (True, True)
    assert _used(odd["initializers of every raw type"]) == (True, True)
    assert not _used(odd["names: two alike"])[1]
    assert not _used(odd["constant"])[1]
    assert not _used(odd["attribute referring to a function's"])[1]
    assert not _used(odd["too many inputs"])[1]
    assert not _used(odd["too many inputs on a Relu between DQ and Q"])[1]
    for label in ("float_data", "short raw", "empty raw", "segment", "unknown type", "negative dim and one",
                  "dim -2", "long raw", "zero dim"):
        assert not _used(odd[f"initializer {label}"])[0], label


def test_zoo_models_and_chains_import_alike(monkeypatch):
    models = {name: m.SerializeToString() for name, m in _onnx_bases().items()}
    models.update({kind: chain_model(kind, 12) for kind in ("transpose", "qlinear_add", "qlinear_conv", "qdq_conv")})
    for name, blob in models.items():
        got = _outcome(blob, True, monkeypatch)
        assert got[0] != "error", (name, got)
        assert got == _outcome(blob, False, monkeypatch), name


def test_mutants_import_alike(monkeypatch):
    """Seeded mutants of the zoo models (fields and bytes changed: test_mutations' cases) load alike or fail with
    the same error both ways."""
    bases = _onnx_bases()
    for seed in range(80):
        for case in (_onnx_proto_case, _onnx_bytes_case):
            what, blob = case(bases, seed)
            got = _outcome(blob, True, monkeypatch)
            assert got == _outcome(blob, False, monkeypatch), f"{case.__name__}[{seed}] {what}"


def test_external_data_imports_alike(tmp_path, monkeypatch):
    """An initializer in an external file: the at-once reading leaves the model to the general one, which reads it
    from the folder given (and refuses it without one), both ways alike."""
    m = _model([_qadd("x", "b", "y", "q")], [*_params(), numpy_helper.from_array(
        np.arange(60, dtype=np.uint8).reshape(1, 4, 3, 5), "b")])
    onnx.save_model(m, str(tmp_path / "m.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.data", size_threshold=0)
    saved = onnx.load_model(str(tmp_path / "m.onnx"), load_external_data=False)
    assert not _used(saved)[0]
    got = _outcome(str(tmp_path / "m.onnx"), True, monkeypatch)
    assert got[0] != "error" and got == _outcome(str(tmp_path / "m.onnx"), False, monkeypatch)
    blob = saved.SerializeToString()
    refused = _outcome(blob, True, monkeypatch)
    assert refused[0] == "error" and refused == _outcome(blob, False, monkeypatch)
    assert _outcome(blob, True, monkeypatch, tmp_path) == got


def test_random_graphs_import_alike(monkeypatch):
    """Random QLinearAdd / Transpose graphs with random names (some empty, some alike, some like the names made
    for the unnamed), attributes and Constant nodes: the same outcome both ways."""
    rng = np.random.default_rng(7)
    for case in range(60):
        nodes, inits, x = [], [*_params()], "x"
        count = int(rng.integers(1, 12))
        pool = ["a", "b", "QLinearAdd_1", "Transpose_2", "Transpose_2_1", ""]
        for k in range(count):
            name = str(rng.choice(pool)) if rng.random() < 0.5 else f"n{k}"
            y = f"y{k}"
            r = rng.random()
            if r < 0.4:
                inits.append(numpy_helper.from_array(rng.integers(0, 256, (1, 4, 3, 5), dtype=np.uint8), f"b{k}"))
                nodes.append(_qadd(x, f"b{k}", y, name or None))
            elif r < 0.8:
                node = helper.make_node("Transpose", [x], [y], name or None, perm=[0, 1, 2, 3])
                if rng.random() < 0.2:
                    node.attribute.append(helper.make_attribute("extra", float(rng.random())))
                nodes.append(node)
            else:
                nodes.append(helper.make_node("Constant", [], [f"c{k}"], name or None,
                                              value=numpy_helper.from_array(np.full((1, 4, 3, 5), k, np.uint8))))
                nodes.append(_qadd(x, f"c{k}", y, f"q{k}"))
            x = y
        model = _model(nodes, inits, outputs=[(x, TensorProto.UINT8, None)])
        assert _outcome(model, True, monkeypatch) == _outcome(model, False, monkeypatch), case
