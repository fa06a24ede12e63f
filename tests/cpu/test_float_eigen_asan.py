"""The native graph's Eigen-order float32 operators under AddressSanitizer + UBSan, and equal bit for bit to their
numpy definitions: float_reduce.c's per-row Eigen redux (init_first 3: ReduceSum/Mean/Max/Min over innermost axes,
rows at every 16-byte phase), ORT's KRK and RKR paths (init_first 4 and 5), float_unary.c's Exp (MLAS's) and Log
(Eigen's packets, logf on the tensor's last n % 4 elements, tails in the last of several work items),
float_maxpool.c's global kernel with NaN and signed zeros.
A subprocess over each build of the library (sanitized and normal) runs them on external buffers, some not 4-byte
aligned; this process compares the two builds and the normal build with vkinfer/reference/float_reduce.py,
host_eigen.mlas_exp / eigen_log + logf and reference/float_max_pool.py. tests/ops/test_float_reduce.py,
test_float_unary.py and test_float_max_pool.py hold those to ONNX Runtime's bits."""

from __future__ import annotations

import numpy as np
from support.cpu_build import run_both_builds

from vkinfer.model.host_eigen import eigen_elementwise, eigen_log, mlas_exp
from vkinfer.reference._libm import logf
from vkinfer.reference.float_max_pool import max_pool_float
from vkinfer.reference.float_reduce import reduce_ort

DRIVER = r'''
import sys
import numpy as np
from vkinfer.cpu import graph as G
from vkinfer.layout import u32

F = np.float32
EDGE = F([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -3e-39, 3.4e38, 2.5, 1e8, 0.1])


def vals(rng, n):
    return np.where(rng.random(n) < 0.4, rng.choice(EDGE, n), rng.uniform(-3, 3, n)).astype(F)


def ext(a, misalign):
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
for k, (rows, w) in enumerate(((1, 1), (1, 7), (5, 3), (9, 5), (4, 8), (7, 13), (3, 33), (2, 257), (1, 1030))):
    x = vals(rng, rows * w).reshape(rows, w)
    outs[f"rin{k}"] = x
    for op in range(4):
        if rows == 1:
            add = lambda g, r, op=op, w=w: g.add("float_reduce", op, 1, u32([w]), 1, 3, r[0], r[1])
        else:
            add = lambda g, r, op=op, s=(rows, w): g.add("float_reduce", op, 2, u32(s), 2, 3, r[0], r[1])
        outs[f"r{k}_{op}"] = run(add, [x], (rows,), (k + op) % 2 == 1)
for k, (shape, mask, order) in enumerate((((3, 7, 9), 2, 4), ((2, 5, 1), 2, 4), ((4, 9, 300), 2, 4),
                                          ((3, 4, 5), 5, 5), ((2, 6, 1), 5, 5), ((5, 3, 13), 5, 5))):
    x = vals(rng, int(np.prod(shape))).reshape(shape)
    outs[f"bin{k}"] = x
    for op in range(4):
        add = lambda g, r, op=op, s=shape, mk=mask, o=order: g.add("float_reduce", op, 3, u32(s), mk, o, r[0], r[1])
        outs[f"b{k}_{op}"] = run(add, [x], (shape[0] * shape[2],) if mask == 2 else (shape[1],), (k + op) % 2 == 1)
for k, n in enumerate((1, 2, 3, 4, 5, 1001, 2 * 16384 + 3)):
    x = np.concatenate([vals(rng, n // 2), rng.uniform(-110, 90, n - n // 2).astype(F)])
    outs[f"uin{k}"] = x
    for op in (11, 12):  # Exp, Log
        add = lambda g, r, op=op, n=n: g.add("float_unary", op, n, 0.0, 0.0, r[0], r[1])
        outs[f"u{k}_{op}"] = run(add, [x], (n,), (k + op) % 2 == 1)
for k, (h, w) in enumerate(((1, 1), (2, 2), (3, 3), (5, 7), (1, 13))):
    xp = vals(rng, 3 * h * w).reshape(3, h, w)
    outs[f"pin{k}"] = xp
    add = lambda g, r, a=(3, h, w, 1, 1, h, w, 1, 1, 1, 1, 0, 0, 0, 0): g.add("float_maxpool", *a, r[0], r[1])
    outs[f"p{k}"] = run(add, [xp], (3, 1, 1), k % 2 == 1)
np.savez(sys.argv[1], **outs)
print("float eigen asan: ok", "library:", G.lib()._name)
'''

OPS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin")


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def test_eigen_order_operators_under_asan_and_ubsan_equal_numpy(tmp_path):
    sanitized, normal = run_both_builds(DRIVER, tmp_path, "float eigen asan: ok", ("5",))
    assert sorted(sanitized) == sorted(normal)
    for k in range(9):
        x = normal[f"rin{k}"]
        for op in range(4):
            want = reduce_ort(OPS[op], x, [x.ndim - 1], keepdims=False)
            assert _same(normal[f"r{k}_{op}"], want).all(), (k, OPS[op])
    for k in range(6):
        x = normal[f"bin{k}"]
        axes = [1] if k < 3 else [0, 2]
        for op in range(4):
            want = reduce_ort(OPS[op], x, axes, keepdims=False).reshape(-1)
            assert _same(normal[f"b{k}_{op}"], want).all(), (x.shape, axes, OPS[op])
    for k in range(7):
        x = normal[f"uin{k}"]
        assert _same(normal[f"u{k}_11"], mlas_exp(x)).all(), ("Exp", x.size)
        assert _same(normal[f"u{k}_12"], eigen_elementwise(x, eigen_log, logf)).all(), ("Log", x.size)
    for k in range(5):
        x = normal[f"pin{k}"]
        want = max_pool_float(x[None], list(x.shape[1:]))[0]
        assert _same(normal[f"p{k}"], want).all(), ("GlobalMaxPool", x.shape)
    for k, v in normal.items():
        same = _same(v, sanitized[k])
        assert same.all(), f"{k}: the sanitizer build differs at {np.argwhere(~same)[:4].tolist()}"
