"""The one helper every model test uses: a model runs on the reference, cpu and vulkan devices, and the three
must give the same bits (dtype, shape and every byte), or all refuse it with a clean error.

vkinfer promises identical bits on every device. Tests that ran a model on one device, or compared each device
with an oracle only where the oracle was exact, let devices drift apart unseen (a reshape of a 4-D tensor to
[-1, C] returned NHWC order on cpu and vulkan while the reference was right, 2026-11). So a model test calls
`run_devices` (outputs, with `want` from an independent oracle when the test has one) or `outcome_devices`
(outputs or one clean error class, for models that may be refused).

    outs = run_devices(model, {"x": x}, want=ort_outputs)
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

import vkinfer
from vkinfer.errors import VkInferError

DEVICES = ("reference", "cpu", "vulkan")
CLEAN = (ValueError, TypeError, VkInferError)  # what bad input may raise; anything else is a defect


def assert_same(got: Sequence[np.ndarray], want: Sequence[np.ndarray], what: str) -> None:
    """Equal count, dtypes, shapes and bytes of two output lists; the message names `what` and the output."""
    assert len(got) == len(want), f"{what}: {len(got)} outputs, expected {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype, f"{what}: output {k} is {g.dtype}, expected {w.dtype}"
        assert g.shape == w.shape, f"{what}: output {k} has shape {g.shape}, expected {w.shape}"
        if not np.array_equal(g, w, equal_nan=g.dtype.kind == "f"):
            diff = np.argwhere(g != w) if g.shape else np.zeros((1, 0), int)
            first = tuple(int(i) for i in diff[0])
            raise AssertionError(f"{what}: output {k} differs at {len(diff)} of {g.size} elements, first at "
                                 f"{first}: {g[first]!r} vs {w[first]!r}")


def _session(model, device: str, session_kw: dict):
    if isinstance(model, (str, os.PathLike)):
        model = os.fspath(model)
    elif hasattr(model, "SerializeToString"):  # an onnx.ModelProto
        model = model.SerializeToString()
    return vkinfer.InferenceSession(model, device=device, **session_kw)


def run_devices(model, feed: dict[str, np.ndarray], *, want: Sequence[np.ndarray] | None = None,
                devices: Sequence[str] = DEVICES, output_names: list[str] | None = None,
                **session_kw) -> list[np.ndarray]:
    """Run `model` (a path, bytes or onnx.ModelProto) on every device in `devices`; assert they all give the
    same bits, and equal `want` (an independent oracle's outputs) when given. Returns the outputs."""
    first, outs = None, None
    for device in devices:
        got = _session(model, device, session_kw).run(output_names, feed)
        if first is None:
            first, outs = device, got
        else:
            assert_same(got, outs, f"{device} vs {first}")
    if want is not None:
        assert_same(outs, want, f"{first} (all devices) vs the oracle")
    return outs


def outcome_devices(model, feed: dict[str, np.ndarray] | None = None, *, devices: Sequence[str] = DEVICES,
                    **session_kw) -> list[np.ndarray] | Exception:
    """Like `run_devices` for a model that may be refused: every device either runs it with the same bits or
    raises a clean error (`CLEAN`) of one class; returns the outputs or the first device's error. `feed`
    defaults to deterministic values of each input's type and shape (symbolic dimensions as 1)."""
    results: dict[str, list[np.ndarray] | Exception] = {}
    for device in devices:
        try:
            sess = _session(model, device, session_kw)
            results[device] = sess.run(None, feed if feed is not None else default_feed(sess))
        except CLEAN as e:
            results[device] = e
    kinds = {d: (type(r).__name__ if isinstance(r, Exception) else "outputs") for d, r in results.items()}
    ran = [d for d, r in results.items() if not isinstance(r, Exception)]
    assert not ran or len(ran) == len(results), f"devices disagree on running the model: {kinds}"
    if ran:
        for d in ran[1:]:
            assert_same(results[d], results[ran[0]], f"{d} vs {ran[0]}")
    return results[devices[0]]


def default_feed(sess) -> dict[str, np.ndarray]:
    """Deterministic inputs for a session: each input's type, symbolic dimensions as 1, values spread over the
    type's range (not zeros: zeros hide layout and rounding errors)."""
    types = {"tensor(float)": np.float32, "tensor(uint8)": np.uint8, "tensor(int8)": np.int8,
             "tensor(int32)": np.int32, "tensor(int64)": np.int64}
    rng = np.random.default_rng(1234)
    feed = {}
    for i in sess.get_inputs():
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in (i.shape or [])]
        dt = types[i.type]
        if dt == np.float32:
            feed[i.name] = rng.uniform(-2, 2, shape).astype(np.float32)
        else:
            info = np.iinfo(dt)
            lo, hi = max(info.min, -128), min(info.max, 255)
            feed[i.name] = rng.integers(lo, hi + 1, shape).astype(dt)
    return feed
