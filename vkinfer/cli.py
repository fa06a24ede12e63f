"""The `vkinfer` command: run a model, describe a model, list devices.

    vkinfer run MODEL [--device D] [--input x.npy] [--output y.npz]
    vkinfer info MODEL [--device D]
    vkinfer devices
"""

from __future__ import annotations

import argparse
import sys

import numpy as np


def _devices() -> int:
    from . import cpu, devices
    from .errors import VulkanUnavailableError

    try:
        devs = devices()
    except VulkanUnavailableError as e:
        devs = []
        print(f"Vulkan: unavailable ({e})")
    for d in devs:
        lim = d.limits
        print(f"vulkan:{d.index}  {d.name}  type={d.type}  driver={d.driver} ({d.driver_info})  api={d.api_version}")
        print(f"    max workgroup count {lim['max_compute_workgroup_count']}, invocations "
              f"{lim['max_compute_workgroup_invocations']}, shared memory {lim['max_compute_shared_memory_size']} B, "
              f"storage buffer range {lim['max_storage_buffer_range']} B, subgroup {lim['subgroup_size']}")
    print("cpu  ISA variants: " + ", ".join(f"{n}{'' if ok else ' (not on this CPU)'}" for n, ok in cpu.variants()))
    print(f"     default variant {cpu.default_variant()}, default threads {cpu.default_threads()} "
          "(cores of the fastest cluster)")
    return 0


def _info(path: str, device: str) -> int:
    import onnx
    from onnx import shape_inference

    from .model.session import InferenceSession

    sess = InferenceSession(path, device=device)
    g = sess.graph
    inferred = shape_inference.infer_shapes(onnx.load(path))
    shapes = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        t = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
        itemsize = 4 if t.elem_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.INT32) else (
            8 if t.elem_type == onnx.TensorProto.INT64 else 1)
        shapes[vi.name] = (dims, itemsize)

    def nbytes(name):
        dims, itemsize = shapes.get(name, ([None], 1))
        return int(np.prod(dims)) * itemsize if dims and all(d for d in dims) else 0

    macs, counts, last_use = 0, {}, {}
    for i, n in enumerate(g.nodes):
        counts[n.op] = counts.get(n.op, 0) + 1
        for name in n.inputs:
            last_use[name] = i
        if n.op == "QLinearConv":
            w = g.consts.get(n.inputs[3])
            out = shapes.get(n.outputs[0], ([None], 1))[0]
            if w is not None and out and all(out):
                macs += int(np.prod(out)) * int(np.prod(w.shape[1:]))
        elif n.op == "QLinearMatMul":
            b = g.consts.get(n.inputs[3])
            out = shapes.get(n.outputs[0], ([None], 1))[0]
            if b is not None and out and all(out):
                macs += int(np.prod(out)) * b.shape[-2]
    # Peak of the bytes of activations alive at once, walking the nodes in order.
    live = {t.name: nbytes(t.name) for t in g.inputs}
    peak = sum(live.values())
    for i, n in enumerate(g.nodes):
        for name in n.outputs:
            live[name] = nbytes(name)
        peak = max(peak, sum(live.values()))
        for name in [k for k in live if last_use.get(k, -1) <= i and k not in {o.name for o in g.outputs}]:
            del live[name]
    params = sum(v.size for v in g.consts.values())
    print(f"model {path}: {len(g.nodes)} nodes, {macs / 1e6:.2f} M MACs, {params / 1e6:.3f} M parameter values, "
          f"peak activation memory {peak / 1024:.1f} KiB (without buffer reuse across branches)")
    for op, k in sorted(counts.items(), key=lambda kv: -kv[1]):
        where = sess.device if op in ("QLinearConv", "QLinearMatMul") else "cpu (numpy, ONNX Runtime's numerics)"
        print(f"  {k:4d} x {op:<32} runs on {where}")
    return 0


def _run(path: str, device: str, inputs: str | None, output: str | None) -> int:
    from .model.session import InferenceSession

    sess = InferenceSession(path, device=device)
    feed = {}
    if inputs:
        loaded = np.load(inputs)
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
    """Entry point of the `vkinfer` console script."""
    ap = argparse.ArgumentParser(prog="vkinfer", description="8-bit quantized models on Vulkan or the CPU")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run a model once")
    r.add_argument("model")
    r.add_argument("--device", default="auto")
    r.add_argument("--input", help=".npy (one input) or .npz (by input name); random when omitted")
    r.add_argument("--output", help="write the outputs to this .npz")
    i = sub.add_parser("info", help="ops, MACs, parameters, peak activation memory and placement")
    i.add_argument("model")
    i.add_argument("--device", default="auto")
    sub.add_parser("devices", help="Vulkan devices and CPU variants")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "devices":
            return _devices()
        if args.cmd == "info":
            return _info(args.model, args.device)
        return _run(args.model, args.device, args.input, args.output)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"vkinfer: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
