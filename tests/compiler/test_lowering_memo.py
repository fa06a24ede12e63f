"""Lowerings computed once per distinct (shapes, constant parameters, attributes) in a plan (issue 26 item 3: a
chain's QLinearAdd constants, QLinearConv specs and TFLite ADD parameters were recomputed node by node, 60-120 us
each): the memo is hit along a chain, and nodes that differ in anything the lowering reads (scales, zero points,
weights, shapes) still get their own form, with the bits of ONNX Runtime (or the reference) on every device."""

from __future__ import annotations

import sys

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.agree import DEVICES, run_sessions, sessions
from support.load_chains import chain_model

import vkinfer
import vkinfer.cpu  # noqa: F401 (the CPU lowerings' modules)
from vkinfer.testing.onnx_builder import MS, OPSET, ir_version

SHAPE = [1, 4, 3, 5]


def _count(monkeypatch, module: str, name: str) -> list[int]:
    """Count the calls of `module`.`name` made by the plan's lowering (Plan._lower on the stack)."""
    import importlib

    importlib.import_module(module)
    mod = sys.modules[module]  # vkinfer.cpu.qlinear_add is also a function's name
    fn, calls = getattr(mod, name), [0]

    def counted(*a, **k):
        f = sys._getframe(1)
        while f is not None and f.f_code.co_name != "_lower":
            f = f.f_back
        calls[0] += f is not None
        return fn(*a, **k)
    monkeypatch.setattr(mod, name, counted)
    return calls


@pytest.mark.parametrize("kind, module, name", [
    ("qlinear_add", "vkinfer.cpu.qlinear_add", "_qadd_form"),
    ("tflite_add", "vkinfer.cpu.tflite_add", "_tflite_add_args"),
    ("qlinear_conv", "vkinfer.reference.qlinear_conv", "conv_node_spec"),
    ("transpose", "vkinfer.cpu.reshape", "_transpose_form")])
def test_a_chain_lowers_its_repeated_form_once(monkeypatch, kind, module, name):
    calls = _count(monkeypatch, module, name)
    sess = vkinfer.InferenceSession(chain_model(kind, 40), device="cpu", threads=1)
    x = np.zeros((1, 3, 5, 4), np.int8) if kind == "tflite_add" else np.zeros(SHAPE, np.uint8)
    assert all(d == "cpu" for d in sess.plan({"x0": x}).placement.values())
    distinct = 2 if kind == "transpose" else 1  # the Transpose chain alternates two perms
    assert calls[0] == distinct, f"{kind}: {name} ran {calls[0]} times in the lowering of 40 nodes"


def _model(nodes, inits) -> bytes:
    g = helper.make_graph(nodes, "memo", [helper.make_tensor_value_info("x0", TensorProto.UINT8, SHAPE)],
                          [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.UINT8, SHAPE)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET),
                                            *(helper.make_opsetid(d, v) for d, v in MS.items())])
    m.ir_version = ir_version(OPSET, MS)
    return m.SerializeToString()


def _const(name, v):
    return numpy_helper.from_array(np.asarray(v), name)


def _ort(blob, feed):
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    return ort.InferenceSession(blob, opts, providers=["CPUExecutionProvider"]).run(None, feed)


def test_nodes_differing_in_parameters_keep_their_own_forms():
    """QLinearAdds and QLinearConvs whose scales, zero points, weights or bias differ (and ones that repeat an
    earlier node's exactly, which take the memo): ONNX Runtime's bits on every device."""
    rng = np.random.default_rng(3)
    inits = [_const("s", np.float32(0.05)), _const("s2", np.float32(0.07)), _const("z", np.uint8(128)),
             _const("z2", np.uint8(120)), _const("so", np.float32(0.1)), _const("zw", np.int8(0)),
             _const("zw2", np.int8(2))]
    nodes, x = [], "x0"
    params = [("s", "z", "so", "z"), ("s2", "z", "so", "z"), ("s", "z2", "so", "z"), ("s", "z", "s2", "z2"),
              ("s", "z", "so", "z")]
    for i, (sa, za, sy, zy) in enumerate(params * 2):
        inits.append(_const(f"b{i}", rng.integers(0, 256, SHAPE, dtype=np.uint8)))
        nodes.append(helper.make_node("QLinearAdd", [x, sa, za, f"b{i}", "s", "z", sy, zy], [f"a{i}"], f"add{i}",
                                      domain="com.microsoft"))
        inits.append(_const(f"w{i}", rng.integers(-8, 9, (4, 4, 1, 1), dtype=np.int8)))
        conv_in = [f"a{i}", sy, zy, f"w{i}", "s", "zw2" if i % 3 == 1 else "zw", "so", "z"]
        if i % 2:
            inits.append(_const(f"bias{i}", rng.integers(-500, 500, 4, dtype=np.int32)))
            conv_in.append(f"bias{i}")
        nodes.append(helper.make_node("QLinearConv", conv_in, [f"c{i}"], f"conv{i}"))
        x = f"c{i}"
    blob = _model(nodes, inits)
    feed = {"x0": rng.integers(0, 256, SHAPE, dtype=np.uint8)}
    sess = sessions(blob, DEVICES)
    run_sessions(sess, feed, want=_ort(blob, feed))
    assert all(d == "cpu" for d in sess["cpu"].plan(feed).placement.values())


def test_plan_building_pauses_the_garbage_collector_and_restores_its_state(monkeypatch):
    """The cyclic collector is off while a plan is built (a fifth of a 20k-node chain's build was its passes) and
    comes back as it was: on when it was on, still off when the caller had turned it off."""
    import gc

    from vkinfer.compiler import plan as plan_mod

    seen = []
    lower = plan_mod.Plan._lower

    def spy(ctx, node, be):
        seen.append(gc.isenabled())
        return lower(ctx, node, be)
    monkeypatch.setattr(plan_mod.Plan, "_lower", staticmethod(spy))
    blob = chain_model("qlinear_add", 3)
    x = {"x0": np.zeros(SHAPE, np.uint8)}
    was = gc.isenabled()
    try:
        gc.enable()
        vkinfer.InferenceSession(blob, device="cpu").run(None, x)
        assert seen and not any(seen) and gc.isenabled()
        gc.disable()
        seen.clear()
        vkinfer.InferenceSession(blob, device="cpu").run(None, x)
        assert seen and not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_a_memoised_conv_spec_is_the_one_computed_for_the_node():
    """conv_spec_of on a chain (the memo hit for every node after the first) gives each node the spec
    conv_node_spec computes for it: every field equal, its own weights and bias."""
    import dataclasses

    from vkinfer.model.lowering import Ctx, conv_spec_of
    from vkinfer.reference.qlinear_conv import conv_node_spec

    sess = vkinfer.InferenceSession(chain_model("qlinear_conv", 6), device="cpu")
    plan = sess.plan({"x0": np.zeros(SHAPE, np.uint8)})
    ctx = Ctx(plan.g, plan.info)
    convs = [n for n in plan.g.nodes if n.op in ("QLinearConv", "vkinfer:QLinearConvClamp")]
    assert len(convs) == 6
    for node in convs:
        got = conv_spec_of(ctx, node)
        want = conv_node_spec(node, ctx.args(node), node.attrs.get("activation"))
        assert type(got) is type(want)
        for f in dataclasses.fields(want):
            a, b = getattr(got, f.name), getattr(want, f.name)
            if isinstance(b, np.ndarray):
                assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), (node.name, f.name)
                if f.name == "x":  # the activation by shape and dtype only (lowering._shape_only): no memory
                    assert not any(a.strides) and not a.flags.writeable and a.base.size == 1, node.name
                else:
                    assert a.flags.c_contiguous
            elif f.name == "out":
                assert np.array_equal(a.m, b.m) and (a.zero_point, a.lo, a.hi, a.dtype) == \
                    (b.zero_point, b.lo, b.hi, b.dtype)
            else:
                assert a == b, (node.name, f.name)
        assert np.shares_memory(got.w, plan.g.consts[node.inputs[3]]) or np.array_equal(
            got.w, plan.g.consts[node.inputs[3]].reshape(got.w.shape))
