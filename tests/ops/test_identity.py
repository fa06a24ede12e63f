"""Identity of 8-bit tensors against ONNX Runtime on every device, which must run the node itself (an alias of
its input: the output is a graph output, so the device hands the bytes back unchanged), ranks 1-5, odd sizes."""

from __future__ import annotations

import pytest

from ._build import QTYPES, check_vs_ort, model, node, one_node

SHAPES = [(7,), (3, 5), (2, 3, 5), (1, 5, 3, 3), (2, 3, 1, 4, 5)]


@pytest.mark.parametrize("k", range(len(SHAPES)), ids=["x".join(map(str, s)) for s in SHAPES])
def test_identity_equals_ort_on_every_device(k):
    check_vs_ort(one_node("Identity", [SHAPES[k]], QTYPES[k % 2]))


@pytest.mark.parametrize("dt", QTYPES)
def test_identity_chain_and_both_outputs(dt):
    """Two Identities in a row, the middle tensor a graph output too: both outputs, each node on the device."""
    blob = model([node("Identity", ["x"], ["m"], name="i1"), node("Identity", ["m"], ["y"], name="i2")],
                 {"x": (dt, (1, 3, 4, 5))}, outputs={"m": dt, "y": dt})
    check_vs_ort(blob)
