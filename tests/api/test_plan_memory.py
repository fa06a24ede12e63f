"""Memory of compiled plans after their eviction (issue 26 item 6: bounded caches, no unbounded growth).

A session fed many batch sizes keeps `max_plans` compiled plans (tests/api/test_plan_cache.py); these tests check
that an evicted plan is freed at once, leaves nothing behind, and that its freed memory goes back to the system.
The attack that prompted them fed the fuzz seed `moves_u8` (symbolic batch) batch sizes 1..400: RSS rose 177 ->
208 MB on lavapipe and 100 -> 107 MB on the CPU (now 174 -> 181 and 98 -> 100, the rest the growing batch's own
plans). Nothing was retained per shape, but an evicted plan lived on until the cyclic GC's next full collection
(plan -> NativePlan -> plan was a cycle), and glibc kept the freed pages of its heaps resident; the runner now holds
its plan weakly and the session hands the freed pages back when it evicts (vkinfer._cache.release_freed_memory).
"""
from __future__ import annotations

import ctypes
import gc
import tracemalloc
import weakref

import numpy as np
import pytest

import vkinfer
from vkinfer import _cache, _vk
from vkinfer.model.graph import gc_paused
from vkinfer.testing.fuzz import seeds

_LIBC = ctypes.CDLL(None)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


def _malloc_in_use() -> int | None:
    """Bytes malloc has handed out and not had back, over every arena (glibc 2.33+), or None elsewhere."""
    fn = getattr(_LIBC, "mallinfo2", None)
    if fn is None:
        return None
    fn.restype = _MallInfo2
    m = fn()
    return m.uordblks + m.hblkhd


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4


def _session(device: str) -> vkinfer.InferenceSession:
    return vkinfer.InferenceSession(seeds.onnx_seeds()["moves_u8"], device=device, max_plans=4)


def _feed_sizes(sess: vkinfer.InferenceSession, sizes: range) -> None:
    for n in sizes:  # every size a new plan: the cache holds 4
        sess.run(None, {"x": np.zeros((n, 4, 6, 6), np.uint8)})


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_evicted_plan_is_freed_at_once(device):
    """An evicted plan goes with its last reference, not at the cyclic GC's next collection: the plan and its
    NativePlan referred to each other, so its buffers, CPU graphs and pipelines stayed until a full collection
    (a session fed batch sizes 1..60 four times with specialized pipelines peaked at 466 MB, now 246 MB)."""
    sess = _session(device)
    _feed_sizes(sess, range(1, 5))
    plan = weakref.ref(sess._plans[next(iter(sess._plans))])  # the least recently used: evicted next
    assert plan().native(sess._run_threads) is not None  # it ran in one native call (the NativePlan exists)
    with gc_paused():  # the cyclic collector off: only reference counting may free it
        _feed_sizes(sess, range(5, 6))
        assert plan() is None, "the evicted plan is kept alive by a reference cycle"


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_dropped_session_frees_its_plans_at_once(device):
    """The same cycle kept every plan of a dropped session (a fuzzer's or a server's session churn) until a full
    collection; now the plans go with the session's last reference."""
    sess = vkinfer.InferenceSession(seeds.onnx_seeds()["mlp_qdq"], device=device)
    plan = weakref.ref(sess._latest)
    assert plan() is not None and plan().native(sess._run_threads) is not None
    with gc_paused():
        del sess
        assert plan() is None, "a dropped session's plan is kept alive by a reference cycle"


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_evicted_plans_leave_nothing(device):
    """A second pass over 24 batch sizes (each recompiled: only 4 plans are kept) leaves the live Vulkan objects,
    tracemalloc's Python memory and malloc's bytes in use where the first pass left them. Measured over a pass of
    200 sizes: Python +17 KB, malloc in use flat (the plans of the last sizes alike in both)."""
    sess = _session(device)
    sizes = range(1, 25)
    tracemalloc.start()
    try:
        _feed_sizes(sess, sizes)
        gc.collect()
        objects, python, in_use = _vk.live_objects() if device == "vulkan" else None, \
            tracemalloc.get_traced_memory()[0], _malloc_in_use()
        _feed_sizes(sess, sizes)
        gc.collect()
        python_grown = tracemalloc.get_traced_memory()[0] - python
    finally:
        tracemalloc.stop()
    assert len(sess._plans) == 4
    if device == "vulkan":
        assert _vk.live_objects() == objects
    assert python_grown < 64 << 10, f"Python memory grew by {python_grown} bytes over 24 recompiled plans"
    if in_use is not None:
        grown = _malloc_in_use() - in_use
        assert grown < 1 << 20, f"malloc's bytes in use grew by {grown} over 24 recompiled plans"


def test_eviction_gives_freed_pages_back(monkeypatch):
    """The session hands the C heaps' freed pages back when it evicts a plan: after two passes over 16 batch sizes
    on the CPU, a malloc_trim of our own finds little left to give (0 KB measured; 1.6 MB without the
    session's own call), and the session called it once per plan it evicted."""
    calls = []
    release = _cache.release_freed_memory
    monkeypatch.setattr(_cache, "release_freed_memory", lambda: (calls.append(1), release())[1])
    gc.collect()  # earlier tests' garbage freed now, not counted below
    sess = _session("cpu")
    _feed_sizes(sess, range(1, 17))
    _feed_sizes(sess, range(1, 17))
    assert len(calls) == 32 - 4  # every plan after the first 4 evicted one
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is None:  # not glibc: nothing to give back this way
        return
    gc.collect()
    before = _rss_kb()
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    left = before - _rss_kb()
    assert left < 768, f"{left} KB of freed pages were still resident after the session's evictions"


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_a_plan_keeps_no_batch_sized_host_arrays(device):
    """A cached plan's host memory does not grow with its batch: 16 plans of a large batch each kept the zeros its
    Vulkan QLinearMatMul spec was checked on (1,407 KB a plan at batch 20,000 of moves_u8; now 1 KB)."""
    sess = vkinfer.InferenceSession(seeds.onnx_seeds()["moves_u8"], device=device, max_plans=1)
    tracemalloc.start()
    try:
        held = []
        for n in (1, 20000, 1):
            sess.run(None, {"x": np.zeros((n, 4, 6, 6), np.uint8)})
            gc.collect()
            held.append(tracemalloc.get_traced_memory()[0])
    finally:
        tracemalloc.stop()
    more = held[1] - held[2]
    assert more < 64 << 10, f"the plan for batch 20,000 holds {more} bytes of host memory more than batch 1's"
