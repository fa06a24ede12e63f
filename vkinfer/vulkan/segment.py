"""The Vulkan runner: a segment of Vulkan-placed nodes recorded once into one command sequence (uploads, every
dispatch with a barrier before it, downloads) over buffers planned by lifetime (vkinfer/model/memory.py), so
a segment is one submit per inference."""

from __future__ import annotations

import numpy as np

from ..layout import ceil4, flip, form_key, form_shape, is_8bit, packed_key, packed_words, rows_width
from ..model.lowering import alias_roots
from ..model.memory import lifetimes, plan_slots


def _bind(impl, ins: list, y) -> list:
    """Programs of a Vulkan layer: convolutions and matmuls bind one input, the others a list."""
    from . import QLinearConv, QLinearMatMul

    if isinstance(impl, QLinearConv | QLinearMatMul):
        return [impl.bind(ins[0], y)]
    return impl.bind(ins, y)


class VulkanSegment:
    """Layers in order on device `dev`; `inputs` come from the host (model constants are uploaded once),
    `outputs` go back to it."""

    kind = "vulkan"

    def __init__(self, dev, layers, inputs: list[str], outputs: list[str], info: dict, consts: dict,
                 form_io: frozenset[str] = frozenset(), packed_io: frozenset[str] = frozenset()):
        """`form_io`: 8-bit tensors exchanged with a CPU segment in the CPU graph's form (vkinfer.cpu.segment:
        canonical bytes, 4-D NHWC), which is this device's packed layout without the padding: packing them is
        a row copy (and an XOR for int8), where the host's NCHW takes a transpose on each side. MobileNetV2's
        224x224x3 input: CPU transpose 48 us + NCHW pack 47 us -> one 3-to-4-byte row pack. `packed_io`: inputs
        a CPU segment writes in this device's layout itself (`packed_key`): a plain copy, which NativePlan
        skips by mapping the CPU graph's output onto the buffer."""
        self.dev, self.layers, self.info = dev, layers, info
        root = alias_roots(layers)

        def r(t):
            return root.get(t, t)

        const_in = [t for t in dict.fromkeys(a for lay in layers for a in lay.acts) if t in consts]
        self.const_bufs = {}
        for name in const_in:
            self.const_bufs[name] = b = dev.buffer(max(4, 4 * packed_words(info[name][0])))
            b.write_nchw(np.ascontiguousarray(consts[name]))
        if const_in:  # uploaded once, in one submit
            seq = dev.sequence()
            seq.upload(*self.const_bufs.values())
            seq.barrier()
            seq.run()
        ups = [r(t) for t in inputs if t not in consts]
        self.inputs = [t for t in inputs if t not in consts]
        events = [(0, ups, [])] if ups else []
        step = len(events)
        for lay in layers:
            if not lay.alias:
                events.append((step, [r(lay.out)], [r(a) for a in lay.acts if a not in consts]))
                step += 1
        downs = [r(t) for t in outputs]
        if downs:
            events.append((step, [], downs))
        sizes = {x: 4 * packed_words(info[x][0]) for _, w, rd in events for x in (*w, *rd)}
        lts = lifetimes(events, sizes)
        slot_of, slot_sizes = plan_slots(lts)
        staged = {slot_of[x] for x in (*ups, *downs)}
        self.peak_bytes = sum(slot_sizes)
        self.buffers = [dev.buffer(max(n, 4), staged=i in staged) for i, n in enumerate(slot_sizes)]

        def buf(x):
            return self.const_bufs[x] if x in self.const_bufs else self.buffers[slot_of[r(x)]]
        def edge(t):  # (key in the run's values, packed as rows (the CPU form), XOR byte, rows shape, form shape)
            if t in packed_io and t in self.inputs:
                rows, width = rows_width(tuple(info[t][0]))
                return packed_key(t), (rows, 4 * ceil4(width)), 0, (rows * 4 * ceil4(width),)
            if t in form_io and is_8bit(info[t][1]):
                shape = tuple(info[t][0])
                f = form_shape(shape)
                k = 2 if len(shape) == 5 else 1  # 5-D (N, A, B, H, W): pixels of A*B, as layout.to_packed packs it
                rows = (int(np.prod(f[:-k], dtype=np.int64)), int(np.prod(f[-k:], dtype=np.int64)))
                return form_key(t), rows, flip(info[t][1]), f
            return t, None, 0, None
        self.in_buffers = {t: buf(t) for t in self.inputs}  # tensor name -> its buffer
        self.out_buffers = {t: buf(t) for t in outputs}
        self.ups = [(*edge(t), buf(t)) for t in self.inputs]
        self.downs = [(*edge(t), buf(t), *info[t]) for t in outputs]
        seq = dev.sequence()
        seq.barrier()  # the previous run's (or segment's) reads finish before we overwrite
        if self.ups:
            seq.upload(*dict.fromkeys(e[-1] for e in self.ups))
        for lay in layers:
            if not lay.alias:
                for prog in _bind(lay.build(), [buf(a) for a in lay.acts], buf(lay.out)):
                    seq.barrier()
                    seq.dispatch(prog)
        seq.barrier()
        if self.downs:
            seq.download(*dict.fromkeys(e[4] for e in self.downs))
            seq.barrier()
        self.seq = seq

    timed = False  # set True to measure each run's device time (Vulkan timestamps) into last_device_ns
    last_device_ns: int | None = None

    def run(self, values, threads: int = 0) -> None:
        """Pack the inputs from `values` straight into their buffers (native code; on unified memory those are
        the buffers the shaders read), submit once, unpack the outputs into `values`."""
        with self.dev.lock:  # the planned buffers are shared by every caller of this segment
            arrays, ns = self.seq.run_io(
                [(b, values[key].reshape(rows) if rows else values[key], rows is None, xor)
                 for key, rows, xor, _, b in self.ups],
                [(b, rows if rows else shape, np.uint8 if rows else dtype, rows is None, xor)
                 for key, rows, xor, _, b, shape, dtype in self.downs], timed=self.timed)
            if self.timed:
                self.last_device_ns = ns
        outs = [(key, a.reshape(fshape) if rows else a)
                for (key, rows, _, fshape, *_), a in zip(self.downs, arrays, strict=True)]
        for name, a in outs:
            values[name] = a
