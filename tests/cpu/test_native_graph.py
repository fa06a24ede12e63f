"""The native CPU graph (vkinfer/cpu/graph.py, cpu_fallback/src/graph.c): random graphs under AddressSanitizer +
UBSan, ranges at every boundary, memory flat over 10^4 runs, and one session run from 8 threads at once on the
CPU and on Vulkan."""

from __future__ import annotations

import os
import re
import subprocess
import threading
from pathlib import Path

import numpy as np
import pytest
from support.agree import assert_same, refused_devices, run_devices, run_sessions, sessions
from support.cpu_build import build_cpu

import vkinfer
from vkinfer.testing import field_zoo

ROOT = Path(__file__).resolve().parents[2]
ASAN_LIB = ROOT / "build" / "cpu" / "libvkinfer_cpu-asan.so"


def test_random_graphs_under_asan_and_ubsan():
    build_cpu("asan-lib")
    libasan = subprocess.run([os.environ.get("CC", "cc"), "-print-file-name=libasan.so"], capture_output=True,
                             text=True).stdout.strip()
    assert os.path.isabs(libasan), f"no libasan.so from the C compiler: {libasan!r}"
    env = {**os.environ, "LD_PRELOAD": libasan, "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1", "VKINFER_CPU_LIB": str(ASAN_LIB)}
    r = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "support.native_graph_run", "25"],
                       cwd=ROOT / "tests", env=env, capture_output=True, text=True, timeout=600)
    where = f"exit {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-8000:]}"
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, where
    assert r.returncode == 0 and f"library: {ASAN_LIB}" in r.stdout, where
    m = re.search(r"native graphs: (\d+) passed", r.stdout)
    assert m and int(m[1]) >= 25 + 6 + 14 + 10, where


# The plan runner (vkinfer/_native/planrun.c) under AddressSanitizer + UBSan: this script, in a process with libasan
# preloaded, imports the ASan build as vkinfer._planrun and drives every path: the plain run (stack and heap buffer
# arrays), CPU and CPU + Vulkan sessions (run_feed, run, timed runs, feeds it hands back, NaN statuses), a runner
# with more slots and buffers than its stack arrays hold, every construction error, and failing locks.
_PLANRUN_ASAN_DRIVER = r"""
import glob, importlib.util, sys
import numpy as np
import vkinfer
spec = importlib.util.spec_from_file_location("vkinfer._planrun", glob.glob(sys.argv[1] + "/_planrun*.so")[0])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
sys.modules["vkinfer._planrun"] = vkinfer._planrun = mod
from vkinfer.cpu import graph as cg
cg._planrun = mod
from vkinfer.cpu.graph import NativeGraph, Ref
from vkinfer.testing import field_zoo, zoo

def check_sessions(blob, feed, devices):
    ref = vkinfer.InferenceSession(blob, device="reference").run(None, feed)
    for dev in devices:
        s = vkinfer.InferenceSession(blob, device=dev, threads=1)
        plan = s.plan(feed)
        runner = plan.feed_runner(1)[0]
        assert type(runner.__self__) is mod.Runner, runner
        for _ in range(3):
            got = runner(feed)
            assert all(np.array_equal(a, b) for a, b in zip(got, ref)), dev
            assert all(np.array_equal(a, b) for a, b in zip(s.run(None, feed), ref)), dev
        (name, x), = feed.items()
        for other in ({}, {name: x, "y": x}, {name: x.astype(np.float64)}, {name: np.asfortranarray(x)[..., ::1].T},
                      {"nope": x}, [(name, x)]):
            assert runner(other) is None
        native = plan.native(1)
        if native is not None:
            for s2 in native.vk_segments:
                s2.timed = True
            got = native.run(feed, [o.name for o in s.get_outputs()])
            assert all(np.array_equal(a, b) for a, b in zip(got, ref))
            assert all(np.array_equal(a, b) for a, b in zip(runner(feed), ref))
            for s2 in native.vk_segments:
                s2.timed = False
    return s, runner

q = zoo.quantize(zoo.mlp(), fmt="qoperator", per_channel=True, reduce_range=True)
feed = zoo.random_inputs(q)
s, runner = check_sessions(q.SerializeToString(), feed, ["cpu", "vulkan"])
y = feed["input"].copy()
y[0, 1] = np.nan
assert isinstance(runner({"input": y}), int) and runner({"input": y}) != 0
blob = field_zoo.tiny_conv(0, dtype="int8")
check_sessions(blob, field_zoo.field_inputs("tiny_conv", 0, "int8"), ["cpu", "vulkan"])

# more slots and buffers than the stack arrays hold (64)
n = 70
g = NativeGraph(0, [8] * n)
g.add("transpose", 1, np.array([8], np.uint32), np.array([0], np.uint32), 1, 0, Ref(1, 0, 8), Ref(2, 0, 8))
arrays = [np.arange(8, dtype=np.uint8) * 3] + [np.zeros(8, np.uint8) for _ in range(n - 1)]
g.run(arrays, 1)
assert np.array_equal(arrays[1], arrays[0])
r = mod.Runner(1, 1, [8] * n, {k: np.zeros(8, np.uint8) for k in range(2, n)},
               [("cpu", *g._fast[:2], g, list(range(n)), 1)])
out = np.zeros(8, np.uint8)
assert r.run([arrays[0]], [out], False) == (0, [])
assert np.array_equal(out, arrays[0])
r.set_feed(["x"], ["B"], [[8]], [([8], np.dtype(np.uint8))], np.ndarray, np.empty, [])
assert np.array_equal(r.run_feed({"x": arrays[0]})[0], arrays[0])

# construction and call errors
from vkinfer._vk import get_device
dev = get_device()
buf, seq = dev.buffer(64), dev.sequence()
seq.barrier()
bad = [(1, 1, [4, 4], {0: np.zeros(4, np.uint8)}, []), (1, 1, [4, 4, 8], {2: np.zeros(4, np.uint8)}, []),
       (1, 1, [4, 4, 8], {}, []), (1, 1, [4, 4], {}, [("vulkan", seq.raw, [(0, buf.raw, [1, 8], False, 0)], [])]),
       (2, 1, [4, 4], {}, []), (1, 1, [4, 4], {}, [("cpu", 1, 1, None, [5], 1)]), (1, 1, [4, 4], {}, [("gpu",)]),
       (1, 1, [4096, 4096], {}, [("vulkan", seq.raw, [(0, buf.raw, [64, 64], False, 0)], [])]),
       (1, 1, [4, 4], {}, [("vulkan", buf.raw, [], [])]),
       (1, 1, [4, 4], {}, [("vulkan", seq.raw, [(0, seq.raw, [4], False, 0)], [])]),
       (1, 1, [4, 4], {}, [("vulkan", seq.raw, [(0, buf.raw, [4], False, 300)], [])]), (1, 1, [4, 4], {}, [()]),
       (1, 1, [4, 4], {}, [("cpu", 1, 1)]), (1, 1, [4, 4], {}, [("vulkan", seq.raw, [(0,)], [])]),
       (1, 1, [-4, 4], {}, [])]
for args in bad:
    try:
        mod.Runner(*args)
    except (ValueError, TypeError, OverflowError):
        pass
    else:
        raise AssertionError(args)
class Bad:
    def acquire(self):
        raise OSError("no")
    def release(self):
        pass
moves = [(0, buf.raw, [4, 3], False, 0x80)], [(1, buf.raw, [4, 3], False, 0x80)]
r = mod.Runner(1, 1, [12, 12], {}, [("vulkan", seq.raw, *moves)], [dev.lock, Bad()])
try:
    r.run([np.zeros(12, np.uint8)], [np.zeros(12, np.uint8)], False)
except OSError:
    pass
else:
    raise AssertionError("a failing lock")
print("planrun asan: ok")
"""


def test_plan_runner_under_asan_and_ubsan(tmp_path):
    build_cpu("asan-lib")
    cc = os.environ.get("CC", "cc")
    libasan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    assert os.path.isabs(libasan), f"no libasan.so from the C compiler: {libasan!r}"
    import sysconfig

    so = tmp_path / f"_planrun{sysconfig.get_config_var('EXT_SUFFIX')}"
    r = subprocess.run([cc, "-std=c11", "-O1", "-g", "-fno-omit-frame-pointer", "-fsanitize=address,undefined",
                        "-fno-sanitize-recover=undefined", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
                        f"-I{sysconfig.get_paths()['include']}", f"-I{ROOT / 'vkinfer' / '_native'}",
                        str(ROOT / "vkinfer" / "_native" / "planrun.c"), "-o", str(so)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-4000:]
    (tmp_path / "drive.py").write_text(_PLANRUN_ASAN_DRIVER)
    # _vkcore links libstdc++ statically; ASan's __cxa_throw interceptor needs the shared one to forward to.
    libstdcxx = subprocess.run([cc, "-print-file-name=libstdc++.so"], capture_output=True, text=True).stdout.strip()
    env = {**os.environ, "LD_PRELOAD": f"{libasan} {libstdcxx}", "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1",
           "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1", "VKINFER_CPU_LIB": str(ASAN_LIB)}
    r = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(tmp_path / "drive.py"), str(tmp_path)], cwd=ROOT,
                       env=env, capture_output=True, text=True, timeout=600)
    where = f"exit {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-8000:]}"
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, where
    assert r.returncode == 0 and "planrun asan: ok" in r.stdout, where


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_memory_is_flat_over_ten_thousand_runs():
    blob = field_zoo.ds_cnn_kws(0, dtype="int8")
    feed = field_zoo.field_inputs("ds_cnn_kws", 0, "int8")
    sess = vkinfer.InferenceSession(blob, device="cpu", threads=1)
    ref = sess.run(None, feed)
    for _ in range(1000):
        sess.run(None, feed)
    # A leak grows every window of 10^4 runs by the same amount; a one-off allocation elsewhere in this worker
    # process (another test's thread, the allocator's arenas) grows one window: in a full parallel suite one
    # window grew 5,500 KiB once (2026-11-27) while the test passed alone. Up to three windows, one must be flat.
    grown = []
    for _ in range(3):
        before = _rss_kib()
        for _ in range(10_000):
            out = sess.run(None, feed)
        grown.append(_rss_kib() - before)
        if grown[-1] < 1024:
            break
    assert_same(out, ref, "a run after 11,000 vs run 1")
    assert min(grown) < 1024, f"RSS grew {grown} KiB in each window of 10^4 runs"
    run_devices(blob, feed, want=ref)  # and those are every device's bits


def _eight_threads(sess, feeds: list[dict], want: list[list[np.ndarray]], runs: int) -> None:
    """8 threads on one session, thread i running feeds (i + k) % 8 for k < runs: each gets its own outputs."""
    errors: list[str] = []

    def work(i: int) -> None:
        try:
            for k in range(runs):
                j = (i + k) % 8
                try:
                    assert_same(sess.run(None, feeds[j]), want[j], f"thread {i} run {k} on input {j}")
                except AssertionError as e:
                    errors.append(f"{e} (another input's or a wrong output)")
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {i}: {e!r}")
    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]


@pytest.mark.parametrize("device", ["cpu", "vulkan"])
def test_eight_threads_on_one_session(device):
    name = "mobilenet_v2_kws"
    blob = field_zoo.FIELD_MODELS[name](0, dtype="uint8")
    sess = vkinfer.InferenceSession(blob, device=device)
    ref = vkinfer.InferenceSession(blob, device="reference")
    feeds = [field_zoo.field_inputs(name, seed, "uint8") for seed in range(8)]
    _eight_threads(sess, feeds, [ref.run(None, f) for f in feeds], 12 if device == "cpu" else 3)


def _one_graph(model: str, dtype: str):
    blob = getattr(field_zoo, model)(0, dtype=dtype)
    feed = field_zoo.field_inputs(model, 0, dtype)
    sess = vkinfer.InferenceSession(blob, device="cpu", threads=1)
    plan = sess.plan(feed)
    (seg,) = [s.runner for s in plan.segments if s.device.startswith("cpu")]
    return sess, feed, seg


@pytest.mark.parametrize("model, dtype", [("ds_cnn_kws", "int8"), ("resnet8", "uint8"), ("tiny_conv", "int8")])
def test_planrun_extension_equals_the_ctypes_path(model, dtype):
    """`make cpu` builds vkinfer._planrun; a graph run through its `run` gives the bytes the ctypes path gives, and
    both equal the reference session's."""
    from vkinfer.cpu import graph as native

    assert native._planrun is not None, "vkinfer._planrun is missing: `make cpu` builds it"
    sess, feed, seg = _one_graph(model, dtype)
    assert seg.graph._fast is not None
    ref = run_devices(getattr(field_zoo, model)(0, dtype=dtype), feed)  # the reference's bits, every device's
    arrays = [feed[t] for t, _, _ in seg.in_specs]
    fast = seg.run_arrays(arrays, 1)
    seg.graph._fast, saved = None, seg.graph._fast
    try:
        slow = seg.run_arrays(arrays, 1)
    finally:
        seg.graph._fast = saved
    for a, b, r in zip(fast, slow, ref, strict=True):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, r.reshape(a.shape))


def test_planrun_refuses_wrong_buffers():
    """Sizes and layout are checked before C sees a pointer: a short, a long and a non-contiguous buffer raise,
    as does the wrong number of buffers."""
    _, feed, seg = _one_graph("tiny_conv", "int8")
    g = seg.graph
    arrays = [feed[t] for t, _, _ in seg.in_specs] + [np.empty(s, d) for _, s, d in seg.out_specs]
    g.run(arrays, 1)
    short = [arrays[0].reshape(-1)[:-1], *arrays[1:]]
    with pytest.raises(ValueError, match="external buffer 0 is"):
        g.run(short, 1)
    longer = [np.zeros(arrays[0].size + 1, arrays[0].dtype), *arrays[1:]]
    with pytest.raises(ValueError, match="external buffer 0 is"):
        g.run(longer, 1)
    wide = np.zeros((arrays[0].size, 2), arrays[0].dtype)[:, 0]  # strided, same byte count as a view
    with pytest.raises((ValueError, BufferError)):
        g.run([wide, *arrays[1:]], 1)
    with pytest.raises(ValueError, match="external buffers for a graph of"):
        g.run(arrays[:1], 1)


# --- the session's run in one C call (vkinfer._planrun.Runner.run_feed) ------------------------------------

def _general(sess, output_names, feed):
    """The same run through the Python path (the C runner switched off for one call)."""
    native, sess._native = sess._native, None
    try:
        return sess.run(output_names, feed)
    finally:
        sess._native = native


@pytest.mark.parametrize("model, dtype", [("tiny_conv", "int8"), ("tiny_conv", "uint8"), ("ds_cnn_kws", "int8"),
                                          ("resnet8", "uint8")])
def test_session_run_is_one_c_call_and_equals_the_reference(model, dtype):
    blob = getattr(field_zoo, model)(0, dtype=dtype)
    sess = vkinfer.InferenceSession(blob, device="cpu", threads=1)
    assert sess._native is not None, "a whole-CPU static-shape model must run through vkinfer._planrun.Runner"
    others = sessions(blob, ("reference", "vulkan"))  # with `sess`, the three devices
    outs = [o.name for o in sess.get_outputs()]
    for seed in range(3):
        feed = field_zoo.field_inputs(model, seed, dtype)
        want = run_sessions(others, feed, what=f"seed {seed}")
        assert sess._native(feed) is not None
        for path, got in (("C runner", sess.run(None, feed)), ("C runner, outputs named", sess.run(outs, feed)),
                          ("Python path", _general(sess, None, feed))):
            assert [type(a) for a in got] == [np.ndarray] * len(want)
            assert_same(got, want, f"seed {seed}: cpu ({path}) vs reference and vulkan")
    first, second = sess.run(None, feed), sess.run(None, feed)
    assert all(not np.shares_memory(a, b) for a, b in zip(first, second, strict=True)), "outputs must be fresh"


def test_session_run_hands_every_other_feed_to_the_checked_path():
    """The C runner takes only a dict of exactly the inputs as C-contiguous ndarrays of their dtype and shape;
    everything else returns None to the Python path, which runs it (strided, read-only, subclass) or raises
    the error naming the input."""
    blob = field_zoo.tiny_conv(0, dtype="int8")
    sess = vkinfer.InferenceSession(blob, device="cpu", threads=1)
    name = sess.get_inputs()[0].name
    feed = field_zoo.field_inputs("tiny_conv", 5, "int8")
    x = feed[name]
    want = run_devices(blob, feed)[0]  # every device's bits, which every accepted form of the input must give

    class Sub(np.ndarray):
        pass

    strided = np.zeros((*x.shape[:-1], 2 * x.shape[-1]), x.dtype)[..., ::2]
    strided[...] = x
    ro = x.copy()
    ro.flags.writeable = False
    for ok in (strided, np.asfortranarray(x), x.view(Sub), ro):
        if ok is not ro:
            assert sess._native({name: ok}) is None
        np.testing.assert_array_equal(sess.run(None, {name: ok})[0], want)
    bad = [({name: x.astype(np.uint8)}, TypeError, "must be a numpy array of int8"),
           ({name: x.astype(np.float32)}, TypeError, "int8"),
           ({name: x.reshape(1, -1)}, ValueError, "must have shape"),
           ({name: x[..., :-1].copy()}, ValueError, "must have shape"),
           ({}, ValueError, "missing input"),
           ({"other": x}, ValueError, r"unknown input\(s\) \['other'\]; the model's inputs"),
           ({name: x, "extra": x}, ValueError, "unknown input"),
           ({name: x.tolist()}, TypeError, "numpy array")]
    for f, err, msg in bad:
        assert sess._native(f) is None
        with pytest.raises(err, match=msg):
            sess.run(None, f)
    with pytest.raises(ValueError, match="unknown output"):
        sess.run(["nope"], feed)
    with pytest.raises(TypeError):
        sess._native(feed, feed)


def test_session_run_refuses_nan_in_c_as_in_python():
    from vkinfer.testing import zoo

    q = zoo.quantize(zoo.mlp(), fmt="qoperator", per_channel=True, reduce_range=True)
    sess = vkinfer.InferenceSession(q.SerializeToString(), device="cpu", threads=1)
    assert sess._native is not None
    x = zoo.random_inputs(q)["input"]
    run_devices(q, {"input": x}, want=sess.run(None, {"input": x}))  # the C runner's bits are every device's
    for pos in [(0, 0), (0, x.shape[1] - 1), (0, x.shape[1] // 2)]:
        y = x.copy()
        y[pos] = np.nan
        with pytest.raises(ValueError, match="'input' contains NaN"):
            sess.run(None, {"input": y})
        with pytest.raises(ValueError, match="contains NaN"):
            _general(sess, None, {"input": y})
    # As every device refuses it (the reference names the QuantizeLinear node and its input x, not the model's)
    refused_devices(q, {"input": y}, match="contains NaN")
    y = x.copy()
    y[0, 1] = np.inf  # not NaN: the quantizer saturates it, as ORT does
    np.testing.assert_array_equal(sess.run(None, {"input": y})[0], _general(sess, None, {"input": y})[0])


def test_runner_refuses_bad_construction():
    """A NULL function or graph, and set_feed's lists of the wrong length, a name that is not a str or a negative
    dimension, raise; a run_feed before set_feed raises."""
    from vkinfer import _planrun

    with pytest.raises(TypeError):
        _planrun.Runner()
    step = ("cpu", 1, 1, None, [0, 1], 1)
    with pytest.raises(ValueError, match="NULL graph or function"):
        _planrun.Runner(1, 1, [2, 1], {}, [("cpu", 0, 1, None, [0, 1], 1)])
    with pytest.raises(ValueError, match="negative"):
        _planrun.Runner(-1, 1, [2, 1], {}, [step])
    r = _planrun.Runner(1, 1, [2, 1], {}, [step])
    with pytest.raises(RuntimeError, match="before set_feed"):
        r.run_feed({"x": np.zeros((1, 2), np.int8)})
    args = [("x",), ("b",), ((1, 2),), (((1,), np.dtype(np.int8)),), np.ndarray, np.empty, ()]
    r.set_feed(*args)
    for k, v, err in [(0, ("x", "y"), ValueError), (0, (1,), TypeError), (1, (), ValueError),
                      (2, ((1, -2),), ValueError), (3, (), ValueError), (3, (((1,),),), ValueError)]:
        with pytest.raises(err):
            r.set_feed(*args[:k], v, *args[k + 1:])
        with pytest.raises(RuntimeError, match="before set_feed"):  # a refused set_feed leaves none behind
            r.run_feed({"x": np.zeros((1, 2), np.int8)})
    with pytest.raises(TypeError):
        r.set_feed(*args[:-1])


def test_runner_takes_the_locks_around_a_run_and_releases_them_on_errors():
    """The locks a runner is given are taken in order before its steps and released in reverse after them, also
    when the run fails; a lock that cannot be taken fails the run with its error, and the locks already taken
    are released."""
    from vkinfer import _planrun
    from vkinfer.cpu.graph import NativeGraph, Ref

    g = NativeGraph(0, [8, 8])
    g.add("transpose", 1, np.array([8], np.uint32), np.array([0], np.uint32), 1, 0, Ref(1, 0, 8), Ref(2, 0, 8))
    calls: list[str] = []

    class Lock:
        def __init__(self, name: str, fails: bool = False):
            self.name, self.fails = name, fails

        def acquire(self):
            if self.fails:
                raise OSError(f"{self.name} refused")
            calls.append(f"+{self.name}")

        def release(self):
            calls.append(f"-{self.name}")

    steps = [("cpu", *g._fast[:2], g, [0, 1], 1)]
    r = _planrun.Runner(1, 1, [8, 8], {}, steps, [Lock("a"), Lock("b")])
    x, y = np.arange(8, dtype=np.uint8), np.zeros(8, np.uint8)
    assert r.run([x], [y], False) == (0, [])
    np.testing.assert_array_equal(y, x)
    assert calls == ["+a", "+b", "-b", "-a"]
    calls.clear()
    r = _planrun.Runner(1, 1, [8, 8], {}, steps, [Lock("a"), Lock("b", fails=True), Lock("c")])
    with pytest.raises(OSError, match="b refused"):
        r.run([x], [y], False)
    assert calls == ["+a", "-a"]


def test_threads_are_fixed_at_session_creation(monkeypatch):
    blob = field_zoo.tiny_conv(0, dtype="int8")
    monkeypatch.setenv("VKINFER_CPU_THREADS", "2")
    sess = vkinfer.InferenceSession(blob, device="cpu")
    assert sess._run_threads == 2
    monkeypatch.setenv("VKINFER_CPU_THREADS", "many")  # read at creation only, as ORT's session options are
    feed = field_zoo.field_inputs("tiny_conv", 0, "int8")
    got = sess.run(None, feed)
    with pytest.raises(ValueError, match="VKINFER_CPU_THREADS"):
        vkinfer.InferenceSession(blob, device="cpu")
    assert vkinfer.InferenceSession(blob, device="cpu", threads=3)._run_threads == 3
    monkeypatch.delenv("VKINFER_CPU_THREADS")  # which "many" would refuse on the cpu device below
    run_devices(blob, feed, want=got)  # the 2-thread run's bits are every device's


# --- a plan of CPU and Vulkan segments in one native call (vkinfer.compiler.native.NativePlan) ------------

def _python_path(plan, feed, names, threads):
    saved = dict(plan._natives)
    plan._natives[threads] = None
    try:
        return plan.run(feed, names, threads)
    finally:
        plan._natives.clear()
        plan._natives.update(saved)


@pytest.mark.parametrize("model, dtype", [("mobilenet_v2_kws", "int8"), ("ds_cnn_kws", "uint8")])
def test_cpu_and_vulkan_segments_run_in_one_native_call(model, dtype):
    """Alternating CPU / Vulkan placements (tensors handed over in the CPU form, int8 XORed at the device edge):
    the native plan, the Python segment-by-segment path and the reference agree bit for bit; timed runs fill
    each Vulkan segment's device time."""
    blob = field_zoo.FIELD_MODELS[model](0, dtype=dtype)
    devices = sessions(blob)  # each device alone: the mixed plan must give their (common) bits
    names = [n.name for n in devices["reference"].graph.nodes]
    placement = {n: "cpu" for n in names[::3]}  # the rest on Vulkan where it runs them, else the CPU
    sess = vkinfer.InferenceSession(blob, device="vulkan", placement=placement, threads=1)
    plan = sess._fast[0]
    native = plan.native(1)
    assert native is not None and plan.submits >= 3 and plan.native_calls >= 3
    outs = [o.name for o in sess.get_outputs()]
    for seed in range(3):
        feed = field_zoo.field_inputs(model, seed, dtype)
        want = run_sessions(devices, feed, what=f"seed {seed}")
        assert_same(sess.run(None, feed), want, f"seed {seed}: the native mixed plan vs every device")
        assert_same(_python_path(plan, feed, outs, 1), want, f"seed {seed}: the Python path vs every device")
    vks = [s.runner for s in plan.segments if s.device.startswith("vulkan")]
    for s in vks:
        s.timed, s.last_device_ns = True, None
    try:
        sess.run(None, feed)
    finally:
        for s in vks:
            s.timed = False
    if vks[0].dev.timestamps:
        assert all(isinstance(s.last_device_ns, int) and s.last_device_ns > 0 for s in vks)


@pytest.mark.parametrize("model, dtype", [("tiny_conv", "int8"), ("ds_cnn_kws", "uint8")])
def test_a_plan_of_one_cpu_segment_is_a_native_plan_too(model, dtype):
    """One runner class for every plan without a host segment: NativePlan.build takes a lone CPU segment too, and
    its run_feed, its run and the segment's own native_runner give every device's bits."""
    from vkinfer.compiler.native import NativePlan

    blob = getattr(field_zoo, model)(0, dtype=dtype)
    sess = vkinfer.InferenceSession(blob, device="cpu", threads=1)
    feed = field_zoo.field_inputs(model, 0, dtype)
    plan = sess.plan(feed)
    [seg] = plan.segments
    native = NativePlan.build(plan, 1)
    assert native is not None and seg.device.startswith("cpu")
    outs = [o.name for o in sess.get_outputs()]
    for seed in range(2):
        feed = field_zoo.field_inputs(model, seed, dtype)
        want = run_devices(blob, feed)
        assert_same(native.raw.run_feed(feed), want, f"seed {seed}: NativePlan.raw.run_feed")
        assert_same(native.run(feed, outs), want, f"seed {seed}: NativePlan.run")
        assert_same(seg.runner.native_runner(1)(feed), want, f"seed {seed}: CpuSegment.native_runner")
    assert native.raw.mapped == [] and native.raw.run_feed({}) is None


def test_plan_runner_refuses_bad_construction_and_arrays():
    from vkinfer import _planrun as vk
    from vkinfer._vk import get_device

    dev = get_device()
    buf = dev.buffer(64)
    with pytest.raises(ValueError, match="persistent slot"):
        vk.Runner(1, 1, [4, 4], {0: np.zeros(4, np.uint8)}, [])
    with pytest.raises(ValueError, match="wrong size"):
        vk.Runner(1, 1, [4, 4, 8], {2: np.zeros(4, np.uint8)}, [])
    with pytest.raises(ValueError, match="no array"):
        vk.Runner(1, 1, [4, 4, 8], {}, [])
    seq = dev.sequence()
    seq.barrier()
    with pytest.raises(ValueError, match="differs in size"):
        vk.Runner(1, 1, [4, 4], {}, [("vulkan", seq.raw, [(0, buf.raw, [1, 8], False, 0)], [])])
    with pytest.raises(ValueError, match="fewer slots"):
        vk.Runner(2, 1, [4, 4], {}, [])
    with pytest.raises(ValueError, match="slot out of range"):
        vk.Runner(1, 1, [4, 4], {}, [("cpu", 1, 1, None, [5], 1)])
    with pytest.raises(ValueError, match="unknown step"):
        vk.Runner(1, 1, [4, 4], {}, [("gpu",)])
    with pytest.raises(ValueError, match="exceeds|takes"):  # 4096 bytes do not fit a 64-byte buffer
        vk.Runner(1, 1, [4096, 4096], {}, [("vulkan", seq.raw, [(0, buf.raw, [64, 64], False, 0)], [])])
    # A copy through the device: input slot -> buffer -> output slot, int8 XOR on the way in and out.
    r = vk.Runner(1, 1, [12, 12], {}, [("vulkan", seq.raw, [(0, buf.raw, [4, 3], False, 0x80)],
                                                       [(1, buf.raw, [4, 3], False, 0x80)])])
    x = np.arange(12, dtype=np.uint8) * 21
    y = np.zeros(12, np.uint8)
    status, ns = r.run([x], [y], False)
    assert status == 0 and ns == [None]
    np.testing.assert_array_equal(y, x)
    raw = buf.read_rows((4, 3), np.uint8)
    np.testing.assert_array_equal(raw, (x ^ 0x80).reshape(4, 3))
    with pytest.raises(ValueError, match="bytes or a strided layout"):
        r.run([x[:-1]], [y], False)
    with pytest.raises(ValueError, match="bytes or a strided layout"):
        r.run([np.zeros(24, np.uint8)[::2]], [y], False)
    with pytest.raises(ValueError, match="number of inputs"):
        r.run([x, x], [y], False)
    with pytest.raises((ValueError, BufferError)):
        ro = np.zeros(12, np.uint8)
        ro.flags.writeable = False
        r.run([x], [ro], False)


def test_vulkan_plan_session_call_is_native_and_hands_every_other_feed_to_the_checked_path():
    """A CPU + Vulkan plan's common call is Runner.run_feed (checks, output arrays, device locks and run in
    C): it equals the reference; every other feed returns None to the Python path, which runs it or raises the
    error naming the input; NaN raises the quantizer's error naming the input, on both paths."""
    from vkinfer.testing import zoo

    q = zoo.quantize(zoo.mlp(), fmt="qoperator", per_channel=True, reduce_range=True)
    blob = q.SerializeToString()
    sess = vkinfer.InferenceSession(blob, device="vulkan", threads=1)
    plan = sess._fast[0]
    assert plan.native(1) is not None and sess._native == plan.native(1).raw.run_feed
    assert {s.device.split(":")[0] for s in plan.segments} == {"cpu", "vulkan"}
    x = zoo.random_inputs(q, seed=4)["input"]
    want = run_devices(blob, {"input": x})  # every device's bits
    got = sess._native({"input": x})
    assert type(got) is list
    assert_same(got, want, "Runner.run_feed vs every device")
    first, second = sess.run(None, {"input": x}), sess.run(None, {"input": x})
    assert not np.shares_memory(first[0], second[0]), "outputs must be fresh"

    class Sub(np.ndarray):
        pass

    strided = np.zeros((x.shape[0], 2 * x.shape[1]), x.dtype)[:, ::2]
    strided[...] = x
    ro = x.copy()
    ro.flags.writeable = False
    for ok in (strided, np.asfortranarray(x) if x.shape[0] > 1 else strided, x.view(Sub)):
        assert sess._native({"input": ok}) is None
        np.testing.assert_array_equal(sess.run(None, {"input": ok})[0], want[0])
    np.testing.assert_array_equal(sess._native({"input": ro})[0], want[0])  # inputs are only read
    bad = [({"input": x.astype(np.float64)}, TypeError, "float32"),
           ({"input": x.reshape(1, -1, 1)}, ValueError, "must have shape"),
           ({}, ValueError, "missing input"),
           ({"other": x}, ValueError, r"unknown input\(s\) \['other'\]; the model's inputs"),
           ({"input": x, "extra": x}, ValueError, "unknown input"),
           ({"input": x.tolist()}, TypeError, "numpy array")]
    for f, err, msg in bad:
        assert sess._native(f) is None
        with pytest.raises(err, match=msg):
            sess.run(None, f)
    assert sess._native([("input", x)]) is None
    y = x.copy()
    y[0, -1] = np.nan
    with pytest.raises(ValueError, match="'input' contains NaN"):
        sess.run(None, {"input": y})
    with pytest.raises(ValueError, match="contains NaN"):
        _general(sess, None, {"input": y})
    np.testing.assert_array_equal(sess.run(None, {"input": x})[0], want[0])  # and the next run is fine


def _image_cases():
    from vkinfer.testing import zoo

    yield "mobilenet_v1 u8 33x33", zoo.quantize(zoo.mobilenet_v1(size=33), fmt="qoperator").SerializeToString()
    yield "mobilenet_v1 qdq s8 32x32", zoo.quantize(zoo.mobilenet_v1(size=32), fmt="qdq",
                                                  activation_type="int8").SerializeToString()
    yield "mlp 10 features", zoo.quantize(zoo.mlp(in_features=10), fmt="qoperator", per_channel=True,
                                          reduce_range=True).SerializeToString()
    g = zoo._Graph(0)
    five = g.model("five", [1, 5, 9, 11], g.relu(g.conv(zoo.INPUT, 5, 8, 3)), [1, 8, 9, 11])
    yield "conv s8 5 channels", zoo.quantize(five, fmt="qdq", activation_type="int8").SerializeToString()


@pytest.mark.parametrize("case", list(range(4)))
def test_cpu_quantize_writes_the_vulkan_input_buffer_in_place(case):
    """A Vulkan session's input quantize runs in the CPU graph and writes the device layout (rows padded to whole
    words, raw int8) straight into the Vulkan segment's input buffer: the native plan has no pack step for it
    (Runner.mapped), and its bits equal the reference and the Python segment-by-segment path (which copies
    the same bytes), for 3 channels (a word per pixel), 5 channels and rows of 10 (padded), uint8 and int8. A NaN
    in the input still raises the error naming it."""
    from vkinfer.cpu.segment import packed_key

    label, blob = list(_image_cases())[case]
    sess = vkinfer.InferenceSession(blob, device="vulkan", threads=1)
    others = sessions(blob, ("reference", "cpu"))  # with `sess`, the three devices
    plan = sess._fast[0]
    native = plan.native(1)
    assert native is not None, label
    cpu0, vk0 = plan.segments[0].runner, plan.segments[1].runner
    assert plan.segments[0].device == "cpu" and plan.segments[1].device.startswith("vulkan"), label
    [t] = cpu0.packed_io
    assert [k for k, _, _ in cpu0.out_specs] == [packed_key(t)] and vk0.ups[0][0] == packed_key(t), label
    assert len(native.raw.mapped) == 1, label
    inp = sess.get_inputs()[0]
    outs = [o.name for o in sess.get_outputs()]
    for seed in range(2):
        x = np.random.default_rng(seed).normal(0, 1.5, inp.shape).astype(np.float32)
        x.reshape(-1)[:7] = [0.0, -0.0, np.inf, -np.inf, 1e30, -1e30, 1e-45]
        want = run_sessions(others, {inp.name: x}, what=f"{label} seed {seed}")
        assert_same(sess.run(None, {inp.name: x}), want, f"{label} seed {seed}: vulkan vs reference and cpu")
        assert_same(_python_path(plan, {inp.name: x}, outs, 1), want, f"{label} seed {seed}: the Python path")
    x.reshape(-1)[-1] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        sess.run(None, {inp.name: x})


def test_plan_runner_maps_only_a_plain_copy_written_by_one_cpu_graph():
    """The plan runner drops a pack only where it is a plain copy (rows already whole words, no XOR) of a slot one
    earlier CPU graph writes and nothing else reads; an XOR, a padded row or a second reader keeps the copy."""
    from vkinfer import _planrun
    from vkinfer._vk import get_device
    from vkinfer.cpu.graph import NativeGraph, Ref

    dev = get_device()
    g = NativeGraph(0, [8, 8])
    g.add("transpose", 1, np.array([8], np.uint32), np.array([0], np.uint32), 1, 0, Ref(1, 0, 8), Ref(2, 0, 8))
    fast = g._fast
    assert fast is not None, "vkinfer._planrun is not built: make cpu"
    x = np.arange(8, dtype=np.uint8) * 29 + 3

    def runner(shape, xor, second_reader):
        buf, seq = dev.buffer(64), dev.sequence()
        seq.barrier()
        steps = [("cpu", fast[0], fast[1], g, [0, 2], 1),
                 ("vulkan", seq.raw, [(2, buf.raw, shape, False, xor)], [(1, buf.raw, [8], False, 0)])]
        if second_reader:
            steps.append(("vulkan", dev.sequence().raw, [(2, buf.raw, shape, False, 0)], []))
        return _planrun.Runner(1, 1, [8, 8, 8], {2: np.zeros(8, np.uint8)}, steps), buf

    for shape, xor, second, mapped in (([2, 4], 0, False, [2]), ([8], 0, False, [2]), ([2, 4], 0x80, False, []),
                                       ([4, 2], 0, False, []), ([2, 4], 0, True, [])):
        r, buf = runner(shape, xor, second)
        assert r.mapped == mapped, (shape, xor, second)
        y = np.zeros(8, np.uint8)
        assert r.run([x], [y], False)[0] == 0
        if not xor and shape[-1] % 4 == 0:
            np.testing.assert_array_equal(y, x)


def test_eight_threads_on_a_session_whose_quantize_writes_the_vulkan_buffer():
    """The mapped input buffer is written by the CPU quantize under the device's lock: 8 threads on one session,
    each with its own inputs, get their own reference outputs."""
    label, blob = next(_image_cases())
    sess = vkinfer.InferenceSession(blob, device="vulkan", threads=1)
    assert sess._fast[0].native(1).raw.mapped, label
    ref = vkinfer.InferenceSession(blob, device="reference")
    inp = sess.get_inputs()[0]
    feeds = [{inp.name: np.random.default_rng(s).normal(0, 1.5, inp.shape).astype(np.float32)} for s in range(8)]
    _eight_threads(sess, feeds, [ref.run(None, f) for f in feeds], 3)
