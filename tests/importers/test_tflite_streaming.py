"""Streaming (stateful) TFLite models against ai-edge-litert: CALL_ONCE of an init subgraph, resource variables
(VAR_HANDLE, READ_VARIABLE, ASSIGN_VARIABLE) whose values persist across `run` calls of one session.

The keyword spotter (vkinfer.testing.tflite_zoo.streaming_kws) keeps two ring buffers of past frames in resource
variables, updated every call (READ_VARIABLE -> CONCATENATION with the new frame -> STRIDED_SLICE / SPLIT_V of
the oldest out -> ASSIGN_VARIABLE); it is driven over 50 consecutive windows of seeded random features on every
device and must equal one litert Interpreter kept across the same windows, every output at every window; the
reference, cpu and vulkan devices give identical bits at every call (tests/support/agree.py).
Mutated streaming models must raise ValueError (UnsupportedModelError included), never KeyError/IndexError.
"""

from __future__ import annotations

import functools
import threading

import numpy as np
import pytest
from support.agree import CLEAN, DEVICES, outcome_devices, run_sessions, sessions

import vkinfer
from vkinfer.model.onnx_import import UnsupportedModelError
from vkinfer.testing import tflite_zoo
from vkinfer.testing.tflite_zoo import tflite

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


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_streaming_kws_matches_litert_every_window(dtype):
    frames, want = _litert_stream(dtype)
    per_device = sessions(_kws(dtype))
    for sess in per_device.values():
        assert [i.name for i in sess.get_inputs()] == ["frame"]  # the state stays inside the session
        names = [o.name for o in sess.get_outputs()]
        assert names == ["logits", "output", "conv1", "dwconv"]
    assert len({tuple(w["logits"].ravel()) for w in want}) > 10  # the stream really changes the outputs
    for k, f in enumerate(frames):
        run_sessions(per_device, {"frame": f}, want=[want[k][n] for n in names], what=f"window {k}")
    # reset_state(): the CALL_ONCE init values again, so the stream restarts identically.
    for sess in per_device.values():
        sess.reset_state()
    for k, f in enumerate(frames[:8]):
        run_sessions(per_device, {"frame": f}, want=[want[k]["logits"]], what=f"after reset_state, window {k}",
                     output_names=["logits"])


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_native_state_across_both_paths(dtype):
    """The common call keeps the state in the native runner's memory (one call per run, no state dict); runs by
    output name take the checked path, which reads and writes that same memory; reset_state restarts both. Every
    window on cpu and vulkan equals litert, and a failed run (a NaN frame) leaves the state where it was."""
    frames, want = _litert_stream(dtype)
    for device in ("cpu", "vulkan"):
        sess = vkinfer.InferenceSession(_kws(dtype), device=device, threads=1)
        assert sess._stateful is not None and sess._stateful.state, device
        assert sess._fast.plan.native_calls + sess._fast.plan.submits == len(sess._fast.plan.segments), device
        names = [o.name for o in sess.get_outputs()]
        for k, f in enumerate(frames[:20]):
            if k == 12:
                bad = np.full_like(f, np.nan)
                with pytest.raises(ValueError, match="NaN"):
                    sess.run(None, {"frame": bad})
            out = sess.run(["logits"] if k % 5 == 2 else None, {"frame": f})
            np.testing.assert_array_equal(out[0], want[k]["logits"], err_msg=f"{device} window {k}")
            if k % 5 != 2:
                assert len(out) == len(names)
        sess.reset_state()
        for k, f in enumerate(frames[:4]):
            np.testing.assert_array_equal(sess.run(None, {"frame": f})[0], want[k]["logits"],
                                          err_msg=f"{device} after reset, window {k}")


def _stream(blob: bytes, frames: list[np.ndarray], name: str) -> None:
    """Drive a cpu session (state kept in the CPU graph's form) over `frames` against one litert interpreter and a
    reference-device session (the numpy interpreter, state in the host's form): the outputs equal litert's at
    every frame and the state read back through the checked path equals the reference's, with runs by output name
    (the checked path), reset_state and a NaN-free restart interleaved."""
    sess = vkinfer.InferenceSession(blob, device="cpu", threads=1)
    ref = vkinfer.InferenceSession(blob, device="reference")
    plan = sess._fast.plan
    assert sess._stateful is not None and set(sess._stateful.forms) == {v.input for v in sess._carried}, name
    assert set(plan.placement.values()) == {"cpu"}, name
    it = tflite_zoo.LiteRT(blob)
    inp, out = sess.get_inputs()[0].name, sess.get_outputs()[0].name
    for k, f in enumerate(frames):
        if k == len(frames) * 2 // 3:
            sess.reset_state()
            ref.reset_state()
            it = tflite_zoo.LiteRT(blob)
        want = it({inp: f})[out]
        got = sess.run([out] if k % 7 == 3 else None, {inp: f})[0]
        np.testing.assert_array_equal(got, want, err_msg=f"{name} frame {k}")
        np.testing.assert_array_equal(ref.run(None, {inp: f})[0], want, err_msg=f"{name} reference, frame {k}")
        if k % 5 == 0:
            with sess._state_lock:
                sess._pull_state()
                state = dict(sess._state)
            for v in sess._variables:
                np.testing.assert_array_equal(state[v.input], ref._state[v.input], err_msg=f"{name} {v.name} {k}")


def test_state_in_cpu_form_kws_matches_litert_and_reference():
    """The zoo's keyword spotter has both ring-buffer shapes (CONCATENATION + STRIDED_SLICE and SPLIT_V): the
    importer's transpose folding (vkinfer/model/transpose_fold.py) leaves no Transpose between the state and its
    Concat on the CPU, and the state lives in the runner in the CPU graph's form over 120 windows."""
    rng = np.random.default_rng(5)
    frames = [rng.uniform(-1.2, 1.2, (1, 1, 1, 10)).astype(np.float32) for _ in range(120)]
    for dtype in ("int8", "uint8"):
        _stream(_kws(dtype), frames, f"kws {dtype}")
    sess = vkinfer.InferenceSession(_kws("int8"), device="cpu", threads=1)
    assert sess._fast.plan.segments[0].runner.ops().count("transpose") <= 3  # the unchanged output edges only


def test_state_is_per_session_and_runs_on_devices():
    frames, want = _litert_stream("int8")
    a, b = sessions(_kws("int8")), sessions(_kws("int8"))  # two sessions per device
    for k in range(6):
        run_sessions(a, {"frame": frames[k]}, want=[want[k]["logits"]], what=f"a, window {k}", output_names=["logits"])
        if k % 2 == 0:  # b advances at half the rate, on its own state
            run_sessions(b, {"frame": frames[k // 2]}, want=[want[k // 2]["logits"]], what=f"b, window {k // 2}",
                         output_names=["logits"])
    # The ring-buffer updates (Concat, Slice) run on the device, not the host.
    for device in ("cpu", "vulkan"):
        assert "host" not in set(a[device].placement.values()), device


def test_concurrent_runs_are_serialised():
    """Threads sharing one stateful session: each run sees the state the previous one left (a lock), so the
    outputs are litert's for the same frame fed 24 times, in some order."""
    frame = np.full((1, 1, 1, 10), 0.4, np.float32)
    it = tflite_zoo.LiteRT(_kws("int8"))
    want = sorted(tuple(it({"frame": frame})["logits"].ravel()) for _ in range(24))
    for device in DEVICES:  # litert's multiset of outputs on every device, so the devices agree as well
        sess = vkinfer.InferenceSession(_kws("int8"), device=device)
        got, lock = [], threading.Lock()

        def worker(sess=sess, got=got, lock=lock):
            for _ in range(6):
                y = sess.run(["logits"], {"frame": frame})[0]
                with lock:
                    got.append(y)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(y.dtype == np.int8 and y.shape == (1, 6) for y in got), device
        assert sorted(tuple(y.ravel()) for y in got) == want, device


def test_state_inputs_and_outputs_are_hidden():
    for device in DEVICES:  # the session's own checks, on every device's session
        sess = vkinfer.InferenceSession(_kws("int8"), device=device)
        state = sess._variables[0]
        with pytest.raises(ValueError, match="unknown input"):
            sess.run(None, {"frame": np.zeros((1, 1, 1, 10), np.float32), state.input: state.initial})
        with pytest.raises(ValueError, match="unknown output"):
            sess.run(["stream1/next"], {"frame": np.zeros((1, 1, 1, 10), np.float32)})
        assert {v.name for v in sess._variables} == {"kws/stream1", "kws/stream2"}, device


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
    per_device = sessions(blob)
    rng = np.random.default_rng(3)
    for k in range(5):
        x = rng.integers(-128, 128, (1, 1, 4), dtype=np.int8)
        run_sessions(per_device, {"x": x}, want=[it({"x": x})["win"]], what=f"call {k}")


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
    refused = outcome_devices(_stateful(variant), {"x": np.zeros((1, 1, 4), np.int8)})  # one class everywhere
    assert isinstance(refused, ValueError), refused
    assert message in str(refused)
    if variant == "while":
        assert isinstance(refused, UnsupportedModelError)


def test_mutated_streaming_model_bytes():
    """Seeded byte mutations of the streaming keyword spotter: each loads (and runs a window) or raises
    ValueError / TypeError / VkInferError, never KeyError, IndexError or AttributeError; every device gives the
    same outcome (the same bits, or the same error class)."""
    blob = _kws("int8")
    rng = np.random.default_rng(0)
    outcomes = {"loaded": 0, "refused": 0}
    for _ in range(120):
        b = bytearray(blob)
        for _ in range(int(rng.integers(1, 4))):
            pos = int(rng.integers(8, len(b)))
            b[pos] = int(rng.integers(0, 256))
        # Zeros of the inputs' shapes with mutated dimensions kept small (agree.default_feed would take a mutated
        # dimension as it is); a model the reference refuses gets default_feed on the other devices, and fails
        # the test if any of them runs it.
        try:
            inputs = vkinfer.InferenceSession(bytes(b), device="reference").get_inputs()
            feed = {t.name: np.zeros([d if isinstance(d, int) and 0 < d < 64 else 1 for d in t.shape],
                                     np.dtype(t.type[7:-1].replace("float", "float32"))) for t in inputs}
        except CLEAN:
            feed = None
        outcome = outcome_devices(bytes(b), feed)
        outcomes["refused" if isinstance(outcome, Exception) else "loaded"] += 1
    assert outcomes["refused"] > 10 and outcomes["loaded"] > 10
