"""The native graph's wide gather (cpu_fallback/src/ops/gather.c with 2-, 4- and 8-byte elements: strided runs of
either sign, fill rows, partly filled rows) and float_reduce.c (every op, both of ORT's loop starts, every kind of
merged shape) under AddressSanitizer + UBSan, with external buffers at odd addresses: a subprocess over the
sanitizer build writes the outputs, checked against numpy here and equal to the normal build's bits.
tests/ops/test_float_moves.py and test_float_reduce.py hold the operators to ONNX Runtime's bits."""

from __future__ import annotations

import numpy as np
from support.cpu_build import run_both_builds

DRIVER = r'''
import ctypes
import sys
import numpy as np
from vkinfer.cpu import graph as G
from vkinfer.layout import u32

F = np.float32
EDGE = F([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -3e-39, 3.4e38, 2.5])


from vkinfer.testing.buffers import external as ext


def run(add, ins, out_shape, dtype, misalign):
    arrays = [ext(a, misalign) for a in ins]
    y = ext(np.zeros(out_shape, dtype), misalign)
    g = G.NativeGraph(0, [a.nbytes for a in arrays] + [y.nbytes])
    refs = [G.Ref(k + 1, 0, a.nbytes) for k, a in enumerate(arrays)] + [G.Ref(len(arrays) + 1, 0, y.nbytes)]
    add(g, refs)
    g.run(arrays + [y])
    return np.array(y)


rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
for k, dt in enumerate((np.float32, np.int64, np.int16, np.int32)):
    a = rng.integers(-1000, 1000, 37).astype(dt)
    b = rng.integers(-1000, 1000, 5).astype(dt)
    if dt == np.float32:
        a[::3] = rng.choice(EDGE, 13)
    fill = np.array(-7, dt)
    L = 9
    # (input, lo, hi, start, stride): forward, backward, contiguous, one element, fill row, input 1
    rows = np.array([[0, 0, 9, 0, 4], [0, 2, 7, 36, -7], [0, 0, 9, 28, 1], [0, 4, 5, 17, 0], [2, 0, 0, 0, 0],
                     [1, 1, 6, 4, -1], [1, 3, 8, 0, 1]], np.int64)
    want = np.full((len(rows), L), fill, dt)
    for r, (i, lo, hi, st, sd) in enumerate(rows):
        for j in range(lo, hi):
            want[r, j] = (a, b)[i][st + (j - lo) * sd]
    fv = int.from_bytes(fill.tobytes(), "little")
    esz = np.dtype(dt).itemsize

    def add(g, r, rows=rows, fv=fv, esz=esz):
        arr = (G._Ref * 2)(r[0].c(), r[1].c())
        g.add("gather", 2, np.array([37, 5], np.uint64), L, len(rows), rows, fv, esz, ctypes.addressof(arr), r[2])
    got = run(add, [a, b], (len(rows), L), dt, k % 2 == 1)
    assert np.array_equal(got.view(np.uint8), want.view(np.uint8)), (dt, got, want)
    outs[f"gather{k}"] = got
cases = [((1, 49, 33), 0b010), ((49, 300), 0b01), ((3, 5, 4, 7), 0b1010), ((3, 5, 4, 7), 0b0101), ((4, 1, 6), 0b101),
         ((2, 3, 4, 5, 3, 2), 0b101010), ((37,), 0b1), ((5, 600), 0b01)]
for k, (shape, mask) in enumerate(cases):
    x = np.where(rng.random(shape) < 0.3, rng.choice(EDGE, shape), rng.uniform(-3, 3, shape)).astype(F)
    red = [i for i in range(len(shape)) if (mask >> i) & 1]
    kept = [i for i in range(len(shape)) if i not in red]
    oshape = [shape[i] for i in kept] or [1]
    rows = np.ascontiguousarray(x.transpose(kept + red)).reshape(int(np.prod(oshape)), -1)
    for op in range(4):
        for init in (0, 1):
            add = lambda g, r, op=op, init=init, shape=shape, mask=mask: g.add(
                "float_reduce", op, len(shape), u32(shape), mask, init, r[0], r[1])
            got = run(add, [x], oshape, F, (k + op) % 2 == 1)
            acc = rows[:, 0].copy() if (init or op > 1) else F(0) + rows[:, 0]
            with np.errstate(all="ignore"):
                for j in range(1, rows.shape[1]):
                    v = rows[:, j]
                    acc = acc + v if op < 2 else np.where((v > acc) if op == 2 else (v < acc), v, acc)
                if op == 1:
                    acc = acc / F(rows.shape[1])
            want = acc.astype(F).reshape(oshape)
            same = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
            assert same.all(), (shape, mask, op, init)
            outs[f"red{k}_{op}_{init}"] = got
np.savez(sys.argv[1], **outs)
print("float moves asan: ok", "library:", G.lib()._name)
'''


def test_wide_gather_and_float_reduce_under_asan_and_ubsan(tmp_path):
    sanitized, normal = run_both_builds(DRIVER, tmp_path, "float moves asan: ok", ("3",))
    assert sorted(sanitized) == sorted(normal) and len(normal) == 4 + 8 * 4 * 2
    for k, v in normal.items():
        assert np.array_equal(v.view(np.uint8), sanitized[k].view(np.uint8)), f"{k}: the sanitizer build differs"
