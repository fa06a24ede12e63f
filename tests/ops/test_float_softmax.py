"""float32 Softmax / LogSoftmax in the native CPU graph (vkinfer/cpu/float_softmax.py, cpu_fallback/src/ops/
float_softmax.c) and the reference device's kernel (vkinfer/reference/float_softmax.py) against ONNX Runtime's CPU
EP bit for bit, asserting that the node runs on the cpu device in cpu and vulkan sessions.

ORT's MLAS kernels depend on the CPU: vkinfer always gives the AVX-512F kernels' bits (16-lane max and sum,
vscalefps exp down to -103.97). Where the installed ORT runs those (probed: `ORT_AVX512`, e^-100 is a denormal
there and 0 on the FMA3 kernels), every device must equal ORT exactly; on an FMA3-only CPU the bound measured
against the FMA3 kernels' order (`fma3_rows`, the assembly's 8 lanes, clamp at -88.38 and integer exponent
scale) is pinned instead: Softmax within 10 ulps where |y| >= 2^-126 and within 2^-126 below, LogSoftmax within
4 ulps of max(|y|, 1) (measured: 9 ulps, 3.25). The data is built to separate orders: rows whose lengths
straddle 16, 48 and 64 (the kernels' blocks), values 87 to 105 below the row's max (denormal and clamped e),
ties, signed zeros, -FLT_MAX, infinities and NaN.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.agree import run_devices

import vkinfer
from vkinfer.reference import float_softmax as fs
from vkinfer.reference._float32 import fma32, horner32
from vkinfer.reference._libm import logf

from ._build import NAME, model, node, ort_run

F32 = np.float32
OPS = ["Softmax", "LogSoftmax"]
Q = np.arange(4, dtype=np.uint8)


def _blob(op: str, shape, axis: int | None, opset: int = 13, dtype=F32) -> bytes:
    """One Softmax/LogSoftmax over x plus an unrelated DequantizeLinear branch (vkinfer runs 8-bit models only)."""
    attrs = {} if axis is None else {"axis": axis}
    return model([node(op, ["x"], ["y"], **attrs), node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (dtype, tuple(shape)), "q": (np.uint8, (4,))}, {"s": F32(0.5)}, {"y": dtype, "qf": F32},
                 opset=opset)


def _ort_avx512() -> bool:
    y = ort_run(_blob("Softmax", (1, 2), -1), {"x": F32([[0, -100]]), "q": Q})[0]
    return bool(y[0, 1] != 0)


ORT_AVX512 = _ort_avx512()


def fma3_rows(v: np.ndarray, log: bool) -> np.ndarray:
    """ORT's FMA3 (AVX2) softmax kernels' order (MlasComputeSumExpF32KernelFma3): 8 lanes, exp clamped at
    -88.376 with 2^m built in the exponent field. Only for the bound on CPUs without AVX-512F."""
    rows, d = v.shape
    neg = -v.max(axis=1)
    sh = v + neg[:, None]
    w = np.where(F32(-88.3762626647949) > sh, F32(-88.3762626647949), sh)
    b = fma32(w, fs.LOG2_RECIPROCAL, fs.ROUNDING_BIAS)
    m = b - fs.ROUNDING_BIAS
    r = fma32(m, fs.LOG2_LOW, fma32(m, fs.LOG2_HIGH, w))
    e = (horner32(r, fs.POLY) * ((b.view(np.uint32) << np.uint32(23)) + np.uint32(0x3F800000)).view(F32))
    acc = np.zeros((rows, 8), F32)
    full = d // 8 * 8
    for i in range(0, full, 8):
        acc = acc + e[:, i:i + 8]
    acc[:, :d - full] = acc[:, :d - full] + e[:, full:]
    s = ((acc[:, 0] + acc[:, 1]) + (acc[:, 2] + acc[:, 3])) + ((acc[:, 4] + acc[:, 5]) + (acc[:, 6] + acc[:, 7]))
    return (sh - logf(s)[:, None]) if log else e * (F32(1) / s)[:, None]


def within_fma3_bound(got: np.ndarray, want: np.ndarray, log: bool) -> np.ndarray:
    """Element-wise: `got` (vkinfer's AVX-512F bits) within the pinned bound of `want` (an FMA3 kernel's)."""
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(g) & np.isnan(w)
    with np.errstate(invalid="ignore"):
        if log:
            tol = 4 * np.spacing(np.maximum(np.abs(got), F32(1))).astype(np.float64)
        else:
            tol = np.where(np.abs(got) >= 2.0 ** -126, 10 * np.spacing(np.abs(got)).astype(np.float64), 2.0 ** -126)
        return nan | (g == w) | (np.abs(g - w) <= tol)


def _data(rng, shape) -> np.ndarray:
    """Order-separating rows: normal values at several scales, values 87..105 below a row's max, ties, +-0."""
    n = int(np.prod(shape))
    v = rng.standard_normal(n) * rng.choice([0.1, 1.0, 10.0], n)
    deep = rng.random(n) < 0.2
    v = np.where(deep, rng.uniform(-105.0, -87.0, n), v)
    v = np.where(rng.random(n) < 0.05, rng.choice([0.0, -0.0, 2.0, -2.0], n), v)
    return v.astype(F32).reshape(shape)


def _check(op: str, blob: bytes, xs: list[np.ndarray]) -> None:
    """Every device the same bits (the reference device is the numpy definition, so C == numpy), equal to ORT on
    an AVX-512F machine and within the pinned bound otherwise; the node native on cpu and vulkan sessions."""
    for x in xs:
        feed = {"x": x, "q": Q}
        want = ort_run(blob, feed)
        if ORT_AVX512:
            run_devices(blob, feed, want=want)
        else:
            got = run_devices(blob, feed)
            assert within_fma3_bound(got[0], want[0], op == "LogSoftmax").all()
    for dev in ("cpu", "vulkan"):
        sess = vkinfer.InferenceSession(blob, device=dev)
        assert sess.placement[NAME] == "cpu", (dev, sess.placement)


# (shape, axis, opset): rows of lengths around the kernels' blocks (16, 48, 64), axes inside (strided rows),
# opset 11's rows over every axis from `axis` on.
TABLE = [((3, 1), -1, 13), ((2, 15), -1, 13), ((2, 16), -1, 13), ((2, 17), 1, 13), ((4, 47), -1, 13),
         ((4, 48), -1, 13), ((3, 63), -1, 13), ((3, 64), -1, 13), ((3, 65), -1, 13), ((2, 130), -1, 13),
         ((1, 1000), -1, 13), ((5, 7, 3), 1, 13), ((2, 20, 3, 4), 1, 13), ((6, 17, 2), 0, 13),
         ((2, 3, 4, 5), None, 13), ((2, 3, 4, 5), 1, 11), ((2, 3, 4, 5), None, 11), ((2, 3, 4, 5), 0, 11),
         ((2, 3, 7, 5), -2, 11), ((4, 49), -1, 11)]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("case", TABLE, ids=[f"{s}a{a}o{o}" for s, a, o in TABLE])
def test_softmax_table(op, case):
    shape, axis, opset = case
    rng = np.random.default_rng(sum(shape) * 7 + opset)
    _check(op, _blob(op, shape, axis, opset), [_data(rng, shape), _data(rng, shape)])


@pytest.mark.parametrize("op", OPS)
def test_edge_values(op):
    """Rows of signed zeros, ties, -FLT_MAX, infinities and NaN (a NaN or +inf makes the row NaN, a row of -inf too,
    as in ORT), e far below the max (denormal down to 2^-149, 0 past -103.97)."""
    lo = np.finfo(F32).min
    rows = [[0.0, -0.0, 0.0, -0.0], [-0.0, -0.0, -0.0, -0.0], [1.0, 1.0, 1.0, 1.0], [lo, lo, 0.0, lo],
            [np.inf, 1.0, 2.0, 3.0], [-np.inf, 1.0, 2.0, 3.0], [-np.inf] * 4, [np.nan, 1.0, 2.0, 3.0],
            [0.0, -87.4, -100.0, -103.9], [0.0, -103.98, -104.0, -120.0], [0.0, -88.3762626, -88.38, -88.37],
            [3e38, -3e38, 0.0, 1.0], [1e-45, -1e-45, 0.0, -0.0], [50.0, 49.0, -40.0, -55.0]]
    x = np.array(rows, F32)
    _check(op, _blob(op, x.shape, -1), [x])
    one = np.array([[-0.0], [0.0], [np.nan], [-np.inf]], F32)
    _check(op, _blob(op, one.shape, -1), [one])


@pytest.mark.parametrize("op", OPS)
def test_random_shapes_and_axes(op):
    """Seeded random shapes (rank 1-4), axes and opsets, every device equal to ORT."""
    rng = np.random.default_rng(11 + len(op))
    for _ in range(8):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(s) for s in rng.integers(1, 6, rank))
        shape = shape[:-1] + (int(rng.integers(1, 90)),)
        opset = int(rng.choice([11, 13]))
        axis = int(rng.integers(-rank, rank))
        _check(op, _blob(op, shape, axis, opset), [_data(rng, shape)])


def test_reference_is_the_avx512_order_not_others():
    """The order is observable: on these rows the FMA3 kernels' order and numpy's own softmax (pairwise sum, libm
    exp) each give other bits than the AVX-512F order vkinfer pins."""
    rng = np.random.default_rng(5)
    v = _data(rng, (64, 100))
    ours = fs.softmax_rows(v, False)
    assert (ours.view(np.uint32) != fma3_rows(v, False).view(np.uint32)).any()
    e = np.exp(v - v.max(axis=1, keepdims=True))
    assert (ours.view(np.uint32) != (e / e.sum(axis=1, keepdims=True)).view(np.uint32)).any()
    assert within_fma3_bound(ours, fma3_rows(v, False), False).all()
    assert within_fma3_bound(fs.softmax_rows(v, True), fma3_rows(v, True), True).all()


@pytest.mark.parametrize("op", OPS)
def test_other_types_refused(op):
    """The kernel takes float32 only (models cannot declare float64/float16 inputs; a graph value of another type
    reaching it is a TypeError naming the type, never onnx.reference); a bad axis is a ValueError."""
    from vkinfer.model.graph import Node

    n = Node(op, NAME, ["x"], ["y"], {"axis": 1})
    for t in (np.float64, np.float16, np.int32):
        with pytest.raises(TypeError, match=f"float32.*{np.dtype(t)}|{np.dtype(t)}.*float32"):
            fs.kernel(n, [np.ones((2, 3), t)], {})
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        fs.kernel(Node(op, NAME, ["x"], ["y"], {"axis": 2}), [np.ones((2, 3), F32)], {})


def test_qdq_softmax_becomes_qlinear_softmax():
    """DQ -> Softmax -> Q is folded into QLinearSoftmax (as ORT fuses it); the float path is for what stays float."""
    nodes = [node("DequantizeLinear", ["xq", "s", "z"], ["xf"], name="dq"), node("Softmax", ["xf"], ["sf"]),
             node("QuantizeLinear", ["sf", "so", "zo"], ["y"], name="q")]
    blob = model(nodes, {"xq": (np.uint8, (2, 10))}, {"s": F32(0.1), "z": np.uint8(128), "so": F32(1 / 256),
                                                       "zo": np.uint8(0)}, {"y": np.uint8})
    sess = vkinfer.InferenceSession(blob, device="cpu")
    assert [(n.op, n.name) for n in sess.graph.nodes] == [("com.microsoft:QLinearSoftmax", NAME)]


ASAN_DRIVER = r'''
import sys
import numpy as np
from vkinfer.cpu import graph as G

F = np.float32
EDGE = F([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -3e38, 3e38, -90.0, -104.0])


from vkinfer.testing.buffers import external as ext


rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
for k, (outer, length, inner) in enumerate(((1, 1, 1), (3, 15, 1), (2, 16, 1), (2, 17, 3), (1, 64, 1), (4, 65, 2),
                                            (2, 130, 1), (1, 1000, 1), (5, 7, 9))):
    n = outer * length * inner
    x = np.where(rng.random(n) < 0.1, rng.choice(EDGE, n), rng.standard_normal(n) * 20).astype(F)
    outs[f"x{k}"] = x.reshape(outer, length, inner)
    for log in (0, 1):
        xe, y = ext(x, k % 2 == 1), ext(np.zeros(n, F), k % 2 == 1)
        g = G.NativeGraph(0, [xe.nbytes, y.nbytes])
        g.add("float_softmax", outer, length, inner, log, G.Ref(1, 0, xe.nbytes), G.Ref(2, 0, y.nbytes))
        g.run([xe, y])
        outs[f"sm{k}_{log}"] = np.array(y).reshape(outer, length, inner)
np.savez(sys.argv[1], **outs)
print("float softmax asan: ok", "library:", G.lib()._name)
'''


def test_float_softmax_under_asan_and_ubsan_and_equal_to_the_reference(tmp_path):
    """The C operator under AddressSanitizer + UBSan (row lengths around its blocks, strided rows, misaligned
    external buffers, edge values) gives the normal build's bits, which are the numpy definition's."""
    from support.cpu_build import run_both_builds

    sanitized, normal = run_both_builds(ASAN_DRIVER, tmp_path, "float softmax asan: ok", ("3",))
    assert sorted(sanitized) == sorted(normal) and len(normal) == 9 * 3
    for k in range(9):
        x = normal[f"x{k}"]
        for log in (0, 1):
            got, san = normal[f"sm{k}_{log}"], sanitized[f"sm{k}_{log}"]
            want = fs.softmax_float(x, 1, bool(log))
            for other in (want, san):
                same = (got.view(np.uint32) == other.view(np.uint32)) | (np.isnan(got) & np.isnan(other))
                assert same.all(), (k, log, np.argwhere(~same)[:4].tolist())
