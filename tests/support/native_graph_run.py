"""Random graphs through the native CPU graph (vkinfer/cpu/segment.py) against the reference, and operators given
ranges at every boundary; run by tests/cpu/test_native_graph.py in a subprocess over the AddressSanitizer + UBSan
build of the library ($VKINFER_CPU_LIB, libasan preloaded). Prints "native graphs: N passed" at the end."""

from __future__ import annotations

import sys

import numpy as np

from support.plan_cases import build
from vkinfer.compiler.plan import CpuBackend, Plan, interpret
from vkinfer.cpu.graph import NativeGraph, Ref
from vkinfer.testing import field_zoo

TRANSPOSE = (2, np.array([2, 3], np.uint32), np.array([1, 0], np.uint32), 1, 0x80)


def main(n: int) -> int:
    rng = np.random.default_rng(1234)
    passed = 0
    for _ in range(n):
        c, h, w = (int(v) for v in rng.integers(1, 14, 3))
        c = max(c, 2)
        dtype = np.int8 if rng.integers(2) else np.uint8
        g = build(rng, c, h, w, dtype)
        x = rng.integers(0, 256, (1, c, h, w)).astype(np.uint8).view(dtype)
        values = dict(g.consts)
        values["x"] = x
        interpret(g, values)
        plan = Plan(g, {"x": x}, CpuBackend(None))
        for _ in range(2):
            np.testing.assert_array_equal(plan.run({"x": x}, ["y"])[0], values["y"])
        passed += 1
    for name in ("ds_cnn_kws", "mobilenet_v2_kws", "resnet8"):
        for dt in ("int8", "uint8"):
            from vkinfer import InferenceSession

            blob = field_zoo.FIELD_MODELS[name](0, dtype=dt)
            feed = field_zoo.field_inputs(name, 0, dt)
            ref = InferenceSession(blob, device="reference").run(None, feed)
            got = InferenceSession(blob, device="cpu").run(None, feed)
            for a, b in zip(got, ref, strict=True):
                np.testing.assert_array_equal(a, b)
            passed += 1
    # The quantize's device-layout output (VKI_QUANT_PACKED) into buffers of exactly its size: every path (RGB
    # words, NCHW tiles with pads, rows) against the reference's packed form.
    from vkinfer.cpu.quantize_linear import PACKED, REFUSE_NAN
    from vkinfer.layout import packed_words, to_packed
    from vkinfer.reference.quantize_linear import quantize_linear

    for shape in ((1, 3, 17, 5), (2, 3, 1, 1), (1, 5, 7, 3), (1, 70, 2, 3), (9, 10), (3, 1), (1, 16385)):
        x = rng.normal(0, 2, shape).astype(np.float32)
        nchw = len(shape) == 4
        n, c, hw = (shape[0], shape[1], shape[2] * shape[3]) if nchw else (1, shape[-1], x.size // shape[-1])
        for dtype, zp in ((np.uint8, 131), (np.int8, -5)):
            out = 4 * packed_words(shape)
            g = NativeGraph(0, [x.nbytes, out])
            g.add("quantize", REFUSE_NAN | PACKED, n, c, hw, int(nchw), 0.03, zp, int(dtype == np.int8),
                  Ref(1, 0, x.nbytes), Ref(2, 0, out))
            y = np.full(out, 0xA5, np.uint8)
            g.run([x, y])
            want = to_packed(quantize_linear(x, np.float32(0.03), np.array(zp, dtype))).view(np.uint8).reshape(-1)
            np.testing.assert_array_equal(y, want)
            passed += 1
    # Ranges at and past every boundary: accepted exactly in bounds, refused (ValueError) one byte out.
    g = NativeGraph(64, [6, 6])
    for src, dst, ok in [(Ref(1, 0, 6), Ref(0, 58, 6), True), (Ref(1, 0, 6), Ref(0, 59, 6), False),
                         (Ref(1, 1, 6), Ref(0, 0, 6), False), (Ref(3, 0, 6), Ref(0, 0, 6), False),
                         (Ref(1, 0, 5), Ref(0, 0, 6), False), (Ref(0, 2**63, 6), Ref(0, 0, 6), False),
                         (Ref(2, 0, 6), Ref(1, 0, 6), True)]:
        try:
            g.add("transpose", *TRANSPOSE, src, dst)
            assert ok, (src, dst)
        except ValueError:
            assert not ok, (src, dst)
        passed += 1
    a, b = np.arange(6, dtype=np.uint8), np.zeros(6, np.uint8)
    g.run([a, b])
    for bad in ([a], [a, np.zeros(5, np.uint8)], [a, np.zeros(7, np.uint8)]):
        try:
            g.run(bad)
            raise AssertionError("a wrong external buffer was accepted")
        except ValueError:
            passed += 1
    from vkinfer.cpu import LIB_PATH

    print(f"library: {LIB_PATH}")
    print(f"native graphs: {passed} passed")
    return 0


if __name__ == "__main__":
    sys.exit(main(int(sys.argv[1]) if len(sys.argv) > 1 else 20))
