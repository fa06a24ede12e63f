"""Every Vulkan device vkinfer lists besides the default one (here SwiftShader, next to lavapipe) runs a
subset of the Vulkan op, plan and model tests: bit-exact against the numpy reference, whole models against
ONNX Runtime and ai-edge-litert. The other test files run on the default device only; SwiftShader is 7-13x
slower than lavapipe (vkinfer/_vk.py), so the subset is chosen to dispatch every shader in shaders/ and
every kernel variant at least once, which the last test asserts from the shaders each device recorded."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from compiler.test_moves import check_moves
from numerics.test_requant import shader_requantize
from support.agree import run_sessions, sessions
from support.cases import MM_SHAPES, conv_table, mm_case
from support.chain_cases import chain_reference, chain_specs
from support.plan_cases import build

import vkinfer
from vkinfer import _vk, ops
from vkinfer._vk import _pick, get_device
from vkinfer.compiler.plan import Plan, VulkanBackend, interpret
from vkinfer.reference._spec import conv_spec
from vkinfer.testing import tflite_zoo, zoo
from vkinfer.vulkan import KERNELS, Chain, Executable, QLinearConv, choose_kernel

from .test_chain import _validated

logging.getLogger().setLevel(logging.ERROR)

SHADERS = {p.stem for p in (Path(__file__).resolve().parents[2] / "shaders").glob("*.comp")}


def _others() -> list[vkinfer.DeviceInfo]:
    """Every Vulkan device but the default one (which every other Vulkan test already runs on)."""
    try:
        return [d for d in vkinfer.devices() if d != _pick(None)]
    except (vkinfer.VulkanUnavailableError, ValueError):  # no driver, or a bad $VKINFER_DEVICE
        return []  # no collection error: test_devices.py and every other Vulkan test fail instead


OTHERS = _others()
DEVICE_IDS = [d.name.split()[0].lower() for d in OTHERS]
TABLE = conv_table()


@pytest.fixture(scope="module", autouse=True)
def _shapes_specialized():
    """These devices run shapes as specialization constants (`Device.push_shapes` False, the GPUs' form), while
    the default device, lavapipe, runs every other test with shapes pushed (its default as a CPU implementation):
    so both forms of every shader run, and test_checks_dispatch_every_shader asserts it."""
    for d in OTHERS:
        _vk._open[d.index] = _vk.Device(d, push_shapes=False)


def _spec(d: vkinfer.DeviceInfo) -> str:
    return f"vulkan:{d.index}"


def _index(device: str) -> int:
    """The index of "vulkan:<index>", for get_device."""
    return int(device.split(":")[1])


def _table_subset() -> list[tuple[str, dict]]:
    """Every third case of test_conv_vulkan.py's edge-case table plus the first case of each conv kernel: the whole
    table (158 cases) took 8 s on SwiftShader, this third about 3 s, and every kernel still runs."""
    first = {}
    for name, c in TABLE:
        first.setdefault(choose_kernel(conv_spec(**c)), name)
    return [(n, c) for i, (n, c) in enumerate(TABLE) if i % 3 == 0 or n in first.values()]


def check_conv_table(device: str) -> None:
    """A third of the conv edge-case table, every conv kernel included, against the reference."""
    subset = _table_subset()
    assert {choose_kernel(conv_spec(**c)) for _, c in subset} == set(KERNELS)
    for name, c in subset:
        np.testing.assert_array_equal(ops.qlinear_conv(**c, device=device),
                                      ops.qlinear_conv(**c, device="reference"), name)


def check_gemm_tiles(device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """qlinear_gemm's shared-memory and direct tile variants (a specialization constant), each forced."""
    dev = get_device(_index(device))
    gemm = [(n, c) for n, c in TABLE if choose_kernel(conv_spec(**c)) == "qlinear_gemm"][::3]
    assert len(gemm) >= 8
    for tile in ("shared", "direct"):
        monkeypatch.setenv("VKINFER_GEMM_TILE", tile)
        for name, c in gemm:
            op = QLinearConv(conv_spec(**c), dev)
            assert op.gemm.shared == (tile == "shared")
            np.testing.assert_array_equal(Executable(op, dev).run(c["x"]),
                                          ops.qlinear_conv(**c, device="reference"), f"{name} {tile}")


def check_matmul(device: str) -> None:
    """test_matmul_vulkan.py's shapes (GEMM: 2-D, batched, broadcast, |acc| past 2**24; GEMV: fewer than 8
    rows), one type pair per shape in rotation, per-column and saturating per-tensor."""
    types = [("u8", "s8"), ("u8", "u8"), ("s8", "s8"), ("s8", "u8")]
    for i, (sa, sb) in enumerate(MM_SHAPES):
        rng = np.random.default_rng(i)
        for per_column, mode in [(True, "random"), (False, "saturate")]:
            c = mm_case(rng, sa, sb, *types[i % 4], per_column, mode)
            np.testing.assert_array_equal(ops.qlinear_matmul(**c, device=device),
                                          ops.qlinear_matmul(**c, device="reference"), f"{sa}x{sb} {mode}")


def check_requantize(device: str) -> None:
    """The shaders' integer requantization (requant_check.comp, qcommon.glsl) against numpy's float32,
    on a quarter of test_requant.py's cases: a different compiler must not change a bit."""
    for lo, hi in [(0, 255), (-128, 127)]:
        got, want, *_ = shader_requantize(get_device(_index(device)), lo, hi, 1 << 16)
        np.testing.assert_array_equal(got, want)


def check_plan_layer_kinds(device: str) -> None:
    """Every compiled-plan layer kind (tests/support/plan_cases.py: max pool, TFLite average pool, lookup tables,
    concat, channel shuffle, repack, global average pool, QGemm) in one submit, u8 and s8, run twice."""
    rng = np.random.default_rng(5)
    for dtype in (np.uint8, np.int8):
        g = build(rng, 5, 9, 11, dtype)
        plan = Plan(g, {"x": np.zeros((1, 5, 9, 11), dtype)}, VulkanBackend(get_device(_index(device))))
        assert plan.submits == 1 and {p.split(":")[0] for p in plan.placement.values()} == {"vulkan"}
        for _ in range(2):
            x = rng.integers(0, 256, (1, 5, 9, 11)).astype(np.uint8).view(dtype)
            values = dict(g.consts, x=x)
            interpret(g, values)
            np.testing.assert_array_equal(plan.run({"x": x}, ["y"])[0], values["y"], str(dtype))


def check_chain(device: str) -> None:
    """Dependent convolutions (GEMM, depthwise 3x3/5x5, grouped, dilated) with barriers, replayed."""
    specs = chain_specs(6)
    chain = Chain(specs, get_device(_index(device)))
    rng = np.random.default_rng(0)
    for _ in range(3):
        x = rng.integers(0, 256, specs[0].x.shape).astype(np.uint8)
        np.testing.assert_array_equal(chain.run(x), chain_reference(specs, x))


def check_onnx_model(device: str) -> None:
    """A whole ShuffleNet-style QOperator model (channel shuffle, grouped and depthwise convolutions,
    QLinearAdd/Concat, pooling) against ONNX Runtime, as in test_models_onnx.py, and the same bits as the
    reference, cpu and default vulkan devices."""
    q = zoo.quantize(zoo.shufflenet_like(seed=1), fmt="qoperator", per_channel=True, activation_type="uint8",
                     weight_type="int8", reduce_range=True, seed=1)
    feed = zoo.random_inputs(q, seed=2)
    sess = vkinfer.InferenceSession(q.SerializeToString(), device=device)
    assert sess.plan(feed).submits == 1
    run_sessions({device: sess, **sessions(q)}, feed, want=zoo.ort_run(q, feed))


def check_tflite_model(device: str) -> None:
    """A TFLite int8 CNN with an AVERAGE_POOL_2D head against ai-edge-litert, as in test_tflite.py, and the same
    bits as the reference, cpu and default vulkan devices."""
    blob = tflite_zoo.tiny_cnn(0, dtype="int8", size=16, pool="average_pool", extra_outputs=("pool",))
    devices = {device: vkinfer.InferenceSession(blob, device=device), **sessions(blob)}
    names = ["pool", "logits", "output"]
    for i in range(2):
        x = np.random.default_rng(100 + i).uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32)
        want = tflite_zoo.litert_run(blob, {"input": x})
        run_sessions(devices, {"input": x}, want=[want[n] for n in names], output_names=names, what=f"input {i}")


def check_attention(device: str) -> None:
    """Attention's 8-bit core as YOLO11's segmentation head has it: QLinearMatMul of two activations (batched
    over heads) and com.microsoft QLinearSoftmax over the last axis, in one submit, against ONNX Runtime."""
    from onnx import helper

    from vkinfer.testing.onnx_builder import MS, make_model

    consts = {"qs": np.float32(0.05), "qz": np.uint8(120), "ks": np.float32(0.04), "kz": np.uint8(130),
              "ss": np.float32(0.3), "sz": np.uint8(110), "ps": np.float32(1 / 256), "pz": np.uint8(0)}
    nodes = [helper.make_node("QLinearMatMul", ["q", "qs", "qz", "k", "ks", "kz", "ss", "sz"], ["s"]),
             helper.make_node("QLinearSoftmax", ["s", "ss", "sz", "ps", "pz"], ["p"], domain="com.microsoft",
                              axis=-1, opset=13)]
    m = make_model(nodes, {"q": (np.uint8, (1, 2, 5, 8)), "k": (np.uint8, (1, 2, 8, 6))}, {"p": np.uint8}, consts,
                   domains=MS)
    rng = np.random.default_rng(9)
    feed = {"q": rng.integers(0, 256, (1, 2, 5, 8), dtype=np.uint8),
            "k": rng.integers(0, 256, (1, 2, 8, 6), dtype=np.uint8)}
    sess = vkinfer.InferenceSession(m.SerializeToString(), device=device)
    assert sess.plan(feed).submits == 1 and {p.split(":")[0] for p in sess.placement.values()} == {"vulkan"}
    run_sessions({device: sess, **sessions(m)}, feed, want=zoo.ort_run(m, feed))


def check_tflite_ops(device: str) -> None:
    """TFLite MEAN over H and W and RESIZE_BILINEAR (both half-pixel forms) against ai-edge-litert, each node on
    this device."""
    from vkinfer.testing import tflite_ops

    rng = np.random.default_rng(12)
    cases = [tflite_ops.op_model("mean", 1, dtype="int8", shape=(1, 5, 7, 12), axes=(1, 2), keep_dims=False,
                                 ratio=1.7),
             tflite_ops.op_model("resize_bilinear", 2, dtype="uint8", shape=(1, 5, 6, 3), size=(11, 9),
                                 align_corners=False, half_pixel=True),
             tflite_ops.op_model("resize_bilinear", 3, dtype="int8", shape=(1, 4, 4, 5), size=(7, 8),
                                 align_corners=True, half_pixel=False)]
    for k, blob in enumerate(cases):
        ref = vkinfer.InferenceSession(blob, device="reference")
        x = ref.get_inputs()[0]
        dt = np.dtype(np.int8 if "int8" in x.type and "uint8" not in x.type else np.uint8)
        feed = {x.name: rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1, x.shape).astype(dt)}
        sess = vkinfer.InferenceSession(blob, device=device)
        assert {p.split(":")[0] for p in sess.placement.values()} == {"vulkan"}, (k, sess.placement)
        names = [o.name for o in ref.get_outputs()]
        want = tflite_zoo.litert_run(blob, feed)
        run_sessions({device: sess, "reference": ref}, feed, want=[want[n] for n in names], what=f"op model {k}")


CHECKS = {f.__name__[len("check_"):]: f for f in (check_conv_table, check_gemm_tiles, check_matmul,
                                                  check_requantize, check_plan_layer_kinds, check_chain,
                                                  check_onnx_model, check_tflite_model, check_moves,
                                                  check_attention, check_tflite_ops)}
_done: dict[str, set[str]] = {}


def _run(check: str, device: str, monkeypatch: pytest.MonkeyPatch) -> None:
    f = CHECKS[check]
    if check == "gemm_tiles":
        f(device, monkeypatch)
    else:
        f(device)
    _done.setdefault(device, set()).add(check)


@pytest.mark.parametrize("check", list(CHECKS))
@pytest.mark.parametrize("info", OTHERS, ids=DEVICE_IDS)
def test_device_equals_reference(info, check, monkeypatch):
    _run(check, _spec(info), monkeypatch)


# tests/support/vk_validation_run.py's modes, as test_chain.py runs them on the default device: the kernels, every
# plan layer kind, and the negative control. The whole MobileNetV2 (width 1.0, 96x96, one submit) runs under
# validation on the default device only: it records nothing the plan mode does not, and took 6-8 s on SwiftShader.
VALIDATION = {"ops": "RESULT ops-equal 5/5", "plan": "RESULT plan-equal 4/4", "chain-nobarrier": "RESULT chain-equal",
              "variants": "RESULT variants-equal 14/14"}


@pytest.mark.parametrize("mode", list(VALIDATION))
@pytest.mark.parametrize("info", OTHERS, ids=DEVICE_IDS)
def test_under_validation_layer(info, mode, tmp_path, monkeypatch):
    """The Khronos validation layer with synchronization validation on this device: zero messages, and the
    chain without barriers reports hazards (the layer really checks this driver). About 4 s on SwiftShader."""
    monkeypatch.setenv("VKINFER_DEVICE", str(info.index))  # the subprocess's default device
    monkeypatch.setenv("VKINFER_PUSH_SHAPES", "0")  # as above: the specialized form
    out, errors = _validated(mode, tmp_path)
    assert VALIDATION[mode] in out, out[-3000:]
    if mode == "chain-nobarrier":
        assert errors > 0 and "SYNC-HAZARD-READ-AFTER-WRITE" in out
    else:
        assert errors == 0, out[:3000]


@pytest.mark.parametrize("info", OTHERS, ids=DEVICE_IDS)
def test_checks_dispatch_every_shader(info, monkeypatch):
    """The checks above dispatched every shader in shaders/ on this device (any not yet run here, e.g. under
    `-k`, run now). requant_check.comp is a test utility, but it is the exact-requantization oracle, so it
    counts too."""
    device = _spec(info)
    for check in CHECKS.keys() - _done.get(device, set()):
        _run(check, device, monkeypatch)
    assert get_device(_index(device)).dispatched == SHADERS
    assert not get_device(_index(device)).push_shapes and get_device().push_shapes == (_pick(None).type == "cpu")
    assert len(SHADERS) >= 13 and set(KERNELS) <= SHADERS
