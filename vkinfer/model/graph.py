"""vkinfer's model IR: a topologically ordered list of nodes over named tensors.

Importers (ONNX now, TFLite later) produce a Graph; the session runs it node by node. Constant
tensors (weights, scales, zero points, shapes) live in `consts`.
"""

from __future__ import annotations

import contextlib
import gc
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


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while importing or planning, which make many objects and no garbage cycles
    to speak of (refcounting frees the rest): each of its full collections walks every object alive, and on a 100k-node
    chain they were 1.2 s of the import's 3.2 s, growing faster than the graph. It is turned back on at the end
    only where it was on at the start (where two threads overlap, the first to leave turns it back on)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
