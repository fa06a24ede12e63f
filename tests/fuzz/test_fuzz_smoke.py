"""The fuzz smoke run of `make test` (issue 26): the plain engine, seed 0, over the ONNX importer, the TFLite
importer and InferenceSession.run, every input on the reference, cpu and vulkan devices: no non-clean exception,
no disagreement, no hang, crash or runaway allocation.

Its inputs are fixed (seed 0, indices 0..SMOKE_RUNS-1, each made from its seed and index alone); SMOKE_SECONDS
caps the wall-clock (on this 2-core box about 50 inputs a second go through with a warm shader cache, the
other core busy, so the cap is what ends it; a cold cache or a loaded machine gets fewer through, at least
MIN_RUNS). `make fuzz` runs the same
engine (or atheris) for as long as asked; the inputs it finds are kept under tests/models/regressions/fuzz/
(tests/models/test_fuzz_regressions.py).

KNOWN_OPEN: inputs of this seed not run here, each with its reason (an open finding of another part of issue 26
is a strict xfail in test_fuzz_regressions.py, which fails once that part lands: then drop it here too).
"""

from __future__ import annotations

import io
import json

from vkinfer.testing.fuzz.engine import plain_campaign

SMOKE_RUNS = 2500
SMOKE_SECONDS = 45
MIN_RUNS = 60
KNOWN_OPEN = {
    429: "hang/onnx-89662c5d-5bf6da45e9.onnx: tiny_conv with a left pad of 2**20 passes the check (kept in "
         "test_fuzz_regressions.py, 60 s limit) but its 1x8x8x1048583 convolution is 4.8 G multiply-adds, which "
         "lavapipe (Vulkan on the CPU) takes 8 s of CPU and about 20 s of wall-clock for on 2 cores: the smoke's "
         "per-input limit",
}


def test_fuzz_smoke(tmp_path):
    log = io.StringIO()
    s = plain_campaign("onnx,tflite,run", SMOKE_RUNS, SMOKE_SECONDS, 0, tmp_path, timeout=20.0, rss_mb=2048,
                       devices=["reference", "cpu", "vulkan"], log=log, skip=frozenset(KNOWN_OPEN))
    print(json.dumps(s))
    found = [json.loads(p.read_text()) for p in sorted((tmp_path / "findings").glob("*/*.json"))]
    assert not s["findings"], "\n".join(f"{f['kind']} {f['target']}: {f.get('what', '')}: {f['detail']}"
                                        for f in found) + "\n" + log.getvalue()
    assert s["executions"] >= MIN_RUNS, s
    assert all(s["per_target"].get(t, 0) > 0 for t in ("onnx", "tflite", "run")), s
