"""Pow: float32 in the native CPU graph (cpu_fallback/src/ops/float_binary.c's Pow, vkinfer/cpu/float_elementwise.py)
and every type pair on the reference device (vkinfer/reference/float_pow.py) against ONNX Runtime's CPU EP bit for
bit, asserting where the node runs.

ORT calls the C library's powf per element, except where its broadcaster takes the exponent as each span's scalar:
there 2 and 3 are x * x and x * x * x (x * x * x differs from powf(x, 3) on about a quarter of x in [0, 3), and
numpy's own float32 power from powf on a fifth of random inputs, so the tables below tell all three apart). Which
input the broadcaster takes as a scalar is pinned on the shapes where it is subtle (trailing size-1 dimensions,
scalars, lower-rank exponents). Other type pairs (int32/int64/float64 bases, integer and double exponents) go
through pow(double, double) and a cast (ints: truncation, the x86 integer indefinite out of range) on the host.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.agree import run_devices

import vkinfer
from vkinfer.reference._libm import powf
from vkinfer.reference.float_pow import ort_scalar_roles, pow_ort

from ._build import NAME, model, node, ort_run

F32 = np.float32
Q = np.arange(4, dtype=np.uint8)


def _blob(xs, es, dtype=F32, etype=F32, econst: np.ndarray | None = None) -> bytes:
    """Pow(x, e) plus an unrelated DequantizeLinear branch (vkinfer runs 8-bit models only); e an initializer
    when `econst` is given."""
    consts = {"s": F32(0.5)}
    ins = {"x": (dtype, tuple(xs)), "q": (np.uint8, (4,))}
    if econst is not None:
        consts["e"] = econst
    else:
        ins["e"] = (etype, tuple(es))
    return model([node("Pow", ["x", "e"], ["y"]), node("DequantizeLinear", ["q", "s"], ["qf"], name="dq")],
                 ins, consts, {"y": dtype, "qf": F32}, opset=15)


def _check(blob: bytes, feeds: list[dict], where: str = "cpu") -> None:
    """Every device the same bits (the reference device is the numpy definition: C == numpy), equal to ORT; the
    node on `where` in cpu and vulkan sessions."""
    for feed in feeds:
        run_devices(blob, feed, want=ort_run(blob, feed))
    for dev in ("cpu", "vulkan"):
        sess = vkinfer.InferenceSession(blob, device=dev)
        assert sess.placement[NAME] == where, (dev, sess.placement)


EDGE_X = F32([0, -0.0, 1, -1, 2, -2, 0.5, -0.5, np.inf, -np.inf, np.nan, 1e-30, 1e30, 3.5, -3.5, 1.0001221, 7,
              1e-45, -8, 0.9999999])
EDGE_E = F32([0, -0.0, 1, -1, 2, 3, -2, -3, 0.5, -0.5, 2.5, np.inf, -np.inf, np.nan, 1e10, 31, 0.3333, -0.3333,
              1 / 3, 127, -149])


def test_edge_table_elementwise():
    """Every base against every exponent, both tensors (no scalar span: powf everywhere): signed zeros, infinities,
    NaN, odd/even integers on negative bases, overflow and underflow."""
    x, e = (a.astype(F32).reshape(-1) for a in np.meshgrid(EDGE_X, EDGE_E))
    _check(_blob(x.shape, e.shape), [{"x": x, "e": e, "q": Q}])


@pytest.mark.parametrize("ev", [2.0, 3.0, 0.5, -1.0, 2.5, np.nan])
@pytest.mark.parametrize("const", [False, True], ids=["input", "initializer"])
def test_scalar_exponent(ev, const):
    """A scalar exponent: ORT's x * x / x * x * x for 2 and 3, powf otherwise; edge bases and random ones."""
    rng = np.random.default_rng(int(abs(ev * 10)) if not np.isnan(ev) else 99)
    x = np.concatenate([EDGE_X, (rng.random(300) * 3).astype(F32), (rng.standard_normal(200) * 40).astype(F32)])
    e = np.array(ev, F32)
    blob = _blob(x.shape, (), econst=e if const else None)
    _check(blob, [{"x": x, "q": Q} if const else {"x": x, "e": e, "q": Q}])


# (x shape, exponent shape): whether ORT's broadcaster has the exponent as a span scalar (x ** 3 = x * x * x) or
# not (powf), measured: trailing size-1 dimensions of both shorten the span to one element, where the base counts
# as the scalar (tested first).
ROLES = [((2, 1), (1,), False), ((2, 1), (), False), ((2, 3, 1), (1,), False), ((2, 1, 3), (1,), True),
         ((1, 2), (1,), True), ((2, 1), (1, 1), True), ((1, 1, 4), (), True), ((3, 1, 1), (1, 1, 1), True),
         ((2, 3), (2, 1), True), ((2, 1, 3), (2, 1, 1), True), ((1,), (2, 1), False), ((), (3,), False),
         ((1, 1), (3, 1), False), ((4, 1), (4, 1), False), ((6,), (6,), False), ((1,), (1,), False),
         ((2, 3, 4), (3, 1), True), ((3, 4), (2, 1, 4), False)]


@pytest.mark.parametrize("case", ROLES, ids=[f"{x}^{e}" for x, e, _ in ROLES])
def test_broadcast_roles(case):
    xs, es, shortcut = case
    s0, s1 = ort_scalar_roles(xs, es)
    assert (s1 and not s0) == shortcut
    rng = np.random.default_rng(len(xs) * 10 + len(es))
    cube = (rng.random(4000) * 3).astype(F32)
    cube = cube[cube * cube * cube != powf(cube, F32(3))]  # bases where x * x * x and powf(x, 3) differ
    x = cube[:int(np.prod(xs))].reshape(xs)
    e = rng.choice(F32([3, 2, 3, 2.5]), es).astype(F32) if es else np.array(3, F32)
    want = ort_run(_blob(xs, es), {"x": x, "e": e, "q": Q})[0]
    if all(np.asarray(e).reshape(-1) == 3):  # the measured role: cube or powf
        assert np.array_equal(want.view(np.uint32), (x * x * x if shortcut else powf(x, e)).view(np.uint32))
    _check(_blob(xs, es), [{"x": x, "e": e, "q": Q}])


def test_random_broadcasts():
    """Seeded random shapes with numpy broadcasting, exponents mixing 2, 3 and others, negative bases."""
    rng = np.random.default_rng(17)
    for _ in range(12):
        rank = int(rng.integers(1, 5))
        out = tuple(int(s) for s in rng.integers(1, 6, rank))
        xs = tuple(d if rng.random() < 0.7 else 1 for d in out)
        es = tuple(d if rng.random() < 0.4 else 1 for d in out)[int(rng.integers(0, rank + 1)):]
        x = (rng.standard_normal(xs) * 3).astype(F32)
        e = rng.choice(F32([2, 3, -2, 0.5, 1.5, 3.25, 4]), es).astype(F32)
        _check(_blob(xs, es), [{"x": x, "e": e, "q": Q}])


TYPES = [(np.int32, np.int32), (np.int32, np.int64), (np.int32, F32), (np.int64, np.int64), (np.int64, F32),
         (F32, np.int32), (F32, np.int64)]


@pytest.mark.filterwarnings("ignore::vkinfer.errors.HostNodeWarning")  # the host is where they belong
@pytest.mark.parametrize("bt,et", TYPES, ids=[f"{np.dtype(b)}^{np.dtype(e)}" for b, e in TYPES])
def test_other_type_pairs_on_the_host(bt, et):
    """Integer bases and exponents (pow(double, double), truncated; x * x and x * x * x wrapping; out of range the
    integer indefinite), float32 bases with integer exponents (double pow, one rounding): exact, on the host."""
    rng = np.random.default_rng(3)
    x = rng.integers(-12, 13, 40).astype(bt) if np.dtype(bt).kind == "i" else (rng.standard_normal(40) * 5).astype(bt)
    e = rng.integers(-2, 45, 40).astype(et) if np.dtype(et).kind == "i" else (rng.random(40) * 45 - 2).astype(et)
    _check(_blob((40,), (40,), bt, et), [{"x": x, "e": e, "q": Q}], where="host")
    for ev in (2, 3, 40):  # the scalar-exponent loop: x * x, x * x * x (wrapping), pow
        _check(_blob((40,), (), bt, et), [{"x": x, "e": np.array(ev, et), "q": Q}], where="host")


def test_unsupported_types_refused():
    """Types ORT's Pow kernel does not take: a TypeError naming them (the reference kernel)."""
    with pytest.raises(TypeError, match="exponent type uint8"):
        pow_ort(np.ones(3, F32), np.ones(3, np.uint8))
    with pytest.raises(TypeError, match="base type float16"):
        pow_ort(np.ones(3, np.float16), np.ones(3, F32))


def test_numpy_power_is_not_orts():
    """Why the reference calls the C library: numpy's float32 power gives other bits than ORT's powf here."""
    rng = np.random.default_rng(0)
    x, e = (rng.random(2000) * 10).astype(F32), (rng.random(2000) * 6 - 3).astype(F32)
    want = ort_run(_blob(x.shape, e.shape), {"x": x, "e": e, "q": Q})[0]
    assert np.array_equal(pow_ort(x, e).view(np.uint32), want.view(np.uint32))
    assert not np.array_equal(np.power(x, e).view(np.uint32), want.view(np.uint32))


ASAN_DRIVER = r'''
import sys
import numpy as np
from vkinfer.cpu import graph as G
from vkinfer.cpu.float_elementwise import merged_broadcast
from vkinfer.layout import u32

F = np.float32
EDGE = F([0.0, -0.0, np.nan, np.inf, -np.inf, 1.0, -1.0, 1e-45, 2.0, 3.0, -2.5, 0.5, 1e30])


from vkinfer.testing.buffers import external as ext


rng = np.random.default_rng(int(sys.argv[2]))
outs = {}
for k, (sa, sb) in enumerate((((7,), (7,)), ((9,), (1,)), ((3, 7), (3, 1)), ((5, 1), (1, 6)), ((2, 3, 4), (2, 1, 4)))):
    so = np.broadcast_shapes(sa, sb)
    out, ma, mb = merged_broadcast(so, sa, sb)
    a = np.where(rng.random(sa) < 0.5, rng.choice(EDGE, sa), rng.standard_normal(sa) * 3).astype(F)
    b = np.where(rng.random(sb) < 0.6, rng.choice(EDGE, sb), rng.standard_normal(sb) * 3).astype(F)
    outs[f"a{k}"], outs[f"b{k}"] = a, b
    for op in (7, 8):  # Pow, Pow with a span-scalar exponent
        arrays = [ext(a, k % 2 == 1), ext(b, k % 2 == 1)]
        y = ext(np.zeros(so, F), k % 2 == 1)
        g = G.NativeGraph(0, [arrays[0].nbytes, arrays[1].nbytes, y.nbytes])
        g.add("float_binary", op, len(out), u32(out), u32(ma), u32(mb), G.Ref(1, 0, arrays[0].nbytes),
              G.Ref(2, 0, arrays[1].nbytes), G.Ref(3, 0, y.nbytes))
        g.run(arrays + [y])
        outs[f"pow{k}_{op}"] = np.array(y)
np.savez(sys.argv[1], **outs)
print("float pow asan: ok", "library:", G.lib()._name)
'''


def test_float_pow_under_asan_and_ubsan_and_equal_to_the_reference(tmp_path):
    """float_binary's two Pow codes under AddressSanitizer + UBSan (broadcasts, misaligned buffers, edge values)
    give the normal build's bits: op 7 is powf everywhere, op 8 ORT's x * x / x * x * x for exponents 2 / 3."""
    from support.cpu_build import run_both_builds

    sanitized, normal = run_both_builds(ASAN_DRIVER, tmp_path, "float pow asan: ok", ("5",))
    assert sorted(sanitized) == sorted(normal) and len(normal) == 5 * 4
    for k in range(5):
        a, b = normal[f"a{k}"], normal[f"b{k}"]
        aa, bb = np.broadcast_arrays(a, b)
        with np.errstate(over="ignore", invalid="ignore"):
            want = {7: powf(aa, bb), 8: np.where(bb == 2, aa * aa, np.where(bb == 3, aa * aa * aa, powf(aa, bb)))}
        for op in (7, 8):
            got = normal[f"pow{k}_{op}"]
            for other in (want[op], sanitized[f"pow{k}_{op}"]):
                same = (got.view(np.uint32) == other.view(np.uint32)) | (np.isnan(got) & np.isnan(other))
                assert same.all(), (k, op, np.argwhere(~same)[:4].tolist())
