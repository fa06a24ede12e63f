"""bench/digits.py on a subset and vkinfer.benchmark.accuracy on its test set (issue 13, accuracy on real data).

The script trains its CNN on 300 of scikit-learn's digits for 15 epochs (a few seconds) into a temporary folder;
its QDQ and QOperator models must load in vkinfer and give ORT's outputs bit for bit on all 360 test images, so
the same predictions and the same top-1 (measured: float 0.93, both quantized models 0.93 on every engine; the
test asks > 0.5, chance being 0.1). Oracles: ONNX Runtime run directly here (its own session, no vkinfer code),
the labels of the .npz and the float model's accuracy that the script reports from JAX. On x86 without VNNI,
where ORT's u8 x s8 kernels saturate (tests/support/ort_oracle.py), the models are quantized with 7-bit weights
(--reduce-range), ORT's own remedy, so that ORT is exact there too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from support import ort_oracle as oo
from support.agree import run_devices

import vkinfer
from vkinfer.benchmark import accuracy, records

ROOT = Path(__file__).resolve().parents[2]
FORMATS = ("qdq", "qoperator")


@pytest.fixture(scope="module")
def digits(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("digits")
    cmd = [sys.executable, str(ROOT / "bench" / "digits.py"), "--out", str(out), "--subset", "300",
           "--epochs", "15", "--seed", "0"]
    if oo.u8s8_behaviour() != oo.EXACT:
        cmd.append("--reduce-range")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "float top-1" in p.stdout
    return out


def _ort_outputs(path: Path, x: np.ndarray) -> np.ndarray:
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([s.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])


def test_script_is_deterministic(digits, tmp_path):
    """The same seed gives the same models and test set, byte for byte."""
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "digits.py"), "--out", str(tmp_path), "--subset", "300",
                        "--epochs", "15", "--seed", "0", *(["--reduce-range"] if oo.u8s8_behaviour() != oo.EXACT
                                                            else [])], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    for f in ("digits_float.onnx", "digits_qdq.onnx", "digits_qoperator.onnx", "digits_test.npz"):
        assert (tmp_path / f).read_bytes() == (digits / f).read_bytes(), f


def test_script_rejects_bad_options(tmp_path):
    for args, msg in ((["--epochs", "0"], "--epochs"), (["--subset", "5"], "--subset")):
        p = subprocess.run([sys.executable, str(ROOT / "bench" / "digits.py"), "--out", str(tmp_path), *args],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and msg in p.stderr and "Traceback" not in p.stderr


def test_script_writes_models_and_test_set(digits):
    for f in ("digits_float.onnx", "digits_qdq.onnx", "digits_qoperator.onnx", "digits_test.npz"):
        assert (digits / f).stat().st_size > 0, f
    z = np.load(digits / "digits_test.npz")
    assert sorted(z.files) == ["x", "y"]
    assert z["x"].dtype == np.float32 and z["x"].shape == (360, 1, 8, 8)
    assert z["y"].dtype == np.int64 and z["y"].shape == (360,)
    assert 0.0 <= z["x"].min() and z["x"].max() <= 1.0
    assert np.bincount(z["y"], minlength=10).min() >= 35  # stratified: 36 of each class but a few
    info = json.loads((digits / "digits_train.json").read_text())
    assert info["train_images"] == 300 and info["test_images"] == 360 and info["epochs"] == 15
    # The exported float ONNX model computes what JAX trained (ORT's float top-1 = the script's JAX top-1).
    float_top1 = (_ort_outputs(digits / "digits_float.onnx", z["x"]).argmax(1) == z["y"]).mean()
    assert float_top1 == pytest.approx(info["float_test_top1"], abs=1 / 360)
    assert float_top1 > 0.8  # measured 0.933


@pytest.mark.parametrize("fmt", FORMATS)
def test_vkinfer_equals_ort_on_the_test_set(digits, fmt):
    model, data = digits / f"digits_{fmt}.onnx", digits / "digits_test.npz"
    z = np.load(data)
    x, y = z["x"], z["y"]
    sess = vkinfer.InferenceSession(str(model), device="cpu")
    assert sess.get_inputs()[0].shape[1:] == [1, 8, 8]
    ours = np.concatenate([sess.run(None, {"input": x[i:i + 1]})[0] for i in range(len(x))])
    theirs = _ort_outputs(model, x)
    assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs)  # raw outputs, bit for bit
    run_devices(model, {"input": x}, want=[theirs])  # the whole test set as one batch, on every device
    want_top1 = float((theirs.argmax(1) == y).mean())
    assert want_top1 > 0.5  # measured 0.933 for both formats

    res = accuracy.evaluate(str(model), str(data), ["vkinfer", "onnxruntime"], threads=1, device="cpu")
    assert list(res) == ["vkinfer", "onnxruntime"]
    for r in res.values():
        assert r["status"] == "ok" and r["error"] is None and r["n"] == 360
        assert r["top1"] == want_top1 and r["correct"] == round(want_top1 * 360)
    assert res["vkinfer"]["agreement"] is None
    assert res["onnxruntime"]["agreement"] == {"reference": "vkinfer", "predictions_identical": 1.0,
                                               "outputs_identical": True, "max_abs_diff": 0.0}
    json.dumps(res, allow_nan=False)  # fits a record


def test_batches_give_the_same_answer(digits):
    """A batch that does not divide N (the last one padded) and vkinfer on Vulkan give the same predictions."""
    model, data = str(digits / "digits_qoperator.onnx"), str(digits / "digits_test.npz")
    one = accuracy.evaluate(model, data, ["vkinfer"], batch=1)["vkinfer"]
    res = accuracy.evaluate(model, data, ["vkinfer", "onnxruntime"], batch=7, device="vulkan")
    assert res["vkinfer"]["status"] == "ok", res["vkinfer"]["error"]
    assert res["vkinfer"]["top1"] == res["onnxruntime"]["top1"] == one["top1"]
    assert res["onnxruntime"]["agreement"]["outputs_identical"] is True


def test_missing_engines_and_devices_are_results_not_crashes(digits, monkeypatch):
    model, data = str(digits / "digits_qdq.onnx"), str(digits / "digits_test.npz")
    res = accuracy.evaluate(model, data, ["vkinfer", "litert", "ncnn"], device="vulkan:99")
    assert res["vkinfer"]["status"] == "missing" and "vulkan" in res["vkinfer"]["error"].lower()
    assert res["litert"]["status"] == "missing" and ".tflite" in res["litert"]["error"]
    assert res["ncnn"]["status"] == "missing"
    assert all(r["top1"] is None for r in res.values())
    monkeypatch.setattr(accuracy, "_missing_module", lambda m: True)
    r = accuracy.evaluate(model, data, ["onnxruntime", "vkinfer"])
    assert r["onnxruntime"]["status"] == "missing" and "not installed" in r["onnxruntime"]["error"]
    assert r["vkinfer"]["status"] == "ok" and r["vkinfer"]["agreement"] is None  # the first engine that ran
    monkeypatch.undo()
    # A float model: vkinfer refuses it (status error, the reason), ORT still runs.
    r = accuracy.evaluate(str(digits / "digits_float.onnx"), data, ["vkinfer", "onnxruntime"])
    assert r["vkinfer"]["status"] == "error" and "quantize" in r["vkinfer"]["error"]
    assert r["onnxruntime"]["status"] == "ok" and r["onnxruntime"]["top1"] > 0.5


def _npz(path: Path, **arrays) -> str:
    np.savez(path, **arrays)
    return str(path)


def test_bad_datasets_name_the_culprit(digits, tmp_path):
    model = str(digits / "digits_qdq.onnx")
    x = np.zeros((4, 1, 8, 8), np.float32)
    y = np.arange(4, dtype=np.int64)
    cases = [
        (str(tmp_path / "absent.npz"), "absent.npz: cannot read"),
        (str(_write(tmp_path / "junk.npz", b"not a zip")), "junk.npz: not a NumPy .npz"),
        (_npz(tmp_path / "nox.npz", y=y), "no array 'x'"),
        (_npz(tmp_path / "noy.npz", x=x, labels=y), "no array 'y'"),
        (_npz(tmp_path / "flat.npz", x=x.reshape(4, 64), y=y), "shape (64,)"),
        (_npz(tmp_path / "small.npz", x=np.zeros((4, 1, 7, 7), np.float32), y=y), "(N, 1, 8, 8)"),
        (_npz(tmp_path / "f64.npz", x=x.astype(np.float64), y=y), "x is float64"),
        (_npz(tmp_path / "fy.npz", x=x, y=y.astype(np.float32)), "integer labels"),
        (_npz(tmp_path / "short.npz", x=x, y=y[:3]), "3 labels"),
        (_npz(tmp_path / "empty.npz", x=x[:0], y=y[:0]), "N > 0"),
    ]
    for path, msg in cases:
        with pytest.raises(ValueError) as e:
            accuracy.evaluate(model, path, ["vkinfer"])
        assert Path(path).name in str(e.value) and msg in str(e.value), (path, str(e.value))
    with pytest.raises(ValueError, match="unknown engine 'tvm'"):
        accuracy.evaluate(model, str(digits / "digits_test.npz"), ["vkinfer", "tvm"])
    with pytest.raises(ValueError, match="nomodel.onnx: cannot read model"):
        accuracy.evaluate(str(tmp_path / "nomodel.onnx"), str(digits / "digits_test.npz"), ["vkinfer"])


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_cli_table_and_bad_input(digits, tmp_path, capsys):
    model, data = str(digits / "digits_qoperator.onnx"), str(digits / "digits_test.npz")
    assert accuracy.main([model, data]) == 0
    out = capsys.readouterr().out
    assert "vkinfer" in out and "onnxruntime" in out and "bit-identical" in out
    assert accuracy.main([model, data, "--engines", "vkinfer,ncnn", "--json"]) == 1  # one engine missing
    assert json.loads(capsys.readouterr().out)["ncnn"]["status"] == "missing"
    assert accuracy.main([model, str(tmp_path / "none.npz")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "none.npz" in err and "Traceback" not in err


def test_record_field_accuracy():
    rec = records.new_record("m.onnx", "vkinfer", "cpu", 1, latencies_ms=[1.0], **dict.fromkeys(
        records.STAT_FIELDS, 1.0))
    assert rec["accuracy"] is None
    records.validate(rec)
    rec["accuracy"] = {"dataset": "d.npz", "top1": 0.9, "n": 10, "status": "ok", "error": None}
    records.validate(rec)
    rec["accuracy"] = [0.9]
    with pytest.raises(records.RecordError, match="accuracy"):
        records.validate(rec)
