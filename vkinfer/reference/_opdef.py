"""An op's definition, written in the op's own file (vkinfer/reference/<op>.py) and found there by name.

A file defines its ops in `DEFINITIONS` (a tuple of OpDef): the node-level kernel the interpreter runs (numpy,
the executable definition of the numerics), the inputs a node must have, the cost class the dispatcher prices it
by, and optionally a shape rule (for kernels too slow to run just for shapes) and the 8-bit function a lookup
table lowering tabulates. `definitions()` reads every file of the package once; vkinfer.model.op_table, the
importers, vkinfer.dispatch.costs and the table lowerings take their entries from it, so adding such an op is
its files and nothing else in Python (docs/adding-an-op.md).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

# The classes vkinfer.dispatch.costs prices (conv: `weights` is the input holding the weights).
COSTS = ("conv", "gemm", "pool", "reduce", "move", "elementwise")


@dataclass(frozen=True)
class OpDef:
    """One op type (with its domain prefix, e.g. "com.microsoft:QLinearAdd")."""

    op: str
    kernel: Callable  # (node, input values, memo dict) -> output values
    cost: str  # one of COSTS
    inputs: tuple[int, tuple[int, ...]]  # (at least this many inputs, the indices that must not be empty)
    y_params: tuple[int, int] | None = None  # where a quantized op's output scale and zero point are
    x_slots: tuple[int, ...] = ()  # its 8-bit data inputs, each followed by its scale and zero point
    weights: int | None = None  # conv: the input holding the weights
    shape: Callable | None = None  # (node, input values) -> [(shape, dtype)], checked like the kernel
    unary: Callable | None = None  # (node, constants) -> f(x) on 8-bit arrays: a 256-entry table op
    binary: Callable | None = None  # (node, constants) -> f(a, b): a 65536-entry table op

    def __post_init__(self):
        if self.cost not in COSTS:
            raise ValueError(f"op {self.op}: cost class {self.cost!r} is not one of {COSTS}")
        if self.cost == "conv" and self.weights is None:
            raise ValueError(f"op {self.op}: a conv op names its weights input")


@cache
def definitions() -> dict[str, OpDef]:
    """op type -> its OpDef, from every module of vkinfer.reference that has DEFINITIONS."""
    from .. import reference

    out: dict[str, OpDef] = {}
    for info in sorted(pkgutil.iter_modules(reference.__path__), key=lambda m: m.name):
        mod = importlib.import_module(f"{reference.__name__}.{info.name}")
        for d in getattr(mod, "DEFINITIONS", ()):
            if d.op in out:
                raise ValueError(f"op {d.op} is defined twice (vkinfer/reference/{info.name}.py and another file)")
            out[d.op] = d
    return out


def attr(node, key: str):
    """A required attribute: ValueError naming it when the node lacks it."""
    if key not in node.attrs:
        raise ValueError(f"missing attribute {key!r}")
    return node.attrs[key]


def ints(v, n: int, default: int) -> tuple[int, ...]:
    return tuple(int(i) for i in v) if v is not None else (default,) * n


def check_auto_pad(node) -> None:
    """ValueError naming the node when its auto_pad is not NOTSET, VALID, SAME_UPPER or SAME_LOWER (bytes or str);
    the ops resolve it with vkinfer/reference/_auto_pad.py."""
    from ._auto_pad import node_mode

    try:
        node_mode(node)
    except ValueError as e:
        raise ValueError(f"{node.name} ({node.op}): {e}") from None


def cached_spec(memo: dict, key: tuple, make_spec: Callable):
    """The node's validated spec for this input signature, made once per executor when everything but the
    activation is a model constant (`memo["static"]`, set by the interpreter): building MobileNetV2's 52 specs
    took 20 ms of its 210 ms reference run."""
    cached = memo.get("spec")
    if cached is not None and cached[0] == key and memo.get("static"):
        return cached[1]
    spec = make_spec()
    memo["spec"] = (key, spec)
    return spec
