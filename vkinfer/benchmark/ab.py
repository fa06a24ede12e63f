"""``vkinfer bench ab REV [MODEL...]``: revision REV against the working tree, interleaved in one process pair.

    vkinfer bench ab REV [MODEL...] [--device cpu] [--threads 1] [--runs N] [--warmup N] [--threshold PCT]
                         [--out FILE.jsonl] [--pin CPUS]

Two result files measured at different times on a shared, noisy machine differ by more than most regressions;
the only trustworthy A/B comparison runs both builds at the same time, alternating. This command:

1. **Builds REV** in a temporary git worktree (``git worktree add --detach``; removed at the end, also on an
   error or an interrupt): the C CPU library with REV's own ``make cpu`` (seconds). Other devices than ``cpu``
   also need the Vulkan module ``_vkcore``: when REV's ``vkinfer/_native`` equals the working tree's (``git diff
   --quiet REV -- vkinfer/_native``) the working tree's module is copied in, otherwise REV's Makefile builds it
   against the working tree's Kompute sources (``build/deps``), which takes minutes. The working tree's own C
   library is brought up to date with ``make cpu`` (a no-op when it is).
2. **Starts two long-lived workers** with the working tree's Python (``.venv/bin/python``): *base* imports
   ``vkinfer`` from the worktree (REV's package and libraries), *new* from the working tree (the worker checks
   which package it got and reports it; ``$VKINFER_CPU_LIB`` is removed from their environment so that each
   loads its own library). Each creates one ``InferenceSession(MODEL, device=D, threads=T)`` per model, on the
   same seeded inputs (vkinfer.benchmark.load.load_model's, made once here and handed to both).
3. **Alternates ABBA**: round k asks base then new for one inference when k is even, new then base when k is
   odd (A B B A A B B A ...), so neither side always runs first after the other. A latency is measured inside
   the worker (``time.perf_counter`` around ``session.run``); the request/reply protocol is one JSON line each
   way over pipes. The first --warmup rounds are not recorded. --pin pins both workers to the same CPUs.
4. **Writes** one record (vkinfer.benchmark.records, engine ``vkinfer``) per (model, side) to
   ``FILE.base.jsonl`` and ``FILE.new.jsonl`` (from ``--out FILE.jsonl``, default ``vkinfer-ab.jsonl``; both
   replaced), so that ``vkinfer bench compare FILE.base.jsonl FILE.new.jsonl`` runs on them. The side is in the
   record's conditions: ``ab_side`` (``"base"`` or ``"new"``), ``ab_run`` (one id for both files of a run:
   compare keeps the verdict of such interleaved pairs only), ``ab_rev`` (REV as given), ``git_commit`` (REV's
   commit, or the working tree's with ``-dirty``), ``ab_package`` and ``ab_cpu_lib`` (the vkinfer package
   directory the worker imported and the C library it loads).
5. **Prints the verdict** of vkinfer.benchmark.compare (ratio of medians new/base with a bootstrap interval,
   Mann-Whitney U). Exit status: 1 when a pair is significantly slower than --threshold (compare's rule), 0
   otherwise, 2 on bad input (an unknown REV, not a git checkout, a failed build with the tail of its log, a
   model that does not load on either side), 130 when interrupted.

Models that run in a few microseconds are a poor A/B subject: each inference follows the worker's wake-up from
a pipe read, and two processes running the same build showed medians 30% apart on a 5 us model, against 1% on a
60 us one (tests/benchmarks/test_bench_ab.py uses the latter for its verdicts).

Test hook: ``$VKINFER_AB_TEST_SLOWDOWN_PCT=P`` makes the *new* worker busy-wait after each inference until
``(1 + P/100)`` times its measured time has passed, an injected P% slowdown that proves the pipeline end to end
(tests/benchmarks/test_bench_ab.py) without building a slower revision. It is never passed to the base worker.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from . import compare, records, stats
from .cli import _parse_cpus, _parse_devices
from .conditions import conditions, git_commit, vulkan_devices
from .load import BadInput, Model, load_model

PROG = "vkinfer bench ab"
DEFAULT_OUT = "vkinfer-ab.jsonl"
SIDES = ("base", "new")
SLOWDOWN_ENV = "VKINFER_AB_TEST_SLOWDOWN_PCT"
ROOT = Path(__file__).resolve().parents[2]  # the working tree (the checkout this vkinfer runs from)
NATIVE_PATHS = ("vkinfer/_native",)  # the Vulkan module's sources: equal in REV and here -> reuse the module
START_TIMEOUT_S = 900.0  # a worker's imports and session creation (Vulkan pipelines compile on the first run)
RUN_TIMEOUT_S = 300.0  # one inference


class _Interrupted(KeyboardInterrupt):
    """SIGTERM, turned into an interrupt so that the worktree and the workers are cleaned up."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise BadInput(message)


# The worker: a standalone script (REV's package may have no vkinfer.benchmark at all). It keeps a private copy
# of stdout for the protocol and sends fd 1 to stderr, so nothing vkinfer prints can corrupt a reply.
WORKER = r'''
import json, os, sys, time
proto = os.fdopen(os.dup(1), "w", buffering=1)
os.dup2(2, 1)
def send(obj):
    proto.write(json.dumps(obj) + "\n")
    proto.flush()
cfg = json.loads(sys.argv[1])
try:
    if cfg["cpus"] is not None:
        os.sched_setaffinity(0, cfg["cpus"])
    import numpy as np
    import vkinfer
    sessions, created = [], []
    for m in cfg["models"]:
        with np.load(m["feed"]) as z:
            feed = {name: z[f"arr_{i}"] for i, name in enumerate(m["inputs"])}
        t0 = time.perf_counter()
        s = vkinfer.InferenceSession(m["path"], device=cfg["device"], threads=cfg["threads"])
        s.run(None, feed)
        created.append((time.perf_counter() - t0) * 1e3)
        sessions.append((s, feed))
except BaseException as e:
    send({"error": f"{type(e).__name__}: {e}", "model": len(created) if "created" in dir() else None})
    sys.exit(1)
try:
    from vkinfer import cpu as _cpu
    lib = str(_cpu.LIB_PATH)
except Exception:
    lib = None
send({"ready": True, "package": os.path.dirname(os.path.abspath(vkinfer.__file__)), "cpu_lib": lib,
      "create_ms": created})
slow = float(cfg.get("slowdown_pct") or 0.0) / 100.0
perf = time.perf_counter
for line in sys.stdin:
    req = json.loads(line)
    if req.get("cmd") != "run":
        break
    s, feed = sessions[req["model"]]
    try:
        t0 = perf()
        s.run(None, feed)
        t1 = perf()
        if slow > 0:
            end = t1 + (t1 - t0) * slow
            while perf() < end:
                pass
            t1 = perf()
    except Exception as e:
        send({"error": f"{type(e).__name__}: {e}"})
        continue
    send({"ms": (t1 - t0) * 1e3})
'''


# --------------------------------------------------------------------------------------------- helpers


def abba(rounds: int) -> list[tuple[str, str]]:
    """The order of the sides in each round: (base, new) in even rounds, (new, base) in odd ones (A B B A ...)."""
    return [SIDES if k % 2 == 0 else SIDES[::-1] for k in range(rounds)]


def out_paths(out: str | Path) -> tuple[Path, Path]:
    """``FILE.jsonl`` -> (``FILE.base.jsonl``, ``FILE.new.jsonl``); a name without .jsonl gets the suffixes."""
    p = Path(out)
    stem = p.name[:-len(".jsonl")] if p.name.endswith(".jsonl") else p.name
    return p.with_name(f"{stem}.base.jsonl"), p.with_name(f"{stem}.new.jsonl")


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=120, check=check)


def resolve_rev(root: Path, rev: str) -> str:
    """REV's full commit id in the checkout at `root`; BadInput when `root` is not a git checkout or REV names no
    commit."""
    try:
        top = _git(root, "rev-parse", "--show-toplevel", check=False)
    except (OSError, subprocess.SubprocessError) as e:
        raise BadInput(f"{root}: cannot run git: {e}") from None
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
        raise BadInput(f"{root} is not a git checkout (vkinfer bench ab builds REV from the checkout vkinfer runs "
                       "from)")
    r = _git(root, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{rev}^{{commit}}", check=False)
    if r.returncode != 0 or not r.stdout.strip():
        raise BadInput(f"unknown revision {rev!r}: not a commit of {root}")
    return r.stdout.strip()


def _tail(path: Path, n: int = 40) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _make(cwd: Path, args: list[str], log: Path, what: str, lock: Path | None = None) -> float:
    """Run ``make -C cwd ARGS`` appending to `log`; its seconds, or BadInput with the log's tail."""
    cmd = ["make", "--no-print-directory", "-C", str(cwd), f"-j{os.cpu_count() or 1}", *args]
    t0 = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        if lock is not None:
            lock.parent.mkdir(parents=True, exist_ok=True)
            lf = lock.open("w")
            fcntl.flock(lf, fcntl.LOCK_EX)  # the test suite's lock on build/cpu (tests/support/cpu_build.py)
        try:
            rc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
        except OSError as e:
            raise BadInput(f"cannot run make for {what}: {e}") from None
        finally:
            if lock is not None:
                lf.close()
    if rc != 0:
        raise BadInput(f"building {what} failed (make exit status {rc}); the end of {log}:\n{_tail(log)}")
    return time.perf_counter() - t0


def _ext_suffix() -> str:
    return sysconfig.get_config_var("EXT_SUFFIX") or ".so"


def build_rev(root: Path, tree: Path, rev: str, sha: str, device: str, python: str, log: Path) -> list[str]:
    """Build REV's libraries in the worktree `tree`; lines saying what was built or reused."""
    notes = [f"base: C library built by REV's make cpu in {_make(tree, ['cpu'], log, f'{rev} ({sha[:12]})'):.1f} s"]
    same = _git(root, "diff", "--quiet", sha, "--", *NATIVE_PATHS, check=False).returncode == 0
    if device.partition(":")[0] == "cpu":
        # The plan runner (_planrun) is the cpu device's run path too: without it REV's side took the Python loop
        # and the same revision measured 18% slower on a 0.1 ms model (one Zen 4 core).
        runners = sorted((root / "vkinfer").glob("_planrun*")) if same else []
        for m in runners:
            shutil.copy2(m, tree / "vkinfer" / m.name)
        if runners:
            notes.append(f"base: plan runner reused from the working tree ({', '.join(NATIVE_PATHS)} equal to REV's)")
        return notes
    mods = sorted([*(root / "vkinfer").glob("_vkcore*"), *(root / "vkinfer").glob("_planrun*")])
    if same and mods:
        for m in mods:
            shutil.copy2(m, tree / "vkinfer" / m.name)
        notes.append(f"base: Vulkan module reused from the working tree ({', '.join(NATIVE_PATHS)} equal to REV's)")
        return notes
    kp = sorted((root / "build" / "deps").glob("kp-*/CMakeLists.txt"))
    if not kp:
        raise BadInput(f"{rev}'s Vulkan module must be built, but the working tree has no Kompute sources under "
                       f"{root / 'build' / 'deps'} (run make native first)")
    venv = Path(python).resolve().parent.parent
    print(f"{PROG}: building {rev}'s Vulkan module (its {', '.join(NATIVE_PATHS)} differ): this takes minutes",
          file=sys.stderr)
    secs = _make(tree, [f"VENV={venv}", f"KP_SRC={kp[-1].parent}", f"vkinfer/_vkcore{_ext_suffix()}"], log,
                 f"{rev}'s Vulkan module")
    notes.append(f"base: Vulkan module built by REV's Makefile in {secs:.1f} s")
    return notes


# --------------------------------------------------------------------------------------------- workers


class WorkerError(Exception):
    """A worker that failed, died or did not answer (the message names the side)."""


class Worker:
    """One long-lived worker process: `side`'s vkinfer package, the models' sessions, one inference per request."""

    def __init__(self, side: str, root: Path, python: str, cfg: dict[str, Any], env: dict[str, str], log: Path,
                 label: str):
        self.side, self.label, self.log = side, label, log
        self._buf = b""
        self._err = log.open("w")
        self.proc = subprocess.Popen([python, "-c", WORKER, json.dumps(cfg)], cwd=root, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err)

    def _fail(self, what: str) -> WorkerError:
        tail = _tail(self.log, 15)
        return WorkerError(f"{self.label}: {what}" + (f"; its stderr ends:\n{tail}" if tail else ""))

    def recv(self, timeout: float) -> dict[str, Any]:
        """The worker's next reply (one JSON line)."""
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise self._fail(f"no answer within {timeout:g} s")
            if not select.select([fd], [], [], left)[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                self.proc.wait(timeout=10)
                raise self._fail(f"the worker exited (status {self.proc.returncode})")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def send(self, req: dict[str, Any]) -> None:
        """Send one request."""
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._fail("the worker is gone") from None

    def run_once(self, model: int) -> float:
        """One inference of model number `model`; its latency in ms as the worker measured it."""
        self.send({"cmd": "run", "model": model})
        rep = self.recv(RUN_TIMEOUT_S)
        if "error" in rep:
            raise self._fail(f"inference failed: {rep['error']}")
        return float(rep["ms"])

    def close(self) -> None:
        """Ask the worker to quit; kill it if it does not."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"cmd": "quit"}\n')
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self._err):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass


def _worker_env(root: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VKINFER_CPU_LIB", SLOWDOWN_ENV, "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["PYTHONNOUSERSITE"] = "1"
    return env


def start_workers(roots: dict[str, Path], labels: dict[str, str], python: str, models: list[Model],
                  feeds: list[Path], device: str, threads: int, cpus: list[int] | None, slowdown: float | None,
                  tmp: Path) -> dict[str, tuple[Worker, dict[str, Any]]]:
    """Both workers, started together and ready (sessions created): {side: (worker, its hello)}."""
    out: dict[str, tuple[Worker, dict[str, Any]]] = {}
    started = {}
    try:
        for side in SIDES:
            cfg = {"device": device, "threads": threads, "cpus": cpus,
                   "slowdown_pct": slowdown if side == "new" else None,
                   "models": [{"path": str(Path(m.path).resolve()), "inputs": list(m.feed), "feed": str(f)}
                              for m, f in zip(models, feeds, strict=True)]}
            started[side] = Worker(side, roots[side], python, cfg, _worker_env(roots[side]),
                                   tmp / f"worker-{side}.log", labels[side])
        for side in SIDES:
            w = started[side]
            hello = w.recv(START_TIMEOUT_S)
            if "error" in hello:
                i = hello.get("model")
                what = f"cannot load {models[i].path}" if isinstance(i, int) and i < len(models) else "failed"
                raise WorkerError(f"{w.label} {what}: {hello['error']}")
            want = (roots[side] / "vkinfer").resolve()
            if Path(hello["package"]).resolve() != want:
                raise WorkerError(f"{w.label} imported vkinfer from {hello['package']}, not {want}")
            out[side] = (w, hello)
    except BaseException:
        for w in started.values():
            w.close()
        raise
    return out


def interleave(workers: dict[str, Worker], model: int, runs: int, warmup: int) -> dict[str, list[float]]:
    """{side: latencies of the timed rounds} of model number `model`, the sides alternating ABBA (abba())."""
    lat: dict[str, list[float]] = {s: [] for s in SIDES}
    for k, order in enumerate(abba(warmup + runs)):
        for side in order:
            ms = workers[side].run_once(model)
            if k >= warmup:
                lat[side].append(ms)
    return lat


# --------------------------------------------------------------------------------------------- command line


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The options, checked; BadInput naming the culprit."""
    ap = _Parser(prog=PROG, description="Build git revision REV in a temporary worktree and run it against the "
                 "working tree, alternating ABBA in two worker processes; write FILE.base.jsonl and "
                 "FILE.new.jsonl and print vkinfer bench compare's verdict. Exit status 1 when a model is "
                 "significantly slower, 2 on bad input.")
    ap.add_argument("rev", metavar="REV", help="the baseline: a commit, branch or tag of this checkout")
    ap.add_argument("models", nargs="+", metavar="MODEL", help=".onnx or .tflite files")
    ap.add_argument("--device", default="cpu", help="one vkinfer device: cpu (default), cpu:<variant>, vulkan, "
                    "vulkan:<n>, auto (all but cpu need the Vulkan module: reused when unchanged, else built)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    ap.add_argument("--runs", type=int, default=100, help="timed runs per side and model (default 100)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed ABBA rounds first (default 10)")
    ap.add_argument("--threshold", type=float, default=stats.DEFAULT_THRESHOLD_PCT, metavar="PCT",
                    help="flag changes of the median beyond this percentage (default %(default)g)")
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"FILE.jsonl: records go to FILE.base.jsonl and "
                    f"FILE.new.jsonl (default {DEFAULT_OUT})")
    ap.add_argument("--pin", help="pin both workers to these CPUs, e.g. 0 or 0-1")
    a = ap.parse_args(argv)
    if a.runs < 1:
        raise BadInput(f"--runs must be at least 1, got {a.runs}")
    if a.warmup < 0:
        raise BadInput(f"--warmup must be 0 or more, got {a.warmup}")
    if a.threads < 1:
        raise BadInput(f"--threads must be at least 1, got {a.threads}")
    devs = _parse_devices(a.device)
    if len(devs) != 1:
        raise BadInput(f"--device takes one device for an A/B run, got {a.device!r}")
    a.device = devs[0]
    try:
        stats.check_threshold(a.threshold)
    except ValueError as e:
        raise BadInput(f"--threshold: {e}") from None
    a.cpus = _parse_cpus(a.pin) if a.pin is not None else None
    return a


def _slowdown() -> float | None:
    v = os.environ.get(SLOWDOWN_ENV)
    if not v:
        return None
    try:
        pct = float(v)
    except ValueError:
        raise BadInput(f"${SLOWDOWN_ENV} must be a percentage, got {v!r}") from None
    return pct


def _python(root: Path) -> str:
    venv = root / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def _record(m: Model, i: int, side: str, ms: list[float], hello: dict[str, Any], a: argparse.Namespace,
            cond: dict[str, Any]) -> dict[str, Any]:
    rec = records.new_record(m.path, "vkinfer", a.device, a.threads, runs=a.runs, warmup=a.warmup,
                             latencies_ms=list(ms), create_cold_ms=hello["create_ms"][i], model_bytes=len(m.data),
                             conditions=cond)
    rec.update(stats.summary(ms))
    return rec


def _check_out(a: argparse.Namespace) -> tuple[Path, Path]:
    paths = out_paths(a.out)
    for p in paths:
        d = p.parent
        if not d.is_dir() or not os.access(d, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
            raise BadInput(f"--out {a.out}: cannot write {p}")
    return paths


def _run(a: argparse.Namespace, root: Path, tmp: Path) -> int:
    sha = resolve_rev(root, a.rev)
    models = [load_model(p) for p in a.models]
    slowdown = _slowdown()
    base_out, new_out = _check_out(a)
    python = _python(root)
    feeds = []
    for i, m in enumerate(models):
        f = tmp / f"feed-{i}.npz"
        np.savez(f, *m.feed.values())
        feeds.append(f)
    tree = tmp / "tree"
    log = tmp / "build.log"
    wt = _git(root, "worktree", "add", "--detach", str(tree), sha, check=False)
    if wt.returncode != 0:
        raise BadInput(f"git worktree add of {a.rev} failed: {' '.join(wt.stderr.strip().splitlines()[-1:])}")
    t0 = time.perf_counter()
    notes = build_rev(root, tree, a.rev, sha, a.device, python, log)
    secs = _make(root, ["cpu"], log, "the working tree", lock=root / "build" / "cpu" / ".make.lock")
    notes.append(f"new: working tree's C library checked by make cpu in {secs:.1f} s")
    for n in notes:
        print(f"{PROG}: {n}", file=sys.stderr)
    new_commit = git_commit(root)
    labels = {"base": f"base ({a.rev}, {sha[:12]})", "new": f"new (working tree, {new_commit or 'no commit'})"}
    started = start_workers({"base": tree, "new": root}, labels, python, models, feeds, a.device, a.threads, a.cpus,
                            slowdown, tmp)
    workers = {s: w for s, (w, _) in started.items()}
    hellos = {s: h for s, (_, h) in started.items()}
    vk = vulkan_devices() if a.device.partition(":")[0] != "cpu" else "not used (--device cpu)"
    conds = {}
    run_id = uuid.uuid4().hex  # ties the two files together: compare trusts only interleaved pairs' verdicts
    for side in SIDES:
        c = conditions(a.threads, a.cpus, vulkan=vk, commit=sha if side == "base" else new_commit)
        if a.cpus is not None:
            c["affinity"] = list(a.cpus)
        c.update(ab_side=side, ab_run=run_id, ab_rev=a.rev, ab_order="ABBA", ab_package=hellos[side]["package"],
                 ab_cpu_lib=hellos[side].get("cpu_lib"),
                 python_executable=python)
        if side == "new" and slowdown:
            c["ab_test_slowdown_pct"] = slowdown
        conds[side] = c
    print(f"{PROG}: workers ready after {time.perf_counter() - t0:.1f} s; {len(models)} model(s) x "
          f"{a.warmup} + {a.runs} ABBA rounds", file=sys.stderr)
    done: dict[str, list[dict[str, Any]]] = {s: [] for s in SIDES}
    outs = {"base": base_out, "new": new_out}
    for p in outs.values():
        p.write_text("", encoding="utf-8")
    try:
        with records.Writer(base_out) as wb, records.Writer(new_out) as wn:
            writers = {"base": wb, "new": wn}
            for i, m in enumerate(models):
                lat = interleave(workers, i, a.runs, a.warmup)
                for side in SIDES:  # both sides' records of a model, or neither
                    done[side].append(_record(m, i, side, lat[side], hellos[side], a, conds[side]))
                for side in SIDES:
                    writers[side].write(done[side][-1])
    finally:
        for w in workers.values():
            w.close()
        for p in outs.values():
            if not done["base"]:  # nothing finished: no empty results files
                p.unlink(missing_ok=True)
    results = compare.compare(done["base"], done["new"], a.threshold, base_name=str(base_out),
                              new_name=str(new_out))
    print(f"base: {labels['base']}    new: {labels['new']}")
    print(compare.format_table(results, a.threshold, stats.DEFAULT_ALPHA))
    print(f"wrote {base_out} and {new_out} (vkinfer bench compare {base_out} {new_out})")
    return 1 if any(r["verdict"] == stats.SLOWER for r in results) else 0


def _remove_worktree(root: Path, tree: Path) -> None:
    if tree.exists():
        try:
            _git(root, "worktree", "remove", "--force", str(tree), check=False)
        except (OSError, subprocess.SubprocessError):
            pass
    shutil.rmtree(tree, ignore_errors=True)
    try:
        _git(root, "worktree", "prune", check=False)
    except (OSError, subprocess.SubprocessError):
        pass


def main(argv: list[str] | None = None) -> int:
    """``vkinfer bench ab``: 1 when a model got significantly slower, 0 otherwise, 2 on bad input, 130 when
    interrupted. The temporary worktree and the workers never outlive it."""
    argv = list(sys.argv[1:] if argv is None else argv)
    root = ROOT
    old_term = None

    def _on_term(signum, frame):  # noqa: ARG001
        raise _Interrupted()

    tmp: Path | None = None
    try:
        a = parse_args(argv)
        try:
            old_term = signal.signal(signal.SIGTERM, _on_term)
        except ValueError:  # not the main thread
            old_term = None
        tmp = Path(tempfile.mkdtemp(prefix="vkinfer-ab-"))
        return _run(a, root, tmp)
    except (BadInput, WorkerError, records.RecordError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - git, a worker, a file: one line and a failing status (cleaned up below)
        print(f"{PROG}: error: {type(e).__name__}: {' '.join(str(e).split())}", file=sys.stderr)
        return 1
    finally:
        if tmp is not None:
            _remove_worktree(root, tmp / "tree")
            shutil.rmtree(tmp, ignore_errors=True)
        if old_term is not None:
            signal.signal(signal.SIGTERM, old_term)
