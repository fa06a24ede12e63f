"""Adding an op is its file (issue 24 item 5): a new 8-bit unary op defined in one new module of vkinfer.reference,
and nothing else, is imported, costed, and lowered to a table lookup on the CPU and Vulkan, giving its numpy
definition's bits on every device.

The module is written to a temporary folder appended to vkinfer.reference's search path in a fresh interpreter,
before anything reads the definitions (the package's own folder stays untouched, so parallel tests are unaffected).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from vkinfer.reference._opdef import OpDef

ROOT = Path(__file__).resolve().parents[2]

# The whole op: its numpy definition (a negation, saturated) and its OpDef. No other file names it.
OP_FILE = '''
"""vkinfer:QLinearNegate (a test op): y = quantize(-dequantize(x)) with x's and y's (scale, zero point)."""
import numpy as np

from vkinfer.reference._lookup import apply_table, build_table, unary_params
from vkinfer.reference._opdef import OpDef


def qlinear_negate(x, x_scale, x_zero_point, y_scale, y_zero_point):
    xs, xz, ys, yz = unary_params(x, x_scale, x_zero_point, y_scale, y_zero_point)
    return apply_table(x, build_table(x.dtype, xs, xz, ys, yz, lambda v: -v))


def _unary(node, consts):
    p = [consts.get(n) if n else None for n in node.inputs]
    return lambda x: qlinear_negate(x, *p[1:5])


DEFINITIONS = (OpDef("vkinfer:QLinearNegate", lambda node, x, memo: [qlinear_negate(*x[:5])], "elementwise",
                     (5, (0, 1, 3)), y_params=(3, 4), unary=_unary),)
'''

SCRIPT = '''
import sys
import numpy as np
import vkinfer.reference as ref
ref.__path__.append(sys.argv[1])
import vkinfer
from onnx import TensorProto, helper, numpy_helper
from vkinfer.dispatch.costs import OP_CLASS

consts = {"xs": np.float32(0.05), "xz": np.uint8(128), "ys": np.float32(0.04), "yz": np.uint8(120)}
node = helper.make_node("QLinearNegate", ["x", "xs", "xz", "ys", "yz"], ["y"], name="neg", domain="vkinfer")
g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 3, 5, 7])],
                      [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 3, 5, 7])],
                      initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("vkinfer", 1)])
x = np.arange(105, dtype=np.uint8).reshape(1, 3, 5, 7) * 2
# ONNX Runtime's table arithmetic written out in float32: dequantize (one multiply), negate, divide, round half
# to even, add the zero point, saturate.
deq = np.float32(0.05) * (x.astype(np.float32) - np.float32(128))
want = np.clip(np.rint(-deq / np.float32(0.04)) + 120, 0, 255).astype(np.uint8)
assert OP_CLASS["vkinfer:QLinearNegate"] == "elementwise"
for device in ("reference", "cpu", "vulkan"):
    sess = vkinfer.InferenceSession(m.SerializeToString(), device=device)
    [y] = sess.run(None, {"x": x})
    assert np.array_equal(y, want), (device, int((y != want).sum()))
    where = sess.placement["neg"]
    assert where.partition(":")[0] == {"reference": "host"}.get(device, device), (device, where)
    print(device, where)
'''


def test_a_new_table_op_is_one_file(tmp_path):
    (tmp_path / "qlinear_negate.py").write_text(textwrap.dedent(OP_FILE))
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    placed = dict(line.split() for line in r.stdout.splitlines())
    assert placed["cpu"] == "cpu" and placed["vulkan"].startswith("vulkan"), placed


def test_an_op_without_a_cost_class_fails_at_import():
    """An op the importers may emit but the dispatcher cannot price is an error when vkinfer.dispatch.costs loads
    (not a silent "elementwise", not a failure on the first model that uses it); a definition with a class that
    does not exist is refused when it is made."""
    script = ("from vkinfer.model.op_table import OPS\n"
              "OPS['vkinfer:Unpriced'] = OPS['Identity']\n"
              "try:\n"
              "    import vkinfer.dispatch.costs\n"
              "except ImportError as e:\n"
              "    print(e)\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and "ops without a cost class: ['vkinfer:Unpriced']" in r.stdout, r.stdout + r.stderr
    with pytest.raises(ValueError, match="cost class 'fast'"):
        OpDef("vkinfer:X", lambda node, x, memo: x, "fast", (1, (0,)))
