"""The ONNX Runtime peer (.onnx models): CPUExecutionProvider with the options of ort_session_options."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..load import Model


def ort_session_options(threads: int) -> Any:
    """ONNX Runtime's options for a peer on `threads` cores: intra-op `threads`, inter-op 1, sequential, quiet,
    spinning off (an idle spinning ORT pool takes the cores from the engine that runs next: on MobileNetV2,
    2 threads, 2 cores, vkinfer took 18.9 ms beside a spinning ORT and 9.0 ms beside a non-spinning one, while
    ORT itself took 5.9 and 5.6 ms)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return opts


def _ort_factory(model: Model, threads: int) -> Callable[[], tuple[Callable, Any]]:
    import onnxruntime as ort

    def make():
        o = ort.InferenceSession(model.data, ort_session_options(threads), providers=["CPUExecutionProvider"])
        feed = model.feed
        return (lambda: o.run(None, feed)), o

    return make
