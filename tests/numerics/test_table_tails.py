"""A float chain whose result depends on the element's position is not folded into a table (vkinfer/model/tables.py):
ORT computes Log, Sin, Elu, Softplus... on a tensor's last len % 4 elements with the C library's functions and on
the rest with Eigen's packets (vkinfer/model/host_eigen.py). Where the two quantize to different bytes no single
256-entry table is ORT's at every position, so the chain runs op by op, and every device gives ORT's bytes at both
kinds of position. A chain whose two paths agree is still one table."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.agree import run_devices

import vkinfer
from vkinfer.model.tables import TABLE
from vkinfer.testing.zoo import ort_run

# DQ(uint8; s, z) -> Log -> Q(t, zq): found by search, one input byte where Eigen's plog and glibc's logf quantize
# one step apart (about 1 parameter set in 20000); zero point 0, so no byte dequantizes below 0 (Log of a negative
# value is NaN, which keeps any chain from folding).
SPLIT = (np.float32(0.18310464918613434), 0, np.float32(0.02632717788219452), 168)
AGREE = (np.float32(0.05), 0, np.float32(0.02), 100)


def _model(params, n: int):
    s, z, t, zq = params
    inits = [numpy_helper.from_array(np.array(v, dt), k)
             for k, v, dt in (("s", s, np.float32), ("z", z, np.uint8), ("t", t, np.float32), ("zq", zq, np.uint8))]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["xf"], name="dq"),
             helper.make_node("Log", ["xf"], ["lf"], name="log"),
             helper.make_node("QuantizeLinear", ["lf", "t", "zq"], ["y"], name="q")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [n])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [n])], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)


def _split_code(params) -> int:
    """The input byte whose Log quantizes differently on the two paths."""
    from vkinfer.model.host_eigen import eigen_log, libm

    s, z, t, zq = params
    codes = np.arange(z + 1, 256)
    x = (s * (codes - z).astype(np.float32)).astype(np.float32)
    q = [np.clip(np.rint(f(x) / t) + zq, 0, 255) for f in (eigen_log, libm("logf"))]
    (hit,) = np.nonzero(q[0] != q[1])
    assert hit.size, "the parameters no longer split the two paths"
    return int(codes[hit[0]])


@pytest.mark.parametrize("n", [5, 7, 8])
def test_position_dependent_chain_is_not_a_table_and_equals_ort(n):
    import vkinfer.model.op_table  # noqa: F401  (host_eigen's kernels register through the op table)

    c = _split_code(SPLIT)
    x = np.full(n, c, np.uint8)  # the byte at packet positions and (n % 4 != 0) at the tail
    blob = _model(SPLIT, n)
    want = ort_run(blob, {"x": x})
    if n % 4:
        assert want[0][0] != want[0][-1], "ORT's tail element should differ from its packet elements"
    run_devices(blob, {"x": x}, want=want)
    ops = [nd.op for nd in vkinfer.InferenceSession(blob, device="reference").graph.nodes]
    assert TABLE not in ops and "Log" in ops, ops


def test_chain_whose_paths_agree_is_one_table():
    blob = _model(AGREE, 7)
    x = np.arange(7, dtype=np.uint8) * 30 + 11
    run_devices(blob, {"x": x}, want=ort_run(blob, {"x": x}))
    ops = [nd.op for nd in vkinfer.InferenceSession(blob, device="reference").graph.nodes]
    assert ops == [TABLE], ops
