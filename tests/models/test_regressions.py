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


HANG = Path(__file__).parent / "regressions" / "hang"


def test_large_tflite_resize_agrees_with_litert():
    """hang/case_108642: op_resize with its input's width mutated to 1048576 (a [1, 5, 1048576, 4] int8 input). The
    CPU and Vulkan lowerings built the resize's byte-gather table from int64 codes of all its 33.5 M elements (52 s
    and 5 GB; under a 6 GiB address space a MemoryError) before refusing it for its row count. Past 2**24 elements
    the node now stays on the host at once (vkinfer/model/moves.py MAX_GATHER_ELEMENTS): every device equals LiteRT,
    the three in seconds of CPU."""
    import time

    model = (HANG / "case_108642_cpu.tflite").read_bytes()
    x = np.random.default_rng(0).integers(-128, 128, (1, 5, 1048576, 4), dtype=np.int8)
    want = litert_run(model, {"x": x})
    t0 = time.process_time()
    run_devices(model, {"x": x}, want=list(want.values()))
    assert time.process_time() - t0 < 20, time.process_time() - t0


def test_convolution_padded_by_a_million_reference_equals_cpu():
    """hang/case_104337: a MobileNetV2 whose last 1x1 convolution got a pad of 1048576, so its 1x1280x1x1048577
    output (1.3 GB) is legal. The reference device ran out of memory in float64 and int64 copies (a 10 GiB
    accumulator, then a 10 GiB int64 copy in QLinearGlobalAveragePool); it now convolves the windows that read
    input only, tile by tile, and sums in place, and equals the cpu device bit for bit. (Vulkan refuses it on a
    device whose maxStorageBufferRange is 128 MiB, as lavapipe's: a cleanly named ValueError of that device.)"""
    feed = {"input": np.random.default_rng(0).uniform(-2, 2, (1, 3, 32, 32)).astype(np.float32)}
    run_devices(HANG / "case_104337_cpu.onnx", feed, devices=("reference", "cpu"))
