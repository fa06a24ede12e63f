"""Sizes before memory: every tensor's byte size is computed (Python integers: no overflow) and checked against the
session's limits before anything that large is allocated.

- Per tensor (`Limits.tensor_bytes`, default 2 GiB): every graph input, every node output and every scratch array
  a kernel run by the trace would make (vkinfer/model/size_rules.py).
- Per session (`Limits.session_bytes`, default 8 GiB): the live activations at their peak, walking the nodes in
  order (a tensor lives from its node, or the feed, to its last reader; graph outputs to the end). The weights
  are the model's and not counted.
Going over raises `SizeLimitError` (a ValueError) naming the node, the tensor, its shape and the limit. The trace
(vkinfer/model/interpreter.py) checks each node's outputs from its shape rule, or from its size rule before its
kernel runs, so a refused model allocates nothing large: it fails in milliseconds. Plans are traced per input
signature, so a run whose symbolic dims (a fed batch) make a tensor too large is refused the same way.
Settable per session: `InferenceSession(max_tensor_bytes=, max_session_bytes=)`, or through vkinfer.ort's
`SessionOptions.add_session_config_entry("vkinfer.max_tensor_bytes", "...")` (and "vkinfer.max_session_bytes").
"""

from __future__ import annotations

import contextvars
import dataclasses
import math

import numpy as np

from ..errors import SizeLimitError  # noqa: F401 - defined with vkinfer's error classes, named here too
from .graph import Graph, Node

GiB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Limits:
    """Byte limits: per tensor and for the live activations of one run (module docstring)."""

    tensor_bytes: int = 2 * GiB
    session_bytes: int = 8 * GiB

    def __post_init__(self) -> None:
        for f in ("tensor_bytes", "session_bytes"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
                raise ValueError(f"max_{f} must be a positive integer number of bytes, got {v!r}")
            object.__setattr__(self, f, int(v))

    @classmethod
    def of(cls, max_tensor_bytes: int | None = None, max_session_bytes: int | None = None) -> Limits:
        """The limits given (None: the default) as InferenceSession's keywords."""
        d = cls()
        return cls(d.tensor_bytes if max_tensor_bytes is None else max_tensor_bytes,
                   d.session_bytes if max_session_bytes is None else max_session_bytes)


DEFAULT = Limits()
# The limits of the trace running now (interpreter.trace sets them): what a guarded kernel (op_table.guard) checks
# against when it runs outside a trace too, e.g. in constant folding at import (DEFAULT there).
CURRENT: contextvars.ContextVar[Limits] = contextvars.ContextVar("vkinfer_size_limits", default=DEFAULT)


def elements(shape) -> int:
    """The element count of `shape` (non-negative Python integers; a negative dim is a ValueError)."""
    dims = [int(d) for d in shape]
    if any(d < 0 for d in dims):
        raise ValueError(f"shape {dims} has a negative dimension")
    return math.prod(dims)


def _describe(shape, dtype_or_item) -> str:
    dt = dtype_or_item if isinstance(dtype_or_item, int) else np.dtype(dtype_or_item)
    kind = f"{dt}-byte elements" if isinstance(dt, int) else str(dt)
    return f"shape {[int(d) for d in shape]} ({kind})"


def _nbytes(shape, dtype_or_item) -> int:
    item = dtype_or_item if isinstance(dtype_or_item, int) else np.dtype(dtype_or_item).itemsize
    return elements(shape) * item


def needs_bytes(needs) -> list[int]:
    """The byte count of each need (what, shape, dtype or itemsize) as `Arena.expect` counts it."""
    return [_nbytes([max(int(d), 0) for d in shape], dt) for _, shape, dt in needs]


def check_tensor(what: str, shape, dtype_or_item, limits: Limits = DEFAULT) -> int:
    """Bytes of a tensor of `shape` (dtype or itemsize); SizeLimitError naming `what` past the per-tensor limit."""
    n = _nbytes(shape, dtype_or_item)
    if n > limits.tensor_bytes:
        raise SizeLimitError(f"{what} of {_describe(shape, dtype_or_item)} would take {n} bytes, over the limit of "
                             f"{limits.tensor_bytes} bytes per tensor (InferenceSession's max_tensor_bytes)")
    return n


def check_inputs(inputs, limits: Limits = DEFAULT) -> None:
    """Graph inputs (vkinfer.model.graph.TensorInfo) with static shapes, checked before zeros of them are made."""
    for t in inputs:
        if t.shape is not None and all(isinstance(d, int) for d in t.shape):
            check_tensor(f"graph input {t.name!r}", [max(d, 0) for d in t.shape], t.dtype or np.uint8, limits)


class Arena:
    """The trace's accounting: each node's outputs checked per tensor, and the live tensors' total against the
    session limit (a tensor is freed after its last reader; `done` says which names the trace may drop)."""

    def __init__(self, g: Graph, limits: Limits = DEFAULT):
        self.g, self.limits = g, limits
        # the model's weights are never counted (a TFLite model has 8 of them a node), unless fed as inputs
        consts = g.consts.keys() - {t.name for t in g.inputs} if any(t.name in g.consts for t in g.inputs) \
            else g.consts
        self.last: dict[str, int] = {t: i for i, node in enumerate(g.nodes) for t in node.inputs
                                     if t and t not in consts}
        end = len(g.nodes)
        for t in g.outputs:
            self.last[t.name] = end
        self.live: dict[str, int] = {}
        self.total = 0
        self.peak = 0
        self._free: dict[int, list[str]] = {}

    def _where(self, node: Node | None, name: object) -> str:
        if node is None:
            return f"graph input {name!r}"
        if isinstance(name, int):
            name = node.outputs[name] if name < len(node.outputs) else f"#{name}"
            return f"node {node.name!r} ({node.op}): output {name!r}"
        return f"node {node.name!r} ({node.op}): its {name}"

    def expect(self, node: Node | None, needs) -> None:
        """Before a node's kernel (or stand-in) allocates: `needs` [(output index or what, shape, dtype or
        itemsize)] each within the per-tensor limit, and its outputs with the live tensors within the session's."""
        add = 0
        for what, shape, dt in needs:
            shape = [max(int(d), 0) for d in shape]  # a negative dim: the kernel's own error, not a size
            n = check_tensor(self._where(node, what), shape, dt, self.limits)
            add += n
            if self.total + add > self.limits.session_bytes:
                raise SizeLimitError(
                    f"{self._where(node, what)} of {_describe(shape, dt)} would bring the live tensors to "
                    f"{self.total + add} bytes, over the limit of {self.limits.session_bytes} bytes per session "
                    f"(InferenceSession's max_session_bytes)")

    def made(self, node: Node | None, name: str, shape, dtype, index: int = 0) -> None:
        """A tensor now exists (a feed, or a node's output): checked (for ops without a size rule, after the fact)
        and counted live until its last reader."""
        n = _nbytes(shape, dtype)
        if n > self.limits.tensor_bytes or self.total + n > self.limits.session_bytes:
            self.expect(node, [(index if node is not None else name, shape, dtype)])
        self.add(name, n)

    def add(self, name: str, n: int) -> None:
        """A tensor of `n` bytes, within the limits (`expect`), counted live until its last reader."""
        i = self.last.get(name)
        if i is None:
            return  # nobody reads it: freed at once
        self.live[name] = n
        self.total += n
        if self.total > self.peak:
            self.peak = self.total
        self._free.setdefault(i, []).append(name)

    def done(self, i: int) -> list[str]:
        """After node `i`: the tensors it read last, no longer live (the trace may drop their arrays)."""
        names = self._free.pop(i, [])
        for t in names:
            self.total -= self.live.pop(t, 0)
        return names
