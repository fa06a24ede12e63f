"""The two engines: a plain seeded mutation loop, and atheris (libFuzzer, coverage-guided).

Both run the targets in a child process watched by this one, so that a crash (a signal), a hang in native code
or a runaway allocation is recorded as a finding instead of ending the campaign:

- plain: input i of target i % len(targets) is made from `random.Random(f"{seed}:{i}")` alone (any input is
  reproduced from the seed and its index, `--start i --runs 1`). The child announces each input and keeps its
  bytes in out/current.*; it stops a Python-level hang itself (SIGALRM at `timeout`), the parent kills it
  `GRACE_S` later (a hang in native code) or when its resident memory passes `rss_mb`, writes the input in flight
  as a finding and starts a new child at the next index.
- atheris: one child per target in turn, the seeds as the starting corpus, libFuzzer's -timeout, -rss_limit_mb,
  -runs, -max_total_time and -seed; differential findings are written by the harness as it goes (the campaign
  goes on), libFuzzer's own crash/timeout/oom artifacts are moved into the findings by the parent, which
  restarts the target while time and runs are left.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from .check import Finding, Hang, cap_meta, suffix, where, write_finding

GRACE_S = 15  # past the per-input limit before the parent kills a child stuck in native code
KINDS = ("nonclean", "disagree", "hang", "crash", "memory")


def _child_env(out: Path) -> dict[str, str]:
    """One CPU thread per run (the campaign is one process), vkinfer on the path, and the shader and pipeline
    caches under `out` unless $VKINFER_CACHE says otherwise (thousands of mutants' shapes stay out of the user's)."""
    env = dict(os.environ, VKINFER_CPU_THREADS="1", PYTHONUNBUFFERED="1")
    env.setdefault("VKINFER_CACHE", str((out / "cache").resolve()))
    root = str(Path(__file__).resolve().parents[3])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    return env


# ---------------------------------------------------------------------------------------------------- plain

def plain_worker(target_names: str, seed: int, start: int, stop: int, deadline: float, out: Path,
                 timeout: float, devices, skip: frozenset[int] = frozenset()) -> None:
    """The child: inputs start..stop-1 until `deadline` (epoch seconds); protocol on stdout, one line each: "S i"
    (started), "E i" (ended), "F i <json>" (a finding, written under out/findings), "DONE"."""
    import warnings

    from .targets import targets

    warnings.simplefilter("ignore")
    ts = targets(target_names, devices)
    findings = out / "findings"
    cur = out / "current"

    def alarm(signum, frame):
        raise Hang(f"input ran past {timeout} s")

    signal.signal(signal.SIGALRM, alarm)
    for i in range(start, stop):
        if time.time() > deadline:
            break
        if i in skip:
            continue
        t = ts[i % len(ts)]
        what, data = t.make(random.Random(f"{seed}:{i}"))
        cur.with_suffix(".bin").write_bytes(data)
        cur.with_suffix(".json").write_text(json.dumps({"target": t.name, "index": i, "seed": seed, "what": what}))
        print(f"S {i}", flush=True)
        ran = (data, None, None, "")
        t0 = time.perf_counter()
        signal.setitimer(signal.ITIMER_REAL, timeout)
        try:
            finding, ran = t.execute(data)
        except Hang as e:  # where it was when the alarm rang tells one hang from another
            finding = Finding("hang", f"{e} (at {where(e)})", f"hang {where(e)}")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if finding is not None:
            blob, feed, names, how = ran
            finding.meta.update(engine="plain", seed=seed, index=i, what=f"{what} {how}".strip())
            write_finding(findings, t.name, finding, blob, feed, names)
            print(f"F {i} {json.dumps({'target': t.name, 'kind': finding.kind, 'signature': finding.signature})}",
                  flush=True)
            if finding.kind == "hang":  # interrupted mid-run: start afresh
                sys.exit(3)
        print(f"E {i} {time.perf_counter() - t0:.3f}", flush=True)
    print("DONE", flush=True)


def _expand(target_names: str) -> str:
    names = target_names.split(",")
    return "onnx,tflite,run" if "all" in names else ",".join(names)


def _rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _record_in_flight(out: Path, kind: str, detail: str) -> dict:
    """The child's input in flight as a finding of `kind` (the parent's view: a crash, a native hang, memory)."""
    cur = out / "current"
    meta = json.loads(cur.with_suffix(".json").read_text())
    data = cur.with_suffix(".bin").read_bytes()
    target = meta["target"]
    blob, feed, names = data, None, None
    if target == "run":  # keep the model and feed the decisions made
        from .targets import RunTarget

        name, feed, names, how = RunTarget(("reference",)).decode(data)  # the reference only reads the model
        from .seeds import seeds

        blob = seeds("any")[name]
        meta["what"] = how
    seed_model = str(meta.get("what", "")).split(":")[0].split(",")[0]
    f = Finding(kind, detail, f"{kind} {target} {seed_model}".strip(), {"engine": "plain", **meta})
    write_finding(out / "findings", target, f, blob, feed, names, keep=5)
    return {"target": target, "kind": kind, "signature": f.signature}


def plain_campaign(target_names: str, runs: int, seconds: float, seed: int, out: Path, timeout: float,
                   rss_mb: float, devices, start: int = 0, log=sys.stderr, grace: float = GRACE_S,
                   skip: frozenset[int] = frozenset()) -> dict:
    """Inputs start..start+runs-1 (or until `seconds` pass; but the indices in `skip`: known findings kept as
    regression tests) through children restarted after each crash, hang or runaway; returns the summary (also
    written to out/summary.json, also when interrupted)."""
    st = _Plain(_expand(target_names), seed, out, timeout, rss_mb, devices, grace, skip, log, start)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    deadline = t0 + seconds
    try:
        while st.i < start + runs and time.time() < deadline:
            if st.child(start + runs, deadline):
                break
            st.restarts += 1
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (the command line's handler): the summary of what ran
        print("fuzz: interrupted", file=log, flush=True)
    return _summary(out, "plain", st.targets, st.executed, st.found, time.time() - t0, seed, st.restarts, log,
                    slowest=[{"index": k, "seconds": t} for t, k in st.slowest], next_index=st.i)


class _Plain:
    """The parent's state: the next index, executions per target, findings, restarts, the slowest inputs."""

    def __init__(self, targets, seed, out, timeout, rss_mb, devices, grace, skip, log, start):
        self.targets, self.seed, self.out, self.timeout, self.rss_mb = targets, seed, out, timeout, rss_mb
        self.devices, self.grace, self.skip, self.log, self.i = devices, grace, skip, log, start
        self.executed: Counter = Counter()
        self.found: list[dict] = []
        self.slowest: list[tuple[float, int]] = []  # (seconds, index) of the slowest inputs that ended
        self.restarts = 0

    def child(self, stop: int, deadline: float) -> bool:
        """One child from self.i on, followed to its end; True when the campaign is done."""
        cmd = [sys.executable, "-m", "vkinfer.testing.fuzz", "_plain", "--targets", self.targets, "--seed",
               str(self.seed), "--start", str(self.i), "--stop", str(stop), "--deadline", repr(deadline), "--out",
               str(self.out), "--timeout", str(self.timeout), "--devices", ",".join(self.devices), "--skip",
               ",".join(map(str, sorted(self.skip)))]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=_child_env(self.out), start_new_session=True)
        try:
            return self._follow(p, cmd)
        finally:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
            p.wait()

    def _follow(self, p, cmd) -> bool:
        started: float | None = None
        current: int | None = None
        done = killed = False
        buf = b""
        while True:
            ready, _, _ = select.select([p.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    break
                *lines, buf = (buf + chunk).split(b"\n")
                for line in lines:
                    tag, _, rest = line.decode().partition(" ")
                    if tag == "S":
                        current, started = int(rest), time.time()
                    elif tag == "E":
                        k, took = rest.split()
                        self.executed[int(k) % len(self.targets.split(","))] += 1
                        self.slowest = sorted([*self.slowest, (float(took), int(k))], reverse=True)[:5]
                        self.i, current, started = int(k) + 1, None, None
                    elif tag == "F":
                        self.found.append(json.loads(rest.partition(" ")[2]))
                        print(f"fuzz: finding at input {rest.partition(' ')[0]}: {self.found[-1]}", file=self.log,
                              flush=True)
                    elif tag == "DONE":
                        done = True
            why = None
            if started is not None and time.time() - started > self.timeout + self.grace:
                why = ("hang", f"input ran past {self.timeout + self.grace:.0f} s (native code; killed)")
            elif self.rss_mb and _rss_mb(p.pid) > self.rss_mb:
                why = ("memory", f"resident memory past {self.rss_mb:.0f} MB (killed)")
            if why:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
                killed = True
                self.found.append(_record_in_flight(self.out, *why))
                print(f"fuzz: {why[0]} at input {current}: {why[1]}", file=self.log, flush=True)
                self.i = (current if current is not None else self.i) + 1
                break
            if p.poll() is not None and not ready:
                break
        rc = p.wait()
        if done or killed:
            return done
        if rc == 3:  # the child stopped itself after a Python-level hang (already recorded)
            self.i = (current if current is not None else self.i) + 1
        elif rc != 0 and current is not None:
            sig = -rc if rc < 0 else None
            detail = f"the process died: {signal.Signals(sig).name if sig else f'exit {rc}'}"
            self.found.append(_record_in_flight(self.out, "crash", detail))
            print(f"fuzz: crash at input {current}: {detail}", file=self.log, flush=True)
            self.i = current + 1
        elif rc != 0:
            raise RuntimeError(f"the fuzzing child failed outside an input (exit {rc}); run it alone to see why: "
                               + " ".join(cmd))
        return False


def _summary(out: Path, engine: str, target_names: str, executed: Counter, found: list[dict], elapsed: float,
             seed: int, restarts: int, log, **extra) -> dict:
    names = target_names.split(",")
    total = sum(executed.values())
    summary = {"engine": engine, "seed": seed, "elapsed_s": round(elapsed, 1), "executions": total,
               "per_target": {names[k] if isinstance(k, int) else k: v for k, v in sorted(executed.items(),
                                                                                           key=str)},
               "exec_per_s": round(total / max(elapsed, 1e-9), 2), "restarts": restarts,
               "findings": len(found), "by_kind": dict(Counter(f["kind"] for f in found)),
               "by_signature": dict(Counter(f"{f['target']} {f['signature']}" for f in found)), **extra}
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"fuzz: {json.dumps(summary)}", file=log, flush=True)
    return summary


# -------------------------------------------------------------------------------------------------- atheris

def _instrument_vkinfer() -> int:
    """atheris coverage for every loaded vkinfer function outside vkinfer.testing (vkinfer is imported before the
    harness can wrap the import, and imports modules lazily, so this runs after a warm-up)."""
    import gc
    import types

    import atheris

    n = 0
    for f in gc.get_objects():
        if (isinstance(f, types.FunctionType) and (f.__module__ or "").startswith("vkinfer")
                and not f.__module__.startswith("vkinfer.testing")):
            try:
                atheris.instrument_func(f)
                n += 1
            except Exception:  # noqa: BLE001, S112 - a function atheris cannot rewrite stays uninstrumented
                continue
    return n


def atheris_worker(target_name: str, out: Path, devices, libfuzzer_args: list[str]) -> None:
    """The child: one target under atheris.Fuzz (which does not return: libFuzzer exits the process)."""
    import warnings

    import atheris

    from .targets import targets

    warnings.simplefilter("ignore")
    (t,) = targets(target_name, devices)
    corpus = out / "corpus" / t.name
    corpus.mkdir(parents=True, exist_ok=True)
    for k, c in enumerate(t.corpus()):
        p = corpus / f"seed-{k}"
        if not p.exists():
            p.write_bytes(c)
        t.execute(c)  # warm-up: every lazily imported module is loaded before instrumenting
    print(f"fuzz: instrumented {_instrument_vkinfer()} vkinfer functions", file=sys.stderr, flush=True)
    findings = out / "findings"

    progress = out / "progress"
    progress.mkdir(parents=True, exist_ok=True)
    mine = progress / f"{target_name}.{os.getpid()}"
    tmp = progress / f".{target_name}.{os.getpid()}.tmp"
    count = [0]

    def one(data: bytes) -> None:
        count[0] += 1
        if count[0] % 256 == 0:  # what the parent counts if libFuzzer dies before its final stats (an oom)
            tmp.write_text(str(count[0]))
            os.replace(tmp, mine)  # whole: the parent never reads a file just truncated
        finding, ran = t.execute(data)
        if finding is not None:
            blob, feed, names, how = ran
            finding.meta.update(engine="atheris", what=how)
            with open(out / "findings.log", "a") as log:  # every finding, kept or not (the parent counts them)
                log.write(json.dumps({"target": t.name, "kind": finding.kind, "signature": finding.signature}) + "\n")
            if write_finding(findings, t.name, finding, blob, feed, names):
                print(f"fuzz: finding {finding.kind}: {finding.detail[:300]}", file=sys.stderr, flush=True)

    mutator = getattr(t, "mutate", None)
    max_len = max(4096, 2 * max(len(c) for c in t.corpus()))
    args = [sys.argv[0], f"-max_len={max_len}", *libfuzzer_args, str(corpus)]
    if mutator is not None:
        atheris.Setup(args, one, custom_mutator=mutator)
    else:
        atheris.Setup(args, one)
    atheris.Fuzz()


def _adopt_artifacts(out: Path, target: str) -> list[dict]:
    """libFuzzer's crash-/timeout-/oom- artifacts of `target` moved into the findings with a .json."""
    found = []
    art = out / "artifacts" / target
    for p in sorted(art.glob("*-*")) if art.exists() else []:
        kind = {"crash": "crash", "timeout": "hang", "oom": "memory", "leak": "memory"}.get(p.name.split("-")[0])
        if kind is None:
            continue
        data = p.read_bytes()
        folder = out / "findings" / kind
        folder.mkdir(parents=True, exist_ok=True)
        dst = folder / f"{target}-libfuzzer-{p.name.split('-', 1)[1][:10]}{suffix(data) if target != 'run' else '.bin'}"
        p.replace(dst)
        dst.with_suffix(".json").write_text(json.dumps({"target": target, "kind": kind, "engine": "atheris",
                                                        "detail": f"libFuzzer {p.name.split('-')[0]}",
                                                        **cap_meta()}) + "\n")
        found.append({"target": target, "kind": kind, "signature": f"libfuzzer {kind}"})
    return found


def _logged(out: Path) -> list[dict]:
    log = out / "findings.log"
    return [json.loads(x) for x in log.read_text().splitlines() if x.strip()] if log.exists() else []


def atheris_campaign(target_names: str, runs: int, seconds: float, seed: int, out: Path, timeout: float,
                     rss_mb: float, devices, log=sys.stderr, jobs: int = 1) -> dict:
    """runs/len(targets) executions of each target: in turn (`jobs` 1, each for seconds/len(targets) seconds), or up
    to `jobs` targets at once (one process each, so a campaign can use every core; each target then gets its share
    of `seconds` times `jobs`). A child that stops (a libFuzzer crash, timeout or oom artifact) is restarted with the
    next seed while its target has runs and time left. Returns the summary, also written to out/summary.json every
    30 s while running (with "running": true) and when stopped (Ctrl-C or SIGTERM: the executions counted so far)."""
    names = _expand(target_names).split(",")
    jobs = max(1, min(int(jobs), len(names)))
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    deadline = t0 + seconds
    share = seconds * jobs / len(names)
    lanes = [_Lane(name, runs // len(names) + (k < runs % len(names))) for k, name in enumerate(names)]  # all `runs`
    st = {"restarts": 0, "seed": seed}
    logged_before = len(_logged(out))
    adopted: list[dict] = []
    running: list[_Lane] = []
    last_note = time.time()

    def summary(**extra) -> dict:
        found = _logged(out)[logged_before:] + adopted
        executed = Counter({ln.name: ln.executed + ln.in_flight() for ln in lanes})
        return _summary(out, "atheris", ",".join(names), executed, found, time.time() - t0, seed, st["restarts"],
                        log, jobs=jobs, **extra)

    try:
        while True:
            for ln in lanes:
                if len(running) >= jobs:
                    break
                if ln not in running and ln.wants(deadline, share):
                    ln.start(out, devices, timeout, rss_mb, st, deadline, share)
                    running.append(ln)
            if not running:
                break
            time.sleep(0.2)
            for ln in list(running):
                if ln.poll(timeout):
                    running.remove(ln)
                    adopted += _adopt_artifacts(out, ln.name)
                    ln.check_failed(adopted)
            if time.time() - last_note > 30:
                summary(running=True)
                last_note = time.time()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (the command line's handler): what ran so far
        print("fuzz: interrupted", file=log, flush=True)
        for ln in running:
            ln.stop()
        adopted += [f for ln in running for f in _adopt_artifacts(out, ln.name)]
        return summary(interrupted=True)
    finally:
        for ln in running:  # a failed child's error: the others do not outlive the campaign
            ln.stop()
    return summary()


class _Lane:
    """One target's libFuzzer children, one at a time: runs left, its time window, executions counted."""

    def __init__(self, name: str, runs: int):
        self.name, self.left, self.executed = name, runs, 0
        self.began: float | None = None
        self.p: subprocess.Popen | None = None
        self.err: Path | None = None

    def end(self, deadline: float, share: float) -> float:
        return deadline if self.began is None else min(deadline, self.began + share)

    def wants(self, deadline: float, share: float) -> bool:
        return self.left > 0 and time.time() < (deadline if self.began is None else self.end(deadline, share)) - 1

    def start(self, out: Path, devices, timeout: float, rss_mb: float, st: dict, deadline: float,
              share: float) -> None:
        if self.began is None:
            self.began = time.time()
        end = self.end(deadline, share)
        self.out, self.limit = out, end + 120 + timeout
        (out / "artifacts" / self.name).mkdir(parents=True, exist_ok=True)
        (out / "logs").mkdir(parents=True, exist_ok=True)
        args = [f"-runs={self.left}", f"-max_total_time={max(1, int(end - time.time()))}",
                f"-seed={st['seed'] + st['restarts']}", f"-timeout={int(timeout)}", f"-rss_limit_mb={int(rss_mb)}",
                "-print_final_stats=1", f"-artifact_prefix={out / 'artifacts' / self.name}/"]
        st["restarts"] += 1
        cmd = [sys.executable, "-m", "vkinfer.testing.fuzz", "_atheris", "--targets", self.name, "--out", str(out),
               "--devices", ",".join(devices), "--", *args]
        self.err = out / "logs" / f"{self.name}-{st['restarts']}.log"
        with open(self.err, "w") as err:  # libFuzzer's output (a file: a pipe nobody reads would block it)
            self.p = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, env=_child_env(out),
                                      start_new_session=True)

    def in_flight(self) -> int:
        """Executions of the running child so far (its progress file, written every 256)."""
        if self.p is None:
            return 0
        try:
            return int((self.out / "progress" / f"{self.name}.{self.p.pid}").read_text() or 0)
        except (OSError, ValueError):
            return 0

    def poll(self, timeout: float) -> bool:
        """True when the child has ended (killed past its time window plus grace: libFuzzer did not stop it)."""
        killed = False
        if self.p.poll() is None:
            if time.time() < self.limit:
                return False
            self.stop()
            killed = True
        import re

        text = self.err.read_text(errors="replace")
        m = re.findall(r"stat::number_of_executed_units:\s*(\d+)", text)
        n = int(m[-1]) if m else self.in_flight()
        self.executed += n
        self.left -= max(n, 1)
        self.last = (self.p.returncode, text, bool(m) or killed)
        self.p = None
        return True

    def check_failed(self, adopted: list[dict]) -> None:
        rc, text, counted = self.last
        if rc != 0 and not counted and not any(f["target"] == self.name for f in adopted):
            raise RuntimeError(f"atheris child failed (exit {rc}):\n{text[-3000:]}")

    def stop(self) -> None:
        if self.p is not None and self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()


__all__ = ["plain_campaign", "plain_worker", "atheris_campaign", "atheris_worker", "KINDS", "GRACE_S"]
