"""The CPU segment's arena plan through the C planner (cpu_fallback/src/plan.c: vki_plan_offsets, vki_plan_name_order):
the plan of memory.spans + memory.plan_offsets, offset for offset, from the segment's lists instead of a Lifetime
per tensor.

On a 100k-node QLinearAdd chain's segment (200k tensors) memory.spans + memory.plan_offsets took 0.75-1.05 s of
loading; this ~0.05 s, most of it the name -> offset dict the segment's references read. memory.py stays the
definition: where the C planner declines (a sum past int64, steps spread far wider than the tensors, a name holding a
NUL for the name sort, a library without the planner) the plan is memory.py's own, from the same lifetimes."""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from ..model.memory import Lifetime, plan_offsets, spans

_i64p = ctypes.POINTER(ctypes.c_int64)


@functools.cache
def _native() -> tuple | None:
    """(vki_plan_offsets, vki_plan_name_order) with their signatures declared, or None where the library lacks them
    (a build from before the planner)."""
    from . import lib

    so = lib()
    plan, order = getattr(so, "vki_plan_offsets", None), getattr(so, "vki_plan_name_order", None)
    if plan is None or order is None:  # pragma: no cover - an older library
        return None
    plan.argtypes = [ctypes.c_uint64, _i64p, _i64p, _i64p, _i64p, ctypes.c_int64, _i64p, _i64p,
                     ctypes.POINTER(ctypes.c_int32)]
    plan.restype = ctypes.c_int
    order.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.c_uint64, _i64p]
    order.restype = ctypes.c_int
    return plan, order


def _c(a: np.ndarray):
    return a.ctypes.data_as(_i64p)


def name_order(names: list[str]) -> np.ndarray:
    """The indices of `names` in the order sorted(range(len(names)), key=names.__getitem__) gives (stable): by the
    C sort of their UTF-8 bytes (20 ms -> ~8 ms for 200k names), or that sort where a name holds a NUL (the C sort's
    separator) or the library has no planner."""
    n = len(names)
    fns = _native()
    joined = "\0".join(names) + "\0"
    if fns is None or joined.count("\0") != n:
        return np.fromiter(sorted(range(n), key=names.__getitem__), np.int64, n)
    blob = joined.encode("utf-8", "surrogatepass")  # UTF-8's byte order is the code points' order, as str sorts
    out = np.empty(n, np.int64)
    from . import _check

    _check(fns[1](blob, len(blob), n, _c(out)), "plan_name_order")
    return out


def native_plan(size: np.ndarray, first: np.ndarray, last: np.ndarray, order: np.ndarray,
                align: int = 64) -> tuple[np.ndarray, int] | None:
    """(offset of each tensor, arena bytes) as memory.plan_offsets plans the tensors (size[i], first[i], last[i]),
    `order` listing their indices in name order (`name_order`); None where the C planner leaves the plan to
    memory.py (see vkinfer_cpu.h) or the library has none. ValueError for arrays of different lengths, an order that
    is not a permutation, align < 1."""
    fns = _native()
    if fns is None:
        return None
    arrays = [np.ascontiguousarray(a, dtype=np.int64) for a in (size, first, last, order)]
    n = len(arrays[0])
    if any(a.ndim != 1 or len(a) != n for a in arrays):
        raise ValueError(f"plan_offsets: arrays of shapes {[a.shape for a in arrays]}, one length expected")
    if not 1 <= align < 2 ** 63:
        raise ValueError(f"plan_offsets: alignment {align} is not a positive int64")
    offsets = np.empty(n, np.int64)
    arena, done = ctypes.c_int64(), ctypes.c_int32()
    from . import _check

    _check(fns[0](n, *map(_c, arrays), align, _c(offsets), ctypes.byref(arena), ctypes.byref(done)), "plan_offsets")
    return (offsets, arena.value) if done.value else None


class ArenaWalk:
    """A CPU segment's arena tensors as its walk over the steps meets them: `ids` (name -> index, in the order first
    met), each one's first and last step and size in lists (the walk inlines `touch` where it is hot)."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}
        self.first: list[int] = []
        self.last: list[int] = []
        self.sizes: list = []  # None until a size is given (the walk gives every tensor one)

    def touch(self, t: str, step: int, size: int | None = None) -> None:
        """Tensor `t` used at `step` (not before any earlier touch), of `size` bytes where given."""
        k = self.ids.get(t)
        if k is None:
            self.ids[t] = len(self.first)
            self.first.append(step)
            self.last.append(step)
            self.sizes.append(size)
        else:
            self.last[k] = step
            if size is not None:
                self.sizes[k] = size

    def resize(self, t: str, size: int) -> None:
        """`t`'s size is `size` bytes, where `t` is an arena tensor."""
        k = self.ids.get(t)
        if k is not None:
            self.sizes[k] = size


class ArenaPlan:
    """A segment's arena tensors and their plan: `offsets` (name -> byte offset), `arena` (bytes), and
    `lifetimes()`, the list memory.spans gives, made when asked (tests and tools read it; a Lifetime each was
    0.3-0.4 s of a 100k-node chain's loading)."""

    def __init__(self, ids: dict[str, int], first: list[int], last: list[int], sizes: list[int], pinned: list[int],
                 end: int, align: int = 64):
        """The plan of memory.spans(...) then memory.plan_offsets(..., align) for tensors `ids` (name -> index, in
        the order the segment's walk first met them) of sizes[k] bytes from step first[k] to last[k]; `pinned`
        (indices) live from step 0 to max(`end`, their last step)."""
        self._args = (ids, first, last, sizes, pinned, end)
        self._lifetimes: list[Lifetime] | None = None
        planned = self._native(align)
        if planned is None:
            self.offsets, self.arena = plan_offsets(self.lifetimes(), align)
        else:
            self.offsets, self.arena = planned

    def _native(self, align: int) -> tuple[dict[str, int], int] | None:
        if _native() is None:
            return None
        ids, first, last, sizes, pinned, end = self._args
        names = list(ids)
        try:
            size = np.fromiter(sizes, np.int64, len(names))
            f = np.fromiter(first, np.int64, len(names))
            lst = np.fromiter(last, np.int64, len(names))
            if pinned:
                pin = np.array(pinned, np.intp)
                f[pin] = 0
                lst[pin] = np.maximum(lst[pin], end)
        except (OverflowError, TypeError, ValueError):  # past int64 (or not plain numbers): memory.py's integers
            return None
        planned = native_plan(size, f, lst, name_order(names), align)
        if planned is None:
            return None
        return dict(zip(names, planned[0].tolist(), strict=True)), planned[1]

    def lifetimes(self) -> list[Lifetime]:
        """memory.spans' list: the tensors that are not pinned in the walk's order, then the pinned ones."""
        if self._lifetimes is None:
            ids, first, last, sizes, pinned, end = self._args
            names = list(ids)
            self._lifetimes = spans(dict(zip(names, first, strict=True)), dict(zip(names, last, strict=True)),
                                    dict(zip(names, sizes, strict=True)), [names[k] for k in pinned], end)
        return self._lifetimes
