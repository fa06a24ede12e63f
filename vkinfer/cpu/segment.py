"""The CPU runner: a segment of CPU-placed nodes compiled into one native graph (vkinfer/cpu/graph.py), run by
one C call per inference.

At build time: every tensor of the segment gets storage (the memory planner's offsets in one arena, or the
run's external buffers for what crosses to and from the host), constant operands are written into the
arena once, the conversions at the segment's edges (host layout <-> the CPU form, int8 <-> canonical bytes)
become operators, and each layer's operators are added in order. At run time: the inputs are checked, the
outputs allocated, and the graph runs.
"""

from __future__ import annotations

import numpy as np

from ..model.memory import lifetimes, plan_offsets
from ._form import canonical, flip, form_perm, form_shape, is_8bit, same_bytes, u32
from .graph import NativeGraph, Ref


class CpuSegment:
    """Layers (vkinfer.model.lowering.Layer with CPU emitters) in order; `inputs` come from the host, `outputs`
    go to it; `info` maps every tensor to its traced (shape, dtype); `consts` are the model's constants."""

    kind = "cpu"

    def __init__(self, layers, inputs: list[str], outputs: list[str], info: dict, consts: dict):
        self.layers, self.inputs, self.outputs, self.info = layers, inputs, outputs, info
        root: dict[str, str] = {}
        for lay in layers:
            if lay.alias:
                root[lay.out] = root.get(lay.acts[0], lay.acts[0])

        def r(t: str) -> str:
            return root.get(t, t)

        def nbytes(t: str) -> int:
            shape, dt = info[t]
            return int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize

        const_in = [t for t in dict.fromkeys(a for lay in layers for a in lay.acts) if t in consts]
        self.inputs = [t for t in inputs if t not in consts]
        # External buffers: inputs (host arrays), then outputs (arrays this run returns).
        ext = {}
        for k, t in enumerate(self.inputs + outputs):
            ext.setdefault(("in" if k < len(self.inputs) else "out", t), k + 1)
        direct_in: dict[str, int] = {}  # inputs the layers read in place (float, or uint8 whose form is the host's)
        for t in self.inputs:
            shape, dt = info[t]
            if not is_8bit(dt) or (flip(dt) == 0 and same_bytes(shape)):
                direct_in[t] = ext[("in", t)]
        direct_out: dict[str, int] = {}  # float outputs written in place by their producer
        for t in outputs:
            if not is_8bit(info[t][1]) and t not in root and t not in self.inputs:
                direct_out[t] = ext[("out", t)]
        # Lifetimes over steps: 0 = input conversions, 1..n = layers, n + 1 = output conversions.
        events = [(0, [r(t) for t in self.inputs if t not in direct_in], [])]
        for i, lay in enumerate(layers, 1):
            if lay.alias:
                events.append((i, [], [r(lay.acts[0])]))
                continue
            writes = [] if lay.out in direct_out else [r(lay.out)]
            if lay.scratch:
                writes.append(f"#scratch{i}")
            events.append((i, writes, [r(a) for a in lay.acts if r(a) not in direct_in]))
        events.append((len(layers) + 1, [], [r(t) for t in outputs if t not in direct_out]))
        sizes = {r(t): nbytes(t) for lay in layers for t in (*lay.acts, lay.out)}
        sizes.update({r(t): nbytes(t) for t in self.inputs + outputs})
        sizes.update({f"#scratch{i}": lay.scratch for i, lay in enumerate(layers, 1) if lay.scratch})
        lts = lifetimes(events, sizes, pinned=[r(t) for t in const_in])
        self.lifetimes = lts
        offsets, arena = plan_offsets(lts)
        self.arena_bytes = arena
        self.ext_bytes = [nbytes(t) for t in self.inputs + outputs]
        g = NativeGraph(arena, self.ext_bytes)
        self.graph = g

        def ref(t: str) -> Ref:
            if r(t) in direct_in:
                return Ref(direct_in[r(t)], 0, nbytes(t))
            if t in direct_out:
                return Ref(direct_out[t], 0, nbytes(t))
            return Ref(0, offsets[r(t)], nbytes(t))

        for t in const_in:
            data = canonical(np.asarray(consts[t]))
            g.write(ref(t).offset, data)
        for t in self.inputs:
            if t not in direct_in:
                shape, dt = info[t]
                self._convert(g, shape, form_perm(shape), flip(dt), Ref(ext[("in", t)], 0, nbytes(t)), ref(t))
        for i, lay in enumerate(layers, 1):
            if lay.alias:
                continue
            scratch = Ref(0, offsets[f"#scratch{i}"], lay.scratch) if lay.scratch else None
            lay.impl(g, [ref(a) for a in lay.acts], ref(lay.out), scratch)
        for t in outputs:
            if t in direct_out:
                continue
            shape, dt = info[t]
            src = ref(t)
            perm = tuple(int(p) for p in np.argsort(form_perm(shape)))
            self._convert(g, form_shape(shape), perm, flip(dt), src, Ref(ext[("out", t)], 0, nbytes(t)))
        self.out_specs = [(t, info[t][0], np.dtype(info[t][1])) for t in outputs]
        self.in_specs = [(t, info[t][0], np.dtype(info[t][1])) for t in self.inputs]
        self.nan_checked = [t for t in self.inputs if np.dtype(info[t][1]) == np.float32]

    @staticmethod
    def _convert(g: NativeGraph, shape, perm, xor: int, src: Ref, dst: Ref) -> None:
        """One permutation (with the int8 XOR) from src to dst; shape is src's, perm as numpy's transpose."""
        elem = 1 if src.nbytes == int(np.prod(shape, dtype=np.int64)) else 4
        shape = list(shape) or [1]
        perm = list(perm) or [0]
        g.add("transpose", len(shape), u32(shape), u32(perm), elem, xor if elem == 1 else 0, src, dst)

    def ops(self) -> list[str]:
        """The native operators in order."""
        return self.graph.ops()

    def run(self, values, threads: int = 0) -> None:
        """Read the inputs from `values` (host arrays), run the graph, write the outputs into `values`."""
        ext = []
        for t, shape, dt in self.in_specs:
            a = values[t]
            if not isinstance(a, np.ndarray) or a.dtype != dt or a.shape != shape:
                raise ValueError(f"tensor {t!r} must be a {dt} array of shape {list(shape)}, got "
                                 f"{getattr(a, 'dtype', type(a).__name__)} {list(getattr(a, 'shape', ()))}")
            if t in self.nan_checked and np.isnan(a).any():
                raise ValueError(f"tensor {t!r} contains NaN (ONNX Runtime's QuantizeLinear result is position "
                                 "dependent)")
            ext.append(a if a.flags.c_contiguous else np.ascontiguousarray(a))
        outs = [np.empty(shape, dt) for _, shape, dt in self.out_specs]
        self.graph.run(ext + outs, threads)
        for (t, _, _), a in zip(self.out_specs, outs, strict=True):
            values[t] = a
