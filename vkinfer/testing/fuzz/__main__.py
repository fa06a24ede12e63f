"""`python -m vkinfer.testing.fuzz`: a fuzzing campaign (`make fuzz`), or `check` of kept inputs.

    python -m vkinfer.testing.fuzz --engine atheris --targets all --runs 1000000 --seconds 3600 --jobs 2
    python -m vkinfer.testing.fuzz --engine plain --seed 0 --runs 300 --seconds 45 --out build/fuzz
    python -m vkinfer.testing.fuzz check build/fuzz/findings/nonclean/onnx-*.onnx

The campaign prints and writes out/summary.json (executions per target, findings by kind and signature) and exits
1 when it found anything (the inputs are under out/findings/<kind>/), else 0.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from .check import DEVICES, SESSION_MB_ENV, check_input
from .engine import atheris_campaign, atheris_worker, plain_campaign, plain_worker


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m vkinfer.testing.fuzz", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", choices=("plain", "atheris"), default="plain")
    ap.add_argument("--targets", default="all", help="comma-separated: onnx, tflite, run (or all)")
    ap.add_argument("--runs", type=int, default=10 ** 6, help="executions in all (atheris: split over targets)")
    ap.add_argument("--seconds", type=float, default=600.0, help="wall-clock budget in all")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="plain: the first input's index")
    ap.add_argument("--out", type=Path, default=Path("build/fuzz"))
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds one input may take (more is a hang)")
    # 4096: libFuzzer's rss is the process's peak, and a legal input's three sessions (each under --session-mb) with
    # their numpy temporaries and lavapipe's copies rose it 600 MB over a long run's ~1.3 GB heap: at libFuzzer's
    # default 2048 a run of 400k executions reported 3 legal inputs (each 764 MB peak in a fresh process)
    ap.add_argument("--rss-mb", type=float, default=4096.0, help="resident memory (atheris: peak) past which a "
                    "child is stopped and its input reported")
    ap.add_argument("--devices", default=",".join(DEVICES))
    ap.add_argument("--session-mb", type=int, default=256,
                    help="each session's cap on activations, MiB (max_session_bytes; 0: the library's defaults), "
                         "so that the devices of one check fit under --rss-mb together")
    ap.add_argument("--skip", default="", help="plain: comma-separated input indices not to run")
    ap.add_argument("--jobs", type=int, default=1, help="atheris: targets fuzzed at once, one process each")
    return ap


def main(argv: list[str] | None = None) -> int:
    """The command line (module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["check"]:
        import resource

        ap = argparse.ArgumentParser(prog="python -m vkinfer.testing.fuzz check")
        ap.add_argument("inputs", nargs="+", type=Path)
        ap.add_argument("--rss-mb", type=float, default=0.0, help="fail when this process's peak resident memory "
                        "passes this (a memory finding's bound)")
        a = ap.parse_args(argv[1:])
        bad = 0
        for path in a.inputs:
            f = check_input(path)
            print(f"{path}: {'ok' if f is None else f'{f.kind}: {f.detail}'}")
            bad += f is not None
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"peak resident memory: {peak:.0f} MB")
        if a.rss_mb and peak > a.rss_mb:
            print(f"memory: the peak passed {a.rss_mb:.0f} MB")
            bad += 1
        return 1 if bad else 0
    if argv[:1] == ["_plain"]:
        ap = _parser()
        ap.add_argument("--stop", type=int, required=True)
        ap.add_argument("--deadline", type=float, required=True)
        a = ap.parse_args(argv[1:])
        plain_worker(a.targets, a.seed, a.start, a.stop, a.deadline, a.out, a.timeout, a.devices.split(","),
                     frozenset(int(k) for k in a.skip.split(",") if k))
        return 0
    if argv[:1] == ["_atheris"]:
        cut = argv.index("--") if "--" in argv else len(argv)
        a = _parser().parse_args(argv[1:cut])
        atheris_worker(a.targets, a.out, a.devices.split(","), argv[cut + 1:])
        return 0
    a = _parser().parse_args(argv)
    devices = a.devices.split(",")
    os.environ[SESSION_MB_ENV] = str(a.session_mb)  # the children inherit it (check.session_limits)
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a stopped campaign still writes its summary
    t0 = time.time()
    if a.engine == "plain":
        s = plain_campaign(a.targets, a.runs, a.seconds, a.seed, a.out, a.timeout, a.rss_mb, devices, a.start,
                           skip=frozenset(int(k) for k in a.skip.split(",") if k))
    else:
        s = atheris_campaign(a.targets, a.runs, a.seconds, a.seed, a.out, a.timeout, a.rss_mb, devices, jobs=a.jobs)
    print(f"{s['executions']} executions in {time.time() - t0:.0f} s, {s['findings']} findings "
          f"{s['by_kind']}; inputs under {a.out / 'findings'}")
    return 1 if s["findings"] else 0


if __name__ == "__main__":
    sys.exit(main())
