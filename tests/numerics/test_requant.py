"""The shaders' integer emulation of requantization equals numpy's float32 arithmetic exactly:
int32 -> float32 rounding (|acc| > 2**24), the float32 product's rounding, ties to even,
subnormal and huge multipliers, saturation, INT32_MIN/MAX."""

import numpy as np
import pytest

from vkinfer._vk import get_device
from vkinfer.reference.requant import requantize, split_float32


def _cases(rng, n):
    i32 = np.iinfo(np.int32)
    acc = np.concatenate([
        rng.integers(i32.min, i32.max, n // 4, endpoint=True),
        rng.integers(-2**26, 2**26, n // 4),  # around the 2**24 float32 limit
        rng.integers(-3000, 3000, n // 4),
        (2**24 + rng.integers(-8, 9, n // 8)) * rng.choice([-1, 1], n // 8),
    ]).astype(np.int64)
    acc = np.concatenate([acc, [0, 1, -1, i32.min, i32.max, i32.min + 1, 2**24 + 1, -(2**24 + 1), 2**25 + 3]])
    k = len(acc)
    m = np.concatenate([
        (2.0 ** rng.uniform(-35, 4, k // 2)).astype(np.float32),  # general multipliers
        (2.0 ** rng.integers(-30, 2, k // 4)).astype(np.float32),  # powers of two: exact ties
        rng.uniform(0.0, 1e-3, k - k // 2 - k // 4).astype(np.float32),
    ])
    m[:16] = np.array([1e-45, 1e-40, 1.1754942e-38, 0.0, 2.0**-149, 1.0, 0.5, 2.0**20, 3e38, 1.5, 0.25,
                       2.0**-24, 2.0**-25, 2.0**-26, 1 / 3, 0.1], np.float32)
    rng.shuffle(m)
    zp = rng.integers(-128, 256, k)
    return acc.astype(np.int32), m, zp.astype(np.int32)


def shader_requantize(dev, lo: int, hi: int, n: int, frq: bool = False) -> tuple[np.ndarray, ...]:
    """requant_check.comp (qcommon.glsl's integer requantization; with `frq` its float32 form under
    RoundingModeRTE, on the cases whose multiplier is zero or a normal float32, as the lowerings use it) on `dev`
    over `n`-ish seeded cases, and the independent oracle, numpy's IEEE float32 multiply and rint (half to even):
    (got, want, acc, m, zp)."""
    acc, m, zp = _cases(np.random.default_rng(lo + 1000), n)
    if frq:
        keep = (m == 0) | (np.abs(m) >= np.finfo(np.float32).tiny)
        acc, m, zp = acc[keep], m[keep], zp[keep]
    mant, exp = split_float32(m)
    table = np.stack([acc, mant, exp, zp], axis=1).astype(np.int32)
    inp, out = dev.buffer(table.nbytes), dev.buffer(4 * len(acc))
    inp.write(table)
    prog = dev.program("requant_check", [inp, out], (-(-len(acc) // 64), 1, 1), [len(acc)], [lo, hi],
                       {"VK_FRQ": 1} if frq else None)
    seq = dev.sequence()
    seq.upload(inp)
    seq.barrier()
    seq.dispatch(prog)
    seq.barrier()
    seq.download(out)
    seq.barrier()
    seq.run()
    with np.errstate(over="ignore"):
        f = np.rint(acc.astype(np.float32) * m)
    want = np.clip(np.clip(f, np.float32(-2e9), np.float32(2e9)).astype(np.int64) + zp, lo, hi)
    return out.read(np.int32, len(acc)), want, acc, m, zp


@pytest.mark.parametrize("lo,hi", [(0, 255), (-128, 127), (10, 200)])
def test_shader_requantize_matches_float32(lo, hi):
    got, want, acc, m, zp = shader_requantize(get_device(), lo, hi, 1 << 18)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(int(acc[i]), float(m[i]), int(zp[i]), int(got[i]), int(want[i])) for i in bad[:10]]
    # The cases really exercise the hard parts.
    with np.errstate(over="ignore", invalid="ignore"):
        prod = acc.astype(np.float32) * m
        ties = np.sum((prod - np.floor(prod)) == 0.5)
    assert np.sum(np.abs(acc.astype(np.int64)) > 2**24) > 10000
    assert ties > 1000


def _rte_devices() -> list:
    """The first Vulkan device that guarantees float32 round-to-nearest-even, as a one-item list (for parametrize)."""
    from vkinfer import _vk
    from vkinfer.errors import VulkanUnavailableError

    try:
        return [d for d in _vk.devices() if d.float_controls.get("rte32")][:1]
    except VulkanUnavailableError:
        return []


@pytest.mark.parametrize("info", _rte_devices(), ids=lambda d: d.name.split()[0])
@pytest.mark.parametrize("lo,hi", [(0, 255), (-128, 127), (10, 200)])
def test_shader_float_requantize_matches_float32(lo, hi, info):
    """The float32 form (VK_FRQ: RoundingModeRTE, a precise product, roundEven) on a device that guarantees float32
    round-to-nearest-even, over the same hard cases (ties, |acc| > 2^24, INT32_MIN/MAX, huge multipliers)."""
    from vkinfer import _vk

    got, want, acc, m, zp = shader_requantize(_vk.Device(info, float_rq=True), lo, hi, 1 << 18, frq=True)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, [(int(acc[i]), float(m[i]), int(zp[i]), int(got[i]), int(want[i])) for i in bad[:10]]
    with np.errstate(over="ignore", invalid="ignore"):
        prod = acc.astype(np.float32) * m
        ties = np.sum((prod - np.floor(prod)) == 0.5)
    assert np.sum(np.abs(acc.astype(np.int64)) > 2**24) > 10000 and ties > 1000 and np.isinf(prod).any()


def test_reference_requantize_saturates_instead_of_wrapping():
    acc = np.array([2**31 - 1, -(2**31)], np.int32)
    np.testing.assert_array_equal(requantize(acc, np.float32(3e38), 0, 0, 255), [255, 0])
    np.testing.assert_array_equal(requantize(acc, np.float32(1e-3), 128, -128, 127), [127, -128])


def test_split_float32_is_exact():
    m = np.array([1e-45, 1e-39, 0.1, 1.0, 3.0e38, 0.0], np.float32)
    mant, exp = split_float32(m)
    assert np.all(mant < 2**24)
    np.testing.assert_array_equal(np.ldexp(mant.astype(np.float64), exp), m.astype(np.float64))
    with pytest.raises(ValueError, match="not finite"):
        split_float32(np.array([np.inf], np.float32))
