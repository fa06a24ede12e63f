"""ONNX Runtime as the independent oracle: single-node QLinearConv / QLinearMatMul models."""

from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from vkinfer.testing.onnx_builder import make_model


def _run(node, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray], y_dtype) -> np.ndarray:
    model = make_model([node], inputs, {"y": y_dtype}, consts)  # opset 13, IR 8 (ORT refuses the newest IRs)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)[0]


def qlinear_conv(x, xs, xzp, w, ws, wzp, ys, yzp, bias, strides, pads, dilations, group) -> np.ndarray:
    consts = {"xs": np.array(xs, np.float32), "xzp": np.array(xzp, x.dtype), "w": w,
              "ws": np.array(ws, np.float32), "wzp": np.array(wzp, w.dtype),
              "ys": np.array(ys, np.float32), "yzp": np.array(yzp)}
    names = ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp"]
    if bias is not None:
        consts["b"] = bias
        names.append("b")
    node = helper.make_node("QLinearConv", names, ["y"], strides=list(strides), pads=list(pads),
                            dilations=list(dilations), group=group, kernel_shape=list(w.shape[2:]))
    return _run(node, {"x": x}, consts, consts["yzp"].dtype)


def qlinear_matmul(a, as_, azp, b, bs, bzp, ys, yzp) -> np.ndarray:
    def col(v, dt):  # ORT wants per-column params shaped like b with K -> 1: (..., 1, N)
        v = np.array(v, dt)
        per_col = np.size(bs) > 1 or np.size(bzp) > 1
        if not per_col:
            return v
        return np.ascontiguousarray(np.broadcast_to(v.reshape(1, -1), (*b.shape[:-2], 1, b.shape[-1])))

    consts = {"as": np.array(as_, np.float32), "azp": np.array(azp, a.dtype), "b": b,
              "bs": col(bs, np.float32), "bzp": col(bzp, b.dtype),
              "ys": np.array(ys, np.float32), "yzp": np.array(yzp)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"], ["y"])
    return _run(node, {"a": a}, consts, consts["yzp"].dtype)




# --- Where ORT's bits depend on the CPU ---------------------------------------------------------------------------
# ORT's u8 x s8 GEMM (MLAS) is exact int32 arithmetic on ARM and on x86 with VNNI (vpdpbusd); on x86 with AVX2 and no
# VNNI it multiplies with vpmaddubsw, which adds each pair of products (k = 2i, 2i + 1) in saturating int16. Seen:
# exact on an Intel Xeon (Cascade Lake) and an AMD Zen 5 (AVX-512 VNNI); saturating on an AMD Zen 3 (AVX2) and under
# `qemu-x86_64-static -cpu Haswell`. vkinfer is exact everywhere; the tests find out which one ORT is here.
EXACT, SATURATING = "exact", "int16-saturating"
SOURCES = ("onnxruntime", "numpy-exact", "numpy-saturating")  # where the check logic takes "ORT's result" from


def u8s8_pair_saturated(a: np.ndarray, b: np.ndarray, a_zp: int = 0, b_zp=0) -> np.ndarray:
    """MatMulInteger(a uint8 (M, K), b int8 (K, N)) as ORT's x86 AVX2 (no VNNI) kernel computes it: sum over pairs
    of int16-saturated `a[k] b[k] + a[k+1] b[k+1]` (an odd last k alone), then the zero points applied through row
    and column sums, as MLAS does. b_zp: a scalar or one per column. int64 (M, N)."""
    a64, b64, b_zp = a.astype(np.int64), b.astype(np.int64), np.asarray(b_zp, np.int64)
    k = a.shape[1] // 2 * 2
    pairs = a64[:, None, 0:k:2] * b64.T[None, :, 0:k:2] + a64[:, None, 1:k:2] * b64.T[None, :, 1:k:2]
    acc = np.clip(pairs, -32768, 32767).sum(axis=2) + a64[:, k:] @ b64[k:]
    return acc - a_zp * b64.sum(axis=0)[None, :] - b_zp * a64.sum(axis=1)[:, None] + a.shape[1] * a_zp * b_zp


def u8s8_exact(a: np.ndarray, b: np.ndarray, a_zp: int = 0, b_zp=0) -> np.ndarray:
    """MatMulInteger by its definition: exact sum of (a - a_zp)(b - b_zp), b_zp a scalar or per column. int64."""
    return (a.astype(np.int64) - a_zp) @ (b.astype(np.int64) - np.asarray(b_zp, np.int64))


def matmul_integer(a: np.ndarray, b: np.ndarray, a_zp: int = 0, b_zp: int = 0) -> np.ndarray:
    """ONNX Runtime's MatMulInteger on this machine (one thread, no graph optimizations)."""
    node = helper.make_node("MatMulInteger", ["a", "b", "azp", "bzp"], ["y"])
    return _run(node, {"a": a}, {"b": b, "azp": np.array(a_zp, a.dtype), "bzp": np.array(b_zp, b.dtype)},
                np.int32)


def u8s8_behaviour_of(got: np.ndarray, exact: np.ndarray, saturated: np.ndarray) -> str:
    """EXACT or SATURATING: which of the two results `got` equals. Anything else is an AssertionError, and so are
    operands that do not tell the two apart."""
    assert not np.array_equal(exact, saturated), "the operands never saturate an int16 pair: they tell nothing"
    if np.array_equal(got, exact):
        return EXACT
    if np.array_equal(got, saturated):
        return SATURATING
    off = np.flatnonzero(got.ravel() != exact.ravel())
    raise AssertionError(f"ORT's u8 x s8 result is neither exact nor int16-pair saturated: {off.size} of {got.size} "
                         f"values differ from exact (first at flat index {off[0]})")


def _probe_operands() -> tuple[np.ndarray, np.ndarray, int, int]:
    rng = np.random.default_rng(5)
    a = rng.integers(0, 256, (16, 63)).astype(np.uint8)  # odd K: the unpaired last product too
    b = rng.integers(-128, 128, (63, 24)).astype(np.int8)
    return a, b, 10, -3


def probe_u8s8() -> str:
    """ORT's u8 x s8 behaviour on this machine, from one full-range MatMulInteger (see u8s8_behaviour)."""
    a, b, azp, bzp = _probe_operands()
    return u8s8_behaviour_of(matmul_integer(a, b, azp, bzp), u8s8_exact(a, b, azp, bzp),
                             u8s8_pair_saturated(a, b, azp, bzp))


@functools.cache
def u8s8_behaviour() -> str:
    """ORT's u8 x s8 behaviour on this machine: EXACT (VNNI, ARM) or SATURATING (x86 AVX2 without VNNI), measured
    once per process; anything else fails."""
    return probe_u8s8()


def u8s8_check(source: str, ort_result, exact: np.ndarray, saturated: np.ndarray) -> tuple[str, np.ndarray]:
    """The check logic's view of ORT's u8 x s8 result: `source` "onnxruntime" calls `ort_result()` and expects this
    machine's behaviour; "numpy-exact"/"numpy-saturating" stand in for a machine of the other kind with the result
    computed in numpy, so both branches run everywhere. Returns (behaviour, the result)."""
    if source == "onnxruntime":
        got, want = ort_result(), u8s8_behaviour()
    elif source in ("numpy-exact", "numpy-saturating"):
        got, want = (exact, EXACT) if source == "numpy-exact" else (saturated, SATURATING)
    else:
        raise ValueError(f"source must be one of {SOURCES}, not {source!r}")
    seen = u8s8_behaviour_of(got, exact, saturated)
    assert seen == want, f"ORT's u8 x s8 result is {seen} where this machine's ORT is {want}"
    return seen, got


__all__ = ["qlinear_conv", "qlinear_matmul", "matmul_integer", "u8s8_pair_saturated", "u8s8_exact", "u8s8_behaviour",
           "u8s8_behaviour_of", "u8s8_check", "probe_u8s8", "EXACT", "SATURATING", "SOURCES", "onnx"]
