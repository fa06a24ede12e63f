"""com.microsoft MatMulIntegerToFloat (what ONNX Runtime 1.31 makes of DequantizeLinear(a), DequantizeLinear(constant
b) -> MatMul with a float output; vkinfer/model/qdq_rules.py fold_matmul_to_float folds the same) against ORT bit
for bit on every device, natively (cpu_fallback/src/ops/qmatmul_f32.c via vkinfer/cpu/matmul_integer_to_float.py on
both devices), and the C operator under AddressSanitizer + UBSan. tests/importers/test_qdq_rules.py checks the fold
and the reference against ORT's QDQ graphs."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.numpy_helper
import pytest
from onnx import helper as h
from support import ort_oracle as oo
from support.agree import DEVICES, run_sessions

import vkinfer
from vkinfer.testing.onnx_builder import make_model


def exact(blob: bytes, x: np.ndarray) -> np.ndarray:
    """The exact arithmetic (int64 sums, one float32 multiply, the bias after), independent of vkinfer's."""
    g = onnx.load_model_from_string(blob).graph
    c = {t.name: onnx.numpy_helper.to_array(t) for t in g.initializer}
    acc = (x.astype(np.int64) - c["z"].astype(np.int64)) @ (c["w"].astype(np.int64) - c["wz"].astype(np.int64))
    y = acc.astype(np.float32) * (c["s"] * c["ws"]).astype(np.float32)
    return (y + c["b"]).astype(np.float32) if "b" in c else y.astype(np.float32)


def check(blob: bytes, dt) -> None:
    """ORT's bits on every device on random and edge (0/255) bytes (where ORT's x86 AVX2 u8 x s8 GEMM saturates
    int16 pair sums, tests/importers/test_onnx_extras.py, the exact arithmetic instead); the node runs in the
    native CPU graph."""
    import onnxruntime as ort

    o = ort.SessionOptions()
    o.intra_op_num_threads = 1
    s = ort.InferenceSession(blob, o, providers=["CPUExecutionProvider"])
    sessions = {d: vkinfer.InferenceSession(blob, device=d) for d in DEVICES}
    shape = [d.dim_value for d in onnx.load_model_from_string(blob).graph.input[0].type.tensor_type.shape.dim]
    rng = np.random.default_rng(sum(shape))
    for x in (rng.integers(0, 256, shape), np.where(rng.random(shape) < 0.5, 0, 255)):
        f = {"x": x.astype(np.uint8).view(dt)}
        want = s.run(None, f)
        assert np.array_equal(exact(blob, f["x"]).view(np.int32), want[0].view(np.int32)) or (
            oo.u8s8_behaviour() == oo.SATURATING), "ORT differs from the exact arithmetic on an exact CPU"
        run_sessions(sessions, f, want=[exact(blob, f["x"])])
    for device in ("cpu", "vulkan"):
        placed = sessions[device].placement
        assert placed.get("mm", "").split(":")[0] == "cpu", (device, placed)


def mitf_model(dt, wdt, per_column: bool, bias: bool, a_shape, seed: int = 0) -> bytes:
    """com.microsoft MatMulIntegerToFloat as ORT makes it of the QDQ MatMul (constant B, float output)."""
    rng = np.random.default_rng(seed)
    k, n = a_shape[-1], 7
    c = {"w": rng.integers(0, 256, (k, n)).astype(np.uint8).view(wdt), "s": np.array(0.037, np.float32),
         "ws": rng.uniform(0.001, 0.03, n if per_column else ()).astype(np.float32),
         "z": np.array(rng.integers(0, 256), np.uint8).view(dt),
         "wz": rng.integers(0, 256, n if per_column else ()).astype(np.uint8).view(wdt)}
    ins = ["x", "w", "s", "ws", "z", "wz"]
    if bias:
        c["b"] = (rng.standard_normal(n) * 3).astype(np.float32)
        ins.append("b")
    nodes = [h.make_node("MatMulIntegerToFloat", ins, ["y"], domain="com.microsoft", name="mm")]
    return make_model(nodes, {"x": (dt, list(a_shape))}, {"y": np.float32}, c, opset=19, ir=9).SerializeToString()


MITF = [(dt, wdt, pc, b) for dt, wdt in ((np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8))
        for pc in (False, True) for b in (False, True)]


@pytest.mark.parametrize("dt,wdt,per_column,bias", MITF, ids=[
    f"{d.__name__}-{w.__name__}-{'pc' if p else 'pt'}-{'bias' if b else 'nobias'}" for d, w, p, b in MITF])
def test_matmul_integer_to_float_native_equals_ort(dt, wdt, per_column, bias):
    """The op ORT makes of DQ -> MatMul with no Q runs natively (the CPU graph's qmatmul_f32 on both devices) with
    ORT's bits: 2-D and batched 3-D A, random and edge (0/255) bytes, per-tensor and per-column, bias or not."""
    for a_shape in ((1, 9), (2, 3, 40)):
        blob = mitf_model(dt, wdt, per_column, bias, a_shape, seed=len(a_shape))
        check(blob, dt)


MITF_DRIVER = r'''
import sys
import numpy as np
from vkinfer.cpu import graph as G

rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
for case, (rows, k, n, bias, off) in enumerate([(1, 1, 1, False, 0), (5, 37, 9, True, 1), (3, 300, 4, False, 1)]):
    a = rng.integers(0, 256, (rows, k)).astype(np.uint8)
    b = rng.integers(0, 256, (k, n)).astype(np.uint8)
    bz = rng.integers(0, 256, n).astype(np.uint32)
    scale = rng.uniform(1e-4, 1e-2, n).astype(np.float32)
    bv = rng.standard_normal(n).astype(np.float32) if bias else None
    raw_a = np.zeros(a.nbytes + off, np.uint8)
    ea = raw_a[off:]
    ea[:] = a.reshape(-1)
    raw_y = np.zeros(rows * n * 4 + off, np.uint8)
    ey = raw_y[off:]
    g = G.NativeGraph(0, [a.nbytes, rows * n * 4])
    g.add("qmatmul_f32", rows, k, n, 77, b, bz, scale, bv, None, G.Ref(1, 0, a.nbytes), G.Ref(2, 0, rows * n * 4))
    g.run([ea, ey])
    y = np.frombuffer(ey.tobytes(), np.float32).reshape(rows, n)
    acc = (a.astype(np.int64) - 77) @ (b.astype(np.int64) - bz.astype(np.int64))
    want = acc.astype(np.float32) * scale
    if bias:
        want = (want + bv).astype(np.float32)
    assert np.array_equal(y.view(np.uint32), want.view(np.uint32)), case
    outs[f"c{case}"] = y
np.savez(sys.argv[1], **outs)
print("qmatmul_f32 asan: ok", "library:", G.lib()._name)
'''


def test_qmatmul_f32_under_asan_and_ubsan(tmp_path):
    """cpu_fallback/src/ops/qmatmul_f32.c under AddressSanitizer + UBSan (external buffers at odd addresses, k = 1
    to 300, bias or not), equal to numpy's exact sums and to the normal build's bits."""
    from support.cpu_build import run_both_builds

    sanitized, normal = run_both_builds(MITF_DRIVER, tmp_path, "qmatmul_f32 asan: ok", ("5",))
    assert sorted(sanitized) == sorted(normal) == ["c0", "c1", "c2"]
    for k, v in normal.items():
        assert np.array_equal(v.view(np.uint8), sanitized[k].view(np.uint8)), f"{k}: the sanitizer build differs"
