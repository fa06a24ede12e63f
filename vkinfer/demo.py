"""vkinfer demo: MobileNetV2 layers on the Vulkan device, checked bit for bit against the reference.

    python -m vkinfer.demo

Runs six representative layer shapes of MobileNetV2 1.0/224 (bench/mobilenet_v2_shapes.json)
through the public ops API on the Vulkan device and on the numpy reference, prints whether the
outputs are identical and the median time per call. Then whole MobileNetV2 models: ONNX (QOperator and
QDQ) through vkinfer.InferenceSession against ONNX Runtime, and an int8 TFLite MobileNetV2 against
ai-edge-litert's Interpreter (its int8 ``logits``: vkinfer emits TFLite's own arithmetic where TFLite rounds
otherwise than ONNX Runtime, so these are identical too). Exits with status 1 if any output differs.

Every runtime of a whole-model comparison runs on the same number of CPU threads, vkinfer's default here
(vkinfer.cpu.default_threads()), and each row says how many: the demo once timed ONNX Runtime on 1 thread
beside vkinfer on 2 (3.30 ms against 1.36 ms on this 2-core VM) under a label that hid it. ONNX Runtime gets
the options `vkinfer bench` gives it (spinning off: a spinning pool takes the cores from the runtime timed
next).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from . import cpu, ops, reference
from ._vk import get_device
from .errors import VulkanUnavailableError
from .reference._spec import conv_spec, matmul_spec
from .vulkan import Chain, choose_kernel, choose_matmul_kernel

SHAPES = Path(__file__).resolve().parent.parent / "bench" / "mobilenet_v2_shapes.json"
# One of each kind of layer the network has: the generic conv, 1x1 expand (GEMM), depthwise 3x3 at
# stride 1 and 2, 1x1 project, and the classifier.
LAYERS = ("conv_first_3to32_224", "expand_24to144_56", "dw_s1_144_56", "dw_s2_96_112",
          "project_144to24_56", "classifier_1280to1000")
RUNS = 20


def load_layers(names: tuple[str, ...] = LAYERS, path: Path = SHAPES) -> list[dict]:
    """The named entries of the shapes file, in the order given."""
    by_name = {e["name"]: e for e in json.loads(path.read_text())}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise KeyError(f"{path} has no layer(s) {missing}")
    return [by_name[n] for n in names]


def _weights(rng: np.random.Generator, shape: tuple[int, ...], axis: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 weights quantized symmetrically (zero point 0) with one scale per output channel."""
    wf = rng.normal(0.0, 1.0, size=shape)
    other = tuple(i for i in range(len(shape)) if i != axis)
    scale = (np.abs(wf).max(axis=other) / 127.0).astype(np.float32)
    return np.clip(np.rint(wf / np.expand_dims(scale, other)), -127, 127).astype(np.int8), scale


def conv_args(e: dict, rng: np.random.Generator) -> dict:
    """Keyword arguments of ops.qlinear_conv for one conv entry, with seeded random data."""
    c, h, w, m, k, s, p, g = (e[f] for f in ("c", "h", "w", "m", "k", "stride", "pad", "group"))
    wq, w_scale = _weights(rng, (m, c // g, k, k), axis=0)
    fan_in = c // g * k * k
    # y_scale spreads the output over uint8: the accumulator's spread is about sqrt(fan_in) * 74 (the
    # std of uniform uint8 less 128) * 45 (the std of normal weights scaled so the max is 127).
    return dict(x=rng.integers(0, 256, (1, c, h, w), dtype=np.uint8), x_scale=np.float32(0.02),
                x_zero_point=np.uint8(128), w=wq, w_scale=w_scale, w_zero_point=np.zeros(m, np.int8),
                y_scale=np.float32(0.02 * float(w_scale.mean()) * np.sqrt(fan_in) * 74 * 45 / 32),
                y_zero_point=np.uint8(128), bias=rng.integers(-2000, 2000, m, dtype=np.int32),
                strides=(s, s), pads=(p, p, p, p), group=g)


def matmul_args(e: dict, rng: np.random.Generator) -> dict:
    """Keyword arguments of ops.qlinear_matmul for one matmul entry, with seeded random data."""
    rows, k, n = e["m_rows"], e["k"], e["n"]
    b, b_scale = _weights(rng, (k, n), axis=1)
    # As in conv_args, with 147 (the rms of uniform uint8 with zero point 0) for the input's spread.
    return dict(a=rng.integers(0, 256, (rows, k), dtype=np.uint8), a_scale=np.float32(0.02),
                a_zero_point=np.uint8(0), b=b, b_scale=b_scale, b_zero_point=np.zeros(n, np.int8),
                y_scale=np.float32(0.02 * float(b_scale.mean()) * np.sqrt(k) * 147 * 45 / 32),
                y_zero_point=np.uint8(128))


def describe(e: dict, args: dict) -> tuple[str, str]:
    """(op/kernel, shapes) columns for one layer."""
    if e["op"] == "matmul":
        a, b = args["a"], args["b"]
        kernel = choose_matmul_kernel(matmul_spec(**args))
        return f"matmul/{kernel}", f"{'x'.join(map(str, a.shape))} @ {'x'.join(map(str, b.shape))}"
    kernel = choose_kernel(conv_spec(**args))
    x, w = args["x"], args["w"]
    return f"conv/{kernel}", f"x {'x'.join(map(str, x.shape))}  w {'x'.join(map(str, w.shape))}"


def layer_call(e: dict, rng: np.random.Generator) -> tuple[Callable[..., np.ndarray], dict]:
    """The ops function for one entry and its keyword arguments (without `device`)."""
    if e["op"] == "conv":
        return ops.qlinear_conv, conv_args(e, rng)
    return ops.qlinear_matmul, matmul_args(e, rng)


def run_layer(op: Callable[..., np.ndarray], args: dict, device: str,
              runs: int = RUNS) -> tuple[np.ndarray, float]:
    """(output, median ms per call) of one layer on `device`."""
    y = op(**args, device=device)  # the first call prepares the layer (weights, pipeline), untimed
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        op(**args, device=device)
        times.append(time.perf_counter() - t0)
    return y, 1e3 * float(np.median(times))


def verdict(y: np.ndarray, ref: np.ndarray) -> str:
    """'identical', or how many values differ."""
    if y.shape == ref.shape and y.dtype == ref.dtype and np.array_equal(y, ref):
        return "identical"
    n = int(np.count_nonzero(y != ref)) if y.shape == ref.shape else ref.size
    return f"DIFFERENT ({n} of {ref.size} values)"


def main() -> int:
    """Run the demo; 0 when every layer's Vulkan output equals the reference, 1 otherwise."""
    try:
        dev = get_device()
    except VulkanUnavailableError as e:
        print(f"vkinfer demo: no usable Vulkan device: {e}", file=sys.stderr)
        return 2
    threads = cpu.default_threads()
    print(f"Vulkan device: {dev.info}")
    print(f"CPU fallback: variant {cpu.default_variant()}, {_n(threads)}")
    print("MobileNetV2 1.0/224 layers, uint8 activations x per-channel int8 weights; time is the median of "
          f"{RUNS} ops API calls (argument checks, layout conversion, run; on Vulkan also upload and download)\n")
    print(f"{'layer':<24} {'op/kernel':<24} {'shapes':<34} {'Vulkan result':<20} {'ms':>8}   "
          f"{'CPU (' + cpu.default_variant() + ', ' + _n(threads) + ') result':<34} {'ms':>8}")
    failed = 0
    for i, e in enumerate(load_layers()):
        op, args = layer_call(e, np.random.default_rng(i))
        kind, shapes = describe(e, args)
        ref = op(**args, device="reference")
        y_vk, ms_vk = run_layer(op, args, "vulkan")
        y_cpu, ms_cpu = run_layer(op, args, "cpu")
        r_vk, r_cpu = verdict(y_vk, ref), verdict(y_cpu, ref)
        failed += (r_vk != "identical") + (r_cpu != "identical")
        print(f"{e['name']:<24} {kind:<24} {shapes:<34} {r_vk:<20} {ms_vk:8.2f}   {r_cpu:<34} {ms_cpu:8.2f}",
              flush=True)
    failed += run_chain(dev)
    failed += run_models(threads)
    print(f"\n{'all results match their reference' if not failed else f'{failed} result(s) DIFFER'}")
    return 1 if failed else 0


# MobileNetV2's stem and first two inverted-residual blocks, as they follow each other in the net.
CHAIN = ("conv_first_3to32_224", "dw_s1_32_112", "project_32to16_112", "expand_16to96_112", "dw_s2_96_112",
         "project_96to24_56")


def run_chain(dev) -> int:
    """The CHAIN layers recorded once into one command sequence (barrier between dispatches) and
    run with one submit per inference; returns 1 if the output differs from the reference chain."""
    rng = np.random.default_rng(100)
    x = rng.integers(0, 256, (1, 3, 224, 224), dtype=np.uint8)
    specs, cur = [], x
    for e in load_layers(CHAIN):
        args = conv_args(e, rng)
        args["x"] = cur  # each layer's input is the previous layer's (reference) output
        spec = conv_spec(**args)
        specs.append(spec)
        cur = reference.qlinear_conv(spec)
    chain = Chain(specs, dev)
    y = chain.run(x)
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        chain.run(x)
        times.append(time.perf_counter() - t0)
    result = verdict(y, cur)
    shapes = f"x 1x3x224x224 -> {'x'.join(map(str, y.shape))}"
    print(f"{'first 6 layers, 1 submit':<24} {'chain/' + str(len(specs)) + ' dispatches':<24} {shapes:<34} "
          f"{result:<34} {1e3 * float(np.median(times)):8.2f}", flush=True)
    return int(result != "identical")


MODEL_DIR = Path(__file__).resolve().parent.parent / "build" / "models"


def build_models() -> dict[str, Path]:
    """MobileNetV2 1.0/224 with seeded random weights, quantized by onnxruntime.quantization in both
    ONNX formats (uint8 activations, per-channel int8 weights, 7-bit so that ONNX Runtime's x86
    kernels are exact too), and written as an int8 TFLite model (tflite_zoo.mobilenet_v2: per-axis int8
    weights, int8 activations); built once and cached under build/models/. Keys: "qoperator", "qdq",
    "tflite"."""
    from .testing import tflite_zoo, zoo

    paths = {fmt: MODEL_DIR / f"mobilenet_v2_{fmt}.onnx" for fmt in ("qoperator", "qdq")}
    tfl = MODEL_DIR / "mobilenet_v2_int8.tflite"
    if not tfl.exists():
        MODEL_DIR.mkdir(parents=True, exist_ok=True)
        tfl.write_bytes(tflite_zoo.mobilenet_v2(seed=0, size=224, width=1.0, num_classes=1000))
    if not all(p.exists() for p in paths.values()):
        import logging

        logging.getLogger().setLevel(logging.ERROR)  # the quantizer's advice about pre-processing
        print("(building and quantizing the model once; cached in build/models/)")
        MODEL_DIR.mkdir(parents=True, exist_ok=True)
        float_model = zoo.mobilenet_v2(width=1.0, size=224, num_classes=1000, seed=0)
        for fmt, path in paths.items():
            q = zoo.quantize(float_model, fmt=fmt, per_channel=True, activation_type="uint8", weight_type="int8",
                             reduce_range=True, seed=0)
            path.write_bytes(q.SerializeToString())
    return {**paths, "tflite": tfl}


def _median_ms(fn: Callable[[], object], runs: int) -> float:
    fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def _n(threads: int) -> str:
    return f"{threads} thread{'s' * (threads != 1)}"


def _feed_for(name: str, shape, elem: str) -> dict[str, np.ndarray]:
    """The seeded input of a one-input model: standard normal floats, or uniform 8-bit integers."""
    rng = np.random.default_rng(7)
    shape = [d if isinstance(d, int) and d > 0 else 1 for d in shape]
    if "uint8" in elem or "int8" in elem:
        dt = np.dtype(np.uint8 if "uint8" in elem else np.int8)
        return {name: rng.integers(np.iinfo(dt).min, np.iinfo(dt).max + 1, shape).astype(dt)}
    return {name: rng.standard_normal(shape).astype(np.float32)}


LABEL = 40  # the runtime column


def run_models(threads: int, models: dict[str, Path] | None = None) -> int:
    """The whole MobileNetV2 through vkinfer.InferenceSession on the CPU and on Vulkan, against ONNX
    Runtime, every runtime on `threads` CPU threads (each row says so, from the session's own setting):
    identical outputs, top-5 classes, median latency. `models`: build_models()'s keys (default: built).
    Returns the number of mismatches."""
    import onnxruntime as ort

    from .benchmark.engines.onnxruntime import ort_session_options
    from .session import InferenceSession

    print(f"\nWhole model: MobileNetV2 1.0/224, seeded weights, quantized by onnxruntime.quantization; every "
          f"runtime on {_n(threads)} of the CPU (a Vulkan row: its CPU parts)")
    failed = 0
    print(f"{'format':<10} {'runtime':<{LABEL}} {'result':<24} {'top-5 classes':<30} {'median ms':>10}")
    models = dict(build_models() if models is None else models)
    tflite_path = models.pop("tflite")
    for fmt, path in models.items():
        ref = ort.InferenceSession(str(path), ort_session_options(threads), providers=["CPUExecutionProvider"])
        i = ref.get_inputs()[0]
        feed = _feed_for(i.name, i.shape, i.type)
        want = ref.run(None, feed)[0]
        ort_threads = ref.get_session_options().intra_op_num_threads
        rows = [(f"onnxruntime ({_n(ort_threads)})", want, _median_ms(lambda r=ref, f=feed: r.run(None, f), 20))]
        for device, runs in (("cpu", 20), ("vulkan", 3)):
            sess = InferenceSession(str(path), device=device, threads=threads)
            y = sess.run(None, feed)[0]
            rows.append((_label(sess, device, feed), y, _median_ms(lambda s=sess, f=feed: s.run(None, f), runs)))
        for label, y, ms in rows:
            same = np.array_equal(y, want)
            failed += not same
            top5 = " ".join(map(str, np.argsort(-y.reshape(-1), kind="stable")[:5]))
            print(f"{fmt:<10} {label:<{LABEL}} {'identical to ORT' if same else 'DIFFERENT':<24} {top5:<30} "
                  f"{ms:10.2f}")
    return failed + run_tflite_model(tflite_path, threads)


def _label(sess, device: str, feed: dict) -> str:
    """Row label: the device, the CPU threads the session runs on (read back from it; on Vulkan those of its CPU
    parts), and on Vulkan how many submissions one run of the compiled plan takes."""
    plan = sess.plan(feed)
    threads = _n(sess._threads())
    if device == "vulkan" and plan is not None:
        return f"vkinfer vulkan ({threads}, {plan.submits} submit/run)"
    return f"vkinfer {device} ({threads})"


def tflite_verdict(y: np.ndarray, want: np.ndarray) -> tuple[str, bool]:
    """(result text, failed) for int8 logits against TFLite's: identical, or different (a failure, with the
    largest difference and the share of values differing)."""
    if y.shape != want.shape or y.dtype != want.dtype:
        return "DIFFERENT (shape/type)", True
    d = np.abs(y.astype(np.int64) - want.astype(np.int64))
    if not d.any():
        return "identical to TFLite", False
    return f"DIFFERENT: up to {int(d.max())} LSB ({100 * float(np.mean(d > 0)):.1f}% differ)", True


def run_tflite_model(path: Path, threads: int) -> int:
    """The int8 TFLite MobileNetV2 through vkinfer.InferenceSession on the CPU and on Vulkan, against
    ai-edge-litert's Interpreter, all on `threads` CPU threads, comparing the int8 ``logits`` (the first output
    where there is none of that name). Returns the number of failures."""
    from ai_edge_litert.interpreter import Interpreter

    from .session import InferenceSession

    blob = path.read_bytes()
    it = Interpreter(model_content=blob, num_threads=threads)
    it.allocate_tensors()
    inp = it.get_input_details()[0]
    x = np.random.default_rng(7).uniform(-1.0, 1.0, tuple(inp["shape"])).astype(np.float32)
    it.set_tensor(inp["index"], x)
    outs = it.get_output_details()
    out = next((d for d in outs if d["name"] == "logits"), outs[0])
    it.invoke()
    want = it.get_tensor(out["index"]).copy()
    rows = [(f"ai-edge-litert ({_n(threads)})", want, _median_ms(it.invoke, 20))]
    for device, runs in (("cpu", 20), ("vulkan", 3)):
        sess = InferenceSession(blob, device=device, threads=threads)
        feed = {inp["name"]: x}
        y = sess.run([out["name"]], feed)[0]
        rows.append((_label(sess, device, feed), y,
                     _median_ms(lambda s=sess, f=feed, o=out["name"]: s.run([o], f), runs)))
    failed = 0
    for label, y, ms in rows:
        text, bad = tflite_verdict(y, want)
        failed += bad
        top5 = " ".join(map(str, np.argsort(-y.reshape(-1).astype(np.int64), kind="stable")[:5]))
        print(f"{'tflite':<10} {label:<{LABEL}} {text:<24} {top5:<30} {ms:10.2f}")
    return failed


if __name__ == "__main__":
    raise SystemExit(main())
