"""Statistics of `vkinfer bench`: the summary of a latency sample, the agreement of two engines' outputs and
the A/B test of two samples.

The A/B test (used by ``vkinfer bench compare``) asks whether NEW is slower or faster than BASE by more than a
threshold, in a way that two runs of the same build are not flagged:

* the effect is the **ratio of medians** ``median(new) / median(base)`` (medians, because latency distributions
  are skewed and have outliers: a few runs hit by an interrupt must not move the verdict);
* its uncertainty is a **bootstrap confidence interval** (scipy.stats.bootstrap, the two samples resampled
  independently, percentile method, seeded so that the same files always give the same interval);
* significance is a **rank test**, scipy's two-sided Mann-Whitney U, which assumes nothing about the shape of
  the distributions;
* the **verdict** (see verdict()) needs all three: significant by the rank test, an interval that excludes 1,
  and a point ratio beyond the threshold (a practically relevant change, not just a detectable one).
"""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy import stats as _st

DEFAULT_THRESHOLD_PCT = 5.0
DEFAULT_ALPHA = 0.05
SLOWER, FASTER, SAME = "slower", "faster", "no significant change"


def _sample(x: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64).ravel()
    if a.size == 0:
        raise ValueError(f"{name}: no latencies")
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name}: latencies must be finite")
    return a


def summary(latencies_ms: Sequence[float] | np.ndarray) -> dict[str, float]:
    """The record's statistics of a latency sample (ms): min, p50, p90, p99, max, mean, std and cv.

    Quantiles are numpy's default (``method="linear"``: linear interpolation between the closest ranks, type 7 of
    Hyndman and Fan), so p50 is the usual median. ``std_ms`` is the sample standard deviation (``ddof=1``; 0 for a
    single run), ``cv = std_ms / mean_ms`` (0 when the mean is 0). Keys: records.STAT_FIELDS.
    """
    a = _sample(latencies_ms, "summary")
    p50, p90, p99 = (float(v) for v in np.quantile(a, [0.5, 0.9, 0.99]))
    mean = float(a.mean())
    std = float(a.std(ddof=1)) if a.size > 1 else 0.0
    return {"min_ms": float(a.min()), "p50_ms": p50, "p90_ms": p90, "p99_ms": p99, "max_ms": float(a.max()),
            "mean_ms": mean, "std_ms": std, "cv": std / mean if mean > 0 else 0.0}


def _ratio_stat(base: np.ndarray, new: np.ndarray, axis: int = -1) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.median(new, axis=axis) / np.median(base, axis=axis)


_SEED_KW = "rng" if "rng" in inspect.signature(_st.bootstrap).parameters else "random_state"


def ratio_of_medians_ci(base: Sequence[float] | np.ndarray, new: Sequence[float] | np.ndarray,
                        confidence: float = 0.95, n_resamples: int = 2000,
                        seed: int = 0) -> tuple[float, float, float]:
    """``(ratio, lo, hi)``: ``median(new) / median(base)`` and its bootstrap confidence interval.

    scipy.stats.bootstrap resamples the two samples independently (``paired=False``), ``n_resamples`` times,
    vectorized, with the percentile method (BCa's jackknife is unreliable for a median, whose jackknife values take
    only two or three distinct values); a fixed `seed` makes the interval reproducible. With fewer than two
    latencies in either sample there is no interval: ``lo`` and ``hi`` are NaN. ValueError when the median of
    `base` is 0 (no ratio) or a sample is empty or not finite.
    """
    b, n = _sample(base, "base"), _sample(new, "new")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), not {confidence}")
    if np.median(b) <= 0:
        raise ValueError("the median of base is 0: no ratio")
    ratio = float(_ratio_stat(b, n))
    if b.size < 2 or n.size < 2:
        return ratio, math.nan, math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate samples (all runs equal) give a zero-width interval, fine
        res = _st.bootstrap((b, n), _ratio_stat, n_resamples=n_resamples, vectorized=True, paired=False, axis=-1,
                            confidence_level=confidence, method="percentile",
                            **{_SEED_KW: np.random.default_rng(seed)})
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return ratio, lo, hi


def rank_test(base: Sequence[float] | np.ndarray, new: Sequence[float] | np.ndarray) -> float:
    """The p-value of scipy's two-sided Mann-Whitney U test of `base` against `new` (1.0 when all values tie)."""
    b, n = _sample(base, "base"), _sample(new, "new")
    p = float(_st.mannwhitneyu(b, n, alternative="two-sided").pvalue)
    return 1.0 if math.isnan(p) else p


def check_threshold(threshold_pct: float, alpha: float = DEFAULT_ALPHA) -> None:
    """ValueError unless ``threshold_pct`` is a finite number >= 0 and ``alpha`` is in (0, 1)."""
    if not isinstance(threshold_pct, int | float) or not math.isfinite(threshold_pct) or threshold_pct < 0:
        raise ValueError(f"threshold must be a finite percentage >= 0, not {threshold_pct!r}")
    if not isinstance(alpha, int | float) or not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), not {alpha!r}")


def verdict(ratio: float, lo: float, hi: float, p: float, threshold_pct: float = DEFAULT_THRESHOLD_PCT,
            alpha: float = DEFAULT_ALPHA) -> str:
    """``"slower"``, ``"faster"`` or ``"no significant change"`` for a ratio ``new/base`` of medians.

    The rule, with ``t = 1 + threshold_pct / 100``:

    * ``"slower"`` when the change is statistically significant, i.e. ``p < alpha`` **and** the confidence
      interval lies above 1 (``lo > 1``), **and** the point ratio exceeds the threshold (``ratio > t``);
    * ``"faster"`` symmetrically: ``p < alpha``, ``hi < 1`` and ``ratio < 1 / t`` (a 5% threshold flags a
      speed-up to below 1/1.05 of the time, the mirror image of 1.05x in log scale);
    * otherwise (including NaN anywhere: no interval) ``"no significant change"``.

    Requiring both the rank test and the interval keeps a shift of the tails alone (which moves the rank test but
    not the medians) or a lucky interval from being flagged; requiring the point ratio beyond the threshold keeps
    a statistically real but tiny change (long runs detect 1%) from failing a regression check. Two samples of
    the same build are flagged only when both tests err and the medians differ by more than the threshold, which
    at the default 5% and ~100 runs of a few-percent-noise latency practically never happens.
    """
    check_threshold(threshold_pct, alpha)
    if any(math.isnan(v) for v in (ratio, lo, hi, p)):
        return SAME
    t = 1.0 + threshold_pct / 100.0
    if p < alpha and lo > 1.0 and ratio > t:
        return SLOWER
    if p < alpha and hi < 1.0 and ratio < 1.0 / t:
        return FASTER
    return SAME


def agreement(ref: list[np.ndarray], out: list[np.ndarray], reference: str) -> dict[str, Any]:
    """How far `out` is from `ref` (outputs in the same order): the fraction of identical values over all
    outputs, and the largest absolute difference (in steps for integer outputs). Outputs of different counts
    or shapes: identical_fraction 0 and max_abs_diff null, with a note."""
    rec: dict[str, Any] = {"reference": reference}
    if len(ref) != len(out) or any(np.shape(a) != np.shape(b) for a, b in zip(ref, out, strict=False)):
        rec.update(identical_fraction=0.0, max_abs_diff=None,
                   note=f"outputs differ in count or shape: {[np.shape(a) for a in ref]} vs "
                        f"{[np.shape(b) for b in out]}")
        return rec
    total = same = 0
    worst = 0.0
    for a, b in zip(ref, out, strict=True):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        total += a64.size
        same += int(np.count_nonzero((a64 == b64) | (np.isnan(a64) & np.isnan(b64))))
        if a64.size:
            d = np.abs(a64 - b64)
            d = d[~np.isnan(d)]
            worst = max(worst, float(d.max()) if d.size else 0.0)
    rec.update(identical_fraction=same / total if total else 1.0, max_abs_diff=worst if math.isfinite(worst) else None)
    return rec
