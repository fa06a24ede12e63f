"""vkinfer's model IR: a topologically ordered list of nodes over named tensors.

Importers (ONNX now, TFLite later) produce a Graph; the session runs it node by node. Constant
tensors (weights, scales, zero points, shapes) live in `consts`.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np


@dataclass
class TensorInfo:
    """A graph input or output: name, shape (None for unknown dimensions) and numpy dtype."""

    name: str
    shape: tuple[int | str | None, ...] | None
    dtype: np.dtype

    @property
    def type(self) -> str:
        """ONNX Runtime's type string, e.g. 'tensor(uint8)'."""
        return f"tensor({ {'float32': 'float'}.get(self.dtype.name, self.dtype.name) })"


@dataclass
class Node:
    """One operation: `op` is the op type (with its domain prefix for non-default domains)."""

    op: str
    name: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict = field(default_factory=dict)


@dataclass
class Graph:
    nodes: list[Node]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    consts: dict[str, np.ndarray]
    # What the importer read from the file besides the computation (set once, after the import's passes):
    # "model" (ONNX Runtime's ModelMetadata fields), "quantization" (graph input/output name -> (scale, zero point)
    # of an 8-bit tensor where the model defines them) and, for TFLite, "tflite" (the file's tensor names, indices,
    # shape signatures, quantization parameters and SignatureDefs; vkinfer.tflite.Interpreter reads them).
    meta: dict = field(default_factory=dict)


_GC_LOCK = threading.Lock()
_GC_PAUSE = [0, False]  # builds under way, and whether the collector was on when the first began


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while importing or planning, which make many objects and no garbage cycles
    to speak of (refcounting frees the rest; native objects too): each of its full collections walks every object
    alive, and on a 100k-node chain they were 1.2 s of the import's 3.2 s and 0.55 of a 20k chain's 2.5 s plan,
    growing faster than the graph. Nested and concurrent pauses count: the collector is turned back on when the last
    one ends, and only if it was on when the first began.

    What the pause made is handed to the oldest generation as it ends (`gc.freeze` then `gc.unfreeze`: two list
    splices), not left in the youngest, whose next collection walked every one of them: 0.25-0.3 s at the end of
    a 100k-node session (3.4% of its loading), 0 now. The splice takes every object of the younger generations
    alike (the program's own too: its cycles made before the pause are then found by the next full collection,
    not a young one). Still tracked, so a full collection finds any cycle among them. Skipped while the program
    keeps frozen objects of its own (a pre-fork server's gc.freeze), which unfreeze would release."""
    with _GC_LOCK:
        if _GC_PAUSE[0] == 0:
            _GC_PAUSE[1] = gc.isenabled()
            gc.disable()
        _GC_PAUSE[0] += 1
    try:
        yield
    finally:
        with _GC_LOCK:
            _GC_PAUSE[0] -= 1
            if _GC_PAUSE[0] == 0 and _GC_PAUSE[1]:
                if gc.get_freeze_count() == 0:
                    gc.freeze()
                    gc.unfreeze()
                gc.enable()
