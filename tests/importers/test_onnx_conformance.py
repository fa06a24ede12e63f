"""ONNX's own conformance cases for the quantized ops (regenerated with onnx.backend.test.case,
since the onnx wheel no longer ships backend/test/data/node) through vkinfer.InferenceSession on
every device, compared exactly with the expected outputs. Cases with types vkinfer does not run
are listed with the reason, and that list is itself checked so nothing drops out silently."""

import warnings

import pytest
from support.agree import run_devices

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from onnx.backend.test.case.node import collect_testcases

    ALL = collect_testcases()

QUANT = [c for c in ALL if c.name.startswith(("test_qlinearconv", "test_qlinearmatmul", "test_quantizelinear",
                                              "test_dequantizelinear", "test_maxpool_2d_uint8", "test_convinteger",
                                              "test_matmulinteger", "test_dynamicquantizelinear",
                                              "test_clip_default_int8"))]
# Why each unsupported case is out of scope: vkinfer runs uint8/int8 tensors with float32 scales. Keys are whole
# "_"-separated tokens of a case name ("int4" does not match "uint4").
UNSUPPORTED = {
    "float16": "float16 scales/outputs", "e4m3fn": "float8 types", "e5m2": "float8 types", "uint16": "16-bit types",
    "int16": "16-bit types", "uint4": "4-bit types", "int4": "4-bit types", "uint2": "2-bit types",
    "int2": "2-bit types", "float4e2m1": "float4 types",
}
# Cases whose name does not say their type: the reason, by name.
UNSUPPORTED_CASES = {"test_quantizelinear_blocked_symmetric": "16-bit types (output_dtype int16)"}


def _reason(name: str) -> str | None:
    """Why a case is not run (the reasons of its unsupported tokens, in name order), or None."""
    if name in UNSUPPORTED_CASES:
        return UNSUPPORTED_CASES[name]
    reasons = [UNSUPPORTED[t] for t in name.removeprefix("test_").split("_") if t in UNSUPPORTED]
    return "; ".join(dict.fromkeys(reasons)) or None


SUPPORTED = [c for c in QUANT if _reason(c.name) is None]

# With the pinned onnx (requirements.txt), exactly these cases run, and exactly these are left out, for these reasons.
# The expanded cases are the ops' function bodies (float ReduceMin/ReduceMax/Min/Max/Div/Round, saturating Cast,
# Less/Where on int8), which run on the host (vkinfer/model/host_float.py); the blocked ones are opset-21 blocked
# quantization.
EXPECTED_RUN = [
    "test_clip_default_int8_inbounds", "test_clip_default_int8_max", "test_clip_default_int8_min",
    "test_clip_default_int8_inbounds_expanded", "test_clip_default_int8_max_expanded",
    "test_clip_default_int8_min_expanded",
    "test_convinteger_with_padding", "test_convinteger_without_padding", "test_dequantizelinear",
    "test_dequantizelinear_axis", "test_dequantizelinear_blocked", "test_dynamicquantizelinear",
    "test_dynamicquantizelinear_max_adjusted", "test_dynamicquantizelinear_min_adjusted",
    "test_dynamicquantizelinear_expanded", "test_dynamicquantizelinear_max_adjusted_expanded",
    "test_dynamicquantizelinear_min_adjusted_expanded", "test_matmulinteger", "test_maxpool_2d_uint8",
    "test_qlinearconv", "test_qlinearmatmul_2D_int8_float32", "test_qlinearmatmul_2D_uint8_float32",
    "test_qlinearmatmul_3D_int8_float32", "test_qlinearmatmul_3D_uint8_float32", "test_quantizelinear",
    "test_quantizelinear_axis", "test_quantizelinear_blocked_asymmetric",
]
EXPECTED_NOT_RUN = {
    "test_quantizelinear_blocked_symmetric": "16-bit types (output_dtype int16)",
    **dict.fromkeys(["test_dequantizelinear_e4m3fn", "test_dequantizelinear_e4m3fn_zero_point",
                     "test_dequantizelinear_e5m2", "test_quantizelinear_e4m3fn", "test_quantizelinear_e5m2"],
                    "float8 types"),
    "test_dequantizelinear_e4m3fn_float16": "float8 types; float16 scales/outputs",
    **dict.fromkeys(["test_qlinearmatmul_2D_int8_float16", "test_qlinearmatmul_2D_uint8_float16",
                     "test_qlinearmatmul_3D_int8_float16", "test_qlinearmatmul_3D_uint8_float16"],
                    "float16 scales/outputs"),
    **dict.fromkeys(["test_dequantizelinear_float4e2m1", "test_quantizelinear_float4e2m1"], "float4 types"),
    **dict.fromkeys(["test_dequantizelinear_int16", "test_dequantizelinear_uint16", "test_quantizelinear_int16",
                     "test_quantizelinear_uint16"], "16-bit types"),
    **dict.fromkeys(["test_dequantizelinear_int4", "test_dequantizelinear_uint4", "test_quantizelinear_int4",
                     "test_quantizelinear_uint4"], "4-bit types"),
    **dict.fromkeys(["test_dequantizelinear_int2", "test_dequantizelinear_uint2", "test_quantizelinear_int2",
                     "test_quantizelinear_uint2"], "2-bit types"),
}


def test_exactly_the_expected_cases_run_or_are_left_out():
    """Every quantized-op case of the pinned onnx is either run (EXPECTED_RUN) or left out with its reason
    (EXPECTED_NOT_RUN), and nothing else: a case that appears, disappears or changes side fails here."""
    not_run = {c.name: _reason(c.name) for c in QUANT if c not in SUPPORTED}
    assert not_run == EXPECTED_NOT_RUN
    assert sorted(c.name for c in SUPPORTED) == sorted(EXPECTED_RUN)
    assert len(QUANT) == len(EXPECTED_RUN) + len(EXPECTED_NOT_RUN) == len({c.name for c in QUANT})
    assert len(SUPPORTED) == 27  # every in-scope case runs (and passes: test_conformance_case)
    # Every key is used: no reason is dead, and each matches whole tokens only.
    used = {t for n in EXPECTED_NOT_RUN for t in n.removeprefix("test_").split("_")}
    assert set(UNSUPPORTED) <= used
    assert _reason("test_quantizelinear_uint4") == "4-bit types" and _reason("test_x_int4ish") is None
    assert all(c.data_sets for c in SUPPORTED)  # each run case compares something
    print("\n".join(f"not run: {n}: {why}" for n, why in sorted(not_run.items())))


@pytest.mark.parametrize("case", SUPPORTED, ids=[c.name for c in SUPPORTED])
def test_conformance_case(case):
    """Every device, the same bits, equal to the case's expected outputs."""
    names = [i.name for i in case.model.graph.input if i.name not in {t.name for t in case.model.graph.initializer}]
    assert case.data_sets
    for inputs, outputs in case.data_sets:
        run_devices(case.model, dict(zip(names, inputs, strict=True)), want=outputs)
