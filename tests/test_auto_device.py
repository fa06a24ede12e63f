"""device="auto": Vulkan when a non-CPU Vulkan device exists, else the CPU; no usable Vulkan falls back to the CPU
with a warning that says why, and any other error while listing devices (a bug) propagates."""

import types
import warnings

import pytest

import vkinfer
from vkinfer import _vk
from vkinfer.errors import VulkanUnavailableError
from vkinfer.model.session import _pick_auto
from vkinfer.models import tflite_zoo


def _devices_raising(exc):
    def devices():
        raise exc

    return devices


def test_vulkan_unavailable_falls_back_to_cpu_with_a_warning(monkeypatch):
    error = VulkanUnavailableError("no Vulkan loader: install libvulkan1")
    monkeypatch.setattr(_vk, "devices", _devices_raising(error))
    with pytest.warns(RuntimeWarning, match=r"Vulkan is unavailable \(no Vulkan loader: install libvulkan1\); "
                                            r"falling back to the CPU"):
        assert _pick_auto() == "cpu"
    with pytest.warns(RuntimeWarning, match="falling back to the CPU") as record:
        sess = vkinfer.InferenceSession(tflite_zoo.tiny_cnn(0), device="auto")
    assert sess.device == "cpu"
    assert record[0].filename == __file__  # the warning points at the caller's line


@pytest.mark.parametrize("exc", [RuntimeError("a bug in device enumeration"), AttributeError("no such field")])
def test_other_errors_propagate(monkeypatch, exc):
    monkeypatch.setattr(_vk, "devices", _devices_raising(exc))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no fallback warning either
        with pytest.raises(type(exc), match=str(exc)):
            _pick_auto()
        with pytest.raises(type(exc), match=str(exc)):
            vkinfer.InferenceSession(tflite_zoo.tiny_cnn(0), device="auto")


@pytest.mark.parametrize("kinds,want", [(["cpu"], "cpu"), ([], "cpu"), (["cpu", "discrete"], "vulkan"),
                                        (["integrated"], "vulkan"), (["virtual", "cpu"], "vulkan"),
                                        (["other"], "cpu")])
def test_choice_by_device_type_without_warning(monkeypatch, kinds, want):
    monkeypatch.setattr(_vk, "devices", lambda: [types.SimpleNamespace(type=k) for k in kinds])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _pick_auto() == want


def test_this_machine():
    """The real device list (lavapipe here: a CPU implementation, so "cpu"), silently."""
    want = "vulkan" if any(d.type in ("discrete", "integrated", "virtual") for d in _vk.devices()) else "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _pick_auto() == want
