"""device="auto" weighs the CPU against the Vulkan devices worth it (`_auto_devices`: every GPU, else the default
Vulkan device, a CPU implementation such as lavapipe) and lets the dispatcher place each node. No usable Vulkan
leaves the CPU alone, with a warning that says why and points at the caller's line; any other error while listing
devices (a bug) propagates. The device list is cached by a fingerprint of what the Vulkan loader reads, under
$VKINFER_CACHE/calibration/, so every test that mocks vkinfer._vk points $VKINFER_CACHE at its own folder."""

import inspect
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
from support.agree import run_devices

import vkinfer
from vkinfer import _vk
from vkinfer.dispatch import calibrate as calibrate_mod
from vkinfer.dispatch import machine as machine_mod
from vkinfer.errors import VulkanUnavailableError
from vkinfer.session import _auto_devices
from vkinfer.testing import tflite_zoo

FEED = {"input": np.random.default_rng(0).uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32)}


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty $VKINFER_CACHE (so the device list is enumerated, through the mocks), and no calibration."""
    monkeypatch.setenv("VKINFER_CACHE", str(tmp_path))
    monkeypatch.delenv("VKINFER_DEVICE", raising=False)

    def refuse(device, threads=1, mode="quick", log=None):
        raise AssertionError(f"calibrated {device}: with the CPU alone there is nothing to weigh")
    monkeypatch.setattr(calibrate_mod, "calibrate_device", refuse)
    return tmp_path / "calibration"


def _devices_raising(exc):
    def devices():
        raise exc

    return devices


def test_vulkan_unavailable_falls_back_to_cpu_with_a_warning(fresh, monkeypatch):
    error = VulkanUnavailableError("no Vulkan loader: install libvulkan1")
    monkeypatch.setattr(_vk, "devices", _devices_raising(error))
    message = r"Vulkan is unavailable \(no Vulkan loader: install libvulkan1\); falling back to the CPU"
    with pytest.warns(RuntimeWarning, match=message):
        assert _auto_devices() == ["cpu"]
    with pytest.warns(RuntimeWarning, match=message) as record:
        sess = vkinfer.InferenceSession(tflite_zoo.tiny_cnn(0), device="auto")
    assert len(record) == 1
    assert sess.auto_devices == ["cpu"]
    placed = sess.placement
    assert "cpu" in placed.values() and set(placed.values()) <= {"cpu", "host"}
    assert 'device="auto" with only cpu available' in sess.explain()
    got = sess.run(None, FEED)
    monkeypatch.undo()  # the real Vulkan (and the suite's shader cache) again, for the vulkan device
    run_devices(tflite_zoo.tiny_cnn(0), FEED, want=got)  # the CPU fallback's bits are every device's


def test_the_fallback_warning_points_at_the_callers_line(fresh, monkeypatch):
    monkeypatch.setattr(_vk, "devices", _devices_raising(VulkanUnavailableError("no Vulkan loader")))
    with pytest.warns(RuntimeWarning, match="falling back to the CPU") as record:
        line = inspect.currentframe().f_lineno + 1
        vkinfer.InferenceSession(tflite_zoo.tiny_cnn(0), device="auto")
    assert (Path(record[0].filename).name, record[0].lineno) == (Path(__file__).name, line)


def test_the_reason_vulkan_is_unavailable_is_cached_with_the_device_list(fresh, monkeypatch):
    """Until something the loader reads changes, the next auto session does not pay for a Vulkan instance to
    learn the same thing; the warning repeats the reason."""
    calls = []

    def devices():
        calls.append(1)
        raise VulkanUnavailableError("no ICD found")
    monkeypatch.setattr(_vk, "devices", devices)
    for _ in range(2):
        with pytest.warns(RuntimeWarning, match=r"\(no ICD found\); falling back to the CPU"):
            assert _auto_devices() == ["cpu"]
    assert len(calls) == 1
    assert (fresh / "vulkan-devices.json").is_file()
    monkeypatch.setattr(machine_mod, "vulkan_fingerprint", lambda: "a new driver")
    with pytest.warns(RuntimeWarning, match="no ICD found"):
        _auto_devices()
    assert len(calls) == 2


@pytest.mark.parametrize("exc", [RuntimeError("a bug in device enumeration"), AttributeError("no such field")])
def test_other_errors_propagate(fresh, monkeypatch, exc):
    monkeypatch.setattr(_vk, "devices", _devices_raising(exc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no fallback warning either
        with pytest.raises(type(exc), match=str(exc)):
            _auto_devices()
        with pytest.raises(type(exc), match=str(exc)):
            vkinfer.InferenceSession(tflite_zoo.tiny_cnn(0), device="auto")
    assert not (fresh / "vulkan-devices.json").exists()  # nothing cached from a failed enumeration


def _mock_devices(monkeypatch, kinds: list[str]) -> list:
    """Vulkan devices of these types, in vkinfer's order of preference, with indices in reverse (as a driver may
    enumerate them); returns them. Counts enumerations in .calls."""
    n = len(kinds)
    infos = [types.SimpleNamespace(index=n - 1 - i, name=f"{k} device {n - 1 - i}", type=k, vendor_id=0x1000 + i,
                                   device_id=i) for i, k in enumerate(kinds)]
    calls = []

    def devices():
        calls.append(1)
        return list(infos)
    monkeypatch.setattr(_vk, "devices", devices)
    monkeypatch.setattr(machine_mod, "vulkan_identity", lambda index: {"name": f"device {index}", "driver_version": 7})
    return types.SimpleNamespace(infos=infos, calls=calls)


@pytest.mark.parametrize("kinds,env,want", [
    (["cpu"], None, [0]),                                        # lavapipe alone: weighed, from measurements
    (["cpu", "cpu"], None, [1]),                                 # lavapipe and SwiftShader: the default only
    (["cpu", "cpu"], "0", [0]),                                  # $VKINFER_DEVICE names the default
    (["discrete", "cpu"], None, [1]),                            # a GPU: the CPU implementation is not weighed
    (["discrete", "integrated", "cpu"], None, [2, 1]),           # every GPU
    (["virtual", "cpu"], None, [1]),
    (["other"], None, [0]),
    ([], None, []),
], ids=lambda v: "-".join(v) if isinstance(v, list) and v and isinstance(v[0], str) else None)
def test_candidates_by_device_type_without_warning(fresh, monkeypatch, kinds, env, want):
    mock = _mock_devices(monkeypatch, kinds)
    if env is not None:
        monkeypatch.setenv("VKINFER_DEVICE", env)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _auto_devices() == ["cpu", *(f"vulkan:{i}" for i in want)]
        first = len(mock.calls)
        assert first >= 1
        assert _auto_devices() == ["cpu", *(f"vulkan:{i}" for i in want)]  # from the cached list
        assert len(mock.calls) == first


def test_the_device_list_is_enumerated_again_when_the_loader_fingerprint_changes(fresh, monkeypatch):
    mock = _mock_devices(monkeypatch, ["cpu"])
    assert _auto_devices() == ["cpu", "vulkan:0"]
    n = len(mock.calls)
    mock.infos.insert(0, types.SimpleNamespace(index=1, name="A GPU", type="discrete", vendor_id=1, device_id=2))
    assert _auto_devices() == ["cpu", "vulkan:0"]  # same fingerprint: the cached list
    assert len(mock.calls) == n
    monkeypatch.setattr(machine_mod, "vulkan_fingerprint", lambda: "a GPU was plugged in")
    assert _auto_devices() == ["cpu", "vulkan:1"]
    assert len(mock.calls) > n


@pytest.mark.parametrize("cached", [False, True], ids=["enumerated", "cached"])
def test_this_machine(monkeypatch, tmp_path, cached):
    """The real device list, silently: every GPU, else the default Vulkan device (lavapipe here)."""
    if not cached:
        monkeypatch.setenv("VKINFER_CACHE", str(tmp_path))
    infos = _vk.devices()
    assert infos, "no Vulkan device: install mesa-vulkan-drivers (lavapipe) and libvulkan1"
    gpus = [f"vulkan:{d.index}" for d in infos if d.type in ("discrete", "integrated", "virtual")]
    want = ["cpu", *(gpus or [f"vulkan:{_vk._pick(None).index}"])]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _auto_devices() == want
