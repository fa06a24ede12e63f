"""The fuzzers' machinery finds what it must: the check flags non-clean errors, empty messages and every kind of
disagreement; the plain engine records each planted defect (tests/fuzz/planted.py: a non-clean exception, a
disagreement, a hang in Python and one deaf to the alarm, a crash by signal, a runaway allocation) as a finding
with its input, and goes on to the next input; atheris runs a target and records a planted finding."""

from __future__ import annotations

import io
import json
import os
import random

import numpy as np
import pytest

from vkinfer.errors import VkInferError
from vkinfer.testing.fuzz import check
from vkinfer.testing.fuzz.engine import atheris_campaign, plain_campaign

from . import planted

TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _outs(*values):
    return [np.array(v) for v in values]


def test_compare_passes_equal_bits_and_one_clean_error_class():
    a = _outs([1.0, np.nan, -0.0], [3])
    assert check.compare({"reference": a, "cpu": _outs([1.0, np.nan, -0.0], [3]), "vulkan": a}) is None
    e = VkInferError("node 'n': refused")
    assert check.compare({"reference": e, "cpu": VkInferError("other words"), "vulkan": e}) is None


@pytest.mark.parametrize("results, signature", [
    ({"reference": _outs([0.0]), "cpu": _outs([-0.0])}, "disagree bits cpu/reference output 0"),
    ({"reference": _outs([1]), "cpu": _outs([1, 1])}, "disagree bits cpu/reference output 0"),
    ({"reference": _outs(np.array([1], np.int8)), "cpu": _outs(np.array([1], np.uint8))},
     "disagree bits cpu/reference output 0"),
    ({"reference": _outs([1]), "cpu": _outs([1], [2])}, "disagree bits cpu/reference 2 outputs against 1"),
    ({"reference": _outs([1]), "cpu": ValueError("no")}, "disagree cpu=ValueError reference=outputs"),
    ({"reference": TypeError("a"), "cpu": ValueError("b")}, "disagree cpu=ValueError reference=TypeError"),
    ({"reference": ValueError(""), "cpu": ValueError("")}, "nonclean empty ValueError"),
])
def test_compare_flags_disagreements_and_empty_messages(results, signature):
    f = check.compare(results)
    assert f is not None and f.signature == signature, f


def test_a_nonclean_exception_names_its_class_and_place():
    try:
        [][1]
    except IndexError as e:
        f = check.nonclean(e, "cpu", "run")
    assert f.kind == "nonclean" and f.signature.startswith("nonclean IndexError ")
    assert "tests/fuzz/test_fuzz_engines.py:" in f.detail


def test_layouts_round_trip(tmp_path):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    for code in ("c", "f", "neg", "strided", "ro"):
        v = check.with_layout(a, code)
        assert check.layout_of(v) == code and np.array_equal(v, a)
    feed = {"x": check.with_layout(a, "neg"), "y": np.zeros(3, np.int8)}
    f = check.Finding("disagree", "d", "sig")
    path = check.write_finding(tmp_path, "run", f, b"\x08\x07model", feed, ["out"])
    blob, got, names = check.read_input(path)
    assert blob == b"\x08\x07model" and names == ["out"] and check.layout_of(got["x"]) == "neg"
    assert np.array_equal(got["x"], a) and got["y"].dtype == np.int8
    assert json.loads(path.with_suffix(".json").read_text())["signature"] == "sig"
    for _ in range(3):  # two inputs per signature are kept
        check.write_finding(tmp_path, "run", f, os.urandom(8))
    assert len(list((tmp_path / "disagree").glob("*.json"))) == check.KEEP_PER_SIGNATURE


def _planted_seed(runs: int) -> tuple[int, list[str]]:
    """A seed whose first `runs` inputs plant every behaviour."""
    for seed in range(1000):
        kinds = [planted.behaviour(random.Random(f"{seed}:{i}")) for i in range(runs)]
        if set(kinds) == set(planted.WEIGHTS):
            return seed, kinds
    raise AssertionError("no seed plants every behaviour")


def test_plain_engine_records_every_planted_defect_and_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    runs = 24
    seed, kinds = _planted_seed(runs)
    log = io.StringIO()
    s = plain_campaign("fuzz.planted:Planted", runs, 300, seed, tmp_path, timeout=1.0, rss_mb=300,
                       devices=["cpu"], log=log, grace=3.0)
    want = [planted.KINDS[k] for k in kinds]
    assert s["by_kind"] == {k: want.count(k) for k in set(want) - {None}}, log.getvalue()
    # Every input ran: the clean ones to the end, each defect recorded and the next input started.
    assert s["executions"] == sum(k in ("ok", "clean_error", "nonclean", "disagree") for k in kinds)
    assert s["restarts"] == sum(k in ("python_hang", "native_hang", "crash", "memory") for k in kinds)
    kept = {p.parent.name for p in (tmp_path / "findings").glob("*/*.json")}
    assert kept == set(want) - {None}
    crash = json.loads(next((tmp_path / "findings" / "crash").glob("*.json")).read_text())
    assert "SIGSEGV" in crash["detail"] and kinds[crash["index"]] == "crash"
    assert (tmp_path / "summary.json").exists()


def test_plain_engine_resumes_at_an_index(tmp_path, monkeypatch):
    """`--start i --runs 1` reproduces input i alone (inputs depend on the seed and index only)."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    seed, kinds = _planted_seed(24)
    i = kinds.index("nonclean")
    s = plain_campaign("fuzz.planted:Planted", 1, 60, seed, tmp_path, timeout=1.0, rss_mb=0, devices=["cpu"],
                       start=i, log=io.StringIO())
    assert s["by_kind"] == {"nonclean": 1} and s["executions"] == 1


def test_atheris_engine_runs_a_target_and_keeps_its_findings(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    s = atheris_campaign("fuzz.planted:OnlyNonclean", 50, 60, 1, tmp_path, timeout=10, rss_mb=2048,
                         devices=["cpu"], log=io.StringIO())
    assert s["executions"] >= 50 and s["by_kind"] == {"nonclean": s["findings"]} and s["findings"] >= 1
    assert list((tmp_path / "findings" / "nonclean").glob("planted-*.json"))


def test_atheris_engine_runs_targets_at_once(tmp_path, monkeypatch):
    """`jobs=2`: both targets fuzzed in their own processes at the same time, each its share of the runs (601: the
    first takes the remainder, so the shares add up to the runs asked for), the findings of each kept."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    s = atheris_campaign("fuzz.planted:OnlyNonclean,fuzz.planted:Clean", 601, 60, 1, tmp_path, timeout=10,
                         rss_mb=2048, devices=["cpu"], log=io.StringIO(), jobs=2)
    assert s["jobs"] == 2 and s["per_target"]["fuzz.planted:OnlyNonclean"] >= 301
    assert s["per_target"]["fuzz.planted:Clean"] >= 300
    assert s["by_kind"] == {"nonclean": s["findings"]} and s["findings"] >= 1
    logs = sorted(p.name for p in (tmp_path / "logs").glob("*.log"))
    assert any(n.startswith("fuzz.planted:Clean") for n in logs) and any("OnlyNonclean" in n for n in logs)


def test_a_stopped_atheris_campaign_writes_what_ran(tmp_path):
    """SIGTERM mid-campaign (a long `make fuzz` stopped by hand): the children go, and summary.json counts the
    executions so far (from the children's progress files: libFuzzer's own count comes only at a normal exit)."""
    import signal
    import subprocess
    import sys
    import time

    env = dict(os.environ, PYTHONPATH=os.pathsep.join([TESTS, os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "vkinfer.testing.fuzz", "--engine", "atheris", "--targets", "fuzz.planted:Clean",
           "--runs", str(10 ** 8), "--seconds", "300", "--out", str(tmp_path), "--devices", "cpu"]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    progress = tmp_path / "progress"
    t0 = time.time()
    while time.time() - t0 < 120 and not (progress.exists() and any(p.read_text() for p in progress.glob("f*"))):
        time.sleep(0.2)
    p.send_signal(signal.SIGTERM)
    text = p.communicate(timeout=60)[0]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary.get("interrupted") is True and summary["executions"] >= 256, text[-2000:]
    assert "fuzz: interrupted" in text
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
    assert not any(f"_atheris --targets fuzz.planted:Clean --out {tmp_path}" in line for line in ps)


def test_the_campaigns_session_cap_refuses_a_legal_large_model_on_every_device(tmp_path, monkeypatch):
    """A legal model with a 512 MB input (kept under memory/: three sessions held 2.2 GB, past libFuzzer's rss
    limit) is refused with one SizeLimitError on every device under the campaign's cap, and a kept input is
    checked under the cap its .json records (the defaults when it records none)."""
    from pathlib import Path

    import vkinfer

    src = Path(__file__).parents[1] / "models" / "regressions" / "fuzz" / "memory" / "onnx-libfuzzer-6d30bafc70.onnx"
    monkeypatch.setenv(check.SESSION_MB_ENV, "256")
    assert check.session_limits() == {"max_session_bytes": 256 << 20, "max_tensor_bytes": 256 << 20}
    got = check.load(src.read_bytes())
    assert {type(e) for e in got.values()} == {vkinfer.SizeLimitError}, got
    assert all("268435456" in str(e) for e in got.values())
    monkeypatch.delenv(check.SESSION_MB_ENV)
    assert check.session_limits() == {}
    kept = tmp_path / src.name
    kept.write_bytes(src.read_bytes())
    seen = []
    monkeypatch.setattr(check, "check_model", lambda *a: seen.append(check.session_limits()))
    kept.with_suffix(".json").write_text(json.dumps({"session_mb": 64}))
    check.check_input(kept)
    kept.with_suffix(".json").write_text(json.dumps({}))
    check.check_input(kept)
    assert seen == [{"max_session_bytes": 64 << 20, "max_tensor_bytes": 64 << 20}, {}]
    assert check.SESSION_MB_ENV not in os.environ
