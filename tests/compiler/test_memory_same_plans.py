"""The memory planner (vkinfer/model/memory.py) gives the plans of its former quadratic form, offset for offset and
buffer for buffer: that form (all-pairs scans, as of commit bb65171) is kept here as the oracle, on random
lifetimes (zero sizes, constants alive everywhere, long and short spans), chains and the zoo's CPU segments."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vkinfer.model import memory
from vkinfer.model.memory import Lifetime, live_peak, plan_offsets, plan_slots

# ---- the former planner, verbatim but for names --------------------------------------------------------------


def _old_live_peak(lts):
    steps = {s for lt in lts for s in (lt.first, lt.last)}
    return max((sum(lt.size for lt in lts if lt.first <= s <= lt.last) for s in steps), default=0)


def _round(n, align):
    return (n + align - 1) // align * align


def _old_plan_offsets(lts, align=64):
    by_size = _old_greedy(sorted(lts, key=lambda x: (-x.size, x.first, x.name)), align)
    by_breadth = _old_greedy(sorted(lts, key=lambda x: (x.first, -x.size, x.name)), align)
    plans = [by_size, by_breadth]
    two = _old_two_ended(lts, align)
    if two is not None:
        plans.append(two)
    return min(plans, key=lambda p: p[1])


def _old_two_ended(lts, align):
    sizes = {lt.name: _round(max(lt.size, 1), align) for lt in lts}
    cap = _old_live_peak([dataclasses.replace(lt, size=sizes[lt.name]) for lt in lts])
    placed = []
    offsets = {}
    for i, lt in enumerate(sorted(lts, key=lambda x: (x.first, x.name))):
        need = sizes[lt.name]
        busy = sorted((off, end) for off, end, o in placed if not (o.last < lt.first or lt.last < o.first))
        free, at = [], 0
        for off, end in busy:
            if off > at:
                free.append((at, off))
            at = max(at, end)
        if cap > at:
            free.append((at, cap))
        fits = [(a, b) for a, b in free if b - a >= need]
        if not fits:
            return None
        off = fits[0][0] if i % 2 == 0 else fits[-1][1] - need
        offsets[lt.name] = off
        placed.append((off, off + need, lt))
    return offsets, cap


def _old_greedy(order, align):
    placed = []
    offsets = {}
    total = 0
    for lt in order:
        need = _round(max(lt.size, 1), align)
        at = 0
        for off, end, other in placed:
            if other.last < lt.first or lt.last < other.first:
                continue
            if off - at >= need:
                break
            at = max(at, _round(end, align))
        offsets[lt.name] = at
        placed.append((at, at + lt.size, lt))
        placed.sort(key=lambda p: p[0])
        total = max(total, at + need)
    return offsets, total


def _old_plan_slots(lts):
    sizes, slot_of, free, live = [], {}, [], []
    for lt in sorted(lts, key=lambda x: (x.first, x.name)):
        for old in [o for o in live if o.last < lt.first]:
            live.remove(old)
            free.append(slot_of[old.name])
        fits = [b for b in free if sizes[b] >= lt.size]
        if fits:
            b = min(fits, key=lambda b: sizes[b])
        elif free:
            b = max(free, key=lambda b: sizes[b])
        else:
            sizes.append(0)
            b = len(sizes) - 1
        if b in free:
            free.remove(b)
        sizes[b] = max(sizes[b], lt.size)
        slot_of[lt.name] = b
        live.append(lt)
    return slot_of, sizes


# ---- the comparisons ------------------------------------------------------------------------------------------


def _same(lts, align):
    assert live_peak(lts) == _old_live_peak(lts)
    assert plan_offsets(lts, align) == _old_plan_offsets(lts, align)
    for order in (sorted(lts, key=lambda x: (-x.size, x.first, x.name)),
                  sorted(lts, key=lambda x: (x.first, -x.size, x.name))):
        assert memory._greedy(order, align) == _old_greedy(order, align)
    assert memory._two_ended(lts, align) == _old_two_ended(lts, align)
    assert plan_slots(lts) == _old_plan_slots(lts)


_span = st.tuples(st.sampled_from([0, 1, 7, 64, 100, 4096]) | st.integers(0, 5000), st.integers(0, 25),
                  st.integers(0, 12), st.booleans())


@settings(max_examples=300, deadline=None)
@given(spans=st.lists(_span, min_size=1, max_size=45), align=st.sampled_from([1, 16, 64]))
def test_random_lifetimes_plan_as_before(spans, align):
    """Sizes with repeats and zeros, and some tensors alive over every step (a segment's constants, pinned)."""
    end = max(first + length for _, first, length, _ in spans)
    lts = [Lifetime(f"t{i}", size, 0 if pinned else first, end if pinned else first + length)
           for i, (size, first, length, pinned) in enumerate(spans)]
    _same(lts, align)


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 3000), min_size=2, max_size=80), consts=st.lists(st.integers(0, 500),
                                                                                      max_size=6),
       skip=st.integers(0, 30))
def test_chains_plan_as_before(sizes, consts, skip):
    """Layer i reads tensor i and writes tensor i + 1, the constants pinned, the input read again `skip` later."""
    n = len(sizes)
    lts = [Lifetime(f"t{i}", s, max(i - 1, 0), i) for i, s in enumerate(sizes)]
    lts[0] = dataclasses.replace(lts[0], last=min(skip, n))
    lts += [Lifetime(f"c{k}", s, 0, n) for k, s in enumerate(consts)]
    _same(lts, 64)


@pytest.mark.parametrize("name", ["ds_cnn_kws", "mobilenet_v1_vww", "resnet8", "mobilenet_v2_kws"])
def test_zoo_segments_plan_as_before(name):
    import vkinfer
    from vkinfer.testing import field_zoo

    sess = vkinfer.InferenceSession(field_zoo.FIELD_MODELS[name](0, dtype="int8"), device="cpu")
    plan = sess.plan(field_zoo.field_inputs(name, 0, "int8"))
    segs = [s for s in plan.segments if s.device == "cpu"]
    assert segs
    for seg in segs:
        lts = seg.runner.lifetimes
        assert plan_offsets(lts) == _old_plan_offsets(lts)
        assert plan_slots(lts) == _old_plan_slots(lts)
