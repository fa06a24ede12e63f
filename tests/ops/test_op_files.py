"""Every op a device lowering takes has its tests/ops/test_<op>.py (issue 24: each op found by its file name), so
a new lowering cannot land without its shape table, placement check and bad-input test."""

from __future__ import annotations

import re
from pathlib import Path

from vkinfer.model.lowering import lowered_ops

HERE = Path(__file__).parent
# Ops tested in their family's file (the fused or two-input form of the op the file is named after).
FAMILY = {"vkinfer:QGemmClamp": "qgemm", "vkinfer:Table2": "table", "LSTM": "lstm", "vkinfer:LSTMState": "lstm",
          "GatherElements": "gather",
          "MatMul": "float_matmul", "Gemm": "float_matmul", "Conv": "float_conv",
          "vkinfer:QDQConvTranspose": "float_conv_transpose"} | {
    op: "float_elementwise" for op in ("Add", "Sub", "Mul", "Div", "Max", "Min", "PRelu", "Relu", "LeakyRelu", "Clip",
                                       "Neg", "Abs", "Sqrt")} | {
    op: "float_reduce" for op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")} | {
    op: "float_unary" for op in ("HardSigmoid", "HardSwish", "Sigmoid", "Tanh", "Erf")}
FAMILY |= {"Pow": "float_pow", "Softmax": "float_softmax", "LogSoftmax": "float_softmax"}
FAMILY |= {"ArgMax": "argmax", "ArgMin": "argmax"}  # 8-bit ReduceMax/ReduceMin: test_byte_reduce.py as well
FAMILY |= {"AveragePool": "float_average_pool"}
FAMILY |= {"Exp": "float_unary", "Log": "float_unary", "GlobalMaxPool": "float_max_pool"}
FAMILY |= {op: "float_compare" for op in ("Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or",
                                    "Xor", "Not")}


def op_file(op: str) -> str:
    """The <op> of an op's tests/ops/test_<op>.py, e.g. 'com.microsoft:QLinearGlobalAveragePool' ->
    'qlinear_global_average_pool'."""
    if op in FAMILY:
        return FAMILY[op]
    name = op.split(":")[-1]
    for word, flat in (("QLinear", "Qlinear"), ("QGemm", "Qgemm"), ("TFLite", "Tflite"), ("MatMul", "Matmul")):
        name = name.replace(word, flat)
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_every_lowered_op_has_its_test_file():
    ops = lowered_ops("cpu") | lowered_ops("vulkan")
    assert len(ops) >= 37, sorted(ops)
    missing = sorted(f"{op} -> test_{op_file(op)}.py" for op in ops
                     if not (HERE / f"test_{op_file(op)}.py").is_file())
    assert not missing, missing
