"""The compiled-plan cache of a session (issue 26, "bounded caches of compiled plans"): a model with a symbolic
batch compiles one plan per input shape fed; the session keeps at most `max_plans` of them (default 16), the
least recently used evicted first, and an evicted plan's memory (its native graphs, packed weights, Vulkan
buffers) is released with it. Before, every shape's plan stayed for the session's life (the attack: 1,000 batch
sizes took a session from 57 to 504 MB).
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.agree import DEVICES, assert_same

import vkinfer
from vkinfer.session import MAX_PLANS


def _mlp(k: int = 16, n: int = 8) -> bytes:
    """x uint8 [batch, k] -> QLinearMatMul [k, n] -> QLinearMatMul [n, n] -> y uint8 [batch, n]."""
    rng = np.random.default_rng(0)
    # 7-bit weights: ORT's x86 u8 x s8 kernels saturate int16 pair sums on full-range ones
    init = {"xs": np.array(0.02, np.float32), "xzp": np.array(128, np.uint8),
            "w1": rng.integers(-64, 64, (k, n)).astype(np.int8), "w2": rng.integers(-64, 64, (n, n)).astype(np.int8),
            "ws": np.array(0.01, np.float32), "wzp": np.array(0, np.int8),
            "hs": np.array(0.05, np.float32), "hzp": np.array(120, np.uint8),
            "ys": np.array(0.08, np.float32), "yzp": np.array(130, np.uint8)}
    nodes = [helper.make_node("QLinearMatMul", ["x", "xs", "xzp", "w1", "ws", "wzp", "hs", "hzp"], ["h"], name="fc1"),
             helper.make_node("QLinearMatMul", ["h", "hs", "hzp", "w2", "ws", "wzp", "ys", "yzp"], ["y"], name="fc2")]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.UINT8, ["batch", k])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, ["batch", n])],
                              initializer=[numpy_helper.from_array(v, name) for name, v in init.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def _x(batch: int, k: int = 16) -> np.ndarray:
    return np.random.default_rng(batch).integers(0, 256, (batch, k)).astype(np.uint8)


def _batches(sess) -> list[int]:
    """The batch sizes of the session's cached plans, least recently used first."""
    return [dict((name, shape) for name, shape, *_ in key[0])["x"][0] for key in sess._plans]


@pytest.mark.parametrize("device", DEVICES)
def test_least_recently_used_plan_goes_first(device):
    sess = vkinfer.InferenceSession(_mlp(), device=device, max_plans=3)
    for b in (1, 2, 3):
        sess.run(None, {"x": _x(b)})
    assert _batches(sess) == [1, 2, 3]
    sess.run(None, {"x": _x(1)})  # a hit: batch 1 becomes the most recently used
    assert _batches(sess) == [2, 3, 1]
    sess.run(None, {"x": _x(4)})  # a miss: batch 2, the least recently used, is evicted
    assert _batches(sess) == [3, 1, 4]


def test_evicted_shapes_recompile_correctly():
    """Shapes evicted and fed again compile anew and give ONNX Runtime's bits on every device."""
    blob = _mlp()
    oracle = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    sessions = {d: vkinfer.InferenceSession(blob, device=d, max_plans=2) for d in DEVICES}
    for b in (1, 2, 3, 1, 5, 2, 3, 1, 7, 1):
        feed = {"x": _x(b)}
        want = oracle.run(None, feed)
        for device, sess in sessions.items():
            assert_same(sess.run(None, feed), want, f"{device}, batch {b}")
            assert len(sess._plans) <= 2
    # Intermediate outputs (a debugging aid: a plan with extra outputs) share the same bounded cache.
    sess = sessions["cpu"]
    for b in (2, 3, 4):
        h, y = sess.run(["h", "y"], {"x": _x(b)})
        assert h.shape == (b, 8) and y.shape == (b, 8)
        assert len(sess._plans) <= 2


def test_default_and_settable():
    assert MAX_PLANS == 16
    sess = vkinfer.InferenceSession(_mlp(), device="cpu")
    assert sess.max_plans == 16
    for b in range(1, 21):
        sess.run(None, {"x": _x(b)})
    assert len(sess._plans) == 16 and _batches(sess) == list(range(5, 21))
    for bad in (0, -1, True, 1.5, "4", None):
        with pytest.raises(ValueError, match=r"max_plans must be a positive integer, got "):
            vkinfer.InferenceSession(_mlp(), device="cpu", max_plans=bad)


def test_ort_session_config_entry():
    opts = vkinfer.SessionOptions()
    opts.add_session_config_entry("vkinfer.max_plans", "2")
    sess = vkinfer.ort.InferenceSession(_mlp(), opts, providers=["CPUExecutionProvider"])
    assert sess.max_plans == 2
    for b in (1, 2, 3):
        sess.run(None, {"x": _x(b)})
    assert _batches(sess) == [2, 3]
    # The keyword agreeing with the entry is fine; disagreeing is an error naming both.
    assert vkinfer.ort.InferenceSession(_mlp(), opts, device="cpu", max_plans=2).max_plans == 2
    with pytest.raises(ValueError, match=r"max_plans=3 and the session config entry for it \(2\) disagree"):
        vkinfer.ort.InferenceSession(_mlp(), opts, device="cpu", max_plans=3)
    assert vkinfer.ort.InferenceSession(_mlp(), device="cpu", max_plans=5).max_plans == 5
    for bad in ("0", "x", "-3", "1.5"):
        opts = vkinfer.SessionOptions()
        opts.add_session_config_entry("vkinfer.max_plans", bad)
        with pytest.raises(ValueError, match=r"session config entry 'vkinfer.max_plans' must be a positive integer"):
            vkinfer.ort.InferenceSession(_mlp(), opts, device="cpu")
    # onnxruntime's own SessionOptions: the entry is read from it by name.
    theirs = ort.SessionOptions()
    theirs.add_session_config_entry("vkinfer.max_plans", "4")
    assert vkinfer.ort.InferenceSession(_mlp(), theirs, device="cpu").max_plans == 4


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.mark.parametrize("device,sizes", [("cpu", 200), ("vulkan", 40)])
def test_evicted_plans_are_freed(device, sizes):
    """Every evicted plan is released (nothing else keeps it: its native graphs, packed weights and buffers go
    with it), and feeding the same batch sizes again, each one recompiled, leaves RSS where the first pass left
    it. Measured on the CPU with 256x256 weights (packed per plan): the unbounded cache held all 200 plans and grew
    RSS by 57 MB over the first pass; with max_plans=4, 16 MB (allocator high water), then under 2 MB a pass."""
    k = 256
    sess = vkinfer.InferenceSession(_mlp(k, 256), device=device, max_plans=4)
    rng = np.random.default_rng(0)
    plans: list[weakref.ref] = []
    for b in rng.permutation(np.arange(1, sizes + 1)):
        sess.run(None, {"x": _x(int(b), k)})
        plans.append(weakref.ref(sess._latest))
    gc.collect()
    alive = sum(p() is not None for p in plans)
    assert alive <= 4, f"{alive} of {len(plans)} plans still alive with max_plans=4"
    before = _rss_mb()
    for b in rng.permutation(np.arange(1, sizes + 1)):  # every one evicted by now: compiled again
        sess.run(None, {"x": _x(int(b), k)})
    gc.collect()
    grown = _rss_mb() - before
    assert grown < 8, f"RSS grew by {grown:.1f} MB over a second pass of {sizes} batch sizes"


def test_concurrent_runs_with_evictions():
    """Runs from several threads on more shapes than the cache holds: each gets its shape's right answer (a plan
    evicted while another thread runs it stays alive for that run), and the cache stays within its bound."""
    import threading

    blob = _mlp()
    oracle = ort.InferenceSession(blob, providers=["CPUExecutionProvider"])
    want = {b: oracle.run(None, {"x": _x(b)}) for b in range(1, 9)}
    sess = vkinfer.InferenceSession(blob, device="cpu", max_plans=3)
    errors: list[BaseException] = []

    def work(seed: int) -> None:
        try:
            for b in np.random.default_rng(seed).integers(1, 9, 30):
                assert_same(sess.run(None, {"x": _x(int(b))}), want[int(b)], f"batch {b}")
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert len(sess._plans) <= 3
