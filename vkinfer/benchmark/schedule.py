"""One job of `vkinfer bench`: every engine of one model at one thread count, run interleaved in rotating order
(interleave), vkinfer's Vulkan rows capped (vulkan_cap), then profiled and scored outside the timed runs, into
records (bench_model)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from ..layer_times import per_layer
from . import records
from .engines import Engine, make_engines
from .engines.ncnn import _float_pair
from .engines.vkinfer import analysis
from .load import Model
from .stats import agreement, summary


def _in_round(e: Engine, r: int, runs: int, warmup: int) -> bool:
    """Whether engine `e` runs in round `r`: every round, or for a capped one its last `cap` warm-up rounds and
    `cap` timed rounds spread evenly over the `runs`."""
    if e.cap is None or e.cap >= runs:
        return True
    if r < warmup:
        return r >= warmup - min(warmup, e.cap)
    t = r - warmup
    return (t + 1) * e.cap // runs > t * e.cap // runs


def interleave(engines: list[Engine], runs: int, warmup: int, tick: Callable[[int], None] | None = None) -> None:
    """Run the ok engines in rotating order, `warmup` untimed rounds and `runs` timed ones (ms in .latencies;
    an engine with a `cap` takes part in only that many of each, see _in_round). An engine that raises is marked
    "error" and leaves the rotation. `tick(n)` is told of each n rounds done (the progress bar)."""
    total = warmup + runs
    for r in range(total):
        if not any(e.status == "ok" for e in engines):
            if tick is not None:
                tick(total - r)
            return
        live = [e for e in engines if e.status == "ok" and _in_round(e, r, runs, warmup)]
        k = r % len(live) if live else 0
        for e in live[k:] + live[:k]:
            try:
                t0 = time.perf_counter()
                e.run()
                dt = (time.perf_counter() - t0) * 1e3
            except KeyboardInterrupt:
                raise
            except Exception as err:  # noqa: BLE001
                e.status, e.error, e.run = "error", f"{type(err).__name__}: {err}", None
                e.latencies = []
                continue
            if r >= warmup:
                e.latencies.append(dt)
        if tick is not None:
            tick(1)


SOFT_VULKAN_RUNS = 10  # default --vulkan-runs on a CPU-emulated Vulkan device (lavapipe, SwiftShader)


def vulkan_cap(device: str, vk: list[dict[str, Any]] | str, runs: int, vulkan_runs: int | None) -> int | None:
    """The timed runs of a vkinfer row on `device` when fewer than `runs` (None: all): --vulkan-runs where given,
    else SOFT_VULKAN_RUNS on a Vulkan device of type "cpu" (vk: conditions.vulkan_devices(), preferred first)."""
    kind, _, which = device.partition(":")
    if kind != "vulkan":
        return None
    if vulkan_runs is not None:
        return vulkan_runs if vulkan_runs < runs else None
    if not isinstance(vk, list) or not vk:
        return None
    dev = vk[0]
    if which:
        dev = next((d for d in vk if which in (str(d.get("index")), d.get("name"), d.get("type"))), None)
        if dev is None:
            dev = vk[0] if not which.isdigit() else None
    soft = dev is not None and dev.get("type") == "cpu"
    return SOFT_VULKAN_RUNS if soft and SOFT_VULKAN_RUNS < runs else None


def bench_model(model: Model, devices: list[str], peers: list[str], threads: int, runs: int, warmup: int,
                cond: dict[str, Any], *, vulkan_runs: int | None = None, layers: bool = False,
                dataset: str | None = None, tick: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Every engine's record for one model at one thread count: timed interleaved (vkinfer's Vulkan rows capped
    as vulkan_cap says), then, outside the timed runs, `layers` (--per-layer) profiles each vkinfer session and
    `dataset` (--dataset) measures each engine's accuracy. `tick(n)`: n rounds done (the progress bar)."""
    engines = make_engines(model, devices, peers, threads)
    for e in engines:
        if e.name == "vkinfer":
            e.cap = vulkan_cap(e.device, cond.get("vulkan", []), runs, vulkan_runs)
    interleave(engines, runs, warmup, tick)
    macs = peak = None
    for e in engines:  # the analysis of the first vkinfer session that was made
        if e.name == "vkinfer" and e.session is not None:
            try:
                macs, peak = analysis(e.session, model.feed)
            except Exception:  # noqa: BLE001 - the numbers are optional, the timing is not
                pass
            break
    profiles: dict[int, Any] = {}
    if layers:
        for e in engines:
            if e.name == "vkinfer" and e.status == "ok" and e.session is not None:
                try:
                    profiles[id(e)] = per_layer(e.session, model.feed, threads)
                except KeyboardInterrupt:
                    raise
                except Exception as err:  # noqa: BLE001 - a profile that fails leaves the timing valid
                    print(f"vkinfer bench: warning: --per-layer of {model.label} on {e.device}: "
                          f"{type(err).__name__}: {err}", file=sys.stderr)
    accuracy = _accuracy(model, engines, threads, dataset) if dataset is not None else {}
    ref = next((e for e in engines if e.outputs is not None), None)
    out = []
    for e in engines:
        n = runs if e.cap is None else e.cap
        rec = records.new_record(model.label, e.name, e.device, threads, status=e.status, error=e.error,
                                 runs=n, warmup=warmup if e.cap is None else min(warmup, e.cap),
                                 create_cold_ms=e.create_cold_ms, create_warm_ms=e.create_warm_ms, macs=macs,
                                 model_bytes=len(model.data), peak_activation_bytes=peak, conditions=cond)
        if e.status == "ok":
            rec["latencies_ms"] = list(e.latencies)
            rec.update(summary(e.latencies))
            if macs is not None and rec["p50_ms"] > 0:
                rec["gops"] = 2 * macs / (rec["p50_ms"] * 1e-3) / 1e9
            if ref is not None and e is not ref:
                a, b, note = ref.outputs, e.outputs, None
                if "ncnn" in (e.name, ref.name):  # the float model against the quantized one (cli.py)
                    a, b, note = _float_pair(model, ref, e)
                rec["agreement"] = agreement(a, b, ref.name)
                rec["agreement"]["reference_device"] = ref.device
                if note is not None:
                    rec["agreement"]["note"] = "; ".join(filter(None, (rec["agreement"].get("note"), note)))
            if id(e) in profiles:
                rec["per_layer"] = profiles[id(e)]
        if dataset is not None and "accuracy" in rec:
            rec["accuracy"] = accuracy.get(id(e))
        out.append(rec)
    return out


def _accuracy(model: Model, engines: list[Engine], threads: int, dataset: str) -> dict[int, Any]:
    """Engine id -> vkinfer.benchmark.accuracy.evaluate's result for it (H-ACC's module): the vkinfer rows one
    device at a time, the peers together on the CPU. A failure is that engine's {"status": "error", ...}."""
    from . import accuracy as acc

    out: dict[int, Any] = {}
    groups: dict[str, list[Engine]] = {}
    for e in engines:
        if e.status == "ok":
            groups.setdefault(e.device if e.name == "vkinfer" else "#peers", []).append(e)
    for dev, es in groups.items():
        device = "cpu" if dev == "#peers" else dev
        try:
            res = acc.evaluate(model.path, dataset, [e.name for e in es], threads, device)
        except KeyboardInterrupt:
            raise
        except Exception as err:  # noqa: BLE001 - the accuracy of one group, not the run
            res = {e.name: {"top1": None, "n": 0, "status": "error", "error": f"{type(err).__name__}: {err}"}
                   for e in es}
        for e in es:
            out[id(e)] = res.get(e.name)
    return out
