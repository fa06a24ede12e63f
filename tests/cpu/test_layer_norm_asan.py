"""cpu_fallback/src/ops/layer_norm.c under AddressSanitizer + UBSan: a subprocess over the sanitizer build runs every
mode (ORT's Welford and AVX2 rows, its float64 path, the fused chain with every operand-order flag, with and without
scale/bias) on row lengths 1..17 and 300, edge values included, with external buffers at odd addresses too; this
process compares the outputs with the normal build's and with the numpy definitions (vkinfer/reference/
layer_normalization.py) bit for bit, and checks that bad arguments are refused with a message."""

from __future__ import annotations

import numpy as np
from support.cpu_build import run_both_builds

from vkinfer.reference import layer_normalization as ln

DRIVER = r'''
import sys
import numpy as np
from vkinfer.cpu import graph as G

F = np.float32
EDGE = F([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -3e-39, 3e38, 2.5, 1e4])


from vkinfer.testing.buffers import external as ext


def run(args, x, misalign):
    xa, y = ext(x, misalign), ext(np.zeros(x.shape, F), misalign)
    g = G.NativeGraph(0, [xa.nbytes, y.nbytes])
    g.add("layer_norm", *args, G.Ref(1, 0, xa.nbytes), G.Ref(2, 0, y.nbytes))
    g.run([xa, y])
    return np.array(y)


rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
for n in list(range(1, 18)) + [300]:
    rows = 5
    x = rng.standard_normal((rows, n)).astype(F) * F(3) + F(1)
    x[0] = rng.choice(EDGE, n)
    x[1] = F(7.5)
    x[2] = rng.standard_normal(n).astype(F) * F(0.01) + F(1e4)
    s, b = rng.standard_normal(n).astype(F), rng.standard_normal(n).astype(F)
    outs[f"x{n}"], outs[f"s{n}"], outs[f"b{n}"] = x, s, b
    for mode in (0, 1):
        for hb in (0, 1):
            outs[f"m{mode}_{hb}_{n}"] = run((mode, rows, n, 1e-5, s, b if hb else None, 0), x, (n + hb) % 2 == 1)
    for flags in range(8):
        for hg, hb in ((0, 0), (1, 0), (0, 1), (1, 1)):
            args = (2, rows, n, 1e-5, s if hg else None, b if hb else None, flags)
            outs[f"c{flags}_{hg}{hb}_{n}"] = run(args, x, (n + flags) % 2 == 1)
bad = 0
for args in ((3, 1, 4, 0.0, None, None, 0), (0, 1, 4, 0.0, None, None, 0), (0, 0, 4, 0.0, F([1] * 4), None, 0),
             (2, 1, 4, 0.0, None, None, 8), (0, 1, 4, 0.0, F([1] * 4), None, 1)):
    g = G.NativeGraph(0, [16, 16])
    try:
        g.add("layer_norm", *args, G.Ref(1, 0, 16), G.Ref(2, 0, 16))
    except (ValueError, RuntimeError) as e:
        bad += "layer_norm" in str(e)
outs["bad"] = np.array([bad])
np.savez(sys.argv[1], **outs)
print("layer_norm asan: ok", "library:", G.lib()._name)
'''


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def test_layer_norm_under_asan_and_ubsan_equals_numpy(tmp_path):
    sanitized, normal = run_both_builds(DRIVER, tmp_path, "layer_norm asan: ok", ("3",))
    assert sorted(sanitized) == sorted(normal)
    assert int(normal["bad"][0]) == 5  # every bad argument refused with a message naming the operator
    for k, v in normal.items():
        assert _same(v, sanitized[k]).all(), f"{k}: the sanitizer build differs"
    for n in list(range(1, 18)) + [300]:
        x, s, b = normal[f"x{n}"], normal[f"s{n}"], normal[f"b{n}"]
        for hb in (0, 1):
            bias = b if hb else None
            with np.errstate(all="ignore"):
                fast = ln._welford if n < 8 else ln._avx2
                want0 = fast(x, s[None], None if bias is None else bias[None], np.float32(1e-5))[0]
                want1 = ln._double(x, s[None], None if bias is None else bias[None], np.float32(1e-5))[0]
            assert _same(normal[f"m0_{hb}_{n}"], want0).all(), (n, hb, "ORT row")
            assert _same(normal[f"m1_{hb}_{n}"], want1).all(), (n, hb, "float64 path")
        for flags in range(8):
            for hg, hb in ((0, 0), (1, 0), (0, 1), (1, 1)):
                want = ln.layer_norm_chain(x, np.float32(1e-5), s if hg else None, b if hb else None, [-1],
                                           bool(flags & 1), bool(flags & 2), bool(flags & 4))
                assert _same(normal[f"c{flags}_{hg}{hb}_{n}"], want).all(), (n, flags, hg, hb)
