"""Compiled plans (vkinfer/compiler/plan.py): every layer kind a backend runs in its own form equals the
interpreter on device "reference" bit for bit, models become one Vulkan submit, buffers are reused by
lifetime, and plans are made per input signature; every model run here gives the same bits on the reference, cpu
and vulkan."""

from __future__ import annotations

import logging

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.agree import DEVICES, assert_same, run_sessions
from support.plan_cases import build

import vkinfer
from vkinfer._vk import get_device
from vkinfer.compiler.plan import CpuBackend, Plan, VulkanBackend, interpret
from vkinfer.testing import tflite_zoo, zoo

logging.getLogger().setLevel(logging.ERROR)


def _backends():
    return [VulkanBackend(get_device()), CpuBackend(None)]


def _reference(g, x):
    values = dict(g.consts)
    values["x"] = x
    interpret(g, values)
    return values["y"]


def _check_case(c, h, w, dtype, seed):
    rng = np.random.default_rng(seed)
    g = build(rng, c, h, w, dtype)
    x = rng.integers(0, 256, (1, c, h, w)).astype(np.uint8).view(dtype)
    ref = _reference(g, x)
    # Not a saturated or constant output (a tiny one, 7 values for c=5, h=1, w=3, may have 2 distinct values).
    assert ref.size < 16 or np.unique(ref).size > 2
    # A plan_cases graph, not a model file: the plans of both backends against the interpreter stand for
    # agree.run_devices (the same three devices, the same bits, dtype and shape).
    for be in _backends():
        plan = Plan(g, {"x": x}, be)
        assert_same(plan.run({"x": x}, ["y"]), [ref], be.name)
        # Every node on the device: one submit (Vulkan) or one native call (CPU) per run.
        assert set(plan.placement.values()) == {be.name}, plan.why_host
        assert (plan.submits if be.kind == "vulkan" else plan.native_calls) == 1
        # A second input through the same plan (buffers reused, nothing stale).
        x2 = rng.integers(0, 256, x.shape).astype(np.uint8).view(dtype)
        assert_same(plan.run({"x": x2}, ["y"]), [_reference(g, x2)], f"{be.name}, second input")


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", [(3, 9, 11), (2, 1, 1), (5, 8, 8), (8, 15, 7), (17, 3, 5)])
def test_every_layer_kind_equals_reference(shape, dtype):
    _check_case(*shape, dtype, seed=sum(shape))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(2, 12), h=st.integers(1, 13), w=st.integers(1, 13), signed=st.booleans(),
       seed=st.integers(0, 2**31))
def test_every_layer_kind_random_shapes(c, h, w, signed, seed):
    _check_case(c, h, w, np.int8 if signed else np.uint8, seed)


ZOO = {"mobilenet_v2": lambda: zoo.mobilenet_v2(0.35, 48, 10), "mobilenet_v1": zoo.mobilenet_v1,
       "shufflenet_like": zoo.shufflenet_like, "resnext_like": zoo.resnext_like, "dilated_net": zoo.dilated_net,
       "mlp": zoo.mlp}


@pytest.mark.parametrize("act", ["uint8", "int8"])
@pytest.mark.parametrize("name", list(ZOO))
def test_zoo_models_are_one_vulkan_submit(name, act):
    q = zoo.quantize(ZOO[name](), fmt="qoperator", per_channel=True, activation_type=act, reduce_range=True)
    feed = zoo.random_inputs(q, seed=3)
    sessions = {d: vkinfer.InferenceSession(q.SerializeToString(), device=d) for d in DEVICES}
    run_sessions(sessions, feed)
    for device in ("vulkan", "cpu"):
        sess = sessions[device]
        plan = sess.plan(feed)
        host = {n.op for n in sess.graph.nodes if plan.placement[n.name] == "host"}
        if device == "vulkan":
            # Only the float edges of the model stay on the host.
            assert host <= {"QuantizeLinear", "DequantizeLinear"}, host
            assert plan.submits == 1
        else:  # the whole model, float edges included, is one native call
            assert not host and plan.native_calls == 1 and len(plan.segments) == 1, plan.why_host


def test_tflite_mobilenet_v2_is_one_vulkan_submit():
    model = tflite_zoo.mobilenet_v2(seed=0, size=32, width=0.35, num_classes=10)
    sessions = {d: vkinfer.InferenceSession(model, device=d) for d in DEVICES}
    i = sessions["vulkan"].get_inputs()[0]
    x = np.random.default_rng(0).standard_normal(i.shape).astype(np.float32)
    assert sessions["vulkan"].plan({i.name: x}).submits == 1
    run_sessions(sessions, {i.name: x})


def test_buffers_are_reused_by_lifetime():
    q = zoo.quantize(zoo.mobilenet_v2(0.35, 48, 10), fmt="qoperator", per_channel=True, reduce_range=True)
    sess = vkinfer.InferenceSession(q.SerializeToString(), device="vulkan")
    plan = sess.plan(zoo.random_inputs(q))
    [seg] = [s for s in plan.segments if s.device.startswith("vulkan")]
    runner = seg.runner
    dev_tensors = {lay.out for lay in runner.layers if not lay.alias}
    total = sum(4 * -(-plan.info[t][0][1] // 4) * int(np.prod(plan.info[t][0][2:])) for t in dev_tensors
                if len(plan.info[t][0]) == 4)
    assert len(runner.buffers) < len(dev_tensors) / 4
    assert runner.peak_bytes < total / 2  # measured: 3.3x less than one buffer per tensor


def test_plans_per_input_signature():
    q = zoo.quantize(zoo.mobilenet_v1(), fmt="qoperator", per_channel=True, reduce_range=True)
    q.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"  # a symbolic batch dimension
    q.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    onnx.checker.check_model(q)
    blob = q.SerializeToString()
    sessions = {d: vkinfer.InferenceSession(blob, device=d) for d in DEVICES}
    for device in ("vulkan", "cpu"):
        assert not sessions[device]._plans  # nothing to compile until the first run gives the batch size
    rng = np.random.default_rng(0)
    for batch in (1, 3, 1):
        x = rng.standard_normal((batch, 3, 32, 32)).astype(np.float32)
        run_sessions(sessions, {"input": x})
    for device in ("vulkan", "cpu"):
        assert len(sessions[device]._plans) == 2, device
    # The reference device's plan is one host segment: the interpreter, node by node.
    [seg] = sessions["reference"].plan({"input": x}).segments
    assert seg.device == "host" and len(seg.nodes) == len(sessions["reference"].graph.nodes)


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_edges_keep_the_interpreters_errors(device):
    """The interpreter (device "reference") refuses a NaN input; the compiled edges of cpu and vulkan alike."""
    q = zoo.quantize(zoo.mlp(), fmt="qoperator", per_channel=True, reduce_range=True)
    sess = vkinfer.InferenceSession(q.SerializeToString(), device=device)
    x = zoo.random_inputs(q)["input"]
    if device != "reference":
        first = sess.plan({"input": x}).segments[0]
        # The QuantizeLinear edge is in the native graph (on Vulkan sessions too: the device has no float ops).
        assert first.device == "cpu" and first.runner.ops()[0].startswith("quantize")
    x[0, 3] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        sess.run(None, {"input": x})
