"""onnx.reference never runs a model (issue 25): every default-domain op onnx.reference implements either has a
kernel of vkinfer's own or is refused by name when the model is imported, and nothing in vkinfer/ imports
onnx.reference (it is an oracle in tests only)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from vkinfer.model import host_float
from vkinfer.model.onnx_import import UnsupportedModelError, import_onnx
from vkinfer.model.op_table import OPS

ROOT = Path(__file__).resolve().parents[2]


def _reference_op_names() -> list[str]:
    """Default-domain ops onnx.reference runs: its op classes and the ops defined by an ONNX function."""
    from onnx.reference.ops import _op_list, load_op

    load_op("", "Abs")  # builds onnx.reference's registry
    names = set(_op_list._registered_operators or ())
    names |= {s.name for s in onnx.defs.get_all_schemas() if s.domain == "" and
              (s.has_function or s.has_context_dependent_function)}
    return sorted(n for n in names - {"Constant", "OpRun", "OpFunction"} if n[:1].isupper())


def _uses_reference(kernel) -> bool:
    """The kernel (or a wrapper around one, through its closure) comes from onnx.reference."""
    seen, todo = set(), [kernel]
    while todo:
        k = todo.pop()
        if id(k) in seen or not callable(k):
            continue
        seen.add(id(k))
        if (getattr(k, "__module__", "") or "").startswith("onnx.reference"):
            return True
        todo.extend(getattr(c, "cell_contents", None) for c in getattr(k, "__closure__", None) or ())
    return False


def test_every_reference_op_has_an_own_kernel_or_is_refused():
    names = _reference_op_names()
    assert len(names) > 150 and "Relu" in names
    for op in names:
        if op in OPS:
            assert not _uses_reference(OPS[op]), f"{op} runs through onnx.reference"
        else:
            assert op in host_float.REFUSED, f"{op}: neither a kernel of vkinfer's own nor listed as refused"
    assert not host_float.REFUSED & set(OPS), "a refused op has a kernel"
    # The ops of a real quantized CNN / detector / OCR / audio model between its quantized ops have their own.
    for op in ("Sub", "Div", "Exp", "Log", "Sqrt", "Shape", "Range", "ConstantOfShape", "TopK", "NonZero",
               "NonMaxSuppression", "GatherND", "ScatterND", "CumSum", "Upsample", "InstanceNormalization",
               "ReduceL2", "GlobalMaxPool", "Where", "ArgMax", "Mod", "Equal", "Not", "Softplus", "Gelu"):
        assert op in OPS and not _uses_reference(OPS[op]), op


def test_no_kernel_is_onnx_reference():
    assert not {op for op, k in OPS.items() if _uses_reference(k)}
    assert not hasattr(host_float, "reference_kernel")


def test_no_onnx_reference_import_in_vkinfer():
    """onnx.reference is imported nowhere in vkinfer/."""
    hits = []
    for path in (ROOT / "vkinfer").rglob("*.py"):
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"^\s*(from onnx\.reference|import onnx\.reference|from onnx import reference)", line):
                hits.append((path.relative_to(ROOT).as_posix(), i))
    assert not hits, hits


def test_importing_vkinfer_does_not_load_onnx_reference():
    """Creating the op table (importing the session) does not import onnx.reference (it cost 90 ms before)."""
    code = "import sys, vkinfer.session; print('onnx.reference' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False", out


def _dq_model(op: str, attrs: dict | None = None, n_in: int = 1) -> onnx.ModelProto:
    """x (uint8) -> DequantizeLinear -> op(xf, ...) -> float output."""
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
             numpy_helper.from_array(np.array(128, np.uint8), "z")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"]),
             helper.make_node(op, ["xf"] * n_in, ["y"], name="the_node", **(attrs or {}))]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, (1, 4, 8, 8))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", onnx.defs.onnx_opset_version())])


@pytest.mark.parametrize("op", sorted(host_float.REFUSED & set(_reference_op_names())))
def test_refused_ops_are_named_at_import(op):
    """Each refused op fails at import with UnsupportedModelError (a ValueError) naming the node and the op."""
    attrs = {"kernel_shape": [2, 2]} if op == "LpPool" else {}  # the attribute check runs first
    schema = onnx.defs.get_schema(op) if onnx.defs.has(op) else None  # AttributeHasValue: onnx.reference's only
    n_in = 1 if schema is None else min(max(schema.min_input, 1), schema.max_input)  # 0 for RandomNormal
    with pytest.raises(UnsupportedModelError, match=re.escape(f"the_node ({op}): op not supported")):
        import_onnx(_dq_model(op, attrs, n_in), {name: None for name in OPS})


def test_refused_op_through_the_session_and_cli(tmp_path, capsys):
    """The session and `vkinfer info` name a refused op (here Einsum and DFT)."""
    import vkinfer
    from vkinfer import cli

    for op, attrs, n_in in (("Einsum", {"equation": "ij->ji"}, 1), ("DFT", {}, 1)):
        m = _dq_model(op, attrs, n_in)
        with pytest.raises(ValueError, match=re.escape(f"the_node ({op}): op not supported")):
            vkinfer.InferenceSession(m.SerializeToString(), device="cpu")
        path = tmp_path / f"{op}.onnx"
        onnx.save(m, path)
        rc = cli.main(["info", str(path), "--device", "cpu"])
        out = capsys.readouterr()
        assert rc != 0 and f"the_node ({op}): op not supported" in out.out + out.err
