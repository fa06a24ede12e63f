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
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable


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
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    end = 0
    for step, writes, reads in events:
        end = max(end, step)
        for t in (*writes, *reads):
            first.setdefault(t, step)
            last[t] = max(last.get(t, step), step)
    for t in pinned:
        first[t], last[t] = 0, max(end, last.get(t, 0))
    return [Lifetime(t, int(sizes[t]), first[t], last[t]) for t in first]


def live_peak(lts: list[Lifetime]) -> int:
    """The most bytes alive at any one step: a lower bound of any plan."""
    steps = {s for lt in lts for s in (lt.first, lt.last)}
    return max((sum(lt.size for lt in lts if lt.first <= s <= lt.last) for s in steps), default=0)


def _round(n: int, align: int) -> int:
    return (n + align - 1) // align * align


def plan_offsets(lts: list[Lifetime], align: int = 64) -> tuple[dict[str, int], int]:
    """Byte offset of every tensor in one arena, and the arena's size (module docstring): the smaller of the
    greedy placements in order of decreasing size and in order of decreasing size at each tensor's first step
    ("greedy by breadth"; on MobileNetV1 0.25 at 96x96 it reaches the live peak where by size alone is 17% over)."""
    by_size = _greedy(sorted(lts, key=lambda x: (-x.size, x.first, x.name)), align)
    by_breadth = _greedy(sorted(lts, key=lambda x: (x.first, -x.size, x.name)), align)
    plans = [by_size, by_breadth]
    two = _two_ended(lts, align)
    if two is not None:
        plans.append(two)
    return min(plans, key=lambda p: p[1])


def _two_ended(lts: list[Lifetime], align: int) -> tuple[dict[str, int], int] | None:
    """Tensors in order of first use, alternately at the lowest free offset and at the highest one below the
    aligned live peak: on a chain of layers (each tensor alive with its neighbours only) that is the peak
    exactly, where the greedy orders can be 48% over on random sizes. None when something does not fit."""
    sizes = {lt.name: _round(max(lt.size, 1), align) for lt in lts}
    cap = live_peak([dataclasses.replace(lt, size=sizes[lt.name]) for lt in lts])
    placed: list[tuple[int, int, Lifetime]] = []
    offsets: dict[str, int] = {}
    for i, lt in enumerate(sorted(lts, key=lambda x: (x.first, x.name))):
        need = sizes[lt.name]
        busy = sorted((off, end) for off, end, o in placed if not (o.last < lt.first or lt.last < o.first))
        free, at = [], 0  # gaps between busy intervals, within [0, cap)
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


def _greedy(order: list[Lifetime], align: int) -> tuple[dict[str, int], int]:
    """Each tensor in `order` at the lowest aligned offset clear of every placed tensor alive with it."""
    placed: list[tuple[int, int, Lifetime]] = []  # (offset, end, lifetime), sorted by offset
    offsets: dict[str, int] = {}
    total = 0
    for lt in order:
        need = _round(max(lt.size, 1), align)
        at = 0
        for off, end, other in placed:
            if other.last < lt.first or lt.last < other.first:
                continue  # not alive at the same time: may overlap
            if off - at >= need:
                break  # fits in the gap before this one
            at = max(at, _round(end, align))
        offsets[lt.name] = at
        placed.append((at, at + lt.size, lt))
        placed.sort(key=lambda p: p[0])
        total = max(total, at + need)
    return offsets, total


def plan_slots(lts: list[Lifetime]) -> tuple[dict[str, int], list[int]]:
    """Buffer index of every tensor and each buffer's size (module docstring)."""
    sizes: list[int] = []
    slot_of: dict[str, int] = {}
    free: list[int] = []
    live: list[Lifetime] = []
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
