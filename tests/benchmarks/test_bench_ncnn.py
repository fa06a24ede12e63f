"""`vkinfer bench`'s ncnn peer on a tiny model written by hand in ncnn's format (a text .param and its .bin:
https://github.com/Tencent/ncnn/wiki/param-and-model-file-structure) from the same weights as a float ONNX
model built with onnx.helper: ncnn's output equals ONNX Runtime's float output (an independent oracle of the
wiring: layout, blob names, batch dimension), then the bench of the quantized model with --ncnn-model; bad
paths and a corrupt .param."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from vkinfer.benchmark import engines, load, records, schedule
from vkinfer.benchmark.engines import ncnn as engines_ncnn
from vkinfer.cli import main

ncnn = pytest.importorskip("ncnn")

FAST = ["--runs", "3", "--warmup", "1"]
C, H, W, K, F = 3, 8, 8, 4, 10  # input channels and size, conv filters, classes


def _weights():
    """Seeded weights, each exactly a float16 value: ncnn's default options store some layers' weights as float16
    on a CPU with F16C (vkinfer bench keeps ncnn's defaults), which then loses nothing."""
    rng = np.random.default_rng(7)
    ws = (rng.normal(0, 0.3, (K, C, 3, 3)), rng.normal(0, 0.1, K), rng.normal(0, 0.2, (F, K * (H // 2) * (W // 2))),
          rng.normal(0, 0.1, F))
    return tuple(w.astype(np.float16).astype(np.float32) for w in ws)


def _onnx_float() -> onnx.ModelProto:
    """Conv 3x3 (pad 1) -> Relu -> MaxPool 2x2 -> Flatten -> Gemm, input "input" (1, C, H, W), output "output"."""
    cw, cb, fw, fb = _weights()
    nodes = [helper.make_node("Conv", ["input", "cw", "cb"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p1"], ["f1"]),
             helper.make_node("Gemm", ["f1", "fw", "fb"], ["output"], transB=1)]
    g = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, C, H, W])],
                          [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, F])],
                          [numpy_helper.from_array(a, n) for a, n in zip(_weights(), ("cw", "cb", "fw", "fb"),
                                                                          strict=True)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _write_ncnn(d, stem: str, names: tuple[str, str]):
    """The same network in ncnn's format; blobs named `names` (input, output). The .bin: each weight_data a
    4-byte flag (0: float32) then the floats, each bias raw float32 (ncnn's ModelBin types 0 and 1)."""
    cw, cb, fw, fb = _weights()
    i, o = names
    param = d / f"{stem}.param"
    param.write_text(f"""7767517
5 5
Input            in          0 1 {i}
Convolution      conv        1 1 {i} c1 0={K} 1=3 3=1 4=1 5=1 6={cw.size}
ReLU             relu        1 1 c1 r1
Pooling          pool        1 1 r1 p1 0=0 1=2 2=2 5=1
InnerProduct     fc          1 1 p1 {o} 0={F} 1=1 2={fw.size}
""")
    flag = np.zeros(1, np.uint32).tobytes()
    (d / f"{stem}.bin").write_bytes(flag + cw.tobytes() + cb.tobytes() + flag + fw.tobytes() + fb.tobytes())
    return param


@pytest.fixture
def models(tmp_path):
    """(float .onnx, quantized .onnx, ncnn .param with the ONNX blob names, one with its own names in0/out0)."""
    from vkinfer.testing import zoo

    fm = _onnx_float()
    fp, qp = tmp_path / "tiny-float.onnx", tmp_path / "tiny-q.onnx"
    fp.write_bytes(fm.SerializeToString())
    qp.write_bytes(zoo.quantize(fm, fmt="qoperator", per_channel=True, reduce_range=True).SerializeToString())
    return fp, qp, _write_ncnn(tmp_path, "tiny", ("input", "output")), _write_ncnn(tmp_path, "own", ("in0", "out0"))


@pytest.mark.parametrize("which", [2, 3])
def test_ncnn_engine_equals_ort_float(models, which):
    """vkinfer bench's ncnn engine (vkinfer.benchmark.engines.ncnn; blobs by the ONNX names, or the .param's first
    Input and last output) gives ORT's float output of the same float model, batch dimension included."""
    fp = models[0]
    m = load.load_model(str(fp))
    m.ncnn = load.ncnn_files(str(models[which]))
    want = ort.InferenceSession(str(fp), providers=["CPUExecutionProvider"]).run(None, m.feed)
    [e] = engines.make_engines(m, [], ["ncnn"], 1)
    assert e.status == "ok", e.error
    got = e.run()
    assert [g.shape for g in got] == [(1, F)] and got[0].dtype == np.float32
    np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-4)
    assert np.abs(want[0]).max() > 0.1  # not a trivially small output


def test_bench_quantized_with_ncnn_peer(models, tmp_path, capsys):
    fp, qp, param, _ = models
    out = tmp_path / "r.jsonl"
    assert main(["bench", str(qp), "--ncnn-model", str(param), "--device", "cpu", *FAST, "--out", str(out)]) == 0
    assert "ncnn" in capsys.readouterr().out
    recs = {r["engine"]: r for r in records.read(out)}
    assert list(recs) == ["vkinfer", "onnxruntime", "ncnn"]  # ncnn joins the default peers
    r = recs["ncnn"]
    assert r["status"] == "ok" and r["error"] is None and r["device"] == "cpu"
    assert len(r["latencies_ms"]) == 3 and min(r["latencies_ms"]) > 0 and r["p50_ms"] > 0
    assert r["create_cold_ms"] > 0 and r["conditions"]["versions"]["ncnn"] == ncnn.__version__
    ag = r["agreement"]
    assert ag["reference"] == "vkinfer" and ag["reference_device"] == "cpu" and 0 <= ag["identical_fraction"] <= 1
    # the float model against the quantized one, in the float domain: close, not exact (oracle: ORT's runs)
    x = load.load_model(str(qp)).feed
    qo = ort.InferenceSession(str(qp), providers=["CPUExecutionProvider"]).run(None, x)[0]
    fo = ort.InferenceSession(str(fp), providers=["CPUExecutionProvider"]).run(None, x)[0]
    assert qo.dtype == np.float32  # the quantized model ends in a DequantizeLinear
    assert ag["max_abs_diff"] == pytest.approx(np.abs(qo.astype(np.float64) - fo).max(), abs=2e-4)
    assert 0 < ag["max_abs_diff"] < 0.1 * np.abs(fo).max()
    # with an explicit --peer list, the list rules; ncnn named without a model is "missing", saying why
    out2 = tmp_path / "r2.jsonl"
    assert main(["bench", str(qp), "--peer", "ncnn", *FAST, "--out", str(out2)]) == 0
    r2 = [r for r in records.read(out2) if r["engine"] == "ncnn"][0]
    assert r2["status"] == "missing" and r2["error"] == engines_ncnn.NCNN_NEEDS and "--ncnn-model" in r2["error"]


def test_param_bin_pair_and_config(models, tmp_path):
    """FILE.param:FILE.bin, and a --config entry's ncnn (relative to the config file)."""
    fp, qp, param, _ = models
    moved = tmp_path / "weights.bin"
    moved.write_bytes(param.with_suffix(".bin").read_bytes())
    assert load.ncnn_files(f"{param}:{moved}") == (str(param), str(moved))
    cfg = tmp_path / "bench.json"
    cfg.write_text(json.dumps({"models": [{"path": qp.name, "name": "tiny", "ncnn": f"{param.name}:weights.bin"}]}))
    out = tmp_path / "r.jsonl"
    assert main(["bench", "--config", str(cfg), "--peer", "ncnn", *FAST, "--out", str(out)]) == 0
    recs = {r["engine"]: r for r in records.read(out)}
    assert recs["ncnn"]["status"] == "ok" and recs["ncnn"]["model"] == "tiny"
    assert recs["ncnn"]["agreement"]["reference"] == "vkinfer"


@pytest.mark.parametrize("spec, culprit", [("nope.param", "nope.param"), ("{p}:nope.bin", "nope.bin"),
                                           ("{d}/nobin.param", "nobin.bin")])
def test_bad_ncnn_model_path_exits_2(models, tmp_path, capsys, spec, culprit):
    qp, param = models[1], models[2]
    (tmp_path / "nobin.param").write_text(param.read_text())
    spec = spec.format(p=param, d=tmp_path)
    out = tmp_path / "r.jsonl"
    assert main(["bench", str(qp), "--ncnn-model", spec, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err and "--ncnn-model" in err and culprit in err
    assert not out.exists()


def test_ncnn_model_needs_one_model_and_config_keys(models, tmp_path, capsys):
    qp, param = models[1], models[2]
    assert main(["bench", str(qp), str(qp), "--ncnn-model", str(param)]) == 2
    assert "exactly one MODEL" in capsys.readouterr().err
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"models": [{"path": qp.name, "ncnn": "missing.param"}]}))
    assert main(["bench", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "models[0]: ncnn" in err and "missing.param" in err


@pytest.mark.parametrize("text", ["garbage\n", "7767517\n2 2\nInput in 0 1 x\n", "7767517\n1 1\nInput in 0 3 x\n",
                                  "7767517\n2 2\nInput in 0 1 x\nNoSuchLayer l 1 1 x y\n"])
def test_corrupt_param_is_an_error_record(models, tmp_path, text, capsys):
    qp, param = models[1], models[2]
    bad = tmp_path / "bad.param"
    bad.write_text(text)
    (tmp_path / "bad.bin").write_bytes(param.with_suffix(".bin").read_bytes())
    out = tmp_path / "r.jsonl"
    # an engine that fails on the model fails the run (exit 1, the reason on one line), its record kept
    assert main(["bench", str(qp), "--ncnn-model", str(bad), *FAST, "--out", str(out)]) == 1
    assert f"vkinfer bench: error: {qp}: ncnn on cpu" in capsys.readouterr().err
    recs = {r["engine"]: r for r in records.read(out)}
    assert recs["vkinfer"]["status"] == "ok" and recs["onnxruntime"]["status"] == "ok"
    r = recs["ncnn"]
    assert r["status"] == "error" and "ncnn" in r["error"] and r["latencies_ms"] == []
    if "NoSuchLayer" in text:  # well formed, refused by ncnn itself
        assert "load_param failed" in r["error"]


def test_ncnn_not_installed_is_missing(models, monkeypatch):
    fp, _, param, _ = models
    m = load.load_model(str(fp))
    m.ncnn = load.ncnn_files(str(param))
    real = engines._missing_module
    monkeypatch.setattr(engines, "_missing_module", lambda mod: mod == "ncnn" or real(mod))
    [e] = engines.make_engines(m, [], ["ncnn"], 1)
    assert e.status == "missing" and "not installed" in e.error


def test_agreement_with_an_8bit_reference_is_dequantized(models, tmp_path):
    """A quantized model whose output is uint8 (its final DequantizeLinear removed): ncnn's float output is
    compared with the reference's output dequantized by the QGemm's output scale and zero point, which gives
    the same difference as the model that dequantizes it itself."""
    fp, qp, param, _ = models
    q = onnx.load(str(qp))
    [dq] = [n for n in q.graph.node if n.op_type == "DequantizeLinear"]
    q.graph.node.remove(dq)
    q.graph.output[0].name = dq.input[0]
    q.graph.output[0].type.tensor_type.elem_type = TensorProto.UINT8
    qu = tmp_path / "tiny-q-u8.onnx"
    qu.write_bytes(q.SerializeToString())
    got = {}
    for path in (qp, qu):
        m = load.load_model(str(path))
        m.ncnn = load.ncnn_files(str(param))
        recs = {r["engine"]: r for r in schedule.bench_model(m, ["cpu"], ["ncnn"], 1, 2, 0, {})}
        assert recs["ncnn"]["status"] == "ok", recs["ncnn"]["error"]
        got[path] = recs["ncnn"]["agreement"]
    assert "note" not in got[qu] and got[qu]["max_abs_diff"] == pytest.approx(got[qp]["max_abs_diff"], abs=1e-5)
    # the scale found is the model's own
    scale = [numpy_helper.to_array(t) for t in q.graph.initializer if t.name == dq.input[1]][0]
    assert engines_ncnn._qparams(load.load_model(str(qu)))[1][0][0] == pytest.approx(float(scale))


def test_8bit_input_is_dequantized_for_ncnn(models, tmp_path):
    """A quantized model that takes uint8 (its QuantizeLinear removed): ncnn is fed that input dequantized with
    the QLinearConv's input scale and zero point, so its output is the float model's on those float values."""
    fp, qp, param, _ = models
    q = onnx.load(str(qp))
    [ql] = [n for n in q.graph.node if n.op_type == "QuantizeLinear"]
    q.graph.node.remove(ql)
    q.graph.input[0].name = ql.output[0]
    q.graph.input[0].type.tensor_type.elem_type = TensorProto.UINT8
    qu = tmp_path / "tiny-u8-in.onnx"
    qu.write_bytes(q.SerializeToString())
    m = load.load_model(str(qu))
    m.ncnn = load.ncnn_files(str(param))
    [x] = m.feed.values()
    assert x.dtype == np.uint8
    init = {t.name: numpy_helper.to_array(t) for t in q.graph.initializer}
    xf = (x.astype(np.float32) - init[ql.input[2]].astype(np.float32)) * init[ql.input[1]]
    want = ort.InferenceSession(str(fp), providers=["CPUExecutionProvider"]).run(None, {"input": xf})[0]
    [e] = engines.make_engines(m, [], ["ncnn"], 1)
    assert e.status == "ok", e.error
    np.testing.assert_allclose(e.run()[0], want, rtol=0, atol=1e-4)
