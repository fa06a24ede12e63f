"""PNG plots of `vkinfer bench` results (matplotlib, drawn off-screen with the Agg canvas; pyplot is not used).

- latency_plot: one panel per model, its engines side by side: a violin of every run's latency with the runs
  themselves as a strip of points, the median (p50) and p99 marked.
- per_layer_plot: a record's ``per_layer`` (--per-layer), measured beside predicted per node.
- ab_plot: the A/B comparison of `vkinfer bench compare` (vkinfer.benchmark.compare.compare's results): per pair
  the ratio of medians NEW/BASE with its confidence interval, coloured by verdict, a line at 1.

    vkinfer bench plot RESULTS.jsonl [--compare NEW.jsonl] [--threshold PCT] --out DIR

draws latency.png and per_layer-*.png of RESULTS into DIR and, with --compare, latency-new.png of NEW and ab.png
(RESULTS as the base). Exit status 0, or 2 on bad input (an unreadable or malformed results file, records that
do not pair) with a one-line message.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

PROG = "vkinfer bench plot"
VERDICT_COLOURS = {"slower": "#d62728", "faster": "#2ca02c"}
NEUTRAL = "#7f7f7f"


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig, path: str | Path) -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, format="png")
    return p


def _engine_label(r: dict[str, Any]) -> str:
    return f"{r['engine']}\n{r['device']} t{r['threads']}"


def latency_plot(recs: list[dict[str, Any]], path: str | Path) -> Path:
    """One panel per model (in first-seen order), each ok record's latencies side by side (violin and points,
    p50 as a bar, p99 as a triangle); engines that are missing or failed are listed under the panel. Returns
    the path written."""
    models = list(dict.fromkeys(r["model"] for r in recs))
    if not models:
        raise ValueError("no records to plot")
    cols = min(len(models), 3)
    rows = -(-len(models) // cols)
    fig = _figure(4.6 * cols, 4.2 * rows)
    rng = np.random.default_rng(0)  # the points' jitter only
    for k, model in enumerate(models):
        ax = fig.add_subplot(rows, cols, k + 1)
        mine = [r for r in recs if r["model"] == model]
        ok = [r for r in mine if r["status"] == "ok" and r["latencies_ms"]]
        ax.set_title(Path(model).name if not model.startswith("zoo:") else model[4:], fontsize=9)
        ax.set_ylabel("latency (ms)")
        if ok:
            data = [np.asarray(r["latencies_ms"], np.float64) for r in ok]
            pos = np.arange(1, len(ok) + 1)
            if any(d.size > 1 and np.ptp(d) > 0 for d in data):
                parts = ax.violinplot(data, pos, widths=0.8, showextrema=False)
                for body in parts["bodies"]:
                    body.set_alpha(0.3)
            for x, d in zip(pos, data, strict=True):
                ax.scatter(x + rng.uniform(-0.15, 0.15, d.size), d, s=6, alpha=0.6, color="#1f77b4", lw=0)
                p50, p99 = np.percentile(d, [50, 99])
                ax.hlines(p50, x - 0.3, x + 0.3, color="black", lw=2, label="p50" if x == 1 else None)
                ax.scatter([x + 0.33], [p99], marker="<", color="#d62728", s=30, label="p99" if x == 1 else None)
            meds = [float(np.median(d)) for d in data]
            if min(meds) > 0 and max(meds) / min(meds) > 20:  # engines orders of magnitude apart: log scale
                ax.set_yscale("log")
            ax.set_xticks(pos, [_engine_label(r) for r in ok], fontsize=7)
            ax.set_xlim(0.4, len(ok) + 0.6)
            ax.legend(fontsize=7, loc="upper left")
        not_ok = [r for r in mine if r not in ok]
        if not_ok:
            ax.text(0.99, 0.01, "\n".join(f"{r['engine']}/{r['device']}: {r['status']}" for r in not_ok),
                    transform=ax.transAxes, ha="right", va="bottom", fontsize=6, color=NEUTRAL)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def per_layer_plot(rec: dict[str, Any], path: str | Path) -> Path:
    """Horizontal bars per entry of ``rec["per_layer"]`` in order: measured ms, and predicted ms beside it where
    there is a prediction. Returns the path written."""
    rows = rec.get("per_layer") or []
    if not rows:
        raise ValueError(f"record {rec['model']} {rec['engine']}/{rec['device']} has no per_layer entries")
    n = len(rows)
    fig = _figure(9.0, max(2.5, 0.22 * n + 1.2))
    ax = fig.add_subplot(1, 1, 1)
    y = np.arange(n)
    measured = np.array([e["measured_ms"] for e in rows], np.float64)
    predicted = np.array([np.nan if e.get("predicted_ms") is None else e["predicted_ms"] for e in rows], np.float64)
    ax.barh(y - 0.2, measured, height=0.4, label="measured", color="#1f77b4")
    if np.isfinite(predicted).any():
        ax.barh(y + 0.2, np.nan_to_num(predicted), height=0.4, label="predicted", color="#ff7f0e")
    ax.set_yticks(y, [f"{e['node']} ({e.get('op', '')}, {e['device']})" for e in rows], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("ms per inference")
    ax.set_title(f"{rec['model']}: {rec['engine']}/{rec['device']}, {rec['threads']} thread(s): "
                 f"measured {measured.sum():.3f} ms in {n} entries", fontsize=8)
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def ab_plot(results: list[dict[str, Any]], path: str | Path) -> Path:
    """The A/B comparison: a bar per compared pair of ``results`` (vkinfer.benchmark.compare.compare's output)
    at its ratio of medians NEW/BASE, the confidence interval [lo, hi] as an error bar, coloured by verdict
    (slower red, faster green, no significant change grey), and a line at 1. Pairs that were not compared
    (unmatched, skipped) are left out. Returns the path written."""
    pairs = [r for r in results if r.get("ratio") is not None]
    if not pairs:
        raise ValueError("no compared pairs to plot")
    n = len(pairs)
    fig = _figure(max(5.0, 0.9 * n + 2.0), 4.5)
    ax = fig.add_subplot(1, 1, 1)
    x = np.arange(n)
    ratio = np.array([r["ratio"] for r in pairs], np.float64)
    lo = np.array([np.nan if r.get("lo") is None else r["lo"] for r in pairs], np.float64)
    hi = np.array([np.nan if r.get("hi") is None else r["hi"] for r in pairs], np.float64)
    lo, hi = np.where(np.isfinite(lo), lo, ratio), np.where(np.isfinite(hi), hi, ratio)  # no interval: none drawn
    colours = [VERDICT_COLOURS.get(r.get("verdict"), NEUTRAL) for r in pairs]
    ax.bar(x, ratio - 1.0, bottom=1.0, color=colours, width=0.6)
    ax.errorbar(x, ratio, yerr=[ratio - lo, hi - ratio], fmt="none", ecolor="black", capsize=4)
    ax.axhline(1.0, color="black", lw=1)
    for xi, r in zip(x, pairs, strict=True):
        ax.annotate(f"{r['ratio']:.3f}\n{r.get('verdict', '')}", (xi, max(r["ratio"], hi[xi])),
                    textcoords="offset points", xytext=(0, 4), ha="center", fontsize=6)
    ax.set_xticks(x, [f"{Path(r['model']).name}\n{r['engine']}/{r['device']} t{r['threads']}" for r in pairs],
                  fontsize=6)
    ax.set_ylabel("ratio of medians NEW / BASE (95% CI)")
    ax.set_title("A/B: above 1 is slower", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_") or "x"


def write_all(recs: list[dict[str, Any]], out_dir: str | Path, name: str = "latency") -> list[Path]:
    """latency.png (`name`.png) of every record and a per_layer-<model>-<engine>-<device>-t<threads>.png per record
    that has per_layer entries, in `out_dir`; the paths written."""
    d = Path(out_dir)
    paths = [latency_plot(recs, d / f"{name}.png")]
    for r in recs:
        if r.get("per_layer"):
            model = r["model"][4:] if r["model"].startswith("zoo:") else Path(r["model"]).stem
            stem = "-".join(_slug(str(v)) for v in (model, r["engine"], r["device"]))
            paths.append(per_layer_plot(r, d / f"per_layer-{stem}-t{r['threads']}.png"))
    return paths


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        raise ValueError(message)


def main(argv: list[str] | None = None) -> int:
    """`vkinfer bench plot RESULTS.jsonl [--compare NEW.jsonl] [--threshold PCT] --out DIR`: 0 when written,
    2 on bad input."""
    from . import compare, records, stats

    argv = list(sys.argv[1:] if argv is None else argv)
    ap = _Parser(prog=PROG, description="PNG plots of vkinfer bench results")
    ap.add_argument("results", metavar="RESULTS.jsonl")
    ap.add_argument("--compare", metavar="NEW.jsonl", help="also plot the A/B comparison RESULTS -> NEW")
    ap.add_argument("--threshold", type=float, default=stats.DEFAULT_THRESHOLD_PCT,
                    help=f"percent slowdown that counts (default {stats.DEFAULT_THRESHOLD_PCT:g})")
    ap.add_argument("--out", required=True, metavar="DIR", help="directory for the PNGs")
    try:
        a = ap.parse_args(argv)
        base = records.read(a.results)
        new = records.read(a.compare) if a.compare else None
        results = compare.compare(base, new, a.threshold, base_name=a.results, new_name=a.compare) \
            if new is not None else None
        paths = write_all(base, a.out)
        if new is not None:
            paths.append(latency_plot(new, Path(a.out) / "latency-new.png"))
            paths.append(ab_plot(results, Path(a.out) / "ab.png"))
    except (ValueError, OSError) as e:  # records.RecordError is a ValueError
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a plotting library's failure: one line and a failing status
        print(f"{PROG}: error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    for p in paths:
        print(f"wrote {p}")
    return 0
