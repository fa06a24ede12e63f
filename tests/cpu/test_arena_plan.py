"""The C arena planner (cpu_fallback/src/plan.c through vkinfer/cpu/_arena.py) against its definition,
vkinfer/model/memory.py's plan_offsets: the same offset for every tensor and the same arena size, on generated
lifetimes (hypothesis) and hand-made edge tables (zero-byte tensors, tensors alive at every step, one step, ties of
size and first step, sizes near 2^62, alignments of 1, 3, 64), with every strategy of the planner winning somewhere;
the C name sort against Python's str order; declined plans (sums past int64) left to memory.py; bad arguments
refused with ValueError; the segment's plan and lifetimes equal memory.spans + plan_offsets; the planner under
AddressSanitizer + UBSan gives the normal build's plans."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cpu_build import run_both_builds

from vkinfer.cpu import _arena
from vkinfer.model import memory
from vkinfer.model.memory import Lifetime, live_peak, plan_offsets, spans


def _native(lts: list[Lifetime], align: int = 64):
    """The C planner's plan of `lts` as memory.plan_offsets returns one (name -> offset, arena), or None."""
    names = [lt.name for lt in lts]
    arrays = [np.array([getattr(lt, k) for lt in lts], np.int64).reshape(-1) for k in ("size", "first", "last")]
    got = _arena.native_plan(*arrays, _arena.name_order(names), align)
    if got is None:
        return None
    return dict(zip(names, got[0].tolist(), strict=True)), got[1]


def _same(lts: list[Lifetime], align: int = 64) -> tuple[dict, int]:
    want = plan_offsets(lts, align)
    got = _native(lts, align)
    assert got is not None, "the C planner declined a plan within int64"
    assert got[1] == want[1] and got[0] == want[0]
    return want


def _strategy(lts: list[Lifetime], align: int) -> str:
    """Which of memory._plan_offsets' placements gives its plan (for the coverage assertion)."""
    bound = memory._aligned_peak(lts, align)
    by_name = sorted(lts, key=memory._NAME)
    size = memory._greedy(sorted(sorted(by_name, key=memory._FIRST), key=memory._MINUS_SIZE), align)
    if size[1] <= bound:
        return "size"
    breadth = memory._greedy(sorted(sorted(by_name, key=memory._MINUS_SIZE), key=memory._FIRST), align)
    best = min(size[1], breadth[1])
    if best <= bound:
        return "breadth" if breadth[1] < size[1] else "size (after breadth)"
    two = memory._two_ended(lts, align)
    if two is None:
        return "two-ended failed"
    return "two-ended" if two[1] < best else "greedy over two-ended"


_NAMES = st.text(st.sampled_from("ab\u00e9\u4e2d\U0001f600\ud800_0"), min_size=0, max_size=4)


@st.composite
def _tables(draw) -> tuple[list[Lifetime], int]:
    steps = draw(st.integers(0, 10))
    n = draw(st.integers(0, 28))
    names = draw(st.lists(_NAMES, min_size=n, max_size=n, unique=True))
    size = st.one_of(st.sampled_from([0, 1, 63, 64, 65, 128, 1000]), st.integers(0, 3000))
    lts = []
    for name in names:
        first = draw(st.integers(0, steps))
        last = draw(st.integers(first, steps))
        if draw(st.integers(0, 4)) == 0:
            first, last = 0, steps  # alive everywhere, as a segment's constants
        lts.append(Lifetime(name, draw(size), first, last))
    return lts, draw(st.sampled_from([1, 3, 8, 64]))


@settings(max_examples=600, deadline=None)
@given(table=_tables())
def test_generated_tables_plan_as_memory_py(table):
    _same(*table)


def test_every_strategy_wins_somewhere_and_plans_the_same():
    """Random chains and random tables: the plans equal memory.py's, and each of its placements (greedy by size,
    by breadth, two-ended) is the chosen one in some of them, so every C path is compared."""
    rng = random.Random(7)
    seen: dict[str, int] = {}
    for case in range(1500):
        n, steps = rng.randint(1, 40), rng.randint(1, 14)
        lts = []
        for i in range(n):
            if case % 3 == 0:  # a chain: each tensor alive with its neighbours, random sizes (two-ended's case)
                first, last = i, i + 1
            else:
                first = rng.randint(0, steps)
                last = rng.randint(first, steps)
            if rng.random() < 0.15:
                first, last = 0, max(steps, n)
            size = rng.choice([0, 1, 64, rng.randint(0, 5000), rng.randint(0, 200)])
            lts.append(Lifetime(f"t{rng.randint(0, 99)}_{i}", size, first, last))
        align = rng.choice([1, 16, 64])
        _same(lts, align)
        kind = _strategy(lts, align)
        seen[kind] = seen.get(kind, 0) + 1
    assert {"size", "breadth", "two-ended", "greedy over two-ended", "two-ended failed"} <= set(seen), seen


EDGE_TABLES = {
    "empty": [],
    "one zero-byte tensor": [Lifetime("a", 0, 0, 0)],
    "one step": [Lifetime(f"t{i}", s, 0, 0) for i, s in enumerate([5, 0, 64, 0, 130, 1])],
    "zero-byte tensors everywhere and between": [Lifetime("c", 0, 0, 4), Lifetime("d", 0, 0, 4),
                                                  Lifetime("x", 64, 1, 2), Lifetime("y", 0, 2, 3),
                                                  Lifetime("z", 70, 0, 4), Lifetime("w", 0, 3, 4)],
    "pinned constants then a chain": [Lifetime(f"b{i}", 60, 0, 9) for i in range(1, 9)]
    + [Lifetime(f"x{i}", 60, i, i + 1) for i in range(9)],
    "ties of size and first step": [Lifetime(n, 64, 1, 3 + k % 2) for k, n in enumerate("qwertyuiop")]
    + [Lifetime("A", 64, 0, 5), Lifetime("Z", 64, 5, 5)],
    "names ordered by code point": [Lifetime(n, 32, 0, 1) for n in ["b", "a", "\u00e9", "B", "", "ab", "a\ud800",
                                                                       "\U0001f600", "\uffff", "a\x01"]],
    "steps from a negative first": [Lifetime("n", 10, -5, -1), Lifetime("m", 10, -3, 2), Lifetime("k", 0, -5, 2)],
    "large sizes within int64": [Lifetime("big", 2 ** 62, 0, 1), Lifetime("big2", 2 ** 61, 1, 2),
                                 Lifetime("s", 1, 0, 2), Lifetime("e", 0, 0, 2)],
    "two-ended wins": [Lifetime(f"x{i}", s, i, i + 1) for i, s in enumerate([10, 300, 20, 250, 30, 200, 40, 100])],
}


@pytest.mark.parametrize("name", list(EDGE_TABLES))
@pytest.mark.parametrize("align", [1, 3, 64])
def test_edge_tables_plan_as_memory_py(name, align):
    _same(EDGE_TABLES[name], align)


def test_sums_past_int64_are_left_to_memory_py():
    """Python's integers do not overflow: where a sum would leave int64 the C planner declines and the segment's
    plan is memory.py's (ArenaPlan), arena beyond 2^63 included."""
    wide = [Lifetime("a", 2 ** 62, 0, 1), Lifetime("b", 2 ** 62, 0, 1), Lifetime("c", 2 ** 62, 1, 1)]
    assert _native(wide) is None
    assert _native([Lifetime("a", 2 ** 63 - 1, 0, 0)]) is None  # rounding up to 64 leaves int64
    plan = _arena.ArenaPlan({"a": 0, "b": 1, "c": 2}, [0, 0, 1], [1, 1, 1], [2 ** 62] * 3, [], 1)
    assert (plan.offsets, plan.arena) == plan_offsets(wide) and plan.arena >= 2 ** 63
    huge = _arena.ArenaPlan({"a": 0}, [0], [0], [2 ** 70], [], 0)  # past int64 before C: memory.py's
    assert (huge.offsets, huge.arena) == plan_offsets([Lifetime("a", 2 ** 70, 0, 0)])


def test_steps_far_wider_than_the_tensors_are_left_to_memory_py():
    lts = [Lifetime("a", 10, 0, 5000), Lifetime("b", 10, 5, 6)]
    assert _native(lts) is None  # (an index of 5000 steps for two tensors: over 8n + 1024)
    plan = _arena.ArenaPlan({"a": 0, "b": 1}, [0, 5], [5000, 6], [10, 10], [], 0)
    assert (plan.offsets, plan.arena) == plan_offsets(lts)


def test_bad_arguments_are_value_errors():
    z = np.zeros(3, np.int64)
    with pytest.raises(ValueError, match="permutation"):
        _arena.native_plan(z, z, z, np.array([0, 0, 1]))
    with pytest.raises(ValueError, match="permutation"):
        _arena.native_plan(z, z, z, np.array([0, 1, 3]))
    with pytest.raises(ValueError, match="one length"):
        _arena.native_plan(z, z, z[:2], np.arange(3))
    with pytest.raises(ValueError, match="alignment"):
        _arena.native_plan(z, z, z, np.arange(3), 0)
    from vkinfer.cpu import _check

    order = _arena._native()[1]
    out = np.zeros(4, np.int64)
    for blob, n in ((b"a\0b\0", 3), (b"a\0b\0c\0", 2), (b"a\0b", 2)):  # too few, too many, no final NUL
        with pytest.raises(ValueError, match="plan_name_order"):
            _check(order(blob, len(blob), n, _arena._c(out)), "plan_name_order")


@settings(max_examples=300, deadline=None)
@given(names=st.lists(st.text(st.characters(blacklist_categories=()), max_size=12), max_size=40))
def test_name_order_is_pythons_str_order(names):
    """Any names (surrogates, long shared prefixes, duplicates, NULs: those take Python's sort) in the order of
    sorted(range(n), key=names.__getitem__), stable on duplicates."""
    names = names + [n + "0123456789" for n in names[:5]] + names[:3]
    assert _arena.name_order(names).tolist() == sorted(range(len(names)), key=names.__getitem__)


def test_name_order_of_long_names_sharing_eight_bytes():
    names = [f"#scratch{i}" for i in range(300)] + ["#scratch", "#scratc", "#scratch\U0001f600", "#scratch\x7f"]
    random.Random(3).shuffle(names)
    assert _arena.name_order(names).tolist() == sorted(range(len(names)), key=names.__getitem__)


@settings(max_examples=150, deadline=None)
@given(table=_tables(), data=st.data())
def test_arena_plan_is_spans_then_plan_offsets(table, data):
    """ArenaPlan (the segment's: walk lists, pinned by index) against memory.spans + memory.plan_offsets on the
    dicts the walk kept before: the same plan and the same lifetimes, in the same order."""
    lts, _ = table
    ids = {lt.name: k for k, lt in enumerate(lts)}
    first, last, sizes = [lt.first for lt in lts], [lt.last for lt in lts], [lt.size for lt in lts]
    pinned = data.draw(st.lists(st.sampled_from(range(len(lts))), max_size=len(lts))) if lts else []
    end = data.draw(st.integers(0, 12))
    want_lts = spans(dict(zip(ids, first, strict=True)), dict(zip(ids, last, strict=True)),
                     dict(zip(ids, sizes, strict=True)), pinned=[lts[k].name for k in pinned], end=end)
    plan = _arena.ArenaPlan(ids, first, last, sizes, pinned, end)
    assert (plan.offsets, plan.arena) == plan_offsets(want_lts)
    assert plan.lifetimes() == want_lts


def test_the_chain_segment_plan_is_memory_pys():
    """A QLinearAdd chain's CPU segment (a pinned constant a layer): its arena is memory.py's plan of its lifetimes,
    the live peak."""
    from support.load_chains import chain_model

    import vkinfer

    sess = vkinfer.InferenceSession(chain_model("qlinear_add", 200), device="cpu")
    x = np.random.default_rng(1).integers(0, 256, (1, 4, 3, 5), dtype=np.uint8)
    (seg,) = [s for s in sess.plan({"x0": x}).segments if s.device == "cpu"]
    runner = seg.runner
    lts = runner.lifetimes
    assert (runner._arena_plan.offsets, runner.arena_bytes) == plan_offsets(lts)
    assert runner.arena_bytes == live_peak(lts, lambda n: -(-n // 64) * 64)


DRIVER = r'''
import sys
import numpy as np
from vkinfer.cpu import _arena, lib

rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
for case in range(400):
    n, steps = int(rng.integers(0, 40)), int(rng.integers(0, 12))
    first = rng.integers(0, steps + 1, n)
    last = first + rng.integers(0, steps + 1, n)
    every = rng.random(n) < 0.2
    first[every], last[every] = 0, last.max(initial=0)
    size = rng.choice([0, 1, 64, 65, 1000, 2 ** 61], n) if case % 7 == 0 else rng.integers(0, 3000, n)
    names = [f"t{int(k)}" for k in rng.permutation(n)]
    order = _arena.name_order(names)
    align = int(rng.choice([1, 3, 64]))
    got = _arena.native_plan(size, first, last, order, align)
    outs[f"order{case}"] = order
    outs[f"plan{case}"] = np.append(got[0], got[1]) if got is not None else np.array([-1])
names = [f"#scratch{i}" for i in range(50)] + ["\U0001f600", "", "a\ud800"]
outs["names"] = _arena.name_order(names)
bad = 0
for args in ((np.zeros(2, np.int64),) * 3 + (np.array([1, 1]),), (np.zeros(2, np.int64),) * 3 + (np.array([0, 2]),)):
    try:
        _arena.native_plan(*args)
    except ValueError as e:
        bad += "plan_offsets" in str(e)
outs["bad"] = np.array([bad])
np.savez(sys.argv[1], **outs)
print("plan asan: ok", "library:", lib()._name)
'''


def test_planner_under_asan_and_ubsan_equals_the_normal_build(tmp_path):
    sanitized, normal = run_both_builds(DRIVER, tmp_path, "plan asan: ok", ("5",))
    assert sorted(sanitized) == sorted(normal)
    for k, v in normal.items():
        assert np.array_equal(v, sanitized[k]), f"{k}: the sanitizer build differs"
    assert int(normal["bad"][0]) == 2
    assert sum(int(v[0]) >= 0 for k, v in normal.items() if k.startswith("plan")) > 300  # planned, not declined
