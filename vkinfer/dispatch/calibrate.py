"""This machine's profile for the dispatcher (`ensure_profile`: cached entries, or a calibration). The calibration
itself lives in vkinfer/dispatch/calibration/ (grid, measure, fit; the entry `calibrate_device`).
`ensure_profile` calls `calibrate_device` through this module's globals, so replacing it here (as tests do)
replaces it for every caller of ensure_profile. It sits above the backends and the compiler (a calibration
compiles and times small plans), below the session, whose first auto session calibrates.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

from . import machine
from .calibration import calibrate_device
from .placement import HOST
from .profile import Profile, cached_entry, cpu_identity, host_identity, store_entry

__all__ = ["ensure_profile"]


def ensure_profile(devices: list[str], threads: list[int], mode: str = "quick", *, force: bool = False,
                   log: Callable[[str], None] | None = None, announce: str | None = None) -> Profile:
    """The profile of `devices` ("cpu", "vulkan:<n>"; the host is added) at each CPU thread count in `threads`:
    cached entries where the device's identity, vkinfer's version and the thread count match, a calibration for
    the rest (`force`: all). `announce`: printed on stderr before calibrating anything (auto sessions)."""

    listed = machine.vulkan_devices() if any(d.startswith("vulkan") for d in devices) else []
    vk = {d["device"]: d for d in listed}
    default = [d["device"] for d in listed if d["default"]]
    devices = [default[0] if d == "vulkan" and default else d for d in devices]
    wanted: list[tuple[str, int, dict]] = []
    for d in dict.fromkeys((*devices, HOST)):
        if d.startswith("cpu"):
            wanted.extend(("cpu", t, cpu_identity()) for t in threads)
        elif d == HOST:
            wanted.append((HOST, 1, host_identity()))
        elif d in vk:
            wanted.append((d, 1, vk[d]["identity"]))
        else:
            raise ValueError(f"no device {d!r} to calibrate (Vulkan devices here: {', '.join(vk) or 'none'})")
    entries, todo = [], []
    for dev, t, ident in wanted:
        e = None if force else cached_entry(dev, ident, t)
        (entries.append(e) if e is not None else todo.append((dev, t)))
    if todo:
        if announce:
            print(announce.format(devices=", ".join(f"{d}" + (f" ({t} thread{'s' * (t > 1)})" if d == "cpu" else "")
                                                    for d, t in todo)), file=sys.stderr)
        start = time.perf_counter()
        made = [calibrate_device(dev, t, mode, log=log) for dev, t in todo]
        meta = {"mode": mode, "seconds": round(time.perf_counter() - start, 3),
                "date": time.strftime("%Y-%m-%dT%H:%M:%S")}
        for e in made:  # stored only once every device is done: an interrupted run leaves the old cache
            store_entry(e, meta)
        entries.extend(made)
    return Profile(entries, {"mode": mode})
