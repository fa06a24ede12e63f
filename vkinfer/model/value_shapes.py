"""Graph inputs whose values decide tensor shapes (a Reshape's target shape fed at run time, say).

A plan is compiled for one input signature and fixes every tensor's shape (vkinfer/compiler/plan.py), so such
inputs are part of the signature: their values, not only their shapes and dtypes. tests/ops found a Reshape
whose shape was a graph input keeping the first run's output shape on cpu and vulkan.
"""

from __future__ import annotations

from .graph import Graph

_ALL = range(16)
# op -> the input positions whose values decide an output shape (ONNX's shape, axes, sizes, repeats, pads,
# starts/ends/steps, split, k, depth inputs); ops whose output shape depends on their data values: every input.
SHAPE_INPUTS: dict[str, range | tuple[int, ...]] = {
    "Reshape": (1,), "Squeeze": (1,), "Unsqueeze": (1,), "Expand": (1,), "Tile": (1,), "Slice": (1, 2, 3, 4),
    "Pad": (1, 3), "Resize": (1, 2, 3), "Upsample": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "TopK": (1,), "Split": (1,), "OneHot": (1,), "CenterCropPad": (1, 2), "EyeLike": (0,),
    "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,), "ReduceLogSumExp": (1,), "ReduceMax": (1,),
    "ReduceMean": (1,), "ReduceMin": (1,), "ReduceProd": (1,), "ReduceSum": (1,), "ReduceSumSquare": (1,),
    "MelWeightMatrix": (0, 1), "BlackmanWindow": (0,), "HammingWindow": (0,), "HannWindow": (0,),
    "DFT": (1, 2), "STFT": (1, 2, 3), "Col2Im": (1, 2),
    "NonZero": _ALL, "Unique": _ALL, "NonMaxSuppression": _ALL, "Compress": _ALL, "MaxUnpool": (2,),
}


def value_inputs(g: Graph) -> frozenset[str]:
    """The graph inputs from which a shape-deciding input of some node is computed (through any nodes)."""
    producer = {o: n for n in g.nodes for o in n.outputs if o}
    inputs = {t.name for t in g.inputs}
    found: set[str] = set()
    seen: set[str] = set()
    stack = [n.inputs[i] for n in g.nodes for i in SHAPE_INPUTS.get(n.op, ()) if i < len(n.inputs) and n.inputs[i]]
    while stack:
        t = stack.pop()
        if t in seen or t in g.consts:
            continue
        seen.add(t)
        if t in inputs:
            found.add(t)
        elif t in producer:
            stack.extend(i for i in producer[t].inputs if i)
    return frozenset(found)
