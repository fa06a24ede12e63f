"""The native lstm operator (cpu_fallback/src/ops/lstm.c) under AddressSanitizer + UBSan: a subprocess over the
sanitizer build of the library runs every option (each direction, bias, peepholes, clip, input_forget,
sequence_lens with zero lengths, initial state) on odd sizes (hidden not a multiple of the 16-unit blocks, 4H not
of the 64-column panels, input across MLAS's 256-wide K blocks, row counts not a multiple of 4) with external
buffers at odd addresses, one and two threads, Y_h and Y_c written after Y (flag STATE) or not, and the scratch
filled with zeros or with NaN bytes (a read of scratch before it is written would show); this process compares the
outputs with the normal build's and both with the numpy definition (vkinfer/reference/lstm.py, ONNX Runtime's
bits: tests/ops/test_lstm.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from support.cpu_build import ASAN_LIB, asan_env

ROOT = Path(__file__).resolve().parents[2]
F = np.float32

# (seq, batch, input, hidden, direction, options)
CASES = [
    (1, 1, 1, 1, "forward", {}),
    (3, 3, 5, 17, "reverse", {"bias": True, "init": True}),
    (4, 2, 257, 15, "bidirectional", {"bias": True, "peep": True, "init": True, "lens": [4, 1]}),
    (5, 3, 9, 33, "forward", {"peep": True, "clip": 0.5, "lens": [0, 5, 2]}),
    (2, 5, 7, 3, "bidirectional", {"input_forget": 1, "bias": True, "lens": [2, 0, 1, 2, 1]}),
    (3, 1, 300, 260, "forward", {"bias": True, "clip": 3.0}),
    (6, 2, 4, 20, "reverse", {"init": True, "peep": True, "input_forget": 1, "lens": [0, 6]}),
    (2, 2, 6, 5, "bidirectional", {"bias": True, "clip": 1.5, "edge": True}),
]


def make_case(k: int):
    """The inputs of CASES[k]: (cfg, x, [W, R, B, lens, h0, c0, P]) with None where absent."""
    s, b, i, h, direction, o = CASES[k]
    rng = np.random.default_rng(50 + k)
    nd = 2 if direction == "bidirectional" else 1
    w = (rng.standard_normal((nd, 4 * h, i)) * (1.5 / np.sqrt(i))).astype(F)
    r = (rng.standard_normal((nd, 4 * h, h)) * (1.5 / np.sqrt(h))).astype(F)
    bias = rng.standard_normal((nd, 8 * h)).astype(F) if o.get("bias") else None
    lens = np.array(o["lens"], np.int32) if "lens" in o else None
    h0 = rng.standard_normal((nd, b, h)).astype(F) if o.get("init") else None
    c0 = (rng.standard_normal((nd, b, h)) * 2).astype(F) if o.get("init") else None
    p = rng.standard_normal((nd, 3 * h)).astype(F) if o.get("peep") else None
    x = (rng.standard_normal((s, b, i)) * 2).astype(F)
    if o.get("edge"):
        x.flat[rng.choice(x.size, 6, replace=False)] = [np.nan, np.inf, -np.inf, -0.0, 1e-45, 3e38]
    attrs = {"hidden_size": h, "direction": direction, "input_forget": o.get("input_forget", 0)}
    if "clip" in o:
        attrs["clip"] = o["clip"]
    node = SimpleNamespace(name="lstm_asan", op="LSTM", attrs=attrs, outputs=["y"])
    return node, x, [w, r, bias, lens, h0, c0, p]


DRIVER = r'''
import sys
import numpy as np
sys.path[:0] = [sys.argv[3], sys.argv[3] + "/.."]  # this file and tests/support
from test_lstm_asan import CASES, make_case
from vkinfer.cpu import graph as G
from vkinfer.cpu.lstm import STATE, native_weights
from vkinfer.reference.lstm import check_inputs, lstm_config

F = np.float32


from vkinfer.testing.buffers import external as ext


outs = {}
for k in range(len(CASES)):
    node, x, (w, r, b, lens, h0, c0, p) = make_case(k)
    cfg = lstm_config(node)
    s, bt, i = check_inputs(node, [x, w, r, b, lens, h0, c0, p], cfg)
    nd, h = cfg["dirs"], cfg["hidden"]
    flags, weights = native_weights(cfg, w, r, b, h0, c0, p)
    lens_u = np.full(bt, s, np.uint32) if lens is None else lens.astype(np.uint32)
    state = STATE if k % 2 == 0 else 0  # y followed by Y_h and Y_c
    for threads, fill, misalign in ((1, 0x00, k % 2 == 1), (2, 0xFF, k % 2 == 0)):
        xe = ext(x, misalign)
        scr = ext(np.frombuffer(bytes([fill]) * (4 * nd * (s * bt * 4 * h + 3 * bt * h)), np.uint8), misalign)
        y = ext(np.full((s + (2 if state else 0)) * nd * bt * h, np.nan, F), misalign)
        g = G.NativeGraph(0, [xe.nbytes, scr.nbytes, y.nbytes])
        g.add("lstm", s, bt, i, h, nd, flags | state, float(cfg["clip"]), weights, lens_u, G.Ref(1, 0, xe.nbytes),
              G.Ref(2, 0, scr.nbytes), G.Ref(3, 0, y.nbytes))
        g.run([xe, scr, y], threads=threads)
        outs[f"c{k}_t{threads}"] = np.array(y)
np.savez(sys.argv[1], **outs)
print("lstm asan: ok", "library:", G.lib()._name)
'''


def _run(tmp_path: Path, env: dict, tag: str, lib: str) -> dict:
    out = tmp_path / f"{tag}.npz"
    r = subprocess.run([sys.executable, str(tmp_path / "drive.py"), str(out), "7", str(Path(__file__).parent)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    where = f"exit {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-8000:]}"
    assert "AddressSanitizer" not in r.stderr and "runtime error" not in r.stderr, where
    assert r.returncode == 0 and "lstm asan: ok" in r.stdout and f"library: {lib}" in r.stdout, where
    with np.load(out) as z:
        return {k: z[k] for k in z.files}


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a.view(np.uint32) == b.view(np.uint32)) | (np.isnan(a) & np.isnan(b))


def test_lstm_under_asan_and_ubsan_equals_the_normal_build_and_the_definition(tmp_path):
    import os

    from vkinfer.reference.lstm import lstm

    env = asan_env()
    env["PYTHONPATH"] = str(ROOT)
    (tmp_path / "drive.py").write_text(DRIVER)
    sanitized = _run(tmp_path, env, "asan", str(ASAN_LIB))
    base = {**os.environ, "PYTHONPATH": str(ROOT)}
    normal = _run(tmp_path, base, "plain", str(ROOT / "vkinfer" / "libvkinfer_cpu.so"))
    assert sorted(sanitized) == sorted(normal) and len(normal) == 2 * len(CASES)
    for k in range(len(CASES)):
        node, x, rest = make_case(k)
        want = lstm(node, [x, *rest])
        want = np.concatenate([v.ravel() for v in (want if k % 2 == 0 else want[:1])])  # with Y_h, Y_c: STATE
        for t in (1, 2):
            key = f"c{k}_t{t}"
            same = _same(normal[key], sanitized[key])
            assert same.all(), f"{key}: the sanitizer build differs at {np.argwhere(~same)[:4].tolist()}"
            same = _same(normal[key], want)
            assert same.all(), f"{key}: the native operator differs from the definition at " \
                               f"{np.argwhere(~same)[:4].tolist()}"
