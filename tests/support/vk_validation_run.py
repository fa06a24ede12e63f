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
