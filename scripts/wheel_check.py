"""The installed wheel's checks, run by scripts/wheel-check.sh inside the fresh venv (and `time` in the dev tree).

    python wheel_check.py models DIR        build the zoo models once (ONNX Runtime quantizes them) into DIR
    python wheel_check.py check DIR         cpu and lavapipe sessions against ONNX Runtime, bit-exact; what the
                                            installed package must and must not use; JSON on the last line
    python wheel_check.py time DIR          import, MobileNetV2 cpu session creation and run times (JSON)
    python wheel_check.py corrupt SPIRV     a packaged SPIR-V file altered: the Vulkan session is refused
    python wheel_check.py novulkan DIR      (run with no usable libvulkan.so.1) import and cpu work, vulkan raises
                                            VulkanUnavailableError naming what to install
Only the standard library is imported before vkinfer, so `time` measures vkinfer's own import.
"""
import json
import os
import sys
import time
from pathlib import Path

# (zoo builder, its keyword arguments, quantize keyword arguments); MobileNetV2 1.0/224 as `make demo` builds it.
MODELS = {
    "mobilenet_v2": ("mobilenet_v2", {"width": 1.0, "size": 224, "num_classes": 1000},
                     {"per_channel": True, "reduce_range": True}),
    "mobilenet_v1": ("mobilenet_v1", {}, {}),
    "shufflenet_like": ("shufflenet_like", {}, {}),
    "resnext_like": ("resnext_like", {}, {}),
    "dilated_net": ("dilated_net", {}, {}),
    "mlp": ("mlp", {}, {}),
}
TIMED = "mobilenet_v2"
# The Vulkan device of `check` (the NVIDIA one on the GPU machine: WHEEL_CHECK_DEVICE=vulkan:nvidia).
VK_DEVICE = os.environ.get("WHEEL_CHECK_DEVICE", "vulkan:lavapipe")


def _feed(sess, seed=7):
    import numpy as np

    rng = np.random.default_rng(seed)
    i = sess.get_inputs()[0]
    return {i.name: rng.standard_normal([d if isinstance(d, int) and d > 0 else 1 for d in i.shape])
            .astype(np.float32)}


def models(d: Path) -> None:
    import logging

    from vkinfer.testing import tflite_zoo, zoo

    logging.getLogger().setLevel(logging.ERROR)
    d.mkdir(parents=True, exist_ok=True)
    for name, (builder, kw, qkw) in MODELS.items():
        p = d / f"{name}.onnx"
        if not p.exists():
            q = zoo.quantize(zoo.BUILDERS[builder](seed=0, **kw), fmt="qoperator", seed=0, **qkw)
            p.write_bytes(q.SerializeToString())
    t = d / "mobilenet_v2_small.tflite"
    if not t.exists():
        t.write_bytes(tflite_zoo.mobilenet_v2(seed=0, size=64, width=0.35, num_classes=10))


def check(d: Path) -> dict:
    import shutil

    t0 = time.perf_counter()
    import vkinfer

    t_import = time.perf_counter() - t0
    import numpy as np
    import onnx

    from vkinfer import _glsl, _vk
    from vkinfer.session import InferenceSession
    from vkinfer.testing import zoo

    out = {"import_s": round(t_import, 3)}
    site = Path(vkinfer.__file__).resolve().parent
    assert str(site).startswith(sys.prefix), f"vkinfer imported from {site}, not from the venv {sys.prefix}"
    assert shutil.which("glslangValidator") is None, "glslangValidator is on PATH"
    assert not (site.parent / "shaders").exists() and not (site / "_native").exists(), "build sources installed"
    pkg = _glsl.packaged()
    assert pkg is not None, "no packaged SPIR-V"
    out["spirv_variants"] = len(pkg)
    cache = Path(os.environ["VKINFER_CACHE"])
    assert not any(cache.rglob("*.spv")), "the SPIR-V cache is not empty at the start"

    results, dispatched = {}, set()
    for name in MODELS:
        path = d / f"{name}.onnx"
        model = onnx.load(str(path))
        cpu = InferenceSession(str(path), device="cpu")
        feed = _feed(cpu)
        want = zoo.ort_run(model, feed)
        if name == TIMED:  # the CPU alone, before any Vulkan: one native call (the plan runner), the loader closed
            from vkinfer.compiler.native import NativePlan

            cpu.run(None, feed)
            assert NativePlan.build(cpu.plan(feed), 1) is not None, "a cpu plan is not one native call (_planrun?)"
            assert "vkinfer._vkcore" not in sys.modules, "a cpu session imported the Vulkan module"
            maps = Path("/proc/self/maps").read_text()
            assert "libvulkan" not in maps, "a cpu session loaded libvulkan"
        row = {}
        for dev, sess in (("cpu", cpu), (VK_DEVICE, None)):
            if sess is None:
                sess = InferenceSession(str(path), device=VK_DEVICE)
            got = sess.run(None, feed)
            same = len(got) == len(want) and all(g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g, w)
                                                 for g, w in zip(got, want, strict=True))
            row[dev] = "same bits" if same else "DIFFERS"
        results[name] = row
    for dev in _vk._open.values():
        dispatched |= dev.dispatched
    # A TFLite model (the tflite schema reader and flatbuffers, the other declared dependencies): cpu and
    # lavapipe agree (no LiteRT here to be the oracle).
    tfl = d / "mobilenet_v2_small.tflite"
    a, b = (InferenceSession(str(tfl), device=dv) for dv in ("cpu", VK_DEVICE))
    feed = _feed(a)
    ya, yb = a.run(None, feed), b.run(None, feed)
    results["mobilenet_v2_small.tflite"] = {f"cpu = {VK_DEVICE}": "same bits" if all(
        np.array_equal(x, y) for x, y in zip(ya, yb, strict=True)) else "DIFFERS"}
    out["models"] = results
    out["vulkan_device"] = str(next(iter(_vk._open.values())).info) if _vk._open else None
    out["shaders_dispatched"] = sorted(dispatched)
    out["spirv_compiled"] = len(list(cache.rglob("*.spv")))
    out["ok"] = (all(v == "same bits" for r in results.values() for v in r.values())
                 and out["spirv_compiled"] == 0)
    return out


def timing(d: Path) -> dict:
    t0 = time.perf_counter()
    import vkinfer  # noqa: F401

    t_import = time.perf_counter() - t0
    import numpy as np

    from vkinfer.session import InferenceSession

    path = str(d / f"{TIMED}.onnx")
    t0 = time.perf_counter()
    sess = InferenceSession(path, device="cpu")
    t_create = time.perf_counter() - t0
    feed = _feed(sess)
    t0 = time.perf_counter()
    sess.run(None, feed)
    t_first = time.perf_counter() - t0
    runs = []
    for _ in range(30):
        t0 = time.perf_counter()
        sess.run(None, feed)
        runs.append(time.perf_counter() - t0)
    return {"from": str(Path(vkinfer.__file__).parent), "import_s": round(t_import, 4),
            "create_s": round(t_create, 4), "first_run_ms": round(1e3 * t_first, 3),
            "run_ms": round(1e3 * float(np.median(runs)), 3), "threads": sess._run_threads}


def corrupt(spirv: Path) -> dict:
    """Copy of the packaged SPIR-V with one byte of the convolution shader flipped, used through
    $VKINFER_SPIRV_DIR: the session is refused with ShaderCompileError before any dispatch."""
    import shutil
    import tempfile

    import vkinfer
    from vkinfer.session import InferenceSession
    from vkinfer.testing import zoo

    tmp = Path(tempfile.mkdtemp(prefix="vkinfer-corrupt-"))
    shutil.copytree(spirv, tmp / "spirv")
    for f in (tmp / "spirv").glob("qlinear_*.spv"):
        b = bytearray(f.read_bytes())
        b[len(b) // 2] ^= 0x40
        f.write_bytes(bytes(b))
    os.environ["VKINFER_SPIRV_DIR"] = str(tmp / "spirv")
    path = tmp / "m.onnx"
    path.write_bytes(zoo.quantize(zoo.BUILDERS["mobilenet_v1"](seed=0)).SerializeToString())
    try:
        InferenceSession(str(path), device="vulkan:lavapipe").run(None, {})
    except vkinfer.ShaderCompileError as e:
        msg = str(e)
        return {"refused": "fails its checksum" in msg, "message": msg[:300]}
    except Exception as e:  # noqa: BLE001 - reported
        return {"refused": False, "message": f"{type(e).__name__}: {e}"[:300]}
    return {"refused": False, "message": "the session ran"}


def novulkan(d: Path) -> dict:
    import ctypes

    try:
        ctypes.CDLL("libvulkan.so.1")
        return {"ok": False, "message": "libvulkan.so.1 loads: run this without it"}
    except OSError:
        pass
    import vkinfer
    from vkinfer.session import InferenceSession

    sess = InferenceSession(str(d / "mobilenet_v1.onnx"), device="cpu")
    sess.run(None, _feed(sess))
    try:
        InferenceSession(str(d / "mobilenet_v1.onnx"), device="vulkan")
    except vkinfer.VulkanUnavailableError as e:
        return {"ok": "libvulkan1" in str(e), "message": str(e)[:300]}
    except Exception as e:  # noqa: BLE001 - reported
        return {"ok": False, "message": f"{type(e).__name__}: {e}"[:300]}
    return {"ok": False, "message": "a vulkan session was created"}


if __name__ == "__main__":
    cmd, arg = sys.argv[1], Path(sys.argv[2])
    if cmd == "models":
        models(arg)
        res = {"ok": True}
    else:
        res = {"check": check, "time": timing, "corrupt": corrupt, "novulkan": novulkan}[cmd](arg)
    print(json.dumps(res))
