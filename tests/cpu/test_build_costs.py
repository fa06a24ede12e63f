"""Native build shortcuts of issue 26 item 3 (loading time): each does less work for the same graph and arena.

- segment._canonical_consts writes 8-bit constants of one shape placed a fixed step apart (the planner's aligned
  blocks: 60-byte constants 64 bytes apart) in one call, the zeros between them included;
- segment._fold_moves returns at once where no layer is a move (nothing can fold);
- graph._pack keeps the address of a small array a graph was given before (a chain's nodes share their
  lowering's memoised shape, stride and table arrays)."""

from __future__ import annotations

import numpy as np
import pytest

from vkinfer.cpu import graph as cg
from vkinfer.cpu import segment as cs
from vkinfer.cpu.graph import NativeGraph, Ref
from vkinfer.layout import canonical
from vkinfer.model.graph import Node
from vkinfer.model.lowering import Layer

from .test_packed_add import read_arena


def _arena(pieces, together: bool, writes: list | None = None) -> np.ndarray:
    arena = 1 << 16
    g = NativeGraph(arena, [arena])
    if together:
        real = g.write
        g.write = lambda o, b: writes.append((o, np.asarray(b).size)) or real(o, b)
        left = cs._canonical_consts(g, pieces)
        writes.append(len(left))  # pieces left to _write_consts
        cs._write_consts(g, left)
    else:
        for o, a in pieces:
            g.write(o, canonical(a))
    return read_arena(g, arena)


@pytest.mark.parametrize(("step", "one_write"), [(60, True), (64, True), (60 + cs._WRITE_GAP, True),
                                                 (61 + cs._WRITE_GAP, False), ("mixed", False)])
@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_constants_a_fixed_step_apart_take_one_write(step, one_write, dtype):
    """Twelve [1, 4, 3, 5] constants `step` bytes apart (in shuffled order): one write where the gap is at most
    _WRITE_GAP, else one each; the arena is what writing layout.canonical of each one by one leaves."""
    rng = np.random.default_rng(3)
    n = 12
    info = np.iinfo(dtype)
    arrays = [rng.integers(info.min, info.max + 1, (1, 4, 3, 5), dtype=dtype) for _ in range(n)]
    offsets = [k * 128 + (k % 2) * 8 for k in range(n)] if step == "mixed" else [k * step for k in range(n)]
    pieces = list(zip(rng.permutation(offsets).tolist(), arrays, strict=True))
    writes: list = []
    together = _arena(pieces, True, writes)
    np.testing.assert_array_equal(together, _arena(pieces, False))
    assert together.any()
    if one_write:
        assert writes == [(0, (n - 1) * step + 60), 0]  # written as one run, nothing left to merge
    elif step != "mixed":  # (mixed: _write_consts merges the neighbours its own way)
        assert writes == [n] + [(o, 60) for o in offsets]


def test_moves_fold_only_where_a_layer_is_a_move(monkeypatch):
    """A chain without a move (QLinearAdds) comes back as it is without asking any layer for its move; one with a
    Transpose pair still folds."""
    asked = []
    real = cs._move_of
    monkeypatch.setattr(cs, "_move_of", lambda lay, info: asked.append(lay) or real(lay, info))
    emit = object()
    adds = [Layer(Node("com.microsoft:QLinearAdd", f"a{i}", [f"x{i}"], [f"x{i + 1}"], {}), [f"x{i}"], f"x{i + 1}",
                  emit) for i in range(6)]
    info = {f"x{i}": ((1, 4, 3, 5), np.dtype(np.uint8)) for i in range(7)}
    out = cs._fold_moves(adds, info, {"x0", "x6"})
    assert out == adds and out is not adds and asked == []
    moves = [Layer(Node("Transpose", f"t{i}", [f"x{i}"], [f"x{i + 1}"], {}), [f"x{i}"], f"x{i + 1}", emit,
                   move=((1, 4, 3, 5), (0, 2, 3, 1)) if i == 0 else ((1, 3, 5, 4), (0, 3, 1, 2))) for i in range(2)]
    folded = cs._fold_moves(moves, info, {"x0", "x2"})
    assert asked and len(folded) == 1 and folded[0].alias


def test_small_arrays_are_addressed_once_a_graph(monkeypatch):
    """Twenty adds of one table take its address once, a large array's every time; the graph is the one the direct
    calls make (same operators, same output bits)."""
    calls = []
    real = cg._ptr
    monkeypatch.setattr(cg, "_ptr", lambda a: calls.append(a.nbytes) or real(a))
    small = np.arange(256, dtype=np.uint8)[::-1].copy()
    big = np.arange(cg._PTR_CACHE_BYTES + 1, dtype=np.uint64).astype(np.uint8)
    outs = []
    for packed in (True, False):
        g = NativeGraph(64, [16, 16])
        if not packed:
            g._packers = {}
        for k in range(22):
            g.add("lut1", 16, big if k in (3, 9) else small, Ref(1, 0, 16), Ref(2 - k % 2, 0, 16))
        x, y = np.arange(16, dtype=np.uint8) * 7, np.empty(16, np.uint8)
        g.run([x, y])
        outs.append((g.ops(), x.tolist(), y.tolist()))
        if packed:
            assert calls == [256, big.nbytes, big.nbytes]
            assert list(g._ptr_memo) == [id(small)]
    assert outs[0] == outs[1]


@pytest.mark.parametrize("value", [0, 5, 2 ** 31 - 1, 2 ** 31, 2 ** 32 - 1, 2 ** 32, -1, -2 ** 31, -2 ** 31 - 1,
                                   2 ** 64, True, np.int64(7), np.uint32(2 ** 32 - 1), 3.0, None])
@pytest.mark.parametrize("field", ["n", "x_zp", "weights"])
def test_descriptors_packed_at_once_are_the_checked_ones(field, value, monkeypatch):
    """cpu.c_struct packs a structure's fields at once where struct takes every value (each integer code is its C
    type's range): the same bytes as the field-by-field checks, and where it refuses, the same error."""
    import vkinfer.cpu as cpu

    fields = dict(n=1, h=3, w=5, c=4, m=4, kh=1, kw=1, sh=1, sw=1, dh=1, dw=1, pt=0, pl=0, pb=0, pr=0, groups=1,
                  weights=2 ** 40, w_signed=1, w_zp=12345, bias=0, scale=9, x_zp=-3, y_zp=128, y_lo=0, y_hi=255, isa=-1,
                  )
    fields[field] = value

    def outcome(packed: bool):
        monkeypatch.setitem(cpu._PACKERS, cpu._Desc, cpu._packer(cpu._Desc) if packed else None)
        try:
            return "ok", bytes(cpu.c_struct(cpu._Desc, "convolution", **fields))
        except (ValueError, TypeError) as e:
            return type(e).__name__, str(e)
    assert cpu._packer(cpu._Desc) is not None
    assert outcome(True) == outcome(False)
