"""Model files (issue 26, "files"): a model path must be a regular file of at most `max_model_bytes` (a FIFO
hung the session, /dev/zero was read until memory ran out), and an ONNX model's external data is read only from
its own folder, or for a model given as bytes or a ModelProto only from a folder given as `external_data_dir=`
(before, relative to the current folder: an uploaded model could read a server file into its output). Stricter
than ONNX Runtime, documented in docs/guide.md.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from support.agree import DEVICES, assert_same, refused_devices, run_devices
from support.small_model import small_qmodel

import vkinfer
from vkinfer.model.onnx_import import MAX_MODEL_BYTES, import_onnx, read_model_file
from vkinfer.model.op_table import OPS
from vkinfer.model.tflite_import import is_tflite
from vkinfer.testing.tflite_ops import op_model

FEED = {"x": np.random.default_rng(0).integers(0, 256, (1, 3, 9, 9)).astype(np.uint8)}


def _finishes(fn, timeout: float = 20.0):
    """fn()'s exception (or None), failing the test if it has not returned within `timeout` seconds."""
    box: list = []

    def target():
        try:
            fn()
            box.append(None)
        except BaseException as e:  # noqa: BLE001 - returned to the test
            box.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout)
    assert box, f"still running after {timeout} s"
    return box[0]


# ---- the model path -----------------------------------------------------------------------------------------------

@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "model.onnx"
    os.mkfifo(path)
    yield path
    try:  # release an open that would still wait for a writer (it must not: the tests assert it)
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
    except OSError:
        pass


def test_fifo_refused_without_hanging(fifo):
    for fn in (lambda: vkinfer.InferenceSession(str(fifo), device="cpu"),
               lambda: import_onnx(fifo, OPS),
               lambda: vkinfer.tflite.Interpreter(model_path=str(fifo), device="cpu")):
        e = _finishes(fn)
        assert isinstance(e, ValueError) and f"{str(fifo)!r} is a FIFO, not a regular file" in str(e), e
    assert _finishes(lambda: is_tflite(fifo)) is None and not is_tflite(fifo)


@pytest.mark.parametrize("target", ["/dev/zero", "symlink"])
def test_device_refused(tmp_path, target):
    path = "/dev/zero"
    if target == "symlink":  # a symlink named like a model
        path = str(tmp_path / "model.onnx")
        os.symlink("/dev/zero", path)
    e = _finishes(lambda: vkinfer.InferenceSession(path, device="cpu"), timeout=10)
    assert isinstance(e, ValueError) and "is a device, not a regular file" in str(e), e
    assert not is_tflite(path)


def test_directory_refused(tmp_path):
    refused_devices(str(tmp_path), match=r"is a directory, not a regular file")


def test_size_limit(tmp_path):
    blob = small_qmodel()
    path = tmp_path / "m.onnx"
    path.write_bytes(blob)
    assert MAX_MODEL_BYTES == 2 << 30
    refused_devices(str(path), match=rf"model file .* {len(blob)} bytes to read, over the limit of {len(blob) - 1} "
                                     r"bytes \(InferenceSession's max_model_bytes=\)", max_model_bytes=len(blob) - 1)
    run_devices(str(path), FEED, want=run_devices(blob, FEED), max_model_bytes=len(blob))
    for bad in (0, -5, "100", 1.0):
        with pytest.raises(ValueError, match="max_model_bytes must be a positive integer"):
            vkinfer.InferenceSession(str(path), device="cpu", max_model_bytes=bad)
    opts = vkinfer.SessionOptions()
    opts.add_session_config_entry("vkinfer.max_model_bytes", str(len(blob) - 1))
    with pytest.raises(ValueError, match="over the limit"):
        vkinfer.ort.InferenceSession(str(path), opts, device="cpu")
    assert read_model_file(path) == blob and read_model_file(path, 10, offset=3, length=5) == blob[3:8]


def test_tflite_paths(tmp_path, fifo):
    blob = op_model("mul")
    path = tmp_path / "m.tflite"
    path.write_bytes(blob)
    feed = {k: np.random.default_rng(3).integers(-128, 128, (1, 8, 8, 16)).astype(np.int8) for k in ("x", "y")}
    run_devices(str(path), feed, want=run_devices(blob, feed))
    refused_devices(str(path), match="over the limit", max_model_bytes=len(blob) - 1)
    interp = vkinfer.tflite.Interpreter(model_path=str(path), device="cpu")
    assert interp.get_input_details()[0]["name"] == "x"


# ---- external data ------------------------------------------------------------------------------------------------

def _external(folder: Path, location: str = "weights.bin") -> tuple[Path, onnx.ModelProto]:
    """small_qmodel saved with its weights in one external file at `location` (relative to `folder`)."""
    m = onnx.load_from_string(small_qmodel())
    path = folder / "model.onnx"
    # The large weights only: ONNX Runtime cannot infer shapes from a Reshape's shape held externally.
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                    size_threshold=1000)
    return path, onnx.load(path, load_external_data=False)


def test_external_data_beside_the_model_file(tmp_path):
    path, _ = _external(tmp_path)
    assert os.path.getsize(path) < 2000  # the weights are really outside
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, FEED)
    run_devices(str(path), FEED, want=want)


def test_bytes_with_external_data_refused_unless_a_folder_is_given(tmp_path, monkeypatch):
    path, proto = _external(tmp_path)
    blob = path.read_bytes()
    monkeypatch.chdir(tmp_path)  # the attack: the data file sits in the current folder
    match = (r"initializer '\w+': its data is in an external file \('weights.bin'\); a model given as bytes or a "
             r"ModelProto reads external data only from a folder given as external_data_dir=")
    refused_devices(blob, match=match)
    for device in DEVICES:  # a ModelProto as such (agree's helpers pass its bytes)
        with pytest.raises(ValueError, match=match):
            vkinfer.InferenceSession(proto, device=device)
    want = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, FEED)
    monkeypatch.chdir("/")
    run_devices(blob, FEED, want=want, external_data_dir=str(tmp_path))
    for device in DEVICES:
        sess = vkinfer.InferenceSession(proto, device=device, external_data_dir=tmp_path)
        assert_same(sess.run(None, FEED), want, f"{device}, a ModelProto with external_data_dir")
    assert any(t.data_location == onnx.TensorProto.EXTERNAL  # the caller's proto untouched
               for t in proto.graph.initializer)
    opts = vkinfer.SessionOptions()
    opts.add_session_config_entry("vkinfer.external_data_dir", str(tmp_path))
    sess = vkinfer.ort.InferenceSession(blob, opts, device="cpu")
    assert_same(sess.run(None, FEED), want, "external_data_dir from the session config entry")


def _relocate(proto: onnx.ModelProto, location: str) -> bytes:
    for t in proto.graph.initializer:
        for e in t.external_data:  # the tensors stored externally
            if e.key == "location":
                e.value = location
    return proto.SerializeToString()


@pytest.mark.parametrize("where", ["parent", "absolute", "symlink_out", "dev_zero", "fifo"])
def test_external_data_outside_the_folder_or_not_a_file_refused(tmp_path, where):
    folder = tmp_path / "models"
    folder.mkdir()
    _, proto = _external(folder)
    secret = tmp_path / "secret.bin"
    secret.write_bytes((folder / "weights.bin").read_bytes())  # a readable file of the right size
    if where == "parent":
        location, match = "../secret.bin", r"external data location '\.\./secret\.bin' is not a file inside"
    elif where == "absolute":
        location, match = str(secret), "is not a file inside"
    elif where == "symlink_out":
        os.symlink(secret, folder / "link.bin")
        location, match = "link.bin", "'link.bin' is not a file inside"
    elif where == "dev_zero":
        os.symlink("/dev/zero", folder / "zero.bin")
        location, match = "zero.bin", "'zero.bin' is not a file inside"
    else:
        os.mkfifo(folder / "pipe.bin")
        location, match = "pipe.bin", r"external data file '.*pipe\.bin' is a FIFO, not a regular file"
    blob = _relocate(proto, location)
    path = folder / "model.onnx"
    path.write_bytes(blob)
    e = _finishes(lambda: refused_devices(str(path), match=match), timeout=60)
    assert e is None, e
    refused_devices(blob, match=match, external_data_dir=str(folder))


def test_external_data_counts_towards_the_size_limit(tmp_path):
    path, _ = _external(tmp_path)
    data = os.path.getsize(tmp_path / "weights.bin")
    refused_devices(str(path), match=r"external data file .* over the limit of \d+ bytes",
                    max_model_bytes=os.path.getsize(path) + data // 2)
    for device in DEVICES:
        vkinfer.InferenceSession(str(path), device=device, max_model_bytes=os.path.getsize(path) + data)
