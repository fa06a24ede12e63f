"""Mutated models on which vkinfer once gave a wrong answer (tests/models/regressions/, from mutation fuzzing on
2026-11-26; the table of what each did is ../shared/regressions/README.md).

wrong/: a device ran a model the reference refused (an int64 attribute narrowed to 32 bits on the CPU: pads of
2**62 or 2**63 - 1 gave a small, meaningless convolution), or two devices disagreed (a TFLite op rewired to read a
4-D tensor straight into FULLY_CONNECTED: the [-1, C] reshape alias of cpu and vulkan). Each must end as a correct
answer equal on every device (and to the peer runtime), or as one clean error on every device that names the node
and the attribute, where ONNX Runtime refuses the model too.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from support.agree import outcome_devices, run_devices

from vkinfer.testing.tflite_zoo import litert_run

WRONG = sorted((Path(__file__).parent / "regressions" / "wrong").iterdir())


def _ort_refuses(path: Path) -> bool:
    opts = ort.SessionOptions()
    opts.log_severity_level = 4
    try:
        sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        feed = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape],
                                 np.float32 if "float" in i.type else np.uint8) for i in sess.get_inputs()}
        sess.run(None, feed)
    except Exception:  # noqa: BLE001 - any refusal (load or run) is what is asked
        return True
    return False


@pytest.mark.parametrize("path", [p for p in WRONG if p.suffix == ".onnx"], ids=lambda p: p.name)
def test_narrowed_attributes_refused_on_every_device(path):
    assert _ort_refuses(path)  # the peer refuses the model: the answer is a clean error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome = outcome_devices(path)
    assert isinstance(outcome, ValueError), outcome
    msg = str(outcome)
    assert "node '" in msg and "attribute 'pads'" in msg and "does not fit a 32-bit integer" in msg, msg


@pytest.mark.parametrize("path", [p for p in WRONG if p.suffix == ".tflite"], ids=lambda p: p.name)
def test_rewired_tflite_models_agree_with_litert(path):
    model = path.read_bytes()
    rng = np.random.default_rng(0)
    feed = {"input": rng.uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32)}
    want = litert_run(model, feed)
    run_devices(model, feed, want=[want["logits"], want["output"]])
