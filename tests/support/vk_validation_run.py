"""Run in a subprocess under the Khronos validation layer (see test_chain.py): exercises a
recorded chain (with or without barriers) or every kernel once, and prints RESULT lines."""

import sys

import numpy as np

from support.cases import conv_case, mm_case
from support.chain_cases import chain_reference, chain_specs
from vkinfer import ops
from vkinfer.vulkan import Chain


def main(mode: str) -> None:
    rng = np.random.default_rng(1)
    if mode == "model":
        import logging

        from vkinfer import InferenceSession
        from vkinfer.testing import zoo

        logging.getLogger().setLevel(logging.ERROR)
        # The real MobileNetV2 architecture (width 1.0, all 52 convolutions) at a reduced resolution.
        q = zoo.quantize(zoo.mobilenet_v2(width=1.0, size=96, num_classes=1000, seed=0), fmt="qoperator",
                         per_channel=True, reduce_range=True, seed=0)
        feed = zoo.random_inputs(q, seed=1)
        sess = InferenceSession(q.SerializeToString(), device="vulkan")
        vk = sess.run(None, feed)[0]
        vk2 = sess.run(None, feed)[0]  # the recorded sequence replayed
        ref = InferenceSession(q.SerializeToString(), device="reference").run(None, feed)[0]
        print(f"RESULT model-equal {int(np.array_equal(vk, ref)) + int(np.array_equal(vk2, ref))}/2 "
              f"submits {sess.plan(feed).submits}", flush=True)
        return
    if mode == "plan":
        # Every layer kind of a compiled plan (tests/support/plan_cases.py), u8 and s8, one recorded submit each.
        from support.plan_cases import build
        from vkinfer._vk import get_device
        from vkinfer.compiler.plan import Plan, VulkanBackend, interpret

        ok = 0
        for dtype in (np.uint8, np.int8):
            g = build(rng, 5, 9, 11, dtype)
            x = rng.integers(0, 256, (1, 5, 9, 11)).astype(np.uint8).view(dtype)
            plan = Plan(g, {"x": x}, VulkanBackend(get_device()))
            values = dict(g.consts, x=x)
            interpret(g, values)
            ok += sum(np.array_equal(plan.run({"x": x}, ["y"])[0], values["y"]) for _ in range(2))
        print(f"RESULT plan-equal {ok}/4", flush=True)
        return
    if mode == "variants":
        # Every qlinear_gemm tile and staging on both shader paths (integer dot product and float requantization
        # where the device has them), and the other kernels' variants: a 1x1 conv, a matmul, a 3x3 conv, a gemv.
        from vkinfer import _vk
        from vkinfer.reference._spec import conv_spec, matmul_spec
        from vkinfer.vulkan import TILES, Executable, GemmConfig, QLinearConv, QLinearMatMul

        info = _vk._pick(None)
        paths = (False, True) if info.integer_dot_product.get("supported") else (False,)
        if "swiftshader" in info.name.lower():  # 7-13x slower than lavapipe: its default path alone (14 runs)
            paths = paths[-1:]
        conv1 = conv_case(rng, c=13, h=9, w=7, m=21, kh=1, xt="s8", wt="u8")
        conv3 = conv_case(rng, c=8, h=9, w=9, m=12, kh=3, pads=(1, 0, 2, 1))
        mm, mv = mm_case(rng, (2, 37, 40), (40, 27)), mm_case(rng, (3, 40), (40, 70))
        ok = total = 0
        for dot in paths:  # the dot shaders with the float requantization where the device guarantees RTE
            dev = _vk.Device(info, integer_dot=dot, float_rq=dot and bool(info.float_controls.get("rte32")))
            runs = [(conv1, GemmConfig(t, sh, "v")) for t in TILES.values() for sh in (True, False)]
            runs += [(mm, GemmConfig(t, sh, "v")) for t in TILES.values() for sh in (True, False)]
            runs += [(conv3, None), (mv, None)]
            for c, cfg in runs:
                if "x" in c:
                    got = Executable(QLinearConv(conv_spec(**c), dev, gemm=cfg), dev).run(c["x"])
                    want = ops.qlinear_conv(**c, device="reference")
                else:
                    s = matmul_spec(**c)
                    got = Executable(QLinearMatMul(s, dev, gemm=cfg), dev).run(s.a).reshape(s.out_shape)
                    want = ops.qlinear_matmul(**c, device="reference")
                ok += np.array_equal(got, want)
                total += 1
        print(f"RESULT variants-equal {ok}/{total}", flush=True)
        return
    if mode.startswith("chain"):
        specs = chain_specs(20)
        chain = Chain(specs, _barriers=mode == "chain")
        ok = 0
        for _ in range(5):
            x = rng.integers(0, 256, specs[0].x.shape).astype(np.uint8)
            ok += np.array_equal(chain.run(x), chain_reference(specs, x))
        print(f"RESULT chain-equal {ok}/5", flush=True)
    else:
        cases = [conv_case(rng, c=8, h=9, w=9, m=12, kh=1), conv_case(rng, c=8, h=9, w=9, m=8, kh=3, group=8,
                                                                      pads=(1, 1, 1, 1)),
                 conv_case(rng, c=8, h=9, w=9, m=8, kh=5, group=8, pads=(2, 2, 2, 2)),
                 conv_case(rng, c=6, h=9, w=9, m=9, kh=3, group=3, xt="s8", wt="s8")]
        ok = sum(np.array_equal(ops.qlinear_conv(**c), ops.qlinear_conv(**c, device="reference")) for c in cases)
        m = mm_case(rng, (2, 5, 40), (40, 7))
        ok += np.array_equal(ops.qlinear_matmul(**m), ops.qlinear_matmul(**m, device="reference"))
        print(f"RESULT ops-equal {ok}/5", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
