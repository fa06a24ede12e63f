"""vki_graph_packed_add (cpu_fallback/src/graph.c) and NativeGraph.add's packed path (vkinfer/cpu/graph.py), issue 26
item 3: operators added from one array of words, each integer checked against its C type in C, instead of one ctypes
call of converted, Python-checked arguments per operator (~35 us a node on a 20k-node chain).

The C entry is driven under AddressSanitizer + UBSan with malformed words (truncated, no such operator, every integer
type out of range, NULL); NativeGraph.add gives the same graphs as the direct call and, for every bad argument, the
error the direct call gives (the packed call refuses; the direct call then raises its own error)."""

from __future__ import annotations

import ctypes
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from support.cpu_build import asan_env

from vkinfer.cpu import graph as cg
from vkinfer.cpu.graph import NativeGraph, Ref
from vkinfer.layout import u32

ROOT = Path(__file__).resolve().parents[2]

# Under ASan: the raw entry with malformed words. Each case names the status it must return (1: VKI_EINVAL) and a
# fragment of its message; a good operator after all of them proves nothing was left half-added.
_DRIVER = r"""
import ctypes, struct
import numpy as np
from vkinfer.cpu import lib
from vkinfer.cpu.graph import NativeGraph, Ref, _declare, _pack

so = _declare(lib())
packers = so._vki_graph_packers
assert packers, "the library has no vki_graph_packed_add"
g = NativeGraph(64, [16, 16])
idx, letters, st = packers["lut1"]
table = np.arange(256, dtype=np.uint8)
ptr = table.ctypes.data

def call(words, n=None):
    b = struct.pack("<%dq" % len(words), *words)
    return so.vki_graph_packed_add(g.handle, b, len(words) if n is None else n)

def lut1(n=16, x=(1, 0, 16), y=(2, 0, 16), op=idx):
    return [op, n, ptr, *x, *y]

ok = lut1()
cases = [
    ("truncated", ok[:-1], "needs"),
    ("no words for an operator", [idx], "needs"),
    ("no such operator", [len(packers)] + ok[1:], "names no operator"),
    ("negative operator", [-1] + ok[1:], "names no operator"),
    ("u64 negative", lut1(n=-1), "does not fit"),
    ("ref ext past u32", lut1(x=(2 ** 32, 0, 16)), "does not fit"),
    ("ref ext negative", lut1(x=(-5, 0, 16)), "does not fit"),
    ("ref offset negative", lut1(y=(2, -16, 16)), "does not fit"),
    ("ref past its buffer", lut1(y=(2, 8, 16)), ""),
    ("wrong size", lut1(n=17), ""),
]
i_idx, i_letters, _ = packers["qadd"]
shape = np.array([4], np.uint32)
strides = np.array([1], np.uint64)
def qadd(**kw):
    a = dict(rank=1, shape=shape.ctypes.data, sa=strides.ctypes.data, sb=strides.ctypes.data, signed=0, mul=0,
             za=0, zb=0, ra=0.5, rb=0.5, fixed=0.0, lo=0, hi=255, table=0)
    a.update(kw)
    f = lambda v: struct.unpack("<q", struct.pack("<d", v))[0]
    return [i_idx, a["rank"], a["shape"], a["sa"], a["sb"], a["signed"], a["mul"], a["za"], a["zb"], f(a["ra"]),
            f(a["rb"]), f(a["fixed"]), a["lo"], a["hi"], a["table"], 1, 0, 4, 1, 4, 4, 2, 0, 4]
cases += [
    ("u32 past its range", qadd(rank=2 ** 32), "does not fit"),
    ("u32 negative", qadd(rank=-1), "does not fit"),
    ("i32 past its range", qadd(za=2 ** 31), "does not fit"),
    ("i32 below its range", qadd(zb=-2 ** 31 - 1), "does not fit"),
]
for what, words, msg in cases:
    before = g.ops()
    s = call(words)
    err = so.vki_last_error().decode()
    assert s == 1 and msg in err, (what, s, err)
    assert g.ops() == before, (what, g.ops())
assert so.vki_graph_packed_add(g.handle, None, 3) == 1
assert so.vki_graph_packed_add(None, struct.pack("<6q", *ok[:6]), 6) == 1
assert call(ok) == 0 and call(qadd()) == 0 and call([], 0) == 0
assert call(ok + qadd()) == 0  # two in one call
assert g.ops() == ["lut1", "qadd", "lut1", "qadd"], g.ops()
a, b = np.arange(16, dtype=np.uint8), np.zeros(16, np.uint8)
g.run([a, b])
print("packed asan: ok")
"""


def test_packed_entry_refuses_malformed_words_under_asan_and_ubsan():
    env = asan_env()
    r = subprocess.run([sys.executable, "-c", _DRIVER], cwd=ROOT / "tests", env=env, capture_output=True, text=True,
                       timeout=300)
    where = f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, where
    assert r.returncode == 0 and "packed asan: ok" in r.stdout, where


def _outcome(packed: bool, op: str, args: tuple, monkeypatch) -> tuple:
    """(error type, message) or ("ok", the graph's operators) of NativeGraph.add(op, *args), packed or direct."""
    g = NativeGraph(64, [16, 16])
    if not packed:
        monkeypatch.setattr(g, "_packers", {})
    try:
        g.add(op, *args)
    except Exception as e:  # noqa: BLE001 (the outcome compared is whatever it raises)
        return type(e).__name__, str(e)
    return "ok", g.ops()


TABLE = np.arange(256, dtype=np.uint8)
X, Y = Ref(1, 0, 16), Ref(2, 0, 16)
SHAPE, STRIDES = np.array([16], np.uint32), np.array([1], np.uint64)


def _qadd(**kw) -> tuple:
    a = dict(rank=1, shape=SHAPE, sa=STRIDES, sb=STRIDES, signed=0, mul=0, za=0, zb=0, ra=0.5, rb=0.25, fixed=3.0,
             lo=0, hi=255, table=None, a=X, b=X, y=Y)
    a.update(kw)
    return tuple(a.values())


CASES = [
    ("lut1", (16, TABLE, X, Y)),
    ("lut1", (np.uint64(16), TABLE, X, Y)),
    ("lut1", (True, TABLE, Ref(1, 0, 1), Ref(2, 0, 1))),
    ("lut1", (17, TABLE, X, Y)),  # the operator's own refusal
    ("lut1", (-1, TABLE, X, Y)),  # checked: does not fit
    ("lut1", (2 ** 64, TABLE, X, Y)),  # past int64: the direct call's check
    ("lut1", (16.0, TABLE, X, Y)),  # ctypes refuses a float for an integer
    ("lut1", (np.float32(16), TABLE, X, Y)),
    ("lut1", ("16", TABLE, X, Y)),
    ("lut1", (16, TABLE, X)),  # too few
    ("lut1", (16, TABLE, X, Y, Y)),  # too many
    ("lut1", (16, TABLE, Ref(2 ** 32, 0, 16), Y)),
    ("lut1", (16, TABLE, Ref(1, -1, 16), Y)),
    ("lut1", (16, TABLE, Ref(1, 2 ** 64, 16), Y)),
    ("lut1", (16, TABLE, Ref(1, 0, 2 ** 63), Y)),
    ("lut1", (16, TABLE, Ref(np.int64(1), np.uint64(0), 16), Y)),
    ("lut1", (16, TABLE, (1, 0, 16), Y)),  # a tuple, not a Ref
    ("lut1", (16, None, X, Y)),  # a NULL table
    ("qadd", _qadd()),
    ("qadd", _qadd(ra=np.float32(0.1), rb=np.float64(1e-3), fixed=7)),
    ("qadd", _qadd(ra=1e300, rb=float("nan"), fixed=float("-inf"))),  # narrowed as C narrows
    ("qadd", _qadd(ra="x")),
    ("qadd", _qadd(ra=np.array([0.5], np.float32))),  # an array for a float: the direct call's conversion
    ("qadd", _qadd(rb=X)),
    ("qadd", _qadd(za=np.array(3))),
    ("qadd", _qadd(za=None)),
    ("qadd", _qadd(a=7)),
    ("qadd", _qadd(ra=None)),
    ("qadd", _qadd(za=2 ** 31)),
    ("qadd", _qadd(zb=-2 ** 31 - 1)),
    ("qadd", _qadd(rank=2 ** 32)),
    ("qadd", _qadd(rank=7)),
    ("qadd", _qadd(hi=np.int16(-3))),
    ("qadd", _qadd(signed=np.int32(1), lo=-128, hi=127)),
]


@pytest.mark.parametrize("case", range(len(CASES)))
def test_add_gives_the_direct_calls_graph_or_error(case, monkeypatch):
    op, args = CASES[case]
    assert _outcome(True, op, args, monkeypatch) == _outcome(False, op, args, monkeypatch)


def test_plain_arguments_take_the_packed_call(monkeypatch):
    """The direct call is not made for plain arguments (else the packing would only add cost), and is for an
    address given as an int (what it points at is the caller's to keep) and for a refused argument."""
    g = NativeGraph(64, [16, 16])
    assert g._packers, "the library has no vki_graph_packed_add"
    direct = []
    real = g._so.vki_graph_add_lut1
    monkeypatch.setattr(g._so, "vki_graph_add_lut1", lambda *a: direct.append(a) or real(*a))
    g.add("lut1", 16, TABLE, X, Y)
    assert direct == []
    g.add("lut1", 16, TABLE.ctypes.data, X, Y)
    assert len(direct) == 1
    with pytest.raises(ValueError, match="does not fit"):
        g.add("lut1", -1, TABLE, X, Y)
    assert g.ops() == ["lut1", "lut1"]
    assert struct.calcsize("<q") == 8 and cg._pack(g._packers["lut1"], (16, TABLE, X, Y)) is not None


@pytest.mark.parametrize("offsets", [[0, 16, 8000], [40, 0, 100, 6000, 6010], [5000], [], [0, 12, 20, "big"]])
def test_constants_written_together_leave_the_arena_as_one_write_each(offsets):
    """CpuSegment writes neighbouring constant operands in one call (segment._write_consts): the arena holds each
    piece at its offset and zeros between, as writing them one by one leaves it (read back by a copy op)."""
    from vkinfer.cpu.segment import _write_consts

    arena = 8192
    rng = np.random.default_rng(len(offsets))
    pieces = [(o, rng.integers(1, 256, int(rng.integers(1, 12)), dtype=np.uint8)) for o in offsets if o != "big"]
    if "big" in offsets:  # larger than a merged write takes: written on its own
        pieces.append((32, rng.integers(1, 256, 5000, dtype=np.uint8)))
    want = np.zeros(arena, np.uint8)
    for o, b in pieces:
        want[o:o + b.size] = b
    for write in ("together", "one by one"):
        g = NativeGraph(arena, [arena])
        if write == "together":
            _write_consts(g, pieces)
        else:
            for o, b in pieces:
                g.write(o, b)
        g.add("transpose", 1, u32([arena]), u32([0]), 1, 0, Ref(0, 0, arena), Ref(1, 0, arena))
        got = np.empty(arena, np.uint8)
        g.run([got])
        np.testing.assert_array_equal(got, want, err_msg=write)


@pytest.mark.parametrize("order", ["run", "shuffled", "gapped"])
def test_constants_converted_together_are_each_ones_canonical_bytes(order):
    """segment._canonical_consts: 8-bit constants of one shape converted as a stack (and written in one call where
    their offsets make one run) leave the arena as layout.canonical of each, written one by one, leaves it."""
    from vkinfer.cpu.segment import _canonical_consts, _write_consts
    from vkinfer.layout import canonical

    rng = np.random.default_rng(5)
    shape, n = (1, 4, 3, 5), 12
    arrays = [rng.integers(-128, 128, shape, dtype=np.int8) for _ in range(n)]
    arrays += [rng.integers(0, 256, (2, 3), dtype=np.uint8) for _ in range(3)]  # too few to stack
    offsets = [k * 60 for k in range(n)] + [900, 960, 1100]
    if order == "shuffled":
        offsets[:n] = list(rng.permutation(offsets[:n]))
    elif order == "gapped":
        offsets[3] += 5000
    arena = 8192
    results = []
    for together in (True, False):
        g = NativeGraph(arena, [arena])
        pieces = list(zip(offsets, arrays, strict=True))
        if together:
            _write_consts(g, _canonical_consts(g, pieces))
        else:
            for o, a in pieces:
                g.write(o, canonical(a))
        results.append(read_arena(g, arena))
    np.testing.assert_array_equal(results[0], results[1])
    assert results[1].any()


@pytest.mark.parametrize("value", [0, 7, 2 ** 32 - 1, 2 ** 32, -1, np.uint32(5), np.int64(2 ** 40), True, 2 ** 62])
def test_c_struct_checks_each_integer_field_as_checked_does(value):
    """cpu.c_struct takes a plain int within its field's range as it is and sends everything else through `checked`:
    the same structure, or the same ValueError naming the field (a convolution descriptor's fields, say)."""
    from vkinfer.cpu import _Desc, c_struct, checked

    try:
        want = ("ok", int(checked("convolution.pt", value, ctypes.c_uint32)))
    except ValueError as e:
        want = ("error", str(e))
    try:
        got = ("ok", c_struct(_Desc, "convolution", pt=value, x_zp=-3).pt)
    except ValueError as e:
        got = ("error", str(e))
    assert got == want


def read_arena(g: NativeGraph, arena: int) -> np.ndarray:
    """The `arena` bytes of `g`'s memory as written (a transpose of the whole arena to the graph's output)."""
    g.add("transpose", 1, u32([arena]), u32([0]), 1, 0, Ref(0, 0, arena), Ref(1, 0, arena))
    got = np.empty(arena, np.uint8)
    g.run([got])
    return got


REF_TAILS = [(X, X, Y), (Y, X, X), (Ref(1, 4, 12), Ref(2, 0, 16), Y), (Ref(1, -1, 16), X, Y), (X, (1, 0, 16), Y),
             (Ref(np.int64(1), 0, 16), X, Y), (X, X, Ref(2, 2 ** 63, 16)), (X, X, Ref(2, 2 ** 64, 16)), (X, X)]


def test_a_repeated_form_packs_as_a_first_call_would(monkeypatch):
    """NativeGraph._pack_like_last reuses the last call's words before the refs where those arguments are the same
    objects: its words equal `_pack`'s, and a graph built call by call (odd refs among them) has the direct calls'
    operators and errors."""
    g = NativeGraph(64, [16, 16])
    packer = g._packers["qadd"]
    prefix = _qadd()[:-3]
    for tail in REF_TAILS * 2:
        args = (*prefix, *tail)
        assert g._pack_like_last("qadd", packer, args) == cg._pack(packer, args), tail
    assert g._last_packed["qadd"][0] == prefix
    other = _qadd(ra=0.75)[:-3]  # a new form: packed afresh, then reused
    assert g._pack_like_last("qadd", packer, (*other, X, X, Y)) == cg._pack(packer, (*other, X, X, Y))
    assert g._last_packed["qadd"][0] == other

    def outcomes(packed: bool) -> list:
        g = NativeGraph(64, [16, 16])
        if not packed:
            monkeypatch.setattr(g, "_packers", {})
        got = []
        for tail in REF_TAILS:
            try:
                g.add("qadd", *prefix, *tail)
                got.append("ok")
            except Exception as e:  # noqa: BLE001 (the outcome compared is whatever it raises)
                got.append((type(e).__name__, str(e)))
        return [*got, g.ops()]
    assert outcomes(True) == outcomes(False)


def test_a_shared_form_adds_as_the_direct_calls_do(monkeypatch):
    """NativeGraph.add_form packs a form tuple's words once and only the refs after: over odd refs among plain
    ones, two forms and a form rebuilt equal but not the same object, a graph has the direct calls' operators,
    errors and output bits."""
    prefix, other = tuple(_qadd()[:-3]), tuple(_qadd(ra=0.75)[:-3])
    plan = [(prefix, t) for t in REF_TAILS] + [(other, (X, X, Y)), (prefix, (X, X, Y)),
                                               (tuple(prefix), (Y, X, X)), (tuple(_qadd()[:-3]), (X, Y, Y))]

    def outcomes(shared: bool) -> list:
        g = NativeGraph(64, [16, 16])
        if not shared:
            monkeypatch.setattr(g, "_packers", {})
        got, direct = [], []
        real = g.add
        monkeypatch.setattr(g, "add", lambda *a: direct.append(len(got)) or real(*a))
        for form, tail in plan * 2:
            try:
                if shared:
                    g.add_form("qadd", form, *tail)
                else:
                    g.add("qadd", *form, *tail)
                got.append("ok")
            except Exception as e:  # noqa: BLE001 (the outcome compared is whatever it raises)
                got.append((type(e).__name__, str(e)))
        if shared:  # a plain form seen before takes its packed words, without the direct add
            assert {id(prefix), id(other)} <= set(g._form_words)
            second = [len(plan) + k for k, (f, t) in enumerate(plan)
                      if (f is prefix or f is other) and len(t) == 3 and all(r is X or r is Y for r in t)]
            assert len(second) >= 4 and not set(second) & set(direct), (second, direct)
        x, y = np.arange(16, dtype=np.uint8) * 13, np.zeros(16, np.uint8)
        g.run([x, y])
        return [*got, g.ops(), y.tolist()]
    want = outcomes(False)
    assert outcomes(True) == want
    assert want.count("ok") >= 10 and any(v for v in want[-1])
