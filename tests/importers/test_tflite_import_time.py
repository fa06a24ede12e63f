"""TFLite import cost per node (issue 26, item 3): what the import does so that the later stages (trace, lowering,
the native constants) handle fewer objects, without changing the graph's meaning."""

from __future__ import annotations

import numpy as np
from support.load_chains import chain_model

from vkinfer.model.tflite_import import import_tflite
from vkinfer.session import OPS


def test_equal_quantization_parameters_share_their_constants():
    """Every tensor of a TFLite ADD chain has scale 0.05 and zero point 0: its nodes read one scale constant and
    one zero-point constant (700k constants on a 100k chain were 2 s of its trace and lowering), holding the
    tensors' values, and the other names the importer makes are the ones it made with a constant per use."""
    n = 40
    g = import_tflite(chain_model("tflite_add", n), {k: None for k in OPS})
    assert len(g.nodes) == n
    assert {node.op for node in g.nodes} == {"vkinfer:TFLiteAdd"}  # inputs: x, its scale, zero point; b, ...; y's
    scales = {x for node in g.nodes for x in (node.inputs[1], node.inputs[4], node.inputs[6])}
    zps = {x for node in g.nodes for x in (node.inputs[2], node.inputs[5], node.inputs[7])}
    assert len(scales) == 1 and len(zps) == 1
    s, = scales
    z, = zps
    assert g.consts[s].dtype == np.float32 and g.consts[s] == np.float32(0.05)
    assert g.consts[z].dtype == np.int8 and g.consts[z] == 0
    assert len(g.consts) == n + 2  # each ADD's constant operand, the two shared parameters
    # A constant per use numbered 6 fresh names an ADD: the names made after the first are still those.
    assert (s, z) == ("_scale_1", "_zero_point_2")
    assert [node.name for node in g.nodes] == [f"TFLiteAdd_{i}" for i in range(n)]


def test_equal_scale_vectors_read_once():
    """The fast reader makes one array per distinct scale (zero point) vector of a subgraph: a chain's tensors all
    hold the same two arrays, with the values the file has (the tflite classes read them one by one)."""
    from vkinfer.model.tflite_import import reader

    tensors, _, _, _ = reader.parse_all(chain_model("tflite_add", 20))[0]
    assert len(tensors) == 41 and all(t.raw is not None for t in tensors)  # read by fastread
    assert len({id(t.scale) for t in tensors}) == 1 and len({id(t.zero_point) for t in tensors}) == 1
    assert tensors[0].scale.dtype == np.float32 and tensors[0].scale.tolist() == [np.float32(0.05)]
    assert tensors[0].zero_point.dtype == np.int64 and tensors[0].zero_point.tolist() == [0]
