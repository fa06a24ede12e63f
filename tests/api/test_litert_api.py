"""LiteRT's Python API on vkinfer (vkinfer/tflite.py): one script written for ai_edge_litert's Interpreter, run with
`from ai_edge_litert.interpreter import Interpreter` and with `from vkinfer.tflite import Interpreter`, gives the
same tensor details (names, indices, shapes, dtypes, quantization) and the same output bits on cpu, vulkan and auto,
with litert run in the same test as the oracle; then streaming state, signatures, resize_tensor_input, tensor()
views, NodeArg.quantization against litert's details, and the bad-input paths (the same error class as litert).
"""

from __future__ import annotations

import functools

import flatbuffers
import numpy as np
import pytest
from ai_edge_litert import interpreter as litert
from ai_edge_litert import schema_py_generated as schema

import vkinfer
from vkinfer import tflite as vktflite
from vkinfer.testing import tflite_zoo

DEVICES = ("cpu", "vulkan", "auto")
MODELS = {
    "tiny_cnn-int8": lambda: tflite_zoo.tiny_cnn(0),
    "tiny_cnn-uint8-dequantize": lambda: tflite_zoo.tiny_cnn(2, dtype="uint8", head="dequantize"),
    "ops_net": lambda: tflite_zoo.ops_net(0),
    "mobilenet_v2": lambda: tflite_zoo.mobilenet_v2(seed=0, size=32, width=0.35, num_classes=10),
    "add-int8": lambda: tflite_zoo.op_model("add", 1),  # two 8-bit inputs
    "softmax-uint8": lambda: tflite_zoo.op_model("softmax", 2, dtype="uint8"),
}


@functools.cache
def _blob(key: str) -> bytes:
    return MODELS[key]()


def litert_script(Interpreter, blob: bytes, feeds: int = 3, **kw):
    """What a user writes for ai_edge_litert: allocate, read the details, quantize real inputs with each input's
    own (scale, zero_point), set, invoke, get."""
    it = Interpreter(model_content=blob, num_threads=1, **kw)
    it.allocate_tensors()
    ins, outs = it.get_input_details(), it.get_output_details()
    rng = np.random.default_rng(7)
    results = []
    for _ in range(feeds):
        for d in ins:
            real = rng.uniform(-1.0, 1.0, d["shape"]).astype(np.float32)
            if d["dtype"] == np.float32:
                x = real
            else:
                scale, zero_point = d["quantization"]
                lim = np.iinfo(d["dtype"])
                x = np.clip(np.round(real / scale) + zero_point, lim.min, lim.max).astype(d["dtype"])
            it.set_tensor(d["index"], x)
        it.invoke()
        results.append([it.get_tensor(d["index"]) for d in outs])
    return ins, outs, results


def _same(a, b, path: str = "") -> None:
    """Deep equality of details dicts and outputs: same keys, types, dtypes, shapes and bits."""
    if isinstance(a, dict):
        assert list(a) == list(b), (path, list(a), list(b))
        for k in a:
            _same(a[k], b[k], f"{path}/{k}")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype and a.shape == b.shape, (path, a, b)
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8)), (path, a, b)
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), (path, a, b)
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{path}[{k}]")
    else:
        assert type(a) is type(b) and a == b, (path, a, b)


@pytest.mark.parametrize("key", list(MODELS))
def test_litert_script_runs_unchanged(key):
    blob = _blob(key)
    want = litert_script(litert.Interpreter, blob)
    for device in DEVICES:
        _same(litert_script(vktflite.Interpreter, blob, device=device), want, f"{key} on {device}")


def test_delegates_choose_the_device(tmp_path):
    blob = _blob("tiny_cnn-int8")
    path = tmp_path / "m.tflite"
    path.write_bytes(blob)
    want = litert_script(litert.Interpreter, blob)
    it = vktflite.Interpreter(model_path=str(path), experimental_delegates=[vktflite.load_delegate("vulkan")])
    assert it.session.device == "vulkan"
    name = vkinfer.devices()[0].name.split()[0].lower()  # the default Vulkan device, by name: any machine
    d = vktflite.load_delegate("vulkan", {"device": name})
    assert vktflite.Interpreter(model_content=blob, experimental_delegates=[d]).session.device == f"vulkan:{name}"
    assert vktflite.Interpreter(model_content=blob).session.device == "auto"
    _same(litert_script(vktflite.Interpreter, blob, experimental_delegates=[vktflite.load_delegate("cpu")]), want)


def test_tensor_names_indices_and_quantization_match_litert():
    """Every tensor litert describes with a numpy dtype has the same index and name here (from the file), and each
    model input's and output's NodeArg.quantization (the ONNX Runtime-style session) is litert's (scale,
    zero_point) for 8-bit tensors, None for float ones."""
    for key in MODELS:
        blob = _blob(key)
        ref = litert.Interpreter(model_content=blob)
        ref.allocate_tensors()
        mine = vktflite.Interpreter(model_content=blob, device="cpu")
        have = {d["index"]: d["name"] for d in mine.get_tensor_details()}
        for d in ref.get_tensor_details():
            if d["dtype"] in (np.float32, np.int32, np.int8, np.uint8, np.int64, np.int16):
                assert have.get(d["index"]) == d["name"], (key, d["index"], d["name"])
        sess = vkinfer.InferenceSession(blob, device="cpu")
        for args, details in ((sess.get_inputs(), ref.get_input_details()),
                              (sess.get_outputs(), ref.get_output_details())):
            assert [a.name for a in args] == [d["name"] for d in details], key
            for a, d in zip(args, details, strict=True):
                want = d["quantization"] if d["dtype"] in (np.int8, np.uint8) else None
                assert a.quantization == want, (key, a.name)
                assert a.shape == list(d["shape"]), (key, a.name)
        assert sum(a.quantization is not None for a in sess.get_inputs() + sess.get_outputs()) >= 1, key


def test_streaming_state_carries_across_invoke():
    """The keyword spotter keeps its ring buffers in resource variables: the same frames through one interpreter
    give litert's outputs at every window; reset_all_variables() starts the stream over."""
    blob = tflite_zoo.streaming_kws(0)
    frames = [np.random.default_rng(30 + k).uniform(-1.2, 1.2, (1, 1, 1, 10)).astype(np.float32) for k in range(12)]

    def stream(it):
        it.allocate_tensors()
        [d], outs = it.get_input_details(), it.get_output_details()
        seen = []
        for f in frames:
            it.set_tensor(d["index"], f)
            it.invoke()
            seen.append([it.get_tensor(o["index"]) for o in outs])
        return [o["name"] for o in outs], seen

    names, want = stream(litert.Interpreter(model_content=blob))
    assert len({w[0].tobytes() for w in want}) > 3  # the state really changes the outputs
    for device in ("cpu", "vulkan"):
        it = vktflite.Interpreter(model_content=blob, device=device)
        got_names, got = stream(it)
        assert got_names == names
        _same(got, want, device)
        it.reset_all_variables()
        it.set_tensor(it.get_input_details()[0]["index"], frames[0])
        it.invoke()
        _same([it.get_tensor(o["index"]) for o in it.get_output_details()], want[0], "after reset")


def with_signature(blob: bytes, key: str = "serving_default", rename: dict[str, str] | None = None) -> bytes:
    """The model with one SignatureDef over subgraph 0's inputs and outputs (as TFLite's converter writes
    them), names optionally renamed (through litert's own flatbuffer schema)."""
    m = schema.ModelT.InitFromPackedBuf(bytearray(blob), 0)
    sg = m.subgraphs[0]

    def tensor_map(indices):
        out = []
        for i in indices:
            t = schema.TensorMapT()
            name = sg.tensors[i].name.decode()
            t.name, t.tensorIndex = (rename or {}).get(name, name), int(i)
            out.append(t)
        return out

    sig = schema.SignatureDefT()
    sig.signatureKey, sig.subgraphIndex = key, 0
    sig.inputs, sig.outputs = tensor_map(sg.inputs), tensor_map(sg.outputs)
    m.signatureDefs = [sig]
    b = flatbuffers.Builder(1024)
    b.Finish(m.Pack(b), file_identifier=b"TFL3")
    return bytes(b.Output())


@pytest.mark.parametrize("key,rename", [("tiny_cnn-int8", {"input": "images", "logits": "z_logits"}),
                                        ("add-int8", {"x": "b", "y": "a"})])
def test_signature_runner_matches_litert(key, rename):
    blob = with_signature(_blob(key), rename=rename)
    ref = litert.Interpreter(model_content=blob)
    runner = ref.get_signature_runner()
    rng = np.random.default_rng(9)
    kwargs = {n: rng.integers(-128, 128, d["shape"]).astype(d["dtype"]) if d["dtype"] != np.float32 else
              rng.uniform(-1, 1, d["shape"]).astype(np.float32) for n, d in runner.get_input_details().items()}
    want = runner(**kwargs)
    for device in ("cpu", "vulkan"):
        it = vktflite.Interpreter(model_content=blob, device=device)
        assert it.get_signature_list() == ref.get_signature_list()
        mine = it.get_signature_runner("serving_default")
        _same(mine.get_input_details(), runner.get_input_details())
        _same(mine.get_output_details(), runner.get_output_details())
        _same(mine(**kwargs), want, device)
        with pytest.raises(ValueError, match="Invalid number of inputs"):
            mine()
        with pytest.raises(ValueError, match=r"Invalid Input name \(nope\)"):
            mine(nope=1, **dict(list(kwargs.items())[1:]))
    with pytest.raises(ValueError, match='Invalid signature_key provided: "nope"'):
        it.get_signature_runner("nope")


@pytest.mark.parametrize("key,shape", [("add-int8", (3, 8, 8, 16)), ("max_pool", (2, 8, 8, 16))])
def test_resize_tensor_input_matches_litert(key, shape):
    """A batch of 3 (2) through a model whose graph takes it: the details, the outputs' shapes and bits as
    litert's, then back to the declared shape."""
    blob = _blob(key) if key in MODELS else tflite_zoo.op_model(key, 3)
    index = len(key)

    def script(Interpreter, **kw):
        it = Interpreter(model_content=blob, **kw)
        for d in it.get_input_details():
            it.resize_tensor_input(d["index"], shape)
        it.allocate_tensors()
        rng = np.random.default_rng(index)
        for d in it.get_input_details():
            it.set_tensor(d["index"], rng.integers(-128, 128, d["shape"]).astype(d["dtype"]))
        it.invoke()
        got = (it.get_input_details(), it.get_output_details(), [it.get_tensor(d["index"]) for d in
                                                                   it.get_output_details()])
        for d in it.get_input_details():
            it.resize_tensor_input(d["index"], [1, 8, 8, 16])
        it.allocate_tensors()
        it.invoke()
        return got, [it.get_tensor(d["index"]).shape for d in it.get_output_details()]

    want = script(litert.Interpreter)
    assert tuple(want[0][0][0]["shape"]) == shape and want[0][1][0]["shape"][0] == shape[0]
    for device in ("cpu", "vulkan"):
        _same(script(vktflite.Interpreter, device=device), want, device)


def test_resize_that_the_model_cannot_take():
    """tiny_cnn RESHAPEs to a fixed [1, C] before its FULLY_CONNECTED: batch 2 is refused at allocate_tensors by
    litert and vkinfer alike (RuntimeError), and invoke then refuses to run."""
    blob = _blob("tiny_cnn-int8")
    for Interpreter, kw in ((litert.Interpreter, {}), (vktflite.Interpreter, {"device": "cpu"})):
        it = Interpreter(model_content=blob, **kw)
        it.allocate_tensors()
        it.resize_tensor_input(it.get_input_details()[0]["index"], [2, 16, 16, 3])
        with pytest.raises(RuntimeError):
            it.allocate_tensors()
        with pytest.raises(RuntimeError):
            it.invoke()
    # Other dimensions than the batch: the import fixed SAME padding for the file's spatial size (LiteRT would
    # recompute it), so vkinfer refuses them rather than compute something else.
    it = vktflite.Interpreter(model_content=tflite_zoo.op_model("max_pool", 3), device="cpu")
    it.resize_tensor_input(0, [1, 9, 9, 16])
    with pytest.raises(RuntimeError, match=r"except the batch \(first\) dimension; input 'x' is \[1, 8, 8, 16\]"):
        it.allocate_tensors()
    it = vktflite.Interpreter(model_content=blob, device="cpu")
    with pytest.raises(RuntimeError, match=r"tensor '.*' would be \[2, .*a shape the import fixed|cannot run"):
        it.resize_tensor_input(it.get_input_details()[0]["index"], [2, 16, 16, 3])
        it.allocate_tensors()
    with pytest.raises(ValueError, match=r"shape signature \[1, 16, 16, 3\]: with strict=True"):
        it.resize_tensor_input(it.get_input_details()[0]["index"], [2, 16, 16, 3], strict=True)
    with pytest.raises(ValueError, match="dimensions must be positive"):
        it.resize_tensor_input(it.get_input_details()[0]["index"], [0, 16, 16, 3])


def test_tensor_views():
    blob = _blob("tiny_cnn-int8")
    want = litert_script(litert.Interpreter, blob, feeds=1)
    it = vktflite.Interpreter(model_content=blob, device="cpu")
    it.allocate_tensors()
    [d], [o, _] = it.get_input_details(), it.get_output_details()
    inp, out = it.tensor(d["index"]), it.tensor(o["index"])
    x = np.random.default_rng(7).uniform(-1.0, 1.0, d["shape"]).astype(np.float32)  # litert_script's first feed
    inp()[...] = x
    held = out()
    it.invoke()
    assert out() is held and np.array_equal(held, want[2][0][0])
    assert np.array_equal(it.get_tensor(d["index"]), x)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # litert's Delegate.__del__
def test_bad_input_raises_as_litert_does():
    blob = _blob("tiny_cnn-int8")

    def both(call, err, match=None):
        """`call(Interpreter)` raises `err` with litert and with vkinfer (vkinfer's message matching `match`)."""
        for Interpreter in (litert.Interpreter, vktflite.Interpreter):
            with pytest.raises(err, match=match if Interpreter is vktflite.Interpreter else None):
                call(Interpreter)

    both(lambda cls: cls(), ValueError, "model_path` or `model_content` must be specified")
    both(lambda cls: cls(model_content=blob, model_path="m.tflite"), ValueError, "exactly one")
    both(lambda cls: cls(model_content=blob, num_threads="2"), ValueError, "num_threads should be int")
    both(lambda cls: cls(model_content=b"not a model at all!"), ValueError, "not a TFLite model")
    both(lambda cls: cls(model_content=blob).invoke(), RuntimeError, "not ready")
    both(lambda cls: cls(model_content=blob).get_tensor(7), ValueError, "allocate_tensors")
    both(lambda cls: cls(model_content=blob).set_tensor(7, np.zeros((1, 16, 16, 3), np.float32)), ValueError,
         "allocate_tensors")
    both(lambda cls: cls(model_content=blob).get_signature_runner(), ValueError, "model has 0 Signatures")

    def allocated(Interpreter):
        it = Interpreter(model_content=blob)
        it.allocate_tensors()
        return it

    both(lambda cls: allocated(cls).set_tensor(7, np.zeros((1, 16, 16, 3), np.float64)), ValueError,
         "got value of type float64 but expected type float32 for input 7, name: input")
    both(lambda cls: allocated(cls).set_tensor(7, np.zeros((1, 8, 16, 3), np.float32)), ValueError,
         r"got shape \[1, 8, 16, 3\] but expected \[1, 16, 16, 3\] for input 7, name: input")
    both(lambda cls: allocated(cls).set_tensor(999, np.zeros(1, np.float32)), ValueError,
         r"invalid tensor index 999 \(the model's tensors are 0 to 19")
    both(lambda cls: allocated(cls).get_tensor(999), ValueError, "invalid tensor index 999")
    both(lambda cls: allocated(cls).get_tensor(3), ValueError, "neither an input nor an output")
    for module in (litert, vktflite):  # a library that cannot be loaded
        with pytest.raises(OSError):
            module.load_delegate("libedgetpu.so.1")
    it = allocated(vktflite.Interpreter)
    with pytest.raises(ValueError, match=r"tensor 6 \('logits'\) is not an input of the model; its inputs: "
                                         r"\[\"7 \('input'\)\"\]"):
        it.set_tensor(6, np.zeros((1, 10), np.int8))
    with pytest.raises(ValueError, match="tensor index must be an int"):
        it.get_tensor("input")
    with pytest.raises(ValueError, match="subgraph 0"):
        it.get_tensor(7, subgraph_index=1)
    with pytest.raises(ValueError, match="not an input"):
        it.resize_tensor_input(6, [1, 10])
    with pytest.raises(ValueError):  # a ValueError too, as LiteRT documents
        vktflite.load_delegate("libedgetpu.so.1")
    with pytest.raises(ValueError, match="num_threads should be >= -1"):
        vktflite.Interpreter(model_content=blob, num_threads=-2)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['gpu'\]"):
        vktflite.Interpreter(model_content=blob, gpu=True)
    with pytest.raises(ValueError, match="not a vkinfer delegate"):
        vktflite.Interpreter(model_content=blob, experimental_delegates=[object()])
    with pytest.warns(RuntimeWarning, match="XNNPACK"):
        vktflite.Interpreter(model_content=blob, device="cpu",
                             experimental_op_resolver_type=vktflite.OpResolverType.BUILTIN_REF)
