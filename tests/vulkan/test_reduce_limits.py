"""Reductions past llvmpipe's loop limit run on the CPU of a Vulkan session, with the oracle's bits.

Mesa's llvmpipe (lavapipe) ends every loop of a shader invocation once all its loops together reach 65535
iterations, silently: a TFLite MEAN over 512x512 (tflite_zoo.tiny_cnn(size=512)'s pool: 65,536 values) stopped early
and gave other bits than cpu and the reference, with no warning. The lowerings of the one-invocation reductions
(vulkan/_loops.py: TFLite MEAN, QLinearGlobalAveragePool, AVERAGE_POOL_2D, MaxPool, QLinearSoftmax's row pass,
QLinearConv/QGemm's kernels, QLinearMatMul and BATCH_MATMUL) now refuse a node whose invocation would loop more than
LOOP_BUDGET times, so the plan places it on the CPU on every Vulkan device; tflite_mean.comp unrolls its innermost
loop (16 positions an iteration), so one invocation sums up to ~1M values. Each op: a reduction just below the
budget stays on Vulkan, one past it runs on the CPU, both equal to the oracle (ai-edge-litert for TFLite, ONNX
Runtime for ONNX) on every device. The data put the extreme values last, where a truncated loop would miss them."""

from __future__ import annotations

import numpy as np
import pytest
from ops._build import check, check_vs_litert, model, node, ort_run

from vkinfer.testing import tflite_ops
from vkinfer.vulkan._loops import LOOP_BUDGET, check_loops, nested_iterations
from vkinfer.vulkan.tflite_mean import mean_loop_iterations


def _tail_heavy(shape, dtype, lo: int, hi: int, tail: int = 2000) -> np.ndarray:
    """`lo` everywhere but the last `tail` values of every reduced run (flattened trailing order), which are `hi`."""
    x = np.full(shape, lo, np.dtype(dtype))
    flat = x.reshape(-1, shape[-1]) if len(shape) == 2 else x.reshape(-1)
    if len(shape) == 2:
        flat[:, -tail:] = hi
    else:
        flat[-tail:] = hi
    return x


def test_loop_counts():
    # Each entry of a loop of t iterations costs t + 1 (the exiting pass counts).
    assert nested_iterations([1, 1, 3]) == 2 + 2 + 4
    assert nested_iterations([2, 5]) == 3 + 2 * 6
    # tflite_mean.comp takes 16 positions of its innermost loop an iteration: one invocation sums ~1M values.
    assert mean_loop_iterations((1, 256, 256, 1), (1, 1, 1, 1), (1, 2), True) < 5000
    assert mean_loop_iterations((1, 1008, 1023, 1), (1, 1, 1, 1), (1, 2), True) <= LOOP_BUDGET
    assert mean_loop_iterations((1, 1024, 1024, 1), (1, 1, 1, 1), (1, 2), True) > LOOP_BUDGET
    # A row mean writes 4 values an invocation: each one's loop counts.
    assert mean_loop_iterations((4, 257600), (4,), (1,), False) <= LOOP_BUDGET
    assert mean_loop_iterations((4, 262144), (4,), (1,), False) > LOOP_BUDGET
    # Padded rows of 15 do not merge: an empty unrolled loop and 15 remainder iterations at each outer one (4,000
    # of them, costed 64,000 when the exiting pass was not counted, gave wrong bits on lavapipe).
    assert mean_loop_iterations((3580, 15), (1, 1), (0, 1), True) == 4 * 2 + 3581 + 3580 * (1 + 16) + 2 * 5
    assert mean_loop_iterations((3700, 15), (1, 1), (0, 1), True) > LOOP_BUDGET
    check_loops("ok", LOOP_BUDGET)
    with pytest.raises(ValueError, match="op_x.*65535"):
        check_loops("op_x", LOOP_BUDGET + 1)


@pytest.mark.parametrize("shape,axes,keep,where", [
    ((1, 512, 512, 1), [1, 2], True, "vulkan"),  # tiny_cnn(size=1024)'s pool: one invocation, 16,384 iterations
    ((1, 1008, 1023, 1), [1, 2], True, "vulkan"),
    ((1, 1024, 1024, 1), [1, 2], True, "cpu"),
    ((4, 257600), [1], False, "vulkan"),
    ((4, 262144), [1], False, "cpu"),
    ((3580, 15), [0, 1], True, "vulkan"),
    ((4000, 15), [0, 1], True, "cpu"),
], ids=["hw_262144", "hw_1031184", "hw_1048576", "rows_4x257600", "rows_4x262144", "rows_of_15_3580",
        "rows_of_15_4000"])
def test_tflite_mean_past_the_loop_limit_runs_on_the_cpu(shape, axes, keep, where):
    # Zero points 0 and a scale ratio of 64: the 200 values of 127 at the end move y by ~25 (at 65,536 values and
    # more the shader without unrolling missed some: 17 for 21 over 300x256).
    blob = tflite_ops.op_model("mean", 3, dtype="int8", shape=shape, axes=axes, keep_dims=keep, ratio=64.0,
                               zero_points=(0, 0))
    feeds = [{"x": _tail_heavy(shape, np.int8, 0, 127, tail=200)},
             {"x": np.random.default_rng(1).integers(-128, 128, shape).astype(np.int8)}]
    check_vs_litert(blob, feeds, where="cpu", on_vulkan=where)


def _gap(shape):
    consts = {"xs": np.float32(0.02), "xz": np.asarray(3, np.uint8), "ys": np.float32(0.002),
              "yz": np.asarray(7, np.uint8)}
    return model([node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], domain="com.microsoft")],
                 {"x": (np.uint8, shape)}, consts, {"y": np.uint8})


@pytest.mark.parametrize("hw,where", [((250, 256), "vulkan"), ((256, 257), "cpu")], ids=["64000", "65792"])
def test_global_average_pool_past_the_loop_limit_runs_on_the_cpu(hw, where):
    shape = (1, 2) + hw
    blob = _gap(shape)
    feed = {"x": _tail_heavy(shape, np.uint8, 3, 255, tail=1000)}  # y 45; a truncated loop (~300 fewer): 34
    check(blob, feed, ort_run(blob, feed), where="cpu", on_vulkan=where)


@pytest.mark.parametrize("hw,where", [((250, 255), "vulkan"), ((256, 256), "cpu")], ids=["250x255", "256x256"])
def test_max_pool_past_the_loop_limit_runs_on_the_cpu(hw, where):
    shape = (1, 1) + hw
    blob = model([node("MaxPool", ["x"], kernel_shape=list(hw))], {"x": (np.uint8, shape)}, {}, {"y": np.uint8})
    x = np.zeros(shape, np.uint8)
    x[0, 0, -1, -1] = 9  # the window's last position: a truncated loop answers 0
    feed = {"x": x}
    check(blob, feed, ort_run(blob, feed), where="cpu", on_vulkan=where)


@pytest.mark.parametrize("hw,where", [((250, 255), "vulkan"), ((256, 256), "cpu")], ids=["250x255", "256x256"])
def test_tflite_average_pool_past_the_loop_limit_runs_on_the_cpu(hw, where):
    shape = (1,) + hw + (1,)
    blob = tflite_ops.op_model("average_pool", 1, dtype="int8", shape=shape, filter=hw, stride=1, padding="VALID")
    # The pool runs in NCHW between two Transposes, which stay on Vulkan.
    check_vs_litert(blob, {"x": _tail_heavy(shape, np.int8, -128, 127)}, where="cpu",
                    on_vulkan={"TFLiteAveragePool_1": where})


@pytest.mark.parametrize("d,where", [(32254, "vulkan"), (50257, "cpu")], ids=["32254", "50257_gpt2_vocab"])
def test_qlinear_softmax_past_the_loop_limit_runs_on_the_cpu(d, where):
    """Two loops over the row (maximum, then sum) in one invocation: 2 x (d + 1) passes. The data put the maximum
    first and 3,000 values near it last, which a sum stopped early misses (wrong bytes at 34,000 and 50,257)."""
    from ops.test_qlinear_softmax import softmax_model

    blob = softmax_model((2, d), np.dtype(np.uint8))
    x = np.zeros((2, d), np.uint8)
    x[:, 0], x[:, -3000:] = 255, 200
    feed = {"x": x}
    check(blob, feed, ort_run(blob, feed), where="cpu", on_vulkan=where)


def test_conv_loop_counts():
    from vkinfer.reference._spec import conv_spec
    from vkinfer.vulkan.qlinear_conv import choose_kernel, conv_loop_iterations

    def cost(c, m, k, group=1):
        x, w = np.zeros((1, c, k, k), np.uint8), np.zeros((m, c // group, k, k), np.uint8)
        s = conv_spec(x, np.float32(1), np.uint8(0), w, np.float32(1), np.uint8(0), np.float32(1), np.uint8(0),
                      group=group)
        return choose_kernel(s), conv_loop_iterations(s, choose_kernel(s))

    assert cost(258040, 4, 1) == ("qlinear_gemv", 64511)
    assert cost(240, 4, 32) == ("qlinear_conv", 33 + 32 * 33 + 32 * 32 * 61)
    assert cost(8, 6, 3, group=2) == ("qlinear_conv", 4 * (4 + 3 * 4 + 9 * 2))  # 3 outputs a group: straddles
    assert cost(8, 6, 3) == ("qlinear_conv", 4 + 3 * 4 + 9 * 3)  # one group: never straddles


@pytest.mark.parametrize("c,k,where", [(258040, 1, "vulkan"), (270000, 1, "cpu"), (240, 32, "vulkan"),
                                       (256, 32, "cpu")], ids=["gemv_258040", "gemv_270000", "k32_c240", "k32_c256"])
def test_conv_past_the_loop_limit_runs_on_the_cpu(c, k, where):
    """One invocation sums an output word over every tap and input word: a 1x1 conv over 270,000 channels (gemv)
    and a 32x32 kernel over 256 channels gave wrong bytes on lavapipe."""
    from ops.test_qlinear_conv import _case, _model

    case = _case("big", dict(c=c, h=k, w=k, m=4, kh=k, kw=k, xt="u8", wt="u8", per_channel=False))
    blob, x = _model(case)
    tail = np.array(x)
    tail[...] = case["x_zero_point"]
    tail[:, -4000:] = 255  # the last channels and the last kernel row: what the loops reach last
    tail[..., -1, :] = 255
    feeds = [{"x": tail}, {"x": np.array(x)}]
    check(blob, feeds, [ort_run(blob, f) for f in feeds], where="cpu", on_vulkan=where)


@pytest.mark.parametrize("k,where", [(16000, "vulkan"), (17000, "cpu")], ids=["16000", "17000"])
def test_two_activation_matmul_past_the_loop_limit_runs_on_the_cpu(k, where):
    """qlinear_matmul_act computes an output word's 4 dot products one after another in one invocation: 4 x (k + 1)
    passes (at K = 30,000 the 4th byte was never written on lavapipe). y = acc / 100 of the last 3,000 ones."""
    consts = {"as": np.float32(1), "az": np.uint8(0), "bs": np.float32(1), "bz": np.uint8(0),
              "ys": np.float32(100), "yz": np.uint8(0)}
    blob = model([node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"])],
                 {"a": (np.uint8, (4, k)), "b": (np.uint8, (k, 8))}, consts, {"y": np.uint8})
    a = np.zeros((4, k), np.uint8)
    a[:, -3000:] = 1
    feed = {"a": a, "b": np.ones((k, 8), np.uint8)}
    check(blob, feed, ort_run(blob, feed), where="cpu", on_vulkan=where)


@pytest.mark.parametrize("k,where", [(258040, "vulkan"), (270000, "cpu")], ids=["258040", "270000"])
def test_matmul_with_constant_b_past_the_loop_limit_runs_on_the_cpu(k, where):
    """gemv/gemm loop over A's row words in one invocation: K / 4 + 1 passes. y = acc / 100 of the last 3,000 ones."""
    consts = {"as": np.float32(1), "az": np.uint8(0), "b": np.ones((k, 8), np.uint8), "bs": np.float32(1),
              "bz": np.uint8(0), "ys": np.float32(100), "yz": np.uint8(0)}
    blob = model([node("QLinearMatMul", ["a", "as", "az", "b", "bs", "bz", "ys", "yz"])],
                 {"a": (np.uint8, (4, k))}, consts, {"y": np.uint8})
    a = np.zeros((4, k), np.uint8)
    a[:, -3000:] = 1
    feed = {"a": a}
    check(blob, feed, ort_run(blob, feed), where="cpu", on_vulkan=where)
