"""The memory planner: every tensor of a segment gets storage by lifetime, shared by the CPU and Vulkan runners.

A tensor lives from the step that writes it to the last step that reads it (steps are a segment's operators in
order; a tensor written before the segment starts, such as an input copied in, is written at step 0). Two
tensors may share bytes when their lifetimes do not overlap.

- `plan_offsets` (the CPU arena): TFLite's "greedy by size" arena planner. Tensors in order of decreasing
  size take the lowest aligned offset that does not overlap a placed tensor whose lifetime overlaps theirs.
  On a chain of layers this reaches the live-tensor peak exactly (tests/compiler/test_memory.py), and it never
  exceeds the sum of the sizes.
- `plan_slots` (Vulkan): the same lifetimes, packed into whole buffers, because a Kompute tensor is a whole
  VkBuffer: each tensor in order of first use takes a free buffer (the smallest that fits, else the largest,
  grown) once the buffer's last tensor is dead.

Planning takes O(n log n) on chains of layers (a tensor looks only at the placed tensors alive with it, through an
index by step, and at the merged runs of the constants alive everywhere): a 20k-layer chain was quadratic, 53 s.
The plans are those of the former all-pairs scans, offset for offset (tests/compiler/test_memory_same_plans.py).

The CPU segment plans its arena with a C port of `plan_offsets` (cpu_fallback/src/plan.c through
vkinfer/cpu/_arena.py: 0.75-1.05 s of a 100k-node chain's loading here, ~0.1 s there), which declines to memory.py
where a sum would leave int64. This module is its definition: a change to the placements here must be made there
too (tests/cpu/test_arena_plan.py compares the two on generated and edge-case lifetimes).
"""

from __future__ import annotations

import bisect
import dataclasses
import heapq
import operator
from collections.abc import Callable, Iterable

from .graph import gc_paused


@dataclasses.dataclass(frozen=True)
class Lifetime:
    """Tensor `name` of `size` bytes, written at step `first` and last read at step `last` (inclusive)."""

    name: str
    size: int
    first: int
    last: int


def lifetimes(events: Iterable[tuple[int, list[str], list[str]]], sizes: dict[str, int],
              pinned: Iterable[str] = ()) -> list[Lifetime]:
    """Lifetimes from (step, writes, reads) events. `pinned` tensors (constants written once at build time)
    live over every step."""
    with gc_paused():  # (graph.gc_paused: a Lifetime per tensor, and no cycles)
        return _lifetimes(events, sizes, pinned)


def _lifetimes(events: Iterable[tuple[int, list[str], list[str]]], sizes: dict[str, int],
               pinned: Iterable[str]) -> list[Lifetime]:
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    end = 0
    get = last.get
    for step, writes, reads in events:
        if step > end:
            end = step
        for ts in (writes, reads):
            for t in ts:
                seen = get(t)
                if seen is None:  # first and last are set together
                    first[t] = last[t] = step
                elif step > seen:
                    last[t] = step
    for t in pinned:
        first[t], last[t] = 0, max(end, last.get(t, 0))
    return [Lifetime(t, int(sizes[t]), first[t], last[t]) for t in first]


def spans(first: dict[str, int], last: dict[str, int], sizes: dict[str, int], pinned: Iterable[str] = (),
          end: int = 0) -> list[Lifetime]:
    """`lifetimes` from each tensor's first and last step, as a caller that walks its steps in order keeps them
    (no list of events); `end`: the last step of all (pinned tensors live from 0 to it)."""
    with gc_paused():
        pins = dict.fromkeys(pinned)
        lts = [Lifetime(t, int(sizes[t]), f, last[t]) for t, f in first.items() if t not in pins]
        lts += [Lifetime(t, int(sizes[t]), 0, max(end, last.get(t, 0))) for t in pins]
        return lts


def live_peak(lts: list[Lifetime], size: Callable[[int], int] | None = None) -> int:
    """The most bytes alive at any one step: a lower bound of any plan (one sweep over the lifetimes' ends).
    `size`: of each tensor's size, the bytes to count (default: the size)."""
    delta: dict[int, int] = {}
    get = delta.get
    for lt in lts:
        n = lt.size if size is None else size(lt.size)
        delta[lt.first] = get(lt.first, 0) + n
        delta[lt.last + 1] = get(lt.last + 1, 0) - n
    return _peak(delta)


def _peak(delta: dict[int, int]) -> int:
    peak = alive = 0
    for step in sorted(delta):
        alive += delta[step]
        if alive > peak:
            peak = alive
    return peak


def _aligned_peak(lts: list[Lifetime], align: int, least: int = 0) -> int:
    """live_peak(lts, lambda n: _round(max(n, least), align)), without a call per tensor."""
    delta: dict[int, int] = {}
    get = delta.get
    for lt in lts:
        n = (max(lt.size, least) + align - 1) // align * align
        delta[lt.first] = get(lt.first, 0) + n
        delta[lt.last + 1] = get(lt.last + 1, 0) - n
    return _peak(delta)


_NAME, _FIRST = operator.attrgetter("name"), operator.attrgetter("first")


def _MINUS_SIZE(lt: Lifetime) -> int:  # noqa: N802 - a sort key, named like the attrgetters beside it
    return -lt.size


def _round(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def plan_offsets(lts: list[Lifetime], align: int = 64) -> tuple[dict[str, int], int]:
    """Byte offset of every tensor in one arena, and the arena's size (module docstring): the smaller of the
    greedy placements in order of decreasing size and in order of decreasing size at each tensor's first step
    ("greedy by breadth"; on MobileNetV1 0.25 at 96x96 it reaches the live peak where by size alone is 17% over).
    A placement that reaches the aligned live peak (a lower bound of every plan) is taken without trying the
    ones after it: the same choice as trying them all, which was a third of a 20k-layer chain's planning."""
    with gc_paused():  # (graph.gc_paused: its full collections grew faster than the graph)
        return _plan_offsets(lts, align)


def _plan_offsets(lts: list[Lifetime], align: int) -> tuple[dict[str, int], int]:
    bound = _aligned_peak(lts, align)
    by_name = sorted(lts, key=_NAME)  # then stable sorts by the other keys: the order of the tuple keys, faster
    best = _greedy(sorted(sorted(by_name, key=_FIRST), key=_MINUS_SIZE), align)
    if best[1] <= bound:
        return best
    by_breadth = _greedy(sorted(sorted(by_name, key=_MINUS_SIZE), key=_FIRST), align)
    if by_breadth[1] < best[1]:
        best = by_breadth
    if best[1] <= bound:
        return best
    two = _two_ended(lts, align)
    return two if two is not None and two[1] < best[1] else best


class _Runs:
    """Offsets covered by a set of placed intervals [start, end): sorted disjoint runs (touching ones merged),
    and the zero-length intervals outside every run (`points`: a zero-byte tensor's offset, which a placement
    must not straddle). Walking it in offset order blocks exactly what walking its intervals one by one would."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.points: list[int] = []

    def add(self, start: int, end: int) -> None:
        """Cover [start, end)."""
        if end == start:
            i = bisect.bisect_right(self.starts, start) - 1
            if i < 0 or self.ends[i] < start:  # a point on or inside a run blocks nothing the run does not
                bisect.insort(self.points, start)
            return
        i = bisect.bisect_left(self.ends, start)  # the first run ending at or after `start` (touching: merged)
        j = bisect.bisect_right(self.starts, end)  # runs before j start at or before `end`
        if i < j:
            start, end = min(start, self.starts[i]), max(end, self.ends[j - 1])
        self.starts[i:j] = [start]
        self.ends[i:j] = [end]
        if self.points:
            del self.points[bisect.bisect_left(self.points, start):bisect.bisect_right(self.points, end)]

    def up(self):
        """The runs and points in increasing offset."""
        runs = zip(self.starts, self.ends, strict=True)
        return heapq.merge(runs, ((p, p) for p in self.points)) if self.points else runs

    def down(self):
        """The runs in decreasing offset (no points: the two-ended planner has none)."""
        return zip(reversed(self.starts), reversed(self.ends), strict=True)


class _Placed:
    """Placed intervals (offset, end) indexed by lifetime, so that a tensor finds the placed ones alive with it
    in time proportional to their number and its own lifetime, not to everything placed (the planners' former
    scans made a 20k-layer chain's plan quadratic: 53 s). Steps are numbered from the earliest first use; a
    tensor alive over every step (a constant, pinned) conflicts with every other: those are kept as merged runs
    (`pinned`), and `every` holds the runs of all placed intervals for the pinned ones' own queries."""

    def __init__(self, lts: list[Lifetime]) -> None:
        self.lo = min((lt.first for lt in lts), default=0)
        self.hi = max((lt.last for lt in lts), default=0)
        span = self.hi - self.lo + 1
        self.alive: list[list[tuple[int, int]]] = [[] for _ in range(span)]  # placed alive at each step
        self.born: list[list[tuple[int, int]]] = [[] for _ in range(span)]  # placed first used at each step
        self.pinned, self.every = _Runs(), _Runs()
        # `every` is kept only while a tensor alive everywhere is still to be placed (they come first in the
        # usual orders: after them it would be work for nothing)
        self.to_come = sum(1 for lt in lts if self.everywhere(lt))

    def everywhere(self, lt: Lifetime) -> bool:
        """Whether `lt` is alive at every step."""
        return lt.first <= self.lo and lt.last >= self.hi

    def near(self, lt: Lifetime) -> list[tuple[int, int]]:
        """The placed intervals, other than the pinned runs, whose lifetimes overlap `lt`'s (not everywhere)."""
        f, last = max(lt.first - self.lo, 0), min(lt.last - self.lo, self.hi - self.lo)
        out = list(self.alive[f])  # alive at its first step, then those born during its life
        for s in range(f + 1, last + 1):
            out.extend(self.born[s])
        return out

    def add(self, lt: Lifetime, start: int, end: int) -> None:
        """Record `lt` placed at [start, end)."""
        everywhere = self.everywhere(lt)
        self.to_come -= everywhere
        if self.to_come:
            self.every.add(start, end)
        if everywhere and end > start:
            self.pinned.add(start, end)
            return
        f, last = max(lt.first - self.lo, 0), min(lt.last - self.lo, self.hi - self.lo)
        iv = (start, end)
        self.born[f].append(iv)
        for s in range(f, last + 1):
            self.alive[s].append(iv)

    def lowest(self, lt: Lifetime, need: int) -> int:
        """The lowest offset (0 or a block's end) clear of every placed interval alive with `lt` (ends are
        aligned, so it is the lowest aligned one): the walk of `_lowest` over them in increasing offset."""
        if self.everywhere(lt):
            return _lowest(self.every.up(), need)
        near = self.near(lt)
        near.sort()
        pinned = self.pinned
        if not pinned.starts:
            return _lowest(near, need)
        if pinned.points:
            return _lowest(heapq.merge(near, pinned.up()), need)
        return _lowest_merged(near, pinned.starts, pinned.ends, need)

    def highest(self, lt: Lifetime, need: int, cap: int) -> int | None:
        """`_highest` over every placed interval alive with `lt`."""
        if self.everywhere(lt):
            return _highest(self.every.down(), need, cap)
        near = sorted(self.near(lt), key=lambda iv: iv[1], reverse=True)
        if not self.pinned.starts:
            return _highest(near, need, cap)
        return _highest(heapq.merge(near, self.pinned.down(), key=lambda iv: iv[1], reverse=True), need, cap)


def _lowest_merged(near: list, starts: list, ends: list, need: int) -> int:
    """`_lowest` over `near` (sorted (offset, end) intervals) and the pinned runs `starts`/`ends` (sorted), the two
    lists merged by hand (heapq.merge's generator was a quarter of a chain's planning)."""
    at = i = j = 0
    n_near, n_runs = len(near), len(starts)
    while True:
        if i < n_near and (j == n_runs or near[i][0] <= starts[j]):
            off, end = near[i]
            i += 1
        elif j < n_runs:
            off, end = starts[j], ends[j]
            j += 1
        else:
            return at
        if off - at >= need:
            return at
        if end > at:
            at = end


def _lowest(blocks, need: int) -> int:
    """The lowest offset (0 or a block's end) where `need` bytes fit below the next block, blocks in increasing
    offset: the lowest aligned offset clear of them all (ends are aligned)."""
    at = 0
    for off, end in blocks:
        if off - at >= need:
            break
        if end > at:
            at = end
    return at


def _highest(blocks, need: int, cap: int) -> int | None:
    """The highest offset where `need` bytes fit below `cap` clear of the blocks (given in decreasing end)."""
    top = cap
    for off, end in blocks:
        if top - end >= need:
            return top - need
        if off < top:
            top = off
    return top - need if top >= need else None


def _two_ended(lts: list[Lifetime], align: int) -> tuple[dict[str, int], int] | None:
    """Tensors in order of first use, alternately at the lowest free offset and at the highest one below the
    aligned live peak: on a chain of layers (each tensor alive with its neighbours only) that is the peak
    exactly, where the greedy orders can be 48% over on random sizes. None when something does not fit."""
    sizes = {lt.name: _round(max(lt.size, 1), align) for lt in lts}
    cap = _aligned_peak(lts, align, 1)
    placed = _Placed(lts)
    offsets: dict[str, int] = {}
    for i, lt in enumerate(sorted(lts, key=lambda x: (x.first, x.name))):
        need = sizes[lt.name]
        if i % 2 == 0:
            off = placed.lowest(lt, need)
            if cap - off < need:
                return None
        else:
            off = placed.highest(lt, need, cap)
            if off is None:
                return None
        offsets[lt.name] = off
        placed.add(lt, off, off + need)
    return offsets, cap


def _greedy(order: list[Lifetime], align: int) -> tuple[dict[str, int], int]:
    """Each tensor in `order` at the lowest aligned offset clear of every placed tensor alive with it."""
    placed = _Placed(order)
    offsets: dict[str, int] = {}
    total = 0
    # _Placed.lowest and .add inlined (the calls were half of a 20k-layer chain's planning); the same steps.
    lo, span = placed.lo, placed.hi - placed.lo
    alive, born, pinned, every = placed.alive, placed.born, placed.pinned, placed.every
    starts, ends = pinned.starts, pinned.ends
    for lt in order:
        size, first, last = lt.size, lt.first - lo, lt.last - lo
        need = (max(size, 1) + align - 1) // align * align
        everywhere = first <= 0 and last >= span
        if everywhere and size > 0 and len(every.starts) == 1 and every.starts[0] == 0 and not every.points \
                and starts == [0] and ends[0] == every.ends[0]:
            # The constants of a model, placed first, one after the other: everything placed so far is one run
            # [0, top) of pinned tensors, so this one goes on top and both runs grow (what _Runs.add would do).
            at = ends[0]
            offsets[lt.name] = at
            end = at + (size + align - 1) // align * align
            placed.to_come -= 1
            ends[0] = end
            if placed.to_come:
                every.ends[0] = end
            if at + need > total:
                total = at + need
            continue
        if everywhere:
            at = _lowest(every.up(), need)
        else:
            f, last = max(first, 0), min(last, span)
            near = list(alive[f])  # alive at its first step, then those born during its life
            for s in range(f + 1, last + 1):
                near.extend(born[s])
            near.sort()
            if not starts:
                at = _lowest(near, need)
            elif pinned.points:
                at = _lowest(heapq.merge(near, pinned.up()), need)
            else:  # the placed intervals and the pinned runs, merged in increasing offset
                at = _lowest_merged(near, starts, ends, need)
        offsets[lt.name] = at
        end = at + (size + align - 1) // align * align
        placed.to_come -= everywhere
        if placed.to_come:
            every.add(at, end)
        if everywhere and end > at:
            pinned.add(at, end)
        else:
            if everywhere:
                f, last = max(first, 0), min(last, span)
            iv = (at, end)
            born[f].append(iv)
            for s in range(f, last + 1):
                alive[s].append(iv)
        if at + need > total:
            total = at + need
    return offsets, total


def plan_slots(lts: list[Lifetime]) -> tuple[dict[str, int], list[int]]:
    """Buffer index of every tensor and each buffer's size (module docstring). Among free buffers of one size the
    one freed first is taken; tensors die in the order they were placed."""
    sizes: list[int] = []
    slot_of: dict[str, int] = {}
    free: list[tuple[int, int, int]] = []  # (size, when freed, buffer), sorted
    dying: list[tuple[int, int, int]] = []  # heap of (last step, placement order, buffer)
    freed = 0
    for k, lt in enumerate(sorted(lts, key=lambda x: (x.first, x.name))):
        gone = []
        while dying and dying[0][0] < lt.first:
            gone.append(heapq.heappop(dying))
        for _, _, b in sorted(gone, key=lambda d: d[1]):
            bisect.insort(free, (sizes[b], freed, b))
            freed += 1
        i = bisect.bisect_left(free, (lt.size, -1, -1))  # the smallest that fits
        if i == len(free) and free:  # else the largest, grown
            i = bisect.bisect_left(free, (free[-1][0], -1, -1))
        if i < len(free):
            b = free.pop(i)[2]
        else:
            sizes.append(0)
            b = len(sizes) - 1
        sizes[b] = max(sizes[b], lt.size)
        slot_of[lt.name] = b
        heapq.heappush(dying, (lt.last, k, b))
    return slot_of, sizes
