"""The engines `vkinfer bench` runs side by side: vkinfer (one per --device) and its peers on the CPU, each in its
own module (vkinfer, onnxruntime, litert, ncnn). make_engines creates them for one (model, threads), or marks them
"missing" or "error" with the reason. Each engine's options: vkinfer.benchmark.cli's docstring."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..load import Model
from .litert import _litert_factory
from .ncnn import NCNN_NEEDS, _ncnn_factory
from .onnxruntime import _ort_factory
from .vkinfer import _vkinfer_factory

PEERS = ("onnxruntime", "litert", "ncnn")



@dataclass
class Engine:
    """One engine on one device for one (model, threads): its runner once created, else why not."""

    name: str
    device: str
    status: str = "ok"
    error: str | None = None
    run: Callable[[], list[np.ndarray]] | None = None
    outputs: list[np.ndarray] | None = None
    create_cold_ms: float | None = None
    create_warm_ms: float | None = None
    session: Any = None
    latencies: list[float] = field(default_factory=list)
    cap: int | None = None  # timed runs when fewer than the job's (--vulkan-runs)

    @property
    def label(self) -> str:
        return f"{self.name}/{self.device}"


def _missing_module(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


def _why_missing(name: str, device: str, model: Model) -> str | None:
    """Why engine `name` cannot run on `device` for `model` here (None: it can be tried)."""
    if name == "vkinfer":
        if device == "auto":
            return None
        from ... import ops

        try:
            ops._backend(device, None)  # the device exists (a Vulkan driver, that variant on this CPU)
        except Exception as e:  # noqa: BLE001 - VulkanUnavailableError, ValueError, a driver failure
            return f"device {device} is not available here: {e}"
        return None
    if name == "onnxruntime":
        if _missing_module("onnxruntime"):
            return "onnxruntime is not installed (pip install onnxruntime)"
        if model.tflite:
            return "onnxruntime does not run .tflite models"
        return None
    if name == "litert":
        if _missing_module("ai_edge_litert"):
            return "ai-edge-litert is not installed (pip install ai-edge-litert)"
        if not model.tflite:
            return "litert runs .tflite models only"
        return None
    if _missing_module("ncnn"):
        return "ncnn is not installed (pip install ncnn)"
    if model.ncnn is None:
        return NCNN_NEEDS
    return None


def _create(engine: Engine, make: Callable[[], tuple[Callable, Any]]) -> None:
    """Create the session twice (cold, then warm), each time up to its first outputs; keep the second."""
    try:
        for attempt in range(2):
            t0 = time.perf_counter()
            run, sess = make()
            outs = [np.asarray(o) for o in run()]
            ms = (time.perf_counter() - t0) * 1e3
            if attempt == 0:
                engine.create_cold_ms = ms
                del run, sess
            else:
                engine.create_warm_ms = ms
                engine.run, engine.session, engine.outputs = run, sess, outs
    except KeyboardInterrupt:
        raise
    except Exception as e:  # noqa: BLE001 - any engine failure is that engine's record
        engine.status, engine.error, engine.run = "error", f"{type(e).__name__}: {e}".strip(), None


def make_engines(model: Model, devices: list[str], peers: list[str], threads: int) -> list[Engine]:
    """vkinfer on each device, then each peer on the CPU: created (or marked missing/error), in record order."""
    engines = [Engine("vkinfer", d) for d in devices] + [Engine(p, "cpu") for p in peers]
    for e in engines:
        why = _why_missing(e.name, e.device, model)
        if why is not None:
            e.status, e.error = "missing", why
            continue
        try:
            make = (_vkinfer_factory(model, e.device, threads) if e.name == "vkinfer" else
                    _ort_factory(model, threads) if e.name == "onnxruntime" else
                    _ncnn_factory(model, threads) if e.name == "ncnn" else _litert_factory(model, threads))
        except ImportError as err:
            e.status, e.error = "missing", f"{e.name}: {err}"
            continue
        _create(e, make)
    return engines
