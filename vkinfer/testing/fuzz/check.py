"""The differential check every fuzzed input goes through, and the findings it writes.

An input (model bytes, optionally a feed and output names) is loaded and run on the reference, cpu and vulkan
devices. It passes when every device gives the same bits (dtype, shape and every byte; any NaN equals any NaN), or
every device raises one clean error class (ValueError, TypeError, vkinfer.VkInferError and subclasses) with a
message. Anything else is a finding:

- nonclean: another exception (KeyError, IndexError, MemoryError, RecursionError, AssertionError, ...), or a clean
  one with an empty message;
- disagree: devices differ (one runs what another refuses, different error classes, different bits);
- hang: the input ran past the per-execution limit (the engines enforce it);
- crash: the process died (a signal; the engines record it);
- memory: the process's resident memory went past the limit (the plain engine's watchdog).

This is tests/support/agree.py's `outcome_devices` rule, kept here (the tools layer cannot import the tests) with
the fuzzers' additions: sessions may be reused across inputs (the run target), and a finding names its signature
(kind, exception class, innermost vkinfer frame) so that one defect hit a thousand times is written a few times.
"""

from __future__ import annotations

import hashlib
import json
import os
import traceback
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

DEVICES = ("reference", "cpu", "vulkan")
MAX_FEED = 1 << 20  # elements of one input a check feeds; a larger declared input is only loaded
MAX_DIM = 4096
KEEP_PER_SIGNATURE = 2  # inputs written per distinct finding
# The campaign's cap on each session's activations (MiB; $VKINFER_FUZZ_SESSION_MB, set by `--session-mb`): three
# sessions of a legal model with a [16777216, 8] float32 tensor (f926c78's run) held 2.2 GB together, past
# libFuzzer's 2 GB rss limit, so a campaign reported legal inputs as memory findings. Under the cap such a model is
# refused with SizeLimitError on every device, which the check compares like any clean error. Unset (the tests,
# `check` of an input kept without one): the library's defaults (2 GiB per tensor, 8 GiB per session).
SESSION_MB_ENV = "VKINFER_FUZZ_SESSION_MB"


def session_limits() -> dict[str, int]:
    """The InferenceSession keywords of the campaign's cap ($VKINFER_FUZZ_SESSION_MB), or {} for the defaults."""
    mb = cap_meta().get("session_mb", 0)
    return {"max_session_bytes": mb << 20, "max_tensor_bytes": min(mb, 2048) << 20} if mb else {}


def cap_meta() -> dict[str, int]:
    """The campaign's cap as a finding's .json records it: {"session_mb": MiB}, or {} under the defaults."""
    mb = int(os.environ.get(SESSION_MB_ENV) or 0)
    return {"session_mb": mb} if mb > 0 else {}


def clean_errors() -> tuple[type[BaseException], ...]:
    """What bad input may raise."""
    from vkinfer.errors import VkInferError

    return (ValueError, TypeError, VkInferError)


class Hang(BaseException):
    """Raised by the per-execution alarm; a BaseException so that no `except Exception` in vkinfer swallows it."""


@dataclass
class Finding:
    """What went wrong with one input: kind (nonclean, disagree, hang, crash, memory), detail, signature."""

    kind: str
    detail: str
    signature: str = ""
    meta: dict = field(default_factory=dict)


def where(e: BaseException) -> str:
    """The innermost frame inside vkinfer (else the innermost one) as file:line."""
    frames = traceback.extract_tb(e.__traceback__)
    ours = [f for f in frames if f"{os.sep}vkinfer{os.sep}" in f.filename and f"{os.sep}fuzz{os.sep}" not in
            f.filename]
    f = (ours or frames or [None])[-1]
    root = Path(__file__).resolve().parents[3]
    return "?" if f is None else f"{os.path.relpath(f.filename, root)}:{f.lineno}"


def nonclean(e: BaseException, device: str, stage: str) -> Finding:
    at = where(e)
    return Finding("nonclean", f"{device} {stage}: {type(e).__name__}: {str(e)[:300]} (at {at})",
                   f"nonclean {type(e).__name__} {at}")


def _bits_equal(g: np.ndarray, w: np.ndarray) -> bool:
    if g.dtype.kind == "f":
        words = np.dtype(f"u{g.dtype.itemsize}")
        return bool(np.all((g.view(words) == w.view(words)) | (np.isnan(g) & np.isnan(w))))
    return bool(np.all(g == w))


def differ(got: Sequence[np.ndarray], want: Sequence[np.ndarray]) -> str | None:
    """None when two output lists have the same count, dtypes, shapes and bits; else how they differ."""
    if len(got) != len(want):
        return f"{len(got)} outputs against {len(want)}"
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        g, w = np.ascontiguousarray(g), np.ascontiguousarray(w)
        if g.dtype != w.dtype or g.shape != w.shape:
            return f"output {k}: {g.dtype}{list(g.shape)} against {w.dtype}{list(w.shape)}"
        if not _bits_equal(g, w):
            return f"output {k}: bits differ"
    return None


def default_feed(sess) -> dict[str, np.ndarray] | None:
    """Seeded inputs of the session's declared types and shapes (symbolic dimensions as 1), values spread over each
    type's range; None when an input is too large to feed or of a type this cannot make."""
    rng = np.random.default_rng(1234)
    feed = {}
    users = {i.name for i in sess.get_inputs()}
    for t in sess.graph.inputs:
        if t.name not in users:
            continue
        shape = [d if isinstance(d, int) and d >= 0 else 1 for d in (t.shape or ())]
        if any(d > MAX_DIM for d in shape) or np.prod(shape, dtype=np.float64) > MAX_FEED:
            return None
        dt = np.dtype(t.dtype)
        if dt.kind == "f":
            feed[t.name] = rng.uniform(-2, 2, shape).astype(dt)
        elif dt.kind == "b":
            feed[t.name] = rng.integers(0, 2, shape).astype(dt)
        elif dt.kind in "iu":
            info = np.iinfo(dt)
            feed[t.name] = rng.integers(max(info.min, -128), min(info.max, 255), shape, endpoint=True).astype(dt)
        else:
            return None
    return feed


def load(blob: bytes, devices: Sequence[str] = DEVICES) -> dict[str, object] | Finding:
    """device -> session or the clean error creating it; a Finding when one raised anything else."""
    import vkinfer

    clean = clean_errors()
    limits = session_limits()
    out: dict[str, object] = {}
    for d in devices:
        try:
            out[d] = vkinfer.InferenceSession(blob, device=d, **limits)
        except clean as e:
            out[d] = e
        except Hang:
            raise
        except BaseException as e:  # noqa: BLE001 - anything else is the defect looked for
            if isinstance(e, KeyboardInterrupt | SystemExit):
                raise
            return nonclean(e, d, "load")
    return out


def compare(results: Mapping[str, object]) -> Finding | None:
    """None when every device ran with the same bits, or all raised one clean class with a message."""
    kinds = {d: (type(r).__name__ if isinstance(r, BaseException) else "outputs") for d, r in results.items()}
    if len(set(kinds.values())) > 1:
        shown = {d: (f"{k}: {str(results[d])[:120]}" if k != "outputs" else k) for d, k in kinds.items()}
        return Finding("disagree", f"devices disagree: {shown}",
                       "disagree " + " ".join(f"{d}={k}" for d, k in sorted(kinds.items())))
    silent = [d for d, r in results.items() if isinstance(r, BaseException) and not str(r).strip()]
    if silent:
        k = kinds[silent[0]]
        return Finding("nonclean", f"{k} with an empty message on {', '.join(silent)}", f"nonclean empty {k}")
    ran = [d for d, r in results.items() if not isinstance(r, BaseException)]
    for d in ran[1:]:
        how = differ(results[d], results[ran[0]])
        if how:
            return Finding("disagree", f"{d} vs {ran[0]}: {how}", f"disagree bits {d}/{ran[0]} {how.split(':')[0]}")
    return None


def run_all(sessions: Mapping[str, object], feed, output_names=None) -> dict[str, object] | Finding:
    """device -> outputs or the clean error; sessions that failed to load keep their error."""
    clean = clean_errors()
    results: dict[str, object] = {}
    for d, sess in sessions.items():
        if isinstance(sess, BaseException):
            results[d] = sess
            continue
        try:
            results[d] = [np.array(o, copy=True) for o in sess.run(output_names, feed)]
        except clean as e:
            results[d] = e
        except Hang:
            raise
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt | SystemExit):
                raise
            return nonclean(e, d, "run")
    return results


def check_model(blob: bytes, feed=None, output_names=None, devices: Sequence[str] = DEVICES) -> Finding | None:
    """Load `blob` on every device and run it on `feed` (default: `default_feed` of the first device that loaded
    it): None, or the Finding."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sessions = load(blob, devices)
        if isinstance(sessions, Finding):
            return sessions
        if feed is None:
            first = next((s for s in sessions.values() if not isinstance(s, BaseException)), None)
            try:
                feed = None if first is None else default_feed(first)
            except (TypeError, ValueError):  # a declared dtype numpy has no name for: loading was the check
                feed = None
            if feed is None:  # refused everywhere, or too large to feed: loading was the check
                return compare({d: (s if isinstance(s, BaseException) else ["loaded"]) for d, s in sessions.items()})
        results = run_all(sessions, feed, output_names)
    return results if isinstance(results, Finding) else compare(results)


# ------------------------------------------------------------------------------------------------- the findings

def suffix(blob: bytes) -> str:
    return ".tflite" if blob[4:8] == b"TFL3" else ".onnx"


def layout_of(a: np.ndarray) -> str:
    """How an array lies: "c" (C-contiguous), "f" (Fortran only), "ro" (read-only), "neg" (negative last stride),
    "strided" (a view with gaps); `with_layout` rebuilds it."""
    if not isinstance(a, np.ndarray) or a.ndim == 0:
        return "c"
    if not a.flags.writeable:
        return "ro"
    if a.strides and a.strides[-1] < 0:
        return "neg"
    if a.flags.c_contiguous:
        return "c"
    return "f" if a.flags.f_contiguous else "strided"


def with_layout(a: np.ndarray, code: str) -> np.ndarray:
    """`a`'s values laid out as `code` says (see `layout_of`)."""
    if code == "f":
        return np.asfortranarray(a)
    if code == "ro":
        a = a.copy()
        a.flags.writeable = False
        return a
    if code == "neg" and a.ndim:
        return np.ascontiguousarray(a[..., ::-1])[..., ::-1]
    if code == "strided" and a.ndim:
        big = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
        big[..., ::2] = a
        return big[..., ::2]
    return a


def write_finding(out: Path, target: str, finding: Finding, blob: bytes, feed=None, output_names=None,
                  keep: int = KEEP_PER_SIGNATURE) -> Path | None:
    """Write the input under out/<kind>/<target>-<signature hash>-<input hash>.<ext> (with .json: what happened,
    and .npz: the feed, where the input had one); at most `keep` inputs per signature. Returns the model's path,
    or None when enough of this signature are already kept."""
    sig = hashlib.sha1(finding.signature.encode()).hexdigest()[:8]
    folder = out / finding.kind
    folder.mkdir(parents=True, exist_ok=True)
    if len(list(folder.glob(f"{target}-{sig}-*.json"))) >= keep:
        return None
    h = hashlib.sha1(blob + repr(feed).encode()).hexdigest()[:10]
    path = folder / f"{target}-{sig}-{h}{suffix(blob)}"
    path.write_bytes(blob)
    if feed is not None:
        arrays = feed.items() if isinstance(feed, Mapping) else enumerate(feed)
        arrays = list(arrays)
        np.savez(path.with_suffix(".npz"), **{f"feed:{k}": np.asarray(v) for k, v in arrays},
                 container=np.array(type(feed).__name__),
                 layouts=np.array(json.dumps({str(k): layout_of(v) for k, v in arrays})),
                 output_names=np.array(json.dumps(output_names)))
    meta = {"target": target, "kind": finding.kind, "detail": finding.detail, "signature": finding.signature,
            **cap_meta(), **finding.meta}
    path.with_suffix(".json").write_text(json.dumps(meta, indent=1, default=str) + "\n")
    return path


def read_input(path: str | os.PathLike) -> tuple[bytes, object, list | None]:
    """A kept input: (model bytes, feed or None, output names or None), as `write_finding` wrote it."""
    path = Path(path)
    blob = path.read_bytes()
    npz = path.with_suffix(".npz")
    if not npz.exists():
        return blob, None, None
    with np.load(npz, allow_pickle=False) as z:
        layouts = json.loads(str(z["layouts"]))
        arrays = {k[5:]: with_layout(z[k], layouts.get(k[5:], "c")) for k in z.files if k.startswith("feed:")}
        container = str(z["container"])
        names = json.loads(str(z["output_names"]))
    feed = [arrays[k] for k in sorted(arrays, key=int)] if container in ("list", "tuple") else arrays
    if container == "tuple":
        feed = tuple(feed)
    return blob, feed, names


def check_input(path: str | os.PathLike, devices: Sequence[str] = DEVICES) -> Finding | None:
    """`check_model` on a kept input (model, and its feed where it has one), under the session cap the campaign
    that found it ran with (its .json's session_mb), else the library's defaults."""
    blob, feed, names = read_input(path)
    meta = Path(path).with_suffix(".json")
    mb = json.loads(meta.read_text()).get("session_mb", 0) if meta.exists() else 0
    old = os.environ.get(SESSION_MB_ENV)
    os.environ[SESSION_MB_ENV] = str(mb)
    try:
        return check_model(blob, feed, names, devices)
    finally:
        if old is None:
            os.environ.pop(SESSION_MB_ENV, None)
        else:
            os.environ[SESSION_MB_ENV] = old


__all__ = ["DEVICES", "Finding", "Hang", "check_model", "check_input", "compare", "differ", "default_feed", "load",
           "read_input", "run_all", "cap_meta", "session_limits", "write_finding", "clean_errors", "layout_of",
           "with_layout", "where"]
