"""The dispatcher: each node on the device where it finishes first, from a cost model calibrated on this machine.

    calibrate (vkinfer/dispatch/calibration/)   microbenchmarks per device, op class and CPU thread count ->
                                                a profile (vkinfer/dispatch/profile.py), cached per device
    predict   (vkinfer/dispatch/costs.py)       every node's time on every device that can run it, and every
                                                tensor's transfer
    place     (vkinfer/dispatch/placement.py)   the minimum cut over those costs, segment costs included

`InferenceSession(model, device="auto")` runs it: the first auto session on a new machine calibrates (quick)
and says so on stderr; later ones read the cache. `sess.placement` is the result, `sess.explain()` the reasons.
`vkinfer calibrate` and `vkinfer info MODEL --device auto [--profile FILE]` are the command-line faces.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from ..model.graph import Graph
from .costs import CLASSES, Work, graph_work, node_work
from .placement import HOST, OBJECTIVES, Prediction, Problem, edge_transposes, predict, solve
from .profile import DeviceProfile, Profile, load_profile, relative_speed, with_fallbacks

# A split across devices must be predicted this much faster than the best single device (placement.py says why).
SPLIT_MARGIN = 0.05


def _us(ns: float) -> str:
    if ns == float("inf"):
        return "-"
    return f"{ns / 1e3:.0f} us" if ns >= 1e5 else f"{ns / 1e3:.1f} us" if ns >= 1e3 else f"{ns / 1e3:.2f} us"


@dataclasses.dataclass
class Decision:
    """Where one node runs, its predicted time on each device that can run it (ns), and why, in words."""

    node: str
    op: str
    device: str
    costs: dict[str, float]
    reason: str


@dataclasses.dataclass
class AutoPlacement:
    """The dispatcher's answer for one compiled graph. `decisions` (the reasons) are worked out when first
    read: planning itself does not pay for them."""

    placement: dict[str, str]
    predicted: Prediction
    single: dict[str, float]  # device -> predicted total with every node it can run on it
    objective: str
    threads: int
    devices: list[str]
    explain: Callable[[], list[Decision]] = dataclasses.field(repr=False, default=list)
    _decisions: list[Decision] | None = dataclasses.field(default=None, repr=False)

    @property
    def decisions(self) -> list[Decision]:
        """Per node, in graph order: the device, predicted time on each candidate, and the reason."""
        if self._decisions is None:
            self._decisions = self.explain()
        return self._decisions

    def table(self) -> str:
        """Per node: the chosen device, predicted time on each candidate, the reason; then the totals."""
        devs = self.devices
        w = max([len(d.node) for d in self.decisions] + [4])
        lines = [f"{'node':<{w}}  {'op':<28} {'device':<10} " + " ".join(f"{d:>11}" for d in devs) + "  reason"]
        for d in self.decisions:
            lines.append(f"{d.node:<{w}}  {d.op.rpartition(':')[2][:28]:<28} {d.device:<10} " +
                         " ".join(f"{_us(d.costs.get(x, float('inf'))):>11}" for x in devs) + f"  {d.reason}")
        p = self.predicted
        lines.append(f"predicted ({self.objective}, CPU {self.threads} thread(s)): {_us(p.total_ns)} = nodes "
                     f"{_us(p.nodes_ns)} + segments {_us(p.segments_ns)} ({len(p.segments)}) + transfers "
                     f"{_us(p.transfers_ns)}")
        lines.append("against: " + ", ".join(f"all-{d} {_us(ns)} ({ns / max(p.total_ns, 1e-9):.2f}x)"
                                              for d, ns in self.single.items()))
        return "\n".join(lines)


class Dispatcher:
    """Places nodes on `devices` (the CPU first, then Vulkan devices) from `profile`'s entries at `threads` CPU
    threads, minimising the `objective` ("median" or "p90"); a split across devices must be predicted
    `split_margin` faster than the best single device."""

    def __init__(self, devices: list[str], profile: Profile, threads: int = 1, objective: str = "median",
                 split_margin: float = SPLIT_MARGIN):
        if objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {', '.join(map(repr, OBJECTIVES))}, got {objective!r}")
        if not devices or devices[0].partition(":")[0] != "cpu":
            raise ValueError(f"the dispatcher's devices start with the CPU, got {devices!r}")
        self.devices, self.profile, self.threads, self.objective = list(devices), profile, threads, objective
        self.split_margin = split_margin
        self.entries: dict[str, DeviceProfile] = {}
        for d in (*devices, HOST):
            e = profile.entry("cpu" if d.startswith("cpu") else d, threads)
            if e is None:
                if d == HOST:  # the host only runs what no device runs: the CPU's numbers are a fair stand-in
                    e = dataclasses.replace(profile.entry("cpu", threads) or self._missing("cpu"), device=HOST,
                                            kind="host", segment_ns=0.0)
                else:
                    self._missing(d)
            self.entries[d] = e
        # Untrusted fits (profile.UNTRUSTED_ERROR) are not weighed against the CPU's: such a class is predicted on
        # the device from its speed relative to the CPU on the classes both fitted well (profile.with_fallbacks).
        self.fallbacks: dict[str, dict[str, float]] = {}
        for d in devices[1:]:
            self.entries[d], fb = with_fallbacks(self.entries[d], self.entries[devices[0]])
            if fb:
                self.fallbacks[d] = fb

    def _missing(self, d: str):
        raise ValueError(f"profile: no entry for device {d!r} (it has {', '.join(self.profile.names())}); "
                         f"run `vkinfer calibrate --device {d}`")

    def place(self, g: Graph, info: dict, can: Callable[[str, str], bool],
              fixed: dict[str, str] | None = None) -> AutoPlacement:
        """The placement of `g` (traced shapes `info`); `can(node, device)` gives the device's Layer for a node
        (vkinfer/model/lowering.py), or None when it does not run it; `fixed` nodes (by hand) stay put."""
        works = graph_work(g, info)
        caps: dict[str, set[str]] = {}
        aliases: set[tuple[str, str]] = set()
        moves: dict[str, tuple] = {}
        plain: set[str] = set()
        for n in g.nodes:
            caps[n.name] = set()
            for d in self.devices:
                layer = can(n.name, d)
                if layer:
                    caps[n.name].add(d)
                    if getattr(layer, "alias", False):  # a reshape that keeps the bytes: free there
                        aliases.add((n.name, d))
                    elif d.startswith("cpu") and getattr(layer, "move", None) is not None:
                        moves[n.name] = layer.move
                    if d.startswith("cpu") and getattr(layer, "plain", None) is not None:
                        plain.add(n.name)
        # A Transpose the CPU segment folds into an edge conversion or a quantize costs nothing there
        # (placement.edge_transposes).
        for name in edge_transposes(g, info, moves.get, plain):
            aliases.update((name, d) for d in self.devices if d.startswith("cpu"))
        p = Problem(g, info, works, self.devices, self.entries, caps, dict(fixed or {}), self.objective, aliases,
                    self.split_margin)
        chosen, pred, singles = solve(p)
        return AutoPlacement(chosen, pred, singles, self.objective, self.threads, self.devices,
                        lambda: [self._why(p, n, chosen, pred.total_ns) for n in g.nodes])

    def _why(self, p: Problem, node, chosen: dict[str, str], total: float) -> Decision:
        name, d = node.name, chosen[node.name]
        costs = {x: p.cost[name][x] for x in self.devices if x in p.allowed(name) or x == d}
        if d == HOST:
            costs = {HOST: p.cost[name][HOST]}
            return Decision(name, node.op, d, costs, "no device runs it (the numpy interpreter does)")
        if name in p.fixed:
            return Decision(name, node.op, d, costs, "placed by hand")
        others = [x for x in self.devices if x != d and x in p.allowed(name)]
        if not others:
            return Decision(name, node.op, d, costs, f"only {d} runs this {node.op}")
        o = min(others, key=lambda x: p.cost[name][x])
        here, there = p.cost[name][d], p.cost[name][o]
        why = self._why_cost(p, name, d, o, here, there, total, chosen)
        return Decision(name, node.op, d, costs, why + self._fallback_note(p.works[name].op_class, (d, o)))

    def _name(self, d: str) -> str:
        """"vulkan:1 (llvmpipe)": the device and, for a GPU, the first word of the name it was calibrated as."""
        who = str(self.entries[d].identity.get("name", "")).split(" (")[0] if not d.startswith("cpu") else ""
        return f"{d} ({who})" if who else d

    def _why_cost(self, p: Problem, name: str, d: str, o: str, here: float, there: float, total: float,
                  chosen: dict[str, str]) -> str:
        """The real comparison: each device's predicted time for the node and their ratio; a segment's cost
        (submit and wait, a native call) or the transfers are named only where they decide, i.e. where the node
        alone would be faster on `o` but the plan with it moved is predicted slower."""
        if (name, d) in p.aliases or here <= 0:  # a reshape that keeps the bytes where they are: no ratio
            return f"free here (its bytes stay where they are); {_t(there)} on {self._name(o)}"
        if here <= there:  # faster (or as fast) here for the node alone: the ratio is the reason
            ratio = there / here
            return f"{self._name(o)} {_x(ratio)} slower here: {_t(there)} vs {_t(here)}"
        gain = f"{self._name(o)} {_x(here / max(there, 1e-9))} faster for this node alone ({_t(there)} vs {_t(here)})"
        moved = dict(chosen)
        moved[name] = o
        after = predict(p, moved)
        extra = after.total_ns - total
        if extra < 0:
            return (f"{gain}, but moving it gains only {_t(-extra)} ({-extra / max(total, 1e-9):.1%}) of the run, "
                    f"under the {self.split_margin:.0%} a split must win by")
        seg = after.segments_ns - self._pred_parts(p, chosen)[0]
        moves = after.transfers_ns - self._pred_parts(p, chosen)[1]
        what = "a submit and wait" if any(x.startswith("vulkan") for x in (d, o)) else "a native call"
        terms = sorted([(seg, f"{_t(seg)} for another segment ({what})"),
                        (moves, f"{_t(moves)} moving its tensors between devices")], reverse=True)
        added = " and ".join(text for ns, text in terms if ns > 0) or "nothing"
        decides = "the segment overhead decides" if seg >= moves else "the transfers decide"
        return f"{gain}, but moving it adds {added}: {decides}"

    def _pred_parts(self, p: Problem, chosen: dict[str, str]) -> tuple[float, float]:
        key = id(chosen)
        if getattr(self, "_parts_key", None) != key:
            pr = predict(p, chosen)
            self._parts_key, self._parts = key, (pr.segments_ns, pr.transfers_ns)
        return self._parts

    def _fallback_note(self, op_class: str, devices: tuple[str, ...]) -> str:
        for d in devices:
            f = self.fallbacks.get(d, {}).get(op_class)
            if f is not None:
                return f" ({d}'s {op_class} fit is untrusted: predicted at {_x(f)} the CPU's time, its speed on the " \
                       "classes it fitted)"
        return ""


def _x(ratio: float) -> str:
    """A ratio as people read it: 177x, 12x, 1.6x."""
    return f"{ratio:.0f}x" if ratio >= 9.95 else f"{ratio:.1f}x"


def _t(ns: float) -> str:
    """A time in the unit that reads best: 7.8 us, 1.38 ms."""
    return f"{ns / 1e6:.2f} ms" if ns >= 1e6 else _us(ns)


def describe(profile: Profile) -> str:
    """The fitted models of a profile, one block per device entry, for people."""
    lines = []
    for e in profile.devices:
        who = ", ".join(f"{v}" for k, v in e.identity.items() if k in ("cpu", "variant", "name", "driver_version"))
        lines.append(f"{e.device}" + (f" at {e.threads} thread(s)" if e.kind == "cpu" else "") + f"  [{who}]")
        def gbs(link) -> str:  # ns per byte -> GB/s
            return f"{1 / link.ns_per_byte:.1f} GB/s" if link.ns_per_byte > 0 else "no per-byte cost"
        lines.append(f"  per segment {_us(e.segment_ns)}; upload {_us(e.upload.fixed_ns)} + {gbs(e.upload)}; "
                     f"download {_us(e.download.fixed_ns)} + {gbs(e.download)}; tile {e.tile[0]}x{e.tile[1]}; "
                     f"p90/p50 {e.tail:.2f}")
        lines.append(f"  {'class':<12} {'fixed':>9} {'GMAC/s':>8} {'GB/s':>8} {'samples':>8} {'fit error':>10}")
        for c, m in e.classes.items():
            rate = f"{1 / m.ns_per_mac:.1f}" if m.ns_per_mac > 0 else "-"
            bw = f"{1 / m.ns_per_byte:.1f}" if m.ns_per_byte > 0 else "-"
            own = f"  tile {m.tile[0]}x{m.tile[1]}" if m.tile else ""
            lines.append(f"  {c:<12} {_us(m.fixed_ns):>9} {rate:>8} {bw:>8} {m.samples:>8} {m.error:>9.0%}{own}")
        if e.paths:
            lines.append(f"  kernel paths (u8s8 weight ranges {e.u8s8}); per output: ns per output element")
            for k, m in e.paths.items():
                rate = f"{1 / m.ns_per_mac:.1f}" if m.ns_per_mac > 0 else "-"
                bw = f"{1 / m.ns_per_byte:.1f}" if m.ns_per_byte > 0 else "-"
                out = f"  per output {m.ns_per_out:.3f}" if m.ns_per_out else ""
                lines.append(f"  {k:<40} {_us(m.fixed_ns):>9} {rate:>8} {bw:>8} {m.samples:>8} {m.error:>9.0%}{out}")
    return "\n".join(lines)


def _rate(e: DeviceProfile, c: str) -> str:
    """What `e` does on costs.REFERENCE's MobileNetV2 layer of class `c`, as a rate (its prediction)."""
    from .costs import REFERENCE

    w = REFERENCE[c][1]
    s = max(e.node_ns(w), 1e-9) / 1e9
    if c == "move":
        return f"{w.bytes / s / 1e9:.3g} GB/s"
    if c in ("elementwise", "pool"):
        return f"{w.macs / s / 1e9:.3g} G elements/s"
    return f"{w.macs / s / 1e9:.3g} GMAC/s"


def summarize(profile: Profile) -> str:
    """A few lines per device entry, for people (`vkinfer calibrate`; `--verbose` gives describe()): the device,
    what a segment costs (a native call, or submit and wait), the transfer rates, each trusted op class's
    throughput on one MobileNetV2 1.0/224 layer, and each untrusted fit (profile.UNTRUSTED_ERROR) flagged with
    what the dispatcher does instead."""
    from .profile import UNTRUSTED_ERROR

    lines = []
    cpu1 = profile.entry("cpu", 1)
    for e in profile.devices:
        who = ", ".join(f"{v}" for k, v in e.identity.items() if k in ("cpu", "variant", "name"))
        if e.kind == "host":
            lines.append(f"{e.device}  [{who}]: the numpy interpreter, only for nodes no device runs")
            continue
        lines.append(f"{e.device}" + (f" at {e.threads} thread(s)" if e.kind == "cpu" else "") + f"  [{who}]")

        def gbs(link) -> str:
            return f"{1 / link.ns_per_byte:.1f} GB/s" if link.ns_per_byte > 0 else "no per-byte cost"
        what = "one native call" if e.kind == "cpu" else "submit and wait"
        lines.append(f"  per segment {_t(e.segment_ns)} ({what}); upload {_t(e.upload.fixed_ns)} + {gbs(e.upload)}, "
                     f"download {_t(e.download.fixed_ns)} + {gbs(e.download)}")
        bad = e.untrusted()
        lines.append("  " + ", ".join(f"{c} {_rate(e, c)}" for c in CLASSES if c not in bad))
        if e.paths:
            rng = ", ".join(f"{k} [{lo}, {hi}]" for k, (lo, hi) in (e.u8s8 or {}).items()) or "none"
            lines.append(f"  {len(e.paths)} kernel path models (u8s8 weight ranges: {rng})")
        for c in bad:
            m = e.classes[c]
            if e.kind == "cpu":
                instead = ("auto predicts it on each GPU from that GPU's speed relative to the CPU on the classes "
                           "both fitted")
            elif cpu1 is not None:
                f, _ = relative_speed(e, cpu1)
                instead = (f"auto predicts {c} here at {_x(f)} the CPU's time (1 thread), this device's speed on the "
                           "classes it fitted")
            else:
                instead = "auto predicts it from this device's speed relative to the CPU on the classes both fitted"
            lines.append(f"  untrusted fit: {c} (fit error {m.error:.0%} over {m.samples} shapes, above "
                         f"{UNTRUSTED_ERROR:.0%}; it would say {_rate(e, c)}): {instead}")
    lines.append("(rates: the fitted model on one MobileNetV2 1.0/224 layer per class; --verbose: every sample, the "
                 "fitted terms and their errors)")
    return "\n".join(lines)


__all__ = ["describe", "summarize", "Dispatcher", "AutoPlacement", "Decision", "Profile", "DeviceProfile",
           "Work", "CLASSES", "OBJECTIVES", "load_profile", "node_work", "graph_work"]
