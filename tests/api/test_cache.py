"""The op-level layer cache: equal constants hit, changed constants (even edited in place) miss."""

import numpy as np
import pytest
from support.cases import conv_case

from vkinfer import ops
from vkinfer._cache import LayerCache


@pytest.mark.parametrize("device", ["vulkan", "cpu"])
def test_weights_edited_in_place_are_seen(device):
    c = conv_case(np.random.default_rng(21), c=8, h=7, w=7, m=8, kh=3, pads=(1, 1, 1, 1))
    first = ops.qlinear_conv(**c, device=device)
    np.testing.assert_array_equal(first, ops.qlinear_conv(**c, device="reference"))
    c["w"][0, 0, 0, 0] ^= np.array(0x55, dtype=c["w"].dtype)  # same array object, new contents
    c["bias"] = None if c["bias"] is None else c["bias"].copy()
    np.testing.assert_array_equal(ops.qlinear_conv(**c, device=device), ops.qlinear_conv(**c, device="reference"))


def test_hits_and_eviction():
    cache, made = LayerCache(size=2), []
    a, b = np.arange(4), np.arange(4) + 1

    def make(tag):
        made.append(tag)
        return tag

    assert cache.get(("p",), [a], lambda: make("a")) == "a"
    assert cache.get(("p",), [a.copy()], lambda: make("x")) == "a"  # equal contents: a hit
    assert cache.get(("p",), [b], lambda: make("b")) == "b"
    assert cache.get(("q",), [a], lambda: make("c")) == "c"  # other parameters: a miss; evicts "a"
    assert cache.get(("p",), [a], lambda: make("a2")) == "a2"
    assert made == ["a", "b", "c", "a2"]
