"""ONNX Runtime's Python API on vkinfer (vkinfer/ort.py): one script written for onnxruntime, run with
`import onnxruntime as ort` and with `import vkinfer as ort`, gives the same bits on every vkinfer device (cpu,
vulkan, auto), with onnxruntime in the same test as the oracle; then providers, SessionOptions, RunOptions,
io_binding (a bound output array filled in place), profiling (one event per layer per run), model metadata,
NodeArg.quantization, and every bad-input path.
"""

from __future__ import annotations

import copy
import functools
import json
import subprocess
import sys
import tracemalloc

import numpy as np
import onnx
import onnxruntime
import pytest
from onnx import TensorProto, helper, numpy_helper

import vkinfer
import vkinfer.ort
from vkinfer.testing import zoo

# (builder, kwargs, format): reduce_range keeps ORT's u8 x s8 kernels exact (tests/models/test_model_zoo.py).
MODELS = {"mobilenet_v2-qoperator": ("mobilenet_v2", dict(width=0.25, size=32, num_classes=10), "qoperator"),
          "shufflenet-qdq": ("shufflenet_like", dict(size=32), "qdq"),
          "resnext-qoperator": ("resnext_like", dict(size=16), "qoperator")}
# what a script asks for -> the vkinfer device it gets
PROVIDERS = {"cpu": ["CPUExecutionProvider"], "vulkan": ["VulkanExecutionProvider"],
             "auto": ["VulkanExecutionProvider", "CPUExecutionProvider"]}


pytestmark = pytest.mark.usefixtures("quiet_quantizer")


@functools.cache
def _model(key: str) -> bytes:
    name, kw, fmt = MODELS[key]
    return zoo.quantize(zoo.BUILDERS[name](**kw), fmt=fmt, reduce_range=True).SerializeToString()


def _feeds(model: bytes, n: int = 3) -> list[dict[str, np.ndarray]]:
    m = onnx.load_model_from_string(model)
    return [zoo.random_inputs(m, seed=40 + k) for k in range(n)]


def ort_script(ort, model: bytes, feeds: list[dict[str, np.ndarray]], wanted: list[str]):
    """What a user writes for onnxruntime (nothing vkinfer-specific): options, providers the machine has, run,
    run with chosen outputs and RunOptions, io_binding, metadata."""
    providers = [p for p in wanted if p in ort.get_available_providers()] or ["CPUExecutionProvider"]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(model, sess_options=opts, providers=providers)
    inp = sess.get_inputs()[0]
    outs = [o.name for o in sess.get_outputs()]
    results = [sess.run(None, {inp.name: feed[inp.name]}) for feed in feeds]
    run_opts = ort.RunOptions()
    run_opts.log_severity_level = 3
    results.append(sess.run([outs[0]], {inp.name: feeds[0][inp.name]}, run_opts))
    binding = sess.io_binding()
    binding.bind_cpu_input(inp.name, feeds[1][inp.name])
    binding.bind_output(outs[0])
    sess.run_with_iobinding(binding)
    results.append(binding.copy_outputs_to_cpu())
    meta = sess.get_modelmeta()
    info = dict(inputs=[(i.name, i.shape, i.type) for i in sess.get_inputs()],
                outputs=[(o.name, o.shape, o.type) for o in sess.get_outputs()],
                meta=(meta.producer_name, meta.graph_name, meta.domain, meta.description, meta.graph_description,
                      meta.version, meta.custom_metadata_map),
                threads=sess.get_session_options().intra_op_num_threads,
                entry=sess.get_session_options().get_session_config_entry("session.intra_op.allow_spinning"))
    return results, info, sess


def _same(got, want, what):
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        for a, b in zip(g, w, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape, (what, k)
            assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), f"{what}: result {k} differs"


@pytest.mark.parametrize("key", list(MODELS))
def test_onnxruntime_script_runs_unchanged(key):
    model, feeds = _model(key), _feeds(_model(key))
    want, want_info, _ = ort_script(onnxruntime, model, feeds, PROVIDERS["auto"])
    for device, providers in PROVIDERS.items():
        got, info, sess = ort_script(vkinfer, model, feeds, providers)
        assert sess.device == device and isinstance(sess, vkinfer.InferenceSession)
        _same(got, want, f"{key} on {device}")
        assert info == want_info, device
        assert sess.get_providers() == (["CPUExecutionProvider"] if device == "cpu" else providers + (
            ["CPUExecutionProvider"] if device == "vulkan" else []))


def _eight_bit_io(model: bytes):
    """The model with its input QuantizeLinear and output DequantizeLinear taken off: uint8 in and out, as an
    8-bit pipeline feeds it. Also the removed nodes' (scale, zero point): what NodeArg.quantization must say."""
    m = onnx.load_model_from_string(model)
    g = m.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    x, y = g.input[0].name, g.output[0].name
    q = next(n for n in g.node if n.op_type == "QuantizeLinear" and n.input[0] == x)
    dq = next(n for n in g.node if n.op_type == "DequantizeLinear" and n.output[0] == y)
    params = [(float(inits[n.input[1]]), int(inits[n.input[2]])) for n in (q, dq)]
    in_shape = [d.dim_value for d in g.input[0].type.tensor_type.shape.dim]
    out_shape = [d.dim_value for d in g.output[0].type.tensor_type.shape.dim]
    g.node.remove(q)
    g.node.remove(dq)
    g.input[0].CopyFrom(helper.make_tensor_value_info(q.output[0], TensorProto.UINT8, in_shape))
    g.output[0].CopyFrom(helper.make_tensor_value_info(dq.input[0], TensorProto.UINT8, out_shape))
    return m.SerializeToString(), params


@pytest.mark.parametrize("key", ["mobilenet_v2-qoperator", "shufflenet-qdq"])
def test_node_arg_quantization(key):
    """QOperator: the QLinearConv reading the input, the QGemm writing the output; QDQ: the DequantizeLinear
    reading it, the QuantizeLinear writing it. Float tensors have none."""
    model, (q_in, q_out) = _eight_bit_io(_model(key))
    sess = vkinfer.InferenceSession(model, providers=["CPUExecutionProvider"])
    [i], [o] = sess.get_inputs(), sess.get_outputs()
    assert (i.type, o.type) == ("tensor(uint8)", "tensor(uint8)")
    assert i.quantization == q_in and o.quantization == q_out
    assert "quantization=" in repr(i)
    x = np.random.default_rng(3).integers(0, 256, i.shape, dtype=np.uint8)
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {i.name: x})
    _same([sess.run(None, {i.name: x})], [want], key)
    plain = vkinfer.InferenceSession(_model(key), device="cpu")
    assert plain.get_inputs()[0].quantization is None and plain.get_outputs()[0].quantization is None


def _conv_model() -> bytes:
    """QuantizeLinear -> QLinearConv (8 -> 16 channels, 32 x 32) -> DequantizeLinear: a 64 KiB float output."""
    rng = np.random.default_rng(5)
    c = {"xs": np.float32(0.02), "xz": np.uint8(128), "w": rng.integers(-60, 60, (16, 8, 3, 3), dtype=np.int8),
         "ws": np.float32(0.004), "wz": np.int8(0), "ys": np.float32(0.05), "yz": np.uint8(120),
         "b": rng.integers(-500, 500, 16, dtype=np.int32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["yq"],
                              pads=[1, 1, 1, 1], kernel_shape=[3, 3]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 32, 32])],
                          initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in c.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], producer_name="test", doc_string="a conv",
                          model_version=7)
    m.ir_version = 8
    helper.set_model_props(m, {"author": "vkinfer tests"})
    return m.SerializeToString()


def test_io_binding_fills_the_callers_array():
    model = _conv_model()
    x = np.random.default_rng(6).standard_normal((1, 8, 32, 32)).astype(np.float32)
    [want] = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for device in ("cpu", "vulkan"):
        sess = vkinfer.InferenceSession(model, providers=PROVIDERS[device])
        buf = np.full((1, 16, 32, 32), np.nan, np.float32)
        address = buf.ctypes.data
        b = sess.io_binding()
        b.bind_cpu_input("x", x)
        b.bind_output("y", buffer=buf)
        for _ in range(3):
            sess.run_with_iobinding(b)
            [v] = b.get_outputs()
            assert v.numpy() is buf and buf.ctypes.data == address and v.shape() == [1, 16, 32, 32]
            assert np.array_equal(buf, want), device
        [copied] = b.copy_outputs_to_cpu()
        assert copied is not buf and np.array_equal(copied, want)
        # The plan's one native call (the runner run() uses) writes into the bound array: no output is allocated
        assert sess._fast.plan.native(sess._threads()) is not None
        tracemalloc.start()
        try:
            sess.run_with_iobinding(b)
            bound_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.reset_peak()
            sess.run(None, {"x": x})
            run_peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert bound_peak < buf.nbytes // 8 <= run_peak, (device, bound_peak, run_peak)
        # ONNX Runtime's own forms: a pointer with element type and shape, an OrtValue
        out2 = np.empty_like(buf)
        b.bind_output("y", "cpu", 0, np.float32, [1, 16, 32, 32], out2.ctypes.data)
        b.bind_input("x", "cpu", 0, np.float32, list(x.shape), x.ctypes.data)
        sess.run_with_iobinding(b)
        assert np.array_equal(out2, want)
        ov = vkinfer.OrtValue.ortvalue_from_shape_and_type([1, 16, 32, 32], TensorProto.FLOAT)
        b.clear_binding_outputs()
        b.bind_ortvalue_output("y", ov)
        b.clear_binding_inputs()
        b.bind_ortvalue_input("x", vkinfer.OrtValue.ortvalue_from_numpy(x))
        sess.run_with_iobinding(b)
        assert np.array_equal(ov.numpy(), want) and ov.data_type() == "tensor(float)"
        # A bound output over the input's own memory: the general path (a copy after the run), not a native call
        # that would write what it still reads
        mem = np.zeros(2 * buf.size, np.float32)
        x_in, y_over = mem[:x.size].reshape(x.shape), mem[:buf.size].reshape(buf.shape)
        x_in[...] = x
        b.clear_binding_inputs()
        b.clear_binding_outputs()
        b.bind_cpu_input("x", x_in)
        b.bind_output("y", buffer=y_over)
        sess.run_with_iobinding(b)
        assert np.array_equal(y_over, want), device
        b.clear_binding_outputs()  # nothing bound: every output, freshly allocated
        b.bind_cpu_input("x", x)
        sess.run_with_iobinding(b)
        assert np.array_equal(b.get_outputs()[0].numpy(), want)


def test_io_binding_bad_input():
    sess = vkinfer.InferenceSession(_conv_model(), device="cpu")
    b = sess.io_binding()
    with pytest.raises(ValueError, match=r"unknown input 'z'; the model's inputs: \['x'\]"):
        b.bind_cpu_input("z", np.zeros(3, np.float32))
    with pytest.raises(ValueError, match=r"unknown output 'z'; the model's outputs: \['y'\]"):
        b.bind_output("z")
    for buf, msg in [(np.zeros((1, 16, 32, 32), np.float64), "output 'y' is float32, the buffer is float64"),
                     (np.zeros((1, 16, 32, 31), np.float32), r"output 'y' has shape \[1, 16, 32, 32\]"),
                     (np.zeros((1, 16, 32, 64), np.float32)[..., ::2], "output 'y'.*C-contiguous"),
                     ([0.0], "output 'y': buffer must be a numpy array")]:
        with pytest.raises(ValueError, match=msg):
            b.bind_output("y", buffer=buf)
    with pytest.raises(ValueError, match="host memory only"):
        b.bind_output("y", device_type="cuda")
    with pytest.raises(ValueError, match="host memory only"):
        b.bind_input("x", "cuda", 0, np.float32, [1, 8, 32, 32], 1234)
    with pytest.raises(RuntimeError, match="run_with_iobinding"):
        b.get_outputs()
    with pytest.raises(ValueError, match="io_binding"):
        vkinfer.InferenceSession(_conv_model(), device="cpu").run_with_iobinding(b)


@pytest.mark.parametrize("device", ["cpu", "vulkan", "auto", "reference"])
def test_profiling_writes_one_event_per_layer(tmp_path, device):
    model = _model("mobilenet_v2-qoperator")
    opts = vkinfer.SessionOptions()
    opts.enable_profiling = True
    opts.profile_file_prefix = str(tmp_path / "prof")
    opts.intra_op_num_threads = 1
    kw = {"device": device} if device == "reference" else {"providers": PROVIDERS[device]}
    sess = vkinfer.InferenceSession(model, opts, **kw)
    feeds = _feeds(model, 2)
    want = [onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, f) for f in feeds]
    tag = vkinfer.RunOptions()
    tag.logid = "second"
    got = [sess.run(None, feeds[0]), sess.run(None, feeds[1], tag)]
    _same(got, want, f"profiled {device}")
    path = sess.end_profiling()
    assert path.startswith(str(tmp_path / "prof_")) and path.endswith(".json")
    assert sess.end_profiling() == ""  # stopped
    events = json.loads(open(path).read())
    assert all(set(e) == {"cat", "pid", "tid", "dur", "ts", "ph", "name", "args"} and e["ph"] == "X" and
               isinstance(e["ts"], int) and isinstance(e["dur"], int) and e["dur"] >= 0 for e in events)
    assert [e["name"] for e in events if e["cat"] == "Session"] == ["session_initialization", "model_run",
                                                                      "model_run"]
    runs = [e for e in events if e["name"] == "model_run"]
    assert [r["args"]["run_tag"] for r in runs] == ["", "second"]
    names = [n.name for n in sess.graph.nodes]
    for k in range(2):
        nodes = [e for e in events if e["cat"] == "Node" and e["args"]["run"] == k]
        assert sorted(e["name"] for e in nodes) == sorted(f"{n}_kernel_time" for n in names), (device, k)
        ops = {f"{n.name}_kernel_time": n.op for n in sess.graph.nodes}
        assert all(e["args"]["op_name"] == ops[e["name"]] for e in nodes)
        assert all(e["args"]["provider"] in ("CPUExecutionProvider", "VulkanExecutionProvider") for e in nodes)
        assert sum(e["args"]["dur_ns"] for e in nodes) > 0
        assert all(runs[k]["ts"] <= e["ts"] <= runs[k]["ts"] + runs[k]["dur"] + 1 for e in nodes if
                   "timing" not in e["args"])
    if device == "vulkan":
        on_vk = [e for e in events if e["cat"] == "Node" and e["args"]["provider"] == "VulkanExecutionProvider"]
        assert on_vk and sum(e["args"]["dur_ns"] for e in on_vk) > 0
    if device == "cpu":
        # every node's time is its native operators' (a Flatten is an alias of its input: none)
        assert all(e["args"]["native_ops"] or e["args"]["op_name"] == "Flatten" for e in events if e["cat"] == "Node")
    assert np.array_equal(sess.run(None, feeds[0])[0], want[0][0])  # runs on after profiling ends


def test_modelmeta_onnx_and_tflite():
    model = _conv_model()
    want = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).get_modelmeta()
    got = vkinfer.InferenceSession(model, device="cpu").get_modelmeta()
    for f in ("producer_name", "graph_name", "domain", "description", "graph_description", "version",
              "custom_metadata_map"):
        assert getattr(got, f) == getattr(want, f), f
    assert (got.producer_name, got.description, got.version, got.custom_metadata_map) == (
        "test", "a conv", 7, {"author": "vkinfer tests"})
    from ai_edge_litert import schema_py_generated as schema

    from vkinfer.testing import tflite_zoo

    blob = tflite_zoo.tiny_cnn(0)
    name = schema.Model.GetRootAsModel(blob, 0).Subgraphs(0).Name().decode()  # the file's, by litert's reader
    meta = vkinfer.InferenceSession(blob, device="cpu").get_modelmeta()
    assert (meta.producer_name, meta.description, meta.graph_name, meta.version, meta.custom_metadata_map) == (
        "vkinfer.testing.tflite_zoo", "vkinfer.testing.tflite_zoo", name, 3, {})


def test_providers_sessions_and_options():
    model = _conv_model()
    assert vkinfer.get_available_providers() == ["VulkanExecutionProvider", "CPUExecutionProvider"]
    assert vkinfer.get_all_providers() == ["VulkanExecutionProvider", "CPUExecutionProvider"]
    # "GPU" only where a Vulkan device is not a CPU implementation (lavapipe, SwiftShader): an H100 said "GPU"
    gpu = any(d.type in ("discrete", "integrated", "virtual") for d in vkinfer.devices())
    assert vkinfer.get_device() == ("GPU" if gpu else "CPU")
    name = vkinfer.devices()[0].name.split()[0].lower()  # "llvmpipe" here, "nvidia" on an H100
    s = vkinfer.InferenceSession(model, providers=[("VulkanExecutionProvider", {"device": name})])
    opts = s.get_provider_options()
    assert s.device == f"vulkan:{name}" and name in opts["VulkanExecutionProvider"]["device"].lower()
    index = opts["VulkanExecutionProvider"]["device_id"]
    s = vkinfer.InferenceSession(model, providers=["VulkanExecutionProvider"], provider_options=[{"device_id": index}])
    assert s.device == f"vulkan:{index}" and s.get_provider_options()["VulkanExecutionProvider"]["device_id"] == index
    cpu_first = vkinfer.InferenceSession(model, providers=["CPUExecutionProvider", "VulkanExecutionProvider"])
    assert cpu_first.device == "cpu"  # as ONNX Runtime, the first provider that takes a node runs it
    assert vkinfer.InferenceSession(model).device == "auto"  # no providers: vkinfer's auto
    # vkinfer's own arguments keep working, a device string positionally included; SessionOptions positionally
    s = vkinfer.InferenceSession(model, "cpu", threads=1)
    assert (s.device, s._threads(), s.get_providers()) == ("cpu", 1, ["CPUExecutionProvider"])
    o = vkinfer.SessionOptions()
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 1
    o.execution_mode = vkinfer.ExecutionMode.ORT_SEQUENTIAL
    o.graph_optimization_level = vkinfer.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = vkinfer.InferenceSession(model, o, device="cpu", placement={})
    assert (s.device, s._threads()) == ("cpu", 1)
    o.intra_op_num_threads = 2  # the session keeps a copy
    assert s.get_session_options().intra_op_num_threads == 1
    assert s.get_provider_options() == {"CPUExecutionProvider": {"intra_op_num_threads": "1"}}
    # onnxruntime's own SessionOptions are read too
    ro = onnxruntime.SessionOptions()
    ro.intra_op_num_threads = 1
    ro.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC
    s = vkinfer.InferenceSession(model, ro, providers=["CPUExecutionProvider"])
    assert s._threads() == 1 and s.get_session_options().graph_optimization_level == 1
    # RunOptions and empty output_names
    x = {"x": np.zeros((1, 8, 32, 32), np.float32)}
    assert len(s.run([], x)) == 1
    r = vkinfer.RunOptions()
    r.run_tag = "t"
    assert r.logid == "t"
    r.add_run_config_entry("k", "v")
    assert r.get_run_config_entry("k") == "v"
    r.terminate = True
    with pytest.raises(RuntimeError, match="terminate"):
        s.run(None, x, r)
    b = s.io_binding()
    b.bind_cpu_input("x", x["x"])
    with pytest.raises(RuntimeError, match="terminate"):
        s.run_with_iobinding(b, r)


def test_bad_input_is_named():
    model = _conv_model()
    x = np.zeros((1, 8, 32, 32), np.float32)
    for device in ("cpu", "vulkan"):
        s = vkinfer.InferenceSession(model, providers=PROVIDERS[device])
        with pytest.raises(ValueError, match=r"unknown input\(s\) \['images'\]; the model's inputs: \['x'\]"):
            s.run(None, {"images": x})
        with pytest.raises(ValueError, match=r"unknown output\(s\) \['z'\]; the model's outputs: \['y'\]"):
            s.run(["z"], {"x": x})
    with pytest.raises(ValueError, match=r"unknown execution provider 'CUDAExecutionProvider'; vkinfer's "
                                         r"providers: 'VulkanExecutionProvider', 'CPUExecutionProvider'"):
        vkinfer.InferenceSession(model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    cases = [(dict(providers="CPUExecutionProvider"), TypeError, "providers must be a list"),
             (dict(providers=[("CPUExecutionProvider", 3)]), TypeError, "options must be a dict"),
             (dict(providers=[3]), TypeError, r"providers\[0\]"),
             (dict(providers=["CPUExecutionProvider", "CPUExecutionProvider"]), ValueError, "listed twice"),
             (dict(providers=["VulkanExecutionProvider"], provider_options=[{"gpu": 1}]), ValueError,
              r"VulkanExecutionProvider: unknown option\(s\) \['gpu'\]; its options: \['device_id', 'device'\]"),
             (dict(providers=["VulkanExecutionProvider"], provider_options=[{"device_id": "x"}]), ValueError,
              "device_id must be a non-negative integer"),
             (dict(providers=["VulkanExecutionProvider"], provider_options=[{}, {}]), ValueError,
              "provider_options has 2 entries for 1 providers"),
             (dict(providers=["CPUExecutionProvider"], device="cpu"), ValueError, "not both"),
             (dict(sess_options=3), TypeError, "sess_options must be a vkinfer.SessionOptions"),
             (dict(gpu=1), TypeError, r"unexpected keyword argument\(s\) \['gpu'\]")]
    for kw, err, msg in cases:
        with pytest.raises(err, match=msg):
            vkinfer.InferenceSession(model, **kw)
    o = vkinfer.SessionOptions()
    o.intra_op_num_threads = 2
    with pytest.raises(ValueError, match="threads=1 and SessionOptions.intra_op_num_threads=2 disagree"):
        vkinfer.InferenceSession(model, o, threads=1)
    for field, value, err, msg in [
            ("intra_op_num_threads", -1, ValueError, "SessionOptions.intra_op_num_threads must be at least 0, got -1"),
            ("intra_op_num_threads", "2", TypeError, "SessionOptions.intra_op_num_threads must be an int"),
            ("intra_op_num_threads", True, TypeError, "intra_op_num_threads must be an int"),
            ("inter_op_num_threads", -3, ValueError, "inter_op_num_threads"),
            ("graph_optimization_level", 5, ValueError, "graph_optimization_level must be one of ORT_DISABLE_ALL"),
            ("graph_optimization_level", "all", TypeError, "graph_optimization_level must be a GraphOptimizationLevel"),
            ("log_severity_level", 9, ValueError, "log_severity_level must be from 0 to 4"),
            ("enable_profiling", 1, TypeError, "enable_profiling must be a bool"),
            ("profile_file_prefix", None, TypeError, "profile_file_prefix must be a str")]:
        with pytest.raises(err, match=msg):
            setattr(o, field, value)
    assert o.intra_op_num_threads == 2  # a refused value changes nothing
    with pytest.raises(AttributeError):
        o.intra_threads = 1
    with pytest.raises(RuntimeError, match="does not have configuration with key: nope"):
        o.get_session_config_entry("nope")
    with pytest.raises(TypeError, match="config entry 'k' must be a str"):
        o.add_session_config_entry("k", 1)
    r = vkinfer.RunOptions()
    with pytest.raises(TypeError, match="RunOptions.terminate must be a bool"):
        r.terminate = "yes"


def test_import_stays_light():
    """`import vkinfer` loads neither onnx nor the ORT layer; the names load on first use."""
    code = ("import sys, vkinfer; assert 'onnx' not in sys.modules and 'vkinfer.ort' not in sys.modules; "
            "S = vkinfer.InferenceSession; assert S is sys.modules['vkinfer.ort'].InferenceSession; "
            "assert vkinfer.tflite.Interpreter")
    subprocess.run([sys.executable, "-c", code], check=True)
    assert vkinfer.NodeArg is vkinfer.ort.NodeArg and copy.copy(vkinfer.SessionOptions()).intra_op_num_threads == 0
