"""The LiteRT peer (.tflite models): ai-edge-litert's Interpreter on `threads` threads (its XNNPACK CPU path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..load import Model


def _litert_factory(model: Model, threads: int) -> Callable[[], tuple[Callable, Any]]:
    from ai_edge_litert.interpreter import Interpreter

    def make():
        it = Interpreter(model_content=model.data, num_threads=threads)
        it.allocate_tensors()
        ins = [(d["index"], model.feed[d["name"]]) for d in it.get_input_details()]
        idx = [d["index"] for d in it.get_output_details()]

        def run() -> list[np.ndarray]:
            for i, x in ins:
                it.set_tensor(i, x)
            it.invoke()
            return [it.get_tensor(i) for i in idx]  # get_tensor returns a copy

        return run, it

    return make
