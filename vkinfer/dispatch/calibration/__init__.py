"""Calibration: measure what each op class costs on one device of this machine and fit its cost model.

    entry = calibrate_device("cpu", threads=1, mode="quick")     # a DeviceProfile (vkinfer/dispatch/profile.py)
    entry = calibrate_device("vulkan:1")                         # lavapipe here
    model = fit_class([(work, ns), ...], tile=(32, 32))          # one ClassModel

Four parts: `grid` (the single-node graphs timed per op class, vkinfer/dispatch/costs.py's classes, and which
grids take them), `workload` (the small field models whose nodes the CPU's calibration also times inside whole
models, as graphs), `measure` (running and timing them on the CPU, a Vulkan device or the host) and `fit` (one
cost model per class: fixed, per-MAC and per-byte terms, its error, the tile). This module joins them per device.

The calibration imports no session and no test fixture: whole models are compiled with the APIs the session
compiles with (measure._whole_model), and which models it times is the caller's choice (`workload`, default the
field models of workload.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ..costs import CLASSES, path_keys
from ..profile import DeviceProfile, Link, cpu_identity, device_from_json, host_identity
from .fit import (
    CPU_TILES,
    HOST_TILE,
    MIN_SAMPLES,
    TILED,
    VULKAN_TILE,
    Sample,
    _check_classes,
    _fit_all,
    _fit_link,
    fit_class,
    fit_paths,
    pick_tile,
)
from .grid import GRID, MODES, Shape, grid
from .measure import (
    MODEL_SAMPLES,
    Workload,
    _measure_cpu,
    _measure_host,
    _measure_vulkan,
    _vulkan_links,
    field_workload,
    model_samples,
    probe_u8s8,
)


def _log_samples(samples: list[Sample], log) -> None:
    if log:
        for s in samples:
            log(f"  {s.shape.op_class:11s} {s.shape.label:40s} {s.ns / 1e3:9.2f} us")


def calibrate_device(device: str, threads: int = 1, mode: str = "quick",
                     log: Callable[[str], None] | None = None, workload: Workload | None = None) -> DeviceProfile:
    """Calibrate one device of this machine: "cpu" (the native CPU graph, default ISA variant, at `threads`
    threads), "vulkan:<index>" (or "vulkan": the default Vulkan device) or "host" (the numpy interpreter).

    `mode`: "quick" (3-5 shapes per op class) or "full" (9-15). `log`: an optional callable taking progress lines.
    `workload`: the whole models the CPU's calibration also times node by node (measure.Workload; None: the
    field models, workload.field_workload).
    Returns a DeviceProfile that profile.device_from_json(entry.to_json()) accepts, with a model for every op
    class. Raises ValueError for an unknown device, mode or thread count; VulkanUnavailableError (from
    vkinfer._vk) when a Vulkan device is asked for and Vulkan is missing."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    kind, _, which = device.partition(":")
    t0 = time.perf_counter()
    if kind == "cpu" and not which:
        entry = _calibrate_cpu(threads, mode, log, workload or field_workload)
    elif kind == "vulkan":
        entry = _calibrate_vulkan(which, mode, log)
    elif device == "host":
        entry = _calibrate_host(mode, log)
    else:
        raise ValueError(f"cannot calibrate device {device!r}: expected \"cpu\", \"vulkan:<index>\" or \"host\"")
    entry = device_from_json(entry.to_json())  # the same checks a profile file gets
    if log:
        log(f"{entry.device} (threads {entry.threads}): calibrated in {time.perf_counter() - t0:.2f} s")
    return entry


def _calibrate_cpu(threads: int, mode: str, log, workload: Workload = field_workload) -> DeviceProfile:
    u8s8 = probe_u8s8()
    if log:
        log(f"  cpu u8s8 weight ranges: {u8s8 or 'none'}")
    samples, edges = _measure_cpu(grid("cpu", mode), threads, mode)
    _log_samples(samples, log)
    _check_classes(samples, "cpu")
    in_models, overheads = model_samples(threads, mode, workload)
    samples = samples + in_models
    # The class models (and the tile) from the samples off the int16 weight path, as before kernel paths: the
    # int16 kernels are 1.4-3x slower per MAC, so one fit over both follows neither (gemm's error went from 10%
    # to 30%, depthwise's from 11% to 42%); the int16 samples get their own path models below.
    default = [s for s in samples if "i16" not in "".join(path_keys(s.work, u8s8))]
    by_class = {c: sum(1 for s in default if s.work.op_class == c) for c in CLASSES}
    if any(n < MIN_SAMPLES for n in by_class.values()):
        default = samples
    tile = pick_tile(default, CPU_TILES)
    if log:
        log(f"  cpu tile {tile[0]}x{tile[1]}")
    classes = _fit_all(default, tile, "cpu", log)
    # Each GEMM-like class then gets its own tile when that fits it better: the depthwise kernel vectorises
    # channels in 16s while the GEMM tile is 4 rows x 32 channels (avx512vnni), and channel tails cost a copy
    # per tap (an 8-channel depthwise layer took 71 ns per pixel against 15 ns for 16 channels).
    for c in TILED:
        mine = [(s.work, s.ns) for s in default if s.work.op_class == c]
        own = pick_tile(mine, CPU_TILES, (c,))
        if own != tile:
            m = fit_class(mine, own)
            if m.error < classes[c].error:
                classes[c] = replace(m, tile=own)
                if log:
                    log(f"  cpu {c} tile {own[0]}x{own[1]}: error {100 * m.error:.1f}%")
    # Then each kernel path where the samples cover it (costs.path_keys): the weight path (u8s8 or int16),
    # grouped/dilated/dense convolutions, each op of the other classes.
    paths = fit_paths(samples, classes, u8s8, tile, log)
    # A class's error is then that of its predictions, through its paths (what the dispatcher weighs and
    # profile.UNTRUSTED_ERROR judges): one fit over 5-D shuffles, requantizing concats and 4-D moves was 56% off,
    # the per-op predictions 12-35%.
    for c in CLASSES:
        mine = [s for s in samples if s.work.op_class == c]
        if paths and mine:
            pred = [next((paths[k] for k in path_keys(s.work, u8s8) if k in paths), classes[c]).ns(s.work, tile)
                    for s in mine]
            err = float(np.median([abs(p - s.ns) / s.ns for p, s in zip(pred, mine, strict=True)]))
            classes[c] = replace(classes[c], error=err)
    # Per segment: the public run's cost outside the operators where whole models gave it, else the runner's;
    # that of the models whose input the segment reads in place (float), and the rest of an 8-bit input model's
    # on its dtype's upload (the per-run cost by input dtype: the runner converts 8-bit inputs and outputs).
    upload = _fit_link(edges.get("upload", []))
    links = {k: _fit_link(v) for k, v in edges.items() if ":" in k}
    if overheads:
        plain = [ns for dt, ns in overheads if np.dtype(dt).itemsize != 1]
        segment = float(np.median(plain or [ns for _, ns in overheads]))
        for dt in sorted({dt for dt, _ in overheads if np.dtype(dt).itemsize == 1}):
            extra = float(np.median([ns for d, ns in overheads if d == dt])) - segment
            if plain and extra > 0:
                base = links.get(f"upload:{dt}", upload)
                links[f"upload:{dt}"] = Link(base.fixed_ns + extra, base.ns_per_byte)
    else:
        segment = float(np.median(edges["overhead"]))
    return DeviceProfile("cpu", "cpu", threads, cpu_identity(), max(0.0, segment),
                         upload, _fit_link(edges.get("download", [])), tile,
                         float(np.median([s.tail for s in samples])), classes, paths, u8s8, links)


def _calibrate_vulkan(which: str, mode: str, log) -> DeviceProfile:
    from ... import _vk
    from ..machine import vulkan_identity

    dev = _vk.get_device(int(which) if which.isdigit() else (which or None))
    name = f"vulkan:{dev.info.index}"
    if log:
        log(f"{name}: {dev.info.name}")
    samples, seg = _measure_vulkan(dev, grid("vulkan", mode), mode)
    _log_samples(samples, log)
    _check_classes(samples, name)
    classes = _fit_all(samples, VULKAN_TILE, name, log)
    up, down = _vulkan_links(dev, mode)
    return DeviceProfile(name, "vulkan", 1, vulkan_identity(dev.info.index), seg, up, down, VULKAN_TILE,
                         float(np.median([s.tail for s in samples])), classes)


def _calibrate_host(mode: str, log) -> DeviceProfile:
    samples = _measure_host(grid("host", mode), mode)
    _log_samples(samples, log)
    _check_classes(samples, "host")
    classes = _fit_all(samples, HOST_TILE, "host", log)
    return DeviceProfile("host", "host", 1, host_identity(), 0.0, Link(0.0, 0.0), Link(0.0, 0.0), HOST_TILE,
                         float(np.median([s.tail for s in samples])), classes)


__all__ = ["calibrate_device", "fit_class", "pick_tile", "grid", "GRID", "Shape", "MODES", "MIN_SAMPLES",
           "VULKAN_TILE", "HOST_TILE", "CPU_TILES", "TILED", "MODEL_SAMPLES", "Sample", "Workload",
           "field_workload", "model_samples"]
