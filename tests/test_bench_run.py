"""`vkinfer bench MODEL...` end to end on tiny models: records valid and complete, agreement with the peers,
missing engines and devices reported, bad input rejected in one line, an interrupted run leaves a valid file."""

import json

import numpy as np
import onnxruntime as ort
import pytest
from test_session import _small_qmodel

import vkinfer
from vkinfer.benchmark import records, run
from vkinfer.benchmark.conditions import conditions
from vkinfer.cli import main

COND_KEYS = {"cpu_model", "cpu_flags", "logical_cpus", "threads", "pinned", "pinned_cpus", "affinity", "cpu_variant",
             "vulkan", "versions", "git_commit", "date", "hostname"}
FAST = ["--runs", "5", "--warmup", "1"]


@pytest.fixture
def onnx_model(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(_small_qmodel())
    return path


def test_small_qmodel_vkinfer_is_exact_with_ort(onnx_model):
    """The premise of the agreement assertions below: on this model (7-bit weights) ORT is bit-exact."""
    x = run.load_model(str(onnx_model)).feed
    o = ort.InferenceSession(str(onnx_model), providers=["CPUExecutionProvider"])
    want = o.run(None, x)[0]
    got = vkinfer.InferenceSession(str(onnx_model), device="cpu").run(None, x)[0]
    np.testing.assert_array_equal(got, want)


def test_bench_onnx_end_to_end(onnx_model, tmp_path, capsys):
    out = tmp_path / "r.jsonl"
    assert main(["bench", str(onnx_model), "--device", "cpu", "--peer", "onnxruntime", "--threads", "1", *FAST,
                 "--out", str(out)]) == 0
    table = capsys.readouterr().out
    assert "onnxruntime" in table and "p50 ms" in table and f"wrote 2 record(s) to {out}" in table
    recs = records.read(out)
    assert [(r["engine"], r["device"], r["threads"]) for r in recs] == [("vkinfer", "cpu", 1),
                                                                        ("onnxruntime", "cpu", 1)]
    for r in recs:
        assert r["status"] == "ok" and r["error"] is None and r["runs"] == 5 and r["warmup"] == 1
        lat = np.array(r["latencies_ms"])
        assert len(lat) == 5 and (lat > 0).all()
        # the summary against numpy (an independent computation of the same definitions)
        assert r["min_ms"] == lat.min() and r["max_ms"] == lat.max()
        assert r["p50_ms"] == pytest.approx(np.median(lat)) and r["p99_ms"] == pytest.approx(np.percentile(lat, 99))
        assert r["cv"] == pytest.approx(lat.std(ddof=1) / lat.mean())
        assert r["create_cold_ms"] > 0 and r["create_warm_ms"] > 0
        # 9*9*8*27 + 9*9*16*8 + 10*1296 multiply-accumulates (as test_cli's `vkinfer info`)
        assert r["macs"] == 9 * 9 * 8 * 27 + 9 * 9 * 16 * 8 + 10 * 1296
        assert r["gops"] == pytest.approx(2 * r["macs"] / (r["p50_ms"] * 1e-3) / 1e9)
        assert r["model_bytes"] == onnx_model.stat().st_size and r["peak_activation_bytes"] > 0
        assert COND_KEYS <= set(r["conditions"]) and r["conditions"]["threads"] == 1
        assert r["conditions"]["versions"]["onnxruntime"] == ort.__version__
        assert r["conditions"]["versions"]["ncnn"] is None and r["per_layer"] is None
    assert recs[0]["agreement"] is None  # the reference itself
    assert recs[1]["agreement"] == {"reference": "vkinfer", "reference_device": "cpu", "identical_fraction": 1.0,
                                    "max_abs_diff": 0.0}
    # appended, not replaced
    assert main(["bench", str(onnx_model), "--peer", "none", "--runs", "2", "--warmup", "0",
                 "--out", str(out)]) == 0
    assert len(records.read(out)) == 3


def test_missing_engine_and_unavailable_device_are_records(onnx_model, tmp_path, capsys, monkeypatch):
    out = tmp_path / "r.jsonl"
    assert run.main([str(onnx_model), "--device", "cpu,vulkan:99", "--peer", "onnxruntime,litert,ncnn",
                     "--runs", "2", "--warmup", "0", "--out", str(out)]) == 0
    recs = {(r["engine"], r["device"]): r for r in records.read(out)}
    assert recs["vkinfer", "cpu"]["status"] == "ok" and recs["onnxruntime", "cpu"]["status"] == "ok"
    for k, want in [(("vkinfer", "vulkan:99"), "vulkan:99 is not available"), (("ncnn", "cpu"), "not installed"),
                    (("litert", "cpu"), ".tflite models only")]:
        assert recs[k]["status"] == "missing" and want in recs[k]["error"] and recs[k]["latencies_ms"] == []
    # no Vulkan driver at all
    from vkinfer import ops
    from vkinfer.errors import VulkanUnavailableError

    real = ops._backend

    def no_vulkan(device, threads):
        if device.startswith("vulkan"):
            raise VulkanUnavailableError("no Vulkan loader (simulated)")
        return real(device, threads)

    monkeypatch.setattr(ops, "_backend", no_vulkan)
    monkeypatch.setattr(run, "vulkan_devices", lambda: "unavailable: no Vulkan loader (simulated)")
    out2 = tmp_path / "r2.jsonl"
    assert run.main([str(onnx_model), "--device", "vulkan,cpu", "--peer", "none", "--runs", "2", "--warmup", "0",
                     "--out", str(out2)]) == 0
    vk, cpu = records.read(out2)
    assert vk["status"] == "missing" and "simulated" in vk["error"]
    assert cpu["status"] == "ok" and cpu["agreement"] is None  # the first engine that ran is the reference
    assert cpu["conditions"]["vulkan"].startswith("unavailable")


def test_engine_failing_on_model_is_an_error_record(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    path.write_bytes(_small_qmodel())

    def broken(model, device, threads):
        def make():
            raise RuntimeError("kernel exploded (simulated)")
        return make

    monkeypatch.setattr(run, "_vkinfer_factory", broken)
    out = tmp_path / "r.jsonl"
    assert run.main([str(path), "--runs", "2", "--warmup", "0", "--out", str(out)]) == 0
    vk, peer = records.read(out)
    assert vk["status"] == "error" and "kernel exploded" in vk["error"] and vk["macs"] is None
    assert peer["status"] == "ok" and peer["engine"] == "onnxruntime" and peer["agreement"] is None


def test_tflite_with_litert(tmp_path):
    from vkinfer.models import tflite_zoo

    path = tmp_path / "t.tflite"
    path.write_bytes(tflite_zoo.tiny_cnn(seed=0))
    out = tmp_path / "r.jsonl"
    assert run.main([str(path), "--threads", "1,2", *FAST, "--pin", "0", "--out", str(out)]) == 0
    recs = records.read(out)
    assert [(r["engine"], r["threads"]) for r in recs] == [("vkinfer", 1), ("litert", 1), ("vkinfer", 2),
                                                           ("litert", 2)]
    assert all(r["status"] == "ok" and len(r["latencies_ms"]) == 5 for r in recs)
    assert all(r["conditions"]["pinned_cpus"] == [0] and r["conditions"]["affinity"] == [0] for r in recs)
    for r in recs[1::2]:
        # tiny_cnn uses MEAN pooling: no requantization ties, so litert's outputs have been identical (README)
        assert r["agreement"]["reference"] == "vkinfer" and r["agreement"]["identical_fraction"] == 1.0


@pytest.mark.parametrize("args, culprit", [
    (["missing.onnx"], "missing.onnx"),
    (["{bad}"], "not a readable ONNX or .tflite model"),
    (["{m}", "--peer", "tensorrt"], "unknown engine 'tensorrt'"),
    (["{m}", "--device", "gpu"], "unknown device 'gpu'"),
    (["{m}", "--runs", "0"], "--runs must be at least 1"),
    (["{m}", "--threads", "1,x"], "--threads takes positive integers, got 'x'"),
    (["{m}", "--threads", "0"], "got '0'"),
    (["{m}", "--pin", "a-b"], "--pin"),
    (["{m}", "--bogus"], "unrecognized arguments: --bogus"),
])
def test_bad_input_is_one_line_and_exit_2(onnx_model, tmp_path, capsys, args, culprit):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    argv = ["bench", *(a.format(m=onnx_model, bad=bad) for a in args), "--out", str(tmp_path / "r.jsonl")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("vkinfer bench: error: ") and culprit in err and len(err.strip().splitlines()) == 1
    assert "Traceback" not in err and not (tmp_path / "r.jsonl").exists()


def test_interrupted_run_leaves_valid_file(onnx_model, tmp_path, capsys, monkeypatch):
    out = tmp_path / "r.jsonl"
    real = run.bench_model
    calls = []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) > 1:  # the second (model, threads) group is stopped midway
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(run, "bench_model", interrupted)
    assert run.main([str(onnx_model), "--threads", "1,2", "--runs", "2", "--warmup", "0", "--out", str(out)]) == 130
    assert "interrupted; 2 finished record(s)" in capsys.readouterr().err
    recs = records.read(out)
    assert [(r["engine"], r["threads"]) for r in recs] == [("vkinfer", 1), ("onnxruntime", 1)]
    assert all(json.loads(line) for line in out.read_text().splitlines())


def test_conditions_fields():
    c = conditions(2, [0])
    assert COND_KEYS <= set(c) and c["threads"] == 2 and c["pinned"] and c["pinned_cpus"] == [0]
    assert c["cpu_variant"] == vkinfer.cpu.default_variant() and c["versions"]["numpy"] == np.__version__
    assert c["date"].endswith("+00:00") and isinstance(c["logical_cpus"], int)
    assert isinstance(c["vulkan"], list | str)


def test_cli_dispatches_bench_compare(monkeypatch):
    from vkinfer.benchmark import compare

    seen = []
    monkeypatch.setattr(compare, "main", lambda argv: seen.append(argv) or 7)
    assert main(["bench", "compare", "a.jsonl", "b.jsonl", "--threshold", "5"]) == 7
    assert seen == [["a.jsonl", "b.jsonl", "--threshold", "5"]]
