"""``vkinfer bench compare BASE.jsonl NEW.jsonl``: A/B regression detection between two result files.

Records are paired by (model, engine, device, threads) (records.key). For every pair whose records are both
``ok``, the latencies are compared with vkinfer.benchmark.stats: ratio of medians NEW/BASE with a bootstrap
confidence interval, the Mann-Whitney U p-value and a verdict (slower, faster, no significant change). Records in
only one file, or not ``ok`` in either, are listed as unmatched or skipped. Exit status: 1 when any pair is
slower, 0 otherwise, 2 on bad input (an unreadable or malformed file, a duplicate record, no pair at all, a bad
threshold).

**Drift is not change (RULE, also in the command's help).** Two files measured minutes apart on a shared machine
differ by more than most regressions: two `vkinfer bench` runs of the same commit on this 2-core VM gave a ratio
of 0.84 with p = 5e-12, which the statistics alone call "faster". So a slower/faster verdict stands only where the
timing conditions were the same for both sides:

1. **Interleaved** pairs (both records from one `vkinfer bench ab` run: conditions ``ab_side`` base/new and the
   same ``ab_run``) keep the statistical verdict: the two builds alternated ABBA in the same minutes.
2. Other pairs need a **same-code control** measured beside them: a pair of the same model and thread count in
   the same two files whose code did not change (a peer engine of the same version in both files' conditions,
   e.g. onnxruntime; or vkinfer at the same clean git commit). `vkinfer bench` interleaves its engines round by
   round, so the control saw the same machine. If every control stayed within the threshold (no significant
   change, ratio within [1/t, t]) the verdict stands; if a control moved, or there is no control, a slower or
   faster verdict becomes **inconclusive** (and a "no significant change" too when a control moved: drift can
   hide a change as well as fake one).
3. A pair that is itself same-code and not interleaved is a control: when it moves it is **inconclusive**
   (machine drift), never faster or slower.

Inconclusive pairs do not fail the check (exit 0); the note says why and what to run instead.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from . import records, stats

PROG = "vkinfer bench compare"
UNMATCHED, SKIPPED = "unmatched", "skipped"
INCONCLUSIVE = "inconclusive"
PEER_PACKAGES = {"onnxruntime": "onnxruntime", "litert": "litert", "ncnn": "ncnn"}  # conditions.versions keys
RULE = ("a slower/faster verdict stands only for interleaved pairs (both files from one `vkinfer bench ab` run) "
        "or for pairs with a same-code control that stayed within the threshold (same model and threads in the "
        "same two files, code unchanged: a peer such as onnxruntime at the same version, or vkinfer at the same "
        "clean commit); otherwise it is 'inconclusive', and a same-code pair that moved is 'inconclusive' too "
        "(machine drift: two runs of one commit here differed by 16%, p = 5e-12)")


def _cond(r: dict[str, Any]) -> dict[str, Any]:
    return r.get("conditions") or {}


def interleaved(rb: dict[str, Any], rn: dict[str, Any]) -> bool:
    """Whether BASE's record `rb` and NEW's `rn` were measured alternating in one `vkinfer bench ab` run."""
    cb, cn = _cond(rb), _cond(rn)
    return (cb.get("ab_side") == "base" and cn.get("ab_side") == "new" and cb.get("ab_run") is not None
            and cb.get("ab_run") == cn.get("ab_run"))


def same_code(rb: dict[str, Any], rn: dict[str, Any]) -> str | None:
    """Why the two records ran the same code ("onnxruntime 1.20.1 in both"), or None when they may not have."""
    cb, cn = _cond(rb), _cond(rn)
    if cb.get("ab_test_slowdown_pct") or cn.get("ab_test_slowdown_pct"):
        return None  # a slowdown injected into one side (bench ab's test hook)
    engine = rb["engine"]
    if engine == "vkinfer":
        gb, gn = cb.get("git_commit"), cn.get("git_commit")
        ok = isinstance(gb, str) and gb == gn and not gb.endswith("-dirty")
        return f"vkinfer at {gb[:12]} in both" if ok else None
    pkg = PEER_PACKAGES.get(engine)
    vb, vn = ((c.get("versions") or {}).get(pkg) for c in (cb, cn)) if pkg else (None, None)
    return f"{engine} {vb} in both" if vb is not None and vb == vn else None


def _moved(row: dict[str, Any], threshold_pct: float) -> bool:
    t = 1.0 + threshold_pct / 100.0
    return row["verdict"] != stats.SAME or not 1.0 / t <= row["ratio"] <= t


def _apply_rule(done: list[dict[str, Any]], pairs: list[tuple[dict, dict]], threshold_pct: float) -> None:
    """The module docstring's rule: turn verdicts the timing conditions cannot support into INCONCLUSIVE."""
    code = [same_code(rb, rn) for rb, rn in pairs]
    for row, (rb, rn), why in zip(done, pairs, code, strict=True):
        if interleaved(rb, rn):
            row["basis"] = "interleaved"
            continue
        if why is not None:  # a control itself: the code did not change, so any move is the machine's
            row["basis"] = f"same code ({why})"
            if _moved(row, threshold_pct):
                row["verdict"] = INCONCLUSIVE
                row["note"] = (f"same code ({why}) moved {row['ratio']:.3f}x: machine drift between the runs, "
                               "not a change")
            continue
        controls = [(c, w) for c, w in zip(done, code, strict=True) if w is not None and c is not row
                    and (c["model"], c["threads"]) == (row["model"], row["threads"])]
        moved = [(c, w) for c, w in controls if _moved(c, threshold_pct)]
        if moved:
            c, w = moved[0]
            row["basis"] = f"control moved ({w})"
            row["verdict"] = INCONCLUSIVE
            row["note"] = (f"not interleaved, and the same-code control {c['engine']} on {c['device']} ({w}) "
                           f"moved {c['ratio']:.3f}x in the same runs: machine drift; run `vkinfer bench ab REV`")
        elif controls:
            c, w = controls[0]
            row["basis"] = f"control steady ({w})"
            row["note"] = f"control {c['engine']} ({w}) steady at {c['ratio']:.3f}x"
        else:
            row["basis"] = "not interleaved, no control"
            if row["verdict"] in (stats.SLOWER, stats.FASTER):
                row["note"] = (f"{row['verdict']} {row['ratio']:.3f}x, but the runs were not interleaved and no "
                               "same-code control (a peer such as onnxruntime) ran beside it: machine drift cannot "
                               "be told from a change; run `vkinfer bench ab REV`")
                row["verdict"] = INCONCLUSIVE


def _by_key(recs: list[dict[str, Any]], name: str) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    out: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for r in recs:
        k = records.key(r)
        if k in out:
            raise records.RecordError(f"{name}: more than one record for {_fmt_key(k)} (one run per file)")
        out[k] = r
    return out


def _fmt_key(k: tuple[str, str, str, int]) -> str:
    return f"model {k[0]}, engine {k[1]}, device {k[2]}, threads {k[3]}"


def _base(k: tuple[str, str, str, int]) -> dict[str, Any]:
    return {"model": k[0], "engine": k[1], "device": k[2], "threads": k[3]}


def compare(base_records: list[dict[str, Any]], new_records: list[dict[str, Any]],
            threshold_pct: float = stats.DEFAULT_THRESHOLD_PCT, alpha: float = stats.DEFAULT_ALPHA, *,
            base_name: str = "BASE", new_name: str = "NEW", n_resamples: int = 2000,
            seed: int = 0) -> list[dict[str, Any]]:
    """One result dict per key of either file, compared pairs first (in BASE's order), then the rest.

    A compared pair: ``model, engine, device, threads, base_n, new_n, base_p50_ms, new_p50_ms`` (medians of the
    latencies), ``ratio, lo, hi`` (stats.ratio_of_medians_ci at 95%), ``p`` (stats.rank_test) and ``verdict``
    (stats.verdict), made ``"inconclusive"`` by the module docstring's rule where the runs were not interleaved
    and no steady same-code control supports it (``basis`` says which case, ``note`` why). Otherwise ``verdict``
    is ``"unmatched"`` (the key is in one file only) or ``"skipped"`` (a record is not ok, or the base median is
    0), with ``note`` saying why and the numbers null.
    ValueError (records.RecordError for the files' contents) on a bad threshold or alpha, a key twice in one
    file, or no key common to both files ("mismatched records").
    """
    stats.check_threshold(threshold_pct, alpha)
    b, n = _by_key(base_records, base_name), _by_key(new_records, new_name)
    if not set(b) & set(n):
        models = {name: ", ".join(sorted({k[0] for k in d})) for name, d in ((base_name, b), (new_name, n))}
        raise records.RecordError(
            f"mismatched records: no (model, engine, device, threads) of {new_name} is in {base_name} "
            f"(models of {base_name}: {models[base_name]}; of {new_name}: {models[new_name]})")
    empty = dict.fromkeys(("base_n", "new_n", "base_p50_ms", "new_p50_ms", "ratio", "lo", "hi", "p"))
    done, rest, pairs = [], [], []
    for k, rb in b.items():
        if k not in n:
            rest.append({**_base(k), **empty, "verdict": UNMATCHED, "note": f"only in {base_name}"})
            continue
        rn = n[k]
        bad = [f"{name} status {r['status']}: {r['error']}" for name, r in ((base_name, rb), (new_name, rn))
               if r["status"] != "ok"]
        if bad:
            rest.append({**_base(k), **empty, "verdict": SKIPPED, "note": "; ".join(bad)})
            continue
        lb, ln = np.asarray(rb["latencies_ms"], float), np.asarray(rn["latencies_ms"], float)
        row = {**_base(k), **empty, "base_n": int(lb.size), "new_n": int(ln.size),
               "base_p50_ms": float(np.median(lb)), "new_p50_ms": float(np.median(ln))}
        try:
            ratio, lo, hi = stats.ratio_of_medians_ci(lb, ln, n_resamples=n_resamples, seed=seed)
        except ValueError as e:
            rest.append({**row, "verdict": SKIPPED, "note": str(e)})
            continue
        p = stats.rank_test(lb, ln)
        row.update(ratio=ratio, lo=lo, hi=hi, p=p, verdict=stats.verdict(ratio, lo, hi, p, threshold_pct, alpha))
        if math.isnan(lo):
            row["note"] = "fewer than 2 runs: no interval"
        done.append(row)
        pairs.append((rb, rn))
    _apply_rule(done, pairs, threshold_pct)
    rest += [{**_base(k), **empty, "verdict": UNMATCHED, "note": f"only in {new_name}"} for k in n if k not in b]
    return done + rest


def _num(v: Any, fmt: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, fmt)


def format_table(results: list[dict[str, Any]], threshold_pct: float, alpha: float) -> str:
    """The results as an aligned text table, unmatched and skipped keys listed after it, and a summary line."""
    head = ("model", "engine", "device", "threads", "base p50", "new p50", "ratio [95% CI]", "p", "verdict")
    rows = []
    for r in results:
        if r["verdict"] in (UNMATCHED, SKIPPED) and r["ratio"] is None:
            continue
        ci = f"{_num(r['ratio'], '.3f')} [{_num(r['lo'], '.3f')}, {_num(r['hi'], '.3f')}]"
        rows.append((r["model"], r["engine"], r["device"], str(r["threads"]), _num(r["base_p50_ms"], ".3f") + " ms",
                     _num(r["new_p50_ms"], ".3f") + " ms", ci, _num(r["p"], ".2g"),
                     r["verdict"] + (f" ({r['note']})" if r.get("note") else "")))
    w = [max(len(x[i]) for x in [head, *rows]) for i in range(len(head))]
    right = {3, 4, 5, 7}
    lines = ["  ".join(c.rjust(w[i]) if i in right else c.ljust(w[i]) for i, c in enumerate(x)).rstrip()
             for x in [head, *rows]]
    for r in results:
        if r["verdict"] in (UNMATCHED, SKIPPED) and r["ratio"] is None:
            lines.append(f"{r['verdict']}: {_fmt_key((r['model'], r['engine'], r['device'], r['threads']))}: "
                         f"{r['note']}")
    counts = {v: sum(r["verdict"] == v for r in results)
              for v in (stats.SLOWER, stats.FASTER, stats.SAME, INCONCLUSIVE)}
    lines.append(f"{len(rows)} pair(s): {counts[stats.SLOWER]} slower, {counts[stats.FASTER]} faster, "
                 f"{counts[stats.SAME]} no significant change" +
                 (f", {counts[INCONCLUSIVE]} inconclusive" if counts[INCONCLUSIVE] else "") +
                 f" (threshold {threshold_pct:g}%, alpha {alpha:g})")
    return "\n".join(lines)


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _UsageError(message)


def _parser() -> argparse.ArgumentParser:
    ap = _Parser(prog=PROG, description="Compare two `vkinfer bench` result files (A/B regression detection): "
                 "ratio of medians with a bootstrap CI, Mann-Whitney U, a verdict per pair. Drift is not change: "
                 + RULE + ". Exit status 1 when any pair is slower, 2 on bad input.")
    ap.add_argument("base", metavar="BASE.jsonl", help="results of the baseline")
    ap.add_argument("new", metavar="NEW.jsonl", help="results of the candidate")
    ap.add_argument("--threshold", type=float, default=stats.DEFAULT_THRESHOLD_PCT, metavar="PCT",
                    help="flag changes of the median beyond this percentage (default %(default)g)")
    ap.add_argument("--alpha", type=float, default=stats.DEFAULT_ALPHA,
                    help="significance level of the rank test (default %(default)g)")
    ap.add_argument("--json", action="store_true", help="print the results as a JSON list instead of a table")
    return ap


def _jsonable(v: Any) -> Any:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def main(argv: list[str] | None = None) -> int:
    """``vkinfer bench compare``: print the comparison; 1 when any pair is slower, 2 on bad input, else 0."""
    try:
        args = _parser().parse_args(argv)
        stats.check_threshold(args.threshold, args.alpha)
        base = records.read(args.base)
        new = records.read(args.new)
        results = compare(base, new, args.threshold, args.alpha, base_name=str(Path(args.base)),
                          new_name=str(Path(args.new)))
    except (_UsageError, ValueError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - anything unforeseen: one line and a failing status, no traceback
        print(f"{PROG}: error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([{k: _jsonable(v) for k, v in r.items()} for r in results], indent=1))
    else:
        print(format_table(results, args.threshold, args.alpha))
    return 1 if any(r["verdict"] == stats.SLOWER for r in results) else 0
