"""The result records of `vkinfer bench`: one JSON object per line, one per (model, engine, device, threads).

Schema ``vkinfer.bench/1`` (every field is present in every record written; ``null`` where it does not apply;
``per_layer`` and ``accuracy`` may be absent from a file and are then read as ``null``):

=========================  ==========================================================================
field                      meaning
=========================  ==========================================================================
``schema``                 ``"vkinfer.bench/1"``
``model``                  the model as given (a path, or a zoo name)
``engine``                 ``"vkinfer"``, ``"onnxruntime"``, ``"litert"`` or ``"ncnn"``
``device``                 the engine's device: ``"cpu"``, ``"vulkan"``, ``"vulkan:<n>"``, ``"auto"``
``threads``                CPU threads the engine was given (int)
``status``                 ``"ok"``; ``"missing"`` (engine or device not available here: see ``error``);
                           ``"error"`` (it failed on this model: see ``error``)
``error``                  why the status is not ``"ok"`` (string), else null
``runs``, ``warmup``       timed and untimed runs (int)
``latencies_ms``           every timed run in order (list of float, ``runs`` long; empty unless ok)
``min_ms`` ... ``max_ms``  ``min_ms``, ``p50_ms``, ``p90_ms``, ``p99_ms``, ``max_ms``, ``mean_ms``, ``std_ms``
``cv``                     coefficient of variation, ``std_ms / mean_ms``
``create_cold_ms``         first session creation in the process (caches cold)
``create_warm_ms``         a second creation of the same session
``macs``                   multiply-accumulates of one inference (vkinfer's count of the model)
``gops``                   ``2 * macs / p50`` in 10^9 ops per second
``model_bytes``            size of the model file
``peak_activation_bytes``  vkinfer's plan: the peak of live intermediate tensors
``agreement``              against the reference engine of the run: ``{"reference": engine,
                           "identical_fraction": float, "max_abs_diff": float}``
``per_layer``              ``--per-layer``: list of ``{"node", "device", "measured_ms", "predicted_ms"}``
``accuracy``               ``--dataset``: this engine's top-1 on the labelled data set, as
                           vkinfer.benchmark.accuracy.evaluate gives it (``{"dataset", "status", "error",
                           "top1", "n", "correct", "agreement", ...}``); null without ``--dataset``
``conditions``             object: CPU model and flags, threads and pinning, Vulkan device and driver,
                           versions, git commit, date, hostname (vkinfer.benchmark.conditions)
=========================  ==========================================================================

Files are appended to one record at a time and flushed, so a run stopped midway leaves a valid file of the
finished records.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

SCHEMA = "vkinfer.bench/1"
ENGINES = ("vkinfer", "onnxruntime", "litert", "ncnn")
STATUSES = ("ok", "missing", "error")
STAT_FIELDS = ("min_ms", "p50_ms", "p90_ms", "p99_ms", "max_ms", "mean_ms", "std_ms", "cv")
FIELDS = ("schema", "model", "engine", "device", "threads", "status", "error", "runs", "warmup", "latencies_ms",
          *STAT_FIELDS, "create_cold_ms", "create_warm_ms", "macs", "gops", "model_bytes", "peak_activation_bytes",
          "agreement", "per_layer", "accuracy", "conditions")


OPTIONAL_FIELDS = ("per_layer", "accuracy")  # may be absent from a file; read as null


class RecordError(ValueError):
    """A results file or record that does not follow the schema (the message names the file, line and field)."""


def new_record(model: str, engine: str, device: str, threads: int, **fields: Any) -> dict[str, Any]:
    """A record with every schema field: the given ones set, the rest null (``latencies_ms`` empty)."""
    rec: dict[str, Any] = dict.fromkeys(FIELDS)
    rec.update(schema=SCHEMA, model=model, engine=engine, device=device, threads=int(threads), status="ok",
               latencies_ms=[], conditions={})
    for k, v in fields.items():
        if k not in rec:
            raise KeyError(f"not a field of {SCHEMA}: {k!r}")
        rec[k] = v
    return rec


def key(rec: dict[str, Any]) -> tuple[str, str, str, int]:
    """What pairs records of two files: (model, engine, device, threads). Records a fleet measured
    (``--ray``: conditions carry ``ray_node_id``) name their node's host in the device, ``cpu@host``, since
    every node measures the same (model, engine, device, threads)."""
    cond = rec.get("conditions") or {}
    device = rec["device"]
    if cond.get("ray_node_id"):
        device = f"{device}@{cond.get('hostname') or cond.get('ray_node_ip') or cond['ray_node_id']}"
    return rec["model"], rec["engine"], device, rec["threads"]


def _check(rec: Any, where: str) -> dict[str, Any]:
    if not isinstance(rec, dict):
        raise RecordError(f"{where}: a record must be a JSON object, not {type(rec).__name__}")
    for f in OPTIONAL_FIELDS:  # null when absent: files written before these fields existed stay readable
        rec.setdefault(f, None)
    missing = [f for f in FIELDS if f not in rec]
    if missing:
        raise RecordError(f"{where}: missing field(s) {', '.join(missing)}")
    if rec["schema"] != SCHEMA:
        raise RecordError(f"{where}: schema {rec['schema']!r}, expected {SCHEMA!r}")
    for f in ("model", "engine", "device"):
        if not isinstance(rec[f], str) or not rec[f]:
            raise RecordError(f"{where}: field {f} must be a non-empty string")
    if rec["engine"] not in ENGINES:
        raise RecordError(f"{where}: unknown engine {rec['engine']!r} (one of {', '.join(ENGINES)})")
    if rec["status"] not in STATUSES:
        raise RecordError(f"{where}: status {rec['status']!r} is not one of {', '.join(STATUSES)}")
    if not isinstance(rec["threads"], int) or isinstance(rec["threads"], bool) or rec["threads"] < 1:
        raise RecordError(f"{where}: threads must be a positive integer")
    lat = rec["latencies_ms"]
    if not isinstance(lat, list) or not all(isinstance(v, int | float) and not isinstance(v, bool) and
                                            math.isfinite(v) and v >= 0 for v in lat):
        raise RecordError(f"{where}: latencies_ms must be a list of finite non-negative numbers")
    if rec["status"] == "ok":
        if not lat:
            raise RecordError(f"{where}: status ok but latencies_ms is empty")
        for f in STAT_FIELDS:
            if not isinstance(rec[f], int | float) or not math.isfinite(rec[f]):
                raise RecordError(f"{where}: field {f} must be a finite number")
    elif not isinstance(rec["error"], str):
        raise RecordError(f"{where}: status {rec['status']} needs an error message")
    if rec["accuracy"] is not None and not isinstance(rec["accuracy"], dict):
        raise RecordError(f"{where}: accuracy must be an object or null")
    if not isinstance(rec["conditions"], dict):
        raise RecordError(f"{where}: conditions must be an object")
    return rec


def validate(rec: Any, where: str = "record") -> dict[str, Any]:
    """`rec` if it follows the schema, else RecordError naming `where` and the field."""
    return _check(rec, where)


class Writer:
    """Appends records to a JSON-lines file, each flushed as soon as it is written."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._f = self.path.open("a", encoding="utf-8")

    def write(self, rec: dict[str, Any]) -> None:
        """Validate `rec` and append it as one line."""
        validate(rec, f"{self.path}: new record")
        self._f.write(json.dumps(rec, allow_nan=False) + "\n")
        self._f.flush()

    def close(self) -> None:
        """Close the file."""
        self._f.close()

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a JSON-lines file, validated; RecordError names the file and line of the first bad one."""
    return list(iter_records(path))


def iter_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Like read(), lazily."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise RecordError(f"{p}: cannot read results file: {e}") from e
    n = 0
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise RecordError(f"{p}:{i}: not JSON ({e.msg})") from e
        n += 1
        yield _check(rec, f"{p}:{i}")
    if n == 0:
        raise RecordError(f"{p}: no records")


def write_all(path: str | Path, recs: Iterable[dict[str, Any]]) -> None:
    """Write `recs` to a new file (replacing it)."""
    p = Path(path)
    p.write_text("", encoding="utf-8")
    with Writer(p) as w:
        for r in recs:
            w.write(r)
