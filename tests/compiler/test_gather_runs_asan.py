"""The byte gather's runs (cpu_fallback/src/ops/gather.c, elem 1: the table's rows as copies and fills in output
order, neighbours merged where the output and the input both continue) under AddressSanitizer + UBSan, with
external buffers at odd addresses: random tables (ring-buffer Concats of whole rows, Slices, partly filled and
fill rows, strided runs of either sign, runs that continue across rows and runs that do not) against a numpy walk
of the table, and the sanitizer build equal to the normal build's bits."""

from __future__ import annotations

import numpy as np
from support.cpu_build import run_both_builds

DRIVER = r'''
import ctypes
import sys
import numpy as np
from vkinfer.cpu import graph as G


def ext(a, misalign):
    raw = np.zeros(a.nbytes + misalign, np.uint8)
    v = np.frombuffer(raw, dtype=a.dtype, count=a.size, offset=misalign).reshape(a.shape)
    v[...] = a
    return v


def table(rng, sizes, L, n_rows):
    rows = []
    pos = [0] * len(sizes)
    for r in range(n_rows):
        kind = rng.integers(6)
        k = int(rng.integers(len(sizes)))
        if kind == 0:
            rows.append([len(sizes), 0, 0, 0, 0])  # a fill row
            continue
        lo, hi = (0, L) if kind < 3 else sorted(int(v) for v in rng.integers(0, L + 1, 2))
        m = hi - lo
        if m == 0:
            rows.append([k, lo, lo, 0, 0])
            continue
        if kind in (1, 2) and pos[k] + m <= sizes[k]:  # continues the previous row's run of this input
            start, st = pos[k], 1
        else:
            st = int(rng.choice([1, 1, 2, -1, -3, 0]))
            span = (m - 1) * abs(st)
            if span >= sizes[k]:
                st, span = 1, m - 1
            if span >= sizes[k]:
                rows.append([k, lo, lo, 0, 0])
                continue
            start = int(rng.integers(0, sizes[k] - span)) + (span if st < 0 else 0)
        rows.append([k, lo, hi, start, st])
        pos[k] = start + m if st == 1 else 0
    return np.array(rows, np.int64).reshape(-1, 5)


rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
for case in range(60):
    n_in = int(rng.integers(1, 4))
    sizes = [int(rng.integers(1, 200)) for _ in range(n_in)]
    L, n_rows = int(rng.integers(1, 40)), int(rng.integers(1, 12))
    rows = table(rng, sizes, L, n_rows)
    xs = [rng.integers(0, 256, s).astype(np.uint8) for s in sizes]
    fill = int(rng.integers(256))
    want = np.full((n_rows, L), fill, np.uint8)
    for r, (i, lo, hi, st, sd) in enumerate(rows):
        for j in range(lo, hi):
            want[r, j] = xs[i][st + (j - lo) * sd]
    arrays = [ext(a, case % 3) for a in xs]
    y = ext(np.zeros((n_rows, L), np.uint8), (case + 1) % 2)
    g = G.NativeGraph(0, [a.nbytes for a in arrays] + [y.nbytes])
    refs = [G.Ref(k + 1, 0, a.nbytes) for k, a in enumerate(arrays)]
    arr = (G._Ref * n_in)(*[r.c() for r in refs])
    g.add("gather", n_in, np.array(sizes, np.uint64), L, n_rows, rows, fill, 1, ctypes.addressof(arr),
          G.Ref(n_in + 1, 0, y.nbytes))
    g.run(arrays + [y])
    assert np.array_equal(y, want), (case, rows, y, want)
    outs[f"case{case}"] = np.array(y)
np.savez(sys.argv[1], **outs)
print("byte gather asan: ok", "library:", G.lib()._name)
'''


def test_byte_gather_runs_under_asan_and_ubsan(tmp_path):
    sanitized, normal = run_both_builds(DRIVER, tmp_path, "byte gather asan: ok", ("5",))
    assert sorted(sanitized) == sorted(normal) and len(normal) == 60
    for k, v in normal.items():
        assert np.array_equal(v, sanitized[k]), f"{k}: the sanitizer build differs"
