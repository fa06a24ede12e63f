"""vkinfer's Vulkan shader paths side by side on one device: the integer-dot-product shaders, the float32
requantization and the GEMM tiles, each on or off, interleaved in one process (issue 27's A/B).

    .venv/bin/python bench/vk_paths.py [--device vulkan:<which>] [--models mobilenet_v2,resnet8,...]
                                       [--config "VKINFER_VK_DOT=0,VKINFER_VK_FLOAT_RQ=0"]... [--ncnn]
                                       [--rounds R] [--per P]

A config is a comma-separated list of environment settings a device is opened with (VKINFER_VK_DOT,
VKINFER_VK_FLOAT_RQ, VKINFER_VK_TILE, VKINFER_GEMM_TILE); "default" is none. Each config gets its own device and
session of each model (bench/gpu_check.py's models: MobileNetV2 1.0/224 QOperator and the field models), run once,
then R rounds of P runs each, the configs rotated each round. Printed per model: the minimum and median wall time
of each config and its ratio to the first config's minimum; `--ncnn` adds ncnn's int8 Vulkan net of MobileNetV2 on
the same device (bench/ncnn_export.py). Every config's outputs must equal the first's bit for bit (exit status 1
otherwise). On lavapipe, set LP_NUM_THREADS=1 for stable ratios. To compare against another checkout, run this
script there too with PYTHONPATH=<checkout> from another folder (the first config then is its default).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import gpu_check  # noqa: E402

import vkinfer  # noqa: E402

KNOBS = ("VKINFER_VK_DOT", "VKINFER_VK_FLOAT_RQ", "VKINFER_VK_TILE", "VKINFER_GEMM_TILE")


def _env(config: str) -> dict[str, str]:
    if config == "default":
        return {}
    out = {}
    for kv in config.split(","):
        k, sep, v = kv.partition("=")
        if not sep or k.strip() not in KNOBS:
            raise SystemExit(f"--config takes KEY=VALUE pairs of {', '.join(KNOBS)}, got {kv!r}")
        out[k.strip()] = v.strip()
    return out


def _session(blob: bytes, device: str, env: dict[str, str]):
    """A session on a device opened anew under `env` (the device's choices are made when it opens)."""
    from vkinfer import _vk

    saved = {k: os.environ.get(k) for k in KNOBS}
    for k in KNOBS:
        os.environ.pop(k, None)
    os.environ.update(env)
    try:
        info = _vk._pick(device.partition(":")[2] or None)
        _vk._open.pop(info.index, None)
        return vkinfer.InferenceSession(blob, device=device)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="vulkan", help="vulkan or vulkan:<index|name|type>")
    ap.add_argument("--models", default="mobilenet_v2", help="comma-separated gpu_check model names")
    ap.add_argument("--config", action="append", help="KEY=VALUE,... or default (repeatable; default: the "
                    "default path and the scalar one with the integer requantization)")
    ap.add_argument("--ncnn", action="store_true", help="also ncnn's int8 Vulkan MobileNetV2 on the same device")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--per", type=int, default=3)
    args = ap.parse_args(argv)
    configs = args.config or ["default", "VKINFER_VK_DOT=0,VKINFER_VK_FLOAT_RQ=0"]
    envs = {cfg: _env(cfg) for cfg in configs}  # every config checked before any model is built
    builders = {name: build for name, _fmt, build in gpu_check._models(True)}
    bad = 0
    for name in args.models.split(","):
        if name not in builders:
            raise SystemExit(f"--models: no model {name!r}; one of {', '.join(builders)}")
        m = builders[name]()
        runs, first = {}, {}
        for cfg in configs:
            s = _session(m.blob, args.device, envs[cfg])
            first[cfg] = s.run(None, m.feed)
            runs[cfg] = lambda s=s, feed=m.feed: s.run(None, feed)
        for cfg in configs[1:]:
            if not all(np.array_equal(a, b) for a, b in zip(first[cfg], first[configs[0]], strict=True)):
                print(f"{name}: {cfg} differs from {configs[0]}")
                bad += 1
        if args.ncnn and name == "mobilenet_v2":
            import ncnn_export

            from vkinfer import _vk

            dev = _vk._pick(args.device.partition(":")[2] or None)
            x = next(iter(m.feed.values()))
            calib = [np.random.default_rng(i).standard_normal(x.shape).astype(np.float32) for i in range(4)]
            param, binf = ncnn_export.export(m.float_onnx, tempfile.mkdtemp(), name, int8=True, calib=calib)
            idx = gpu_check._ncnn_vk_index({"name": dev.name})
            once, _ = ncnn_export.ncnn_runner(param, binf, calib[0], True, 1, device=idx)
            once()
            runs["ncnn int8 vulkan"] = once
        times: dict[str, list[float]] = {k: [] for k in runs}
        names = list(runs)
        for r in range(args.rounds):
            for k in names[r % len(names):] + names[:r % len(names)]:
                for _ in range(args.per):
                    t = time.perf_counter()
                    runs[k]()
                    times[k].append(time.perf_counter() - t)
        base = min(times[names[0]])
        for k, v in times.items():
            print(f"{name:20s} {k:50s} min {min(v) * 1e3:9.2f} ms  median {statistics.median(v) * 1e3:9.2f} ms  "
                  f"{min(v) / base:5.2f}x", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
