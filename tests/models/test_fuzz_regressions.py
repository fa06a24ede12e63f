"""Inputs the differential fuzzers found (vkinfer/testing/fuzz, `make fuzz`; issue 26 item 7), kept under
tests/models/regressions/fuzz/<kind>/ as the fuzzer wrote them: the model, a .json of what happened (target,
mutation, the error or the disagreement) and, for `run` findings, the feed (.npz, with each array's layout).

Each must now pass the fuzzer's own check (vkinfer.testing.fuzz.check_input): the same bits on the reference, cpu
and vulkan devices, or one clean error class (ValueError, TypeError, VkInferError) with a message on all three.
nonclean/ and disagree/ inputs run in this process under an alarm; hang/, crash/ and memory/ ones in a child with
a time limit and a 6 GiB address space (memory/: and a bound on its peak resident memory), so a relapse fails this
test instead of stalling or killing the suite. An input whose defect is in another part of issue 26 stays a strict
xfail naming that item until that part lands (then the xfail fails, and goes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from vkinfer.testing.fuzz import check_input
from vkinfer.testing.fuzz.check import Hang

ROOT = Path(__file__).resolve().parents[2]
FOUND = Path(__file__).parent / "regressions" / "fuzz"
CASES = sorted(p for p in FOUND.glob("*/*") if p.suffix in (".onnx", ".tflite"))
IN_PROCESS = ("nonclean", "disagree")
LIMIT_S = 60
ADDRESS_SPACE = 6 << 30  # the child's RLIMIT_AS: an input that would take the machine's memory fails in seconds
MEMORY_MB = 1024  # a memory/ input's check, this process's peak (a session of a seed model: about 300 MB)
OPEN_LIMIT_S = 8  # a known-open hang fails (as its xfail expects) without holding a worker for a minute

# file name -> the issue-26 item whose fix makes it pass (a strict xfail until then).
OPEN: dict[str, str] = {}
# A memory/ input whose legal answer needs more than MEMORY_MB: its bound, and why (what the devices must hold).
# (6d30bafc70's [16777216, 8] float32 input and e4986fdbbe's 1 GiB convolution only load: 122 MB each since the
# native graph maps its arena untouched, cpu_fallback/src/graph.c arena_alloc; 3-4.2 GB when it was zeroed.)
MEMORY_MB_OF: dict[str, tuple[int, str]] = {
    "onnx-libfuzzer-5887fb658a.onnx": (5120, "pads of 2**24 make a legal 1x8x16777223x8 output (1 GiB, under the "
                                             "2 GiB per tensor): each device's answer and its copy are kept"),
}


def _bounded() -> None:
    """In the child: at most ADDRESS_SPACE of address space (lavapipe and the CPU library run well within it)."""
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _alarm(signum, frame):
    raise Hang(f"past {LIMIT_S} s")


def _case(p: Path):
    marks = [pytest.mark.xfail(strict=True, reason=OPEN[p.name])] if p.name in OPEN else []
    return pytest.param(p, marks=marks, id=f"{p.parent.name}/{p.name}")


def test_every_kept_input_says_what_happened():
    assert CASES
    for p in CASES:
        meta = json.loads(p.with_suffix(".json").read_text())
        assert meta["kind"] == p.parent.name and meta["detail"] and meta["target"] in ("onnx", "tflite", "run"), p
        assert (meta["target"] == "run") == p.with_suffix(".npz").exists(), p
    kept = {p.name for p in CASES}
    assert set(OPEN) <= kept and set(MEMORY_MB_OF) <= {p.name for p in CASES if p.parent.name == "memory"}


@pytest.mark.parametrize("path", [_case(p) for p in CASES])
def test_fuzz_finding_passes_the_check(path):
    meta = json.loads(path.with_suffix(".json").read_text())
    if path.parent.name in IN_PROCESS:
        old = signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(LIMIT_S)
        try:
            finding = check_input(path)
        finally:
            signal.alarm(0)
            signal.signal(signal.SIGALRM, old)
        assert finding is None, f"{finding.kind}: {finding.detail}\n(found as: {meta['detail']}; {meta.get('what')})"
        return
    env = dict(os.environ, VKINFER_CPU_THREADS="1")
    limit = OPEN_LIMIT_S if path.name in OPEN else LIMIT_S
    try:
        rss = ["--rss-mb", str(MEMORY_MB_OF.get(path.name, (MEMORY_MB,))[0])] if path.parent.name == "memory" else []
        p = subprocess.run([sys.executable, "-m", "vkinfer.testing.fuzz", "check", str(path), *rss],
                           capture_output=True, text=True, timeout=limit, cwd=ROOT, env=env, preexec_fn=_bounded)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still past {limit} s (found as: {meta['detail']}; {meta.get('what')})")
    assert p.returncode == 0, f"{p.stdout}{p.stderr[-2000:]}\n(found as: {meta['detail']}; {meta.get('what')})"


def test_a_convolution_past_the_workgroup_limit_runs_on_the_cpu_of_a_vulkan_session():
    """disagree/onnx-77994c6f: a top pad of 65535 makes a 1x4x65541x8 output, 65541 rows of workgroups where Vulkan
    guarantees 65535; device="vulkan" refused the model the reference and the CPU run. Now that node is placed on
    the CPU (the same on every Vulkan device) and the rest stays on Vulkan."""
    import vkinfer

    sess = vkinfer.InferenceSession(str(FOUND / "disagree" / "onnx-77994c6f-0243e05c1c.onnx"), device="vulkan")
    assert sess.placement["conv_16_node"] == "cpu", sess.placement
    assert sess.placement["conv_3_node"].startswith("vulkan"), sess.placement



_ADDRESS_SPACE = r"""
import sys
import onnx
import vkinfer

def vm_peak_kb():
    return next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmPeak"))

small = onnx.load(sys.argv[1])
small.graph.input[0].type.tensor_type.shape.dim[3].dim_value = 8
vkinfer.InferenceSession(small.SerializeToString(), device="cpu")  # the imports first: the seed's 1x8x8x8 input
before = vm_peak_kb()
sess = vkinfer.InferenceSession(sys.argv[1], device="cpu")
print(sess.placement["conv"], (vm_peak_kb() - before) >> 10)
"""


def test_a_legal_1_gib_convolution_loads_in_its_arena_s_address_space():
    """memory/e4986fdbbe (a legal 1x8x8x16777216 uint8 input to a 3x3 QLinearConv): loading it on the CPU maps the
    native graph's arena (the 1 GiB input and the 1 GiB output) and little more: no np.zeros of the input for the
    trial plan (session.py) or under the convolution's spec (model/lowering._shape_only), no whole-input padded copy
    or 9.6 GB indirection buffer (cpu_fallback/src/conv.c tiles it). Before: 4.2 GB of address space, which with
    three sessions passed this file's 6 GiB RLIMIT_AS."""
    path = FOUND / "memory" / "onnx-libfuzzer-e4986fdbbe.onnx"
    env = dict(os.environ, VKINFER_CPU_THREADS="1")
    p = subprocess.run([sys.executable, "-c", _ADDRESS_SPACE, str(path)], capture_output=True, text=True,
                       timeout=LIMIT_S, cwd=ROOT, env=env, preexec_fn=_bounded)
    assert p.returncode == 0, p.stderr[-3000:]
    where, grew_mb = p.stdout.split()
    assert where == "cpu" and int(grew_mb) < 2048 + 384, p.stdout
