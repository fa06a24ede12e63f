"""A CPU segment's output conversions (vkinfer/cpu/segment.py).

A graph output made by a move (a Transpose) whose source nothing else reads is folded into the output conversion:
the conversion transposes the source straight into the output array and the move never runs. Where another node
also read the move's result, that node used to read arena bytes the skipped move never wrote: a silent wrong
answer on device="cpu" (and on Vulkan plans that put those nodes on the CPU). Every device against ORT here.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from support.agree import run_devices

import vkinfer
from vkinfer.testing import zoo
from vkinfer.testing.onnx_builder import make_model

SHAPE = [1, 2, 3, 4]
CONSTS = {"s": np.float32(0.05), "z": np.uint8(100), "shape": np.array([1, 24], np.int64)}

# The second reader of the output Transpose's result t, and what it makes.
READERS = {
    "transpose_back": [helper.make_node("Transpose", ["t"], ["u"], perm=[0, 3, 1, 2])],
    "reshape_alias": [helper.make_node("Reshape", ["t", "shape"], ["u"])],
    "dequantize": [helper.make_node("DequantizeLinear", ["t", "s", "z"], ["u"])],
    "two_readers": [helper.make_node("Transpose", ["t"], ["u"], perm=[0, 3, 1, 2]),
                    helper.make_node("DequantizeLinear", ["t", "s", "z"], ["v"])],
}


def _model(reader: str | None):
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
             helper.make_node("Transpose", ["q"], ["t"], perm=[0, 2, 3, 1])]
    outs = {"t": (np.uint8, None)}
    if reader is not None:
        nodes += READERS[reader]
        for n in READERS[reader]:
            outs[n.output[0]] = (np.float32 if n.op_type == "DequantizeLinear" else np.uint8, None)
    return make_model(nodes, {"x": (np.float32, SHAPE)}, outs, CONSTS, opset=13)


def _feed(seed: int = 0) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).normal(0, 3, SHAPE).astype(np.float32)}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_output_transpose_with_another_reader(reader):
    model = _model(reader)
    for seed in (0, 1):
        feed = _feed(seed)
        run_devices(model.SerializeToString(), feed, want=zoo.ort_run(model, feed), what=f"{reader} seed {seed}")
    s = vkinfer.InferenceSession(model.SerializeToString(), device="cpu")
    assert set(s.placement.values()) == {"cpu"}, s.placement


def test_output_transpose_alone_is_still_folded():
    """No other reader: the Transpose still folds into the output conversion (one layer left, the quantize)."""
    model = _model(None)
    feed = _feed()
    run_devices(model.SerializeToString(), feed, want=zoo.ort_run(model, feed))
    s = vkinfer.InferenceSession(model.SerializeToString(), device="cpu")
    (seg,) = s.plan(feed).segments
    assert seg.device == "cpu" and len(seg.runner.layers) == 1, [lay.node.op for lay in seg.runner.layers]
