"""Plan a graph for the devices of a calibration profile without running anything (`vkinfer info --profile`,
bench/fleet.py): the profile may describe devices this machine does not have. It uses the compiler's lowering
(the same decisions a session makes) on stand-in backends, so it sits above the compiler."""

from __future__ import annotations

from ..model.graph import Graph
from . import AutoPlacement, Dispatcher
from .placement import HOST
from .profile import Profile


def simulate(g: Graph, feed: dict, profile: Profile, threads: int = 1, objective: str = "median",
             devices: list[str] | None = None) -> AutoPlacement:
    """Plan `g` for the devices of `profile` (default: all of them, the CPU first) without running anything:
    the profile may describe devices this machine does not have (a phone's GPU, say). Which device can run a
    node is decided by the same lowerings a session uses, on stand-in backends."""
    import types

    from ..compiler.plan import CpuBackend, Plan, trace
    from ..model.lowering import Ctx

    devices = devices or sorted(profile.names(), key=lambda d: (not d.startswith("cpu"), d))
    devices = [d for d in devices if d != HOST]
    info = trace(g, feed)
    ctx = Ctx(g, info)
    backends = {d: CpuBackend(None) if d.startswith("cpu") else types.SimpleNamespace(kind=d.partition(":")[0],
                                                                                          name=d, dev=None)
                for d in devices}
    by_name = {n.name: n for n in g.nodes}
    memo: dict[tuple[str, str], object] = {}

    def can(name: str, dev: str):
        if (name, dev) not in memo:
            memo[name, dev] = Plan._lower(ctx, by_name[name], backends[dev])[0]
        return memo[name, dev]
    return Dispatcher(devices, profile, threads, objective).place(g, info, can)
