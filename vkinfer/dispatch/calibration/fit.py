"""Calibration's fit: one cost model per op class from measured samples, its error, and the tile.

**Fit.** `fit_class`: time = fixed_ns + ns_per_mac * tiled MACs + ns_per_byte * bytes by non-negative least
squares on the relative error (rows divided by the measured time, then reweighted towards the log-ratio, see
`_nnls_relative`), so small and large layers weigh alike.

**Limits measured here (CPU, avx512vnni, 2-core EPYC VM).** The three terms cannot follow everything the
kernels do: a 1x1 convolution whose output channels are not a multiple of 32 costs about 7 ns more per output
row than the tile explains (56x56, K=8: 20.6 us to 8 channels, 13.1 us to 32), depthwise channels past a
multiple of 16 take a slow tail path (48x48x8: 71 ns per pixel, 16 channels: 15 ns), grouped convolutions
round each group's channels to the tile (Work sees all of them at once), and reshapes that are aliases cost
nothing. Median errors of quick-calibrated predictions against the nodes of the field and zoo models (1 thread):
gemv 7%, depthwise 10%, elementwise 11%, gemm 12%, pool 13%, conv 30%, move 36%; whole models within 10% for
MobileNetV2 1.0 and 0.35, DS-CNN, ResNet-8 and the MLP, 14-27% low for the others, 47% low for the visual wake
words model (its 48x48x8 depthwise layer is half of its time). This machine's speed also drifts by up to 40%
between minutes, so a profile is only as good as the minute it was measured in.

A class whose fit's error is too large is not trusted by the dispatcher (vkinfer/dispatch/profile.py); the
error each ClassModel carries is the median relative error of its fit over its samples.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..costs import CLASSES, Work, path_keys
from ..profile import ClassModel, Link
from .grid import Shape

MIN_SAMPLES = 3  # fixed, per-MAC and per-byte terms
VULKAN_TILE = (32, 32)  # qlinear_gemm: a workgroup computes TM=32 rows x TN=32 output channels
HOST_TILE = (1, 1)
# The CPU's microkernel tile is the ISA variant's (rows MR x output channels NR: 4 x 32 for avx512vnni, 4 x 16
# for avx2, 2 x 4 scalar; the depthwise kernel pads channels to 16) and is not exported by the C library, so
# the calibration picks, among these, the tile whose fit explains the measured GEMM-like classes best.
CPU_TILES = [(1, 1), (1, 4), (1, 8), (1, 16), (1, 32), (4, 4), (4, 8), (4, 16), (4, 32)]
TILED = ("gemm", "gemv", "conv", "depthwise")


# --- fitting --------------------------------------------------------------------------------------------------

def _nnls_weighted(x: np.ndarray, t: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Non-negative c minimising sum(((x @ c - t) / w)^2); all-zero columns of x get 0."""
    from scipy.optimize import nnls

    coef = np.zeros(x.shape[1])
    active = [j for j in range(x.shape[1]) if np.any(x[:, j] != 0)]
    if not active:
        return coef
    xa = x[:, active]
    scale = np.abs(xa).max(axis=0)  # columns of 1, 1e7 MACs and 1e6 bytes: equalise them for the solver
    sol, _ = nnls(xa / scale / w[:, None], t / w, maxiter=50 * xa.shape[1])
    coef[active] = sol / scale
    return coef


def _nnls_relative(x: np.ndarray, t: np.ndarray, iterations: int = 8) -> np.ndarray:
    """Non-negative coefficients c for x @ c ~ t on relative error.

    First NNLS on rows divided by the measured time t, then `iterations` reweighted passes dividing by
    sqrt(t * predicted), which converge to the least squares of log(predicted / t). Why: where one linear model
    cannot follow a class (CPU GEMMs whose channels are not a multiple of the kernel's 32-column block, stems
    with 3 input channels), plain relative error is asymmetric (predicting 2x too much costs 1, half as much
    0.25), so it settles low: nodes of the field and zoo models came out 16% under their measured times in the
    median (gemm) and the summed node predictions 20% under; the log-ratio weighting is symmetric (median
    signed error -3%). Exact data gives the same coefficients either way."""
    coef = _nnls_weighted(x, t, t)
    for _ in range(iterations):
        p = x @ coef
        if np.any(p <= 0):
            break
        coef = _nnls_weighted(x, t, np.sqrt(t * p))
    return coef


def fit_class(samples: list[tuple[Work, float]], tile: tuple[int, int], per_out: bool = False) -> ClassModel:
    """Fit time = fixed_ns + ns_per_mac * work.tiled_macs(tile) + ns_per_byte * work.bytes to measured
    (work, ns) samples of one op class by non-negative least squares on the relative error (_nnls_relative).

    `error` is the median of |predicted - measured| / measured over the samples. Raises ValueError with fewer
    than MIN_SAMPLES samples, a non-positive or non-finite time, or samples that are all the same size (the
    terms cannot be told apart). A class without MACs (move) fits fixed_ns and ns_per_byte only."""
    if len(samples) < MIN_SAMPLES:
        raise ValueError(f"fit_class needs at least {MIN_SAMPLES} samples of different sizes (fixed, per-MAC and "
                         f"per-byte terms), got {len(samples)}")
    t = np.array([float(ns) for _, ns in samples])
    if not np.all(np.isfinite(t)) or np.any(t <= 0):
        raise ValueError(f"fit_class: measured times must be positive and finite, got {t.tolist()}")
    x = np.array([[1.0, float(w.tiled_macs(tile)), float(w.bytes)] + ([float(w.out_elems)] if per_out else [])
                  for w, _ in samples])
    if len({tuple(r) for r in x[:, 1:3]}) < 2:
        raise ValueError("fit_class: every sample has the same MACs and bytes; time shapes of different sizes")
    coef = _nnls_relative(x, t)
    err = float(np.median(np.abs(x @ coef - t) / t))
    return ClassModel(float(coef[0]), float(coef[1]), float(coef[2]), len(samples), err,
                      ns_per_out=float(coef[3]) if per_out else 0.0)


def _fit_link(samples: list[tuple[int, float]]) -> Link:
    """fixed_ns + ns_per_byte * bytes over (bytes, ns) samples (relative error); Link(0, 0) without samples."""
    samples = [(b, t) for b, t in samples if t > 0]
    if not samples:
        return Link(0.0, 0.0)
    t = np.array([t for _, t in samples])
    if len({b for b, _ in samples}) < 2:
        return Link(float(np.median(t)), 0.0)
    coef = _nnls_relative(np.array([[1.0, float(b)] for b, _ in samples]), t)
    return Link(float(coef[0]), float(coef[1]))


def pick_tile(samples: list, tiles: list[tuple[int, int]], classes: tuple[str, ...] = TILED) -> tuple[int, int]:
    """The tile among `tiles` whose per-class fits of the GEMM-like classes (TILED) have the smallest mean relative
    error over all their samples (ties: the first listed). `samples`: Sample objects or (Work, ns) pairs."""
    pairs = [(s.work, s.ns) if isinstance(s, Sample) else s for s in samples]
    best, best_err = tiles[0], float("inf")
    for tile in tiles:
        errs = []
        for c in classes:
            mine = [(w, t) for w, t in pairs if w.op_class == c]
            if len(mine) < MIN_SAMPLES:
                continue
            m = fit_class(mine, tile)
            errs.extend(abs(m.ns(w, tile) - t) / t for w, t in mine)
        err = float(np.mean(errs)) if errs else float("inf")
        if err < best_err - 1e-9:
            best, best_err = tile, err
    return best


@dataclass
class Sample:
    """One shape's measurement on one device: its features, median time, tail ratio and label."""

    shape: Shape
    work: Work
    ns: float
    tail: float


def _fit_all(samples: list[Sample], tile: tuple[int, int], device: str, log) -> dict[str, ClassModel]:
    classes = {}
    for c in CLASSES:
        mine = [(s.work, s.ns) for s in samples if s.work.op_class == c]
        try:
            classes[c] = fit_class(mine, tile)
        except ValueError as e:
            raise RuntimeError(f"calibration of {device}: op class {c!r}: {e}") from None
        if log:
            m = classes[c]
            log(f"  {device} {c:11s} fixed {m.fixed_ns / 1e3:7.2f} us  {m.ns_per_mac * 1e3:8.3f} ps/MAC  "
                f"{m.ns_per_byte:7.4f} ns/B  error {100 * m.error:5.1f}% ({m.samples} shapes)")
    return classes


# A path with fewer samples than this is fitted as its parent's model times one factor (the median ratio of its
# measured times to the parent's predictions), not by three free terms: three or four samples fit three terms
# exactly and extrapolate wildly (a gemv/i16 fit on 4 classifier heads of 0.1-0.2 us, say).
PATH_FULL_SAMPLES = 6


def fit_paths(samples: list, classes: dict[str, ClassModel], u8s8: dict | None, tile: tuple[int, int],
              log=None) -> dict[str, ClassModel]:
    """Per kernel path models (costs.path_keys) from the samples of each path: most general first, each either
    its own three-term fit (at least PATH_FULL_SAMPLES samples, and only where it beats the scaled parent on them)
    or its parent's model (the next more general path's, else the class's) scaled by the median of measured over
    predicted. A path needs MIN_SAMPLES samples of at least two sizes; with fewer its nodes take the parent's
    model. `samples`: Sample objects or (Work, ns) pairs."""
    pairs = [(s.work, s.ns) if isinstance(s, Sample) else s for s in samples]
    by_key: dict[str, list] = {}
    chains: dict[str, list[str]] = {}
    for w, t in pairs:
        keys = path_keys(w, u8s8)
        for i, k in enumerate(keys):
            by_key.setdefault(k, []).append((w, t))
            chains[k] = keys[i + 1:]
    out: dict[str, ClassModel] = {}
    for k in sorted(by_key, key=lambda k: (k.count("/"), k)):
        mine = by_key[k]
        if len(mine) < MIN_SAMPLES or len({(w.macs, w.bytes) for w, _ in mine}) < 2:
            continue
        cls = k.partition("/")[0]
        parent = next((out[p] for p in chains[k] if p in out), classes[cls])
        own_tile = parent.tile or classes[cls].tile or tile
        t = np.array([ns for _, ns in mine])
        ratio = t / np.array([max(parent.ns(w, own_tile), 1e-9) for w, _ in mine])
        f = float(np.exp(np.median(np.log(ratio))))
        m = ClassModel(parent.fixed_ns * f, parent.ns_per_mac * f, parent.ns_per_byte * f, len(mine),
                       float(np.median(np.abs(f / ratio - 1))), own_tile, parent.ns_per_out * f)
        if len(mine) >= PATH_FULL_SAMPLES:
            # Three terms, and for the GEMM-like classes four (a cost per output element: a layer of few input
            # channels, a stem, spends its time on requantizing and storing outputs, a deep one on its MACs;
            # with three, VWW's 48x48 8->16 came out 23% low and its 3x3 256->256 74% high).
            for own in [fit_class(mine, own_tile)] + ([fit_class(mine, own_tile, True)] if cls in TILED else []):
                if own.error < m.error:
                    m = replace(own, tile=own_tile)
        out[k] = m
        if log:
            log(f"    path {k:32s} fixed {m.fixed_ns / 1e3:7.2f} us  {m.ns_per_mac * 1e3:8.3f} ps/MAC  "
                f"{m.ns_per_byte:7.4f} ns/B  error {100 * m.error:5.1f}% ({m.samples} samples)")
    return out


def _check_classes(samples: list[Sample], device: str) -> None:
    """Each sample must land in the class its shape was listed under (else the grid is wrong)."""
    for s in samples:
        if s.work.op_class != s.shape.op_class:
            raise RuntimeError(f"internal: calibration shape {s.shape.label!r} of {device} is {s.work.op_class}, "
                               f"listed as {s.shape.op_class}")

