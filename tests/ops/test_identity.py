"""Identity of 8-bit tensors against ONNX Runtime on every device, which must run the node itself (an alias of
its input: the output is a graph output, so the device hands the bytes back unchanged), ranks 1-5, odd sizes."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import QTYPES, check_vs_ort, model, node, one_node, ort_run, refused

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


def _ort_refuses(blob: bytes, feed: dict) -> None:
    with pytest.raises(Exception, match="(?i)invalid|type"):
        ort_run(blob, feed)


@pytest.mark.parametrize("case", [
    "no_input",
    "two_inputs",  # found by this test: the second input used to be ignored
    "output_type",  # found by this test: a graph output declared int8 that the node makes uint8 used to run
])
def test_bad_identity_refused_naming_the_node(case):
    x = np.zeros((2, 3), np.uint8)
    if case == "no_input":
        blob, feed = model([node("Identity", [])], {"x": x}), {"x": x}
    elif case == "two_inputs":
        blob, feed = model([node("Identity", ["x", "x2"])], {"x": x, "x2": x}), {"x": x, "x2": x}
    else:
        blob, feed = model([node("Identity", ["x"])], {"x": x}, outputs={"y": np.int8}), {"x": x}
    if case != "no_input":
        _ort_refuses(blob, feed)
    refused(blob, feed, "input|type|int8")
