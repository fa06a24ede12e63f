"""Vulkan device loss and out-of-memory (issue 26, item 8), injected through the native module's test hook
(`vkinfer._vk.set_fault`, vkinfer/_native/vk_faults.cpp) at each hooked call: buffer allocation, queue submit,
fence wait, pipeline creation; on lavapipe, which never fails by itself.

- device="auto" (a profile that puts the model on Vulkan): the inference is rerun on the CPU with one
  RuntimeWarning naming the failed call, the answer is the reference's, and the session stays on the CPU.
- device="vulkan": a VulkanDeviceLostError / VulkanOutOfMemoryError (both vkinfer.VkInferError) naming the call,
  within seconds (a fence wait has a timeout; a real one past it is a lost device, not a hang). After an
  out-of-memory the session runs again; after a loss, a new session opens the device afresh and works.
- Nothing leaks: the native objects alive (`live_objects`) and RSS do not grow over a churn of faulted sessions,
  and under the Khronos validation layer (object tracking reports every Vulkan object a destroyed device or
  instance still owns) a run of every fault ends with zero messages once the sessions, devices and instance go.
"""

from __future__ import annotations

import functools
import gc
import os
import re
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import vkinfer
from vkinfer import _vk
from vkinfer.errors import VulkanDeviceError, VulkanDeviceLostError, VulkanOutOfMemoryError
from vkinfer.testing import tflite_zoo

POINTS = {"alloc": "vkAllocateMemory", "submit": "vkQueueSubmit", "wait": "vkWaitForFences",
          "pipeline": "vkCreateComputePipelines"}
RESULTS = {"VK_ERROR_DEVICE_LOST": (VulkanDeviceLostError, "Vulkan device lost"),
           "VK_ERROR_OUT_OF_DEVICE_MEMORY": (VulkanOutOfMemoryError, "out of Vulkan device memory"),
           "VK_ERROR_OUT_OF_HOST_MEMORY": (VulkanOutOfMemoryError, "out of host memory for Vulkan"),
           "VK_TIMEOUT": (VulkanDeviceLostError, "Vulkan device hung")}
CASES = [(p, r) for p in POINTS for r in RESULTS if r != "VK_TIMEOUT"] + [("wait", "VK_TIMEOUT")]
QUICK = 30.0  # seconds: a fault is reported at once; the fence timeout (default 120 s) is far above


@functools.cache
def model() -> bytes:
    return tflite_zoo.tiny_cnn(0)


FEED = {"input": np.random.default_rng(3).uniform(-1, 1, (1, 16, 16, 3)).astype(np.float32)}


@functools.cache
def reference() -> tuple[np.ndarray, ...]:
    return tuple(vkinfer.InferenceSession(model(), device="reference").run(None, FEED))


def assert_reference(got: list[np.ndarray]) -> None:
    want = reference()
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def expected(point: str, result: str) -> str:
    """The error's message: the kind of failure and the call (a loss at pipeline creation, on a worker thread, may
    first be seen by the next call on the device)."""
    call = POINTS[point] + ("|lost earlier" if point == "pipeline" and result == "VK_ERROR_DEVICE_LOST" else "")
    return rf"{RESULTS[result][1]}.*({call})|({call}).*{RESULTS[result][1]}|{RESULTS[result][1]} earlier"


@functools.cache
def fast_vulkan_profile():
    """A calibration profile of this machine's devices in which Vulkan is 1000x faster than the CPU with a free
    submit, so that device="auto" puts the model there (lavapipe's real numbers keep it on the CPU)."""
    from vkinfer.dispatch.costs import CLASSES
    from vkinfer.dispatch.machine import auto_candidates, vulkan_devices
    from vkinfer.dispatch.profile import ClassModel, DeviceProfile, Link, Profile, cpu_identity

    gpu = auto_candidates(vulkan_devices())[0]
    slow = {c: ClassModel(2_000.0, 2.0, 0.5) for c in CLASSES}
    fast = {c: ClassModel(2.0, 0.002, 0.0005) for c in CLASSES}
    cpu = DeviceProfile("cpu", "cpu", 1, dict(cpu_identity()), 2_000.0, Link(300.0, 0.05), Link(300.0, 0.05),
                        (1, 1), 1.1, slow)
    vk = DeviceProfile(gpu["device"], "vulkan", 1, dict(gpu["identity"]), 1.0, Link(1.0, 0.0001),
                       Link(1.0, 0.0001), (1, 1), 1.1, fast)
    return Profile([cpu, vk])


@pytest.fixture(scope="module", autouse=True)
def own_devices():
    """This module's own Vulkan devices (a lost one never reaches another module's tests), closed at its end."""
    saved = dict(_vk._open)
    _vk._open.clear()
    yield
    _vk.clear_faults()
    _vk._open.clear()
    _vk._open.update(saved)
    gc.collect()


@pytest.fixture
def faults():
    """Earlier sessions gone (so that this test's pipelines are created, and can fail); every fault disarmed
    after the test."""
    gc.collect()
    yield _vk
    _vk.clear_faults()
    gc.collect()


def auto_session() -> vkinfer.InferenceSession:
    return vkinfer.InferenceSession(model(), device="auto", profile=fast_vulkan_profile(), threads=1)


def fault_warnings(record) -> list[str]:
    """The RuntimeWarnings of `record` (HostNodeWarning, a subclass about placement, aside)."""
    return [str(w.message) for w in record if w.category is RuntimeWarning]


def test_the_auto_profile_puts_the_model_on_vulkan(faults):
    """The control for the auto tests: without a fault, the dispatcher puts the model's work on Vulkan."""
    sess = auto_session()
    assert any(v.startswith("vulkan") for v in sess.placement.values()), sess.explain()
    assert_reference(sess.run(None, FEED))


@pytest.mark.parametrize("point,result", CASES)
def test_auto_reruns_on_the_cpu_with_one_warning(faults, point, result):
    faults.set_fault(point, result)
    t0 = time.monotonic()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        sess = auto_session()
        got = sess.run(None, FEED)
    assert time.monotonic() - t0 < QUICK
    said = fault_warnings(record)
    assert len(said) == 1, said
    assert re.search(expected(point, result), said[0]) and "runs on the CPU from now on" in said[0], said[0]
    assert_reference(got)
    assert set(sess.placement.values()) <= {"cpu", "host"}, sess.placement  # the session stays on the CPU
    assert sess.auto_devices == ["cpu"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no second warning
        assert_reference(sess.run(None, FEED))


@pytest.mark.parametrize("result", ["VK_ERROR_DEVICE_LOST", "VK_ERROR_OUT_OF_DEVICE_MEMORY"])
def test_auto_fault_at_a_later_run_reruns_that_run_on_the_cpu(faults, result):
    sess = auto_session()
    assert_reference(sess.run(None, FEED))  # on Vulkan
    assert any(v.startswith("vulkan") for v in sess.placement.values())
    faults.set_fault("submit", result, after=1)
    assert_reference(sess.run(None, FEED))  # still on Vulkan
    with pytest.warns(RuntimeWarning, match=expected("submit", result)) as record:
        assert_reference(sess.run(None, FEED))
    assert len(fault_warnings(record)) == 1
    assert set(sess.placement.values()) <= {"cpu", "host"}


@pytest.mark.parametrize("point,result", CASES)
def test_vulkan_raises_a_clear_error_then_a_new_session_works(faults, point, result):
    cls = RESULTS[result][0]
    faults.set_fault(point, result)
    t0 = time.monotonic()
    with pytest.raises(cls, match=expected(point, result)) as e:
        sess = vkinfer.InferenceSession(model(), device="vulkan")
        sess.run(None, FEED)
    assert time.monotonic() - t0 < QUICK  # no hang
    assert isinstance(e.value, vkinfer.VkInferError) and isinstance(e.value, VulkanDeviceError)
    lost_devices = [d for d in _vk._open.values() if d.lost]
    assert bool(lost_devices) == (cls is VulkanDeviceLostError)
    old = dict(_vk._open)
    del e
    faults.clear_faults()
    sess = vkinfer.InferenceSession(model(), device="vulkan")  # on a fresh device after a loss
    assert_reference(sess.run(None, FEED))
    if cls is VulkanDeviceLostError:
        assert all(_vk._open[i] is not d for i, d in old.items()) and not any(d.lost for d in _vk._open.values())


@pytest.mark.parametrize("result", ["VK_ERROR_DEVICE_LOST", "VK_ERROR_OUT_OF_DEVICE_MEMORY",
                                    "VK_ERROR_OUT_OF_HOST_MEMORY"])
def test_vulkan_session_after_a_fault_at_a_later_run(faults, result):
    """Out of memory is transient: the same session's next run works. A loss is permanent: every later run of the
    session raises it at once (no submit), and a new session works on a fresh device."""
    cls = RESULTS[result][0]
    sess = vkinfer.InferenceSession(model(), device="vulkan")
    assert_reference(sess.run(None, FEED))
    faults.set_fault("wait", result)
    with pytest.raises(cls, match=expected("wait", result)):
        sess.run(None, FEED)
    if cls is VulkanOutOfMemoryError:
        assert_reference(sess.run(None, FEED))
    else:
        with pytest.raises(VulkanDeviceLostError, match="lost earlier"):
            sess.run(None, FEED)
        assert_reference(vkinfer.InferenceSession(model(), device="vulkan").run(None, FEED))


def test_a_submit_past_the_fence_timeout_is_a_lost_device_not_a_hang(faults):
    """A real timeout (no injection): a fence wait of 1 us, which lavapipe's run cannot meet, reports the device
    hung and lost; closing the session waits for the work still in flight before destroying its objects. On a
    loaded machine the waiting thread can be descheduled until the run is done (the fence then signalled: the run
    is right), so up to 5 tries (it failed 2 of 4 times in one loaded helper's runs)."""
    native = _vk._native()
    for _ in range(5):
        sess = vkinfer.InferenceSession(model(), device="vulkan")
        assert_reference(sess.run(None, FEED))
        native.set_fence_timeout(1e-6)
        try:
            got = sess.run(None, FEED)
        except VulkanDeviceLostError as e:
            assert "hung: vkWaitForFences did not finish within 1e-06 s" in str(e), e
            break
        finally:
            native.set_fence_timeout(float(os.environ.get("VKINFER_FENCE_TIMEOUT_S") or 120))
            del sess
            gc.collect()
        assert_reference(got)  # the fence was met in time: the outputs are right, and it is tried again
    else:
        pytest.fail("every run met a fence wait of 1 us")
    assert_reference(vkinfer.InferenceSession(model(), device="vulkan").run(None, FEED))


def test_set_fault_refuses_unknown_points_and_results():
    with pytest.raises(ValueError, match="point must be alloc, submit, wait or pipeline"):
        _vk.set_fault("memcpy", "VK_ERROR_DEVICE_LOST")
    with pytest.raises(ValueError, match="result must be"):
        _vk.set_fault("submit", "VK_SUCCESS")
    with pytest.raises(ValueError, match="VK_TIMEOUT is a fence wait's result only"):
        _vk.set_fault("alloc", "VK_TIMEOUT")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _churn() -> None:
    """Faulted and clean vulkan sessions, created and dropped in turn (this file run as a script: a process of its
    own, so its RSS is this loop's alone): prints the native objects alive and the RSS after each round."""
    import json

    base = _vk.live_objects()
    live, rss = [], []
    for i in range(12):
        point, result = CASES[i % len(CASES)]
        _vk.set_fault(point, result)
        try:
            vkinfer.InferenceSession(model(), device="vulkan").run(None, FEED)
            raise AssertionError(f"{point} {result}: no VulkanDeviceError")
        except VulkanDeviceError:
            pass
        _vk.clear_faults()
        assert_reference(vkinfer.InferenceSession(model(), device="vulkan").run(None, FEED))
        gc.collect()
        live.append(_vk.live_objects())
        rss.append(_rss())
    print("CHURN " + json.dumps({"base": base, "live": live, "rss": rss}))


def test_session_churn_after_faults_grows_nothing():
    """Faulted and clean vulkan sessions, created and dropped in turn: the native objects alive come back to the
    counts before the loop (at most this module's device more) and RSS stays flat. In a process of its own: in a
    full-suite worker (800-900 MB of other tests' heap) its RSS drifted 8 MB a round (one `make test` on 2026-11-27)."""
    import json

    env = dict(os.environ)
    env.pop("VKINFER_VK_FAULT", None)
    r = subprocess.run([sys.executable, __file__, "churn"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    got = json.loads(r.stdout.split("CHURN ", 1)[1])
    base, live, rss = got["base"], got["live"], got["rss"]
    assert all(x == live[-1] for x in live), (base, live)
    assert {**live[-1], "devices": 0} == {**base, "devices": 0}, (base, live)
    assert base["devices"] <= live[-1]["devices"] <= base["devices"] + 1, (base, live)
    # RSS swings by 30 MB within a cycle (a lost device's replacement opened before the old one goes: 150-185 MB
    # over 24 rounds, no trend): the last third's peak is compared with the middle third's; the counts are exact.
    assert max(rss[8:]) - max(rss[4:8]) < 16 << 20, [r >> 20 for r in rss]


def _validated(mode: str, tmp_path: Path) -> tuple[str, list[str]]:
    """This file run as a script in `mode` under the validation layer: (its output, the validation errors)."""
    settings = tmp_path / "vk_layer_settings.txt"
    settings.write_text("khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG\n"
                        "khronos_validation.log_filename = stdout\n")
    env = dict(os.environ, VK_INSTANCE_LAYERS="VK_LAYER_KHRONOS_validation", VK_LAYER_SETTINGS_PATH=str(settings),
               VK_LOADER_DEBUG="layer")
    env.pop("VKINFER_VK_FAULT", None)
    r = subprocess.run([sys.executable, __file__, mode], env=env, capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "VK_LAYER_KHRONOS_validation" in r.stderr, r.stderr[-2000:]  # the loader put the layer in
    return out, [line for line in out.splitlines() if "Validation Error" in line or "OBJ ERROR" in line]


def test_every_fault_under_validation_leaves_no_object_and_no_message(tmp_path):
    """Object tracking: a device destroyed with a buffer, pipeline, descriptor pool, command pool, fence or query
    pool still alive, or an instance destroyed with a device alive, is a validation error."""
    out, errors = _validated("faults", tmp_path)
    assert f"RESULT faults {len(CASES)}/{len(CASES)} clean 1 closed" in out, out[-3000:]
    assert not errors, out[:3000]


def test_negative_control_a_leaked_fence_is_reported(tmp_path):
    """The same layer settings catch a leak: a device destroyed with a fence still alive (plain Vulkan calls)."""
    out, errors = _validated("leak", tmp_path)
    assert "RESULT leaked a fence" in out, out[-3000:]
    assert any("VUID-vkDestroyDevice-device" in line and "OBJ ERROR" in line and "VkFence" in line
               for line in errors), out[:3000]


def _validated_faults() -> None:
    """Every fault on device="vulkan", then a clean session; then every session, device and the instance closed."""
    caught = 0
    for point, result in CASES:
        _vk.set_fault(point, result)
        try:
            vkinfer.InferenceSession(model(), device="vulkan").run(None, FEED)
        except RESULTS[result][0]:
            caught += 1
        _vk.clear_faults()
        gc.collect()
    got = vkinfer.InferenceSession(model(), device="vulkan").run(None, FEED)
    cpu = vkinfer.InferenceSession(model(), device="cpu").run(None, FEED)
    clean = all(np.array_equal(a, b) for a, b in zip(got, cpu, strict=True))
    del got
    _vk._open.clear()
    gc.collect()
    devices_gone = not list(_vk._ALL_DEVICES)
    _vk._instance.cache_clear()  # vkDestroyInstance: object tracking reports any device still alive
    gc.collect()
    closed = devices_gone and _vk.live_objects() == dict.fromkeys(
        ("devices", "buffers", "programs", "pipelines", "sequences"), 0)
    print(f"RESULT faults {caught}/{len(CASES)} clean {int(clean)} {'closed' if closed else 'open'} "
          f"{_vk.live_objects()}", flush=True)


def _leaked_fence() -> None:
    """vkCreateInstance, vkCreateDevice, vkCreateFence, then vkDestroyDevice with the fence alive (through ctypes:
    vkinfer's own objects cannot outlive their device)."""
    import ctypes as C

    vk = C.CDLL("libvulkan.so.1")
    p, u32 = C.c_void_p, C.c_uint32

    class Info(C.Structure):  # VkInstanceCreateInfo
        _fields_ = [("sType", u32), ("pNext", p), ("flags", u32), ("app", p), ("nl", u32), ("layers", p),
                    ("ne", u32), ("exts", p)]

    class QueueInfo(C.Structure):  # VkDeviceQueueCreateInfo
        _fields_ = [("sType", u32), ("pNext", p), ("flags", u32), ("family", u32), ("count", u32),
                    ("prio", C.POINTER(C.c_float))]

    class DeviceInfo(C.Structure):  # VkDeviceCreateInfo
        _fields_ = [("sType", u32), ("pNext", p), ("flags", u32), ("nq", u32), ("queues", C.POINTER(QueueInfo)),
                    ("nl", u32), ("layers", p), ("ne", u32), ("exts", p), ("features", p)]

    class FenceInfo(C.Structure):  # VkFenceCreateInfo
        _fields_ = [("sType", u32), ("pNext", p), ("flags", u32)]

    inst, dev, fence, n = p(), p(), C.c_uint64(), u32(1)
    assert vk.vkCreateInstance(C.byref(Info(1)), None, C.byref(inst)) == 0
    pd = p()
    assert vk.vkEnumeratePhysicalDevices(inst, C.byref(n), C.byref(pd)) in (0, 5)  # VK_INCOMPLETE: more than one
    prio = C.c_float(1.0)
    q = QueueInfo(2, None, 0, 0, 1, C.pointer(prio))
    assert vk.vkCreateDevice(pd, C.byref(DeviceInfo(3, None, 0, 1, C.pointer(q))), None, C.byref(dev)) == 0
    assert vk.vkCreateFence(dev, C.byref(FenceInfo(8)), None, C.byref(fence)) == 0
    vk.vkDestroyDevice(dev, None)
    vk.vkDestroyInstance(inst, None)
    print("RESULT leaked a fence", flush=True)


if __name__ == "__main__":
    if sys.argv[1:] == ["churn"]:
        _churn()
    else:
        _leaked_fence() if sys.argv[1:] == ["leak"] else _validated_faults()
