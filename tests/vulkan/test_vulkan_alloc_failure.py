"""A Vulkan buffer allocation that really fails (issue 26, items 1 and 8): out of address space under RLIMIT_AS.

Kompute's kp::Tensor drops the results of vkCreateBuffer and vkAllocateMemory and binds the null handle, and
lavapipe then dies in vkBindBufferMemory (SIGSEGV: a 256 MiB buffer with 100 MiB of address space left). The
native module now makes and checks each of those allocations itself first (vkinfer/_native/vk_device.cpp,
try_buffers), so the failure is a VulkanOutOfMemoryError naming the call; device="auto" reruns on the CPU with one
warning. Unlike tests/vulkan/test_device_faults.py (injected results), the driver's own allocation fails here.

Every case runs in a child process (a crash there is a negative return code, not a dead pytest worker), this file
run as a script. The limit is set just before the Vulkan allocation (RLIMIT_AS = the process's current size plus
part of the request) and lifted right after, so that the model's host work and the CPU's rerun keep the memory
they need on every machine: only the Vulkan allocations see the limit, as they would in a process near its limit.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np

MIB = 1 << 20
BIG = 32 * MIB  # the limited buffers: glibc's malloc maps any block this large afresh (its mmap threshold's maximum)


def _child(mode: str, tmp_path: Path | None = None, validate: bool = False) -> tuple[int, str]:
    env = dict(os.environ)
    env.pop("VKINFER_VK_FAULT", None)
    if validate:
        settings = tmp_path / "vk_layer_settings.txt"
        settings.write_text("khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG\n"
                            "khronos_validation.log_filename = stdout\n")
        env.update(VK_INSTANCE_LAYERS="VK_LAYER_KHRONOS_validation", VK_LAYER_SETTINGS_PATH=str(settings),
                   VK_LOADER_DEBUG="layer")
    r = subprocess.run([sys.executable, __file__, mode], env=env, capture_output=True, text=True, timeout=240)
    return r.returncode, r.stdout + r.stderr


def test_a_buffer_past_the_address_space_is_a_clean_error():
    """Each buffer kind, with room for part of it: VulkanOutOfMemoryError naming the allocation that failed (was:
    SIGSEGV for every kind once the zeros Kompute copies from fitted), and the device still works after."""
    rc, out = _child("buffers")
    assert rc == 0, out[-3000:]  # a signal is a negative code
    got = re.findall(r"RESULT (\S+) (\S+) (\S+) (.*)", out)
    assert len(got) == 5, out[-3000:]
    for kind, room, name, msg in got:
        if name == "none" and not _host_memory(out):  # a GPU's own memory is outside the process's address space
            continue
        assert name == "VulkanOutOfMemoryError", (kind, room, msg)
        if room == "1.5":  # the zeros fit: the driver's allocation is what fails
            assert re.search(r"out of (Vulkan device|host) memory.*vkAllocateMemory \(a buffer of 33554432 bytes\) "
                             r"returned VK_ERROR_OUT_OF_(DEVICE|HOST)_MEMORY", msg), msg
        elif kind == "device":  # no zeros for a device-only buffer
            assert "vkAllocateMemory (a buffer of 33554432 bytes)" in msg, msg
        else:
            assert "out of host memory for Vulkan: the initial contents (a buffer of 33554432 bytes)" in msg, msg
    assert "AFTER ok 3" in out, out[-3000:]


def test_sessions_when_vulkan_allocation_fails(tmp_path):
    """device="vulkan": VulkanOutOfMemoryError; device="auto" (a profile that puts the model on Vulkan): one
    RuntimeWarning, the CPU's bits, the session on the CPU; the limit lifted, a vulkan session gives the same bits.
    Under the Khronos validation layer with object tracking, and then every session, device and the instance
    closed: no validation message (the trial allocations leave nothing behind)."""
    rc, out = _child("sessions", tmp_path, validate=True)
    assert rc == 0, out[-3000:]
    assert "VK_LAYER_KHRONOS_validation" in out, out[-2000:]  # the loader put the layer in
    if _host_memory(out) or "RESULT vulkan none ran" not in out:
        assert re.search(r"RESULT vulkan VulkanOutOfMemoryError out of (Vulkan device|host) memory.*"
                         r"vkAllocateMemory \(a buffer of \d+ bytes\)", out), out[-3000:]
        assert "RESULT auto warnings 1 equal 1 cpu 1 outputs 1" in out, out[-3000:]
        assert re.search(r"RESULT auto-warning .*out of (Vulkan device|host) memory.*runs on the CPU from now on",
                         out), out[-3000:]
    else:  # a GPU whose device-local allocations do not take the process's address space: the answer is right
        assert "RESULT auto warnings 0 equal 1" in out, out[-3000:]
    assert "RESULT lifted equal 1" in out, out[-3000:]
    assert "RESULT closed" in out, out[-3000:]
    errors = [line for line in out.splitlines() if "Validation Error" in line or "OBJ ERROR" in line]
    assert not errors, "\n".join(errors[:20])


def _host_memory(out: str) -> bool:
    """Whether the child's device keeps its memory in the process (lavapipe, SwiftShader: type cpu), so that every
    allocation counts against RLIMIT_AS."""
    m = re.search(r"DEVICE (\S+)", out)
    assert m, out[-3000:]
    return m.group(1) == "cpu"


# --- the children ---------------------------------------------------------------------------------------------


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize:"))


class _Room:
    """RLIMIT_AS at the current size plus `room` bytes while inside; the old limit restored after."""

    def __init__(self, room: int):
        self.room = room

    def __enter__(self):
        self.old = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (_vm_size() + self.room, self.old[1]))

    def __exit__(self, *exc):
        resource.setrlimit(resource.RLIMIT_AS, self.old)


def _buffers() -> None:
    from vkinfer import _vk

    dev = _vk.get_device()
    print(f"DEVICE {dev.info.type}", flush=True)
    cases = [("device", 0.5), ("direct", 0.5), ("direct", 1.5), ("staged", 0.5), ("staged", 1.5)]
    for kind, room in cases:
        try:
            with _Room(int(room * BIG)):
                dev.raw.buffer(BIG, kind)
            print(f"RESULT {kind} {room} none allocated", flush=True)
        except Exception as e:  # noqa: BLE001 - the parent checks the class
            print(f"RESULT {kind} {room} {type(e).__name__} {e}", flush=True)
    ok = 0
    for kind in ("device", "direct", "staged"):
        b = dev.raw.buffer(BIG, kind)
        ok += b is not None
        del b
    print(f"AFTER ok {ok}", flush=True)


def _model() -> bytes:
    """uint8 [1, 32, 1024, 1024] -> QLinearConv 1x1 to 4 channels: a 32 MiB input buffer (BIG), a 4 MiB output."""
    from onnx import TensorProto, helper, numpy_helper

    c, hw = 32, 1024
    init = {"s": np.float32(0.05), "z": np.uint8(128), "ws": np.float32(0.01), "wz": np.int8(0),
            "w": np.random.default_rng(0).integers(-8, 9, (4, c, 1, 1), dtype=np.int8)}
    node = helper.make_node("QLinearConv", ["x", "s", "z", "w", "ws", "wz", "s", "z"], ["y"], "conv")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 4, hw, hw])],
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in init.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


def _sessions() -> None:
    import gc
    import warnings

    import vkinfer
    from vkinfer import _vk

    sys.path.insert(0, str(Path(__file__).parent))
    from test_device_faults import fast_vulkan_profile

    print(f"DEVICE {_vk.get_device().info.type}", flush=True)
    blob = _model()
    feed = {"x": np.random.default_rng(1).integers(0, 256, (1, 32, 1024, 1024), dtype=np.uint8)}
    want = vkinfer.InferenceSession(blob, device="cpu").run(None, feed)
    plain = _vk.Device.buffer

    def limited(self, nbytes: int, staged: bool = True):
        """The Vulkan allocation of a big buffer with room for half of it (device-only memory) or 1.5 times it
        (host-visible memory: Kompute's zeros fit, the allocation does not)."""
        if nbytes < BIG:
            return plain(self, nbytes, staged)
        with _Room(int(nbytes * (1.5 if staged and self.zero_copy else 0.5))):
            return plain(self, nbytes, staged)

    _vk.Device.buffer = limited
    try:
        vkinfer.InferenceSession(blob, device="vulkan").run(None, feed)
        print("RESULT vulkan none ran", flush=True)
    except Exception as e:  # noqa: BLE001 - the parent checks the class
        print(f"RESULT vulkan {type(e).__name__} {e}", flush=True)
    gc.collect()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        sess = vkinfer.InferenceSession(blob, device="auto", profile=fast_vulkan_profile(), threads=1)
        got = sess.run(None, feed)
        again = sess.run(None, feed)
    said = [str(w.message) for w in record if w.category is RuntimeWarning]
    equal = all(np.array_equal(a, b) for a, b in zip(got + again, want + want, strict=True))
    on_cpu = set(sess.placement.values()) <= {"cpu", "host"} and sess.auto_devices == ["cpu"]
    print(f"RESULT auto warnings {len(said)} equal {int(equal)} cpu {int(on_cpu)} outputs {len(again)}", flush=True)
    print(f"RESULT auto-warning {said[0] if said else ''}", flush=True)
    del sess, got, again
    _vk.Device.buffer = plain
    got = vkinfer.InferenceSession(blob, device="vulkan").run(None, feed)
    print(f"RESULT lifted equal {int(all(np.array_equal(a, b) for a, b in zip(got, want, strict=True)))}", flush=True)
    del got
    _vk._open.clear()
    gc.collect()
    _vk._instance.cache_clear()  # vkDestroyInstance: object tracking reports any object still alive
    gc.collect()
    if not list(_vk._ALL_DEVICES) and not any(_vk.live_objects().values()):
        print("RESULT closed", flush=True)
    else:
        print(f"RESULT open {_vk.live_objects()}", flush=True)


if __name__ == "__main__":
    _buffers() if sys.argv[1:] == ["buffers"] else _sessions()
