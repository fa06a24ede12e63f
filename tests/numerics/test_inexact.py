"""The float ops vkinfer cannot promise bit-equal to ONNX Runtime's (vkinfer/model/inexact.py): every entry names a
test that exists, and `vkinfer info` names each such node of a model, with its reason and bound, a folded table
included; a model of exact ops gets no such list."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from ops._build import model, node

from vkinfer.cli import main
from vkinfer.model.inexact import INEXACT, inexact_nodes
from vkinfer.model.op_table import OPS

ROOT = Path(__file__).resolve().parents[2]
F32 = np.float32


@pytest.mark.parametrize("op", sorted(INEXACT))
def test_each_entry_names_a_test_that_exists_and_a_known_op(op):
    entry = INEXACT[op]
    path, _, func = entry.test.partition("::")
    src = (ROOT / path).read_text()
    assert re.search(rf"^def {re.escape(func)}\(", src, re.M), f"{op}: {entry.test} is not a test function"
    assert op in OPS, f"{op} is not an op vkinfer runs"
    assert entry.reason and entry.bound


def _dq_model(chain: list, out_q: bool):
    """uint8 x -> DequantizeLinear -> `chain` (ops on 'f') -> y (float, or through a QuantizeLinear)."""
    nodes = [node("DequantizeLinear", ["x", "s", "z"], ["f"], name="dq")]
    prev = "f"
    for i, (op, extra) in enumerate(chain):
        out = f"t{i}"
        nodes.append(node(op, [prev, *extra], [out], name=f"{op.lower()}_{i}"))
        prev = out
    consts = {"s": F32(0.05), "z": np.uint8(128), "two": F32(2.0)}
    if out_q:
        nodes.append(node("QuantizeLinear", [prev, "s", "z"], ["y"], name="q"))
        outs = {"y": np.uint8}
    else:
        nodes.append(node("Identity", [prev], ["y"], name="id"))
        outs = {"y": F32}
    return model(nodes, {"x": (np.uint8, (1, 3, 4, 4))}, consts, outs)


def _info(tmp_path, blob: bytes, capsys) -> str:
    path = tmp_path / "m.onnx"
    path.write_bytes(blob)
    assert main(["info", str(path), "--device", "cpu"]) == 0
    return capsys.readouterr().out


def test_info_names_an_inexact_float_op_with_reason_and_bound(tmp_path, capsys):
    out = _info(tmp_path, _dq_model([("Atan", [])], out_q=False), capsys)
    assert "float ops not bit-exact with ONNX Runtime: 1" in out, out
    section = out.split("float ops not bit-exact with ONNX Runtime")[1]
    line = next(ln for ln in section.splitlines() if "(Atan)" in ln)
    assert INEXACT["Atan"].bound in line and INEXACT["Atan"].test in line


def test_info_names_a_table_folded_from_an_inexact_op(tmp_path, capsys):
    blob = _dq_model([("Softsign", []), ("Mul", ["two"])], out_q=True)
    import vkinfer

    sess = vkinfer.InferenceSession(blob, device="cpu")
    tables = [n for n in sess.graph.nodes if n.op == "vkinfer:Table"]
    assert tables and tables[0].attrs["folded_ops"] == ["Softsign", "Mul"]
    assert [n.name for n, _ in inexact_nodes(sess.graph)] == [tables[0].name]
    out = _info(tmp_path, blob, capsys)
    assert "float ops not bit-exact with ONNX Runtime: 1" in out and INEXACT["Softsign"].bound in out


def test_info_lists_nothing_for_exact_float_ops(tmp_path, capsys):
    out = _info(tmp_path, _dq_model([("Mul", ["two"]), ("Sqrt", [])], out_q=False), capsys)
    assert "not bit-exact" not in out, out


def test_conditional_entries_name_only_their_nodes():
    """Resize is inexact only as nearest with half_pixel_symmetric (tests/ops/test_float_resize.py pins it)."""
    from vkinfer.model.graph import Node
    from vkinfer.model.inexact import why_inexact

    def resize(**attrs):
        return Node("Resize", "r", ["x"], ["y"], attrs)
    hps = "half_pixel_symmetric"
    assert why_inexact(resize(mode="nearest", coordinate_transformation_mode=hps)) is INEXACT["Resize"]
    assert why_inexact(resize(mode=b"nearest", coordinate_transformation_mode=b"half_pixel_symmetric")) is not None
    assert why_inexact(resize(mode="linear", coordinate_transformation_mode="half_pixel_symmetric")) is None
    assert why_inexact(resize(mode="nearest")) is None
    assert why_inexact(resize()) is None
