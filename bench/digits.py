"""A small CNN trained on scikit-learn's handwritten digits, exported to ONNX and quantized by ONNX Runtime: the
labelled real-data set of `vkinfer bench --dataset` and `python -m vkinfer.benchmark.accuracy` (issue 13).

    .venv/bin/python bench/digits.py [--out build/digits] [--epochs 40] [--subset N] [--seed 0] [--reduce-range]

Data: sklearn.datasets.load_digits, 1797 real 8x8 scans of handwritten digits (16 grey levels) shipped inside
the scikit-learn wheel (no download). Pixels are scaled to [0, 1] and laid out NCHW (N, 1, 8, 8) float32. A
fixed stratified split (train_test_split, random_state=--seed) keeps 360 images (20%) for the test set;
``--subset N`` trains on N training images only (a seeded stratified draw; for tests).

Model: conv3x3(1->8, pad 1) + ReLU, conv3x3(8->16, stride 2, pad 1) + ReLU, flatten (16x4x4 = 256), dense
256 -> 10 (logits). Trained with softmax cross-entropy and Adam (lr 3e-3, minibatches of 32, reshuffled every
epoch by a seeded numpy generator; He-normal initial weights from jax.random.PRNGKey(--seed)); JAX on the CPU
is deterministic for this model, so a seed gives the same weights run after run.

Why JAX (jax + jaxlib, CPU wheels) for the training: it is a well-kept library (Google, monthly releases) whose
CPU wheels install in seconds (~90 MB, against torch's several hundred MB plus its CUDA dependencies), pin
cleanly (jax, jaxlib and three small pure-Python dependencies: opt_einsum plus ml_dtypes/numpy/scipy which
the project has already), need no compiler, and give automatic differentiation and a jit-compiled
convolution (jax.lax.conv_general_dilated, in ONNX's own NCHW/OIHW layout, so the weights export as they are).
The optimizer is jax.example_libraries.optimizers.adam, which ships in jax itself: no extra package.

Export: the float model is written with onnx.helper from the trained weights (opset 13, IR 8: Conv, Relu,
Conv, Relu, Flatten, Gemm; input ``input`` (N, 1, 8, 8) float32 with a symbolic batch N, output ``logits``
(N, 10)). It is quantized with onnxruntime.quantization.quantize_static in QDQ and QOperator formats:
per-channel symmetric int8 weights, asymmetric uint8 activations, MinMax calibration on 256 training images
(one batch each). ``--reduce-range`` quantizes the weights to 7 bits (ORT's u8 x s8 kernels on x86 without VNNI
saturate pairs of products at int16, so only 7-bit weights make ORT exact there; see the README).

Written under --out: ``digits_float.onnx``, ``digits_qdq.onnx``, ``digits_qoperator.onnx``, ``digits_test.npz``
(x float32 (N, 1, 8, 8), y int64 (N,)) and ``digits_train.json`` (seed, sizes, epochs, float accuracies,
training time). Prints the float model's train and test top-1 and the training time.

Measured on the development machine (2 cores, AVX-512 VNNI; full set, seed 0, 40 epochs): training 3-4.5 s;
float top-1 0.9806 (353/360) on the test set, 1.0 on the training set; the QDQ and QOperator models 0.9806 on
vkinfer (cpu and vulkan/llvmpipe) and ONNX Runtime alike, their outputs bit-identical. Every file is the same
byte for byte from run to run. On 300 training images and 15 epochs (the test's setting): 0.9333 everywhere.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

TEST_SIZE = 360
CALIB_IMAGES = 256
CONV1, CONV2 = 8, 16


def load_split(seed: int, subset: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test) of the digits: x float32 (N, 1, 8, 8) in [0, 1], y int64; the test set
    is a fixed stratified draw of TEST_SIZE images; `subset` keeps that many training images (stratified)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    d = load_digits()
    x = (d.data.astype(np.float32) / 16.0).reshape(-1, 1, 8, 8)
    y = d.target.astype(np.int64)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=TEST_SIZE, random_state=seed, stratify=y)
    if subset is not None and subset < len(y_tr):
        x_tr, _, y_tr, _ = train_test_split(x_tr, y_tr, train_size=subset, random_state=seed, stratify=y_tr)
    return (np.ascontiguousarray(x_tr), np.ascontiguousarray(y_tr), np.ascontiguousarray(x_te),
            np.ascontiguousarray(y_te))


def init_params(seed: int) -> dict[str, np.ndarray]:
    """He-normal weights, zero biases, from jax.random.PRNGKey(seed)."""
    import jax

    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(seed), 3)

    def he(k, shape, fan_in):
        return jax.random.normal(k, shape, dtype=np.float32) * np.float32(np.sqrt(2.0 / fan_in))

    return {"w1": he(k1, (CONV1, 1, 3, 3), 9), "b1": np.zeros(CONV1, np.float32),
            "w2": he(k2, (CONV2, CONV1, 3, 3), 9 * CONV1), "b2": np.zeros(CONV2, np.float32),
            "w3": he(k3, (10, CONV2 * 16), CONV2 * 16), "b3": np.zeros(10, np.float32)}


def forward(params, x):
    """The logits (N, 10) of images x (N, 1, 8, 8): the exported ONNX graph's computation, in JAX."""
    import jax
    import jax.numpy as jnp

    dn = ("NCHW", "OIHW", "NCHW")
    h = jax.lax.conv_general_dilated(x, params["w1"], (1, 1), ((1, 1), (1, 1)), dimension_numbers=dn)
    h = jax.nn.relu(h + params["b1"][None, :, None, None])
    h = jax.lax.conv_general_dilated(h, params["w2"], (2, 2), ((1, 1), (1, 1)), dimension_numbers=dn)
    h = jax.nn.relu(h + params["b2"][None, :, None, None])
    h = h.reshape(h.shape[0], -1)
    return jnp.dot(h, params["w3"].T) + params["b3"]


def train(x: np.ndarray, y: np.ndarray, *, epochs: int, seed: int, batch: int = 32,
          lr: float = 3e-3) -> dict[str, np.ndarray]:
    """Adam on softmax cross-entropy; returns the trained parameters as float32 numpy arrays."""
    import jax
    import jax.numpy as jnp
    from jax.example_libraries import optimizers

    def loss(params, xb, yb):
        logp = jax.nn.log_softmax(forward(params, xb))
        return -jnp.mean(jnp.take_along_axis(logp, yb[:, None], axis=1))

    opt_init, opt_update, get_params = optimizers.adam(lr)

    @jax.jit
    def step(i, state, xb, yb):
        g = jax.grad(loss)(get_params(state), xb, yb)
        return opt_update(i, g, state)

    state = opt_init(init_params(seed))
    rng = np.random.default_rng(seed)
    n, i = len(y), 0
    for _ in range(epochs):
        order = rng.permutation(n)
        for s in range(0, n - batch + 1 if n >= batch else 1, batch):  # full batches only: one jit shape
            idx = order[s:s + batch]
            state = step(i, state, x[idx], y[idx])
            i += 1
    return {k: np.asarray(v, dtype=np.float32) for k, v in get_params(state).items()}


def predict(params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    """Top-1 class of each image with the JAX model."""
    return np.asarray(forward(params, x)).argmax(axis=1)


def to_onnx(params: dict[str, np.ndarray]):
    """The float ONNX model (opset 13, IR 8) of the trained parameters: NCHW input (N, 1, 8, 8) float32."""
    from onnx import helper

    from vkinfer.testing.onnx_builder import make_model

    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                         strides=[2, 2], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("Flatten", ["r2"], ["f"], axis=1, name="flatten"),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1, name="dense"),
    ]
    return make_model(nodes, {"input": (np.float32, ["N", 1, 8, 8])}, {"logits": (np.float32, ["N", 10])},
                      {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in params.items()},
                      name="digits_cnn", producer="vkinfer-digits", check=True)


def quantize(float_path: Path, out_path: Path, calib: np.ndarray, fmt: str, reduce_range: bool = False) -> None:
    """quantize_static of `float_path` into `out_path`: per-channel symmetric int8 weights, asymmetric uint8
    activations, MinMax calibration on the images `calib` (one per batch), QDQ or QOperator (`fmt`)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Reader(CalibrationDataReader):
        def __init__(self) -> None:
            self._it: Iterator[dict[str, np.ndarray]] = ({"input": calib[i:i + 1]} for i in range(len(calib)))

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._it, None)

    formats = {"qdq": QuantFormat.QDQ, "qoperator": QuantFormat.QOperator}
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # quantize_static's advice to run quant_pre_process (nothing to fold here)
    with tempfile.TemporaryDirectory(prefix="vkinfer_digits_") as tmp:
        dst = os.path.join(tmp, "q.onnx")
        try:
                quantize_static(str(float_path), dst, Reader(), quant_format=formats[fmt], per_channel=True,
                            reduce_range=reduce_range, activation_type=QuantType.QUInt8,
                            weight_type=QuantType.QInt8, calibration_providers=["CPUExecutionProvider"],
                            extra_options={"WeightSymmetric": True, "ActivationSymmetric": False})
        finally:
            root.setLevel(level)
        q = onnx.load(dst)
    need = onnx.helper.find_min_ir_version_for(list(q.opset_import), ignore_unknown=True)
    q.ir_version = max(need, min(q.ir_version, 8))
    onnx.save(q, str(out_path))


def build(out: Path, *, epochs: int = 40, subset: int | None = None, seed: int = 0,
          reduce_range: bool = False) -> dict:
    """Train, export, quantize and write everything under `out`; returns the summary written to
    digits_train.json."""
    import onnx

    out.mkdir(parents=True, exist_ok=True)
    x_tr, y_tr, x_te, y_te = load_split(seed, subset)
    t0 = time.perf_counter()
    params = train(x_tr, y_tr, epochs=epochs, seed=seed)
    train_s = time.perf_counter() - t0
    summary = {"seed": seed, "epochs": epochs, "train_images": int(len(y_tr)), "test_images": int(len(y_te)),
               "reduce_range": reduce_range, "train_seconds": round(train_s, 2),
               "float_train_top1": float((predict(params, x_tr) == y_tr).mean()),
               "float_test_top1": float((predict(params, x_te) == y_te).mean())}
    float_path = out / "digits_float.onnx"
    onnx.save(to_onnx(params), str(float_path))
    calib = x_tr[np.random.default_rng(seed).permutation(len(x_tr))[:CALIB_IMAGES]]
    for fmt in ("qdq", "qoperator"):
        quantize(float_path, out / f"digits_{fmt}.onnx", calib, fmt, reduce_range)
    np.savez(out / "digits_test.npz", x=x_te.astype(np.float32), y=y_te.astype(np.int64))
    (out / "digits_train.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def main(argv: list[str] | None = None) -> int:
    """Command line: see the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="build/digits", help="output folder (default build/digits)")
    ap.add_argument("--epochs", type=int, default=40, help="training epochs (default 40)")
    ap.add_argument("--subset", type=int, default=None, help="train on this many training images only")
    ap.add_argument("--seed", type=int, default=0, help="seed of the split, the weights and the shuffling")
    ap.add_argument("--reduce-range", action="store_true", help="7-bit weights (ORT exact on AVX2-only x86)")
    a = ap.parse_args(argv)
    if a.epochs < 1:
        print(f"digits.py: --epochs must be at least 1, not {a.epochs}", file=sys.stderr)
        return 2
    if a.subset is not None and a.subset < 20:
        print(f"digits.py: --subset must be at least 20 (two images per class), not {a.subset}", file=sys.stderr)
        return 2
    try:
        s = build(Path(a.out), epochs=a.epochs, subset=a.subset, seed=a.seed, reduce_range=a.reduce_range)
    except OSError as e:
        print(f"digits.py: {a.out}: {e.strerror or e}", file=sys.stderr)
        return 1
    print(f"trained on {s['train_images']} images, {s['epochs']} epochs, {s['train_seconds']:.1f} s; "
          f"float top-1: train {s['float_train_top1']:.4f}, test {s['float_test_top1']:.4f} "
          f"({s['test_images']} images)")
    print(f"wrote {a.out}/digits_float.onnx, digits_qdq.onnx, digits_qoperator.onnx, digits_test.npz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
