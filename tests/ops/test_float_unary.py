"""The float32 unary ops whose ORT kernels are longer formulas, native in the CPU graph (cpu_fallback/src/ops/
float_unary.c, lowered by vkinfer/cpu/float_elementwise.py): HardSigmoid, HardSwish, MLAS's Sigmoid, Tanh, Erf and
Exp, and Eigen's Log (the C library's logf on the last n % 4 elements), against ONNX Runtime's CPU EP (one
thread, nodes as written) bit for bit on every device (the reference device runs vkinfer/model/host_float.py's and
host_eigen.py's numpy versions), asserting that the node runs on the cpu device in cpu and Vulkan sessions. ORT's
Exp on CPUs without AVX-512F (MLAS's FMA3 kernel: clamped at -88.38, 2^m built in the exponent field) differs
where e^x is below 2^-126 (x < -87.34); vkinfer gives the AVX-512F kernel's bits (vscalefps), so there (probed:
`ORT_AVX512`) the comparison leaves out x < -87.

The values: edge values (signed zeros, NaN, infinities, denormals, the largest floats), every formula's breakpoints
with their float32 neighbours (the clamps of Sigmoid at +-18, Tanh at +-9, Erf at 3.925 and its polynomial switch
at 0.921875, HardSigmoid's 0 and 1 crossings), 2^16 evenly spread values over [-20, 20] and 2^16 bit patterns spread
over all of float32 (every exponent). NaN payloads are not compared (tests/support/agree.py)."""

from __future__ import annotations

import numpy as np
import pytest
from support.agree import run_devices

import vkinfer

from ._build import NAME, model, node, ort_run

F32 = np.float32
EDGE = [0.0, -0.0, np.nan, -np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, -1e-45, 1.2e-38, -3e-39, 3.4028235e38,
        -3.4028235e38, 0.5, -0.5, 1e-8, -1e-8]
# Where a formula switches: clamps, the polynomial split, HardSigmoid's crossings (alpha 0.2 / beta 0.5 at +-2.5,
# HardSwish's at +-3, alpha 0.5 / beta 0 at 0 and 2, alpha -0.3 / beta 0.4 at 4/3 and -2).
BREAKS = [18.0, 9.0, 3.925, 0.921875, 2.5, 3.0, 2.0, 4 / 3, 88.0, 1.0, 88.7762626647950, 103.9720840454, 87.3,
          0.707106781186547524, 0.5, 2.0 ** -126]


def _values() -> np.ndarray:
    b = F32(BREAKS)
    near = np.concatenate([b, np.nextafter(b, F32(np.inf)), np.nextafter(b, F32(0))])
    spread = np.linspace(-20, 20, 1 << 16, dtype=F32)
    bits = (np.arange(1 << 16, dtype=np.uint64) * 65537).astype(np.uint32).view(F32)
    return np.concatenate([F32(EDGE), near, -near, spread, bits]).astype(F32)


VALUES = _values()
CASES = [("HardSigmoid", {}, 13), ("HardSigmoid", {"alpha": 0.5, "beta": 0.0}, 13),
         ("HardSigmoid", {"alpha": -0.3, "beta": 0.4}, 13), ("HardSwish", {}, 14), ("Sigmoid", {}, 13),
         ("Tanh", {}, 13), ("Erf", {}, 13), ("Exp", {}, 13), ("Log", {}, 13)]


def _blob(op: str, attrs: dict, opset: int, shape) -> bytes:
    """The op over float32 input x, plus an unrelated DequantizeLinear branch so vkinfer takes the model."""
    return model([node(op, ["x"], ["y"], **attrs), node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 {"x": (F32, shape), "q": (np.uint8, (4,))}, {"s": F32(0.5)}, {"y": F32, "qf": F32}, opset=opset)


def _check(blob: bytes, x: np.ndarray) -> None:
    feed = {"x": x, "q": np.arange(4, dtype=np.uint8)}
    run_devices(blob, feed, want=ort_run(blob, feed))
    for d in ("cpu", "vulkan"):
        placement = vkinfer.InferenceSession(blob, device=d).placement
        assert placement[NAME] == "cpu", (d, placement)


def _ort_avx512() -> bool:
    """Whether the installed ORT runs MLAS's AVX-512F exp (vscalefps: e^-100 a denormal) rather than its FMA3 one,
    which clamps at -88.38, so e^-100 is 0 (tests/ops/test_float_softmax.py probes the same way)."""
    blob = _blob("Exp", {}, 13, (1,))
    return bool(ort_run(blob, {"x": F32([-100]), "q": np.arange(4, dtype=np.uint8)})[0][0] != 0)


ORT_AVX512 = _ort_avx512()


@pytest.mark.parametrize("case", CASES, ids=[f"{o}{a or ''}" for o, a, _ in CASES])
def test_unary_formula_equals_ort_bit_for_bit(case):
    op, attrs, opset = case
    x = VALUES
    if op == "Exp" and not ORT_AVX512:  # ORT's FMA3 exp: results below 2^-126 differ; vkinfer gives AVX-512F's
        x = x[~(x < -87)]
    _check(_blob(op, attrs, opset, x.shape), x)


@pytest.mark.parametrize("op", ["Exp", "Log"])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 9, 4099])
def test_exp_log_every_tail_and_range(op, n):
    """Every tail length (Log's last n % 4 elements are the C library's logf in ORT) over Exp's whole range
    [-110, 90] and Log's positive floats, with edges at the front and the back (so the tail holds them too)."""
    rng = np.random.default_rng(n)
    lo, hi = (-110 if ORT_AVX512 else -87, 90) if op == "Exp" else (-5, 5)
    v = rng.uniform(lo, hi, n).astype(F32)
    if op == "Log":
        v = np.exp(v * 20).astype(F32)
    edges = F32([0.0, -0.0, np.nan, np.inf, -np.inf, -1.0, 1e-45, 1.0])
    for x in (v, np.concatenate([v, edges[: n % 5]]), np.concatenate([edges[: n % 7], v])):
        _check(_blob(op, {}, 13, x.shape), x)


@pytest.mark.parametrize("op", ["HardSwish", "Sigmoid", "Tanh", "Erf", "Exp", "Log"])
@pytest.mark.parametrize("shape", [(1,), (13,), (1, 3, 7, 5)])
def test_small_shapes(op, shape):
    """Short tensors (a vectorised loop's remainder only), ranks 1 to 4."""
    rng = np.random.default_rng(len(shape))
    n = int(np.prod(shape))
    x = np.where(rng.random(n) < 0.5, rng.choice(F32(EDGE), n), rng.uniform(-10, 10, n)).astype(F32).reshape(shape)
    _check(_blob(op, {}, 14 if op == "HardSwish" else 13, shape), x)


def test_exp_c_equals_numpy_over_its_range():
    """float_unary.c's Exp equals host_eigen.mlas_exp (the definition) bit for bit on every 997th float32 in
    [-110, 90] and every float32 near the clamps and the subnormal edge (checked once, 2026-11-27: every float32 in
    [-110, 90], 2,240,806,914 floats, and NaN, +-inf, +-FLT_MAX, +-1e-45: 0 differences)."""
    from vkinfer.cpu import graph as G
    from vkinfer.model.host_eigen import mlas_exp

    lo, hi = F32(-110).view(np.uint32), F32(90).view(np.uint32)
    neg = np.arange(0x80000000, lo + 1, 997, dtype=np.uint64).astype(np.uint32).view(F32)
    pos = np.arange(0, hi + 1, 997, dtype=np.uint64).astype(np.uint32).view(F32)
    near = [np.arange(F32(c).view(np.uint32) - 4096, F32(c).view(np.uint32) + 4096, dtype=np.uint32).view(F32)
            for c in (-103.9720840454, 88.7762626647950, -87.33654, -88.72284, -0.34657359)]
    x = np.concatenate([neg, pos, *near, F32([np.nan, np.inf, -np.inf, 3.4e38, -3.4e38])])
    y = np.zeros_like(x)
    g = G.NativeGraph(0, [x.nbytes, y.nbytes])
    g.add("float_unary", 11, x.size, 0.0, 0.0, G.Ref(1, 0, x.nbytes), G.Ref(2, 0, y.nbytes))
    g.run([x, y])
    want = mlas_exp(x)
    same = (y.view(np.uint32) == want.view(np.uint32)) | (np.isnan(y) & np.isnan(want))
    assert same.all(), x[~same][:8]


def test_log_c_equals_numpy_over_the_floats():
    """float_unary.c's Log equals host_eigen's definition (eigen_log on whole packets, the C library's logf on the
    last n % 4) bit for bit on every 997th float32 bit pattern (both signs, subnormals, inf, NaN) plus the floats
    around 1 and sqrt(1/2), with a tail of 3."""
    from vkinfer.cpu import graph as G
    from vkinfer.model.host_eigen import eigen_elementwise, eigen_log
    from vkinfer.reference._libm import logf

    bits = np.arange(0, 1 << 32, 997, dtype=np.uint64).astype(np.uint32).view(F32)
    near = [np.arange(F32(c).view(np.uint32) - 2048, F32(c).view(np.uint32) + 2048, dtype=np.uint32).view(F32)
            for c in (1.0, 0.70710678, 2.0 ** -126)]
    x = np.concatenate([bits, *near, F32([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, 2.0])])
    x = np.concatenate([x[: x.size // 4 * 4], F32([0.5, 3.0, 1e-40])])  # n % 4 == 3: a tail of logf
    y = np.zeros_like(x)
    g = G.NativeGraph(0, [x.nbytes, y.nbytes])
    g.add("float_unary", 12, x.size, 0.0, 0.0, G.Ref(1, 0, x.nbytes), G.Ref(2, 0, y.nbytes))
    g.run([x, y])
    want = eigen_elementwise(x, eigen_log, logf)
    same = (y.view(np.uint32) == want.view(np.uint32)) | (np.isnan(y) & np.isnan(want))
    assert same.all(), x[~same][:8]
