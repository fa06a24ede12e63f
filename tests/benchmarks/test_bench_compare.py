"""`vkinfer bench compare` (issue 13, A/B regression detection) on synthetic records with known shifts.

Latencies are seeded samples of a realistic distribution (log-normal around 2 ms, ~5% noise, plus 5% of runs
hit by an exponential delay), so a 10% slowdown must be flagged, a 10% speed-up reported as faster, and two
samples of the same distribution left alone. The oracles are numpy, Python's statistics module and scipy.
"""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest
from scipy import stats as st

from vkinfer.benchmark import compare, records, stats

MODEL = "mobilenet_v2_int8.onnx"


def latencies(seed: int, n: int = 150, scale: float = 1.0) -> np.ndarray:
    """A run of `n` latencies (ms) of the same build; `scale` injects a slowdown (>1) or speed-up (<1)."""
    r = np.random.default_rng(seed)
    x = 2.0 * np.exp(r.normal(0.0, 0.05, n))
    hit = r.random(n) < 0.05
    x[hit] += r.exponential(0.6, int(hit.sum()))
    return x * scale


def rec(lat, model: str = MODEL, engine: str = "vkinfer", device: str = "cpu", threads: int = 1, side=None,
        **kw) -> dict:
    """A record; `side` ("base"/"new") marks it as one side of an interleaved `vkinfer bench ab` run, whose verdicts
    compare keeps (other pairs need a same-code control: test_drift_*)."""
    lat = [float(v) for v in lat]
    if side is not None:
        kw["conditions"] = {**kw.get("conditions", {}), "ab_side": side, "ab_run": "run-1"}
    return records.new_record(model, engine, device, threads, runs=len(lat), warmup=5, latencies_ms=lat,
                              **stats.summary(lat), **kw)


def write(path, recs) -> str:
    records.write_all(path, recs)
    return str(path)


def scaled_copy(src, dst, factor: float) -> str:
    """A copy of a result file with every latency multiplied by `factor` and the statistics recomputed."""
    out = []
    for r in records.read(src):
        lat = [v * factor for v in r["latencies_ms"]]
        cond = dict(r["conditions"], **({"ab_side": "new"} if "ab_side" in r["conditions"] else {}))
        out.append({**r, "latencies_ms": lat, **stats.summary(lat), "conditions": cond} if r["status"] == "ok"
                   else r)
    return write(dst, out)


# --- stats ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 2, 7, 150])
def test_summary_agrees_with_statistics_module(n):
    x = latencies(n, n)
    s = stats.summary(x)
    assert set(s) == set(records.STAT_FIELDS)
    xs = [float(v) for v in x]
    if n > 1:
        q = statistics.quantiles(xs, n=100, method="inclusive")  # type 7 = numpy's default linear
        assert s["p50_ms"] == pytest.approx(statistics.median(xs), rel=1e-12)
        assert s["p90_ms"] == pytest.approx(q[89], rel=1e-12)
        assert s["p99_ms"] == pytest.approx(q[98], rel=1e-12)
        assert s["std_ms"] == pytest.approx(statistics.stdev(xs), rel=1e-9)
    else:
        assert s["p50_ms"] == s["p90_ms"] == s["p99_ms"] == xs[0]
        assert s["std_ms"] == 0.0
    assert s["min_ms"] == min(xs) and s["max_ms"] == max(xs)
    assert s["mean_ms"] == pytest.approx(statistics.fmean(xs), rel=1e-12)
    assert s["cv"] == pytest.approx(s["std_ms"] / s["mean_ms"], rel=1e-12)
    assert s["p50_ms"] == pytest.approx(float(np.percentile(x, 50)))


def test_ratio_ci_against_a_numpy_bootstrap_and_reproducible():
    b, n = latencies(1), latencies(2, scale=1.1)
    ratio, lo, hi = stats.ratio_of_medians_ci(b, n)
    assert ratio == pytest.approx(np.median(n) / np.median(b), rel=1e-12)
    assert (ratio, lo, hi) == stats.ratio_of_medians_ci(b, n)  # seeded
    assert lo < ratio < hi
    # an independent percentile bootstrap in numpy: the same interval up to Monte-Carlo noise
    r = np.random.default_rng(123)
    boot = (np.median(n[r.integers(0, n.size, (4000, n.size))], axis=1) /
            np.median(b[r.integers(0, b.size, (4000, b.size))], axis=1))
    elo, ehi = np.percentile(boot, [2.5, 97.5])
    assert lo == pytest.approx(elo, abs=0.006) and hi == pytest.approx(ehi, abs=0.006)
    assert stats.rank_test(b, n) == pytest.approx(st.mannwhitneyu(b, n, alternative="two-sided").pvalue)


def test_ci_contains_the_true_ratio():
    covered = 0
    for s in range(20):
        _, lo, hi = stats.ratio_of_medians_ci(latencies(100 + s), latencies(200 + s, scale=1.1))
        covered += lo <= 1.1 <= hi
    assert covered >= 16, covered  # nominal 95%: 19 of 20 expected, <= 15 has probability ~3e-4


def test_verdict_rule():
    v = stats.verdict
    assert v(1.10, 1.07, 1.13, 1e-6, 5) == "slower"
    assert v(1.10, 1.07, 1.13, 0.2, 5) == "no significant change"  # rank test not significant
    assert v(1.10, 0.99, 1.20, 1e-6, 5) == "no significant change"  # interval contains 1
    assert v(1.03, 1.01, 1.05, 1e-6, 5) == "no significant change"  # real but below the threshold
    assert v(1.03, 1.01, 1.05, 1e-6, 2) == "slower"
    assert v(0.90, 0.87, 0.93, 1e-6, 5) == "faster"
    assert v(0.96, 0.94, 0.98, 1e-6, 5) == "no significant change"  # 0.96 > 1/1.05
    assert v(1.10, float("nan"), float("nan"), 1e-6, 5) == "no significant change"
    with pytest.raises(ValueError, match="threshold"):
        v(1.1, 1.0, 1.2, 0.01, -1)


# --- compare ----------------------------------------------------------------------------------------------------

def test_same_distribution_is_not_flagged_over_seeds():
    flagged = 0
    for s in range(20):
        res = compare.compare([rec(latencies(2 * s), side="base")], [rec(latencies(2 * s + 1), side="new")])
        assert len(res) == 1 and res[0]["verdict"] in ("slower", "faster", "no significant change")
        flagged += res[0]["verdict"] != "no significant change"
    assert flagged <= 1, flagged


@pytest.mark.parametrize("threshold", [None, 5.0])
def test_injected_slowdown_is_flagged(tmp_path, capsys, threshold):
    base = write(tmp_path / "base.jsonl", [rec(latencies(1), side="base"),
                                           rec(latencies(2), engine="onnxruntime", side="base"),
                                           records.new_record(MODEL, "vkinfer", "vulkan", 1, status="missing",
                                                              runs=0, error="no Vulkan device")])
    new = scaled_copy(base, tmp_path / "new.jsonl", 1.1)
    argv = [base, new] + ([] if threshold is None else ["--threshold", str(threshold)])
    assert compare.main(argv) == 1
    out = capsys.readouterr().out
    assert out.count("slower") >= 2 and "skipped" in out and "no Vulkan device" in out
    assert "2 pair(s): 2 slower, 0 faster" in out
    # a copy unchanged: nothing flagged; the same build measured again: nothing flagged
    assert compare.main([base, scaled_copy(base, tmp_path / "same.jsonl", 1.0)]) == 0
    again = write(tmp_path / "again.jsonl", [rec(latencies(11), side="new"),
                                             rec(latencies(12), engine="onnxruntime", side="new")])
    assert compare.main([base, again]) == 0
    assert "slower" not in capsys.readouterr().out.split("pair(s):")[0]


def test_speedup_is_faster_and_json(tmp_path, capsys):
    base = write(tmp_path / "base.jsonl", [rec(latencies(1), side="base"), rec(latencies(5), model="other.onnx")])
    new = write(tmp_path / "new.jsonl", [rec(latencies(2, scale=0.9), side="new"), rec(latencies(6), threads=2)])
    assert compare.main([base, new, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert [r["verdict"] for r in res] == ["faster", "unmatched", "unmatched"]
    assert res[0]["lo"] < 0.9 / 0.97 and res[0]["hi"] < 1 and res[0]["p"] < 0.05
    assert res[0]["base_p50_ms"] == pytest.approx(np.median(records.read(base)[0]["latencies_ms"]))
    assert {r["note"] for r in res[1:]} == {f"only in {base}", f"only in {new}"}


def test_threshold_controls_the_verdict(tmp_path, capsys):
    base = write(tmp_path / "base.jsonl", [rec(latencies(1), side="base")])
    new = scaled_copy(base, tmp_path / "new.jsonl", 1.1)
    assert compare.main([base, new, "--threshold", "20"]) == 0
    assert compare.main([base, new, "--threshold", "0", "--alpha", "0.01"]) == 1
    capsys.readouterr()


# --- drift is not change -------------------------------------------------------------------------------------

def _cond(commit: str, ort: str = "1.20.1") -> dict:
    return {"git_commit": commit, "versions": {"onnxruntime": ort}}


def test_drift_two_runs_of_the_same_commit_are_inconclusive(tmp_path, capsys):
    """Issue 23: two `vkinfer bench` runs of one clean commit, the machine 16% faster in the second, were
    reported "faster" (ratio 0.84, p = 5e-12). The same code cannot be faster: inconclusive, exit 0."""
    c = _cond("a" * 40)
    base = write(tmp_path / "b.jsonl", [rec(latencies(1), conditions=c)])
    new = write(tmp_path / "n.jsonl", [rec(latencies(2, scale=0.84), conditions=c)])
    assert compare.main([base, new, "--json"]) == 0
    [r] = json.loads(capsys.readouterr().out)
    assert r["p"] < 1e-6 and r["ratio"] == pytest.approx(0.84, abs=0.03)  # the statistics alone say "faster"
    assert r["verdict"] == "inconclusive" and "same code" in r["note"] and "drift" in r["note"]


def test_drift_a_moving_control_makes_a_change_inconclusive(tmp_path, capsys):
    """vkinfer at another commit 0.84x, but onnxruntime (same version, interleaved with it) moved as much: drift."""
    base = write(tmp_path / "b.jsonl", [rec(latencies(1), conditions=_cond("a" * 40)),
                                        rec(latencies(3), engine="onnxruntime", conditions=_cond("a" * 40))])
    new = write(tmp_path / "n.jsonl", [rec(latencies(2, scale=0.84), conditions=_cond("b" * 40)),
                                       rec(latencies(4, scale=0.84), engine="onnxruntime", conditions=_cond("b" * 40))])
    assert compare.main([base, new]) == 0
    out = capsys.readouterr().out
    assert "faster" not in out.split("pair(s):")[0] and "2 inconclusive" in out
    assert "control onnxruntime on cpu (onnxruntime 1.20.1 in both) moved" in out


def test_drift_a_steady_control_keeps_the_verdict(tmp_path, capsys):
    base = write(tmp_path / "b.jsonl", [rec(latencies(1), conditions=_cond("a" * 40)),
                                        rec(latencies(3), engine="onnxruntime", conditions=_cond("a" * 40))])
    new = write(tmp_path / "n.jsonl", [rec(latencies(2, scale=1.2), conditions=_cond("b" * 40)),
                                       rec(latencies(4), engine="onnxruntime", conditions=_cond("b" * 40))])
    assert compare.main([base, new, "--json"]) == 1
    vk, ort_ = json.loads(capsys.readouterr().out)
    assert vk["verdict"] == "slower" and "control onnxruntime" in vk["note"] and "steady" in vk["note"]
    assert ort_["verdict"] == "no significant change"
    # another ORT version is no control: nothing vouches for the machine, so inconclusive
    new2 = write(tmp_path / "n2.jsonl", [rec(latencies(2, scale=1.2), conditions=_cond("b" * 40)),
                                         rec(latencies(4), engine="onnxruntime", conditions=_cond("b" * 40, "1.21"))])
    assert compare.main([base, new2, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["verdict"] == "inconclusive"


def test_drift_only_one_ab_run_is_interleaved(tmp_path):
    """Files of two different `bench ab` runs were not measured together: their ab_run ids differ."""
    b = rec(latencies(1), side="base")
    n = rec(latencies(2, scale=1.2), side="new")
    assert compare.compare([b], [n])[0]["verdict"] == "slower"
    n["conditions"]["ab_run"] = "run-2"
    assert compare.compare([b], [n])[0]["verdict"] == "inconclusive"


def test_compare_help_documents_the_rule(capsys):
    with pytest.raises(SystemExit):
        compare._parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "inconclusive" in text and "interleaved" in text and "same-code control" in text


# --- bad input --------------------------------------------------------------------------------------------------

def _bad(capsys, argv, *culprits):
    assert compare.main(argv) == 2
    cap = capsys.readouterr()
    err = cap.err.strip()
    assert err.startswith("vkinfer bench compare: error: ") and "\n" not in err, err
    assert "Traceback" not in cap.err and cap.out == ""
    for c in culprits:
        assert c in err, (c, err)


def test_bad_input(tmp_path, capsys):
    good = write(tmp_path / "good.jsonl", [rec(latencies(1))])
    _bad(capsys, [good, str(tmp_path / "nope.jsonl")], "nope.jsonl", "cannot read")
    notjson = tmp_path / "notjson.jsonl"
    notjson.write_text(json.dumps(rec(latencies(1))) + "\n{oops\n")
    _bad(capsys, [good, str(notjson)], "notjson.jsonl:2", "not JSON")
    r = rec(latencies(1))
    del r["p50_ms"]
    missing = tmp_path / "missing.jsonl"
    missing.write_text(json.dumps(r) + "\n")
    _bad(capsys, [str(missing), good], "missing.jsonl:1", "p50_ms")
    other = write(tmp_path / "other.jsonl", [rec(latencies(1), model="resnet.onnx")])
    _bad(capsys, [good, other], "mismatched records", MODEL, "resnet.onnx")
    _bad(capsys, [good, good, "--threshold", "-5"], "threshold", "-5")
    _bad(capsys, [good, good, "--threshold", "nan"], "threshold")
    _bad(capsys, [good, good, "--alpha", "1.5"], "alpha")
    _bad(capsys, [good, good, "--threshold", "ten"], "--threshold", "ten")
    _bad(capsys, [good], "NEW.jsonl")
    dup = write(tmp_path / "dup.jsonl", [rec(latencies(1)), rec(latencies(2))])
    _bad(capsys, [dup, good], "dup.jsonl", "more than one record", MODEL)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    _bad(capsys, [good, str(empty)], "empty.jsonl", "no records")


def test_degenerate_samples_do_not_crash():
    one = compare.compare([rec([2.0])], [rec([2.5])])
    assert one[0]["verdict"] == "no significant change" and one[0]["ratio"] == pytest.approx(1.25)
    flat = compare.compare([rec([2.0] * 20)], [rec([2.0] * 20)])
    assert flat[0]["verdict"] == "no significant change" and flat[0]["ratio"] == 1.0
    zero = compare.compare([rec([0.0] * 5)], [rec([1.0] * 5)])
    assert zero[0]["verdict"] == "skipped" and "median of base is 0" in zero[0]["note"]


def test_an_unforeseen_failure_is_one_line_and_exit_1(tmp_path, capsys, monkeypatch):
    good = write(tmp_path / "good.jsonl", [rec(latencies(1))])

    def boom(*a, **k):
        raise RuntimeError("scipy\nexploded")
    monkeypatch.setattr(compare, "compare", boom)
    assert compare.main([good, good]) == 1
    assert capsys.readouterr().err == "vkinfer bench compare: error: RuntimeError: scipy exploded\n"
