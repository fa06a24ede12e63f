"""float32 AveragePool in the native CPU graph (vkinfer/cpu/float_average_pool.py, cpu_fallback/src/ops/
float_avgpool.c) and the interpreter's kernel (vkinfer/reference/float_average_pool.py) against ONNX Runtime's CPU
EP (one thread, nodes as written), on tables of signed zeros, NaN, infinities and denormals and on random
geometries: ORT runs one of four loops by the opset and geometry (AveragePool-19's own loop; MLAS's global, vector
and generic kernels), each with its own summation order and divisor, so every kind is in the tables, at opsets 11
and 19, with 1 to 3 spatial axes, count_include_pad and ceil_mode. The node runs on the cpu device in cpu and Vulkan
sessions; the C equals the numpy bit for bit under ASan/UBSan too.

The models carry an unrelated DequantizeLinear branch so vkinfer takes them (8-bit models only) while AveragePool
reads a float graph input."""

from __future__ import annotations

import numpy as np
import pytest
from support.agree import run_devices
from support.cpu_build import run_both_builds

import vkinfer
from vkinfer.reference._pool_shape import pool_geometry
from vkinfer.reference.float_average_pool import average_pool_float, pool_kind

from ._build import NAME, check, model, node, ort_run, refused

F32 = np.float32
EDGE = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -1e-45, 3.4028235e38, -3.4028235e38,
                 0.1, 1 / 3], F32)

# (input shape, attributes, opset): the loop ORT takes in the comment.
CASES = [
    ((1, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2]), 11),                        # vector, stride 2
    ((1, 2, 7, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1]), 11),                      # vector, exclude pad
    ((1, 2, 7, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), 11),  # vector, include pad
    ((1, 2, 9, 7), dict(kernel_shape=[3, 2], strides=[2, 2], ceil_mode=1), 11),            # vector, ceil_mode
    ((1, 2, 9, 7), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1], ceil_mode=1,
                        count_include_pad=1), 11),                                         # own loop, clipped count
    ((1, 3, 10, 13), dict(kernel_shape=[3, 3], strides=[2, 3], pads=[1, 1, 1, 1]), 11),   # generic: stride 3
    ((1, 1, 4, 40), dict(kernel_shape=[2, 33], count_include_pad=1, pads=[1, 2, 0, 3]), 11),  # generic: side > 32
    ((1, 2, 5, 7), dict(kernel_shape=[5, 7]), 11),                                         # global
    ((1, 2, 3, 3), dict(kernel_shape=[3, 3]), 11),                                         # global, 9 = 2 * 4 + 1
    ((1, 2, 13), dict(kernel_shape=[13]), 11),                                             # global, 1-D
    ((1, 2, 11), dict(kernel_shape=[3], strides=[2], pads=[1, 2]), 11),                    # generic, 1-D
    ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[1, 1, 0, 0, 1, 1]), 11),  # vector 3-D
    ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[1, 1, 0, 0, 1, 1],
                           count_include_pad=1), 11),
    ((1, 2, 5, 4, 7), dict(kernel_shape=[2, 2, 3], strides=[2, 1, 3]), 11),               # generic 3-D
    ((1, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2]), 19),                        # opset 19: its own loop
    ((1, 2, 7, 9), dict(kernel_shape=[3, 3], pads=[1, 1, 1, 1], count_include_pad=1), 19),
    ((1, 2, 5, 7), dict(kernel_shape=[5, 7]), 19),
    ((1, 2, 9, 10), dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1,
                         ceil_mode=1), 19),                                                # dilated
    ((1, 2, 4, 5, 9), dict(kernel_shape=[2, 2, 3], dilations=[1, 2, 2], strides=[1, 1, 2], pads=[0, 1, 1, 1, 1, 2],
                           ceil_mode=1, count_include_pad=1), 22),
    ((1, 4, 1, 1), dict(kernel_shape=[1, 1]), 11),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"), 11),      # auto_pad resolved
    ((1, 2, 7, 8), dict(kernel_shape=[2, 3], auto_pad="SAME_LOWER", count_include_pad=1), 19),
    ((1, 2, 7, 8), dict(kernel_shape=[3, 2], strides=[2, 3], auto_pad="VALID"), 11),
]


def _blob(shape, attrs, opset: int) -> bytes:
    return model([node("AveragePool", ["x"], ["y"], **attrs), node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, shape), "q": (np.uint8, (4,))}, {"s": F32(0.5)}, {"y": F32, "qf": F32}, opset=opset)


def _edge(rng, shape) -> np.ndarray:
    """Edge values, signed zeros (windows of -0 only), NaN and infinities among ordinary values."""
    n = int(np.prod(shape))
    r = rng.random(n)
    v = np.where(r < 0.3, rng.choice(EDGE, n), np.where(r < 0.6, rng.choice(F32([0.0, -0.0, -0.0]), n),
                                                       rng.uniform(-2, 2, n)))
    return v.astype(F32).reshape(shape)


def _feed(x) -> dict:
    return {"x": x, "q": np.arange(4, dtype=np.uint8)}


def _kinds() -> set[str]:
    out = set()
    for shape, a, opset in CASES:
        k, s, p, d, _ = pool_geometry(shape, a["kernel_shape"], a.get("strides"), a.get("pads"), a.get("dilations"),
                                      a.get("ceil_mode", 0), a.get("auto_pad"))
        out.add(pool_kind(shape[2:], k, s, p, d, a.get("ceil_mode", 0), a.get("count_include_pad", 0), opset))
    return out


def test_the_cases_cover_every_loop():
    assert _kinds() == {"loop", "global", "vector", "generic"}


@pytest.mark.parametrize("case", range(len(CASES)), ids=[f"{c[0]}-{sorted(c[1].items())}-{c[2]}" for c in CASES])
def test_edge_tables(case):
    shape, attrs, opset = CASES[case]
    blob = _blob(shape, attrs, opset)
    rng = np.random.default_rng(case)
    for k in range(3):
        x = _edge(rng, shape)
        if k == 2:  # signed zeros only: -0 sums, +0 starts and padding
            x = rng.choice(F32([0.0, -0.0, -0.0, -0.0]), x.shape).astype(F32)
        run_devices(blob, _feed(x), want=ort_run(blob, _feed(x)), what=f"table {k}")
    for d in ("cpu", "vulkan"):
        assert vkinfer.InferenceSession(blob, device=d).placement[NAME] == "cpu"


@pytest.mark.parametrize("case", [0, 4, 7, 11, 14, 17])
def test_random_all_devices(case):
    shape, attrs, opset = CASES[case]
    blob = _blob(shape, attrs, opset)
    x = np.random.default_rng(case).uniform(-3, 3, shape).astype(F32)
    check(blob, _feed(x), ort_run(blob, _feed(x)), where="cpu", nodes=[NAME])


def _random_geometry(rng):
    nd = int(rng.integers(1, 4))
    k = [int(rng.integers(1, 5)) for _ in range(nd)]
    if rng.random() < 0.1:
        k[-1] = int(rng.integers(30, 36))
    s = [int(rng.integers(1, 4)) for _ in range(nd)]
    d = [int(rng.integers(1, 3)) if rng.random() < 0.25 else 1 for _ in range(nd)]
    p = [int(rng.integers(0, v)) for v in k] + [int(rng.integers(0, v)) for v in k]
    sp = [int(rng.integers((kk - 1) * dd + 1, 12 + (kk - 1) * dd)) for kk, dd in zip(k, d, strict=True)]
    if rng.random() < 0.15:
        k, s, p, d = sp[:], [1] * nd, [0] * (2 * nd), [1] * nd
    opset = int(rng.choice([10, 11, 19, 22])) if max(d) == 1 else int(rng.choice([19, 22]))
    attrs = dict(kernel_shape=k, strides=s, pads=p, count_include_pad=int(rng.integers(0, 2)),
                 ceil_mode=int(rng.integers(0, 2)))
    if opset >= 19:
        attrs["dilations"] = d
    return (1, 2, *sp), attrs, opset


def test_random_geometries_equal_ort():
    """The numpy kernel (and the C, every device) equals ORT on random geometries of every kind and opset."""
    rng = np.random.default_rng(2025)
    seen, native = set(), 0
    for _ in range(160):
        shape, attrs, opset = _random_geometry(rng)
        a = attrs
        try:
            pool_geometry(shape, a["kernel_shape"], a["strides"], a["pads"], a.get("dilations"), a["ceil_mode"])
        except ValueError:
            continue
        x = (rng.choice(EDGE, shape) if rng.random() < 0.4 else rng.uniform(-3, 3, shape)).astype(F32)
        blob = _blob(shape, attrs, opset)
        want = ort_run(blob, _feed(x))[0]
        got = average_pool_float(x, a["kernel_shape"], a["strides"], a["pads"], a.get("dilations"), a["ceil_mode"],
                                 None, a["count_include_pad"], opset)
        assert got.shape == want.shape and np.array_equal(got.view(np.uint32), want.view(np.uint32)) or (
            np.array_equal(np.isnan(got), np.isnan(want))
            and np.array_equal(got[~np.isnan(got)].view(np.uint32), want[~np.isnan(want)].view(np.uint32))), (
            shape, attrs, opset)
        k, s, p, d, _ = pool_geometry(shape, a["kernel_shape"], a["strides"], a["pads"], a.get("dilations"),
                                      a["ceil_mode"])
        seen.add(pool_kind(shape[2:], k, s, p, d, a["ceil_mode"], a["count_include_pad"], opset))
        if native < 12:  # a few through the native graph too
            sess = vkinfer.InferenceSession(blob, device="cpu")
            out = sess.run(None, _feed(x))[0]
            assert np.array_equal(np.isnan(out), np.isnan(want)) and np.array_equal(
                out[~np.isnan(out)].view(np.uint32), want[~np.isnan(want)].view(np.uint32)), (shape, attrs, opset)
            assert sess.placement[NAME] == "cpu"
            native += 1
    assert seen == {"loop", "global", "vector", "generic"}


def test_qdq_average_pool_between_float_ops_is_one_native_call():
    """DQ -> AveragePool -> Mul by a float constant -> Q (other parameters): ORT keeps the pool in float (its
    output is not a Q), so does vkinfer; every device gives ORT's bits, the cpu device in one native call."""
    shape = (1, 3, 9, 9)
    blob = model([node("DequantizeLinear", ["q", "s", "z"], ["x"], name="dq"),
                  node("AveragePool", ["x"], ["a"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
                  node("Mul", ["a", "k"], ["m"], name="mul"),
                  node("QuantizeLinear", ["m", "s2", "z2"], ["y"], name="qy")],
                 {"q": (np.uint8, shape)}, {"s": F32(0.07), "z": np.uint8(120), "k": F32(1.7), "s2": F32(0.05),
                                            "z2": np.uint8(131)}, opset=13)
    rng = np.random.default_rng(5)
    for _ in range(3):
        feed = {"q": rng.integers(0, 256, shape).astype(np.uint8)}
        sessions = check(blob, feed, ort_run(blob, feed), where="cpu", on_vulkan="any")
    plan = sessions["cpu"].plan(feed)
    assert plan.native_calls == 1 and len(plan.segments) == 1
    assert "float_avgpool" in set(plan.segments[0].runner.ops())


def test_negative_auto_pad_pads_are_refused_as_ort_refuses_them():
    """auto_pad SAME with a stride above the kernel gives a pad of -1; ORT 1.31 fails the run ("padding values must
    be non-negative"), every device refuses the model naming the node."""
    blob = _blob((1, 2, 8, 8), dict(kernel_shape=[1, 2], strides=[3, 1], auto_pad="SAME_UPPER"), 11)
    x = np.ones((1, 2, 8, 8), F32)
    with pytest.raises(Exception, match="non-negative"):
        ort_run(blob, _feed(x))
    refused(blob, _feed(x), "non-negative")


def test_int8_average_pool_is_refused_naming_the_input():
    """ORT has no 8-bit AveragePool kernel (a QDQ one becomes QLinearAveragePool): the interpreter's kernel says so."""
    from vkinfer.model.graph import Node
    from vkinfer.model.op_table import OPS

    n = Node("AveragePool", NAME, ["xq"], ["y"], {"kernel_shape": [2, 2]})
    with pytest.raises(TypeError, match="xq"):
        OPS["AveragePool"](n, [np.zeros((1, 1, 4, 4), np.uint8)], {})


ASAN_CASES = [((2, 3, 8, 8), dict(kernel_shape=[2, 2], strides=[2, 2]), 11),
              ((2, 2, 7, 9), dict(kernel_shape=[3, 3], pads=[2, 2, 2, 2], count_include_pad=0), 11),
              ((2, 2, 9, 7), dict(kernel_shape=[3, 2], strides=[2, 2], pads=[1, 1, 2, 1], ceil_mode=1), 11),
              ((1, 2, 3, 2000), dict(kernel_shape=[2, 32], strides=[1, 2], pads=[1, 31, 1, 12], ceil_mode=1), 11),
              ((1, 2, 3, 2100), dict(kernel_shape=[2, 2], strides=[1, 2]), 11),
              ((1, 2, 5, 7), dict(kernel_shape=[5, 7]), 11),
              ((1, 2, 13), dict(kernel_shape=[13]), 11),
              ((1, 2, 11), dict(kernel_shape=[3], strides=[2], pads=[2, 2], count_include_pad=1), 11),
              ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 3, 2], strides=[1, 2, 2], pads=[1, 1, 1, 1, 2, 1]), 11),
              ((1, 2, 4, 5, 6), dict(kernel_shape=[2, 3, 2], strides=[3, 2, 1], count_include_pad=1, ceil_mode=1), 11),
              ((1, 2, 9, 10), dict(kernel_shape=[2, 3], dilations=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1,
                                   ceil_mode=1), 19),
              ((1, 2, 4, 5, 9), dict(kernel_shape=[2, 2, 3], dilations=[1, 2, 2], strides=[1, 1, 2],
                                     pads=[0, 1, 1, 1, 1, 2], ceil_mode=1, count_include_pad=1), 22)]

DRIVER = r'''
import sys
import numpy as np
from vkinfer.cpu import graph as G
from vkinfer.cpu.float_average_pool import avgpool_dims
from vkinfer.layout import u32
from vkinfer.model.graph import Node

F = np.float32
EDGE = F([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, 3.4e38, 2.5])
CASES = @CASES@


from vkinfer.testing.buffers import external as ext


rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
for i, (shape, attrs, opset) in enumerate(CASES):
    n = int(np.prod(shape))
    x = np.where(rng.random(n) < 0.4, rng.choice(EDGE, n), rng.uniform(-3, 3, n)).astype(F).reshape(shape)
    dims, oshape = avgpool_dims(Node("AveragePool", "p", ["x"], ["y"], {**attrs, "_opset": opset}), shape)
    xa, y = ext(x, i % 2 == 1), ext(np.zeros(oshape, F), i % 2 == 1)
    g = G.NativeGraph(0, [xa.nbytes, y.nbytes])
    g.add("float_avgpool", shape[0] * shape[1], u32(dims), G.Ref(1, 0, xa.nbytes), G.Ref(2, 0, y.nbytes))
    g.run([xa, y])
    outs[f"x{i}"], outs[f"y{i}"] = x, np.array(y)
np.savez(sys.argv[1], **outs)
print("float avgpool asan: ok", "library:", G.lib()._name)
'''


def test_native_avgpool_under_asan_and_ubsan_equals_the_reference(tmp_path):
    """Every loop kind (the vector kernel's row at the 2048-float buffer's edge, and past it: generic), misaligned
    buffers too: the sanitizer build, the normal build and the numpy kernel agree bit for bit."""
    driver = DRIVER.replace("@CASES@", repr(ASAN_CASES))
    sanitized, normal = run_both_builds(driver, tmp_path, "float avgpool asan: ok", ("3",))
    for i, (_, attrs, opset) in enumerate(ASAN_CASES):
        x, y, ys = normal[f"x{i}"], normal[f"y{i}"], sanitized[f"y{i}"]
        want = average_pool_float(x, attrs["kernel_shape"], attrs.get("strides"), attrs.get("pads"),
                                  attrs.get("dilations"), attrs.get("ceil_mode", 0), None,
                                  attrs.get("count_include_pad", 0), opset)
        for got in (y, ys):
            assert np.array_equal(np.isnan(got), np.isnan(want)), i
            assert np.array_equal(got[~np.isnan(got)].view(np.uint32), want[~np.isnan(want)].view(np.uint32)), i
