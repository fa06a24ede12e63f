"""The one helper every model test uses: a model runs on the reference, cpu and vulkan devices, and the three
must give the same bits (dtype, shape and every byte), or all refuse it with a clean error.

vkinfer promises identical bits on every device. Tests that ran a model on one device, or compared each device
with an oracle only where the oracle was exact, let devices drift apart unseen (a reshape of a 4-D tensor to
[-1, C] returned NHWC order on cpu and vulkan while the reference was right, 2026-11). So a model test calls
`run_devices` (outputs, with `want` from an independent oracle when the test has one), `run_sessions` (sessions the test
keeps: several feeds, stateful models, plan or placement checks), `refused_devices` (one error class and
message on every device) or `outcome_devices` (outputs or one clean error class, for models that may be
refused, as fuzzed ones).

    outs = run_devices(model, {"x": x}, want=ort_outputs)
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence

import numpy as np

import vkinfer
from vkinfer.errors import VkInferError

DEVICES = ("reference", "cpu", "vulkan")
CLEAN = (ValueError, TypeError, VkInferError)  # what bad input may raise; anything else is a defect


def _bits_equal(g: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Element-wise: the same bits (floats compared as their integer words, so -0.0 differs from +0.0; any NaN
    equals any NaN: payloads are not part of the contract)."""
    if g.dtype.kind == "f":
        words = np.dtype(f"u{g.dtype.itemsize}")
        return (g.view(words) == w.view(words)) | (np.isnan(g) & np.isnan(w))
    return g == w


def assert_same(got: Sequence[np.ndarray], want: Sequence[np.ndarray], what: str) -> None:
    """Equal count, dtypes, shapes and bits of two output lists; the message names `what` and the output."""
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.ascontiguousarray(g), np.ascontiguousarray(w)
        assert g.dtype == w.dtype, f"{what}: output {k} is {g.dtype}, expected {w.dtype}"
        assert g.shape == w.shape, f"{what}: output {k} has shape {g.shape}, expected {w.shape}"
        same = _bits_equal(g, w)
        if not np.all(same):
            diff = np.argwhere(~same) if g.shape else np.zeros((1, 0), int)
            first = tuple(int(i) for i in diff[0])
            raise AssertionError(f"{what}: output {k} differs at {len(diff)} of {g.size} elements, first at "
                                 f"{first}: {g[first]!r} vs {w[first]!r}")


def _model_arg(model):
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    if hasattr(model, "SerializeToString"):  # an onnx.ModelProto
        return model.SerializeToString()
    return model


def sessions(model, devices: Sequence[str] = DEVICES, **session_kw) -> dict[str, vkinfer.InferenceSession]:
    """One session per device (a path, bytes or onnx.ModelProto), for tests that inspect the sessions (plans,
    placement) or run several feeds through the same ones (buffer reuse, stateful models): see `run_sessions`."""
    model = _model_arg(model)
    return {d: vkinfer.InferenceSession(model, device=d, **session_kw) for d in devices}


def run_sessions(sessions: dict[str, vkinfer.InferenceSession], feed: dict[str, np.ndarray], *,
                 want: Sequence[np.ndarray] | None = None, output_names: list[str] | None = None,
                 what: str = "") -> list[np.ndarray]:
    """One run of every session (device -> session) on `feed`: the same bits on all, equal to `want` (an
    independent oracle's outputs) when given. Returns the outputs. `what` prefixes failure messages."""
    pre = f"{what}: " if what else ""
    (first, sess), *rest = sessions.items()
    outs = sess.run(output_names, feed)
    for device, other in rest:
        assert_same(other.run(output_names, feed), outs, f"{pre}{device} vs {first}")
    if want is not None:
        assert_same(outs, want, f"{pre}{first} (all devices) vs the oracle")
    return outs


def run_devices(model, feed: dict[str, np.ndarray], *, want: Sequence[np.ndarray] | None = None,
                devices: Sequence[str] = DEVICES, output_names: list[str] | None = None, what: str = "",
                **session_kw) -> list[np.ndarray]:
    """Run `model` (a path, bytes or onnx.ModelProto) on every device in `devices`; assert they all give the
    same bits, and equal `want` (an independent oracle's outputs) when given. Returns the outputs."""
    return run_sessions(sessions(model, devices, **session_kw), feed, want=want, output_names=output_names,
                        what=what)


def refused_devices(model, feed: dict[str, np.ndarray] | None = None, exc: type[BaseException] = ValueError,
                    match: str | None = None, *, devices: Sequence[str] = DEVICES,
                    **session_kw) -> list[BaseException]:
    """Every device refuses `model` (when the session is made or, given `feed`, when it runs) with `exc`,
    its message matching the regular expression `match`. Returns the errors, one per device."""
    model = _model_arg(model)
    errors = []
    for device in devices:
        try:
            sess = vkinfer.InferenceSession(model, device=device, **session_kw)
            if feed is None:
                raise AssertionError(f"{device}: the model loaded; expected {exc.__name__}")
            sess.run(None, feed)
        except exc as e:
            if match is not None and not re.search(match, str(e)):
                raise AssertionError(f"{device}: {type(e).__name__}: {e!s} does not match {match!r}") from e
            errors.append(e)
            continue
        raise AssertionError(f"{device}: the model ran; expected {exc.__name__}")
    return errors


def outcome_devices(model, feed: dict[str, np.ndarray] | None = None, *, devices: Sequence[str] = DEVICES,
                    **session_kw) -> list[np.ndarray] | Exception:
    """Like `run_devices` for a model that may be refused: every device either runs it with the same bits or
    raises a clean error (`CLEAN`) of one class with a message; returns the outputs or the first device's error.
    `feed` defaults to deterministic values of each input's type and shape (see `default_feed`)."""
    model = _model_arg(model)
    results: dict[str, list[np.ndarray] | Exception] = {}
    for device in devices:
        try:
            sess = vkinfer.InferenceSession(model, device=device, **session_kw)
        except CLEAN as e:
            results[device] = e
            continue
        if feed is None:  # outside the try: a feed the test cannot make is the test's error, not a refusal
            feed = default_feed(sess)
        try:
            results[device] = sess.run(None, feed)
        except CLEAN as e:
            results[device] = e
    kinds = {d: (type(r).__name__ if isinstance(r, Exception) else "outputs") for d, r in results.items()}
    assert len(set(kinds.values())) == 1, f"devices disagree on the model: {kinds}"
    silent = [d for d, r in results.items() if isinstance(r, Exception) and not str(r).strip()]
    assert not silent, f"{kinds[silent[0]]} with an empty message on {', '.join(silent)}"
    ran = [d for d, r in results.items() if not isinstance(r, Exception)]
    for d in ran[1:]:
        assert_same(results[d], results[ran[0]], f"{d} vs {ran[0]}")
    return results[devices[0]]


def default_feed(sess, max_dim: int = 64) -> dict[str, np.ndarray]:
    """Deterministic inputs for a session: each input's type, symbolic dimensions as 1 and dimensions over
    `max_dim` as `max_dim` (a mutated model's absurd input shape gets a feed the devices refuse alike, not an
    absurd allocation here), values spread over the type's range (not zeros: zeros hide layout and rounding
    errors)."""
    types = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8,
             "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_}
    rng = np.random.default_rng(1234)
    feed = {}
    for i in sess.get_inputs():
        shape = [min(d, max_dim) if isinstance(d, int) and d >= 0 else 1 for d in (i.shape or [])]
        if i.type not in types:
            raise AssertionError(f"default_feed: input {i.name!r} has type {i.type}; pass a feed")
        dt = types[i.type]
        if dt == np.float32:
            feed[i.name] = rng.uniform(-2, 2, shape).astype(np.float32)
        elif dt == np.bool_:
            feed[i.name] = rng.integers(0, 2, shape).astype(np.bool_)
        else:
            info = np.iinfo(dt)
            lo, hi = max(info.min, -128), min(info.max, 255)
            feed[i.name] = rng.integers(lo, hi + 1, shape).astype(dt)
    return feed
