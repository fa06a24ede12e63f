"""The `vkinfer` command: run a model, describe a model, list devices.

    vkinfer run MODEL [--device D] [--input x.npy] [--output y.npz]
    vkinfer info MODEL [--device D] [--profile FILE] [--objective median|p90]
    vkinfer calibrate [--quick|--full] [--device D] [--threads 1,2] [--out FILE] [--verbose]
    vkinfer devices
    vkinfer selftest [--device D]
    vkinfer bench MODEL... [--device cpu,vulkan,auto] [--peer onnxruntime,litert,ncnn|none] [--threads 1,2]
                           [--runs N] [--warmup N] [--out FILE.jsonl] [--pin CPUS]
    vkinfer bench compare BASE.jsonl NEW.jsonl [--threshold PCT]
    vkinfer bench ab REV [MODEL...] [--device cpu] [--threads 1] [--runs N] [--warmup N] [--threshold PCT]
                     [--out FILE.jsonl] [--pin CPUS]
    vkinfer bench plot RESULTS.jsonl [--compare NEW.jsonl] [--threshold PCT] --out DIR

Errors: one line on stderr, "vkinfer: error: MODEL: cause" (the model where the command takes one); exit status 2
for bad input (a model, file or option), 1 for a failure inside (a calibration that fails, say), 130 when
interrupted. `vkinfer bench` exits 1 when an engine fails on a model (its record is still written).
"""

from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np


def _default_vulkan_index(devs: list) -> int | None:
    """The index of the device device="vulkan" uses (None when $VKINFER_DEVICE names none)."""
    from ._vk import _pick

    try:
        return _pick(None).index if devs else None
    except ValueError:
        return None


def _devices() -> int:
    from . import _vk, cpu, devices
    from .errors import VulkanUnavailableError
    from .vulkan import gemm_tiles

    try:
        devs = devices()
    except VulkanUnavailableError as e:
        devs = []
        print(f"Vulkan: unavailable ({e})")
    default = _default_vulkan_index(devs)
    for d in devs:  # in order of preference (lavapipe before SwiftShader among CPU implementations)
        lim = d.limits
        info = f" ({d.driver_info})" if d.driver_info else ""
        mark = "  (default)" if d.index == default else ""
        print(f"vulkan:{d.index}  {d.name}  type={d.type}  driver={d.driver}{info}  api={d.api_version}{mark}")
        print(f"    max workgroup count {lim['max_compute_workgroup_count']}, invocations "
              f"{lim['max_compute_workgroup_invocations']}, shared memory {lim['max_compute_shared_memory_size']} B, "
              f"storage buffer range {lim['max_storage_buffer_range']} B, subgroup {lim['subgroup_size']}")
        dot = d.integer_dot_product or {}
        opened = _vk._open.get(d.index)  # in this process already (vkinfer.cli.main called from a program)
        use, why = (opened.use_dot, opened.dot_reason) if opened is not None else _vk.dot_choice(d)
        frq, frq_why = ((opened.use_float_rq, opened.float_rq_reason) if opened is not None
                        else _vk.float_rq_choice(d))
        fast = ", ".join(f"{k} {'yes' if dot.get(f'{k}_accelerated') else 'no'}"
                         for k in ("signed", "unsigned", "mixed"))
        has = f"supported (4x8 packed accelerated: {fast})" if dot.get("supported") else "not supported"
        print(f"    integer dot product: {has}; vkinfer's dot shaders: {why}")
        rte = "RTE float32 guaranteed" if (d.float_controls or {}).get("rte32") else "no RTE float32 guarantee"
        print(f"    float32 requantization ({rte}): {frq_why}")
        print(f"    GEMM: {gemm_tiles.describe(d, use, frq)}")
        print(f"    self-test: {_selftest_line(d)}")
    print("cpu  ISA variants: " + ", ".join(f"{n}{'' if ok else ' (not on this CPU)'}" for n, ok in cpu.variants()))
    clusters = cpu.core_clusters()
    print("     core clusters: " + "; ".join(
        f"{len(ids)} x {khz / 1e6:.2f} GHz (cpus {','.join(map(str, ids))})" if khz else
        f"{len(ids)} cores, no cpufreq information (cpus {','.join(map(str, ids))})" for khz, ids in clusters))
    try:
        td = cpu.thread_default()
        threads = f"default threads {td.count} ({td.reason})"
    except ValueError as e:  # a bad $VKINFER_CPU_THREADS: say so here rather than fail the listing
        threads = f"default threads: {e}"
    print(f"     default variant {cpu.default_variant()}, {threads}")
    return 0


def _selftest_line(info) -> str:
    """`vkinfer devices`' self-test line of a Vulkan device (vkinfer/vulkan/selftest.py describe)."""
    from .dispatch.machine import vulkan_identity
    from .vulkan import selftest

    return selftest.describe({"name": info.name, "driver": info.driver, "driver_info": info.driver_info,
                              "identity": vulkan_identity(info.index)})


def _vulkan_infos(device: str | None) -> list:
    """The Vulkan devices a --device option names ("vulkan", "vulkan:<index|name|type>"; None: every one)."""
    from . import _vk

    if device is None:
        return _vk.devices()
    kind, _, which = device.partition(":")
    if kind != "vulkan":
        raise ValueError(f"--device takes vulkan or vulkan:<index|name|type>, got {device!r}")
    return [_vk._pick(which or None)]


def _selftest(device: str | None) -> int:
    """Rerun the self-test on `device` ("vulkan", "vulkan:<which>"; default every Vulkan device) whatever is
    cached, print each case's result and time, record the verdicts. Exit status 0 when every device passed, else 1."""
    from . import _vk
    from .vulkan import selftest

    infos = _vulkan_infos(device)
    failed = 0
    for info in infos:
        dev = _vk.get_device(info.index)
        reason = selftest.blocked(dev, "device") or (selftest.blocked(dev, "dot") if dev.use_dot else None)
        head = f"vulkan:{info.index}  {info.name}  driver={info.driver}" + (
            f" ({info.driver_info})" if info.driver_info else "") + f"  {selftest.path_of(dev)} shader path"
        print(head)
        if reason:
            print(f"    blocklisted: {reason} (not run)")
            failed += 1
            continue
        v = selftest.run(dev)
        for c in v.cases:
            print(f"    {'pass' if c.ok else 'FAIL'}  {c.name:<28} {c.kernel:<18} {c.ms:7.1f} ms"
                  + (f"  {c.why}" if c.why else ""))
        print(f"    {'passed' if v.passed else 'FAILED: the device is untrusted'}: {sum(c.ok for c in v.cases)}/"
              f"{len(v.cases)} cases in {v.seconds:.2f} s (recorded in {v.record})")
        failed += not v.passed
    return 1 if failed else 0


def _tune(device: str | None, budget: float) -> int:
    """Rerun the GEMM tile autotune on `device` ("vulkan", "vulkan:<which>"; default every Vulkan device), print
    each candidate's time and the choice, and record it (vkinfer/vulkan/gemm_tiles.py)."""
    from . import _vk
    from .vulkan import gemm_tiles

    infos = _vulkan_infos(device)
    if not budget > 0:
        raise ValueError(f"--budget must be a number of seconds > 0, got {budget}")
    for info in infos:
        dev = _vk.get_device(info.index)
        r = gemm_tiles.autotune(dev, budget_s=budget)
        print(f"vulkan:{info.index}  {info.name}  {'dot' if dev.use_dot else 'scalar'} shaders  ({r.timer} time, "
              f"{len(gemm_tiles.TUNE_SHAPES)} GEMM shapes summed, {r.elapsed_s:.2f} s)")
        for label, us in r.times_us.items():
            print(f"    {label:<16} {'not measured (budget)' if us is None else f'{us:12.1f} us'}")
        print(f"    chosen: {r.config.tile.name} {'shared' if r.config.shared else 'direct'}"
              f"{f' (recorded in {r.path})' if r.path else ' (not recorded: the cache folder is not writable)'}")
    return 0


def _placement(spec: str | None) -> dict[str, str] | None:
    """--placement "node=device,node=device" -> {node: device}."""
    if not spec:
        return None
    out = {}
    for item in spec.split(","):
        node, sep, dev = item.rpartition("=")
        if not sep or not node or not dev:
            raise ValueError(f"--placement takes node=device pairs separated by commas, got {item!r}")
        out[node] = dev
    return out


def _info(path: str, device: str, placement: str | None = None, profile: str | None = None,
          objective: str = "median", threads: int | None = None) -> int:
    from .compiler.plan import trace
    from .model.stats import macs_and_peak
    from .session import HostNodeWarning, InferenceSession

    if profile is not None:
        return _info_profile(path, profile, objective, threads)
    with warnings.catch_warnings():  # the host nodes are listed below, each with its reason
        warnings.simplefilter("ignore", HostNodeWarning)
        sess = InferenceSession(path, device=device, placement=_placement(placement), objective=objective,
                                threads=threads)
        g = sess.graph
        # Shapes from the plan's trace (symbolic dimensions taken as 1).
        feed = {t.name: np.zeros([d if isinstance(d, int) and d > 0 else 1 for d in (t.shape or [])], t.dtype)
                for t in g.inputs}
        plan = sess.plan(feed)
    info = plan.info if plan is not None else trace(g, feed)

    macs, peak = macs_and_peak(g, info)
    counts: dict[tuple[str, str], int] = {}
    for n in g.nodes:
        where = plan.placement[n.name] if plan is not None else "reference"
        counts[(n.op, where)] = counts.get((n.op, where), 0) + 1
    params = sum(v.size for v in g.consts.values())
    print(f"model {path}: {len(g.nodes)} nodes, {macs / 1e6:.2f} M MACs, {params / 1e6:.3f} M parameter values")
    print(f"peak activation memory: {peak / 1024:.1f} KiB of live tensors (each freed after its last reader)")
    if plan is not None:
        _print_segments(sess, plan)
    for (op, where), k in sorted(counts.items(), key=lambda kv: -kv[1]):
        why = " (numpy, ONNX Runtime's numerics)" if where == "host" else ""
        print(f"  {k:4d} x {op:<32} runs on {where}{why}")
    for name, where in (plan.given.items() if plan is not None else ()):
        print(f"  placed by hand: {name} on {where}")
    if plan is not None:
        _print_host_nodes(sess, plan)
    _print_inexact(g)
    if device == "auto":
        print(sess.explain())
    return 0


def _print_host_nodes(sess, plan) -> None:
    """Every node the plan runs on the host (numpy, between native calls), each with the reason no device takes
    it: the lowerings' refusals (compiler/plan.py Plan.why_host), or a placement by hand."""
    host = [n for n in sess.graph.nodes if plan.placement[n.name] == "host"]
    if sess.device == "reference":
        print(f"host nodes: all {len(host)} (device 'reference' interprets every node in numpy)")
        return
    if not host:
        print("host nodes: none (every node runs natively)")
        return
    ops: dict[str, int] = {}
    for n in host:
        ops[n.op] = ops.get(n.op, 0) + 1
    listed = ", ".join(f"{op} x{k}" for op, k in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])))
    print(f"host nodes: {len(host)} ({listed}), run in numpy between native calls; why each:")
    for n in host:
        why = ("placed on the host by hand" if plan.given.get(n.name) == "host"
               else plan.why_host.get(n.name) or "no reason recorded")
        print(f"  {n.name} ({n.op}): {why}")


def _print_inexact(g) -> None:
    """The float ops whose bits can differ from ONNX Runtime's (vkinfer/model/inexact.py), each with the reason and
    the bound its test pins; nothing when every op is exact."""
    from .model.inexact import inexact_nodes

    found = inexact_nodes(g)
    if not found:
        return
    print(f"float ops not bit-exact with ONNX Runtime: {len(found)} (they run; the bound is pinned by a test):")
    for n, why in found:
        print(f"  {n.name} ({n.op}): {why.reason}; bound {why.bound} ({why.test})")


def _info_profile(path: str, profile: str, objective: str, threads: int | None) -> int:
    """Plan MODEL for the devices of a profile (which this machine need not have), without running it."""
    from .dispatch import load_profile
    from .dispatch.simulate import simulate
    from .session import InferenceSession

    prof = load_profile(profile)
    sess = InferenceSession(path, device="reference")
    feed = {t.name: np.zeros([d if isinstance(d, int) and d > 0 else 1 for d in (t.shape or [])], t.dtype)
            for t in sess.graph.inputs}
    counts = sorted({e.threads for e in prof.devices if e.kind == "cpu"}) or [1]
    d = simulate(sess.graph, feed, prof, threads or counts[0], objective)
    print(f"model {path} planned for profile {profile} (devices {', '.join(d.devices)}; nothing run)")
    print(d.table())
    return 0


def _calibrate(mode: str, device: str | None, threads: str | None, out: str | None, verbose: bool = False) -> int:
    """Calibrate this machine's devices (all the dispatcher weighs, or --device); print a few lines per device
    (dispatch.summarize), or with `verbose` every sample as measured and the full fitted models (describe)."""
    from . import cpu
    from .dispatch import describe, summarize
    from .dispatch.calibrate import ensure_profile
    from .session import _auto_devices

    devices = [device] if device else _auto_devices()
    if threads:
        counts = [int(t) for t in threads.split(",")]
        if any(t < 1 for t in counts):
            raise ValueError(f"--threads takes positive counts, got {threads!r}")
    else:  # every useful count: 1 up to the fast cluster (vkinfer.cpu.thread_default)
        counts = list(range(1, cpu.default_threads() + 1))
    print(f"calibrating ({mode}): {', '.join(devices)}; CPU at {', '.join(map(str, counts))} thread(s)",
          file=sys.stderr)
    def log(line: str) -> None:  # progress: every sample with --verbose, else one line per device
        if verbose or ": calibrated in " in line:
            print(f"  {line.strip() if not verbose else line}", file=sys.stderr)
    prof = ensure_profile([d for d in devices], counts, mode, force=True, log=log)
    print(describe(prof) if verbose else summarize(prof))
    if out:
        prof.save(out)
        print(f"wrote {out}")
    return 0


def _print_segments(sess, plan) -> None:
    """The plan's segments in order, with their runners' storage, and the tensors crossing devices per run."""
    print(f"device: {sess.device}; {len(plan.segments)} segment(s): {plan.native_calls} native CPU call(s) and "
          f"{plan.submits} Vulkan submission(s) per run")
    for i, seg in enumerate(plan.segments):
        r = seg.runner
        extra = ""
        if seg.device.startswith("cpu"):
            extra = f", {len(r.ops())} native operators, arena {r.arena_bytes / 1024:.1f} KiB"
        elif seg.device.startswith("vulkan"):
            extra = (f", {len(r.buffers)} device buffers planned by lifetime, {r.peak_bytes / 1024:.1f} KiB "
                     f"(packed NHWC, channels padded to 4)")
        print(f"  segment {i}: {len(seg.nodes)} node(s) on {seg.device}{extra}")
    moves = plan.transfers
    total = sum(t.nbytes for t in moves)
    print(f"transfers per run: {len(moves)} tensor(s), {total / 1024:.1f} KiB"
          + "".join(f"\n  {t.tensor}: {t.src} -> {t.dst}, {t.nbytes} B" for t in moves[:20]))


def _run(path: str, device: str, inputs: str | None, output: str | None, placement: str | None = None) -> int:
    from .session import InferenceSession

    sess = InferenceSession(path, device=device, placement=_placement(placement))
    feed = {}
    if inputs:
        try:
            loaded = np.load(inputs)
        except (OSError, ValueError, EOFError) as e:  # numpy's own message does not name the file
            raise ValueError(f"--input {inputs}: not a readable .npy or .npz file ({_one_line(str(e))})") from None
        if isinstance(loaded, np.ndarray):
            if len(sess.get_inputs()) != 1:
                raise ValueError(f"{inputs} holds one array but the model has {len(sess.get_inputs())} inputs; "
                                 "pass an .npz with one array per input name")
            feed[sess.get_inputs()[0].name] = loaded
        else:
            feed = {k: loaded[k] for k in loaded.files}
    else:
        rng = np.random.default_rng(0)
        for i in sess.get_inputs():
            dt = np.dtype({"tensor(uint8)": np.uint8, "tensor(int8)": np.int8}.get(i.type, np.float32))
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in (i.shape or [])]
            feed[i.name] = (rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1, shape).astype(dt)
                            if dt.kind in "iu" else rng.standard_normal(shape).astype(dt))
            print(f"notice: no --input given; using seeded random {i.type} input {i.name!r} of shape {shape}",
                  file=sys.stderr)
    outs = sess.run(None, feed)
    names = [o.name for o in sess.get_outputs()]
    for name, y in zip(names, outs, strict=True):
        print(f"{name}: {y.dtype} {list(y.shape)}  min {y.min()} max {y.max()}")
    if output:
        np.savez(output, **dict(zip(names, outs, strict=True)))
        print(f"wrote {output}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `vkinfer` console script. Exit status: 0 done, 2 bad input (the model, a file, an option;
    one line "vkinfer: error: MODEL: cause"), 1 any other failure (one line too), 130 interrupted; `vkinfer bench`
    and its subcommands document theirs (vkinfer/benchmark/)."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in[:1] == ["bench"]:  # its own parsers (vkinfer.benchmark.cli, .compare, .ab, .plots)
        if args_in[1:2] == ["compare"]:
            from .benchmark.compare import main as compare_main

            return compare_main(args_in[2:])
        if args_in[1:2] == ["ab"]:
            from .benchmark.ab import main as ab_main

            return ab_main(args_in[2:])
        if args_in[1:2] == ["plot"]:
            from .benchmark.plots import main as plot_main

            return plot_main(args_in[2:])
        from .benchmark.cli import main as bench_main

        return bench_main(args_in[1:])
    ap = argparse.ArgumentParser(prog="vkinfer", description="8-bit quantized models on Vulkan or the CPU")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a model once")
    r.add_argument("model")
    r.add_argument("--device", default="auto")
    r.add_argument("--input", help=".npy (one input) or .npz (by input name); random when omitted")
    r.add_argument("--output", help="write the outputs to this .npz")
    r.add_argument("--placement", help='nodes placed by hand: "node=device,..." (device: cpu, vulkan[:<n>], host)')
    i = sub.add_parser("info", help="ops, MACs, parameters, peak activation memory and placement")
    i.add_argument("model")
    i.add_argument("--device", default="auto")
    i.add_argument("--placement", help='nodes placed by hand: "node=device,..." (device: cpu, vulkan[:<n>], host)')
    i.add_argument("--profile", help="plan for the devices of this calibration profile (JSON) without running")
    i.add_argument("--objective", default="median", help="what device=auto minimises: median (default) or p90")
    i.add_argument("--threads", type=int, help="CPU threads the plan is for (default: the session's)")
    c = sub.add_parser("calibrate", help="measure this machine's devices for device=auto; print the fitted models")
    how = c.add_mutually_exclusive_group()
    how.add_argument("--quick", dest="mode", action="store_const", const="quick", help="a few shapes (default)")
    how.add_argument("--full", dest="mode", action="store_const", const="full", help="the whole shape grid")
    c.add_argument("--device", help="only this device (cpu, vulkan:<n>); default: all that auto weighs")
    c.add_argument("--threads", help="CPU thread counts, e.g. 1,2 (default: 1 up to the fast cluster)")
    c.add_argument("--out", help="also write the profile to this JSON file")
    c.add_argument("--verbose", "-v", action="store_true",
                   help="every sample and fitted term as it is measured, and the full per-class tables")
    sub.add_parser("devices", help="Vulkan devices and CPU variants")
    st = sub.add_parser("selftest", help="rerun the Vulkan self-test against the C path; print each case")
    st.add_argument("--device", help="vulkan or vulkan:<index|name|type> (default: every Vulkan device)")
    tu = sub.add_parser("tune", help="rerun the Vulkan GEMM tile autotune; print each variant's time and the choice")
    tu.add_argument("--device", help="vulkan or vulkan:<index|name|type> (default: every Vulkan device)")
    tu.add_argument("--budget", type=float, default=2.0, help="seconds per device (default 2)")
    sub.add_parser("bench", help="benchmark models beside ONNX Runtime and LiteRT (vkinfer bench --help); "
                                 "bench compare BASE NEW: A/B regression check", add_help=False)
    args = ap.parse_args(argv)
    from .errors import VkInferError

    try:
        if args.cmd == "devices":
            return _devices()
        if args.cmd == "selftest":
            return _selftest(args.device)
        if args.cmd == "tune":
            return _tune(args.device, args.budget)
        if args.cmd == "info":
            return _info(args.model, args.device, args.placement, args.profile, args.objective, args.threads)
        if args.cmd == "calibrate":
            return _calibrate(args.mode or "quick", args.device, args.threads, args.out, args.verbose)
        return _run(args.model, args.device, args.input, args.output, args.placement)
    except KeyboardInterrupt:
        print(f"vkinfer {args.cmd}: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, OSError, VkInferError) as e:  # the input: the model, a file, an option
        print(f"vkinfer: error: {_culprit(args)}{_one_line(str(e))}", file=sys.stderr)
        return 2
    except Exception as e:  # noqa: BLE001 - a failure inside (a calibration's RuntimeError, say): one line too
        print(f"vkinfer: error: {_culprit(args)}{type(e).__name__}: {_one_line(str(e))}", file=sys.stderr)
        return 1


def _culprit(args) -> str:
    """"MODEL: " for the subcommands that take one (every error names the model it is about), else ""."""
    model = getattr(args, "model", None)
    return f"{model}: " if model else ""


def _one_line(text: str) -> str:
    return " ".join(text.split())


if __name__ == "__main__":
    raise SystemExit(main())
