"""The Vulkan runtime under the plan runner (vkinfer/_vk.py over vkinfer/_native/vk_*.cpp): the pipeline cache
file (written, reloaded by a fresh process, and every bad file ignored with a RuntimeWarning, then replaced),
native packing equal to the numpy reference (vkinfer/layout.py, whose parameters it takes) on odd shapes,
zero-copy buffers on unified memory equal to staged ones, shared pipelines, device timestamps, and all of it clean
under the Khronos validation layer with synchronization validation. Run as a script, this file is the validated
workload."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import vkinfer
from vkinfer import _vk
from vkinfer.layout import from_packed, packed_words, rows_to_packed, to_packed

TESTS = Path(__file__).resolve().parents[1]  # holds the support package


def _devices() -> list[vkinfer.DeviceInfo]:
    try:
        return vkinfer.devices()
    except vkinfer.VulkanUnavailableError:
        return []


DEVICES = _devices()
if not DEVICES:  # `make test` installs lavapipe; without a device this file fails rather than passing empty
    raise RuntimeError("no Vulkan device: install mesa-vulkan-drivers (lavapipe) and libvulkan1")
DEVICE_IDS = [d.name.split()[0].lower() for d in DEVICES]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch) -> Path:
    """A private cache folder ($VKINFER_CACHE) for this test and its subprocesses."""
    monkeypatch.setenv("VKINFER_CACHE", str(tmp_path))
    monkeypatch.delenv("VKINFER_PIPELINE_CACHE", raising=False)
    return tmp_path


def _conv_runner(dev: _vk.Device, spec):
    """One convolution the way the plan runner records a segment: native packing in and out of planned
    buffers, one sequence (barrier, upload, barrier, dispatch, barrier, download, barrier)."""
    from vkinfer.vulkan import QLinearConv

    op = QLinearConv(spec, dev)
    xb, yb = dev.buffer(4 * op.in_words), dev.buffer(4 * op.out_words)
    prog = op.bind(xb, yb)
    seq = dev.sequence()
    seq.barrier()
    seq.upload(xb)
    seq.barrier()
    seq.dispatch(prog)
    seq.barrier()
    seq.download(yb)
    seq.barrier()

    def run(x: np.ndarray, timed: bool = False):
        with dev.lock:
            xb.write_nchw(x)
            ns = seq.run(timed=timed)
            return yb.read_nchw(op.out_shape, op.spec.out.dtype), ns
    return run, prog


def _conv_specs():
    from support.chain_cases import chain_specs

    return chain_specs(4, seed=3)


def _reference(spec, x):
    import dataclasses

    from vkinfer.reference import qlinear_conv

    return qlinear_conv(dataclasses.replace(spec, x=x))


# --- pipeline cache ------------------------------------------------------------------------------------------

_CHILD = """
import json, sys, time
sys.path.insert(0, {here!r})
from support.chain_cases import chain_specs
from vkinfer import _vk
from vkinfer.vulkan import Chain
t0 = time.perf_counter()
dev = _vk.Device(_vk._pick(None))
Chain(chain_specs(6, seed=1), dev)
dev.wait_pipelines()
ms = 1e3 * (time.perf_counter() - t0)
print(json.dumps(dict(status=dev.pipeline_cache_status, path=str(dev.pipeline_cache_path), ms=ms, **dev.stats)))
"""  # no explicit save: the first process's file is written at interpreter exit


def _child() -> dict:
    r = subprocess.run([sys.executable, "-c", _CHILD.format(here=str(TESTS))], capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, PYTHONWARNINGS="error::RuntimeWarning"))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_pipeline_cache_written_at_exit_and_loaded_by_a_fresh_process(cache_dir):
    first = _child()
    assert first["status"] == "missing" and first["pipelines_created"] > 0
    path = Path(first["path"])
    assert path.parent == cache_dir / "pipelines" and path.is_file()
    second = _child()
    # Accepted: validated and handed to vkCreatePipelineCache. lavapipe 22.3 and SwiftShader keep no pipelines
    # in it (header only), so the time is not asserted; drivers with a real cache skip their compiler here.
    assert second["status"] == "loaded" and second["pipeline_cache_initial_bytes"] > 0, second
    assert second["pipeline_cache_initial_bytes"] == len(path.read_bytes()) - _vk._PC_HEADER.size


def _mutations(ident: dict) -> dict:
    """Bad files made from a good one (bytes -> bytes), each with the reason the loader must name."""
    h = _vk._PC_HEADER.size

    def foreign_driver(b: bytes) -> bytes:
        fields = list(_vk._PC_HEADER.unpack_from(b))
        fields[4] ^= 1  # driverVersion
        return _vk._PC_HEADER.pack(*fields) + b[h:]

    def foreign_vk_uuid(b: bytes) -> bytes:
        # Our header is right and the checksum matches, but the driver's own header names another device.
        payload = bytearray(b[h:])
        payload[16] ^= 0xFF  # first byte of pipelineCacheUUID in VkPipelineCacheHeaderVersionOne
        return _vk._pack_pipeline_cache(ident, bytes(payload))

    def other_vkinfer(b: bytes) -> bytes:
        fields = list(_vk._PC_HEADER.unpack_from(b))
        fields[1] = b"0.0.0-other"
        return _vk._PC_HEADER.pack(*fields) + b[h:]

    return {
        "corrupt": (lambda b: b[:-1] + bytes([b[-1] ^ 0x5A]), "checksum"),
        "truncated": (lambda b: b[:-7], "truncated"),
        "truncated-header": (lambda b: b[:40], "truncated"),
        "empty": (lambda b: b"", "truncated"),
        "bad-magic": (lambda b: b"NOTVKIPL" + b[8:], "magic"),
        "foreign-driver": (foreign_driver, "driverVersion"),
        "foreign-vk-header": (foreign_vk_uuid, "pipelineCacheUUID"),
        "other-vkinfer": (other_vkinfer, "0.0.0-other"),
    }


BAD = list(_mutations({}))


@pytest.mark.parametrize("kind", BAD)
def test_bad_pipeline_cache_file_is_ignored_with_a_warning_then_replaced(kind, cache_dir):
    info = _vk._pick(None)
    dev = _vk.Device(info, pipeline_threads=0)
    run, _ = _conv_runner(dev, _conv_specs()[0])
    path = dev.save_pipeline_cache()
    assert path is not None and path.is_file()
    good = path.read_bytes()
    mutate, why = _mutations(dev.identity)[kind]
    path.write_bytes(mutate(good))
    with pytest.warns(RuntimeWarning, match="ignoring pipeline cache") as rec:
        bad = _vk.Device(info, pipeline_threads=0)
    msg = str(rec[0].message)
    assert str(path) in msg and why in msg, msg
    assert bad.pipeline_cache_status.startswith("rejected") and why in bad.pipeline_cache_status
    assert bad.stats["pipeline_cache_initial_bytes"] == 0  # never handed to the driver
    # The device works, and its first save replaces the bad file with a good one.
    spec = _conv_specs()[0]
    run, _ = _conv_runner(bad, spec)
    x = np.random.default_rng(0).integers(0, 256, spec.x.shape, dtype=np.uint8)
    np.testing.assert_array_equal(run(x)[0], _reference(spec, x))
    assert bad.save_pipeline_cache() == path
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = _vk.Device(info, pipeline_threads=0)
    assert again.pipeline_cache_status == "loaded"
    assert again.save_pipeline_cache() is None  # unchanged: not rewritten


def test_pipeline_cache_checks_without_a_device():
    ident = dict(vendor_id=0x10DE, device_id=0x2330, driver_version=7, pipeline_cache_uuid=bytes(range(16)),
                 device_uuid=b"d" * 16, driver_uuid=b"r" * 16)
    payload = _vk._VK_PC_HEADER.pack(32, 1, 0x10DE, 0x2330, bytes(range(16))) + b"pipelines"
    blob = _vk._pack_pipeline_cache(ident, payload)
    assert _vk._check_pipeline_cache(blob, ident) == (payload, "")
    for name, (mutate, why) in _mutations(ident).items():
        got, reason = _vk._check_pipeline_cache(mutate(blob), ident)
        assert got is None and why in reason, (name, reason)
    for field, value in [("device_id", 1), ("device_uuid", b"x" * 16), ("driver_uuid", b"y" * 16)]:
        got, reason = _vk._check_pipeline_cache(blob, dict(ident, **{field: value}))
        assert got is None and "another device or driver" in reason
    for bad_vk, why in [(_vk._VK_PC_HEADER.pack(16, 1, 0x10DE, 0x2330, bytes(range(16))), "length"),
                        (_vk._VK_PC_HEADER.pack(4096, 1, 0x10DE, 0x2330, bytes(range(16))), "length"),
                        (_vk._VK_PC_HEADER.pack(32, 2, 0x10DE, 0x2330, bytes(range(16))), "version"),
                        (_vk._VK_PC_HEADER.pack(32, 1, 0x1002, 0x2330, bytes(range(16))), "vendorID"),
                        (_vk._VK_PC_HEADER.pack(32, 1, 0x10DE, 0x2331, bytes(range(16))), "deviceID")]:
        got, reason = _vk._check_pipeline_cache(_vk._pack_pipeline_cache(ident, bad_vk), ident)
        assert got is None and why in reason, reason
    # SwiftShader echoes the initial data after its own header: that is no change worth a write.
    assert _vk._echoes(payload[:32] + payload, payload) and not _vk._echoes(payload + b"x", payload)


def test_unwritable_pipeline_cache_warns_once_and_the_device_works(cache_dir):
    (cache_dir / "pipelines").write_text("a file where the cache folder would go")  # root ignores chmod
    with pytest.warns(RuntimeWarning, match="unreadable"):
        dev = _vk.Device(_vk._pick(None), pipeline_threads=0)
    spec = _conv_specs()[0]
    run, _ = _conv_runner(dev, spec)
    with pytest.warns(RuntimeWarning, match="could not write pipeline cache"):
        assert dev.save_pipeline_cache() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dev.save_pipeline_cache() is None  # once per device
    x = np.ones(spec.x.shape, np.uint8)
    np.testing.assert_array_equal(run(x)[0], _reference(spec, x))


def test_pipeline_cache_can_be_switched_off(cache_dir, monkeypatch):
    monkeypatch.setenv("VKINFER_PIPELINE_CACHE", "0")
    dev = _vk.Device(_vk._pick(None), pipeline_threads=0)
    assert dev.pipeline_cache_path is None and dev.pipeline_cache_status == "disabled"
    assert dev.save_pipeline_cache() is None and not (cache_dir / "pipelines").exists()


# --- native packing ------------------------------------------------------------------------------------------

SHAPES = [(1, 1, 3, 5), (2, 3, 5, 7), (1, 4, 1, 1), (1, 5, 3, 3), (2, 17, 7, 5), (1, 3, 1, 9), (1, 2, 3, 5, 3),
          (2, 1, 5, 3, 1), (3, 5), (2, 3, 7), (4,), (1, 17), (), (0, 3, 2, 2), (1, 0, 3, 3), (2, 0), (1, 6, 1, 1),
          (3, 2, 1, 1, 2), (1, 1, 1, 1, 1, 3), (2, 2, 2, 2, 2, 2, 5), (1, 66, 3, 2)]


@pytest.fixture(scope="module")
def dev() -> _vk.Device:
    return _vk.get_device()


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_native_packing_equals_numpy_reference(dev, shape, dtype):
    rng = np.random.default_rng(len(shape) * 100 + sum(shape))
    x = rng.integers(0, 256, shape).astype(np.uint8).view(dtype)
    words = packed_words(shape)
    rows = x.reshape(int(np.prod(shape[:-1])), shape[-1]) if x.ndim else x.reshape(1, 1)
    row_words = rows_to_packed(rows).size
    b = dev.buffer(4 * max(words, row_words) + 8)
    b.write(np.full(max(words, row_words) + 2, 0xDEADBEEF, np.uint32))  # padding must come out as zero bytes
    b.write_nchw(x)
    np.testing.assert_array_equal(b.read(np.uint32, words), to_packed(x).reshape(-1))
    assert b.read(np.uint32, 2, 4 * words).tolist() == [0xDEADBEEF] * 2  # nothing written past the tensor
    got = b.read_nchw(shape, dtype)
    assert got.dtype == dtype and got.shape == shape and got.flags.c_contiguous
    np.testing.assert_array_equal(got, x)
    np.testing.assert_array_equal(b.read_nchw(shape, dtype), from_packed(b.read(np.uint32, words), shape, dtype))
    # Rows of the last axis, whatever the rank.
    b.write_rows(x)
    np.testing.assert_array_equal(b.read(np.uint32, row_words), rows_to_packed(rows).reshape(-1))
    np.testing.assert_array_equal(b.read_rows(shape, dtype), x)


def _packing_equals_layout(dev, shape, dtype, runner: bool = False) -> np.ndarray:
    """Pack and unpack a random tensor natively (Buffer.write_nchw/read_nchw and write_rows/read_rows, or a plan
    runner's pack and unpack moves): asserts both equal vkinfer.layout's converters; returns the bytes that pad
    the packed rows to whole words."""
    from vkinfer import _planrun, layout

    rng = np.random.default_rng(len(shape) * 100 + sum(shape))
    x = rng.integers(0, 256, shape).astype(np.uint8).view(dtype)
    words = layout.packed_words(shape)
    rows = x.reshape(int(np.prod(shape[:-1])), shape[-1]) if x.ndim else x.reshape(1, 1)
    b = dev.buffer(4 * max(words, layout.rows_to_packed(rows).size) + 8)
    if runner:  # a plan runner's Vulkan step: pack the input slot, an empty sequence, unpack into the output slot
        seq = dev.sequence()
        seq.barrier()
        r = _planrun.Runner(1, 1, [x.nbytes, x.nbytes], {}, [("vulkan", seq.raw, [(0, b.raw, list(shape), True, 0)],
                                                                 [(1, b.raw, list(shape), True, 0)])])
        y = np.empty_like(x)
        assert r.run([x], [y], False) == (0, [None])
        np.testing.assert_array_equal(y, x)
    else:
        b.write_nchw(x)
        np.testing.assert_array_equal(b.read_nchw(shape, dtype), x)
    got = b.read(np.uint32, words)
    np.testing.assert_array_equal(got, layout.to_packed(x).reshape(-1))
    np.testing.assert_array_equal(layout.from_packed(got, shape, dtype), x)
    b.write_rows(x)
    np.testing.assert_array_equal(b.read(np.uint32, layout.rows_to_packed(rows).size),
                                  layout.rows_to_packed(rows).reshape(-1))
    n, width = layout.rows_width(shape)
    return got.view(np.uint8).reshape(n, -1)[:, width:]


def test_native_packing_takes_its_parameters_from_layout(dev):
    """The packed form is written once, in vkinfer/layout.py: the native packers take its parameters
    (layout.packed_form(), handed over when vkinfer._vk loads _vkcore). With another pad byte there, the native
    packing (buffers and the plan runner's moves) still equals layout's converters on odd shapes, and pads with it;
    a table the packers cannot follow is refused, naming what, and the last good one stays."""
    from vkinfer import layout

    vk = _vk._native()
    good = layout.packed_form()
    assert good["word_values"] == 4 and good["pad_byte"] == 0 and set(good["orders"]) == {4, 5}
    odd = [(1, 5, 3, 3), (2, 3, 7), (1, 2, 3, 5, 3), (3, 5), (1, 3), (1, 1, 3, 5), (2, 1, 5, 3, 1)]
    saved = layout.PAD_BYTE
    try:
        layout.PAD_BYTE = 0xA5
        vk.set_packed_form(layout.packed_form())
        for shape in odd:
            for runner in (False, True):
                pads = _packing_equals_layout(dev, shape, np.int8, runner)
                assert pads.size and (pads == 0xA5).all(), shape
    finally:
        layout.PAD_BYTE = saved
        vk.set_packed_form(layout.packed_form())
    for shape in odd:
        assert (_packing_equals_layout(dev, shape, np.uint8, True) == 0).all()
    for bad, msg in [({**good, "word_values": 2}, "4 values per 32-bit word, vkinfer.layout says 2"),
                     ({**good, "pad_byte": 256}, "pad_byte must be a byte"),
                     ({**good, "orders": {4: (1, 0, 2, 3)}}, r"rank 4's order \(1, 0, 2, 3\) is not batch axes"),
                     ({**good, "orders": {3: (0, 2, 1, 3)}}, "has 4 axes")]:
        with pytest.raises(ValueError, match=msg):
            vk.set_packed_form(bad)
    _packing_equals_layout(dev, (1, 5, 3, 3), np.uint8)


def test_native_packing_takes_views(dev):
    x = np.random.default_rng(1).integers(0, 256, (1, 7, 5, 9), dtype=np.uint8)
    view = x.transpose(0, 1, 3, 2)  # not C-contiguous: the wrapper copies, the native method refuses
    b = dev.buffer(4 * packed_words(view.shape))
    b.write_nchw(view)
    np.testing.assert_array_equal(b.read_nchw(view.shape, np.uint8), view)
    with pytest.raises(ValueError, match="C-contiguous"):
        b.raw.write_nchw(view)


def test_native_packing_rejects_bad_input(dev):
    b = dev.buffer(64)
    for bad in (np.zeros((1, 4, 2, 2), np.float32), np.zeros((1, 4, 2, 2), np.int16), np.zeros(4, bool)):
        with pytest.raises(TypeError, match="uint8 or int8"):
            b.write_nchw(bad)
        with pytest.raises(TypeError, match="uint8 or int8"):
            b.write_rows(bad)
    with pytest.raises(TypeError, match="numpy array"):
        b.write_nchw([[1, 2, 3]])
    with pytest.raises(ValueError, match="72 bytes, the buffer has 64"):
        b.write_nchw(np.zeros((1, 5, 1, 9), np.uint8))  # 9 pixels of 2 words
    assert b.read_nchw((1, 16, 2, 2), np.uint8).shape == (1, 16, 2, 2)  # 4 pixels of 4 words fill it
    with pytest.raises(ValueError, match="80 bytes, the buffer has 64"):
        b.read_nchw((1, 16, 5, 1), np.uint8)
    with pytest.raises(TypeError, match="uint8 or int8"):
        b.read_nchw((1, 4, 2, 2), np.float32)
    with pytest.raises(TypeError):
        b.read_rows((4,), "no such dtype")
    with pytest.raises(ValueError, match="negative"):
        b.read_nchw((1, -4, 2, 2), np.uint8)
    with pytest.raises(ValueError, match="too large"):
        b.read_rows((2**40, 2**40, 4), np.uint8)
    inner = dev.buffer(64, staged=False)
    with pytest.raises(ValueError, match="staged=False"):
        inner.write_nchw(np.zeros((1, 4, 2, 2), np.uint8))
    with pytest.raises(ValueError, match="staged=False"):
        inner.read_nchw((1, 4, 2, 2), np.uint8)


# --- zero copy, shared pipelines, timestamps -----------------------------------------------------------------

@pytest.mark.parametrize("info", DEVICES, ids=DEVICE_IDS)
def test_zero_copy_equals_staged_and_reference(info, cache_dir):
    devs = {zc: _vk.Device(info, zero_copy=zc) for zc in (True, False)}
    if info.type == "cpu":  # lavapipe and SwiftShader: one memory type, device-local and host-visible
        assert devs[True].unified_memory
    assert devs[True].buffer(16).direct and not devs[False].buffer(16).direct
    assert not devs[True].buffer(16, staged=False).direct
    rng = np.random.default_rng(7)
    for spec in _conv_specs()[:2]:
        runs = {zc: _conv_runner(d, spec)[0] for zc, d in devs.items()}
        for _ in range(2):  # replays of the recorded sequence
            x = rng.integers(0, 256, spec.x.shape, dtype=np.uint8)
            want = _reference(spec, x)
            for zc, run in runs.items():
                np.testing.assert_array_equal(run(x)[0], want, err_msg=f"zero_copy={zc}")


def test_zero_copy_follows_unified_memory_and_env(monkeypatch):
    info = _vk._pick(None)
    auto = _vk.Device(info, pipeline_threads=0)
    assert auto.zero_copy == auto.unified_memory
    monkeypatch.setenv("VKINFER_ZERO_COPY", "0")
    assert not _vk.Device(info, pipeline_threads=0).zero_copy


def test_equal_programs_share_one_pipeline(cache_dir):
    dev = _vk.Device(_vk._pick(None), pipeline_threads=2)
    spec = _conv_specs()[1]
    run1, p1 = _conv_runner(dev, spec)
    p1.wait()
    made = dev.stats["pipelines_created"]
    run2, p2 = _conv_runner(dev, spec)  # same shader and specialization, other buffers
    p2.wait()
    assert p1.ready and p2.ready
    assert dev.stats["pipelines_created"] == made and dev.stats["pipelines_reused"] >= 1
    x = np.random.default_rng(3).integers(0, 256, spec.x.shape, dtype=np.uint8)
    np.testing.assert_array_equal(run1(x)[0], run2(x)[0])
    np.testing.assert_array_equal(run2(x)[0], _reference(spec, x))


@pytest.mark.parametrize("info", DEVICES, ids=DEVICE_IDS)
def test_timed_run_reports_device_time(info):
    dev = _vk.get_device(info.index)
    spec = _conv_specs()[0]
    run, _ = _conv_runner(dev, spec)
    x = np.zeros(spec.x.shape, np.uint8)
    assert run(x)[1] is None  # untimed
    y, ns = run(x, timed=True)
    if dev.timestamps:
        assert isinstance(ns, int) and 0 < ns < 10**10
    else:
        assert ns is None
    empty = dev.sequence()
    empty.barrier()  # nothing to submit: no device time
    assert empty.run(timed=True) == (0 if empty.timestamps else None)


def test_recording_after_the_first_run_is_refused(dev):
    seq = dev.sequence()
    b = dev.buffer(16)
    seq.upload(b)
    seq.download(b)
    seq.run()
    with pytest.raises(RuntimeError, match="already run"):
        seq.barrier()


# --- under the validation layer ------------------------------------------------------------------------------

def test_runtime_under_sync_validation_has_zero_messages(tmp_path):
    settings = tmp_path / "vk_layer_settings.txt"
    settings.write_text("khronos_validation.debug_action = VK_DBG_LAYER_ACTION_LOG_MSG\n"
                        "khronos_validation.log_filename = stdout\n")
    env = dict(os.environ, VK_INSTANCE_LAYERS="VK_LAYER_KHRONOS_validation",
               VK_LAYER_ENABLES="VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT:"
                                "VALIDATION_CHECK_ENABLE_SYNCHRONIZATION_VALIDATION_QUEUE_SUBMIT",
               VK_LAYER_SETTINGS_PATH=str(settings), VKINFER_CACHE=str(tmp_path / "cache"),
               PYTHONPATH=str(TESTS) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "RESULT runtime-equal 12/12 timed 4/4" in out, out[-3000:]
    errors = [line for line in out.splitlines() if "Validation Error" in line or "SYNC-HAZARD" in line]
    assert not errors, out[:3000]


def _validated_workload() -> None:
    """Zero-copy and staged devices, shared pipelines created on worker threads, timed runs, native packing."""
    specs = _conv_specs()[:3]
    rng = np.random.default_rng(11)
    ok = timed = 0
    info = _vk._pick(None)
    for zc in (True, False):
        dev = _vk.Device(info, zero_copy=zc, pipeline_threads=2)
        runs = [_conv_runner(dev, s)[0] for s in specs] + [_conv_runner(dev, specs[0])[0]]  # the last shares
        for i, run in enumerate(runs):
            s = specs[i % len(specs)]
            for t in range(2 if i < 2 else 1):
                x = rng.integers(0, 256, s.x.shape, dtype=np.uint8)
                y, ns = run(x, timed=t == 1)
                ok += np.array_equal(y, _reference(s, x))
                timed += t == 1 and (ns is not None) == dev.timestamps
        dev.save_pipeline_cache()
    print(f"RESULT runtime-equal {ok}/12 timed {timed}/4", flush=True)


if __name__ == "__main__":
    _validated_workload()


# --- shapes as push constants (Device.push_shapes) ------------------------------------------------------------

SHADER_NAMES = sorted(p.stem for p in (TESTS.parent / "shaders").glob("*.comp"))


@pytest.mark.parametrize("name", SHADER_NAMES)
def test_push_shapes_variant_of_every_shader_compiles_within_the_push_limit(name):
    """Every int specialization constant but those marked [spec] moves to the push constants, after the shader's
    own; both variants compile, and the variant's push block fits Vulkan's guaranteed 128 bytes."""
    from vkinfer import _glsl

    text = (TESTS.parent / "shaders" / f"{name}.comp").read_text()
    decls = {int(m.group(1)): (m.group(2), m.group(4)) for m in _glsl._SPEC_DECL.finditer(text)}
    lay = _glsl.push_shapes(name)
    assert lay.ids == {i for i, (t, c) in decls.items() if t == "int" and _glsl.KEEP_MARK not in c}
    assert lay.ids and 4 * (lay.base + lay.slots) <= 128
    assert _glsl.spirv(name) != _glsl.spirv(name, (), True)


def test_push_shapes_source_rewrite():
    from vkinfer import _glsl

    src = ("layout(constant_id = 0) const int A = 1;\n"
           "layout(constant_id = 1) const bool F = false;\n"
           "layout(constant_id = 2) const int S = 1;  // [spec]: sizes v[]\n"
           "layout(constant_id = 3) const int B = 2;\n"
           "const int AB = A * B;\n"
           "const int T = S + 1;\n"
           "void main() { int v[T]; }\n")
    out, lay = _glsl._push_shapes_source(src)
    assert lay == _glsl.PushShapes(frozenset({0, 3}), 0, 4)
    assert "#define A (pc.vki_shape[0])" in out and "#define B (pc.vki_shape[3])" in out
    assert "#define AB (A * B)" in out and "const int T = S + 1;" in out and "const int S = 1;" in out
    assert "layout(push_constant) uniform VkiShape { int vki_shape[4]; } pc;" in out
    with_push = src + "layout(push_constant) uniform P { int lo; int hi; } pc;\n"
    out, lay = _glsl._push_shapes_source(with_push)
    assert lay.base == 2 and "{ int lo; int hi;  int vki_shape[4]; } pc;" in out
    assert lay.push([5, 1, 2, 7], [10, 20]) == ([0, 1, 2, 0], [10, 20, 5, 0, 0, 7])
    with pytest.raises(ValueError, match="2 push constants, got 1"):
        lay.push([5, 1, 2, 7], [10])
    with pytest.raises(vkinfer.ShaderCompileError, match="push block of ints"):
        _glsl._push_shapes_source(src + "layout(push_constant) uniform P { float f; } pc;\n")


def test_push_shapes_default_and_env(monkeypatch):
    info = _vk._pick(None)
    monkeypatch.delenv("VKINFER_PUSH_SHAPES", raising=False)
    assert _vk.Device(info, pipeline_threads=0).push_shapes == (info.type == "cpu")
    for v, want in (("0", False), ("1", True), ("off", False)):
        monkeypatch.setenv("VKINFER_PUSH_SHAPES", v)
        assert _vk.Device(info, pipeline_threads=0).push_shapes is want
    assert _vk.Device(info, pipeline_threads=0, push_shapes=False).push_shapes is False
    monkeypatch.setenv("VKINFER_PUSH_SHAPES", "maybe")
    with pytest.raises(ValueError, match="VKINFER_PUSH_SHAPES"):
        _vk.Device(info, pipeline_threads=0)


def test_pushed_shapes_equal_specialized_ones_with_fewer_pipelines(cache_dir):
    """Every conv kernel on several shapes, shapes pushed and specialized: both equal the reference, and pushed
    shapes make one pipeline per kernel and signedness where specialized ones make one per shape."""
    from support.cases import conv_table

    from vkinfer.reference._spec import conv_spec
    from vkinfer.vulkan import KERNELS, choose_kernel

    specs, per_kernel = [], {}
    for _, c in conv_table():
        s = conv_spec(**c)
        k = choose_kernel(s)
        if per_kernel.get(k, 0) < 3:
            per_kernel[k] = per_kernel.get(k, 0) + 1
            specs.append(s)
    assert set(per_kernel) == set(KERNELS)
    info, made = _vk._pick(None), {}
    for pushed in (False, True):
        dev = _vk.Device(info, pipeline_threads=2, push_shapes=pushed)
        for s in specs:
            run, _ = _conv_runner(dev, s)
            np.testing.assert_array_equal(run(s.x)[0], _reference(s, s.x), err_msg=f"pushed={pushed}")
        dev.wait_pipelines()
        made[pushed] = dev.stats["pipelines_created"]
    assert made[True] < made[False] <= len(specs)


@pytest.mark.parametrize("zero_copy", [None, False])
def test_uncached_spirv_compiles_on_workers_and_the_program_is_made_when_recorded(cache_dir, tmp_path, monkeypatch,
                                                                                  zero_copy):
    """With an empty SPIR-V cache, `Device.program` returns before glslang finishes; the native program is made
    when the sequence records it, equal programs share one compile, and a compile error surfaces there as
    ShaderCompileError naming the shader. zero_copy=False: staged buffers, as on a discrete GPU (without the
    recorded upload this test read zeros on an H100 while lavapipe's unified memory hid it)."""
    from vkinfer import _glsl
    from vkinfer.vulkan import QLinearConv

    monkeypatch.setattr(_glsl, "_futures", {})
    _glsl.spirv.cache_clear()
    dev = _vk.Device(_vk._pick(None), pipeline_threads=0, zero_copy=zero_copy)
    spec = _conv_specs()[0]
    op = QLinearConv(spec, dev)
    xb, yb = dev.buffer(4 * op.in_words), dev.buffer(4 * op.out_words)
    progs = [op.bind(xb, yb), op.bind(xb, yb)]
    assert progs[0]._raw is None and len(_glsl._futures) == 1  # one compile for both
    seq = dev.sequence()
    seq.upload(xb)
    seq.dispatch(progs[0])
    seq.download(yb)
    assert progs[0]._raw is not None
    xb.write_nchw(spec.x)
    seq.run()
    np.testing.assert_array_equal(yb.read_nchw(op.out_shape, spec.out.dtype), _reference(spec, spec.x))
    assert list(cache_dir.glob("spirv/*.spv"))  # and the next process finds it on disk
    _glsl.spirv.cache_clear()
    defines = tuple(sorted((k, str(v)) for k, v in (op.defines or {}).items()))
    assert _glsl.spirv_future(op.kernel, defines, dev.push_shapes).done()

    bad = tmp_path / "shaders"
    bad.mkdir()
    (bad / "broken.comp").write_text("#version 450\nlayout(local_size_x = 1) in;\nvoid main() { nope; }\n")
    monkeypatch.setattr(_glsl, "SHADER_DIR", bad)
    prog = dev.program("broken", [yb], (1, 1, 1))
    with pytest.raises(vkinfer.ShaderCompileError, match="broken.comp"):
        dev.sequence().dispatch(prog)
    with pytest.raises(vkinfer.ShaderCompileError, match="not found"):
        dev.program("missing", [yb], (1, 1, 1))
