"""What the wheel relies on, checked in the development tree (scripts/wheel-check.sh checks the built wheel itself):
packaged SPIR-V (vkinfer/_glsl.py) used without glslang and refused when altered, every variant the lowerings ask
for packaged, the Vulkan module imported only when a Vulkan device is asked for (and its absence turned into
VulkanUnavailableError naming what to install), declared dependencies that cover the run-time imports as ranges,
and an sdist that carries what CMakeLists.txt builds from."""

from __future__ import annotations

import ast
import dataclasses
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import numpy as np
import pytest

import vkinfer
from vkinfer import _glsl, _vk

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


@pytest.fixture
def fresh_glsl(monkeypatch, tmp_path):
    """_glsl with empty in-process caches and a private disk cache, restored afterwards."""
    monkeypatch.setenv("VKINFER_CACHE", str(tmp_path / "cache"))
    for var in ("VKINFER_SPIRV_DIR", "VKINFER_COMPILE_SHADERS", "VKINFER_SHADER_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(_glsl, "_futures", {})
    _glsl.spirv.cache_clear()
    yield _glsl
    _glsl.spirv.cache_clear()


def _package(tmp_path: Path, names: list[str]) -> Path:
    exe = shutil.which("glslangValidator")
    if exe is None:
        pytest.fail("glslangValidator missing: `make test` installs glslang-tools")
    out = tmp_path / "spirv"
    _glsl.build_package(out, exe, names=names)
    return out


def _conv(dev):
    from support.chain_cases import chain_specs

    from vkinfer.reference import qlinear_conv
    from vkinfer.vulkan import QLinearConv

    spec = chain_specs(1, seed=5)[0]
    op = QLinearConv(spec, dev)
    xb, yb = dev.buffer(4 * op.in_words), dev.buffer(4 * op.out_words)
    return op, xb, yb, spec, qlinear_conv(dataclasses.replace(spec, x=spec.x))


def test_packaged_spirv_runs_without_glslang_and_refuses_an_altered_file(fresh_glsl, tmp_path, monkeypatch):
    """A convolution runs from packaged SPIR-V ($VKINFER_SPIRV_DIR) with glslang unavailable and nothing compiled
    into the cache; the packaged push-shapes layout equals the one read from the source. Then one byte of the
    file changed: Device.program raises ShaderCompileError naming the file and the checksum, so no pipeline is
    made and nothing is dispatched; a variant not packaged is named with the run-time compile hint."""
    from vkinfer.vulkan.qlinear_conv import choose_kernel

    dev = _vk.Device(_vk._pick("lavapipe"), pipeline_threads=0)
    op, xb, yb, spec, want = _conv(dev)
    kernel = choose_kernel(spec)
    pkg_dir = _package(tmp_path, [kernel])
    monkeypatch.setenv("VKINFER_SPIRV_DIR", str(pkg_dir))

    def no_glslang():
        raise AssertionError("glslang was asked for")

    monkeypatch.setattr(_glsl, "_glslang", no_glslang)
    pkg = _glsl.packaged()
    assert pkg is not None and len(pkg) == 2 * (1 + len(_glsl.DEFINE_SETS.get(kernel, [])))
    assert _glsl.push_shapes(kernel) == _glsl._push_shapes_source((_glsl.SHADER_DIR / f"{kernel}.comp").read_text())[1]
    seq = dev.sequence()
    seq.upload(xb)
    seq.barrier()
    seq.dispatch(op.bind(xb, yb))
    seq.barrier()
    seq.download(yb)
    xb.write_nchw(spec.x)
    seq.run()
    np.testing.assert_array_equal(yb.read_nchw(op.out_shape, spec.out.dtype), want)
    assert not list((tmp_path / "cache").rglob("*.spv"))

    defines = tuple(sorted((k, str(v)) for k, v in (op.defines or {}).items()))
    f = pkg_dir / _glsl._variant_file(kernel, defines, dev.push_shapes)
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 1
    f.write_bytes(bytes(data))
    _glsl.spirv.cache_clear()
    dispatched = set(dev.dispatched)
    with pytest.raises(vkinfer.ShaderCompileError, match=f"{f.name}.*fails its checksum"):
        op.bind(xb, yb)
    assert dev.dispatched == dispatched
    with pytest.raises(vkinfer.ShaderCompileError, match="max_pool.*not among the.*packaged.*VKINFER_COMPILE_SHADERS"):
        dev.program("max_pool", [xb, yb], (1, 1, 1))
    monkeypatch.setenv("VKINFER_COMPILE_SHADERS", "1")  # the developer path takes over
    assert _glsl.packaged() is None


def test_spirv_dir_without_manifest_is_an_error(fresh_glsl, tmp_path, monkeypatch):
    monkeypatch.setenv("VKINFER_SPIRV_DIR", str(tmp_path))
    with pytest.raises(vkinfer.ShaderCompileError, match="holds no manifest.json"):
        _glsl.packaged()
    (tmp_path / "manifest.json").write_text('{"format": 99}')
    with pytest.raises(vkinfer.ShaderCompileError, match="manifest.*unreadable.*format 99"):
        _glsl.packaged()


def test_variants_cover_what_the_lowerings_ask_for():
    """Every shader in both forms (Device.push_shapes is chosen per device), and the defines the lowerings pass
    (a Device.program call with defines must list them in _glsl.DEFINE_SETS; the convolution and matmul lowerings
    pick their shader at run time and pass DOT_DEFINES, so every kernel of DOT_KERNELS must have that set)."""
    from vkinfer.vulkan.qlinear_conv import DOT_DEFINES, DOT_KERNELS, FRQ_DEFINES, KERNELS

    def as_set(d: dict) -> tuple:
        return tuple(sorted((k, str(v)) for k, v in d.items()))

    want = {(k, as_set(d)) for k in DOT_KERNELS for d in (DOT_DEFINES, {**DOT_DEFINES, **FRQ_DEFINES})}
    want |= {(k, as_set(FRQ_DEFINES)) for k in KERNELS}
    assert all(d in _glsl.DEFINE_SETS.get(k, []) for k, d in want)
    assert {(k, d, pushed) for k, d in want for pushed in (False, True)} <= set(_glsl.variants())
    got = set(_glsl.variants())
    names = {p.stem for p in (ROOT / "shaders").glob("*.comp")}
    assert {(n, (), pushed) for n in names for pushed in (False, True)} <= got
    for py in sorted((ROOT / "vkinfer").rglob("*.py")):
        for node in ast.walk(ast.parse(py.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "program":
                shader = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else None
                has_defines = len(node.args) > 5 or any(k.arg == "defines" for k in node.keywords)
                if has_defines and shader is None:  # a kernel chosen at run time: qlinear_conv.kernel_defines
                    assert "self.defines" in ast.unparse(node), f"{py.relative_to(ROOT)}:{node.lineno}"
                    continue
                assert not has_defines or (shader in _glsl.DEFINE_SETS), \
                    f"{py.relative_to(ROOT)}:{node.lineno} passes defines: list its sets in _glsl.DEFINE_SETS"


_NO_VULKAN_CHILD = """
import ctypes, sys
try:
    ctypes.CDLL("libvulkan.so.1")
    sys.exit("libvulkan.so.1 still loads")
except OSError:
    pass
import numpy as np
import vkinfer
from vkinfer.session import InferenceSession
sess = InferenceSession(sys.argv[1], device="cpu")
x = np.zeros([d if isinstance(d, int) else 1 for d in sess.get_inputs()[0].shape], np.float32)
sess.run(None, {sess.get_inputs()[0].name: x})
assert "vkinfer._vkcore" not in sys.modules
try:
    InferenceSession(sys.argv[1], device="vulkan")
except vkinfer.VulkanUnavailableError as e:
    print("ERROR:", e)
"""


def _small_model(tmp_path: Path) -> Path:
    from vkinfer.testing import zoo

    p = tmp_path / "m.onnx"
    p.write_bytes(zoo.quantize(zoo.mlp(seed=0)).SerializeToString())
    return p


def test_import_and_cpu_sessions_never_load_vulkan(tmp_path):
    code = ("import sys, numpy as np\nimport vkinfer\nfrom vkinfer.session import InferenceSession\n"
            "s = InferenceSession(sys.argv[1], device='cpu')\n"
            "x = np.zeros([d if isinstance(d, int) else 1 for d in s.get_inputs()[0].shape], np.float32)\n"
            "s.run(None, {s.get_inputs()[0].name: x})\n"
            "from vkinfer.compiler.native import NativePlan\n"  # a CPU plan's one native call needs no Vulkan
            "n = NativePlan.build(s.plan({s.get_inputs()[0].name: x}), 1)\n"
            "assert n is not None and type(n.raw.run_feed({s.get_inputs()[0].name: x})) is list, 'not one call'\n"
            "assert 'vkinfer._vkcore' not in sys.modules, 'the Vulkan module was imported'\n"
            "assert 'libvulkan' not in open('/proc/self/maps').read(), 'libvulkan was loaded'\n")
    r = subprocess.run([sys.executable, "-c", code, str(_small_model(tmp_path))], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]


def test_without_a_vulkan_loader_import_and_cpu_work_and_vulkan_says_what_to_install(tmp_path):
    """An unusable libvulkan.so.1 first on the library search path (an empty file: "file too short"), as a
    broken or missing loader makes it; needs no root and no mount namespace, so it runs on every machine."""
    fake = tmp_path / "novulkan"
    fake.mkdir()
    (fake / "libvulkan.so.1").write_bytes(b"")
    path = os.pathsep.join(filter(None, [str(fake), os.environ.get("LD_LIBRARY_PATH")]))
    env = {**os.environ, "LD_LIBRARY_PATH": path}
    r = subprocess.run([sys.executable, "-c", _NO_VULKAN_CHILD, str(_small_model(tmp_path))], capture_output=True,
                       text=True, cwd=ROOT, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "ERROR: the Vulkan loader (libvulkan.so.1) is missing or unusable" in r.stdout
    assert "apt-get install libvulkan1 mesa-vulkan-drivers" in r.stdout


class _Refuse:
    """A meta-path finder that fails the import of vkinfer._vkcore as the dynamic loader would."""

    def __init__(self, msg: str):
        self.msg = msg

    def find_spec(self, name, path=None, target=None):
        if name == "vkinfer._vkcore":
            raise ImportError(self.msg)
        return None


@pytest.mark.parametrize("msg,expect", [
    ("libvulkan.so.1: cannot open shared object file: No such file or directory",
     r"Vulkan loader \(libvulkan.so.1\) is missing.*apt-get install libvulkan1"),
    ("cannot import name '_vkcore' from 'vkinfer'", r"cannot load on this Python.*_vkcore\.cpython-.*--no-binary"),
])
def test_vulkan_module_import_errors_become_vulkan_unavailable(monkeypatch, msg, expect):
    monkeypatch.delitem(sys.modules, "vkinfer._vkcore", raising=False)
    monkeypatch.delattr(vkinfer, "_vkcore", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Refuse(msg), *sys.meta_path])
    _vk._native.cache_clear()
    try:
        with pytest.raises(vkinfer.VulkanUnavailableError, match=expect):
            _vk._native()
    finally:
        _vk._native.cache_clear()


# Top-level modules vkinfer imports at run time, by the distribution that provides them (core or an extra).
_PROVIDERS = {"numpy": "numpy", "onnx": "onnx", "tflite": "tflite", "flatbuffers": "flatbuffers", "scipy": "scipy",
              "onnxruntime": "onnxruntime", "ai_edge_litert": "ai-edge-litert", "ncnn": "ncnn", "tqdm": "tqdm",
              "matplotlib": "matplotlib", "ray": "ray", "atheris": "atheris"}
# The GPU machine's versions (seen by scripts/wheel-gpu.sh): the wheel must install beside them with no download.
_GPU_MACHINE = {"numpy": "2.5.2", "onnx": "1.23.1", "onnxruntime": "1.30.0", "scipy": "1.18.1", "protobuf": "7.36.2"}


def test_declared_dependencies_are_ranges_that_cover_the_imports():
    from packaging.requirements import Requirement

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {Requirement(r).name: Requirement(r) for r in meta["dependencies"]}
    extras = {Requirement(r).name: Requirement(r) for rs in meta["optional-dependencies"].values() for r in rs}
    for req in [*core.values(), *extras.values()]:
        assert not any(s.operator in ("==", "===") for s in req.specifier), f"{req} is a pin, not a range"
    stdlib = set(sys.stdlib_module_names)
    for py in sorted((ROOT / "vkinfer").rglob("*.py")):
        for node in ast.walk(ast.parse(py.read_text())):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
            for m in mods:
                top = m.split(".")[0]
                if top in stdlib or top == "vkinfer":
                    continue
                assert top in _PROVIDERS, f"{py.relative_to(ROOT)} imports {top}: declare it in pyproject.toml"
                dist = _PROVIDERS[top]
                assert dist in core or dist in extras, f"{py.relative_to(ROOT)} imports {top}, not declared"
    assert {"numpy", "onnx", "tflite", "flatbuffers", "scipy"} <= set(core)
    for dist, version in _GPU_MACHINE.items():
        req = core.get(dist) or extras.get(dist)
        assert req is None or req.specifier.contains(version), f"{req} refuses the GPU machine's {dist} {version}"


def test_sdist_carries_the_native_sources(tmp_path):
    r = subprocess.run([sys.executable, "-m", "build", "--sdist", "--no-isolation", "-o", str(tmp_path), str(ROOT)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (sdist,) = tmp_path.glob("vkinfer-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    native = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "vkinfer" / "_native").iterdir() if p.is_file())
    assert {"vkinfer/_native/planrun.c", "vkinfer/_native/vk_api.h", "vkinfer/_native/vk_core.hpp",
            "vkinfer/_native/vk_module.cpp"} <= set(native)
    for need in ("CMakeLists.txt", "cmake/replace.cmake", "cpu_fallback/Makefile", "cpu_fallback/src/graph.c",
                 "shaders/qcommon.glsl", "shaders/qlinear_conv.comp", "vkinfer/_glsl.py", *native):
        assert need in names, f"the sdist lacks {need}"
    assert not [n for n in names if n.endswith((".so", ".spv")) or n.startswith(("tests/", "build/", ".gpu/"))]
