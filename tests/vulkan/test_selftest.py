"""The per-driver self-test (issue 27 item 4, vkinfer/vulkan/selftest.py): at a device's first use its kernels run
against the C path; a device that disagrees is untrusted in the cache: device="vulkan" raises DeviceUntrustedError
naming the device, the driver and the case, device="auto" leaves it out. A wrong result is injected through the
test hook ($VKINFER_SELFTEST_INJECT), as a driver computing wrong would give one. Every test here writes its
verdicts into its own $VKINFER_CACHE (the suite's SPIR-V linked in), never the suite's."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

import vkinfer
from vkinfer import _trust, _vk, cli, cpu, ops
from vkinfer.dispatch import machine
from vkinfer.errors import DeviceUntrustedError, VulkanDeviceError
from vkinfer.reference._spec import ConvSpec
from vkinfer.testing import tflite_zoo
from vkinfer.vulkan import KERNELS, selftest

SUITE_CACHE = Path(os.environ["VKINFER_CACHE"]).resolve()
CONV = dict(x=np.arange(2 * 5 * 5, dtype=np.uint8).reshape(1, 2, 5, 5), x_scale=0.1, x_zero_point=np.uint8(3),
            w=np.ones((3, 2, 3, 3), np.uint8), w_scale=0.05, w_zero_point=np.uint8(1), y_scale=0.2,
            y_zero_point=np.uint8(5))
FEED = {"input": np.random.default_rng(3).uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32)}


@pytest.fixture
def own_cache(tmp_path, monkeypatch):
    """A private $VKINFER_CACHE (SPIR-V and pipeline caches linked from the suite's), no verdict in this process's
    memory before or after the test, no injection or override from outside."""
    for sub in ("spirv", "pipelines"):
        (SUITE_CACHE / sub).mkdir(parents=True, exist_ok=True)
        (tmp_path / sub).symlink_to(SUITE_CACHE / sub, target_is_directory=True)
    monkeypatch.setenv("VKINFER_CACHE", str(tmp_path))
    for var in ("VKINFER_SELFTEST", "VKINFER_SELFTEST_INJECT", "VKINFER_DEVICE"):
        monkeypatch.delenv(var, raising=False)
    selftest._memo.clear()
    machine._left_out_warned.clear()
    yield tmp_path
    selftest._memo.clear()  # the next test's devices are judged by the suite's cache again
    machine._left_out_warned.clear()


def _names() -> list[str]:
    try:
        return [d.name for d in _vk.devices()]
    except vkinfer.VulkanUnavailableError:
        return []


def _default_with(feature: str) -> list:
    """The default Vulkan device as a one-item list when its DeviceInfo dict `feature` says so (for parametrize)."""
    try:
        info = _vk._pick(None)
    except (vkinfer.VulkanUnavailableError, ValueError):
        return []
    field, key = feature.split(".")
    return [info] if (getattr(info, field) or {}).get(key) else []


DOT_DEFAULT = _default_with("integer_dot_product.supported")
RTE_DEFAULT = _default_with("float_controls.rte32")


def _entry(dev) -> dict:
    return next(d for d in machine.vulkan_devices() if d["device"] == f"vulkan:{dev.info.index}")


@pytest.mark.parametrize("name", _names())
def test_every_case_agrees_with_the_c_path_and_reaches_every_kernel(own_cache, name):
    dev = _vk.get_device(name)
    v = selftest.run(dev)
    assert v.passed and v.source == "run", [c for c in v.cases if not c.ok]
    assert {c.kernel for c in v.cases} == set(KERNELS)
    assert v.seconds < 5.0, v.seconds  # lavapipe 0.2-0.3 s, SwiftShader 0.65 s here
    assert Path(v.record).parent == own_cache / "selftest"


def test_the_cases_can_fail():
    """Each case's outputs spread over many values (few clamped), so a wrong product or requantization shows, and
    the cases cover u8, s8 and mixed operands, strides, pads, dilations, groups and per-channel scales."""
    kinds = set()
    for case in selftest.CASES:
        s = case.make(np.random.default_rng(0))
        if isinstance(s, ConvSpec):
            out, dtypes = cpu.QLinearConv(s).run(s.x, 1), (s.x.dtype, s.w.dtype)
            kinds |= {"stride"} if s.strides != (1, 1) else set()
            kinds |= {"pad"} if any(s.pads) else set()
            kinds |= {"dilation"} if s.dilations != (1, 1) else set()
            kinds |= {"group"} if 1 < s.group < s.x.shape[1] else set()
            kinds |= {"per-channel"} if np.size(s.w_zp) > 1 else set()
        else:
            out, dtypes = cpu.QLinearMatMul(s).run(s.a, 1), (s.a.dtype, s.b.dtype)
        kinds.add(tuple(np.dtype(d).char for d in dtypes))
        info = np.iinfo(out.dtype)
        clamped = np.mean((out == info.min) | (out == info.max))
        assert len(np.unique(out)) >= min(20, out.size // 2) and clamped < 0.2, (case.name, clamped)
    assert {("B", "B"), ("b", "b"), ("B", "b"), "stride", "pad", "dilation", "group", "per-channel"} <= kinds


def test_an_injected_wrong_result_marks_the_device_untrusted_and_auto_avoids_it(own_cache, monkeypatch):
    dev = _vk.get_device()
    monkeypatch.setenv("VKINFER_SELFTEST_INJECT", "dw3x3_u8")
    with pytest.raises(DeviceUntrustedError) as e:
        ops.qlinear_conv(**CONV, device="vulkan")
    msg = str(e.value)
    assert dev.info.name in msg and dev.info.driver in msg and "dw3x3_u8" in msg and "qlinear_dwconv3x3" in msg
    assert re.search(r"1 of \d+ values differ from the C path's", msg), msg
    assert (e.value.case, e.value.device) == ("dw3x3_u8", f"vulkan:{dev.info.index}")
    assert isinstance(e.value, VulkanDeviceError) and isinstance(e.value, vkinfer.VkInferError)
    monkeypatch.delenv("VKINFER_SELFTEST_INJECT")  # the verdict is cached: no rerun, in this process or another
    selftest._memo.clear()
    with pytest.raises(DeviceUntrustedError, match="cached verdict.*case dw3x3_u8"):
        vkinfer.InferenceSession(tflite_zoo.tiny_cnn(0), device="vulkan")
    entry = _entry(dev)
    with pytest.warns(RuntimeWarning, match=rf"leaving {entry['device']} .*failed vkinfer's self-test.*dw3x3_u8"):
        assert entry not in machine.auto_candidates(machine.vulkan_devices())
    sess = vkinfer.InferenceSession(tflite_zoo.tiny_cnn(0), device="auto")
    assert entry["device"] not in sess.auto_devices
    # An explicit ask is refused, never used silently: a placement too.
    node = sess.graph.nodes[0].name
    with pytest.raises(DeviceUntrustedError):
        vkinfer.InferenceSession(tflite_zoo.tiny_cnn(0), device="auto", placement={node: "vulkan"})
    # `vkinfer selftest` reruns it: now it passes, and the device is trusted again.
    assert cli.main(["selftest", "--device", entry["device"]]) == 0
    assert entry in machine.auto_candidates(machine.vulkan_devices())
    np.testing.assert_array_equal(ops.qlinear_conv(**CONV, device="vulkan"), ops.qlinear_conv(**CONV, device="cpu"))


def test_selftest_zero_uses_the_device_untested(own_cache, monkeypatch):
    dev = _vk.get_device()
    monkeypatch.setenv("VKINFER_SELFTEST_INJECT", "all")
    assert not selftest.check(dev).passed
    monkeypatch.setenv("VKINFER_SELFTEST", "0")
    assert selftest.require(dev) is dev
    assert selftest.auto_problem(_entry(dev)) is None
    np.testing.assert_array_equal(ops.qlinear_conv(**CONV, device="vulkan"), ops.qlinear_conv(**CONV, device="cpu"))
    monkeypatch.setenv("VKINFER_SELFTEST", "maybe")
    with pytest.raises(ValueError, match=r"\$VKINFER_SELFTEST must be 0 or 1, got 'maybe'"):
        selftest.require(dev)


def _opening_counts(monkeypatch) -> list[str]:
    runs: list[str] = []
    real = selftest.run

    def counted(dev, cases=selftest.CASES):
        runs.append(dev.info.name)
        return real(dev, cases)
    monkeypatch.setattr(selftest, "run", counted)
    return runs


def test_the_verdict_is_cached_and_a_damaged_record_reruns_the_test(own_cache, monkeypatch):
    dev = _vk.get_device()
    runs = _opening_counts(monkeypatch)
    assert selftest.check(dev).source == "run" and len(runs) == 1
    selftest._memo.clear()  # as a new process would
    v = selftest.check(dev)
    assert (v.source, v.passed, len(runs)) == ("cached", True, 1)
    path = Path(v.record)
    doc = json.loads(path.read_text())
    doc["paths"][selftest.path_of(dev)]["passed"] = False  # edited without its stamp
    for damaged, why in ((json.dumps(doc).encode(), "checksum mismatch"), (path.read_bytes()[:40], "not JSON"),
                         (b"[]", "not a JSON object")):
        path.write_bytes(damaged)
        selftest._memo.clear()
        with pytest.warns(RuntimeWarning, match=rf"ignoring self-test record .*{why}.*the self-test reruns"):
            assert selftest.check(dev).passed
        assert selftest.check(dev).source == "run"
    assert len(runs) == 4
    # The record is keyed by the device's identity and shader path; another driver version is another record.
    ident = selftest.identity_of(dev)
    assert selftest.record_path({**ident, "driver_version": ident["driver_version"] + 1}) != path


def test_the_record_keeps_one_verdict_per_shader_path(own_cache, monkeypatch):
    """A driver that computes dot products wrong is recorded as such: its plain path's verdict stands apart, and
    auto goes by the path tested last."""
    dev = _vk.get_device()
    assert selftest.check(dev).passed
    real = selftest.path_of(dev)
    path = "dot" if real == "plain" else "plain"
    with monkeypatch.context() as mp:  # the verdict is keyed by the path the device reports (Device.use_dot)
        mp.setattr(selftest, "path_of", lambda d: path)
        mp.setenv("VKINFER_SELFTEST_INJECT", "gemm1x1_s8")
        with pytest.raises(DeviceUntrustedError, match=rf"{path} shader path.*gemm1x1_s8"):
            selftest.require(dev)
    rec = selftest.read_record(selftest.identity_of(dev))
    assert rec["last"] == path and not rec["paths"][path]["passed"] and rec["paths"][real]["passed"]
    why = selftest.auto_problem(_entry(dev))
    assert f"failed vkinfer's self-test on its {path} shader path (case gemm1x1_s8" in why
    assert not selftest.cached_verdict(selftest.identity_of(dev), path).passed
    # Back on its own path (say $VKINFER_VK_DOT=0 after dot failed): its cached verdict stands, and auto follows.
    selftest._memo.clear()
    v = selftest.check(dev)
    assert (v.source, v.passed, v.path) == ("cached", True, real)
    assert selftest.auto_problem(_entry(dev)) is None


@pytest.mark.parametrize("info", DOT_DEFAULT, ids=[d.name.split()[0] for d in DOT_DEFAULT])
def test_the_integer_dot_product_path_is_tested_and_recorded_apart(info, own_cache):
    plain = selftest.check(_vk.Device(info, integer_dot=False, float_rq=False, pipeline_threads=0))
    dev = _vk.Device(info, integer_dot=True, float_rq=False, pipeline_threads=0)
    v = selftest.check(dev)
    assert (v.path, v.source, v.passed, plain.path) == ("dot", "run", True, "plain"), v.failing
    rec = selftest.read_record(selftest.identity_of(dev))
    assert set(rec["paths"]) == {"plain", "dot"} and rec["last"] == "dot"
    if info.float_controls.get("rte32"):  # the float32 requantization is a path of its own too
        f = selftest.check(_vk.Device(info, integer_dot=True, float_rq=True, pipeline_threads=0))
        assert (f.path, f.passed) == ("dot+frq", True), f.failing
        assert set(selftest.read_record(selftest.identity_of(dev))["paths"]) == {"plain", "dot", "dot+frq"}


@functools.cache
def _fast_vulkan_profile():
    """A profile in which Vulkan is far faster than the CPU, so that auto puts the model there (as in
    tests/vulkan/test_device_faults.py)."""
    from vkinfer.dispatch.costs import CLASSES
    from vkinfer.dispatch.profile import ClassModel, DeviceProfile, Link, Profile, cpu_identity

    gpu = machine.auto_candidates(machine.vulkan_devices())[0]
    slow = {c: ClassModel(2_000.0, 2.0, 0.5) for c in CLASSES}
    fast = {c: ClassModel(2.0, 0.002, 0.0005) for c in CLASSES}
    cpu = DeviceProfile("cpu", "cpu", 1, dict(cpu_identity()), 2_000.0, Link(300.0, 0.05), Link(300.0, 0.05),
                        (1, 1), 1.1, slow)
    vk = DeviceProfile(gpu["device"], "vulkan", 1, dict(gpu["identity"]), 1.0, Link(1.0, 0.0001),
                       Link(1.0, 0.0001), (1, 1), 1.1, fast)
    return Profile([cpu, vk])


def test_auto_opening_an_untested_device_that_fails_runs_on_the_cpu_with_a_warning(own_cache, monkeypatch):
    profile = _fast_vulkan_profile()
    want = vkinfer.InferenceSession(tflite_zoo.tiny_cnn(0), device="cpu").run(None, FEED)
    monkeypatch.setenv("VKINFER_SELFTEST_INJECT", "conv1x5_mixed")
    with pytest.warns(RuntimeWarning, match=r'device="auto": Vulkan device .*conv1x5_mixed.*runs on the CPU'):
        sess = vkinfer.InferenceSession(tflite_zoo.tiny_cnn(0), device="auto", profile=profile, threads=1)
        got = sess.run(None, FEED)
    assert not any(p.startswith("vulkan") for p in sess.placement.values())
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.fixture
def block(monkeypatch):
    """Add one blocklist entry for the test."""
    def add(**kw) -> None:
        monkeypatch.setattr(_trust, "BLOCKLIST", [*_trust.BLOCKLIST, selftest.BlockEntry(**kw)])
    return add


def test_a_blocklisted_device_is_not_used_and_not_tested(own_cache, block, monkeypatch):
    dev = _vk.get_device()
    runs = _opening_counts(monkeypatch)
    drv = re.escape(dev.info.driver)
    block(driver=drv, feature="device", versions=((0,), (10_000,)), reason="computes wrong (a test entry)")
    assert selftest.blocked(dev) == "computes wrong (a test entry)"
    assert selftest.blocked(_entry(dev)) == selftest.blocked(dev.info) == "computes wrong (a test entry)"
    assert selftest.blocked(dev, "dot") is None
    with pytest.raises(DeviceUntrustedError, match=rf"{re.escape(dev.info.name)}.*blocklist: computes wrong"):
        ops.qlinear_conv(**CONV, device="vulkan")
    with pytest.warns(RuntimeWarning, match="blocklist: computes wrong"):
        assert _entry(dev) not in machine.auto_candidates(machine.vulkan_devices())
    assert runs == []


def test_blocklist_entries_match_driver_version_and_feature(block):
    mesa = {"name": "AMD Radeon RX 7600 (RADV NAVI33)", "driver": "radv", "driver_info": "Mesa 23.1.2",
            "identity": {"vendor_id": 0x1002, "driver_version": 0}}
    nvidia = {"name": "NVIDIA H100", "driver": "NVIDIA", "driver_info": "",
              "identity": {"vendor_id": 0x10DE, "driver_version": (535 << 22) | (104 << 14) | (5 << 6)}}
    assert selftest.driver_version(selftest._facts(mesa)) == (23, 1, 2)
    assert selftest.driver_version(selftest._facts(nvidia)) == (535, 104, 5, 0)
    assert selftest.blocked(mesa, "dot") is None
    block(driver=r"\bradv\b", feature="dot", versions=((23, 1), (23, 2)), reason="dot products wrong")
    assert selftest.blocked(mesa, "dot") == "dot products wrong"
    assert selftest.blocked(mesa, "device") is None
    assert selftest.blocked({**mesa, "driver_info": "Mesa 23.2.0"}, "dot") is None  # the upper end is excluded
    assert selftest.blocked({**mesa, "driver_info": "Mesa 22.3.6"}, "dot") is None
    assert selftest.blocked({**mesa, "driver_info": "no version"}, "dot") is None  # unknown: not blocked
    block(driver="nvidia", feature="device", vendor_id=0x10DE, versions=(None, (536,)), reason="old")
    assert selftest.blocked(nvidia) == "old"
    assert selftest.blocked({**nvidia, "identity": {**nvidia["identity"], "vendor_id": 0x1002}}) is None
    with pytest.raises(ValueError, match="feature must be one of 'device', 'dot', 'frq', got 'coopmat'"):
        selftest.blocked(mesa, "coopmat")


def test_the_shipped_blocklist_is_well_formed():
    for e in selftest.BLOCKLIST:
        assert e.feature in selftest.FEATURES and e.reason and re.compile(e.driver)
        assert all(v is None or isinstance(v, tuple) for v in e.versions)
    assert dataclasses.is_dataclass(selftest.BlockEntry)


def test_cli_selftest_and_devices(own_cache, monkeypatch, capsys):
    dev = _vk.get_device()
    where = f"vulkan:{dev.info.index}"
    assert cli.main(["devices"]) == 0
    assert "self-test: not run" in capsys.readouterr().out
    monkeypatch.setenv("VKINFER_SELFTEST_INJECT", "matmul_gemv_u8")
    assert cli.main(["selftest", "--device", where]) == 1
    out = capsys.readouterr().out
    assert re.search(r"FAIL  matmul_gemv_u8 +qlinear_gemv +[\d.]+ ms  1 of \d+ values differ", out), out
    assert len(re.findall(r"^    pass  ", out, flags=re.M)) == len(selftest.CASES) - 1
    assert "FAILED: the device is untrusted: 10/11 cases" in out
    assert cli.main(["devices"]) == 0
    assert re.search(rf"{re.escape(dev.info.name)}.*\n(?:    .*\n)*?    self-test: FAILED on the [\w+]+ shader "
                     r"path \(case matmul_gemv_u8", capsys.readouterr().out)
    monkeypatch.delenv("VKINFER_SELFTEST_INJECT")
    assert cli.main(["selftest", "--device", where]) == 0
    assert f"passed: {len(selftest.CASES)}/{len(selftest.CASES)} cases" in capsys.readouterr().out
    assert cli.main(["selftest", "--device", "cpu"]) == 2
    assert "--device takes vulkan or vulkan:<index|name|type>, got 'cpu'" in capsys.readouterr().err


@pytest.mark.parametrize("info", DOT_DEFAULT, ids=[d.name.split()[0] for d in DOT_DEFAULT])
def test_a_failing_dot_path_falls_back_to_the_scalar_shaders(info, own_cache, monkeypatch):
    """A driver that computes integer dot products wrong (injected on the dot paths only) costs that path, not the
    device: device="vulkan" warns, reopens the device on the plain path (scalar shaders, integer requantization)
    and gives the C path's bits; the next device opened takes the plain path from the cached verdict, and
    $VKINFER_VK_DOT=1 still forces the dot shaders."""
    for var in ("VKINFER_VK_DOT", "VKINFER_VK_FLOAT_RQ"):
        monkeypatch.delenv(var, raising=False)
    saved = dict(_vk._open)
    first = _vk._open[info.index] = _vk.Device(info, integer_dot=True, pipeline_threads=0)
    try:
        monkeypatch.setenv("VKINFER_SELFTEST_INJECT", "dot:all")
        with pytest.warns(RuntimeWarning, match=rf"failed the self-test on its {re.escape(first_path(first))} "
                                                "shaders .*using its scalar shaders with the integer requant"):
            got = ops.qlinear_conv(**CONV, device="vulkan")
        np.testing.assert_array_equal(got, ops.qlinear_conv(**CONV, device="cpu"))
        now = _vk.get_device()
        assert not now.use_dot and not now.use_float_rq
        rec = selftest.read_record(selftest.identity_of(now))
        assert (rec["paths"][first_path(first)]["passed"], rec["paths"]["plain"]["passed"], rec["last"]) == (
            False, True, "plain")
        use, why = _vk.dot_choice(info)
        assert not use and "failed the self-test" in why
        monkeypatch.setenv("VKINFER_VK_DOT", "1")
        assert _vk.dot_choice(info)[0]
    finally:
        _vk._open.clear()
        _vk._open.update(saved)


def first_path(dev) -> str:
    return selftest.path_of(dev)


@pytest.mark.parametrize("info", RTE_DEFAULT, ids=[d.name.split()[0] for d in RTE_DEFAULT])
def test_a_failing_float_requantization_falls_back_to_the_integer_one(info, own_cache, monkeypatch):
    """Where the device guarantees float32 RTE, a wrong float requantization (injected on the +frq paths) makes
    device="vulkan" fall back to the plain path, and later devices open without the float form."""
    for var in ("VKINFER_VK_DOT", "VKINFER_VK_FLOAT_RQ"):
        monkeypatch.delenv(var, raising=False)
    saved = dict(_vk._open)
    _vk._open[info.index] = _vk.Device(info, integer_dot=False, float_rq=True, pipeline_threads=0)
    try:
        monkeypatch.setenv("VKINFER_SELFTEST_INJECT", "frq:all")
        with pytest.warns(RuntimeWarning, match="failed the self-test on its plain\\+frq shaders"):
            got = ops.qlinear_conv(**CONV, device="vulkan")
        np.testing.assert_array_equal(got, ops.qlinear_conv(**CONV, device="cpu"))
        assert not _vk.get_device().use_float_rq
        use, why = _vk.float_rq_choice(info)
        assert not use and "failed the self-test" in why
    finally:
        _vk._open.clear()
        _vk._open.update(saved)
