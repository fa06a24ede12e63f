"""Placement (vkinfer/compiler/plan.py): any assignment of nodes to cpu, vulkan and host gives the reference's bits,
a hand-given placement is honoured and shown by `vkinfer info`, and bad placements are refused naming the node.
Every model here also runs whole on the reference, cpu and vulkan with the same bits (agree.run_devices)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.agree import assert_same, run_devices
from support.plan_cases import build

import vkinfer
from vkinfer._vk import get_device
from vkinfer.cli import main
from vkinfer.compiler.plan import HOST, CpuBackend, Plan, VulkanBackend, interpret, trace
from vkinfer.model.lowering import Ctx, lower_node
from vkinfer.testing import field_zoo, tflite_zoo, zoo


def _backends():
    vk = VulkanBackend(get_device())
    return {"cpu": CpuBackend(None), vk.name: vk}


def _runnable(g, feed, backends) -> dict[str, list[str]]:
    """Per node, the devices whose lowerings take it (the host always can)."""
    ctx = Ctx(g, trace(g, feed))
    out = {}
    for node in g.nodes:
        ok = [HOST]
        for name, be in backends.items():
            try:
                if lower_node(be.kind, ctx, node, be) is not None:
                    ok.append(name)
            except ValueError:
                pass
        out[node.name] = ok
    return out


def _reference(g, feed, names):
    values = dict(g.consts)
    values.update(feed)
    interpret(g, values)
    return [values[n] for n in names]


def _check(g, feed, choose, backends):
    """A plan with placement choose(node name, devices that can run it) equals the reference."""
    can = _runnable(g, feed, backends)
    placement = {n: choose(n, devs) for n, devs in can.items()}
    names = [t.name for t in g.outputs]
    plan = Plan(g, feed, None, placement, backends.__getitem__)
    assert plan.placement == placement
    for seg in plan.segments:
        assert all(plan.placement[n.name] == seg.device for n in seg.nodes)
    assert_same(plan.run(feed, names), _reference(g, feed, names), f"outputs {names} with placement {placement}")
    return plan


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(2, 9), h=st.integers(1, 9), w=st.integers(1, 9), signed=st.booleans(),
       seed=st.integers(0, 2**31), picks=st.randoms(use_true_random=False))
def test_random_placements_of_the_plan_graphs(c, h, w, signed, seed, picks):
    rng = np.random.default_rng(seed)
    dtype = np.int8 if signed else np.uint8
    g = build(rng, c, h, w, dtype)
    x = rng.integers(0, 256, (1, c, h, w)).astype(np.uint8).view(dtype)
    _check(g, {"x": x}, lambda n, devs: picks.choice(devs), _backends())


def _zoo_models():
    q = zoo.quantize(zoo.mobilenet_v1(), fmt="qoperator", per_channel=True, reduce_range=True)
    yield "mobilenet_v1-qoperator", q.SerializeToString(), zoo.random_inputs(q)
    q = zoo.quantize(zoo.shufflenet_like(), fmt="qdq", per_channel=True, reduce_range=True)
    yield "shufflenet_like-qdq", q.SerializeToString(), zoo.random_inputs(q)
    yield "tiny_cnn-i8", tflite_zoo.tiny_cnn(0), {"input": np.random.default_rng(0).uniform(
        -1, 1, (1, 16, 16, 3)).astype(np.float32)}
    yield "ds_cnn_kws-u8", field_zoo.ds_cnn_kws(0, dtype="uint8"), field_zoo.field_inputs("ds_cnn_kws", 0, "uint8")


def _mobilenet_v2_kws():
    return ("mobilenet_v2_kws-i8", field_zoo.mobilenet_v2_kws(0, dtype="int8"),
            field_zoo.field_inputs("mobilenet_v2_kws", 0, "int8"))


@pytest.mark.parametrize("name,blob,feed", [*_zoo_models(), _mobilenet_v2_kws()],
                         ids=lambda v: v if isinstance(v, str) else "")
def test_models_agree_on_every_device(name, blob, feed):
    """The models placed at random below, each whole on one device: the same bits on all three."""
    run_devices(blob, feed)


@pytest.mark.parametrize("name,blob,feed", list(_zoo_models()), ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("seed", [0, 1])
def test_random_placements_of_zoo_models(name, blob, feed, seed):
    sess = vkinfer.InferenceSession(blob, device="reference")
    rnd = np.random.default_rng(seed)
    _check(sess.graph, feed, lambda n, devs: devs[rnd.integers(len(devs))], _backends())


def test_alternating_devices_cross_through_host_arrays():
    """Every other node on another device: each boundary is a transfer, and the bits stay the reference's."""
    _, blob, feed = _mobilenet_v2_kws()
    g = vkinfer.InferenceSession(blob, device="reference").graph
    order = {}

    def choose(n, devs):
        order[n] = len(order)
        dev = [d for d in devs if d != HOST]
        return dev[order[n] % len(dev)] if dev else HOST
    plan = _check(g, feed, choose, _backends())
    assert len(plan.segments) > 10 and len(plan.transfers) > 10
    assert {t.src.split(":")[0] for t in plan.transfers} == {"host", "cpu", "vulkan"}


def test_hand_placement_is_honoured_and_shown(tmp_path, capsys):
    q = zoo.quantize(zoo.mobilenet_v1(), fmt="qoperator", per_channel=True, reduce_range=True)
    blob = q.SerializeToString()
    feed = zoo.random_inputs(q)
    ref = run_devices(blob, feed)  # without a hand placement, every device: the bits the placed run must give
    g = vkinfer.InferenceSession(blob, device="reference").graph
    convs = [n.name for n in g.nodes if n.op == "QLinearConv"]
    placement = {convs[1]: "cpu", convs[2]: "host"}
    sess = vkinfer.InferenceSession(blob, device="vulkan", placement=placement)
    plan = sess.plan(feed)
    assert plan.placement[convs[1]] == "cpu" and plan.placement[convs[2]] == HOST
    assert plan.placement[convs[0]].startswith("vulkan")
    # The QuantizeLinear edge is on the native CPU graph (the Vulkan device has no float op).
    assert [s.device.split(":")[0] for s in plan.segments][:5] == ["cpu", "vulkan", "cpu", "host", "vulkan"]
    assert_same(sess.run(None, feed), ref, "vulkan with the hand placement")
    path = tmp_path / "m.onnx"
    path.write_bytes(blob)
    assert main(["info", str(path), "--device", "vulkan", "--placement", f"{convs[1]}=cpu,{convs[2]}=host"]) == 0
    out = capsys.readouterr().out
    assert f"placed by hand: {convs[1]} on cpu" in out and f"placed by hand: {convs[2]} on host" in out
    assert "native CPU call(s)" in out and "transfers per run" in out


def test_bad_placements_name_the_node():
    q = zoo.quantize(zoo.mobilenet_v1(), fmt="qoperator", per_channel=True, reduce_range=True)
    blob = q.SerializeToString()
    g = vkinfer.InferenceSession(blob, device="reference").graph
    conv = next(n.name for n in g.nodes if n.op == "QLinearConv")
    quant = next(n.name for n in g.nodes if n.op == "QuantizeLinear")
    softmax = next((n.name for n in g.nodes if n.op == "Softmax"), None)
    for device in ("cpu", "vulkan"):  # the same refusals whichever device the rest of the model follows
        with pytest.raises(ValueError, match="no_such_node"):
            vkinfer.InferenceSession(blob, device=device, placement={"no_such_node": "cpu"})
        with pytest.raises(ValueError, match=conv):
            vkinfer.InferenceSession(blob, device=device, placement={conv: "tpu"})
        with pytest.raises(ValueError, match=conv):
            vkinfer.InferenceSession(blob, device=device, placement={conv: "reference"})
        with pytest.raises(ValueError, match=conv):
            vkinfer.InferenceSession(blob, device=device, placement={conv: 3})
        with pytest.raises(TypeError, match="placement"):
            vkinfer.InferenceSession(blob, device=device, placement=[(conv, "cpu")])
        # A float op the Vulkan device has no lowering for: refused with the node's name and the reason.
        with pytest.raises(ValueError, match=f"{quant}.*vulkan"):
            vkinfer.InferenceSession(blob, device=device, placement={quant: "vulkan"})
        if softmax is not None:
            with pytest.raises(ValueError, match=softmax):
                vkinfer.InferenceSession(blob, device=device, placement={softmax: "cpu"})
    with pytest.raises(ValueError, match="placement"):
        vkinfer.InferenceSession(blob, device="reference", placement={conv: "cpu"})


@pytest.mark.parametrize("name,blob,feed", [m for m in _zoo_models() if m[0] != "tiny_cnn-i8"] + [_mobilenet_v2_kws()],
                         ids=lambda v: v if isinstance(v, str) else "")
@pytest.mark.parametrize("offset", [0, 1])
def test_device_segments_hand_over_in_the_cpu_form(name, blob, feed, offset):
    """8-bit tensors passed between CPU and Vulkan segments cross in the CPU graph's form (canonical bytes, NHWC,
    (N, H, W, A, B) for 5-D), packed as rows on the device: no NCHW transpose on either side; the bits are the
    reference's for int8 (XOR at the device edge) and uint8, 4-D and 5-D."""
    g = vkinfer.InferenceSession(blob, device="reference").graph
    order: dict[str, int] = {}

    def choose(n, devs):
        order[n] = len(order)
        dev = [d for d in devs if d != HOST]
        return dev[(order[n] + offset) % len(dev)] if dev else HOST
    plan = _check(g, feed, choose, _backends())
    handed = set()
    for seg in plan.segments:
        io = getattr(seg.runner, "form_io", None)
        if io is not None:
            handed |= io & set(seg.inputs + seg.outputs)
    crossing = {t.tensor for t in plan.transfers if {t.src.split(":")[0], t.dst.split(":")[0]} == {"cpu", "vulkan"}}
    assert handed, f"no tensor crossed in the CPU form; transfers {plan.transfers}"
    assert handed <= {t for t, _ in plan.info.items()}
    ranks = {len(plan.info[t][0]) for t in handed}
    dtypes = {plan.info[t][1] for t in handed}
    assert 4 in ranks and dtypes <= {np.dtype(np.int8), np.dtype(np.uint8)}
    assert crossing & handed
    if name.startswith("shufflenet"):
        assert any(len(plan.info[t][0]) == 5 for t in crossing), "the channel shuffle's 5-D tensor should cross"
