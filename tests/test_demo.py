"""vkinfer.demo's TFLite verdict: the demo's MobileNetV2 is identical to ai-edge-litert (tests/test_tflite.py), so
any difference, one step included, counts as a failure."""

import numpy as np

from vkinfer.demo import tflite_verdict


def test_tflite_verdict_is_exact():
    want = np.arange(-5, 5, dtype=np.int8).reshape(1, 10)
    assert tflite_verdict(want.copy(), want) == ("identical to TFLite", False)
    off = want.copy()
    off[0, 3] += 1
    assert tflite_verdict(off, want) == ("DIFFERENT: up to 1 LSB (10.0% differ)", True)
    assert tflite_verdict(want.astype(np.uint8), want)[1]
    assert tflite_verdict(want.reshape(10, 1), want)[1]
