"""Profiles for devices we do not have: plan the zoo and field models over a simulated fleet of phones and compare
the expected latency of `device="auto"` with always-CPU and always-GPU.

    .venv/bin/python bench/fleet.py [--phones N] [--seed S] [--threads T] [--profile FILE] [--cpu-scale X]
                                    [--only NAME[/FORMAT]]... [--all-formats] [--plot FILE.png] [--out FILE.json]
    .venv/bin/python bench/fleet.py --check [--profile FILE] [--threads T] [--out FILE.json]

Nothing runs on a GPU: every number is the dispatcher's prediction (vkinfer.dispatch.simulate's planning, the
same cost model and minimum cut a `device="auto"` session uses) for a profile that describes a phone.

**Models.** bench/models.py's CASES (the zoo's quantized ONNX models, tflite_zoo's and field_zoo's), one format
per model and family by default (the ONNX models' qoperator, the .tflite models' int8: the other formats predict
within 1% of them), every format with --all-formats. Each graph is built and traced once and reused for every
phone; the first phone of every model is also planned through `vkinfer.dispatch.simulate` itself, and the run
stops if the two disagree.

**The CPU.** Each phone's CPU is this machine's calibrated CPU entry at --threads (vkinfer.dispatch.ensure_profile:
the cache, else a quick calibration) or the "cpu" entry of --profile FILE; the "host" entry (nodes no device
runs) comes along. --cpu-scale X multiplies every CPU time (class models, segment, links) by X, to stand for a
slower phone core (default 1: this machine's own numbers). This is the main caveat: a server core is not a phone
core, and the GPU's fixed costs below are absolute, so a slower CPU favours the GPU.

**Each phone's GPU** ("vulkan:0", kind "vulkan") is derived from the CPU entry:
- GPU/CPU throughput ratio r (source: Wu et al., "Machine Learning at Facebook: Understanding Inference at the
  Edge", HPCA 2019: the median phone's GPU is about as fast as its CPU, 23% of phones have a GPU at least 2x and
  11% at least 3x the CPU). Drawn from a log-normal with median 1 (mu = 0) and sigma fitted by least squares in
  probit space to the two upper quantiles (ln 2 = sigma z_0.77, ln 3 = sigma z_0.89): sigma = 0.907, which gives
  P(r >= 2) = 22.2% and P(r >= 3) = 11.3%. The draw is stratified (one phone in each 1/N slice of the CDF, in a
  random order) so that even a small fleet has the study's quantiles; the output prints them for the sample. The
  log-normal's lower tail (22% of phones with r <= 1/2) is this model's assumption, not the study's.
  Every class's ns_per_mac and ns_per_byte is the CPU's divided by r.
- Everything else is a stated assumption, drawn independently per phone:
  - submit and wait per GPU segment (segment_ns): log-uniform 50-500 us (a mobile driver's vkQueueSubmit plus
    the fence wait);
  - per-dispatch fixed cost (every class's fixed_ns): log-uniform 5-30 us;
  - transfers (upload and download Links, the same both ways): log-uniform 1-10 GB/s plus log-uniform 10-50 us
    fixed per tensor;
  - tile (rows x output channels a GEMM-like kernel computes at once): 16x4 or 32x4 with equal chance;
  - tail (p90/p50): the CPU's (the objective is the median, where it does not count).

**Output.** The fleet's drawn quantiles against the study's; per model over the fleet: mean and median predicted
latency of auto, all-CPU and all-GPU, the mean, best and worst auto / best-single ratio (auto is never predicted
worse than the better single device: a ratio above 1 beyond rounding is a bug, reported with the seed and phone,
and the exit status is 1), and
the share of phones where auto picks a mixed placement (some GPU-runnable nodes on each device) or all-GPU. --plot
draws, per model, auto's and all-GPU's time over all-CPU's against r. Raw numbers (every phone's parameters and
predictions) go to --out, default bench/results/fleet-<UTC time>.json.

**--check** (the dispatcher issue's target): a profile where the GPU is 3x faster on large convolutions but pays
200 us per submit (segment_ns 200000) and 1 GB/s transfers (upload and download ns_per_byte 1.0); everything
else is the CPU's (other classes, per-node fixed costs, link fixed costs, the 1x1 tile). Two readings of "3x
faster", both printed: "as specified", the gemm and conv classes' ns_per_mac / 3 (the issue's wording), and
"whole time / 3", their ns_per_byte / 3 as well: the calibration's fit may carry most of a convolution's time in
its per-byte term, and then dividing ns_per_mac alone leaves the GPU barely faster (the table's "largest
gemm/conv on GPU" column shows the speedup actually obtained). For every model: auto, all-CPU and all-GPU, and
whether a mixed placement beats both single devices by at least 10%. The other columns say why or why not: the
mixed bound (every node on its faster device, one segment on each device, free transfers: no mixed placement
does better), the nodes the GPU runs slower than the CPU (the only ones a split gains by keeping on the CPU),
the gemm/conv share of the CPU time, and auto's segment and transfer costs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
import types
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from _common import cpu_model, git_revision, markdown_table
from models import CASES, RESULTS, ROOT, Case, cached_model
from scipy.special import ndtr, ndtri

import vkinfer
from vkinfer.dispatch import AutoPlacement, Dispatcher, Profile, graph_work, load_profile
from vkinfer.dispatch.calibrate import ensure_profile
from vkinfer.dispatch.placement import HOST
from vkinfer.dispatch.profile import ClassModel, DeviceProfile, Link
from vkinfer.dispatch.simulate import simulate
from vkinfer.model.graph import Graph

GPU = "vulkan:0"

# The study's GPU/CPU ratio quantiles: (r, share of phones with a ratio at least r).
STUDY = ((2.0, 0.23), (3.0, 0.11))
# Log-normal, median 1: ln r = SIGMA * z; SIGMA by least squares over the two quantiles (ln q_i = SIGMA * z_i).
_Z = [float(ndtri(1.0 - p)) for _, p in STUDY]
SIGMA = sum(z * math.log(q) for z, (q, _) in zip(_Z, STUDY, strict=True)) / sum(z * z for z in _Z)

# Stated assumptions (module docstring): (low, high) of log-uniform draws.
SEGMENT_NS = (50e3, 500e3)
DISPATCH_NS = (5e3, 30e3)
LINK_GBPS = (1.0, 10.0)
LINK_FIXED_NS = (10e3, 50e3)
TILES = ((16, 4), (32, 4))

# --check's profile (the target).
CHECK_SPEEDUP = 3.0
CHECK_CLASSES = ("gemm", "conv")
CHECK_SEGMENT_NS = 200_000.0
CHECK_NS_PER_BYTE = 1.0
CHECK_MARGIN = 0.10

ASSUMPTIONS = [
    f"GPU/CPU ratio r: log-normal, median 1, sigma {SIGMA:.3f} fitted to the study's P(r>=2)=23%, P(r>=3)=11% "
    "(Wu et al., HPCA 2019); stratified draw; every class's ns_per_mac and ns_per_byte = CPU's / r",
    f"GPU submit+wait per segment: log-uniform {SEGMENT_NS[0] / 1e3:.0f}-{SEGMENT_NS[1] / 1e3:.0f} us (assumed)",
    f"GPU per-dispatch fixed cost: log-uniform {DISPATCH_NS[0] / 1e3:.0f}-{DISPATCH_NS[1] / 1e3:.0f} us (assumed)",
    f"transfers both ways: log-uniform {LINK_GBPS[0]:.0f}-{LINK_GBPS[1]:.0f} GB/s + log-uniform "
    f"{LINK_FIXED_NS[0] / 1e3:.0f}-{LINK_FIXED_NS[1] / 1e3:.0f} us per tensor (assumed)",
    f"GPU tile: {' or '.join(f'{a}x{b}' for a, b in TILES)}, equal chance (assumed)",
]


# --- the fleet ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Phone:
    """One simulated phone's GPU, relative to the shared CPU entry."""

    ratio: float  # GPU/CPU throughput
    segment_ns: float
    dispatch_ns: float
    link_gbps: float
    link_fixed_ns: float
    tile: tuple[int, int]


def _log_uniform(rng: np.random.Generator, lo_hi: tuple[float, float], n: int) -> np.ndarray:
    lo, hi = lo_hi
    return np.exp(rng.uniform(math.log(lo), math.log(hi), n))


def draw_fleet(n: int, seed: int) -> list[Phone]:
    """`n` phones (module docstring). The ratio is stratified: one draw in each 1/n slice of its CDF, shuffled, so
    the fleet's quantiles are the study's within 1/n whatever the seed."""
    rng = np.random.default_rng(seed)
    u = (rng.permutation(n) + rng.random(n)) / n
    ratio = np.exp(SIGMA * ndtri(u))
    seg = _log_uniform(rng, SEGMENT_NS, n)
    disp = _log_uniform(rng, DISPATCH_NS, n)
    gbps = _log_uniform(rng, LINK_GBPS, n)
    fixed = _log_uniform(rng, LINK_FIXED_NS, n)
    tiles = rng.integers(0, len(TILES), n)
    return [Phone(float(ratio[i]), float(seg[i]), float(disp[i]), float(gbps[i]), float(fixed[i]), TILES[tiles[i]])
            for i in range(n)]


def fleet_quantiles(phones: list[Phone]) -> list[dict]:
    """The sample's median and upper-tail shares against the study's and the fitted log-normal's."""
    r = np.array([p.ratio for p in phones])
    rows = [{"statistic": "median r", "study": 1.0, "fitted": 1.0, "sample": float(np.median(r))}]
    for q, share in STUDY:
        rows.append({"statistic": f"P(r >= {q:g})", "study": share,
                     "fitted": float(1.0 - ndtr(math.log(q) / SIGMA)), "sample": float(np.mean(r >= q))})
    return rows


def scaled_cpu(e: DeviceProfile, scale: float) -> DeviceProfile:
    """`e` with every time multiplied by `scale` (a slower or faster core)."""
    if scale == 1.0:
        return e
    return dataclasses.replace(
        e, segment_ns=e.segment_ns * scale,
        upload=Link(e.upload.fixed_ns * scale, e.upload.ns_per_byte * scale),
        download=Link(e.download.fixed_ns * scale, e.download.ns_per_byte * scale),
        classes={c: dataclasses.replace(m, fixed_ns=m.fixed_ns * scale, ns_per_mac=m.ns_per_mac * scale,
                                        ns_per_byte=m.ns_per_byte * scale) for c, m in e.classes.items()})


def phone_gpu(cpu: DeviceProfile, ph: Phone, index: int, seed: int) -> DeviceProfile:
    """The phone's GPU entry: the CPU's class rates divided by r, the phone's fixed costs, links and tile."""
    classes = {c: ClassModel(ph.dispatch_ns, m.ns_per_mac / ph.ratio, m.ns_per_byte / ph.ratio)
               for c, m in cpu.classes.items()}
    link = Link(ph.link_fixed_ns, 1.0 / ph.link_gbps)  # GB/s = bytes per ns
    return DeviceProfile(GPU, "vulkan", 1, {"simulated": f"fleet phone {index}, seed {seed}"}, ph.segment_ns, link,
                         link, ph.tile, cpu.tail, classes)


CHECK_VARIANTS = {
    "as specified": "gemm/conv ns_per_mac / 3",
    "whole time / 3": "gemm/conv ns_per_mac and ns_per_byte / 3",
    "with dispatch cost": "gemm/conv time / 3, and 20 us per dispatch on every class",
}
# A GPU pays a fixed cost per dispatch (barrier, launch, a partly idle grid): what makes "large" convolutions the
# ones it wins. 20 us is a stated assumption, inside the fleet's 5-30 us range.
CHECK_DISPATCH_NS = 20_000.0


def check_gpu(cpu: DeviceProfile, variant: str) -> DeviceProfile:
    """--check's GPU: the CPU with only the issue's numbers changed (module docstring). "as specified" divides the
    gemm/conv classes' ns_per_mac by 3; "whole time / 3" divides their ns_per_byte too, which is what "3x faster
    on large convolutions" means whatever split between the per-MAC and per-byte terms the CPU's fit found."""
    def faster(m: ClassModel) -> ClassModel:
        per_byte = m.ns_per_byte / CHECK_SPEEDUP if variant != "as specified" else m.ns_per_byte
        return dataclasses.replace(m, ns_per_mac=m.ns_per_mac / CHECK_SPEEDUP, ns_per_byte=per_byte)

    classes = {c: faster(m) if c in CHECK_CLASSES else m for c, m in cpu.classes.items()}
    if variant == "with dispatch cost":
        classes = {c: dataclasses.replace(m, fixed_ns=CHECK_DISPATCH_NS) for c, m in classes.items()}
    return DeviceProfile(GPU, "vulkan", 1, {"simulated": f"--check ({CHECK_VARIANTS[variant]}), 200 us submit, "
                                                         "1 GB/s"},
                         CHECK_SEGMENT_NS, Link(cpu.upload.fixed_ns, CHECK_NS_PER_BYTE),
                         Link(cpu.download.fixed_ns, CHECK_NS_PER_BYTE), cpu.tile, cpu.tail, classes)


# --- models ---------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Model:
    """A model's graph, traced once, and which devices can run each node (both independent of the profile)."""

    case: Case
    graph: Graph
    feed: dict
    info: dict
    can: Callable[[str, str], bool]
    gpu_nodes: set[str]  # nodes the GPU can run

    def plan(self, profile: Profile, threads: int) -> AutoPlacement:
        """What `simulate(graph, feed, profile, threads)` gives, without tracing and lowering again."""
        return Dispatcher(["cpu", GPU], profile, threads, "median").place(self.graph, self.info, self.can)


def select_cases(only: list[str] | None, all_formats: bool) -> list[Case]:
    """bench/models.py's cases: --only's, else one format per model and family (ONNX, .tflite), else all."""
    if only:
        out: list[Case] = []
        for sel in only:
            hit = [c for c in CASES if sel in (c.name, c.key)]
            if not hit:
                raise SystemExit(f"--only {sel}: not a model or model/format of bench/models.py "
                                 f"({', '.join(c.key for c in CASES)})")
            out += [c for c in hit if c not in out]
        return out
    if all_formats:
        return list(CASES)
    seen: set[tuple[str, bool]] = set()
    out = []
    for c in CASES:
        if (c.name, c.tflite) not in seen:
            seen.add((c.name, c.tflite))
            out.append(c)
    return out


def load_model(case: Case) -> Model:
    """Build (or read bench/models.py's cache), trace and lower `case` once, as simulate() would."""
    from vkinfer.compiler.plan import CpuBackend, Plan, trace
    from vkinfer.model.lowering import Ctx

    data, _ = cached_model(case)
    g = vkinfer.InferenceSession(data, device="reference").graph
    feed = {t.name: np.zeros(t.shape, t.dtype) for t in g.inputs}
    info = trace(g, feed)
    ctx = Ctx(g, info)
    # The same stand-in backends as vkinfer.dispatch.simulate: lowering decides, no device is needed.
    backends = {"cpu": CpuBackend(None), GPU: types.SimpleNamespace(kind="vulkan", name=GPU, dev=None)}
    # The layers themselves (not just whether there is one): a reshape a device aliases costs nothing there.
    ok = {(n.name, d): Plan._lower(ctx, n, be)[0] for n in g.nodes for d, be in backends.items()}
    return Model(case, g, feed, info, lambda name, dev: ok[name, dev],
                 {n.name for n in g.nodes if ok[n.name, GPU] is not None})


def kind_of(m: Model, placement: dict[str, str]) -> str:
    """"cpu" (nothing on the GPU), "gpu" (every node the GPU can run on it: device="vulkan"'s placement) or
    "mixed"."""
    on_gpu = {n for n, d in placement.items() if d == GPU}
    return "cpu" if not on_gpu else "gpu" if on_gpu == m.gpu_nodes else "mixed"


def verify_against_simulate(m: Model, profile: Profile, threads: int, got: AutoPlacement) -> None:
    """Stop if the reused trace and lowering plan differently from vkinfer.dispatch.simulate."""
    want = simulate(m.graph, m.feed, profile, threads, "median", ["cpu", GPU])
    if want.placement != got.placement or not math.isclose(want.predicted.total_ns, got.predicted.total_ns,
                                                           rel_tol=1e-12):
        raise SystemExit(f"{m.case.key}: the bench's planning differs from vkinfer.dispatch.simulate "
                         f"({got.predicted.total_ns:.0f} ns against {want.predicted.total_ns:.0f} ns): fix "
                         "bench/fleet.py's load_model")


# --- the fleet run --------------------------------------------------------------------------------------------

def base_profile(args: argparse.Namespace) -> tuple[DeviceProfile, DeviceProfile | None, str]:
    """The CPU entry at --threads (scaled by --cpu-scale), the host entry if any, and where they came from."""
    if args.profile:
        try:
            prof, source = load_profile(args.profile), f"profile file {args.profile}"
        except ValueError as e:
            raise SystemExit(str(e)) from None
    else:
        prof = ensure_profile(["cpu"], [args.threads], announce="fleet: calibrating {devices} (once; cached)")
        source = "this machine's calibration (vkinfer.dispatch.ensure_profile)"
    cpu = prof.entry("cpu", args.threads)
    if cpu is None:
        raise SystemExit(f"{source}: no cpu entry (it has {', '.join(prof.names())})")
    return scaled_cpu(cpu, args.cpu_scale), prof.entry(HOST), source


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def _pct(x: float) -> str:
    """A share as a percentage; "<1%" rather than a misleading "0%" for one phone in a few hundred."""
    return "0%" if x == 0 else "<1%" if x < 0.01 else f"{x:.0%}"


def run_fleet(args: argparse.Namespace, models: list[Model], cpu: DeviceProfile, host: DeviceProfile | None) -> dict:
    """Plan every model on every phone; the per-model summary, the raw rows and any auto > best-single case."""
    phones = draw_fleet(args.phones, args.seed)
    quant = fleet_quantiles(phones)
    print(f"fleet: {args.phones} phones, seed {args.seed}; GPU/CPU ratio r, drawn against the study:")
    print(markdown_table(["statistic", "study", "fitted log-normal", "this fleet"],
                         [[q["statistic"], f"{q['study']:.2f}", f"{q['fitted']:.3f}", f"{q['sample']:.3f}"]
                          for q in quant]))
    r = np.array([p.ratio for p in phones])
    print(f"r over the fleet: min {r.min():.2f}, p10 {np.percentile(r, 10):.2f}, p90 {np.percentile(r, 90):.2f}, "
          f"max {r.max():.2f}\n")
    base = [cpu] + ([host] if host is not None else [])
    per_model: dict[str, list[dict]] = {}
    bugs: list[dict] = []
    for m in models:
        rows = []
        for i, ph in enumerate(phones):
            prof = Profile([*base, phone_gpu(cpu, ph, i, args.seed)])
            d = m.plan(prof, args.threads)
            if i == 0:
                verify_against_simulate(m, prof, args.threads, d)
            auto, c, g = d.predicted.total_ns, d.single["cpu"], d.single[GPU]
            row = {"phone": i, "auto_ns": auto, "cpu_ns": c, "gpu_ns": g, "auto_over_best": auto / min(c, g),
                   "placement": kind_of(m, d.placement),
                   "gpu_nodes": sum(1 for v in d.placement.values() if v == GPU),
                   "segments": len(d.predicted.segments)}
            rows.append(row)
            if row["auto_over_best"] > 1.0 + 1e-9:
                bugs.append({"model": m.case.key, "seed": args.seed, "phones": args.phones, "phone": i,
                             **dataclasses.asdict(ph), **{k: row[k] for k in ("auto_ns", "cpu_ns", "gpu_ns")}})
        per_model[m.case.key] = rows
    header = ["model", "auto mean ms", "auto median", "CPU mean", "CPU median", "GPU mean", "GPU median",
              "auto/best mean", "auto/best min", "auto/best max", "mixed", "all-GPU"]
    table, summary = [], {}
    for key, rows in per_model.items():
        a, c, g = (np.array([x[k] for x in rows]) for k in ("auto_ns", "cpu_ns", "gpu_ns"))
        ratio = a / np.minimum(c, g)
        mixed = np.mean([x["placement"] == "mixed" for x in rows])
        gpu_only = np.mean([x["placement"] == "gpu" for x in rows])
        summary[key] = {"auto_mean_ns": a.mean(), "auto_median_ns": float(np.median(a)), "cpu_mean_ns": c.mean(),
                        "cpu_median_ns": float(np.median(c)), "gpu_mean_ns": g.mean(),
                        "gpu_median_ns": float(np.median(g)), "auto_over_best_mean": ratio.mean(),
                        "auto_over_best_min": ratio.min(), "auto_over_best_max": ratio.max(), "mixed_share": mixed,
                        "gpu_only_share": gpu_only, "auto_over_cpu_mean_speedup": float(np.mean(c / a))}
        table.append([key, _ms(a.mean()), _ms(np.median(a)), _ms(c.mean()), _ms(np.median(c)), _ms(g.mean()),
                      _ms(np.median(g)), f"{ratio.mean():.3f}", f"{ratio.min():.3f}", f"{ratio.max():.3f}",
                      _pct(mixed), _pct(gpu_only)])
    md = markdown_table(header, table)
    print(md)
    print("auto/best: auto's predicted latency over the better of all-CPU and all-GPU on the same phone (<= 1; "
          "min: the phone where auto gains most over both); mixed: phones where auto splits the model; all-GPU: "
          "phones where auto is device=\"vulkan\"'s placement")
    if bugs:
        print(f"\nBUG: auto predicted worse than the best single device on {len(bugs)} (model, phone) pair(s) "
              f"(seed {args.seed}, {args.phones} phones):", file=sys.stderr)
        for b in bugs[:20]:
            print(f"  {b['model']} phone {b['phone']} (r {b['ratio']:.2f}): auto {b['auto_ns']:.0f} ns, cpu "
                  f"{b['cpu_ns']:.0f} ns, gpu {b['gpu_ns']:.0f} ns", file=sys.stderr)
    else:
        print("\nauto was never predicted worse than the better single device (auto/best <= 1 on every phone).")
    return {"phones": [dataclasses.asdict(p) for p in phones], "ratio_quantiles": quant, "summary": summary,
            "markdown": md, "bugs": bugs, "rows": per_model}


def plot(path: Path, result: dict, models: list[Model]) -> None:
    """Per model, auto's and all-GPU's predicted latency over all-CPU's against the GPU/CPU ratio r."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    r = np.array([p["ratio"] for p in result["phones"]])
    n = len(models)
    cols = min(4, n)
    rows_n = -(-n // cols)
    fig, axes = plt.subplots(rows_n, cols, figsize=(3.6 * cols, 2.9 * rows_n), sharex=True, squeeze=False)
    for ax, m in zip(axes.flat, models, strict=False):
        rows = result["rows"][m.case.key]
        s = result["summary"][m.case.key]
        c = np.array([x["cpu_ns"] for x in rows])
        a = np.array([x["auto_ns"] for x in rows]) / c
        g = np.array([x["gpu_ns"] for x in rows]) / c
        mixed = np.array([x["placement"] == "mixed" for x in rows])
        ax.axhline(1.0, color="tab:green", lw=1.2, ls="--", label="always CPU")
        ax.scatter(r, g, s=6, color="tab:gray", alpha=0.6, label="always GPU")
        ax.scatter(r[~mixed], a[~mixed], s=6, color="tab:blue", label="auto (one device)")
        ax.scatter(r[mixed], a[mixed], s=14, marker="x", color="tab:red", label="auto (mixed)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{m.case.key}\nE[ms]: auto {s['auto_mean_ns'] / 1e6:.2f}, CPU {s['cpu_mean_ns'] / 1e6:.2f}, "
                     f"GPU {s['gpu_mean_ns'] / 1e6:.2f}", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="both", alpha=0.2)
    for ax in axes.flat[n:]:
        ax.axis("off")
    for ax in axes[-1]:
        ax.set_xlabel("GPU/CPU throughput ratio r", fontsize=8)
    for ax in axes[:, 0]:
        ax.set_ylabel("latency / always-CPU", fontsize=8)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(f"Predicted latency over a simulated fleet of {len(r)} phones (seed {result['seed']}): "
                 "auto vs always-CPU vs always-GPU", fontsize=10)
    fig.tight_layout(rect=(0, 0.04, 1, 0.97))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- --check --------------------------------------------------------------------------------------------------

def check_variant(args: argparse.Namespace, models: list[Model], cpu: DeviceProfile, host: DeviceProfile | None,
                  variant: str) -> dict:
    """One --check profile over every model: the table, and which models meet the target."""
    gpu = check_gpu(cpu, variant)
    prof = Profile([cpu, *([host] if host is not None else []), gpu])
    print(f"--- {variant}: GPU = CPU with {CHECK_VARIANTS[variant]}, segment_ns {CHECK_SEGMENT_NS:.0f}, "
          f"upload/download ns_per_byte {CHECK_NS_PER_BYTE:g} (1 GB/s); everything else as the CPU (tile "
          f"{gpu.tile[0]}x{gpu.tile[1]})")
    header = ["model", "all-CPU ms", "all-GPU ms", "auto ms", "auto/best", "mixed bound/best", "placement",
              "GPU nodes", "slower on GPU", "gemm/conv share", "largest gemm/conv on GPU", "auto segments ms",
              "auto transfers ms", "target"]
    table, rows = [], []
    for m in models:
        d = m.plan(prof, args.threads)
        verify_against_simulate(m, prof, args.threads, d)
        p = d.predicted
        c, g = d.single["cpu"], d.single[GPU]
        best = min(c, g)
        kind = kind_of(m, d.placement)
        # A mixed placement runs at least one segment on each device, and no node beats its faster device: if
        # even that (with free transfers) is not 10% below the best single device, the target is out of reach.
        ideal = sum(min(dec.costs.values()) for dec in d.decisions) + cpu.segment_ns + gpu.segment_ns
        # Nodes the GPU runs slower than the CPU: the only ones a mixed placement gains by keeping on the CPU.
        slower = sum(1 for dec in d.decisions if dec.costs.get(GPU, 0.0) > dec.costs.get("cpu", math.inf))
        # What the GPU can speed up: the gemm/conv nodes' share of the CPU's node time.
        gw = graph_work(m.graph, m.info)
        conv = [n for n, w in gw.items() if w.op_class in CHECK_CLASSES and n in m.gpu_nodes]
        on_cpu = sum(cpu.node_ns(w) for n, w in gw.items() if n in m.gpu_nodes or m.can(n, "cpu"))
        share = sum(cpu.node_ns(gw[n]) for n in conv) / max(on_cpu, 1e-9)
        big = max(conv, key=lambda n: gw[n].macs, default=None)
        big_speedup = cpu.node_ns(gw[big]) / gpu.node_ns(gw[big]) if big else None
        hit = kind == "mixed" and p.total_ns <= (1.0 - CHECK_MARGIN) * best
        row = {"model": m.case.key, "cpu_ns": c, "gpu_ns": g, "auto_ns": p.total_ns,
               "auto_over_best": p.total_ns / best, "mixed_bound_over_best": ideal / best, "placement": kind,
               "gpu_slower_nodes": slower,
               "gpu_nodes": sum(1 for v in d.placement.values() if v == GPU), "nodes": len(d.placement),
               "gemm_conv_share": share, "largest_gemm_conv": big, "largest_gemm_conv_gpu_speedup": big_speedup,
               "segments_ns": p.segments_ns, "transfers_ns": p.transfers_ns, "segments": len(p.segments),
               "meets_target": hit}
        rows.append(row)
        table.append([m.case.key, _ms(c), _ms(g), _ms(p.total_ns), f"{row['auto_over_best']:.3f}",
                      f"{row['mixed_bound_over_best']:.3f}", kind, f"{row['gpu_nodes']}/{row['nodes']}",
                      f"{slower}/{row['nodes']}", f"{share:.0%}",
                      "-" if big_speedup is None else f"{big_speedup:.2f}x faster", _ms(p.segments_ns),
                      _ms(p.transfers_ns), "yes" if hit else "no"])
    md = markdown_table(header, table)
    print(md)
    met = [r["model"] for r in rows if r["meets_target"]]
    if met:
        print(f"target met ({variant}): a mixed placement beats both single devices by >= 10% on {', '.join(met)}")
    else:
        print(f"target NOT met ({variant}): no model's mixed placement beats both single devices by 10% with this "
              "CPU calibration. Closest (auto / best single device, then the mixed bound):")
    for r in sorted(rows, key=lambda r: (r["auto_over_best"], r["mixed_bound_over_best"]))[:3]:
        big = "-" if r["largest_gemm_conv_gpu_speedup"] is None else f"{r['largest_gemm_conv_gpu_speedup']:.2f}x"
        print(f"  {r['model']}: auto/best {r['auto_over_best']:.3f} ({r['placement']}), mixed bound "
              f"{r['mixed_bound_over_best']:.3f}; {r['gpu_slower_nodes']} of {r['nodes']} nodes slower on the GPU; "
              f"gemm/conv {r['gemm_conv_share']:.0%} of its CPU time, the largest {big} faster on the GPU")
    print()
    return {"gpu_entry": gpu.to_json(), "rows": rows, "markdown": md, "met_by": met}


def run_check(args: argparse.Namespace, models: list[Model], cpu: DeviceProfile, host: DeviceProfile | None) -> dict:
    """The issue's target profile over every model, as specified and with the whole class time / 3."""
    print("target: a mixed placement at least 10% faster than both all-CPU and all-GPU on at least one model; "
          "mixed bound/best: every node on its faster device, one segment on each device, free transfers (no "
          "mixed placement does better)\n")
    return {v: check_variant(args, models, cpu, host, v) for v in CHECK_VARIANTS}


# --- main -----------------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()))
    ap.add_argument("--phones", type=int, default=200, help="simulated phones (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="the fleet's random seed (default 0)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads of the CPU entry (default 1)")
    ap.add_argument("--profile", type=Path, default=None,
                    help="a profile file whose cpu (and host) entries are the phones' CPU (default: this machine's "
                         "calibration)")
    ap.add_argument("--cpu-scale", type=float, default=1.0,
                    help="multiply every CPU time by this (a slower phone core: > 1; default 1)")
    ap.add_argument("--only", action="append", default=None, metavar="NAME[/FORMAT]",
                    help="only this model (every format) or model/format of bench/models.py; repeatable")
    ap.add_argument("--all-formats", action="store_true", help="every format of every model, not one per family")
    ap.add_argument("--plot", type=Path, default=None, help="write the figure here (PNG)")
    ap.add_argument("--out", type=Path, default=None, help="raw numbers (default bench/results/fleet-<time>.json)")
    ap.add_argument("--check", action="store_true",
                    help="the issue's target profile (3x gemm/conv MACs, 200 us submit, 1 GB/s) instead of the fleet")
    args = ap.parse_args(argv)
    if args.phones < 1 or args.threads < 1 or not args.cpu_scale > 0:
        ap.error("--phones and --threads must be >= 1 and --cpu-scale > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the fleet (or --check); 1 when auto is predicted worse than a single device somewhere (a bug)."""
    args = parse_args(argv)
    start = time.perf_counter()
    now = datetime.now(UTC)
    cpu, host, source = base_profile(args)
    cases = select_cases(args.only, args.all_formats)
    models = [load_model(c) for c in cases]
    print(f"vkinfer {vkinfer.__version__}: planned, not run. CPU: {source}, {args.threads} thread(s)"
          + (f", times x {args.cpu_scale:g}" if args.cpu_scale != 1.0 else "") + f" ({cpu_model()}); "
          f"{len(models)} models from bench/models.py")
    if not args.check:
        print("assumptions:\n" + "\n".join(f"  - {a}" for a in ASSUMPTIONS))
    cond = {"date": now.isoformat(), "git": git_revision(ROOT), "vkinfer": vkinfer.__version__, "host_cpu": cpu_model(),
            "cpu_source": source, "threads": args.threads, "cpu_scale": args.cpu_scale, "cpu_entry": cpu.to_json(),
            "models": [c.key for c in cases], "objective": "median"}
    if args.check:
        result = run_check(args, models, cpu, host)
        ok = True
    else:
        cond.update({"phones": args.phones, "seed": args.seed, "sigma": SIGMA, "assumptions": ASSUMPTIONS,
                     "ranges": {"segment_ns": SEGMENT_NS, "dispatch_ns": DISPATCH_NS, "link_gbps": LINK_GBPS,
                                "link_fixed_ns": LINK_FIXED_NS, "tiles": TILES}})
        result = run_fleet(args, models, cpu, host)
        result["seed"] = args.seed
        ok = not result["bugs"]
        if args.plot:
            plot(args.plot, result, models)
            print(f"wrote {args.plot}")
    out = args.out or RESULTS / f"fleet{'-check' if args.check else ''}-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"conditions": cond, **result}, indent=1, default=float) + "\n")
    print(f"wrote {out} ({time.perf_counter() - start:.1f} s)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
