"""com.microsoft QLinearAdd against ONNX Runtime on every device: the broadcast table of tests/ops/_binary.py
(equal shapes, a channel row, ranks 1-5, ResNet's residual add, and the broadcasts left to the host), every byte
pair, uint8 and int8; bad parameters refused naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from ._binary import binary_model, check_binary, every_pair, params
from ._build import QTYPES, refused


@pytest.mark.parametrize("k", params())
def test_qlinear_add_equals_ort_on_every_device(k):
    check_binary("QLinearAdd", k, QTYPES[k % 2])


@pytest.mark.parametrize("dt", QTYPES)
def test_qlinear_add_every_byte_pair_equals_ort(dt):
    every_pair("QLinearAdd", dt, 3)


@pytest.mark.parametrize("change,culprit,exc", [
    (dict(as_=np.float32(0)), "scale", ValueError),
    (dict(ys=np.float32(np.nan)), "scale", ValueError),
    (dict(bz=np.int8(0)), "zero", (TypeError, ValueError)),
], ids=["a_scale_zero", "y_scale_nan", "zero_point_type"])
def test_bad_qlinear_add_refused_naming_the_node(change, culprit, exc):
    change = {("as" if k == "as_" else k): v for k, v in change.items()}
    blob, feed = binary_model("QLinearAdd", (1, 3, 4, 4), (1, 3, 4, 4), np.uint8, 0, change)
    refused(blob, feed, culprit, exc=exc)


def test_shapes_that_do_not_broadcast_refused_naming_the_node():
    blob, feed = binary_model("QLinearAdd", (1, 3, 4, 4), (1, 2, 4, 4), np.uint8, 0)
    refused(blob, feed, "broadcast")


# The C `qadd` operator under AddressSanitizer + UBSan (as tests/cpu/test_native_graph.py runs the library): every
# broadcast of tests/ops/_binary.py through QLinearAdd (ORT's arithmetic at strides, the swap) and QLinearMul (the
# table at strides), both 8-bit types, against the reference device.
ASAN_SCRIPT = """
import numpy as np, vkinfer
from ops._binary import TABLE, binary_model
n = 0
for op in ("QLinearAdd", "QLinearMul"):
    for k, (cid, sa, sb, _, _) in enumerate(TABLE):
        for dt in (np.uint8, np.int8):
            blob, feed = binary_model(op, sa, sb, dt, k)
            want = vkinfer.InferenceSession(blob, device="reference").run(None, feed)[0]
            got = vkinfer.InferenceSession(blob, device="cpu").run(None, feed)[0]
            assert np.array_equal(want, got), (op, cid, dt)
            n += 1
print("asan binary:", n)
"""


def test_qadd_operator_under_asan_and_ubsan():
    asan_run(ASAN_SCRIPT, "asan binary: ")


def asan_run(script: str, ok: str) -> None:
    """`script` in a subprocess (cwd tests/) over the ASan + UBSan build of the C library; it must print `ok`."""
    import sys

    from support.cpu_build import ROOT, run_sanitized

    run_sanitized([sys.executable, "-W", "ignore", "-c", script], ok, cwd=ROOT / "tests")
