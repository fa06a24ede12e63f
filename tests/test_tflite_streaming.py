"""Streaming (stateful) TFLite models against ai-edge-litert: CALL_ONCE of an init subgraph, resource variables
(VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE) whose values persist across `run` calls of one session.

The keyword spotter (vkinfer.models.tflite_zoo.streaming_kws) keeps two ring buffers of past frames in resource
variables, updated every call (READ_VARIABLE -> CONCATENATION with the new frame -> STRIDED_SLICE / SPLIT_V of
the oldest out -> ASSIGN_VARIABLE); it is driven over 50 consecutive windows of seeded random features on every
device and must equal one litert Interpreter kept across the same windows, every output at every window.
Mutated streaming models must raise ValueError (UnsupportedModelError included), never KeyError/IndexError.
"""

from __future__ import annotations

import functools
import threading

import numpy as np
import pytest

import vkinfer
from vkinfer.model.onnx_import import UnsupportedModelError
from vkinfer.models import tflite_zoo
from vkinfer.models.tflite_zoo import tflite

DEVICES = ["reference", "cpu", "vulkan"]
B, A = tflite.BuiltinOperator, tflite.BuiltinOptions
WINDOWS = 50


@functools.cache
def _kws(dtype: str) -> bytes:
    return tflite_zoo.streaming_kws(0, dtype=dtype)


@functools.cache
def _litert_stream(dtype: str) -> tuple[list[np.ndarray], list[dict[str, np.ndarray]]]:
    """The frames and litert's outputs at each window (one interpreter across all of them)."""
    rng = np.random.default_rng(11)
    frames = [rng.uniform(-1.2, 1.2, (1, 1, 1, 10)).astype(np.float32) for _ in range(WINDOWS)]
    it = tflite_zoo.LiteRT(_kws(dtype))
    return frames, [it({"frame": f}) for f in frames]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_streaming_kws_matches_litert_every_window(dtype, device):
    frames, want = _litert_stream(dtype)
    sess = vkinfer.InferenceSession(_kws(dtype), device=device)
    assert [i.name for i in sess.get_inputs()] == ["frame"]  # the state stays inside the session
    names = [o.name for o in sess.get_outputs()]
    assert names == ["logits", "output", "conv1", "dwconv"]
    assert len({tuple(w["logits"].ravel()) for w in want}) > 10  # the stream really changes the outputs
    for k, f in enumerate(frames):
        got = sess.run(None, {"frame": f})
        for name, g in zip(names, got, strict=True):
            np.testing.assert_array_equal(g, want[k][name], err_msg=f"window {k}, output {name}, {device}")
    # reset_state(): the CALL_ONCE init values again, so the stream restarts identically.
    sess.reset_state()
    for k, f in enumerate(frames[:8]):
        np.testing.assert_array_equal(sess.run(["logits"], {"frame": f})[0], want[k]["logits"],
                                      err_msg=f"after reset_state, window {k}")


def test_state_is_per_session_and_runs_on_devices():
    frames, want = _litert_stream("int8")
    a = vkinfer.InferenceSession(_kws("int8"), device="cpu")
    b = vkinfer.InferenceSession(_kws("int8"), device="cpu")
    for k in range(6):
        np.testing.assert_array_equal(a.run(["logits"], {"frame": frames[k]})[0], want[k]["logits"])
        if k % 2 == 0:  # b advances at half the rate, on its own state
            np.testing.assert_array_equal(b.run(["logits"], {"frame": frames[k // 2]})[0], want[k // 2]["logits"])
    # The ring-buffer updates (Concat, Slice) run on the device, not the host.
    assert "host" not in set(a.placement.values())


def test_concurrent_runs_are_serialised():
    """Threads sharing one stateful session: each run sees the state the previous one left (a lock), so the
    outputs are litert's for the same frame fed 24 times, in some order."""
    frame = np.full((1, 1, 1, 10), 0.4, np.float32)
    it = tflite_zoo.LiteRT(_kws("int8"))
    want = sorted(tuple(it({"frame": frame})["logits"].ravel()) for _ in range(24))
    sess = vkinfer.InferenceSession(_kws("int8"), device="cpu")
    got, lock = [], threading.Lock()

    def worker():
        for _ in range(6):
            y = sess.run(["logits"], {"frame": frame})[0]
            with lock:
                got.append(tuple(y.ravel()))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == want


def test_state_inputs_and_outputs_are_hidden():
    sess = vkinfer.InferenceSession(_kws("int8"), device="reference")
    state = sess._variables[0]
    with pytest.raises(ValueError, match="unknown input"):
        sess.run(None, {"frame": np.zeros((1, 1, 1, 10), np.float32), state.input: state.initial})
    with pytest.raises(ValueError, match="unknown output"):
        sess.run(["stream1/next"], {"frame": np.zeros((1, 1, 1, 10), np.float32)})
    assert {v.name for v in sess._variables} == {"kws/stream1", "kws/stream2"}


# ---- bad input -------------------------------------------------------------------------------------------------

def _stateful(variant: str = "") -> bytes:
    """A minimal stateful model: main = CALL_ONCE(1), VAR_HANDLE, READ_VARIABLE, CONCATENATION with the input,
    STRIDED_SLICE, ASSIGN_VARIABLE; init = VAR_HANDLE, ASSIGN_VARIABLE of a constant. `variant` breaks it."""
    m = tflite_zoo.ModelBuilder()
    init = m.subgraph()
    ih = init.tensor("h", (), "resource")
    init.op(B.VAR_HANDLE, [], [ih], A.VarHandleOptions, Container="c", SharedName="v")
    zeros = init.tensor("zeros", (1, 3 if variant != "init_shape" else 2, 4), np.int8,
                        np.arange(12 if variant != "init_shape" else 8, dtype=np.int8).reshape(1, -1, 4), 0.1, 0)
    init.op(B.ASSIGN_VARIABLE, [ih, zeros], [])
    if variant == "cycle":
        init.op(B.CALL_ONCE, [], [], A.CallOnceOptions, InitSubgraphIndex=0)
    x = m.tensor("x", (1, 1, 4), np.int8, None, 0.1, 0)
    if variant == "missing_call_once_options":
        m.op(B.CALL_ONCE, [], [])
    elif variant != "no_init":
        m.op(B.CALL_ONCE, [], [], A.CallOnceOptions,
             InitSubgraphIndex={"index_out_of_range": 7, "self_call": 0}.get(variant, 1))
    h = m.tensor("h", (), "resource")
    if variant == "missing_var_handle_options":
        m.op(B.VAR_HANDLE, [], [h])
    else:
        m.op(B.VAR_HANDLE, [], [h], A.VarHandleOptions, Container="c",
             SharedName="other" if variant == "other_variable" else "v")
    state = m.tensor("state", (1, 3, 4), np.int8, None, 0.1, 0)
    m.op(B.READ_VARIABLE, [x if variant == "handle_not_resource" else h], [state])
    win = m.tensor("win", (1, 4, 4), np.int8, None, 0.1, 0)
    m.op(B.CONCATENATION, [state, x], [win], A.ConcatenationOptions, Axis=1, FusedActivationFunction=0)
    nxt = m.tensor("next", (1, 3, 4), np.int8, None, 0.1, 0)
    consts = [m.tensor(n, (3,), np.int32, np.array(v, np.int32)) for n, v in
              (("begin", [0, 1, 0]), ("end", [1, 4, 4]), ("strides", [1, 1, 1]))]
    if variant == "missing_strided_slice_options":
        m.op(B.STRIDED_SLICE, [win, *consts], [nxt])
    else:
        m.op(B.STRIDED_SLICE, [win, *consts], [nxt], A.StridedSliceOptions, BeginMask=0, EndMask=0,
             ShrinkAxisMask=0, EllipsisMask=0, NewAxisMask=0)
    m.op(B.ASSIGN_VARIABLE, [h, nxt], [])
    if variant == "while":
        m.op(B.WHILE, [win], [m.tensor("w", (1, 4, 4), np.int8, None, 0.1, 0)], A.WhileOptions, CondSubgraphIndex=1,
             BodySubgraphIndex=1)
    return m.finish([x], [win], subgraphs=[(init, [], [])])


def test_minimal_stateful_model_matches_litert():
    blob = _stateful()
    it = tflite_zoo.LiteRT(blob)
    sess = vkinfer.InferenceSession(blob, device="reference")
    rng = np.random.default_rng(3)
    for _ in range(5):
        x = rng.integers(-128, 128, (1, 1, 4), dtype=np.int8)
        np.testing.assert_array_equal(sess.run(None, {"x": x})[0], it({"x": x})["win"])


@pytest.mark.parametrize("variant, message", [
    ("index_out_of_range", "init subgraph index 7 is out of range"),
    ("self_call", "CALL_ONCE cycle"),
    ("cycle", "CALL_ONCE cycle through subgraphs 0 -> 1 -> 0"),
    ("no_init", "is read before it is assigned"),
    ("other_variable", "'c/other' is read before it is assigned"),
    ("missing_call_once_options", "has no CallOnceOptions"),
    ("missing_var_handle_options", "has no VarHandleOptions"),
    ("missing_strided_slice_options", "missing StridedSliceOptions"),
    ("handle_not_resource", "is not a resource tensor"),
    ("init_shape", "holds int8 [1, 2, 4]"),
    ("while", "control flow (WHILE, IF) is not supported"),
])
def test_broken_stateful_models_raise_clear_errors(variant, message):
    with pytest.raises(ValueError) as e:
        vkinfer.InferenceSession(_stateful(variant), device="reference")
    assert message in str(e.value)
    if variant == "while":
        assert isinstance(e.value, UnsupportedModelError)


def test_mutated_streaming_model_bytes():
    """Seeded byte mutations of the streaming keyword spotter: each loads (and runs a window) or raises
    ValueError / TypeError / VkInferError, never KeyError, IndexError or AttributeError."""
    from vkinfer.errors import VkInferError

    blob = _kws("int8")
    rng = np.random.default_rng(0)
    outcomes = {"loaded": 0, "refused": 0}
    for _ in range(120):
        b = bytearray(blob)
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(8, len(b)))
            b[pos] = int(rng.integers(0, 256))
        try:
            sess = vkinfer.InferenceSession(bytes(b), device="reference")
            sess.run(None, {t.name: np.zeros([d if isinstance(d, int) and 0 < d < 64 else 1 for d in t.shape],
                                             np.dtype(t.type[7:-1].replace("float", "float32")))
                            for t in sess.get_inputs()})
            outcomes["loaded"] += 1
        except (ValueError, TypeError, VkInferError):
            outcomes["refused"] += 1
    assert outcomes["refused"] > 10 and outcomes["loaded"] > 10
