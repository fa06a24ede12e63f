"""vkinfer.demo's TFLite verdict: the demo's MobileNetV2 is identical to ai-edge-litert
(tests/importers/test_tflite.py), so any difference, one step included, counts as a failure."""

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


def test_every_whole_model_row_runs_and_states_the_same_thread_count(tmp_path, capsys):
    """Issue 23: `make demo` printed "onnxruntime (1 thread) 3.30 ms" beside "vkinfer cpu 1.36 ms" where vkinfer ran
    2 threads. Every runtime of a comparison now runs on the threads asked for, each row saying how many, read back
    from the runtime's own session (small models stand in for MobileNetV2 here: the rows, not the timings)."""
    from support.small_model import small_qmodel

    from vkinfer import demo
    from vkinfer.testing import tflite_zoo

    (tmp_path / "q.onnx").write_bytes(small_qmodel())
    (tmp_path / "m.tflite").write_bytes(tflite_zoo.tiny_cnn(0))
    assert demo.run_models(2, {"qoperator": tmp_path / "q.onnx", "tflite": tmp_path / "m.tflite"}) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("qoperator", "tflite"))]
    assert [r.split()[1] for r in rows] == ["onnxruntime", "vkinfer", "vkinfer", "ai-edge-litert", "vkinfer", "vkinfer"]
    assert all("(2 threads" in r for r in rows), out
    assert "every runtime on 2 threads" in out and "1 thread" not in out
