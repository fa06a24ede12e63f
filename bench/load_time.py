"""Loading time: a session made and run once on long generated chains, vkinfer against its peer (issue 26 item 3).

    .venv/bin/python bench/load_time.py [--sizes 20000,100000] [--kinds qlinear_add,transpose,...] [--repeat 3]
    .venv/bin/python bench/load_time.py --sizes 100000 --base /path/to/other/checkout   # vkinfer against vkinfer

Chains (tests/support/load_chains.py): `n` nodes each reading the one before on small 8-bit tensors, so that
loading is all import, graph passes, trace, lowering and planning: transpose, qlinear_add (com.microsoft QLinearAdd
of the running tensor and a constant: the attack's 20k-node model), qlinear_conv (1x1 QLinearConvs), qdq_conv (DQ ->
Conv -> Relu -> Q, five nodes a layer: `n` counts nodes, n/5 layers) against ONNX Runtime (CPU EP, one thread,
sequential, spinning off, ORT_ENABLE_ALL); tflite_add (int8 ADDs) against ai-edge-litert (one thread). vkinfer:
`InferenceSession(blob, device="cpu", threads=1)` then one run.

Each measurement is one fresh process (nothing cached between them: no imported module warm, no plan), vkinfer's
and the peer's alternating, `--repeat` of each; the figure is the process's CPU time (time.process_time) from before
the session is made to after the first run returns, which other processes on a shared machine inflate little, and
its wall time. The model bytes are made before timing. Results go to bench/results/load_time-<UTC time>.json
with the markdown table (the minimum over the repeats of each side, and vkinfer / peer).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from _common import cpu_model, git_revision, markdown_table, package_version

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
KINDS = ("qlinear_add", "transpose", "qlinear_conv", "qdq_conv", "tflite_add")

# The child: builds the chain (untimed), then times the session and one run. argv: runtime kind nodes.
CHILD = r"""
import sys, time, os
sys.path.insert(0, os.path.join(sys.argv[4], "tests"))
import numpy as np
from support.load_chains import chain_model
runtime, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
layers = n // 5 if kind == "qdq_conv" else n
blob = chain_model(kind, layers)
rng = np.random.default_rng(1)
x = rng.integers(-128, 128, (1, 3, 5, 4), dtype=np.int8) if kind == "tflite_add" else \
    rng.integers(0, 256, (1, 4, 3, 5), dtype=np.uint8)
if runtime == "vkinfer":
    import vkinfer
    t0, w0 = time.process_time(), time.perf_counter()
    s = vkinfer.InferenceSession(blob, device="cpu", threads=1)
    y = s.run(None, {"x0": x})[0]
elif runtime == "onnxruntime":
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = o.inter_op_num_threads = 1
    o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    t0, w0 = time.process_time(), time.perf_counter()
    s = ort.InferenceSession(blob, o, providers=["CPUExecutionProvider"])
    y = s.run(None, {"x0": x})[0]
else:
    from ai_edge_litert.interpreter import Interpreter
    t0, w0 = time.process_time(), time.perf_counter()
    it = Interpreter(model_content=blob, num_threads=1)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    y = it.get_tensor(it.get_output_details()[0]["index"])
cpu, wall = time.process_time() - t0, time.perf_counter() - w0
print(f"{cpu:.4f} {wall:.4f} {int(np.asarray(y, np.int64).sum())}")
"""


def measure(runtime: str, kind: str, n: int, base: str | None = None) -> tuple[float, float, int]:
    """(CPU seconds, wall seconds, the output's sum) of one fresh process loading and running the chain; `base`: a
    vkinfer checkout imported instead of this one (runtime "vkinfer")."""
    env = dict(os.environ, VKINFER_CPU_THREADS="1", OMP_NUM_THREADS="1")
    if base is not None:
        env["PYTHONPATH"] = base
    # (run in `base` there: `python -c` puts the current folder first on sys.path, before PYTHONPATH)
    out = subprocess.run([sys.executable, "-c", CHILD, runtime, kind, str(n), str(ROOT)], capture_output=True,
                         text=True, env=env, timeout=1800, cwd=base)
    if out.returncode != 0:
        raise RuntimeError(f"{runtime} {kind} {n}: {out.stderr[-2000:]}")
    cpu, wall, total = out.stdout.split()
    return float(cpu), float(wall), int(total)


def main(argv: list[str] | None = None) -> int:
    """Run the loading benchmark; 0 when every vkinfer output equals its peer's."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20000,100000", help="nodes per chain, comma-separated")
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"chain kinds, comma-separated: {', '.join(KINDS)}")
    ap.add_argument("--repeat", type=int, default=3, help="fresh processes per side and row (the minimum is kept)")
    ap.add_argument("--base", help="compare with another vkinfer checkout (its native libraries built) instead of "
                                   "the peer: ORT takes minutes on the 100k-node quantized chains")
    args = ap.parse_args(argv)
    kinds, sizes = args.kinds.split(","), [int(s) for s in args.sizes.split(",")]
    if any(k not in KINDS for k in kinds) or any(n < 5 for n in sizes) or args.repeat < 1:
        ap.error(f"kinds among {KINDS}, sizes >= 5, repeat >= 1")
    now = datetime.now(UTC)
    import numpy as np
    import onnxruntime as ort

    import vkinfer

    cond = {"date_utc": now.isoformat(timespec="seconds"), "host_cpu": cpu_model(), "cpu_count": os.cpu_count(),
            "platform": platform.platform(), "python": platform.python_version(), "numpy": np.__version__,
            "onnxruntime": ort.__version__, "ai_edge_litert": package_version("ai-edge-litert"),
            "vkinfer": vkinfer.__version__, "vkinfer_git": git_revision(ROOT), "repeat": args.repeat,
            "base": args.base and {"path": args.base, "git": git_revision(Path(args.base))},
            "timing": "CPU time (process_time) of one fresh process from before the session to after its first "
                      "run; minimum over the repeats; the sides alternate"}
    rows, ok = [], True
    for n in sizes:
        for kind in kinds:
            peer = "ai-edge-litert" if kind == "tflite_add" else "onnxruntime"
            if args.base:
                peer = f"vkinfer at {args.base}"
            got: dict[str, list] = {"vkinfer": [], peer: []}
            for r in range(args.repeat):
                for runtime in (("vkinfer", peer) if r % 2 == 0 else (peer, "vkinfer")):
                    base = args.base if runtime == peer and args.base else None
                    got[runtime].append(measure("vkinfer" if base else runtime, kind, n, base))
            vk, pr = min(got["vkinfer"]), min(got[peer])
            same = len({t[2] for t in got["vkinfer"] + got[peer]}) == 1
            ok &= same
            rows.append({"kind": kind, "nodes": n, "peer": peer, "vkinfer_cpu_s": vk[0], "vkinfer_wall_s": vk[1],
                         "peer_cpu_s": pr[0], "peer_wall_s": pr[1], "ratio": vk[0] / pr[0], "same_output": same,
                         "runs": got})
            print(f"  {kind:<13} {n:>7} nodes: vkinfer {vk[0]:6.2f} s CPU ({vk[1]:6.2f} wall), {peer} {pr[0]:6.2f} s "
                  f"({pr[1]:6.2f}){'' if same else '  OUTPUTS DIFFER'}", flush=True)
    md = markdown_table(["chain", "nodes", "vkinfer CPU s", "vkinfer wall s", "peer", "peer CPU s", "peer wall s",
                         "vkinfer / peer", "output"],
                        [[r["kind"], str(r["nodes"]), f"{r['vkinfer_cpu_s']:.2f}", f"{r['vkinfer_wall_s']:.2f}",
                          r["peer"], f"{r['peer_cpu_s']:.2f}", f"{r['peer_wall_s']:.2f}", f"{r['ratio']:.2f}",
                          "same" if r["same_output"] else "DIFFER"] for r in rows])
    print("\n" + md)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"load_time-{now.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(json.dumps({"conditions": cond, "rows": rows, "table": md}, indent=1) + "\n")
    print(f"\nwritten {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
