"""vkinfer.benchmark.plots: PNGs of latency distributions, per-layer profiles and A/B comparisons, and
`vkinfer bench plot` on result files (bad input: one line, exit 2)."""

import numpy as np
import pytest

from vkinfer.benchmark import plots, records
from vkinfer.benchmark.stats import summary
from vkinfer.cli import main as cli_main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png(path) -> bool:
    data = path.read_bytes()
    return len(data) > 1000 and data[:8] == PNG_MAGIC


def _rec(model, engine, lat, device="cpu", threads=1, **kw):
    r = records.new_record(model, engine, device, threads, runs=len(lat), warmup=0, **kw)
    r["latencies_ms"] = [float(v) for v in lat]
    r.update(summary(lat))
    return r


def _records(scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    # vkinfer at commit `seed` beside the same onnxruntime: the steady control compare needs to call a change
    cond = {"git_commit": f"{seed:040d}", "versions": {"onnxruntime": "1.20.1"}}
    return [_rec("a.onnx", "vkinfer", scale * rng.normal(10, 0.2, 40), conditions=cond),
            _rec("a.onnx", "onnxruntime", rng.normal(12, 0.3, 40), conditions=cond),
            _rec("zoo:mlp/qoperator", "vkinfer", scale * rng.normal(1, 0.02, 40)),
            records.new_record("zoo:mlp/qoperator", "ncnn", "cpu", 1, status="missing", error="not installed")]


def test_latency_plot(tmp_path):
    p = plots.latency_plot(_records(), tmp_path / "l.png")
    assert _png(p)


def test_latency_plot_single_run_and_empty(tmp_path):
    assert _png(plots.latency_plot([_rec("m", "vkinfer", [3.0])], tmp_path / "one.png"))
    with pytest.raises(ValueError, match="no records"):
        plots.latency_plot([], tmp_path / "none.png")


def test_per_layer_plot(tmp_path):
    r = _rec("m", "vkinfer", [1.0, 1.1])
    r["per_layer"] = [{"node": "conv1", "device": "cpu", "op": "conv", "measured_ms": 0.2, "predicted_ms": 0.25},
                      {"node": "<edge>", "device": "cpu", "op": "transpose", "measured_ms": 0.01,
                       "predicted_ms": None}]
    assert _png(plots.per_layer_plot(r, tmp_path / "p.png"))
    paths = plots.write_all([r], tmp_path / "d")
    assert [p.name for p in paths] == ["latency.png", "per_layer-m-vkinfer-cpu-t1.png"]
    with pytest.raises(ValueError, match="no per_layer"):
        plots.per_layer_plot(_rec("m", "vkinfer", [1.0]), tmp_path / "x.png")


def test_ab_plot(tmp_path):
    from vkinfer.benchmark.compare import compare

    results = compare(_records(), _records(scale=1.1, seed=1))
    assert any(r["verdict"] == "slower" for r in results)
    assert _png(plots.ab_plot(results, tmp_path / "ab.png"))
    with pytest.raises(ValueError, match="no compared pairs"):
        plots.ab_plot([r for r in results if r["ratio"] is None], tmp_path / "none.png")


def test_bench_plot_command(tmp_path, capsys, monkeypatch):
    base, new = tmp_path / "base.jsonl", tmp_path / "new.jsonl"
    records.write_all(base, _records())
    records.write_all(new, _records(scale=1.1, seed=1))
    out = tmp_path / "out"
    assert plots.main([str(base), "--compare", str(new), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["ab.png", "latency-new.png", "latency.png"]
    assert all(_png(p) for p in out.iterdir())
    # through the CLI (when the lead has added the dispatch line)
    import vkinfer.cli as cli

    seen = []
    monkeypatch.setattr(plots, "main", lambda argv: seen.append(argv) or 0)
    if cli_main(["bench", "plot", str(base), "--out", str(out)]) == 0 and seen:
        assert seen == [[str(base), "--out", str(out)]]
    del cli


@pytest.mark.parametrize("make, culprit", [
    (lambda d: [str(d / "missing.jsonl"), "--out", str(d / "o")], "cannot read results file"),
    (lambda d: [str(d / "bad.jsonl"), "--out", str(d / "o")], "not JSON"),
    (lambda d: [str(d / "base.jsonl"), "--compare", str(d / "other.jsonl"), "--out", str(d / "o")],
     "mismatched records"),
    (lambda d: [str(d / "base.jsonl")], "--out"),
])
def test_bench_plot_bad_input(tmp_path, capsys, make, culprit):
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    records.write_all(tmp_path / "base.jsonl", _records())
    records.write_all(tmp_path / "other.jsonl", [_rec("b.onnx", "vkinfer", [1.0, 2.0])])
    assert plots.main(make(tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("vkinfer bench plot: error: ") and culprit in err and len(err.strip().splitlines()) == 1
