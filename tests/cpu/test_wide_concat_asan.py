"""The native concat and gather of 64 or more inputs (cpu_fallback/src/ops/concat.c, gather.c: their operand lists
are on the heap now, up to VKI_GRAPH_MAX_REFS; 64 was the limit) under AddressSanitizer + UBSan: a subprocess over
the sanitizer build runs a 100-input concat (some inputs through 256-byte tables) and 100-input gathers of 1- and
4-byte elements, checks them against numpy there, and checks that an input count past the limit is refused
cleanly; this process compares the outputs with the normal build's."""

from __future__ import annotations

import numpy as np
from support.cpu_build import run_both_builds

DRIVER = r'''
import ctypes
import sys
import numpy as np
from vkinfer.cpu import graph as G
from vkinfer.errors import VkInferError
from vkinfer.layout import u32

rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
n, rows = 100, 3


def refs_of(arrays):
    refs = [G.Ref(k + 1, 0, a.nbytes) for k, a in enumerate(arrays)]
    arr = (G._Ref * len(refs))(*[r.c() for r in refs])
    return arr


widths = rng.integers(1, 6, n)
xs = [rng.integers(0, 256, (rows, int(w)), dtype=np.uint8) for w in widths]
tables = [rng.integers(0, 256, 256, dtype=np.uint8) if k % 3 == 0 else None for k in range(n)]
y = np.zeros((rows, int(widths.sum())), np.uint8)
g = G.NativeGraph(0, [x.nbytes for x in xs] + [y.nbytes])
ptrs = (ctypes.c_void_p * n)(*[None if t is None else t.ctypes.data for t in tables])
arr = refs_of(xs)
g.add("concat", n, rows, u32(widths), ctypes.addressof(ptrs), ctypes.addressof(arr), G.Ref(n + 1, 0, y.nbytes))
g.run(xs + [y])
want = np.concatenate([x if t is None else t[x] for x, t in zip(xs, tables)], axis=1)
assert np.array_equal(y, want), "concat"
outs["concat"] = y

for elem, dt in ((1, np.uint8), (4, np.uint32)):
    sizes = rng.integers(1, 9, n)
    xs = [rng.integers(0, 200, int(s)).astype(dt) for s in sizes]
    L = int(sizes.max()) + 2
    table = np.array([[k, 0, int(s), 0, 1] for k, s in enumerate(sizes)], np.int64).reshape(-1)
    y = np.zeros((n, L), dt)
    g = G.NativeGraph(0, [x.nbytes for x in xs] + [y.nbytes])
    arr = refs_of(xs)
    g.add("gather", n, np.ascontiguousarray(sizes, np.uint64), L, n, table, 7, elem, ctypes.addressof(arr),
          G.Ref(n + 1, 0, y.nbytes))
    g.run(xs + [y])
    want = np.full((n, L), 7, dt)
    for k, x in enumerate(xs):
        want[k, :x.size] = x
    assert np.array_equal(y, want), f"gather {elem}"
    outs[f"gather{elem}"] = y

big = 65536  # past VKI_GRAPH_MAX_REFS - 1 inputs: refused, nothing read
g = G.NativeGraph(16, [])
for op, args in (("concat", (big, 1, u32(np.ones(big, np.int64)), 0, 0, G.Ref(0, 0, 1))),
                 ("gather", (big, np.ones(big, np.uint64), 1, 1, np.zeros(5, np.int64), 0, 1, 0, G.Ref(0, 0, 1)))):
    try:
        g.add(op, *args)
    except (ValueError, VkInferError) as e:
        assert "inputs" in str(e), str(e)
    else:
        raise AssertionError(f"{op} of {big} inputs was accepted")
np.savez(sys.argv[1], **outs)
print("wide concat asan: ok", "library:", G.lib()._name)
'''


def test_wide_concat_and_gather_under_asan_and_ubsan(tmp_path):
    sanitized, normal = run_both_builds(DRIVER, tmp_path, "wide concat asan: ok", ("3",))
    assert sorted(sanitized) == sorted(normal) == ["concat", "gather1", "gather4"]
    for k, v in normal.items():
        assert np.array_equal(v, sanitized[k]), k
