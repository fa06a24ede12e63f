"""float32 ONNX LSTM (vkinfer/reference/lstm.py, vkinfer/cpu/lstm.py, cpu_fallback/src/ops/lstm.c) against ONNX
Runtime's CPU EP (one thread, W and R initializers: ORT prepacks them for MLAS's packed SGEMM), bit for bit on every
device: hidden sizes 1..512, input sizes about MLAS's K block of 256, sequence lengths 1..40, batch 1-3, every
direction, with and without bias, initial state, sequence_lens, peepholes, clip and input_forget; the node runs on
the cpu device (not the host) in cpu and Vulkan sessions. The model carries an unrelated DequantizeLinear branch so
vkinfer takes it (8-bit models only)."""

from __future__ import annotations

import numpy as np
import pytest

from ._build import NAME, check, model, node, ort_run, refused

F32 = np.float32


def _case(rng, s, b, i, h, direction="forward", bias=True, init=False, lens=None, peep=False, clip=None,
          input_forget=0, scale=1.0, read_yh=False, read_yc=False, read_y=True, opset=14):
    nd = 2 if direction == "bidirectional" else 1
    c = {"W": (rng.standard_normal((nd, 4 * h, i)) * (1.5 / np.sqrt(i))).astype(F32),
         "R": (rng.standard_normal((nd, 4 * h, h)) * (1.5 / np.sqrt(h))).astype(F32)}
    ins = ["x", "W", "R", "", "", "", "", ""]
    if bias:
        c["B"], ins[3] = rng.standard_normal((nd, 8 * h)).astype(F32), "B"
    if lens is not None:
        c["L"], ins[4] = np.array(lens, np.int32), "L"
    if init:
        c["H0"], ins[5] = rng.standard_normal((nd, b, h)).astype(F32), "H0"
        c["C0"], ins[6] = (rng.standard_normal((nd, b, h)) * 2).astype(F32), "C0"
    if peep:
        c["P"], ins[7] = rng.standard_normal((nd, 3 * h)).astype(F32), "P"
    while ins[-1] == "":
        ins.pop()
    attrs = {"hidden_size": h, "direction": direction, "input_forget": input_forget}
    if clip is not None:
        attrs["clip"] = clip
    outs = {"y": F32} if read_y else {}
    if read_yh:
        outs["yh"] = F32
    if read_yc:
        outs["yc"] = F32
    blob = model([node("LSTM", ins, ["y", "yh", "yc"], **attrs), node("DequantizeLinear", ["q", "s"], ["qf"],
                                                                     name="dq")],
                 {"x": (F32, (s, b, i)), "q": (np.uint8, (4,))}, c | {"s": F32(0.5)}, outs | {"qf": F32},
                 opset=opset)
    x = (rng.standard_normal((s, b, i)) * scale).astype(F32)
    return blob, {"x": x, "q": np.arange(4, dtype=np.uint8)}


def _check(blob, feed, where="cpu"):
    check(blob, feed, ort_run(blob, feed), where=where, nodes=[NAME])


TABLE = [  # (seq, batch, input, hidden, direction, options)
    (1, 1, 1, 1, "forward", {}),
    (3, 1, 5, 2, "reverse", {}),
    (7, 2, 3, 15, "bidirectional", {}),
    (4, 3, 16, 16, "forward", {"init": True}),
    (5, 1, 255, 17, "forward", {"bias": False}),
    (5, 2, 256, 8, "reverse", {"init": True, "bias": False}),
    (3, 1, 257, 33, "bidirectional", {}),
    (2, 2, 300, 255, "forward", {"init": True}),
    (2, 1, 40, 256, "bidirectional", {"init": True}),
    (2, 1, 9, 257, "reverse", {}),
    (40, 2, 8, 24, "bidirectional", {"lens": [40, 17]}),
    (6, 3, 12, 10, "reverse", {"lens": [6, 2, 0], "init": True}),
    (6, 3, 12, 10, "bidirectional", {"lens": [1, 6, 3], "init": True}),
    (5, 2, 6, 5, "forward", {"peep": True, "init": True}),
    (5, 2, 6, 5, "bidirectional", {"peep": True, "lens": [5, 3], "init": True}),
    (8, 2, 7, 9, "forward", {"clip": 0.75}),
    (8, 1, 7, 9, "reverse", {"clip": 2.0, "bias": False, "scale": 4.0}),
    (6, 2, 5, 6, "bidirectional", {"input_forget": 1, "init": True}),
    (10, 1, 11, 12, "forward", {"scale": 30.0}),  # saturated gates: clamps of the polynomials
]


@pytest.mark.parametrize("case", TABLE, ids=lambda c: f"s{c[0]}b{c[1]}i{c[2]}h{c[3]}-{c[4]}-{sorted(c[5])}")
def test_table_against_ort(case):
    s, b, i, h, direction, opts = case
    rng = np.random.default_rng(s * 1000 + i * 10 + h)
    blob, feed = _case(rng, s, b, i, h, direction, **opts)
    _check(blob, feed)


def test_crnn_shape_against_ort():
    """ddddocr_ocr's LSTM: bidirectional, hidden 512 over 32 steps of 512 inputs (two K blocks each GEMM)."""
    rng = np.random.default_rng(7)
    blob, feed = _case(rng, 32, 1, 512, 512, "bidirectional", init=True, scale=2.0)
    _check(blob, feed)


@pytest.mark.parametrize("seed", range(4))
def test_random_shapes_against_ort(seed):
    rng = np.random.default_rng(100 + seed)
    s, b = int(rng.integers(1, 41)), int(rng.integers(1, 4))
    i, h = int(rng.integers(1, 600)), int(rng.integers(1, 80))
    direction = ("forward", "reverse", "bidirectional")[seed % 3]
    lens = [int(v) for v in rng.integers(0, s + 1, b)] if seed % 2 else None
    blob, feed = _case(rng, s, b, i, h, direction, init=bool(seed % 2), lens=lens, scale=float(rng.uniform(0.5, 5)))
    _check(blob, feed)


def test_ties_and_zero_products_against_ort():
    """Weights and inputs on a coarse grid (multiples of 1/4): many exactly representable partial sums, signed
    zeros from zero products, gates exactly 0."""
    rng = np.random.default_rng(11)
    blob, feed = _case(rng, 6, 2, 260, 7, "bidirectional", init=True)
    import onnx
    from onnx import numpy_helper
    m = onnx.load_from_string(blob)
    for t in m.graph.initializer:
        if t.name in ("W", "R", "B"):
            v = numpy_helper.to_array(t)
            t.CopyFrom(numpy_helper.from_array((np.round(v * 4) / 4).astype(F32), t.name))
    blob = m.SerializeToString()
    feed["x"] = (np.round(feed["x"] * 2) / 2).astype(F32)
    feed["x"][0] = -0.0
    _check(blob, feed)


STATE_TABLE = [  # (seq, batch, input, hidden, direction, options): Y_h and/or Y_c read (vkinfer/model/lstm_outputs.py)
    (4, 1, 5, 3, "forward", {"read_yh": True}),
    (4, 2, 5, 3, "reverse", {"read_yc": True}),
    (5, 2, 6, 4, "forward", {"read_yh": True, "read_yc": True, "read_y": False}),
    (3, 1, 4, 2, "forward", {"read_yc": True, "read_y": False}),
    (7, 2, 3, 15, "bidirectional", {"read_yh": True, "read_yc": True, "init": True}),
    (6, 3, 12, 10, "bidirectional", {"read_yh": True, "read_yc": True, "lens": [1, 6, 0], "init": True}),
    (6, 3, 12, 10, "reverse", {"read_yh": True, "lens": [6, 2, 0], "read_y": False}),
    (5, 2, 6, 5, "bidirectional", {"read_yc": True, "peep": True, "lens": [5, 3], "input_forget": 1}),
    (2, 1, 300, 70, "forward", {"read_yh": True, "read_yc": True, "scale": 4.0}),
]
_SLICES = {"read_y": f"{NAME}#Y", "read_yh": f"{NAME}#Y_h", "read_yc": f"{NAME}#Y_c"}


@pytest.mark.parametrize("case", STATE_TABLE, ids=lambda c: f"s{c[0]}b{c[1]}i{c[2]}h{c[3]}-{c[4]}-{sorted(c[5])}")
def test_read_y_h_and_y_c_against_ort(case):
    """A node whose Y_h or Y_c is read: vkinfer:LSTMState (the operator's STATE flag) and one Slice per read output
    run on the cpu device (no host node), ORT's bits for every output, zeros for a length-0 row."""
    s, b, i, h, direction, opts = case
    rng = np.random.default_rng(s * 1000 + i * 10 + h + 7)
    blob, feed = _case(rng, s, b, i, h, direction, **opts)
    read = {"read_y": True} | {k: v for k, v in opts.items() if k in _SLICES}
    names = [NAME] + [_SLICES[k] for k, v in read.items() if v]
    per_device = check(blob, feed, ort_run(blob, feed), where="cpu", nodes=names)
    for device in ("cpu", "vulkan"):
        sess = per_device[device]
        assert not any(p.startswith("host") for p in sess.placement.values()), (device, sess.placement)
        unread = [_SLICES[k] for k, v in read.items() if not v]
        assert not any(n in sess.placement for n in unread), sess.placement


def test_read_y_h_of_an_unlowered_lstm_stays_on_the_host():
    """The rewritten node keeps the LSTM's name and its host fallback: with a non-constant R (the operator packs R
    once) the packed node runs on the host, still with ORT's bits."""
    rng = np.random.default_rng(3)
    blob, feed = _case(rng, 4, 1, 5, 3, read_yh=True)
    import onnx
    from onnx import numpy_helper
    m = onnx.load_from_string(blob)
    r = next(t for t in m.graph.initializer if t.name == "R")
    feed["R"] = numpy_helper.to_array(r).copy()
    m.graph.initializer.remove(r)
    m.graph.input.append(onnx.helper.make_tensor_value_info("R", onnx.TensorProto.FLOAT, list(feed["R"].shape)))
    blob = m.SerializeToString()
    check(blob, feed, ort_run(blob, feed), where={NAME: "host"}, nodes=[NAME])


def test_other_activations_are_refused():
    rng = np.random.default_rng(4)
    blob, feed = _case(rng, 3, 1, 4, 2)
    import onnx
    m = onnx.load_from_string(blob)
    m.graph.node[0].attribute.append(onnx.helper.make_attribute("activations", ["Relu", "Tanh", "Tanh"]))
    refused(m.SerializeToString(), feed, "activations")


def test_session_creation_does_not_run_the_kernel(monkeypatch):
    """The trace takes the OpDef's shape rule (ddddocr_ocr's session creation: 4.1 -> 0.5 s); the rule's shapes
    are the kernel's for every output count and direction."""
    import vkinfer
    from vkinfer.reference import lstm as ref

    rng = np.random.default_rng(5)
    blob, feed = _case(rng, 5, 2, 3, 4, "bidirectional", read_yh=True)

    def boom(*a):
        raise AssertionError("the trace ran the LSTM kernel")
    monkeypatch.setattr(ref, "lstm", boom)
    for device in ("cpu", "vulkan"):
        vkinfer.InferenceSession(blob, device=device)
    monkeypatch.undo()
    from types import SimpleNamespace
    for direction, nd in (("forward", 1), ("bidirectional", 2)):
        c = {"W": np.zeros((nd, 16, 3), F32), "R": np.zeros((nd, 16, 4), F32)}
        x = [np.zeros((5, 2, 3), F32), c["W"], c["R"]]
        for n_out in (1, 2, 3):
            n = SimpleNamespace(name=NAME, op="LSTM", attrs={"hidden_size": 4, "direction": direction},
                                outputs=["y", "yh", "yc"][:n_out])
            want = [(v.shape, v.dtype) for v in ref._kernel(n, x, {})]
            assert [(s, np.dtype(d)) for s, d in ref._shape(n, x)] == want


def _set_const(blob: bytes, name: str, edit) -> bytes:
    import onnx
    from onnx import numpy_helper
    m = onnx.load_from_string(blob)
    for t in m.graph.initializer:
        if t.name == name:
            v = numpy_helper.to_array(t).copy()
            edit(v)
            t.CopyFrom(numpy_helper.from_array(v, name))
    return m.SerializeToString()


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("clip", [None, 2.0])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_nan_and_inf_inputs_against_ort(bias, clip, direction):
    """x with NaN, +-inf and 3e38 (overflowing X W^T) in one element and in a whole row: ORT's bits, NaN payloads
    included. With B, clip_add_bias turns a NaN or infinite gate into +-clip (+-FLT_MAX without clip) and nothing
    is NaN; without B, clip_ignore_bias keeps NaN, which spreads through the recurrence (ORT: 6-30 NaN outputs)."""
    rng = np.random.default_rng(21)
    blob, feed = _case(rng, 4, 2, 5, 3, direction, bias=bias, clip=clip, init=True)
    feeds = []
    for v in (np.nan, np.inf, -np.inf, F32(3e38)):
        f = {k: a.copy() for k, a in feed.items()}
        f["x"][1, 0, 2] = v
        f["x"][2, 1, :] = v
        feeds.append(f)
    want = [ort_run(blob, f) for f in feeds]
    per_device = check(blob, feeds, want, where="cpu", nodes=[NAME])
    for f, w in zip(feeds, want, strict=True):  # agree.py takes any NaN for any NaN: the payloads too
        for sess in per_device.values():
            assert np.array_equal(sess.run(None, f)[0].view(np.uint32), w[0].view(np.uint32))


@pytest.mark.parametrize("what", ["peep", "input_forget", "C0", "H0", "B", "R", "P"])
def test_nan_and_inf_in_constants_against_ort(what):
    """NaN or +-inf in x through the peephole and input_forget paths, or in a constant (initial state, bias,
    recurrent weights, peepholes): ORT's bits."""
    rng = np.random.default_rng(22)
    blob, feed = _case(rng, 4, 2, 5, 3, "bidirectional", init=True, peep=what in ("peep", "P"),
                       input_forget=int(what == "input_forget"), clip=1.5 if what == "B" else None)
    if what in ("peep", "input_forget"):
        feed["x"][1, 0, 2], feed["x"][2, 1, :] = np.nan, np.inf
    else:
        def edit(v):
            v.flat[[1, 4]] = np.nan if what in ("H0", "B") else np.inf
            v.flat[7] = -np.inf
        blob = _set_const(blob, what, edit)
    _check(blob, feed)
