"""The graph a TFLite subgraph becomes, as it is built: `Builder` names tensors, adds nodes and constants, keeps
each tensor in the layouts (NHWC, NCHW) asked of it, and turns TFLite's quantization and fused activations into
vkinfer's; `Op` is one entry of the op table (vkinfer/model/tflite/ops.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..graph import Node
from .reader import DTYPES, QRANGE, Tensor

# Fused activations: code -> real (lo, hi) bounds (None: unbounded above); NONE, RELU, RELU_N1_TO_1, RELU6.
ACTIVATIONS = {0: None, 1: (0.0, None), 2: (-1.0, 1.0), 3: (0.0, 6.0)}
_SHORT: dict[str, str] = {}  # an op type -> the part after its domain, which names its nodes


@dataclass(frozen=True)
class Op:
    """One TFLite builtin op: everything the importer knows of it.

    options: the name of its builtin options class in the `tflite` package (None: it has none); check(ins, outs,
    opts, tensors): why it cannot be imported, or None; build(builder, ins, outs, opts): adds its nodes (None:
    the subgraph importer handles it, vkinfer/model/tflite/subgraphs.py); needs: the vkinfer ops it may produce
    (all must be in the session's op table); min_inputs: the input tensors it must have; writes: False for an
    op that writes no tensor; shape: the output shape the structural check asks for ("same": the first
    input's, "broadcast": the inputs' broadcast); no_options: what an op without its options table is ("ok",
    "invalid": a malformed model, "unsupported": an op vkinfer cannot import); window: the options fields that
    must be positive (a window op, whose Padding must be SAME or VALID)."""

    options: str | None
    check: Callable
    build: Callable | None
    needs: tuple[str, ...] = ()
    min_inputs: int = 1
    writes: bool = True
    shape: str | None = None
    no_options: str = "ok"
    window: tuple[str, ...] = ()

    def options_class(self):
        import tflite

        return None if self.options is None else getattr(tflite, self.options)


class Builder:
    def __init__(self, tensors):
        self.t = tensors
        names, seen = [], set()
        for i, t in enumerate(tensors):
            n = t.name if t.name not in seen else f"{t.name}:{i}"
            seen.add(n)
            names.append(n)
        self.names = names
        self.nodes: list[Node] = []
        self.consts: dict[str, np.ndarray] = {}
        self.layouts: dict[int, dict[str, str]] = {}  # tensor index -> {"NHWC" | "NCHW": graph tensor name}
        self._n = 0
        self._qnames: dict[int, tuple[str, str]] = {}  # qparams' constants of tensor i
        self._qshared: dict[tuple, tuple[str, str]] = {}  # (scale, zero point, type) -> their constants
        self._qsame: dict[tuple, tuple[str, str]] = {}  # (id of scale array, of zero point array, type) -> those
        self.forms: dict[tuple, tuple] = {}  # what an op's build works out once per distinct form (ops_quantized)

    # ---- helpers ----
    def fresh(self, kind: str) -> str:
        self._n += 1
        return f"_{kind}_{self._n}"

    def const(self, kind: str, value: np.ndarray) -> str:
        name = self.fresh(kind)
        self.consts[name] = value
        return name

    def node(self, op: str, inputs: list[str], outputs: list[str], **attrs) -> None:
        short = _SHORT.get(op)
        if short is None:
            short = _SHORT[op] = op.split(":")[-1]
        self.nodes.append(Node(op, f"{short}_{len(self.nodes)}", inputs, outputs, attrs))

    def array(self, i: int) -> np.ndarray:
        t = self.t[i]
        return np.frombuffer(t.data, dtype=DTYPES[t.dtype]).reshape(t.shape).copy()

    def qparams(self, i: int, per_axis: bool = False) -> tuple[str, str]:
        """Names of constants holding tensor i's scale and zero point (zero point in the tensor's type)."""
        if not per_axis:  # asked before: its names (a chain asks for each tensor's twice)
            names = self._qnames.get(i)
            if names is not None:
                self._n += 2
                return names
        t = self.t[i]
        dt = DTYPES[t.dtype]
        if per_axis and t.scale.size > 1:
            zp = np.broadcast_to(t.zero_point, t.scale.shape).astype(dt)
            return self.const("scale", t.scale.copy()), self.const("zero_point", zp)
        names = self._qnames.get(i)
        if names is None:  # once per tensor (an ADD chain asks for each tensor's twice)
            same = (id(t.scale), id(t.zero_point), t.dtype)  # the reader's arrays, one per distinct vector
            names = self._qsame.get(same)
        if names is None:
            scale = np.float32(t.scale[0])
            zp = np.array(t.zero_point[0], dt)
            key = (scale.tobytes(), zp.tobytes(), zp.dtype.char)
            names = self._qshared.get(key)
            if names is None:  # equal parameters share their two constants (a model has a few sets)
                names = self._qshared[key] = self._qsame[same] = self._qnames[i] = (
                    self.const("scale", scale), self.const("zero_point", zp))
                return names
            self._qsame[same] = self._qnames[i] = names
        self._n += 2  # the fresh names after it as when each use made its own two constants
        return names

    def get(self, i: int, layout: str = "NHWC") -> str:
        """Graph name of tensor i in `layout` (4-D tensors only may be NCHW), adding a Transpose if needed."""
        if self.t[i].data is not None:  # a constant: stored in each layout asked for
            if layout == "NCHW" and len(self.t[i].shape) == 4:
                have = self.layouts.setdefault(i, {})
                if "NCHW" not in have:
                    have["NCHW"] = self.const(f"{self.names[i]}_nchw", np.ascontiguousarray(
                        self.array(i).transpose(0, 3, 1, 2)))
                return have["NCHW"]
            if self.names[i] not in self.consts:
                self.consts[self.names[i]] = self.array(i)
            return self.names[i]
        have = self.layouts.get(i)
        if have is None:
            have = self.layouts[i] = {}
        if layout in have:
            return have[layout]
        if len(self.t[i].shape) != 4:
            layout = "NHWC"
            if layout in have:
                return have[layout]
        src, = have.values()
        perm = [0, 3, 1, 2] if layout == "NCHW" else [0, 2, 3, 1]
        name = self.names[i] if layout == "NHWC" else self.fresh(f"{self.names[i]}_nchw")
        self.node("Transpose", [src], [name], perm=perm)
        have[layout] = name
        return name

    def put(self, i: int, layout: str = "NHWC") -> str:
        """Name under which an op writes tensor i in `layout` (the TFLite name for NHWC)."""
        name = self.names[i] if layout == "NHWC" else self.fresh(f"{self.names[i]}_nchw")
        self.layouts.setdefault(i, {})[layout] = name
        return name

    def nchw_ready(self, i: int) -> bool:
        return "NCHW" in self.layouts.get(i, {})

    def layout_of(self, ins: list[int], outs: list[int]) -> str:
        """NCHW for an op on 4-D tensors whose (non-constant) input already exists as NCHW, else NHWC."""
        t, layouts = self.t, self.layouts  # (loops, not generators: once per op)
        for i in ins:
            if len(t[i].shape) != 4:
                return "NHWC"
        for i in outs:
            if len(t[i].shape) != 4:
                return "NHWC"
        for i in ins:
            if t[i].data is None and "NCHW" in layouts.get(i, ()):
                return "NCHW"
        return "NHWC"

    def shape(self, i: int, layout: str) -> tuple[int, ...]:
        s = self.t[i].shape
        return (s[0], s[3], s[1], s[2]) if layout == "NCHW" and len(s) == 4 else s

    def activation(self, code: int, i: int):
        """vkinfer's `activation` attribute for TFLite fused activation `code` on output tensor i: a ("clip", lo,
        hi) whose quantized bounds are TFLite's (CalculateActivationRangeQuantized: zero point +
        round-half-away(value / scale), limited to the type's range), or None when the clamp is the type's range."""
        t = self.t[i]
        rng = act_range(code, t.scale[0], int(t.zero_point[0]), DTYPES[t.dtype])
        if rng is None:
            return None
        lo, hi = rng
        s, zp = np.float64(t.scale[0]), int(t.zero_point[0])
        # (q - zp) * scale as a real bound quantizes back to q exactly (|q - zp| <= 255: float32 error << 0.5).
        return ("clip", float((lo - zp) * s), float((hi - zp) * s))

    def clamp(self, src: str, i: int, layout: str, act) -> None:
        """Write tensor i (in `layout`) as `src` clamped by fused activation `act` (see `activation`): an identity
        1x1 vkinfer:QLinearConvClamp (weight 1, weight scale 1, input scale = output scale: multiplier exactly
        1.0, so only the narrowed clamp acts), depthwise on an NCHW tensor, else on a (1, 1, rows, last dim)
        view of it."""
        t = self.t[i]
        shape = self.shape(i, layout)
        dt = DTYPES[t.dtype]
        out = self.put(i, layout)
        if len(shape) == 4 and layout == "NCHW":
            x4, y4, c = src, out, shape[1]
        else:
            rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
            x4, y4, c = self.fresh("clamp_in"), self.fresh("clamp_out"), 1
            self.node("Reshape", [src, self.const("shape", np.array([1, 1, rows, shape[-1] if shape else 1],
                                                                    np.int64))], [x4])
        s, z = self.qparams(i)
        self.node("vkinfer:QLinearConvClamp", [x4, s, z, self.const("weights", np.ones((c, 1, 1, 1), dt)),
                                               self.const("scale", np.float32(1.0)),
                                               self.const("zero_point", np.array(0, dt)), s, z],
                  [y4], strides=[1, 1], pads=[0, 0, 0, 0], dilations=[1, 1], group=c, activation=act)
        if y4 != out:
            self.node("Reshape", [y4, self.const("shape", np.array(shape, np.int64))], [out])

    def write(self, i: int, layout: str, act) -> str:
        """Name an op writes tensor i under; with a fused activation, a fresh name that `finish` clamps into i."""
        return self.put(i, layout) if act is None else self.fresh(f"{self.names[i]}_unclamped")

    def expect_hw(self, x: int, y: int, k: tuple[int, int], stride: tuple[int, int], dilation: tuple[int, int],
                  same: bool, channels: int) -> None:
        """ValueError naming output tensor y unless its declared shape (N, H, W, `channels`) is what TFLite
        computes from input x."""
        want = []
        for axis, size, kk, ss, dd in zip("HW", self.t[x].shape[1:3], k, stride, dilation, strict=True):
            eff = (kk - 1) * dd + 1
            if same and max(same_pads(size, kk, ss, dd)) > size + 8:
                # Legal arithmetic, but only padding: a window this large is a corrupt filter size or dilation.
                raise ValueError(f"a {eff}-wide window along {axis} (filter {kk}, dilation {dd}) over input "
                                 f"{self.t[x].name!r} of size {size} pads it by {max(same_pads(size, kk, ss, dd))}")
            want.append(-(-size // ss) if same else -(-(size - eff + 1) // ss))
        got = self.t[y].shape
        want = [self.t[x].shape[0], *want, int(channels)]
        if list(got) != want or min(want) < 1:
            raise ValueError(f"output tensor {self.t[y].name!r} has shape {list(got)}, but a {k[0]}x{k[1]} window "
                             f"at strides {list(stride)} over input {self.t[x].name!r} of shape "
                             f"{list(self.t[x].shape)} gives {want}")



def same_pads(size: int, k: int, stride: int, dilation: int) -> tuple[int, int]:
    out = -(-size // stride)
    total = max((out - 1) * stride + (k - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def round_away(v: float) -> int:
    return int(np.sign(v) * np.floor(abs(v) + 0.5))


def act_range(code: int, scale, zp: int, dtype) -> tuple[int, int] | None:
    """TFLite's quantized clamp of fused activation `code` (CalculateActivationRangeQuantized: zero point +
    round-half-away(float32(value / scale)), within the type's range); None when it is the whole range."""
    if ACTIVATIONS[code] is None:
        return None
    qmin, qmax = QRANGE[np.dtype(dtype)]
    lo, hi = ACTIVATIONS[code]

    def q(v: float) -> int:
        return zp + round_away(float(np.float32(v) / np.float32(scale)))

    lo, hi = max(qmin, q(lo)), qmax if hi is None else min(qmax, q(hi))
    return None if (lo, hi) == (qmin, qmax) else (lo, hi)


def same_q(a: Tensor, b: Tensor) -> bool:
    return (a.scale is not None and b.scale is not None and a.scale.size == b.scale.size == 1
            and np.float32(a.scale[0]) == np.float32(b.scale[0]) and int(a.zero_point[0]) == int(b.zero_point[0]))



def expect_shape(imp: Builder, i: int, want, what: str) -> None:
    got = tuple(imp.t[i].shape)
    if got != tuple(int(d) for d in want):
        raise ValueError(f"output tensor {imp.t[i].name!r} has shape {list(got)}, {what} gives "
                         f"{[int(d) for d in want]}")
