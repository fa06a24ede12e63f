"""`vkinfer bench ab REV` (issue 13, A/B in one process pair): REV built in a temporary worktree, run ABBA against
the working tree in two workers, records for `bench compare`, the verdict and the exit status.

The oracles: git itself (the commit REV names, the worktree list afterwards), records.read (the schema), the
worker-reported package directory (which build each side imported), scipy/numpy through compare (the verdict of
an injected 20% slowdown, $VKINFER_AB_TEST_SLOWDOWN_PCT, applied to the new side only).
Each `ab` run builds REV's C library (a few seconds here); the plain run is made once per module.
"""

from __future__ import annotations

import contextlib
import io
import subprocess
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.small_model import small_qmodel

from vkinfer.benchmark import ab, compare, records
from vkinfer.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]


def conv_model(c: int = 16, hw: int = 32, seed: int = 0) -> bytes:
    """uint8 -> QLinearConv 3x3 c->2c -> QLinearConv 3x3 2c->2c: ~0.1 ms on the CPU, long enough for its latency
    to be the inference's and not the worker's wake-up (a 5 us model's medians differ between two processes)."""
    rng = np.random.default_rng(seed)
    init = {"xs": np.array(0.02, np.float32), "xzp": np.array(128, np.uint8),
            "w1": rng.integers(-64, 64, (2 * c, c, 3, 3)).astype(np.int8), "w1s": np.array(0.004, np.float32),
            "w1zp": np.array(0, np.int8), "y1s": np.array(0.05, np.float32), "y1zp": np.array(128, np.uint8),
            "w2": rng.integers(-64, 64, (2 * c, 2 * c, 3, 3)).astype(np.int8), "w2s": np.array(0.004, np.float32),
            "w2zp": np.array(0, np.int8), "y2s": np.array(0.08, np.float32), "y2zp": np.array(128, np.uint8)}
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xzp", "w1", "w1s", "w1zp", "y1s", "y1zp"], ["a"],
                              pads=[1] * 4, name="c1"),
             helper.make_node("QLinearConv", ["a", "y1s", "y1zp", "w2", "w2s", "w2zp", "y2s", "y2zp"], ["y"],
                              pads=[1] * 4, name="c2")]
    g = helper.make_graph(nodes, "ab", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, c, hw, hw])],
                          [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 2 * c, hw, hw])],
                          initializer=[numpy_helper.from_array(v, k) for k, v in init.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m.SerializeToString()


def run_ab(argv: list[str]) -> tuple[int, str, str]:
    """`vkinfer bench ab ARGV` through the CLI's dispatch, in this process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli_main(["bench", "ab", *argv])
    return rc, out.getvalue(), err.getvalue()


def worktrees() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "worktree", "list", "--porcelain"], capture_output=True,
                          text=True, check=True).stdout


def head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("ab_models")
    (d / "small.onnx").write_bytes(small_qmodel())
    (d / "conv.onnx").write_bytes(conv_model())
    return {"small": str(d / "small.onnx"), "conv": str(d / "conv.onnx")}


@pytest.fixture(scope="module")
def plain(models, tmp_path_factory):
    """`ab HEAD` on two models, once for the module: (status, stdout, stderr, out prefix, HEAD's commit)."""
    out = tmp_path_factory.mktemp("ab_plain") / "r.jsonl"
    commit = head()
    rc, so, se = run_ab(["HEAD", models["small"], models["conv"], "--runs", "30", "--warmup", "4",
                         "--out", str(out)])
    return rc, so, se, out, commit


# --- the plain run ----------------------------------------------------------------------------------------------

def test_plain_run_records_and_verdict(plain, models):
    rc, so, se, out, commit = plain
    assert rc in (0, 1), se
    base_p, new_p = ab.out_paths(out)
    assert (base_p.name, new_p.name) == ("r.base.jsonl", "r.new.jsonl")
    base, new = records.read(base_p), records.read(new_p)  # schema-valid
    assert [r["model"] for r in base] == [r["model"] for r in new] == [models["small"], models["conv"]]
    for side, recs in (("base", base), ("new", new)):
        for r in recs:
            assert (r["engine"], r["device"], r["threads"], r["status"]) == ("vkinfer", "cpu", 1, "ok")
            assert r["runs"] == 30 and r["warmup"] == 4 and len(r["latencies_ms"]) == 30
            assert all(v > 0 for v in r["latencies_ms"]) and r["create_cold_ms"] > 0
            assert r["p50_ms"] == pytest.approx(float(np.median(r["latencies_ms"])))
            c = r["conditions"]
            assert c["ab_side"] == side and c["ab_rev"] == "HEAD" and c["ab_order"] == "ABBA"
    # base is REV's commit as git names it; new the working tree's
    assert {r["conditions"]["git_commit"] for r in base} == {commit}
    # one run id for both files: compare keeps the verdicts of these interleaved pairs (and no others')
    assert len({r["conditions"]["ab_run"] for r in base + new}) == 1
    assert all(compare.interleaved(b, n) for b, n in zip(base, new, strict=True))
    assert {r["conditions"]["git_commit"].removesuffix("-dirty") for r in new} == {commit}
    # each side imported its own build: new the working tree's package, base one outside it (the worktree)
    assert Path(new[0]["conditions"]["ab_package"]) == ROOT / "vkinfer"
    base_pkg = Path(base[0]["conditions"]["ab_package"])
    assert ROOT not in base_pkg.parents and base_pkg.name == "vkinfer"
    assert Path(base[0]["conditions"]["ab_cpu_lib"]) == base_pkg / "libvkinfer_cpu.so"
    assert Path(new[0]["conditions"]["ab_cpu_lib"]) == ROOT / "vkinfer" / "libvkinfer_cpu.so"
    # the verdict table: one row per model, the same verdicts as bench compare on the written files
    assert "2 pair(s)" in so and "base (HEAD," in so
    want = compare.compare(base, new)
    assert rc == (1 if any(r["verdict"] == "slower" for r in want) else 0)
    assert compare.main([str(base_p), str(new_p)]) == rc
    assert "C library built by REV's make cpu" in se


def test_worktree_and_temp_files_removed(plain):
    out = plain[3]
    base_pkg = Path(records.read(ab.out_paths(out)[0])[0]["conditions"]["ab_package"])
    tmp = base_pkg.parent.parent  # .../vkinfer-ab-XXX/tree/vkinfer
    # only this run's worktree: other tests (parallel workers) may hold their own while this one checks
    for line in worktrees().splitlines():
        assert str(tmp) not in line
    assert not base_pkg.exists() and not tmp.exists()


# --- the injected slowdown --------------------------------------------------------------------------------------

def test_injected_slowdown_is_detected(models, tmp_path, monkeypatch):
    # 50%, not 20%: under the suite's load on 2 cores an injected 20% measured 1.094x once (a clean clone's CI run,
    # 2026-11-27), below the old 1.1 bound, although ab still called it slower; the bound checks the injection is
    # seen at about its size, not the noise floor.
    monkeypatch.setenv(ab.SLOWDOWN_ENV, "50")
    out = tmp_path / "slow.jsonl"
    rc, so, se = run_ab(["HEAD", models["conv"], "--runs", "40", "--warmup", "4", "--threshold", "5",
                         "--out", str(out)])
    assert rc == 1, so + se
    assert "slower" in so and "1 slower" in so
    base, new = (records.read(p) for p in ab.out_paths(out))
    ratio = np.median(new[0]["latencies_ms"]) / np.median(base[0]["latencies_ms"])
    assert 1.25 < ratio < 2.0
    assert new[0]["conditions"]["ab_test_slowdown_pct"] == 50
    assert "ab_test_slowdown_pct" not in base[0]["conditions"]


def test_vulkan_reuses_the_module(models, tmp_path):
    rc, so, se = run_ab(["HEAD", models["small"], "--device", "vulkan", "--runs", "4", "--warmup", "1",
                         "--out", str(tmp_path / "v.jsonl")])
    assert rc in (0, 1), se
    assert "Vulkan module reused from the working tree" in se
    base = records.read(tmp_path / "v.base.jsonl")
    assert base[0]["device"] == "vulkan" and len(base[0]["latencies_ms"]) == 4


# --- pieces -----------------------------------------------------------------------------------------------------

def test_abba_order_and_out_paths():
    assert ab.abba(4) == [("base", "new"), ("new", "base"), ("base", "new"), ("new", "base")]
    sched = [s for rnd in ab.abba(10) for s in rnd]
    assert sched.count("base") == sched.count("new") == 10
    assert ab.out_paths("x/r.jsonl") == (Path("x/r.base.jsonl"), Path("x/r.new.jsonl"))
    assert ab.out_paths("res") == (Path("res.base.jsonl"), Path("res.new.jsonl"))


# --- bad input: one line naming the culprit, status 2, no traceback, nothing left behind --------------------------

def _bad(argv: list[str], *needles: str) -> str:
    before = worktrees()
    rc, so, se = run_ab(argv)
    assert rc == 2, so + se
    assert "Traceback" not in se and se.startswith("vkinfer bench ab: error: ")
    for n in needles:
        assert n in se
    assert worktrees() == before
    return se


def test_unknown_rev(models, tmp_path):
    _bad(["no-such-rev-xyz", models["small"], "--out", str(tmp_path / "r.jsonl")], "no-such-rev-xyz",
         "unknown revision")
    assert not list(tmp_path.iterdir())


def test_bad_model_and_options(models, tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    _bad(["HEAD", str(junk)], "junk.onnx")
    _bad(["HEAD", models["small"], "--device", "cpu,vulkan"], "--device")
    _bad(["HEAD", models["small"], "--device", "gpu9"], "gpu9")
    _bad(["HEAD", models["small"], "--runs", "0"], "--runs")
    _bad(["HEAD", models["small"], "--threshold", "-3"], "threshold")
    _bad(["HEAD"], "MODEL")


def test_not_a_git_checkout(models, tmp_path, monkeypatch):
    monkeypatch.setattr(ab, "ROOT", tmp_path)
    _bad(["HEAD", models["small"]], "not a git checkout")


def _repo(path: Path, makefile: str) -> None:
    path.mkdir()
    (path / "Makefile").write_text(makefile)
    (path / "vkinfer").mkdir()
    for cmd in (["init", "-q"], ["add", "-A"],
                ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "broken build"]):
        subprocess.run(["git", "-C", str(path), *cmd], check=True, capture_output=True)


def test_build_failure_shows_log_tail(models, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    _repo(repo, "cpu:\n\t@echo the-compiler-said-boom >&2; exit 3\n")
    monkeypatch.setattr(ab, "ROOT", repo)
    se = _bad(["HEAD", models["small"], "--out", str(tmp_path / "r.jsonl")], "building HEAD", "failed",
              "the-compiler-said-boom")
    assert se.splitlines()[0].startswith("vkinfer bench ab: error: building HEAD")
    listed = subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True, text=True).stdout
    assert len(listed.splitlines()) == 1 and not (tmp_path / "r.base.jsonl").exists()


def test_interrupt_removes_worktree(models, tmp_path, monkeypatch):
    seen = {}

    def interrupted(root, tree, *args):
        seen["tree"] = tree
        assert tree.is_dir() and tree.name == "tree"
        raise KeyboardInterrupt

    monkeypatch.setattr(ab, "build_rev", interrupted)
    before = worktrees()
    rc, so, se = run_ab(["HEAD", models["small"], "--out", str(tmp_path / "r.jsonl")])
    assert rc == 130 and "interrupted" in se
    assert not seen["tree"].exists() and not seen["tree"].parent.exists()
    assert worktrees() == before
