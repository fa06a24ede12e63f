"""The native graph's float32 operators (cpu_fallback/src/ops/float_binary.c, float_unary.c with every op code,
float_maxpool.c, batch_norm.c, float_clip.c with every bound-tensor flag, float_reduce.c's Eigen reduce-all order) under
AddressSanitizer + UBSan: a subprocess over the sanitizer build of the library runs each operator on random shapes
(every broadcast pattern and MaxPool loop kind, edge values), with external buffers that are not 4-byte aligned
too, and writes the outputs; this process compares them with the normal build's, which tests/ops/test_float_*.py
and test_batch_normalization.py hold to ONNX Runtime's bits (the reduce-all results also to the reference's
eigen_redux here)."""

from __future__ import annotations

import numpy as np
from support.cpu_build import run_both_builds

from vkinfer.reference.float_reduce import eigen_redux

DRIVER = r'''
import sys
import numpy as np
from vkinfer.cpu import graph as G
from vkinfer.cpu.float_elementwise import merged_broadcast
from vkinfer.layout import u32

F = np.float32
EDGE = F([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -3e-39, 3.4e38, 2.5])


def vals(rng, n):
    return np.where(rng.random(n) < 0.5, rng.choice(EDGE, n), rng.uniform(-3, 3, n)).astype(F)


def ext(a, misalign):
    """`a` as an external buffer, at an odd address when `misalign`."""
    if not misalign:
        return np.ascontiguousarray(a)
    raw = np.zeros(a.nbytes + 1, np.uint8)
    v = np.frombuffer(raw, dtype=a.dtype, count=a.size, offset=1).reshape(a.shape)
    v[...] = a
    return v


def run(add, ins, out_shape, misalign):
    arrays = [ext(a, misalign) for a in ins]
    y = ext(np.zeros(out_shape, F), misalign)
    g = G.NativeGraph(0, [a.nbytes for a in arrays] + [y.nbytes])
    refs = [G.Ref(k + 1, 0, a.nbytes) for k, a in enumerate(arrays)] + [G.Ref(len(arrays) + 1, 0, y.nbytes)]
    add(g, refs)
    g.run(arrays + [y])
    return np.array(y)


rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
shapes = [((7,), (7,)), ((1,), (9,)), ((3, 1), (3, 7)), ((1, 6), (5, 1)), ((2, 3, 4), (2, 1, 4)),
          ((2, 1, 3, 1, 5), (1, 4, 1, 2, 1)), ((1, 3, 5, 5), ())]
for k, (sa, sb) in enumerate(shapes):
    so = np.broadcast_shapes(sa, sb)
    out, ma, mb = merged_broadcast(so, sa, sb)
    a, b = vals(rng, int(np.prod(sa))).reshape(sa), vals(rng, int(np.prod(sb))).reshape(sb)
    for op in range(7):
        add = lambda g, r, op=op: g.add("float_binary", op, len(out), u32(out), u32(ma), u32(mb), r[0], r[1], r[2])
        outs[f"bin{k}_{op}"] = run(add, [a, b], so, k % 2 == 1)
x = vals(rng, 999).reshape(27, 37)
for op in range(11):  # Relu .. Sqrt, HardSigmoid, HardSwish, Sigmoid, Tanh, Erf
    add = lambda g, r, op=op: g.add("float_unary", op, x.size, -0.5 if op == 2 else 0.1, 1.5, r[0], r[1])
    outs[f"un{op}"] = run(add, [x], x.shape, op % 2 == 1)
pools = [((2, 8, 8), (4, 4), (2, 2), (2, 2), (1, 1), (0, 0, 0, 0)),
         ((2, 9, 7), (4, 3), (3, 2), (2, 2), (1, 1), (1, 0, 1, 1)),
         ((2, 10, 13), (5, 4), (3, 3), (2, 3), (1, 1), (1, 1, 1, 1)),
         ((2, 5, 7), (1, 1), (5, 7), (1, 1), (1, 1), (0,) * 4),
         ((2, 9, 10), (5, 4), (2, 3), (2, 2), (2, 2), (1, 1, 1, 1)),
         ((1, 3, 2100), (2, 1050), (2, 2), (1, 2), (1, 1), (0,) * 4)]
for k, ((nc, h, w), (oh, ow), (kh, kw), (sh, sw), (dh, dw), p) in enumerate(pools):
    xp = vals(rng, nc * h * w).reshape(nc, h, w)
    add = lambda g, r, a=(nc, h, w, oh, ow, kh, kw, sh, sw, dh, dw, *p): g.add("float_maxpool", *a, r[0], r[1])
    outs[f"pool{k}"] = run(add, [xp], (nc, oh, ow), k % 2 == 1)
xb = vals(rng, 2 * 5 * 11).reshape(2, 5, 11)
s, b = rng.uniform(-2, 2, 5).astype(F), rng.uniform(-1, 1, 5).astype(F)
outs["bn"] = run(lambda g, r: g.add("batch_norm", 2, 5, 11, s, b, r[0], r[1]), [xb], xb.shape, True)
xc = vals(rng, 1001).reshape(7, 143)
for flags in (1, 2, 3):
    for k, (lo, hi) in enumerate(((-0.5, 1.5), (np.nan, 0.0), (0.0, -0.0), (2.0, -1.0))):
        add = lambda g, r, f=flags: g.add("float_clip", xc.size, f, -1.0, 1.0, r[0], r[1], r[2], r[3])
        outs[f"clip{flags}_{k}"] = run(add, [xc, F([lo]), F([hi])], xc.shape, (flags + k) % 2 == 1)
for n in (1, 3, 4, 5, 8, 13, 256, 257):
    xr = vals(rng, n)
    outs[f"rin{n}"] = xr
    for op in (2, 3):
        add = lambda g, r, op=op, n=n: g.add("float_reduce", op, 1, u32([n]), 1, 2, r[0], r[1])
        outs[f"rall{n}_{op}"] = run(add, [xr], (1,), n % 2 == 1)
np.savez(sys.argv[1], **outs)
print("float ops asan: ok", "library:", G.lib()._name)
'''


def test_float_operators_under_asan_and_ubsan(tmp_path):
    sanitized, normal = run_both_builds(DRIVER, tmp_path, "float ops asan: ok", ("7",))
    assert sorted(sanitized) == sorted(normal) and len(normal) == 7 * 7 + 11 + 6 + 1 + 3 * 4 + 8 * 3
    for n in (1, 3, 4, 5, 8, 13, 256, 257):  # the reduce-all order is the reference's (ORT's, probed)
        for op in (2, 3):
            want = eigen_redux(normal[f"rin{n}"], ("ReduceMax", "ReduceMin")[op - 2])
            got = normal[f"rall{n}_{op}"][0]
            assert got.view(np.uint32) == want.view(np.uint32) or (np.isnan(got) and np.isnan(want)), (n, op)
    for k, v in normal.items():
        w = sanitized[k]
        same = (v.view(np.uint32) == w.view(np.uint32)) | (np.isnan(v) & np.isnan(w))
        assert same.all(), f"{k}: the sanitizer build differs at {np.argwhere(~same)[:4].tolist()}"
