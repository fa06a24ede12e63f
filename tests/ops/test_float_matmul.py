"""float32 MatMul and Gemm (vkinfer/reference/float_matmul.py, vkinfer/cpu/float_matmul.py, cpu_fallback/src/ops/
float_gemm.c) against ONNX Runtime's CPU EP (one intra-op thread, nodes as written) bit for bit on every device, the
node asserted to run on the cpu device in cpu and vulkan sessions.

The shapes reach every choice MLAS makes: K beyond the unpacked K block (128, grown to 1024 for a narrow N) and the
packed one (256, a constant 2-D B), odd M and N, batch broadcasting with a batched B (one GEMM per batch) and with a
2-D B (A's batch folded into M), 1-D operands, M = 1 (MLAS's AVX M = 1 kernel: groups of 4 products added unfused),
transA/transB, alpha and beta (beta scales C first; later K blocks fuse acc * alpha into y), every C broadcast. The
data mixes magnitudes 1e6 apart and signed zeros, so another summation order (numpy's BLAS, one chain over all of K,
a different K block, fused M = 1 sums) fails: `test_orders_are_distinguished`. The shapes ORT sends to its
transposed-B dot product (N = 1, or M = 1 with transB) are not reproduced: the devices agree with the definition and
ORT is within a pinned bound of it (`test_dot_product_kernel_bound`)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from support.agree import run_devices

import vkinfer
from vkinfer.reference import float_matmul as fm

from ._build import NAME, model, node, ort_run, refused

F32 = np.float32


def data(rng, shape) -> np.ndarray:
    """Values of magnitudes 1e-3 .. 1e3 of both signs, with signed zeros."""
    v = rng.standard_normal(shape) * rng.choice([1.0, 1e3, 1e-3], shape)
    v = np.where(rng.random(shape) < 0.05, rng.choice([0.0, -0.0], shape), v)
    return v.astype(F32)


def _blob(nodes, inputs: dict, consts: dict) -> bytes:
    """The nodes plus an unrelated DequantizeLinear (vkinfer runs 8-bit models only)."""
    consts = {**consts, "qs": F32(0.5)}
    return model([*nodes, node("DequantizeLinear", ["q", "qs"], ["qf"], name="dq")],
                 {**{k: (F32, v.shape) for k, v in inputs.items()}, "q": (np.uint8, (4,))}, consts,
                 {"y": F32, "qf": F32})


def _check(blob: bytes, feed: dict) -> None:
    feed = {**feed, "q": np.arange(4, dtype=np.uint8)}
    run_devices(blob, feed, want=ort_run(blob, feed))
    for dev in ("cpu", "vulkan"):
        assert vkinfer.InferenceSession(blob, device=dev).placement[NAME] == "cpu"


# (A shape, B shape, B constant)
MATMUL = [((3, 300), (300, 5), False), ((3, 300), (300, 5), True), ((5, 700), (700, 200), False),
          ((5, 700), (700, 200), True), ((2, 2000), (2000, 17), False), ((7, 129), (129, 33), True),
          ((6, 257), (257, 300), False), ((1, 300), (300, 7), False), ((1, 50), (50, 40), False),
          ((1, 300), (300, 7), True), ((300,), (300, 7), False), ((300,), (300, 9), True),
          ((2, 3, 200), (200, 9), False), ((2, 3, 200), (200, 9), True), ((2, 1, 300), (300, 5), False),
          ((1, 1, 300), (300, 5), False), ((2, 3, 40, 70), (2, 3, 70, 9), False), ((2, 1, 4, 70), (1, 3, 70, 9), False),
          ((3, 300), (1, 300, 5), True), ((2, 4, 300), (2, 300, 7), True), ((300,), (2, 300, 7), False),
          ((1, 1), (1, 1), False), ((9, 3), (3, 130), True), ((300,), (300,), False), ((77,), (77,), True)]


@pytest.mark.parametrize("case", MATMUL, ids=[f"{a}x{b}{'c' if c else ''}" for a, b, c in MATMUL])
def test_matmul_matches_ort(case):
    sa, sb, const = case
    rng = np.random.default_rng(sum(sa) * 7 + sum(sb))
    a, b = data(rng, sa), data(rng, sb)
    n = node("MatMul", ["a", "b"], ["y"])
    if const:
        _check(_blob([n], {"a": a}, {"b": b}), {"a": a})
    else:
        _check(_blob([n], {"a": a, "b": b}, {}), {"a": a, "b": b})


# (M, K, N)
GEMM_SHAPES = [(3, 300, 5), (1, 300, 7), (6, 70, 130), (4, 260, 3)]
GEMM_ATTRS = [dict(), dict(transA=1), dict(transB=1), dict(transA=1, transB=1, alpha=0.3, beta=0.7),
              dict(alpha=0.3), dict(beta=0.7), dict(beta=0.0), dict(alpha=-2.5, beta=1.0, transB=1)]


GEMM = [(s, a, c, const) for s in GEMM_SHAPES for a in GEMM_ATTRS for c in ("none", "n", "mn", "m1", "1")
        for const in (True, False)
        if not fm.bounded(s[0], s[2], packed=const, trans_a=bool(a.get("transA", 0)), trans_b=bool(a.get("transB", 0)),
                          alpha=a.get("alpha", 1.0), beta=0.0 if c == "none" else a.get("beta", 1.0))]


@pytest.mark.parametrize("case", GEMM, ids=[f"{s}-{a}-{c}-{'constB' if k else 'actB'}" for s, a, c, k in GEMM])
def test_gemm_matches_ort(case):
    """Every Gemm form but ORT's dot-product kernel (test_dot_product_kernel_bound)."""
    (m, k, n), attrs, c, const = case
    ta, tb = attrs.get("transA", 0), attrs.get("transB", 0)
    rng = np.random.default_rng(m * 1000 + k + n)
    a = data(rng, (k, m) if ta else (m, k))
    b = data(rng, (n, k) if tb else (k, n))
    cv = {"none": None, "n": data(rng, (n,)), "mn": data(rng, (m, n)), "m1": data(rng, (m, 1)),
          "1": data(rng, (1,))}[c]
    ins = ["a", "b"] + ([] if cv is None else ["c"])
    g = node("Gemm", ins, ["y"], **attrs)
    inputs, consts = {"a": a}, {}
    (consts if const else inputs)["b"] = b
    if cv is not None:
        (consts if const else inputs)["c"] = cv
    _check(_blob([g], inputs, consts), inputs)


def test_gemm_constant_b_computed_c():
    """ORT prepacks a Gemm's B when it is an initializer whatever C is (K 300: the packed K blocks of 256 differ from
    the unpacked single block); vkinfer's importer marks it, so the interpreter and the lowering agree with ORT."""
    rng = np.random.default_rng(5)
    a, b, c = data(rng, (4, 300)), data(rng, (300, 6)), data(rng, (4, 6))
    _check(_blob([node("Gemm", ["a", "b", "c"], ["y"])], {"a": a, "c": c}, {"b": b}), {"a": a, "c": c})


def test_dequantized_constant_b_is_not_packed():
    """B = DequantizeLinear(a constant): vkinfer folds it into a constant, ORT runs the node and does not prepack its
    output (unpacked order: one K block of 300 here, where a packed B sums blocks of 256)."""
    rng = np.random.default_rng(15)
    a = data(rng, (3, 300))
    wq = rng.integers(0, 256, (300, 5)).astype(np.uint8)
    for op, extra in (("MatMul", {}), ("Gemm", {"transB": 0})):
        nodes = [node("DequantizeLinear", ["wq", "ws", "wz"], ["b"], name="dqw"), node(op, ["a", "b"], ["y"], **extra)]
        blob = _blob(nodes, {"a": a}, {"wq": wq, "ws": F32(0.02), "wz": np.uint8(128)})
        _check(blob, {"a": a})


def test_signed_zeros_and_specials():
    """All-zero rows (+0 vs -0 sums: every chain starts at +0), infinities and NaN propagate as ORT's do."""
    rng = np.random.default_rng(6)
    for m in (1, 5):
        a = data(rng, (m, 300))
        a[0] = -0.0
        a[-1, 3] = np.inf
        b = data(rng, (300, 20))
        b[:, 0] = -0.0
        b[7, 2] = np.nan
        for const in (True, False):
            n = node("MatMul", ["a", "b"], ["y"])
            if const:
                _check(_blob([n], {"a": a}, {"b": b}), {"a": a})
            else:
                _check(_blob([n], {"a": a, "b": b}, {}), {"a": a, "b": b})


def test_threads_do_not_change_the_bits():
    """vkinfer's own threads split output tiles, never a sum: 1, 2 and 4 threads give the same bits (ORT's one)."""
    rng = np.random.default_rng(10)
    a, b = data(rng, (70, 300)), data(rng, (300, 200))
    x, w = data(rng, (1, 16, 30, 30)), data(rng, (32, 16, 3, 3))
    blob = _blob([node("MatMul", ["a", "b"], ["y"]), node("Conv", ["x", "w"], ["y2"], name="conv", pads=[1, 1, 1, 1])],
                 {"a": a, "b": b, "x": x}, {"w": w})
    m = onnx.load_model_from_string(blob)
    m.graph.output.append(onnx.helper.make_tensor_value_info("y2", onnx.TensorProto.FLOAT, None))
    blob = m.SerializeToString()
    feed = {"a": a, "b": b, "x": x, "q": np.arange(4, dtype=np.uint8)}
    want = ort_run(blob, feed)
    for threads in (1, 2, 4):
        got = vkinfer.InferenceSession(blob, device="cpu", threads=threads).run(None, feed)
        for g, w_ in zip(got, want, strict=True):
            assert np.array_equal(g.view(np.int32), w_.view(np.int32)), threads


def test_orders_are_distinguished():
    """The data tells orders apart: numpy's matmul, one chain over all of K, the wrong K block and a fused M = 1 sum
    each differ from ORT on these shapes, while the definition equals it."""
    rng = np.random.default_rng(7)
    a, b = data(rng, (5, 700)), data(rng, (700, 200))
    want = ort_run(_blob([node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, {}),
                   {"a": a, "b": b, "q": np.arange(4, dtype=np.uint8)})[0]
    assert np.array_equal(fm.matmul(a, b, False).view(np.int32), want.view(np.int32))
    for other in (np.matmul(a, b), fm.sgemm(a, b, 700), fm.sgemm(a, b, 256), fm.matmul(a, b, True)):
        assert not np.array_equal(other.view(np.int32), want.view(np.int32))
    a1 = a[:1]
    want1 = ort_run(_blob([node("MatMul", ["a", "b"], ["y"])], {"a": a1, "b": b}, {}),
                    {"a": a1, "b": b, "q": np.arange(4, dtype=np.uint8)})[0]
    assert np.array_equal(fm.matmul(a1, b, False).view(np.int32), want1.view(np.int32))
    assert not np.array_equal(fm.sgemm(a1, b, 1024).view(np.int32), want1.view(np.int32))


# ORT's transposed-B dot product (8 lanes, a horizontal sum): the definition keeps the blocked order. Measured on
# this machine over these shapes and K = 2000, 20 seeds each: at most 5.5 ulps of the largest |partial sum| (the float32
# spacing at sum |a_k b_k|).
DOT_BOUND_ULPS = 8


@pytest.mark.parametrize("case", [("matmul", (4, 600), (600,)), ("matmul", (3, 600), (600, 1)),
                                  ("gemm", (1, 300), (7, 300)), ("gemm", (5, 40), (40, 1))])
def test_dot_product_kernel_bound(case):
    kind, sa, sb = case
    rng = np.random.default_rng(8)
    a, b = data(rng, sa), data(rng, sb)
    if kind == "matmul":
        blob = _blob([node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, {})
        bb = b.reshape(b.shape[0], -1)
    else:
        tb = int(sb[0] != sa[1])
        blob = _blob([node("Gemm", ["a", "b"], ["y"], transB=tb)], {"a": a, "b": b}, {})
        bb = b.T if tb else b
    feed = {"a": a, "b": b, "q": np.arange(4, dtype=np.uint8)}
    got = run_devices(blob, feed)[0]  # every device the same bits (the definition's order)
    want = ort_run(blob, feed)[0]
    scale = (np.abs(a.astype(np.float64)) @ np.abs(bb.astype(np.float64))).reshape(want.shape)
    ulps = np.abs(got.astype(np.float64) - want) / np.spacing(scale.astype(F32)).astype(np.float64)
    assert ulps.max() <= DOT_BOUND_ULPS, ulps.max()
    assert vkinfer.InferenceSession(blob, device="cpu").placement[NAME] == "cpu"


# ORT with several intra-op threads slices N per thread and MLAS's K block follows the slice (module docstring of
# vkinfer/reference/float_matmul.py): its bits change with the thread count. Measured: at most 4 ulps of the largest
# |partial sum| (this case and K = 2000, 10 seeds each); pinned with margin.
THREADS_BOUND_ULPS = 8


def test_ort_thread_count_changes_its_bits():
    import onnxruntime as ort

    rng = np.random.default_rng(9)
    a, b = data(rng, (5, 700)), data(rng, (700, 60))
    blob = _blob([node("MatMul", ["a", "b"], ["y"])], {"a": a, "b": b}, {})
    feed = {"a": a, "b": b, "q": np.arange(4, dtype=np.uint8)}
    got = run_devices(blob, feed, want=ort_run(blob, feed))[0]  # one ORT thread: exact
    o = ort.SessionOptions()
    o.intra_op_num_threads, o.log_severity_level = 2, 3
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    two = ort.InferenceSession(blob, o, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    assert not np.array_equal(two.view(np.int32), got.view(np.int32))
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    ulps = np.abs(got.astype(np.float64) - two) / np.spacing(scale.astype(F32)).astype(np.float64)
    assert ulps.max() <= THREADS_BOUND_ULPS, ulps.max()


# ORT_ENABLE_ALL's MatMulAddFusion makes MatMul -> Add(bias) one Gemm whose C (the bias) is where MLAS's first K block
# accumulates, so the bias is added before the later blocks, not after the whole sum. vkinfer makes the same Gemm
# (vkinfer/model/matmul_add_fuse.py; where ORT fuses: tests/importers/test_matmul_add_fusion.py), so it gives those
# bits exactly; the nodes as written (ORT with its optimizer off) differ by up to 0.5 ulp of the largest |partial
# sum| (measured, K 1280, 6 seeds: the former bound of this test, 1 ulp).
MATMUL_ADD_BOUND_ULPS = 1


def test_matmul_add_fusion_is_exact():
    rng = np.random.default_rng(16)
    a, b, bias = data(rng, (2, 1280)), data(rng, (1280, 100)), data(rng, (100,))
    blob = _blob([node("MatMul", ["a", "b"], ["m"], name="mm"), node("Add", ["m", "bias"], ["y"], name="add")],
                 {"a": a}, {"b": b, "bias": bias})
    feed = {"a": a, "q": np.arange(4, dtype=np.uint8)}
    got = run_devices(blob, feed, want=ort_run(blob, feed, optimize=True))[0]  # ORT's fused Gemm: exact
    unfused = ort_run(blob, feed)[0]
    assert not np.array_equal(got.view(np.int32), unfused.view(np.int32))  # the case tells the two orders apart
    scale = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)) + np.abs(bias)
    ulps = np.abs(got.astype(np.float64) - unfused) / np.spacing(scale.astype(F32)).astype(np.float64)
    assert ulps.max() <= MATMUL_ADD_BOUND_ULPS, ulps.max()
    for dev in ("cpu", "vulkan"):
        assert vkinfer.InferenceSession(blob, device=dev).placement["mm/MatMulAddFusion"] == "cpu"


def test_bad_shapes_are_refused_naming_the_node():
    a, b = np.zeros((3, 4), F32), np.zeros((3, 5), F32)
    refused(_blob([node("Gemm", ["a", "b"], ["y"])], {"a": a}, {"b": b}), {"a": a, "q": np.arange(4, dtype=np.uint8)},
            "multiply|[Ss]hape|[Ii]ncompatible")


def test_integer_matmul_is_exact():
    """Integer MatMul (a shape subgraph's): exact, numpy's wrapping product (ORT's too)."""
    node_ = type("N", (), {"attrs": {}})()
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = np.arange(8, dtype=np.int32).reshape(4, 2)
    assert np.array_equal(fm.matmul_kernel(node_, [a, b], {})[0], a @ b)
