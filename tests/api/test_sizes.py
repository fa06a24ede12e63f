"""Sizes before memory (vkinfer/model/sizes.py, size_rules.py, slab.py): every tensor's size is checked against the
session's limits (2 GiB per tensor, 8 GiB of live activations by default; `max_tensor_bytes=`, `max_session_bytes=`)
before it is allocated. Models asking for 2**40 elements (Tile, Expand, Pad, a MaxPool whose padded input is that
large, a Tile of constants), mutated models of ../shared/regressions (tests/models/regressions/{nonclean,hang}: an
input of 4 GiB, a batch-65536 ShuffleNet, pads of 2**20) and a symbolic-batch MLP fed a batch of 2**20 are refused
with a ValueError naming the node (or input), its shape and the limit, in under a second at a peak RSS under 200 MB
(measured in a fresh interpreter: VmHWM, since getrusage's ru_maxrss keeps the forking parent's peak over exec).
Before, numpy allocated them in the trace (MemoryError, or minutes of work at gigabytes). The size rules are checked
against the kernels: a bound never understates an output.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import vkinfer
from vkinfer.model.graph import Node
from vkinfer.model.op_table import OPS
from vkinfer.model.size_rules import BOUNDS
from vkinfer.model.sizes import CURRENT, GiB, Limits, SizeLimitError
from vkinfer.session import InferenceSession

REGRESSIONS = Path(__file__).parent.parent / "models" / "regressions"
BIG = 1 << 20  # 2**20 x 2**20 = 2**40 elements


def _model(nodes, inputs, outputs, inits=(), opset=13) -> bytes:
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m.SerializeToString()


def _f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _u8(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.UINT8, shape)


def _dq(x: str, y: str) -> list:
    """x (uint8) -> y (float32) = x: the model is 8-bit (vkinfer runs quantized models only)."""
    return [numpy_helper.from_array(np.array(1, np.float32), f"{y}_s"),
            numpy_helper.from_array(np.array(0, np.uint8), f"{y}_z")], \
        helper.make_node("DequantizeLinear", [x, f"{y}_s", f"{y}_z"], [y], name="dq")


def _i64(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def bombs() -> dict[str, tuple[bytes, str]]:
    """Models of a few hundred bytes whose one node would make 2**40 elements (or pad its input to that): the
    node's name, which the error must give."""
    out = {}
    out["tile"] = (_model([helper.make_node("Tile", ["x", "r"], ["y"], name="tile")], [_u8("x", [1, 1])],
                          [_u8("y", None)], [_i64("r", [BIG, BIG])]), "tile")
    out["expand"] = (_model([helper.make_node("Expand", ["x", "s"], ["y"], name="expand")], [_u8("x", [1, 1])],
                            [_u8("y", None)], [_i64("s", [BIG, BIG])]), "expand")
    out["pad"] = (_model([helper.make_node("Pad", ["x", "p"], ["y"], name="pad")], [_u8("x", [1, 4])],
                         [_u8("y", None)], [_i64("p", [0, 0, BIG, BIG])]), "pad")
    k = BIG
    out["maxpool"] = (_model([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[k, k],
                                               pads=[k - 1] * 4, strides=[k, k])],
                             [_u8("x", [1, 1, 4, 4])], [_u8("y", None)]), "pool")
    # Constant inputs: constant folding at import runs the kernel (guarded: op_table.GUARDED), the trace refuses.
    const = [numpy_helper.from_array(np.zeros((1, 1), np.uint8), "c"), _i64("r", [BIG, BIG])]
    out["const tile"] = (_model([helper.make_node("Tile", ["c", "r"], ["t"], name="ctile"),
                                 helper.make_node("Add", ["t", "x"], ["y"], name="add")],
                                [_u8("x", [1, 1])], [_u8("y", None)], const), "ctile")
    inits, dq = _dq("x", "xf")
    out["float maxpool"] = (_model([dq, helper.make_node("MaxPool", ["xf"], ["y"], name="fpool", kernel_shape=[k, k],
                                                         pads=[k - 1] * 4, strides=[k, k])],
                                   [_u8("x", [1, 1, 4, 4])], [_f32("y", None)], inits), "fpool")
    return out


# A fresh interpreter makes each session and reports (seconds, error type, message) per case and its peak RSS.
_PROBE = textwrap.dedent("""
    import json, resource, sys, time, warnings
    import numpy as np
    import vkinfer
    from vkinfer.session import InferenceSession
    warnings.simplefilter("ignore")
    cases = json.loads(sys.stdin.read())
    out = {}
    for name, (path, kwargs, feed) in cases.items():
        t0 = time.perf_counter()
        try:
            s = InferenceSession(path if path.endswith((".onnx", ".tflite")) else bytes.fromhex(path), **kwargs)
            if feed is not None:
                s.run(None, {k: np.zeros(v[0], v[1]) for k, v in feed.items()})
            out[name] = [time.perf_counter() - t0, "ok", ""]
        except Exception as e:
            out[name] = [time.perf_counter() - t0, type(e).__name__, str(e)]
    # This process's peak RSS: VmHWM (getrusage's ru_maxrss keeps the forking parent's peak across exec on Linux).
    try:
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
        out["rss_mb"] = int(hwm) / 1024
    except (OSError, IndexError):
        out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps(out))
""")


def _probe(cases: dict) -> dict:
    r = subprocess.run([sys.executable, "-c", _PROBE], input=json.dumps(cases), capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _refused(got, node: str | None, limit: str = "per tensor") -> None:
    seconds, kind, msg = got
    assert kind in ("SizeLimitError", "ValueError"), (kind, msg)
    assert "shape [" in msg and f"bytes {limit}" in msg, msg
    if node is not None:
        assert f"node {node!r}" in msg, msg
    assert seconds < 1.0, (seconds, msg)


def test_bombs_refused_fast_and_small():
    """Tile/Expand/Pad to 2**40 elements and a MaxPool padded to 2**42: refused naming the node and its shape, each
    in under a second, the whole process (imports included) under 200 MB peak RSS. Before: MemoryError."""
    cases = {name: (data.hex(), {"device": "cpu"}, None) for name, (data, _) in bombs().items()}
    got = _probe(cases)
    for name, (_, node) in bombs().items():
        _refused(got[name], node)
    assert "[1048576, 1048576]" in got["tile"][2] and "2147483648 bytes per tensor" in got["tile"][2]
    assert "padded input" in got["maxpool"][2]
    assert got["rss_mb"] < 200, got


def test_regression_models_refused_fast_and_small():
    """The attack's shape bombs (../shared/regressions/README.md), each a clean ValueError in under a second (after
    the session is made) at under 200 MB peak RSS, on the reference and cpu devices:
    - nonclean/case_117471: ShuffleNet with an input of [1, 1048576, 32, 32] float32 (4 GiB), refused by name when
      the session is made (before: MemoryError in the trace);
    - hang/case_102017 and case_122545: a batch-65536 ShuffleNet whose Reshape keeps batch 1, and a MobileNetV3
      whose pads of 2**20 make a QLinearAdd's inputs disagree: the trace names the node from the shapes alone
      (before: every kernel ran on the whole tensors first, 21 s and 2.3 GB, or 65 s and 8 GB, then another
      error)."""
    root = REGRESSIONS
    refused = {"nonclean/case_117471_cpu.onnx": "graph input 'input' of shape [1, 1048576, 32, 32]"}
    at_run = {"hang/case_102017_cpu.onnx": ([[65536, 3, 32, 32], "float32"], "node reshape_11_node (Reshape)"),
              "hang/case_122545_cpu.onnx": ([[1, 3, 32, 32], "float32"], "node add_109_node")}
    cases = {}
    for dev in ("reference", "cpu"):
        for name in refused:
            cases[f"{name}:{dev}"] = (str(root / name), {"device": dev}, None)
        for name, (shape, _) in at_run.items():
            cases[f"{name}:{dev}"] = (str(root / name), {"device": dev}, {"input": shape})
    got = _probe(cases)
    for key, (seconds, kind, msg) in ((k, v) for k, v in got.items() if k != "rss_mb"):
        name = key.rsplit(":", 1)[0]
        assert kind in ("SizeLimitError", "ValueError", "ShapeError"), (key, kind, msg)
        want = refused[name] if name in refused else at_run[name][1]
        assert want in msg, (key, msg)
        assert seconds < 1.0, (key, seconds)
    assert got["rss_mb"] < 200, got


def test_auto_pad_input_checked_before_zeros(monkeypatch):
    """auto_pad is resolved at import by tracing zeros of the declared inputs (vkinfer/reference/_auto_pad.py
    resolve_graph): a declared input over the per-tensor limit (a [1, 1, 32768, 32768] float32 input: 4 GiB) is
    checked first and no zeros of it are made (before: numpy mapped 4 GiB of address space, a MemoryError under
    an address-space limit); the session's trace then refuses it by name, fast and small."""
    import importlib

    auto_pad = importlib.import_module("vkinfer.reference._auto_pad")
    q = [numpy_helper.from_array(np.array(1, np.float32), "s"), numpy_helper.from_array(np.array(0, np.uint8), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], name="q"),
             helper.make_node("MaxPool", ["q"], ["y"], name="pool", kernel_shape=[3, 3], auto_pad="SAME_UPPER")]
    model = _model(nodes, [_f32("x", [1, 1, 32768, 32768])], [_u8("y", None)], q)
    made = []
    zeros = np.zeros

    def spy(shape, dtype=float, *a, **k):
        made.append(int(np.prod(shape)) * np.dtype(dtype).itemsize)
        return zeros(shape, dtype, *a, **k)

    monkeypatch.setattr(auto_pad.np, "zeros", spy)
    with pytest.raises(SizeLimitError, match=r"graph input 'x' of shape \[1, 1, 32768, 32768\] \(float32\)"):
        InferenceSession(model, device="cpu")
    assert all(n <= 2 * GiB for n in made), made  # zeros of the inputs over the limit never made
    got = _probe({"same": (model.hex(), {"device": "cpu"}, None)})
    _refused(got["same"], None)
    assert got["rss_mb"] < 200, got


def test_pool_work_limits():
    """Pools whose work is absurd are refused on every device (SizeLimitError), naming the node, in under a second: a
    5000x5000 window (25 M taps: the references step over a window's taps one numpy pass each, minutes for one
    output), and a 300x300 window over a 1 GiB input (1.05 G outputs x 90,000 taps = 9.5e13 reads). Legal sizes
    both: no tensor over the limits (vkinfer/reference/_pool_shape.py MAX_WINDOW_TAPS, MAX_POOL_READS)."""
    def pool(n, k):
        return _model([helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=[k, k])],
                      [_u8("x", [1, 1, n, n])], [_u8("y", None)])

    cases = {}
    for dev in ("reference", "cpu"):
        cases[f"window:{dev}"] = (pool(5000, 5000).hex(), {"device": dev}, {"x": [[1, 1, 5000, 5000], "uint8"]})
        cases[f"reads:{dev}"] = (pool(32768, 300).hex(), {"device": dev}, {"x": [[1, 1, 32768, 32768], "uint8"]})
    got = _probe(cases)
    for key, (seconds, kind, msg) in ((k, v) for k, v in got.items() if k != "rss_mb"):
        assert kind == "SizeLimitError" and "node pool (MaxPool)" in msg and "over the work limit" in msg, (key, msg)
        assert seconds < 1.0, (key, seconds)
    assert "a window of 25000000 taps" in got["window:cpu"][2]
    assert "over 1054235961 outputs reads 94881236490000 elements" in got["reads:cpu"][2], got["reads:cpu"]
    assert got["rss_mb"] < 200, got


def test_softmax_of_a_large_input_traced_on_a_slab(monkeypatch):
    """A [1048576, 8] float input through QuantizeLinear, DequantizeLinear, Sigmoid and Softmax (the fuzzers'
    float_between mutant tests/models/regressions/fuzz/hang/onnx-0d46852e): the trace runs ORT's float32 Softmax
    on at most one row (its shape rule, reference/float_softmax.shape, stands in for it; model/slab.py ROWS cuts the
    axes ahead of the softmax axis where a kernel must run), never on all 1048576 (8.8 s in numpy); the answer is
    ONNX Runtime's."""
    import importlib

    sm = importlib.import_module("vkinfer.reference.float_softmax")
    rows = []
    orig = sm.softmax_rows

    def spy(v, log):
        rows.append(v.shape[0])
        return orig(v, log)

    monkeypatch.setattr(sm, "softmax_rows", spy)
    model = (REGRESSIONS / "fuzz" / "hang" / "onnx-0d46852e-15c4c45378.onnx").read_bytes()  # ... Sigmoid, Softmax
    x = np.random.default_rng(0).uniform(-2, 2, (BIG, 8)).astype(np.float32)
    y = InferenceSession(model, device="cpu").run(None, {"x": x})[0]  # the plan is traced for this feed
    assert max(rows, default=0) <= 1, rows
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(y, want)


def _mlp() -> bytes:
    """x [N, 4] uint8 -> DequantizeLinear -> MatMul (4, 4096) -> Relu -> MatMul (4096, 3): a batch of 2**20 makes a
    16 GiB hidden layer."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 4096)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4096, 3)).astype(np.float32), "w2")
    inits, dq = _dq("x", "xf")
    nodes = [dq, helper.make_node("MatMul", ["xf", "w1"], ["h"], name="hidden"),
             helper.make_node("Relu", ["h"], ["r"], name="relu"),
             helper.make_node("MatMul", ["r", "w2"], ["y"], name="out")]
    return _model(nodes, [_u8("x", ["N", 4])], [_f32("y", ["N", 3])], [w1, w2, *inits])


def test_symbolic_batch_refused_at_run():
    """The MLP runs at batch 5 (ONNX Runtime's bits); fed a batch of 2**20, the run is refused naming the hidden
    MatMul and its [1048576, 4096] output, in under a second and 200 MB (the feed itself is 4 MB)."""
    model = _mlp()
    x = np.random.default_rng(1).integers(0, 255, (5, 4), dtype=np.uint8)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    for dev in ("reference", "cpu"):
        np.testing.assert_array_equal(InferenceSession(model, device=dev).run(None, {"x": x})[0], want)
    got = _probe({"batch": (model.hex(), {"device": "cpu"}, {"x": [[1 << 20, 4], "uint8"]})})
    _refused(got["batch"], "hidden")
    assert "[1048576, 4096]" in got["batch"][2]
    assert got["rss_mb"] < 200, got


def _fan() -> bytes:
    """x [1, 65536] uint8 dequantized (256 KiB) and read by four nodes whose outputs Sum reads: 1.25 MiB live at
    the Sum."""
    ops = ["Relu", "Neg", "Abs", "Exp"]
    inits, dq = _dq("x", "xf")
    nodes = [dq, *(helper.make_node(op, ["xf"], [f"t{i}"], name=f"n{i}") for i, op in enumerate(ops))]
    nodes.append(helper.make_node("Sum", [f"t{i}" for i in range(4)], ["y"], name="sum"))
    return _model(nodes, [_u8("x", [1, 65536])], [_f32("y", [1, 65536])], inits)


def test_limits_are_settable():
    """Lower limits refuse what the defaults run: the per-tensor limit names the graph input, the per-session limit
    (the live activations: x and four 256 KiB branches) names the node whose output crosses it."""
    model = _fan()
    x = np.ones((1, 65536), np.uint8)
    want = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(InferenceSession(model, device="reference").run(None, {"x": x})[0], want)
    with pytest.raises(SizeLimitError, match=r"graph input 'x' of shape \[1, 65536\] .* over the limit of "
                                             r"60000 bytes per tensor"):
        InferenceSession(model, device="cpu", max_tensor_bytes=60_000)
    with pytest.raises(ValueError, match=r"node 'n3' \(Exp\): output 't3' of shape \[1, 65536\] .* would bring the "
                                         r"live tensors to 1310720 bytes, over the limit of 1200000 bytes per session"):
        InferenceSession(model, device="reference", max_session_bytes=1_200_000)
    InferenceSession(model, device="reference", max_session_bytes=1_400_000).run(None, {"x": x})  # 1.25 MiB fits
    with pytest.raises(ValueError, match="max_tensor_bytes must be a positive integer"):
        InferenceSession(model, device="cpu", max_tensor_bytes=0)
    assert Limits() == Limits(2 * GiB, 8 * GiB)


def test_limits_through_session_options():
    """ONNX Runtime's API: the session config entries "vkinfer.max_tensor_bytes" / "vkinfer.max_session_bytes",
    or the keywords, on vkinfer.InferenceSession."""
    model = _fan()
    so = vkinfer.SessionOptions()
    so.add_session_config_entry("vkinfer.max_session_bytes", "1200000")
    with pytest.raises(ValueError, match="over the limit of 1200000 bytes per session"):
        vkinfer.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    with pytest.raises(ValueError, match="over the limit of 1000 bytes per tensor"):
        vkinfer.InferenceSession(model, providers=["CPUExecutionProvider"], max_tensor_bytes=1000)


# ---- the size rules against the kernels: a bound is never smaller than the kernel's output ----
def _case(op, args, attrs=None, n_out=1):
    return Node(op, op.lower(), [f"i{k}" for k in range(len(args))], [f"o{k}" for k in range(n_out)], attrs or {})


def _rule_cases():
    rng = np.random.default_rng(0)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    u8 = lambda *s: rng.integers(0, 255, s, dtype=np.uint8)  # noqa: E731
    i64 = lambda *v: np.array(v, np.int64)  # noqa: E731
    yield "Tile", [f(2, 3), i64(3, 2)], {}
    yield "Expand", [f(3, 1), i64(2, 1, 4)], {}
    yield "Pad", [f(2, 3), i64(1, 0, 2, 3)], {}
    yield "Pad", [f(2, 3), i64(1, -1, 2, 3)], {"mode": "edge"}
    yield "Pad", [f(2, 3, 4), i64(2, 1), None, i64(-1)], {}
    yield "Concat", [f(2, 3), f(2, 5), f(2, 1)], {"axis": 1}
    yield "Gather", [f(4, 5, 6), i64([[0, 1], [2, 3]])], {"axis": 1}
    yield "GatherND", [f(3, 4, 5), i64([[0, 1], [2, 3]])], {}
    yield "OneHot", [i64(0, 2, 1), i64(4), np.array([0, 1], np.float32)], {"axis": -1}
    yield "Range", [np.array(1.0, np.float32), np.array(7.5, np.float32), np.array(2.0, np.float32)], {}
    yield "ConstantOfShape", [i64(3, 4)], {}
    yield "Add", [f(3, 1, 4), f(5, 1)], {}
    yield "Where", [np.array([[True], [False]]), f(1, 3), f(2, 1)], {}
    yield "Less", [f(4, 1), f(1, 6)], {}
    yield "Resize", [f(1, 2, 3, 4), None, np.array([1, 1, 2.5, 1.5], np.float32)], {"mode": "nearest"}
    yield "Resize", [f(1, 2, 3, 4), None, None, i64(1, 2, 7, 5)], {"mode": "linear"}
    yield "MaxPool", [u8(1, 2, 7, 9)], {"kernel_shape": [3, 2], "pads": [1, 1, 2, 1], "strides": [2, 3],
                                         "ceil_mode": 1}
    yield "MaxPool", [f(1, 2, 7, 9)], {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER", "strides": [2, 2]}
    yield "AveragePool", [f(2, 3, 8, 5)], {"kernel_shape": [4, 2], "pads": [2, 1, 3, 1], "strides": [1, 2]}
    yield "ConvTranspose", [f(1, 2, 3, 4), f(2, 3, 3, 2)], {"strides": [2, 3], "output_padding": [1, 0]}
    yield "ConvTranspose", [f(1, 2, 3, 4), f(2, 3, 3, 2)], {"strides": [2, 2], "output_shape": [8, 8]}
    yield "MatMulInteger", [u8(2, 3, 4), u8(4, 5)], {}
    yield "CenterCropPad", [f(3, 5, 2), i64(6, 2)], {"axes": [0, 1]}


@pytest.mark.parametrize("op,args,attrs", list(_rule_cases()), ids=lambda v: v if isinstance(v, str) else "")
def test_size_rule_bounds_the_kernel(op, args, attrs):
    node = _case(op, args, attrs)
    needs = BOUNDS[op](node, args)
    outs = OPS[op](node, args, {})
    for i, y in enumerate(outs):
        shape, item = next((s, it) for w, s, it in needs if w == i)
        assert len(shape) == y.ndim and all(b >= d for b, d in zip(shape, y.shape, strict=True)), (shape, y.shape)
        assert (item if isinstance(item, int) else item.itemsize) >= y.dtype.itemsize
        assert int(np.prod(shape)) <= 4 * max(y.size, 1) * 4, (shape, y.shape)  # and not far above it


def test_op_without_size_rule_checked_once_made():
    """An op without a size rule (its output a small multiple of its inputs) is checked once its output exists:
    Cast of a 1 MiB uint8 input to float32 is 4 MiB."""
    nodes = [helper.make_node("Cast", ["x"], ["y"], name="cast", to=TensorProto.FLOAT)]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.UINT8, [1 << 20])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1 << 20])])
    with pytest.raises(SizeLimitError, match=r"node 'cast' \(Cast\): output 'y' of shape \[1048576\] \(float32\)"):
        InferenceSession(model, device="reference", max_tensor_bytes=3 << 20)


def test_guarded_kernels_check_the_current_limits():
    """The amplifying kernels check their output's size wherever they run (constant folding included), against the
    limits of the trace running them (sizes.CURRENT), else the defaults."""
    node = Node("Tile", "t", ["x", "r"], ["y"], {})
    args = [np.zeros((2, 3), np.uint8), np.array([100, 10], np.int64)]
    assert OPS["Tile"](node, args, {})[0].shape == (200, 30)
    token = CURRENT.set(Limits(tensor_bytes=5000))
    try:
        with pytest.raises(SizeLimitError, match=r"node 't' \(Tile\): output 'y' of shape \[200, 30\]"):
            OPS["Tile"](node, args, {})
    finally:
        CURRENT.reset(token)

