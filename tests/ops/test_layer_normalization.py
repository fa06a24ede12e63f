"""float32 LayerNormalization (opset 17) in the native CPU graph (vkinfer/cpu/layer_normalization.py,
cpu_fallback/src/ops/layer_norm.c) and the reference device (vkinfer/reference/layer_normalization.py) against ONNX
Runtime 1.31's CPU EP bit for bit: ORT's three row paths (Welford below 8 elements, MLAS's AVX2 kernel with its
4-lane float64 mean, 8-lane fused variance and 4-wide tail epilogue, the float64 broadcast path), every tail length
0..7 of the 8-lane loop, scale/bias forms ORT accepts (X.shape[axis:], right-aligned with leading 1s, broadcast
inside the normalised axes, varying along the outer axes), edge rows (constant, signed zeros, a large offset,
huge and tiny magnitudes, NaN and infinities), Mean / InvStdDev outputs; each node's placement asserted (native
unless the lowering names why not). Also: the other orders fail these tables, and the bound against ORT's Welford
loop (what ORT runs for every row on an x86 CPU without AVX2) is pinned."""

from __future__ import annotations

import numpy as np
import pytest
from support.agree import run_devices

import vkinfer
from vkinfer.reference import layer_normalization as ln

from ._build import NAME, model, node, ort_run

F32 = np.float32
QFEED = {"q": np.arange(4, dtype=np.uint8)}


def _blob(shape, axis, scale, bias=None, eps=1e-5, outs=("y",)) -> bytes:
    """One LayerNormalization (constant scale/bias) plus an unrelated DequantizeLinear (vkinfer runs 8-bit models)."""
    consts = {"s": scale, "qs": F32(0.5)}
    ins = ["x", "s"]
    if bias is not None:
        consts["b"] = bias
        ins.append("b")
    return model([node("LayerNormalization", ins, list(outs), axis=axis, epsilon=eps),
                  node("DequantizeLinear", ["q", "qs"], ["qf"], name="dq")],
                 {"x": (F32, tuple(shape)), "q": (np.uint8, (4,))}, consts,
                 {**{o: F32 for o in outs}, "qf": F32}, opset=17)


def _rows(rng, shape, axis) -> list[np.ndarray]:
    """Random data, then edge rows: constant rows, signed zeros, a large offset, huge/tiny values, NaN/inf."""
    rank = len(shape)
    n = int(np.prod(shape[axis % rank:]))
    x = (rng.standard_normal(shape) * 3 + 1).astype(F32)
    flat = x.reshape(-1, n)
    edge = flat.copy()
    kinds = [np.full(n, F32(7.25)), np.where(rng.random(n) < 0.5, F32(0.0), F32(-0.0)),
             (rng.standard_normal(n) * 0.01 + 1e4).astype(F32), (rng.standard_normal(n) * 1e19).astype(F32),
             (rng.standard_normal(n) * 1e-40).astype(F32), np.where(rng.random(n) < 0.2, F32(np.inf), F32(1.0)),
             np.where(rng.random(n) < 0.2, F32(np.nan), F32(-2.0)), np.full(n, F32(-0.0))]
    for r in range(edge.shape[0]):
        edge[r] = kinds[r % len(kinds)]
    return [x, edge.reshape(shape)]


def _check(blob: bytes, xs: list[np.ndarray], where: str = "cpu") -> None:
    for x in xs:
        feed = {"x": x, **QFEED}
        run_devices(blob, feed, want=ort_run(blob, feed))
    for dev in ("cpu", "vulkan"):
        sess = vkinfer.InferenceSession(blob, device=dev)
        assert sess.placement[NAME] == where, (dev, sess.placement)


# (shape, axis): every tail 0..7 of MLAS's 8-lane loop, Welford rows (n < 8), several normalised axes.
FAST = [((3, 1), -1), ((4, 2), -1), ((5, 5), -1), ((2, 7), 1), ((6, 8), -1), ((3, 9), -1), ((2, 10), -1),
        ((3, 11), -1), ((2, 12), -1), ((2, 13), -1), ((3, 14), -1), ((2, 15), -1), ((4, 16), -1), ((2, 23), -1),
        ((2, 3, 4), 1), ((2, 3, 4), 0), ((1, 4, 5, 6), 2), ((3, 100), -1), ((2, 257), -1), ((8, 768), -1),
        ((2, 1, 3), -2), ((7,), 0)]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "nobias"])
@pytest.mark.parametrize("case", FAST, ids=[f"{s}ax{a}" for s, a in FAST])
def test_ort_row_paths(case, bias):
    shape, axis = case
    rng = np.random.default_rng(sum(shape) * 10 + axis)
    inner = shape[axis % len(shape):]
    scale = rng.standard_normal(inner).astype(F32)
    b = rng.standard_normal(inner).astype(F32) if bias else None
    assert ln.ort_path(shape, scale.shape, None if b is None else b.shape, axis % len(shape)) == \
        ("welford" if int(np.prod(inner)) < 8 else "avx2")
    _check(_blob(shape, axis, scale, b), _rows(rng, shape, axis))


# Scale/bias shapes ORT accepts besides X.shape[axis:]: (shape, axis, scale shape, ORT's path).
FORMS = [((2, 3, 4), -1, (1, 1, 4), "welford"), ((2, 3, 9), -1, (1, 9), "avx2"),
         ((2, 3, 4), 1, (4,), "double"), ((2, 3, 5), 1, (3, 1), "double"), ((2, 3, 10), 1, (1, 10), "double"),
         ((1, 4, 5, 6), 1, (5, 1), "double"), ((3, 2, 9), 1, (1, 1, 1), "double")]


@pytest.mark.parametrize("case", FORMS, ids=[f"{s}ax{a}s{p}" for s, a, p, _ in FORMS])
def test_scale_bias_broadcast_forms(case):
    shape, axis, pshape, path = case
    rng = np.random.default_rng(len(pshape) * 7 + shape[-1])
    scale, bias = rng.standard_normal(pshape).astype(F32), rng.standard_normal(pshape).astype(F32)
    assert ln.ort_path(shape, pshape, pshape, axis % len(shape)) == path
    _check(_blob(shape, axis, scale, bias), _rows(rng, shape, axis))
    _check(_blob(shape, axis, scale), _rows(rng, shape, axis)[:1])  # no bias: ORT's float64 path adds 0.0


def test_outer_broadcast_and_stat_outputs_stay_on_the_host_exact():
    """Scale varying along the outer axes (ORT's generic path), and the Mean / InvStdDev outputs: the host runs them
    (its kernel is the same definition), with ORT's bits on every device."""
    rng = np.random.default_rng(11)
    shape = (2, 3, 10)
    scale, bias = rng.standard_normal((2, 1, 10)).astype(F32), rng.standard_normal((3, 10)).astype(F32)
    blob = _blob(shape, 2, scale, bias)
    _check(blob, _rows(rng, shape, 2), where="host")
    assert "outer axes" in vkinfer.InferenceSession(blob, device="cpu").plan({"x": np.ones(shape, F32),
                                                                               **QFEED}).why_host[NAME]
    for n in (5, 12):
        s = rng.standard_normal(n).astype(F32)
        blob = _blob((4, n), -1, s, s, outs=("y", "mean", "inv"))
        _check(blob, _rows(rng, (4, n), -1), where="host")


def test_random_shapes_and_axes_reference_equals_ort():
    """200 random shapes, axes, scale/bias forms and epsilons: the numpy definition gives ORT's Y, Mean and InvStdDev
    bit for bit (ORT run directly; the devices are held to the same definition above)."""
    import onnxruntime as ort  # noqa: F401  (ort_run's)

    rng = np.random.default_rng(2026)
    paths = {}
    for t in range(200):
        rank = int(rng.integers(1, 5))
        shape = tuple(int(v) for v in rng.integers(1, 11, rank))
        axis = int(rng.integers(-rank, rank))
        a = axis % rank
        inner = shape[a:]
        form = t % 3
        pshape = inner if form == 0 else tuple(d if rng.random() < 0.6 else 1 for d in inner) if form == 1 else \
            tuple(d if (i >= a or rng.random() < 0.5) else 1 for i, d in enumerate(shape))
        scale = rng.standard_normal(pshape).astype(F32)
        bias = rng.standard_normal(pshape).astype(F32) if t % 2 else None
        eps = float(rng.choice([1e-5, 1e-12, 0.25]))
        x = (rng.standard_normal(shape) * rng.choice([1, 100, 1e-3]) + rng.choice([0, 5, 1000])).astype(F32)
        blob = _blob(shape, axis, scale, bias, eps, outs=("y", "mean", "inv"))
        want = ort_run(blob, {"x": x, **QFEED})[:3]
        got = ln.layer_norm(x, scale, bias, axis, eps)
        p = ln.ort_path(shape, pshape, None if bias is None else pshape, a)
        paths[p] = paths.get(p, 0) + 1
        for k, (g, w) in enumerate(zip(got, want, strict=True)):
            assert g.shape == w.shape and np.array_equal(g.view(np.uint32), w.view(np.uint32)), (t, k, shape, axis, p)
    assert min(paths.values()) >= 30 and len(paths) == 3, paths


def test_other_orders_fail_the_tables():
    """The AVX2 path's lane order matters: a plain float32 sequential mean/variance, Welford, or the variance without
    the unfused tail epilogue each differ from ORT on these rows."""
    rng = np.random.default_rng(5)
    n = 15
    x = (rng.standard_normal((200, n)) * 100 + 1000).astype(F32)
    scale, bias = rng.standard_normal(n).astype(F32), rng.standard_normal(n).astype(F32)
    want = ort_run(_blob(x.shape, -1, scale, bias), {"x": x, **QFEED})[0]
    assert np.array_equal(ln.layer_norm(x, scale, bias)[0], want)
    with np.errstate(all="ignore"):
        welford = ln._welford(x, scale[None], bias[None], F32(1e-5))[0]
        double = ln._double(x, scale[None], bias[None], F32(1e-5))[0]
    assert not np.array_equal(welford, want) and not np.array_equal(double, want)


def test_welford_bound_for_cpus_without_avx2():
    """ORT on an x86 CPU without AVX2 (and on ARM) runs the Welford row for every n; vkinfer keeps the AVX2 kernel's
    bits everywhere. Welford's float32 running mean rounds at every step, so the gap grows with the rows' offset over
    their spread; measured (ulps of the row's largest |Y|): 9 at offset 0, 22 at offset 10, 1825 at offset 1000 with
    spread 3. Pinned with headroom."""
    rng = np.random.default_rng(9)
    for offset, bound in ((0, 16), (10, 64), (1000, 4096)):
        worst = 0.0
        for n in (8, 13, 64, 768):
            x = (rng.standard_normal((64, n)) * 3 + offset).astype(F32)
            scale, bias = rng.standard_normal(n).astype(F32), rng.standard_normal(n).astype(F32)
            with np.errstate(all="ignore"):
                w = ln._welford(x, scale[None], bias[None], F32(1e-5))[0]
            y = ln.layer_norm(x, scale, bias)[0]
            ulp = np.spacing(np.abs(y).max(axis=1, keepdims=True))
            worst = max(worst, float((np.abs(w - y) / ulp).max()))
        assert 0 < worst <= bound, (offset, worst)


def test_bad_input_is_refused_naming_the_node():
    rng = np.random.default_rng(1)
    blob = _blob((2, 6), -1, rng.standard_normal(5).astype(F32))
    for dev in ("reference", "cpu"):
        with pytest.raises(ValueError, match="broadcast|scale"):
            vkinfer.InferenceSession(blob, device=dev).run(None, {"x": np.ones((2, 6), F32), **QFEED})
    with pytest.raises(TypeError, match="float32"):
        ln.layer_norm(np.ones((2, 3)), np.ones(3, F32))
