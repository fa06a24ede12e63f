"""A model's size in work and memory, as `vkinfer info` prints it and `vkinfer bench` records it."""

from __future__ import annotations

from typing import Any

import numpy as np

MAC_CONV_OPS = ("QLinearConv", "vkinfer:QLinearConvClamp")
MAC_MATMUL_OPS = ("QLinearMatMul", "com.microsoft:QGemm", "vkinfer:QGemmClamp", "MatMulInteger")


def macs_and_peak(g: Any, info: dict[str, tuple]) -> tuple[int, int]:
    """(multiply-accumulates of one inference, peak bytes of live activations) of graph `g`, with the tensor
    shapes and dtypes `info` (name -> (shape, dtype), a plan's trace). MACs count convolutions and matrix
    products; a tensor is alive from its producer to its last reader (graph outputs to the end), walking the
    nodes in order."""
    def nbytes(name: str) -> int:
        shape, dtype = info.get(name, ((), np.dtype(np.uint8)))
        return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize

    macs, last_use = 0, {}
    for i, n in enumerate(g.nodes):
        for name in n.inputs:
            last_use[name] = i
        out = info.get(n.outputs[0], ((),))[0] if n.outputs else ()
        w = g.consts.get(n.inputs[3]) if len(n.inputs) > 3 else None
        if n.op in MAC_CONV_OPS and w is not None:
            macs += int(np.prod(out)) * int(np.prod(w.shape[1:]))
        elif n.op == "ConvInteger" and n.inputs[1] in g.consts:
            macs += int(np.prod(out)) * int(np.prod(g.consts[n.inputs[1]].shape[1:]))
        elif n.op in MAC_MATMUL_OPS:
            a = info.get(n.inputs[0], ((),))[0]
            if a:
                macs += int(np.prod(out)) * int(a[-2] if n.attrs.get("transA", 0) else a[-1])
    outputs = {o.name for o in g.outputs}
    live = {t.name: nbytes(t.name) for t in g.inputs}
    peak = sum(live.values())
    for i, n in enumerate(g.nodes):
        for name in n.outputs:
            live[name] = nbytes(name)
        peak = max(peak, sum(live.values()))
        for name in [k for k in live if last_use.get(k, -1) <= i and k not in outputs]:
            del live[name]
    return macs, peak
