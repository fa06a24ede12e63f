"""The three fuzz targets: the ONNX importer, the TFLite importer and `InferenceSession.run`.

A target turns fuzz data into one differential check (check.py) and says how to make data:
- `onnx`, `tflite`: the data is a model file. The plain engine makes it from a seed by 1-3 structure-aware edits
  (mutate.py); under atheris, libFuzzer's byte mutations and the same edits (a custom mutator) evolve a corpus
  of the seeds. Each model is loaded and run on every device.
- `run`: the data are decisions (a byte reader; missing bytes read as 0): which seed model, and a feed: declared
  shapes with symbolic dimensions of 1-4, values spread, raw or special (NaN, infinities, -0, extremes), or a wrong
  dtype, a wrong shape, a missing or unknown input, odd output names, a Fortran-order, strided, reversed or
  read-only array, a list or tuple instead of a dict. Sessions are made once per seed and device; every run is
  compared across the devices, and a non-contiguous feed also against the contiguous one.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np

from .check import DEVICES, Finding, check_model, compare, load, run_all, with_layout
from .mutate import mutate_model
from .seeds import onnx_seeds, tflite_seeds


class Target:
    """A fuzz target: `make(rng)` -> (what, data) for the plain engine, `corpus()` for atheris, `execute(data)` ->
    (finding or None, what was run: (model bytes, feed, output names, what))."""

    name = ""

    def make(self, rng: random.Random) -> tuple[str, bytes]:
        raise NotImplementedError

    def corpus(self) -> list[bytes]:
        raise NotImplementedError

    def execute(self, data: bytes) -> tuple[Finding | None, tuple]:
        raise NotImplementedError


class ModelTarget(Target):
    """An importer: the data is a model file."""

    def __init__(self, name: str, seeds: Callable[[], dict[str, bytes]], devices=DEVICES):
        self.name, self._seeds, self.devices = name, seeds, tuple(devices)

    def corpus(self) -> list[bytes]:
        return list(self._seeds().values())

    def make(self, rng: random.Random) -> tuple[str, bytes]:
        seeds = self._seeds()
        name = rng.choice(sorted(seeds))
        blob, donors, what = seeds[name], list(seeds.values()), []
        for _ in range(rng.choice((1, 1, 1, 2, 2, 3))):
            w, blob = mutate_model(blob, rng, donors)
            what.append(w)
        return f"{name}: {'; '.join(what)}", blob

    def mutate(self, data: bytes, max_size: int, seed: int) -> bytes:
        """atheris's custom mutator: half libFuzzer's byte mutations, half the structure-aware edits."""
        import atheris

        rng = random.Random(seed)
        if rng.random() < 0.5 or len(data) < 8:
            return atheris.Mutate(data, max_size)
        return mutate_model(data, rng, self.corpus())[1][:max_size]

    def execute(self, data: bytes) -> tuple[Finding | None, tuple]:
        return check_model(data, devices=self.devices), (data, None, None, "")


class _Reader:
    """Decisions from fuzz data: bytes in order, zeros once it runs out."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def byte(self) -> int:
        self.pos += 1
        return self.data[self.pos - 1] if self.pos <= len(self.data) else 0

    def take(self, n: int) -> bytes:
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out + bytes(n - len(out))


_SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 3.4e38, -3.4e38, 1e-45, 0.5, -0.5, 1.5, 2.5, 127.5,
                      -128.5, 255.5, 65504.0], np.float32)
_ODD_DTYPES = (np.float64, np.float16, np.int32, np.int64, np.uint8, np.int8, np.bool_, np.uint16)


def _values(r: _Reader, dt: np.dtype, shape: list[int]) -> np.ndarray:
    n = int(np.prod(shape, dtype=np.int64))
    how = r.byte() % 8
    rng = np.random.default_rng(r.byte())
    if dt.kind == "f":
        if how < 4:
            a = rng.uniform(-4, 4, n)
        elif how == 4:
            a = np.frombuffer(r.take(4 * n), np.float32)
        elif how == 5:
            a = rng.uniform(-2, 2, n)
            k = rng.integers(0, n, max(1, n // 4)) if n else []
            a[k] = _SPECIALS[rng.integers(0, len(_SPECIALS), len(k))]
        elif how == 6:
            a = np.zeros(n)
        else:
            a = rng.choice([3.4e38, -3.4e38, 1e6, -1e6], n)
        return np.asarray(a).astype(dt).reshape(shape)
    if dt.kind == "b":
        return (rng.integers(0, 2, n) > 0).reshape(shape)
    info = np.iinfo(dt)
    if how == 4:
        return np.frombuffer(r.take(dt.itemsize * n), dt).reshape(shape).copy()
    edge = np.array([info.min, info.max, 0, 1, -1 if info.min < 0 else 2], np.int64)
    a = rng.integers(max(info.min, -(2 ** 31)), min(info.max, 2 ** 31 - 1), n, endpoint=True, dtype=np.int64)
    if how == 5 and n:
        a[rng.integers(0, n, max(1, n // 4))] = edge[rng.integers(0, len(edge))]
    return a.astype(dt).reshape(shape)


def _odd_layout(v) -> bool:
    return isinstance(v, np.ndarray) and v.ndim > 0 and (not v.flags.c_contiguous or not v.flags.writeable)


class RunTarget(Target):
    """`InferenceSession.run` on the seed models (unmutated) with fuzzed feeds."""

    name = "run"

    def __init__(self, devices=DEVICES):
        self.devices = tuple(devices)
        self._sessions: dict[str, dict] = {}

    def _models(self) -> dict[str, bytes]:
        return {**onnx_seeds(), **tflite_seeds()}

    def corpus(self) -> list[bytes]:
        return [bytes([i, m]) + bytes(random.Random(i * 16 + m).getrandbits(8) for _ in range(24))
                for i in range(len(self._models())) for m in range(16)]

    def make(self, rng: random.Random) -> tuple[str, bytes]:
        return "decisions", bytes(rng.getrandbits(8) for _ in range(rng.randint(2, 96)))

    def sessions(self, name: str) -> dict:
        if name not in self._sessions:
            s = load(self._models()[name], self.devices)
            if isinstance(s, Finding) or any(isinstance(v, BaseException) for v in s.values()):
                raise RuntimeError(f"seed model {name} does not load on every device: {s}")
            self._sessions[name] = s
        return self._sessions[name]

    def decode(self, data: bytes) -> tuple[str, object, list | None, str]:
        """(seed name, feed, output names, what) from the decisions in `data`."""
        r = _Reader(data)
        names = sorted(self._models())
        name = names[r.byte() % len(names)]
        sess = self.sessions(name)[self.devices[0]]
        inputs = [t for t in sess.graph.inputs if t.name in {i.name for i in sess.get_inputs()}]
        outs = [o.name for o in sess.get_outputs()]
        mode = r.byte() % 16
        feed: dict[str, np.ndarray] = {}
        what = [name]
        for t in inputs:
            shape = [d if isinstance(d, int) and d >= 0 else 1 + r.byte() % 4 for d in (t.shape or ())]
            feed[t.name] = _values(r, np.dtype(t.dtype), shape)
        names_out: list | None = None
        pick = r.byte()
        key = list(feed)[pick % len(feed)] if feed else None
        if mode == 10 and key:
            dt = _ODD_DTYPES[r.byte() % len(_ODD_DTYPES)]
            feed[key] = feed[key].astype(dt)
            what.append(f"{key} as {np.dtype(dt)}")
        elif mode == 11 and key:
            a, how = feed[key], r.byte() % 4
            shape = list(a.shape)
            if how == 0:
                shape.append(1)
            elif how == 1 and shape:
                shape = shape[1:]
            elif shape:
                shape[r.byte() % len(shape)] = 0 if how == 2 else shape[-1] + 1
            feed[key] = np.resize(a, shape)
            what.append(f"{key} shape {shape}")
        elif mode == 12:
            if key and r.byte() % 2:
                del feed[key]
                what.append(f"{key} missing")
            else:
                feed["bogus"] = np.zeros(2, np.float32)
                what.append("unknown input")
        elif mode == 13:
            how = r.byte() % 5
            names_out = [[], outs[::-1], outs + outs[:1], ["nope"], outs[:1]][how]
            what.append(f"output_names {names_out}")
        elif mode == 14 and key:
            code = ("f", "neg", "strided", "ro")[r.byte() % 4]
            feed[key] = with_layout(feed[key], code)
            what.append(f"{key} laid out {code}")
        elif mode == 15:
            how = r.byte() % 2
            feed = list(feed.values()) if how == 0 else tuple(feed.values())
            what.append(f"feed as a {type(feed).__name__}")
        return name, feed, names_out, ", ".join(what)

    def execute(self, data: bytes) -> tuple[Finding | None, tuple]:
        import warnings

        name, feed, names_out, what = self.decode(data)
        sessions = self.sessions(name)
        ran = (self._models()[name], feed, names_out, what)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for s in sessions.values():
                s.reset_state()  # a streaming model: every execution starts from the initial state
            results = run_all(sessions, feed, names_out)
            if isinstance(results, Finding):
                return results, ran
            if isinstance(feed, dict) and any(_odd_layout(v) for v in feed.values()):
                first = sessions[self.devices[0]]
                first.reset_state()
                plain = {k: np.array(v, copy=True, order="C") for k, v in feed.items()}
                extra = run_all({"contiguous": first}, plain, names_out)
                if isinstance(extra, Finding):
                    return extra, ran
                results = {**results, **extra}
        return compare(results), ran


def targets(names: str | list[str], devices=DEVICES) -> list[Target]:
    """The targets named (a comma-separated string or a list of "onnx", "tflite", "run"; "all": every one)."""
    if isinstance(names, str):
        names = names.split(",")
    if "all" in names:
        names = ["onnx", "tflite", "run"]
    table = {"onnx": lambda: ModelTarget("onnx", onnx_seeds, devices),
             "tflite": lambda: ModelTarget("tflite", tflite_seeds, devices),
             "run": lambda: RunTarget(devices)}
    out = []
    for n in names:
        if n in table:
            out.append(table[n]())
        elif ":" in n:  # module:attribute, a Target (the tests plant crashes and hangs this way)
            import importlib

            mod, _, attr = n.partition(":")
            out.append(getattr(importlib.import_module(mod), attr)())
        else:
            raise ValueError(f"unknown fuzz target {n!r}; the targets: onnx, tflite, run, all")
    return out


__all__ = ["Target", "ModelTarget", "RunTarget", "targets"]
