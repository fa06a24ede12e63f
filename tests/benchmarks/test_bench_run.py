"""`vkinfer bench MODEL...` end to end on tiny models: records valid and complete, agreement with the peers,
missing engines and devices reported, bad input rejected in one line, an interrupted run leaves a valid file."""

import json

import numpy as np
import onnxruntime as ort
import pytest
from support.agree import run_devices
from support.small_model import small_qmodel

import vkinfer
from vkinfer import layer_times
from vkinfer.benchmark import cli as bench_cli
from vkinfer.benchmark import engines, load, records, schedule
from vkinfer.benchmark import zoo as bench_zoo
from vkinfer.benchmark.conditions import conditions
from vkinfer.cli import main

COND_KEYS = {"cpu_model", "cpu_flags", "logical_cpus", "threads", "pinned", "pinned_cpus", "affinity", "cpu_variant",
             "vulkan", "versions", "git_commit", "date", "hostname"}
FAST = ["--runs", "5", "--warmup", "1"]
try:
    from ncnn import __version__ as NCNN_VERSION
except ImportError:
    NCNN_VERSION = None


@pytest.fixture
def onnx_model(tmp_path):
    path = tmp_path / "m.onnx"
    path.write_bytes(small_qmodel())
    return path


def test_small_qmodel_vkinfer_is_exact_with_ort(onnx_model):
    """The premise of the agreement assertions below: on this model (7-bit weights) ORT is bit-exact."""
    x = load.load_model(str(onnx_model)).feed
    o = ort.InferenceSession(str(onnx_model), providers=["CPUExecutionProvider"])
    want = o.run(None, x)[0]
    run_devices(onnx_model, x, want=[want])


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
        assert r["conditions"]["versions"]["ncnn"] == NCNN_VERSION and r["per_layer"] is None
    assert recs[0]["agreement"] is None  # the reference itself
    assert recs[1]["agreement"] == {"reference": "vkinfer", "reference_device": "cpu", "identical_fraction": 1.0,
                                    "max_abs_diff": 0.0}
    # appended, not replaced
    assert main(["bench", str(onnx_model), "--peer", "none", "--runs", "2", "--warmup", "0",
                 "--out", str(out)]) == 0
    assert len(records.read(out)) == 3


def test_missing_engine_and_unavailable_device_are_records(onnx_model, tmp_path, capsys, monkeypatch):
    out = tmp_path / "r.jsonl"
    assert bench_cli.main([str(onnx_model), "--device", "cpu,vulkan:99", "--peer", "onnxruntime,litert,ncnn",
                           "--runs", "2", "--warmup", "0", "--out", str(out)]) == 0
    recs = {(r["engine"], r["device"]): r for r in records.read(out)}
    assert recs["vkinfer", "cpu"]["status"] == "ok" and recs["onnxruntime", "cpu"]["status"] == "ok"
    ncnn_why = "not installed" if NCNN_VERSION is None else "needs --ncnn-model"  # no ncnn model given here
    for k, want in [(("vkinfer", "vulkan:99"), "vulkan:99 is not available"), (("ncnn", "cpu"), ncnn_why),
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
    monkeypatch.setattr(bench_cli, "vulkan_devices", lambda: "unavailable: no Vulkan loader (simulated)")
    out2 = tmp_path / "r2.jsonl"
    assert bench_cli.main([str(onnx_model), "--device", "vulkan,cpu", "--peer", "none", "--runs", "2", "--warmup", "0",
                           "--out", str(out2)]) == 0
    vk, cpu = records.read(out2)
    assert vk["status"] == "missing" and "simulated" in vk["error"]
    assert cpu["status"] == "ok" and cpu["agreement"] is None  # the first engine that ran is the reference
    assert cpu["conditions"]["vulkan"].startswith("unavailable")


def test_engine_failing_on_model_is_an_error_record(tmp_path, monkeypatch, capsys):
    path = tmp_path / "m.onnx"
    path.write_bytes(small_qmodel())

    def broken(model, device, threads):
        def make():
            raise RuntimeError("kernel exploded\n(simulated)")
        return make

    monkeypatch.setattr(engines, "_vkinfer_factory", broken)
    out = tmp_path / "r.jsonl"
    # the record is kept, the other engines run, and the run fails (issue 23: it exited 0)
    assert bench_cli.main([str(path), "--runs", "2", "--warmup", "0", "--out", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"vkinfer bench: error: {path}: vkinfer on cpu (1 thread(s)): RuntimeError: kernel exploded "
                   "(simulated)"]
    vk, peer = records.read(out)
    assert vk["status"] == "error" and "kernel exploded" in vk["error"] and vk["macs"] is None
    assert peer["status"] == "ok" and peer["engine"] == "onnxruntime" and peer["agreement"] is None


def test_unsupported_model_exits_1_with_the_whole_reason(tmp_path, capsys):
    """Issue 23: a float model printed "error: UnsupportedModelError: the model has no quantized ten" (the table
    cuts at 60 characters) and exited 0."""
    from vkinfer.testing import zoo

    path = tmp_path / "float.onnx"
    path.write_bytes(zoo.mlp(in_features=8, hidden=8, batch=1).SerializeToString())
    out = tmp_path / "r.jsonl"
    assert main(["bench", str(path), "--peer", "none", "--runs", "2", "--warmup", "0", "--out", str(out)]) == 1
    cap = capsys.readouterr()
    [line] = cap.err.strip().splitlines()
    assert line.startswith(f"vkinfer bench: error: {path}: vkinfer on cpu (1 thread(s)): UnsupportedModelError: ")
    assert line.endswith("quantize it first, e.g. with onnxruntime.quantization.quantize_static"), line
    assert records.read(out)[0]["status"] == "error"  # the record is still written


def test_tflite_with_litert(tmp_path):
    from vkinfer.testing import tflite_zoo

    path = tmp_path / "t.tflite"
    path.write_bytes(tflite_zoo.tiny_cnn(seed=0))
    out = tmp_path / "r.jsonl"
    assert bench_cli.main([str(path), "--threads", "1,2", *FAST, "--pin", "0", "--out", str(out)]) == 0
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
    real = schedule.bench_model
    calls = []

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) > 1:  # the second (model, threads) group is stopped midway
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(bench_cli, "bench_model", interrupted)
    assert bench_cli.main([str(onnx_model), "--threads", "1,2", "--runs", "2", "--warmup", "0",
                           "--out", str(out)]) == 130
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


# --------------------------------------------------------------------------------------------- issue 13, part 2

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _is_png(path) -> bool:
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == PNG_MAGIC


def test_plot_and_per_layer_end_to_end(onnx_model, tmp_path, capsys):
    out, plots = tmp_path / "r.jsonl", tmp_path / "plots"
    assert main(["bench", str(onnx_model), "--device", "cpu", *FAST, "--per-layer", "--plot", str(plots),
                 "--out", str(out)]) == 0
    vk, peer = records.read(out)
    assert peer["per_layer"] is None  # only vkinfer's sessions are profiled
    rows = vk["per_layer"]
    # one entry per native operator of the session's CPU segment (an independent count: the segment itself)
    sess = vkinfer.InferenceSession(str(onnx_model), device="cpu", threads=1)
    feed = load.load_model(str(onnx_model)).feed
    plan = sess.plan(feed)
    ops = [op for seg in plan.segments for op in seg.runner.ops()]
    assert [e["op"] for e in rows] == ops
    assert all(e["measured_ms"] > 0 and e["device"] == "cpu" for e in rows)
    # every node of the graph owns at least one operator; the rest are the segment's edge conversions
    assert {e["node"] for e in rows} - {"<edge>"} == {n.name for n in sess.graph.nodes}
    assert all(e["predicted_ms"] is None or e["predicted_ms"] > 0 for e in rows)
    pngs = sorted(p.name for p in plots.iterdir())
    assert pngs == ["latency.png", "per_layer-m-vkinfer-cpu-t1.png"]
    assert all(_is_png(plots / p) for p in pngs)


def test_per_layer_on_vulkan_and_auto(onnx_model):
    from vkinfer.benchmark.conditions import vulkan_devices

    # make setup installs lavapipe: like the rest of the suite, this test needs a Vulkan device
    assert isinstance(vulkan_devices(), list), vulkan_devices()
    m = load.load_model(str(onnx_model))
    sess = vkinfer.InferenceSession(m.data, device="vulkan", threads=1)
    sess.run(None, m.feed)
    rows = layer_times.per_layer(sess, m.feed, 1, rounds=3)
    assert [e["node"] for e in rows] == [n.name for n in sess.graph.nodes]
    assert all(e["device"].startswith("vulkan") and e["measured_ms"] >= 0 for e in rows)
    assert sum(e["measured_ms"] for e in rows) > 0


def test_per_layer_on_vulkan_of_a_model_with_a_float_input(tmp_path):
    """A QuantizeLinear on the CPU hands its output to Vulkan packed (form_key/packed_key): the per-layer twins
    must read the same keys. Before the fix every such model warned KeyError: 'input_quantized'."""
    from vkinfer.testing import zoo

    q = zoo.quantize(zoo.mlp(in_features=16, hidden=32, batch=8), fmt="qoperator", num_calib=2)
    m = load.load_model(_write(tmp_path / "mlp.onnx", q.SerializeToString()))
    sess = vkinfer.InferenceSession(m.data, device="vulkan", threads=1)
    sess.run(None, m.feed)
    plan = sess.plan(m.feed)
    assert plan.segments[0].runner.packed_io  # the handoff this test is about
    rows = layer_times.per_layer(sess, m.feed, 1, rounds=2)
    named = {e["node"] for e in rows} - {"<edge>"}
    assert named == {n.name for n in sess.graph.nodes}  # the CPU quantize node (packed emitter) included
    assert any(e["device"].startswith("vulkan") and e["measured_ms"] > 0 for e in rows)


def _write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def test_vulkan_runs_cap_spreads_runs():
    e = engines.Engine("vkinfer", "vulkan", cap=3)
    rounds = [r for r in range(2 + 12) if schedule._in_round(e, r, 12, 2)]
    assert rounds == [0, 1, 5, 9, 13]  # both warm-up rounds, then 3 timed rounds spread over 12
    vk = [{"index": 1, "name": "llvmpipe", "type": "cpu"}]
    assert schedule.vulkan_cap("vulkan", vk, 50, None) == schedule.SOFT_VULKAN_RUNS
    assert schedule.vulkan_cap("vulkan", [{"index": 0, "name": "gpu", "type": "discrete-gpu"}], 50, None) is None
    assert schedule.vulkan_cap("vulkan:1", vk, 50, 7) == 7 and schedule.vulkan_cap("cpu", vk, 50, 7) is None
    assert schedule.vulkan_cap("vulkan", vk, 5, None) is None  # fewer runs than the cap: all of them


def test_vulkan_runs_flag_limits_rows(onnx_model, tmp_path, monkeypatch):
    calls = []

    def fake_cap(device, vk, runs, vulkan_runs):
        calls.append((device, vulkan_runs))
        return vulkan_runs if device == "cpu:fake" else None

    monkeypatch.setattr(schedule, "vulkan_cap", fake_cap)
    out = tmp_path / "r.jsonl"
    assert bench_cli.main([str(onnx_model), "--runs", "6", "--warmup", "1", "--vulkan-runs", "2", "--peer", "none",
                           "--out", str(out)]) == 0
    [r] = records.read(out)
    assert calls == [("cpu", 2)] and r["runs"] == 6 and len(r["latencies_ms"]) == 6


def test_config_json_and_toml(onnx_model, tmp_path):
    from vkinfer.testing import tflite_zoo

    (tmp_path / "t.tflite").write_bytes(tflite_zoo.tiny_cnn(seed=0))
    x = load.load_model(str(onnx_model)).feed
    [(name, arr)] = x.items()
    np.savez(tmp_path / "in.npz", **{name: np.zeros_like(arr)})
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"models": [{"path": onnx_model.name, "name": "mine", "inputs": "in.npz"},
                                          "t.tflite"]}))
    out = tmp_path / "r.jsonl"
    assert main(["bench", "--config", str(cfg), *FAST, "--out", str(out)]) == 0
    recs = records.read(out)
    assert [(r["model"], r["engine"]) for r in recs] == [("mine", "vkinfer"), ("mine", "onnxruntime"),
                                                         ("t.tflite", "vkinfer"), ("t.tflite", "litert")]
    assert all(r["status"] == "ok" for r in recs)
    # the given input was used: vkinfer on zeros agrees with ORT on zeros
    assert recs[1]["agreement"]["identical_fraction"] == 1.0
    [m, _] = load.load_config(str(cfg))
    np.testing.assert_array_equal(m.feed[name], np.zeros_like(arr))
    toml = tmp_path / "c.toml"
    np.save(tmp_path / "in.npy", np.zeros_like(arr))
    toml.write_text(f'[[models]]\npath = "{onnx_model.name}"\ninputs = "in.npy"\n')
    [m] = load.load_config(str(toml))
    assert m.label == onnx_model.name and m.feed[name].dtype == arr.dtype


@pytest.mark.parametrize("text, culprit", [
    ("{not json", "not valid JSON"),
    ('{"models": []}', "models must be a non-empty list"),
    ('{"model": ["m.onnx"]}', "one key, models"),
    ('{"models": [{"path": "m.onnx", "speed": 1}]}', "models[0]: unknown key(s) speed"),
    ('{"models": [{"name": "x"}]}', "models[0]: needs a path"),
    ('{"models": ["nothere.onnx"]}', "nothere.onnx"),
    ('{"models": [{"path": "m.onnx", "inputs": "wrong.npz"}]}', "the model's inputs are"),
    ('{"models": [{"path": "m.onnx", "inputs": "nothere.npz"}]}', "cannot read inputs"),
])
def test_bad_config_exit_2(onnx_model, tmp_path, capsys, text, culprit):
    np.savez(tmp_path / "wrong.npz", other=np.zeros(3, np.uint8))
    cfg = tmp_path / "c.json"
    cfg.write_text(text)
    assert main(["bench", "--config", str(cfg), "--out", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vkinfer bench: error: --config ") and culprit in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.jsonl").exists()


def test_zoo_builds_into_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VKINFER_BENCH_ZOO", str(tmp_path / "zoo"))
    [m] = bench_zoo.zoo_models(["mlp/qoperator"])
    assert m.label == "zoo:mlp/qoperator" and not m.tflite and (tmp_path / "zoo").is_dir()
    mtime = next((tmp_path / "zoo").iterdir()).stat().st_mtime_ns
    [m2] = bench_zoo.zoo_models(["mlp/qoperator"])  # cached: not rebuilt
    assert m2.data == m.data and next((tmp_path / "zoo").iterdir()).stat().st_mtime_ns == mtime
    a = bench_cli.parse_args(["--zoo"])
    assert a.devices == ["cpu", "vulkan"] and a.models == []


@pytest.mark.parametrize("args, culprit", [
    ([], "no models"),
    (["{m}", "--vulkan-runs", "0"], "--vulkan-runs must be at least 1"),
    (["{m}", "--dataset", "{m}"], "--dataset"),
    (["{m}", "--ray", "127.0.0.1:1"], "--ray"),
])
def test_bad_new_options_exit_2(onnx_model, tmp_path, capsys, monkeypatch, args, culprit):
    argv = ["bench", *(a.format(m=onnx_model) for a in args), "--out", str(tmp_path / "r.jsonl")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("vkinfer bench: error: ") and culprit in err and len(err.strip().splitlines()) == 1


def test_progress_silent_when_not_a_terminal(onnx_model, tmp_path, capsys):
    assert bench_cli.main([str(onnx_model), "--runs", "3", "--warmup", "0", "--peer", "none",
                           "--out", str(tmp_path / "r.jsonl")]) == 0
    assert capsys.readouterr().err == ""


def test_progress_counts_rounds(monkeypatch):
    seen = []
    e = [engines.Engine("vkinfer", "cpu", run=lambda: []), engines.Engine("onnxruntime", "cpu", run=lambda: [])]
    schedule.interleave(e, 4, 2, seen.append)
    assert sum(seen) == 6 and all(len(x.latencies) == 4 for x in e)
    broken = [engines.Engine("vkinfer", "cpu", status="error")]
    seen.clear()
    schedule.interleave(broken, 4, 2, seen.append)
    assert sum(seen) == 6
