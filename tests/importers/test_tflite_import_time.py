"""TFLite import cost per node (issue 26, item 3): what the import does so that the later stages (trace, lowering,
the native constants) handle fewer objects, without changing the graph's meaning."""

from __future__ import annotations

import re

import numpy as np
import pytest
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


def test_fused_activation_read_as_the_options_class_reads_it():
    """fastread.fused_activation (an ADD's and MUL's activation without the flatbuffers runtime's per-read checks)
    gives FusedActivationFunction() of each: every activation code, the field absent (NONE, the default), other
    options classes and odd tables through the method itself (its error)."""
    import tflite

    from vkinfer.model.tflite_import import fastread, reader
    from vkinfer.testing.tflite_builder import ACT, ModelBuilder

    B, A = tflite.BuiltinOperator, tflite.BuiltinOptions
    m = ModelBuilder()
    x = m.tensor("x", (1, 4), np.int8, None, 0.05, 0)
    outs = []
    for k, act in enumerate(ACT):
        for code, kind in ((B.ADD, A.AddOptions), (B.MUL, A.MulOptions)):
            y = m.tensor(f"y{k}_{code}", (1, 4), np.int8, None, 0.05, 0)
            m.op(code, [x, x], [y], kind, FusedActivationFunction=ACT[act])
            outs.append(y)
    y = m.tensor("pool", (1, 4), np.int8, None, 0.05, 0)
    m.op(B.MAX_POOL_2D, [x], [y], A.Pool2DOptions, FusedActivationFunction=ACT["relu"], FilterWidth=1,
         FilterHeight=1, StrideW=1, StrideH=1)
    blob = m.finish([x], [*outs, y])
    _, ops, _, _ = reader.parse_all(blob)[0]
    seen = []
    for code, _, _, _, tab in ops:
        kind = {B.ADD: tflite.AddOptions, B.MUL: tflite.MulOptions}.get(code, tflite.Pool2DOptions)
        opts = reader.options(kind, tab)
        seen.append(fastread.fused_activation(opts))
        assert seen[-1] == opts.FusedActivationFunction()
    assert sorted(set(seen)) == sorted(set(ACT.values()))
    odd = reader.options(tflite.AddOptions, tab.__class__(blob, len(blob) + 8))  # a table past the end
    with pytest.raises(Exception) as want:
        odd.FusedActivationFunction()
    with pytest.raises(type(want.value), match=re.escape(str(want.value))):
        fastread.fused_activation(odd)


def test_bulk_reader_reads_what_the_per_tensor_reader_reads(monkeypatch):
    """bulkread (every tensor's and op's fields gathered with numpy) gives fastread's per-tensor values: the zoo
    read both ways compares equal (the per-tensor way forced by allowing no vtable), and a position outside the
    file, a negative one included (numpy would index from the end), raises for the slow reader to take over."""
    from importers.test_import_time import _canon
    from importers.test_mutations import _tflite_bases
    from vkinfer.model.tflite_import import bulkread, fastread, reader

    for name, blob in [*_tflite_bases().items(), ("chain", chain_model("tflite_add", 30))]:
        bulk = reader.parse_all(blob)
        assert all(isinstance(t.raw, bulkread.Columns) for s in bulk for t in s[0])
        with monkeypatch.context() as m:
            m.setattr(bulkread, "_MAX_VTABLES", 0)  # every subgraph's tensors read by fastread.tensors
            m.setattr(bulkread, "operators", fastread.operators)
            m.setattr(bulkread, "buffer_data", lambda b, bufs, idx: [fastread.buffer_data(b, bufs[i]) for i in idx])
            one = reader.parse_all(blob)
        assert _canon(bulk) == _canon(one), name
        t, ins, outs = bulk[0][0], bulk[0][2], bulk[0][3]
        names = ([f"i{k}" for k in ins], [f"o{k}" for k in outs])
        assert _canon(reader.file_meta(blob, ins, outs, *names, [], t)) == _canon(
            reader.file_meta(blob, ins, outs, *names, [], one[0][0])), name
    v = bulkread._Views(b"\x01\x00\x00\x00\x02\x00\x00\x00")
    assert v.at("<u4", np.array([0, 4, 1])).tolist() == [1, 2, 2 << 24]
    for bad in ([-1], [5], [0, 8]):
        with pytest.raises(fastread._Corrupt):
            v.at("<u4", np.array(bad))


def test_binary_forms_worked_out_once_each(monkeypatch):
    """An ADD's or MUL's decisions (TFLiteAdd or QLinearAdd, the activation's bounds or clamp) are made once per
    distinct (op, activation, scales, output zero point, type) and reused: a model of ADDs and MULs that share
    some and differ in each imports to the graph it gives when every op works them out itself."""
    import tflite

    from vkinfer.model.tflite_import import builder
    from vkinfer.testing.tflite_builder import ACT, ModelBuilder

    B, A = tflite.BuiltinOperator, tflite.BuiltinOptions
    m = ModelBuilder()
    x = first = m.tensor("x", (1, 2, 2, 4), np.int8, None, 0.05, 0)
    for k, (code, kind, act, scale, zp) in enumerate([
            (B.ADD, A.AddOptions, None, 0.05, 0), (B.ADD, A.AddOptions, "relu", 0.05, 0),
            (B.ADD, A.AddOptions, "relu", 0.05, 3), (B.ADD, A.AddOptions, None, 50.0, 0),
            (B.MUL, A.MulOptions, "relu6", 0.05, 0), (B.MUL, A.MulOptions, None, 0.05, 0),
            (B.ADD, A.AddOptions, "relu", 0.05, 0), (B.ADD, A.AddOptions, None, 0.05, 0)]):
        c = m.tensor(f"c{k}", (1, 2, 2, 4), np.int8, np.full((1, 2, 2, 4), k, np.int8), 0.05, 0)
        y = m.tensor(f"y{k}", (1, 2, 2, 4), np.int8, None, scale, zp)
        m.op(code, [x, c], [y], kind, FusedActivationFunction=ACT[act])
        x = y
    blob = m.finish([first], [x])
    memo = import_tflite(blob, {k: None for k in OPS})

    class Never(dict):
        def get(self, key, default=None):
            return default

    init = builder.Builder.__init__

    def each_op_itself(self, tensors):
        init(self, tensors)
        self.forms = Never()

    monkeypatch.setattr(builder.Builder, "__init__", each_op_itself)
    alone = import_tflite(blob, {k: None for k in OPS})
    assert len({n.op for n in memo.nodes}) >= 3  # TFLiteAdd, QLinearAdd, QLinearMul, clamps
    assert [(n.op, n.name, n.inputs, n.outputs, n.attrs) for n in memo.nodes] == [
        (n.op, n.name, n.inputs, n.outputs, n.attrs) for n in alone.nodes]
    assert memo.consts.keys() == alone.consts.keys()
