"""SPIR-V for vkinfer's shaders: packaged with the wheel, or compiled by glslang in a development tree.

Two sources, chosen per call (`packaged()`):
- Packaged (an installed wheel): the build compiled every variant the runtime can ask for (`variants()`) into
  vkinfer/_spirv/ with a manifest of SHA-256 checksums (`build_package`, run by CMakeLists.txt). A file that fails
  its checksum is refused with ShaderCompileError, so it never reaches the driver. No glslang, no shader sources.
- Compiled (the development path): shaders/*.comp compiled on first use with glslangValidator, cached on disk
  by source text (with includes), defines and compiler. Used when no manifest is packaged (the source tree), or
  when $VKINFER_COMPILE_SHADERS=1 or $VKINFER_SHADER_DIR is set.
$VKINFER_SPIRV_DIR points at another packaged folder (a build's spirv/, for tests). SPIR-V is never committed;
it targets Vulkan 1.1 (SPIR-V 1.3), which every Vulkan 1.1 driver accepts.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from . import _cache
from .errors import ShaderCompileError

SHADER_DIR = Path(os.environ.get("VKINFER_SHADER_DIR", Path(__file__).resolve().parent.parent / "shaders"))
TARGET_ENV = "vulkan1.1"
#: Where a wheel carries its SPIR-V (CMakeLists.txt installs the build's spirv/ there).
PACKAGED_DIR = Path(__file__).resolve().parent / "_spirv"
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
MANIFEST_MAX_BYTES = 16 << 20
#: Define sets a shader is compiled with beyond none at all, by shader name. Device.program's callers (the
#: lowerings in vkinfer/vulkan/) that pass defines must list their sets here, or the
#: packaged build lacks the variant (tests/package/test_packaging.py checks the lowerings against this table).
DEFINE_SETS: dict[str, list[tuple[tuple[str, str], ...]]] = {
    # The integer-dot-product variants (vkinfer/vulkan/qlinear_conv.py DOT_KERNELS, DOT_DEFINES), each also with
    # the float32 requantization (FRQ_DEFINES), which the depthwise kernels have alone (kernel_defines).
    **{name: [(("VK_DOT", "1"),), (("VK_FRQ", "1"),), (("VK_DOT", "1"), ("VK_FRQ", "1"))]
       for name in ("qlinear_gemm", "qlinear_gemv", "qlinear_conv")},
    **{name: [(("VK_FRQ", "1"),)] for name in ("qlinear_dwconv", "qlinear_dwconv3x3", "requant_check")}}


def cache_dir() -> Path:
    """Where compiled SPIR-V is cached: $VKINFER_CACHE, else $XDG_CACHE_HOME/vkinfer or ~/.cache/vkinfer."""
    return _SPIRV_CACHE.folder()


def _check_spirv(data: bytes) -> str:
    """Why `data` is no SPIR-V module (empty when it may be one): the checksum proves the file is what was written,
    this that what was written is SPIR-V (its magic number, whole words), before any driver parses it."""
    if len(data) < 20 or len(data) % 4:
        return f"not a SPIR-V module ({len(data)} bytes, not whole 32-bit words with a header)"
    if data[:4] != b"\x03\x02\x23\x07":
        return "not a SPIR-V module (bad magic number)"
    return ""


#: Compiled SPIR-V, by variant: verified entries (vkinfer/_cache.py) of at most 16 MiB (the largest shader
#: compiles to under 64 KiB).
_SPIRV_CACHE = _cache.Entries("spirv", 16 << 20, _check_spirv)


@functools.cache
def _glslang() -> tuple[str, str]:
    exe = shutil.which("glslangValidator")
    if exe is None:
        raise ShaderCompileError("glslangValidator not found: install Debian's glslang-tools "
                                 "(apt-get install glslang-tools), or run `make test` which does")
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return exe, version


def _source_with_includes(path: Path, seen: set[Path] | None = None) -> str:
    """The shader's text plus every file it #includes (for the cache key)."""
    seen = seen if seen is not None else set()
    text = path.read_text()
    out = [text]
    for inc in re.findall(r'^\s*#include\s+"([^"]+)"', text, flags=re.M):
        p = (path.parent / inc).resolve()
        if p not in seen:
            seen.add(p)
            out.append(_source_with_includes(p, seen))
    return "\n".join(out)


_SPEC_DECL = re.compile(r"^layout\s*\(\s*constant_id\s*=\s*(\d+)\s*\)\s*const\s+(\w+)\s+(\w+)\s*=\s*[^;]+;(.*)$",
                        re.M)
_GLOBAL_CONST = re.compile(r"^const\s+int\s+(\w+)\s*=\s*([^;]+);", re.M)
_PUSH_BLOCK = re.compile(r"layout\s*\(\s*push_constant\s*\)\s*uniform\s+\w+\s*\{([^}]*)\}\s*pc\s*;")
# A specialization constant whose declaration carries this in its comment stays one in the push-shapes
# variant: it sizes an array, so it must be a compile-time constant.
KEEP_MARK = "[spec]"


@dataclass(frozen=True)
class PushShapes:
    """How a shader's push-shapes variant reads its int specialization constants: `ids` (constant_id
    values) moved into the push constants, after the shader's own `base` ints, at index constant_id."""

    ids: frozenset[int]
    base: int
    slots: int

    def push(self, spec: list[int], push: list[int]) -> tuple[list[int], list[int]]:
        """(specialization, push constants) for the variant, given the static variant's."""
        if len(push) != self.base:
            raise ValueError(f"the shader has {self.base} push constants, got {len(push)}")
        moved = [spec[i] if i in self.ids and i < len(spec) else 0 for i in range(self.slots)]
        return [0 if i in self.ids else v for i, v in enumerate(spec)], [*push, *moved]


def _push_shapes_source(text: str) -> tuple[str, PushShapes]:
    """The shader's text with every int specialization constant (unless marked KEEP_MARK) read from a push
    constant array `pc.vki_shape[constant_id]`, and global int constants computed from them turned into
    macros (a global const needs a constant initializer)."""
    ids: dict[str, int] = {}

    def to_push(m: re.Match) -> str:
        cid, typ, name, comment = int(m.group(1)), m.group(2), m.group(3), m.group(4)
        if typ != "int" or KEEP_MARK in comment:
            return m.group(0)
        ids[name] = cid
        return f"#define {name} (pc.vki_shape[{cid}])"

    out = _SPEC_DECL.sub(to_push, text)
    if not ids:
        return text, PushShapes(frozenset(), 0, 0)
    slots = max(ids.values()) + 1
    dyn = set(ids)
    for m in _GLOBAL_CONST.finditer(text):
        name, expr = m.group(1), m.group(2)
        if dyn & set(re.findall(r"\w+", expr)):
            dyn.add(name)
            out = out.replace(m.group(0), f"#define {name} ({expr})", 1)
    block = _PUSH_BLOCK.search(out)
    member = f" int vki_shape[{slots}]; "
    if block is not None:
        members = [x.strip() for x in block.group(1).split(";") if x.strip()]
        if not all(re.fullmatch(r"int\s+\w+", x) for x in members):
            raise ShaderCompileError(f"push-shapes variant needs a push block of ints, got {block.group(1)!r}")
        base = len(members)
        out = out[:block.start(1)] + block.group(1) + member + out[block.end(1):]
    else:
        base = 0
        # After the last specialization constant (declaration, or the #define that replaced it).
        lines = out.splitlines(keepends=True)
        at = max(i for i, ln in enumerate(lines) if "pc.vki_shape[" in ln or _SPEC_DECL.match(ln))
        lines.insert(at + 1, f"layout(push_constant) uniform VkiShape {{{member}}} pc;\n")
        out = "".join(lines)
    return out, PushShapes(frozenset(ids.values()), base, slots)


def push_shapes(name: str) -> PushShapes:
    """The push-constant layout of shaders/<name>.comp's push-shapes variant (see `spirv`)."""
    pkg = packaged()
    return pkg.push_shapes(name) if pkg is not None else _source_push_shapes(name)


@functools.cache
def _source_push_shapes(name: str) -> PushShapes:
    return _push_shapes_source(_shader_path(name).read_text())[1]


def _shader_path(name: str) -> Path:
    src = SHADER_DIR / f"{name}.comp"
    if not src.exists():
        raise ShaderCompileError(f"shader {src} not found (set VKINFER_SHADER_DIR to vkinfer's shaders/)")
    return src


def _compile(exe: str, src: Path, defines: tuple[tuple[str, str], ...], shapes_pushed: bool) -> bytes:
    """shaders/<name>.comp (`src`) compiled by glslang `exe` with `defines`, as its push-shapes variant or not."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.spv"
        unit = src
        if shapes_pushed:
            unit = Path(tmp) / src.name
            unit.write_text(_push_shapes_source(src.read_text())[0])
        cmd = [exe, "-V", "--target-env", TARGET_ENV, f"-I{src.parent}", *[f"-D{k}={v}" for k, v in defines],
               "-o", str(out), str(unit)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise ShaderCompileError(f"glslang failed on {src.name}:\n{r.stdout}{r.stderr}")
        return out.read_bytes()


def _cache_entry(name: str, defines: tuple[tuple[str, str], ...], shapes_pushed: bool) -> tuple[str, str]:
    """(file name, key) of a variant's cache entry: the key hashes the source text with its includes, the defines,
    the compiler and the target, and is checked against the entry's header on every read (a swapped or stale
    entry is rebuilt, never dispatched)."""
    src = _shader_path(name)
    _, version = _glslang()
    key = _cache.key_of(_source_with_includes(src), defines, version, TARGET_ENV, shapes_pushed)
    return f"{name}-{key[:32]}.spv", key


@functools.cache
def spirv(name: str, defines: tuple[tuple[str, str], ...] = (), shapes_pushed: bool = False) -> bytes:
    """SPIR-V words (as bytes) for shaders/<name>.comp compiled with the given -D defines.

    `shapes_pushed`: the variant whose int specialization constants are read from push constants
    (layout: `push_shapes(name)`), so that one pipeline serves every shape. For drivers without a
    persistent pipeline cache, where each distinct pipeline costs its compile in every process."""
    pkg = packaged()
    if pkg is not None:
        return pkg.spirv(name, defines, shapes_pushed)
    src = _shader_path(name)
    exe, _ = _glslang()
    fname, key = _cache_entry(name, defines, shapes_pushed)
    data = _SPIRV_CACHE.get(fname, key)
    if data is not None:
        return data
    data = _compile(exe, src, defines, shapes_pushed)
    why = _check_spirv(data)
    if why:
        raise ShaderCompileError(f"glslang's output for {name} is {why}")
    _SPIRV_CACHE.put(fname, key, data)  # temp file and rename: no reader sees half an entry
    return data


_futures: dict[tuple, Future] = {}
_futures_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def spirv_future(name: str, defines: tuple[tuple[str, str], ...] = (), shapes_pushed: bool = False) -> Future:
    """`spirv(...)` as a future: done at once when the SPIR-V is in this process or the disk cache, else
    compiled on a worker thread (one compile per variant however many ask). Why: a cold session compiles
    each shader variant with a glslangValidator process of ~70 ms; MobileNetV2's 6 variants took 0.51 s
    one after another, and a plan asks for all of them before it records its first dispatch."""
    global _pool
    if packaged() is not None:  # a file read: done now (a refused file's error is raised by result())
        fut = Future()
        try:
            fut.set_result(spirv(name, defines, shapes_pushed))
        except Exception as e:  # noqa: BLE001 - raised to whoever waits on it
            fut.set_exception(e)
        return fut
    key = (name, defines, shapes_pushed)
    with _futures_lock:
        fut = _futures.get(key)
        if fut is not None and not (fut.done() and fut.exception() is not None):
            return fut
        if _SPIRV_CACHE.present(_cache_entry(name, defines, shapes_pushed)[0]):
            fut = Future()
            try:
                fut.set_result(spirv(name, defines, shapes_pushed))
            except Exception as e:  # noqa: BLE001 - raised to whoever waits on it
                fut.set_exception(e)
        else:
            if _pool is None:
                _pool = ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 2),
                                           thread_name_prefix="vkinfer-glslang")
            fut = _pool.submit(spirv, name, defines, shapes_pushed)
        _futures[key] = fut
        return fut


# --- packaged SPIR-V (a wheel's vkinfer/_spirv/) ------------------------------------------------------------


def _truthy(v: str | None) -> bool:
    return (v or "").strip().lower() in ("1", "on", "yes", "true")


def variants(shader_dir: Path | None = None) -> list[tuple[str, tuple[tuple[str, str], ...], bool]]:
    """Every (shader, defines, shapes_pushed) the runtime can ask `spirv` for: each shaders/*.comp with no defines
    and with each of its DEFINE_SETS, as the static variant and as the push-shapes one (Device.push_shapes is
    chosen per device at run time). Specialization constants stay run-time values: they are not variants."""
    d = Path(shader_dir or SHADER_DIR)
    names = sorted(p.stem for p in d.glob("*.comp"))
    return [(n, defs, pushed) for n in names for defs in [(), *DEFINE_SETS.get(n, [])] for pushed in (False, True)]


def _variant_file(name: str, defines: tuple[tuple[str, str], ...], shapes_pushed: bool) -> str:
    tag = f"-{hashlib.sha256(repr(defines).encode()).hexdigest()[:12]}" if defines else ""
    return f"{name}{tag}{'.push' if shapes_pushed else ''}.spv"


def build_package(out_dir: Path, glslang: str, shader_dir: Path | None = None, jobs: int = 2,
                  names: list[str] | None = None) -> dict:
    """Compile every variant (`variants`; only shaders `names` when given) with glslang executable `glslang` into
    `out_dir`, with manifest.json: each file's SHA-256 and size, and each shader's push-shapes layout (the runtime
    has no shader sources). Returns the manifest. Run at build time by CMakeLists.txt (vkinfer/_native/
    build_spirv.py)."""
    d = Path(shader_dir or SHADER_DIR)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    r = subprocess.run([glslang, "--version"], capture_output=True, text=True)
    version = (r.stdout.splitlines() or ["unknown"])[0]
    todo = [v for v in variants(d) if names is None or v[0] in names]

    def one(v: tuple[str, tuple[tuple[str, str], ...], bool]) -> dict:
        name, defines, pushed = v
        data = _compile(glslang, d / f"{name}.comp", defines, pushed)
        fname = _variant_file(name, defines, pushed)
        (out_dir / fname).write_bytes(data)
        return {"shader": name, "defines": [list(kv) for kv in defines], "shapes_pushed": pushed, "file": fname,
                "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        entries = list(pool.map(one, todo))
    shaders = {}
    for name in sorted({v[0] for v in todo}):
        lay = _push_shapes_source((d / f"{name}.comp").read_text())[1]
        source = _source_with_includes(d / f"{name}.comp").encode()
        shaders[name] = {"source_sha256": hashlib.sha256(source).hexdigest(),
                         "push_shapes": {"ids": sorted(lay.ids), "base": lay.base, "slots": lay.slots}}
    manifest = {"format": MANIFEST_FORMAT, "target_env": TARGET_ENV, "glslang": version, "shaders": shaders,
                "variants": entries}
    _cache.write_file(out_dir / MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
    return manifest


class Packaged:
    """A folder of packaged SPIR-V: manifest.json and the files it lists (see `build_package`)."""

    def __init__(self, root: Path):
        self.root = Path(root)
        path = self.root / MANIFEST
        try:
            m = json.loads(_cache.read_file(path, MANIFEST_MAX_BYTES, follow_symlinks=True))
            if m.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format {m.get('format')!r}, this vkinfer reads {MANIFEST_FORMAT}")
            self._variants = {(v["shader"], tuple(tuple(kv) for kv in v["defines"]), bool(v["shapes_pushed"])):
                              (v["file"], v["sha256"], int(v["bytes"])) for v in m["variants"]}
            self._layouts = {n: PushShapes(frozenset(s["push_shapes"]["ids"]), int(s["push_shapes"]["base"]),
                                           int(s["push_shapes"]["slots"])) for n, s in m["shaders"].items()}
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ShaderCompileError(f"the packaged SPIR-V manifest {path} is unreadable ({e}): the installation "
                                     "is damaged; reinstall vkinfer") from e

    def __len__(self) -> int:
        return len(self._variants)

    def _hint(self) -> str:
        return ("set VKINFER_COMPILE_SHADERS=1 and VKINFER_SHADER_DIR to vkinfer's shaders/ folder to compile "
                "shaders at run time instead (needs glslangValidator)")

    def push_shapes(self, name: str) -> PushShapes:
        lay = self._layouts.get(name)
        if lay is None:
            raise ShaderCompileError(f"shader {name!r} is not among the packaged shaders in {self.root} "
                                     f"({', '.join(sorted(self._layouts))}); {self._hint()}")
        return lay

    def spirv(self, name: str, defines: tuple[tuple[str, str], ...], shapes_pushed: bool) -> bytes:
        """The variant's SPIR-V, after its checksum: ShaderCompileError for a variant not packaged, or a file
        missing, resized or altered (never handed to a driver)."""
        entry = self._variants.get((name, tuple(defines), bool(shapes_pushed)))
        what = f"{name}{' ' + str(dict(defines)) if defines else ''}{' (shapes pushed)' if shapes_pushed else ''}"
        if entry is None:
            raise ShaderCompileError(f"shader variant {what} is not among the {len(self)} packaged SPIR-V variants "
                                     f"in {self.root}; {self._hint()}")
        fname, want, size = entry
        path = self.root / fname
        try:
            # Bounded by the manifest's size (+1: a longer file fails the size check below, never read whole).
            data = _cache.read_file(path, size + 1, follow_symlinks=True)
        except OSError as e:
            raise ShaderCompileError(f"packaged SPIR-V {path} for {what} is unreadable ({e.strerror or e}): the "
                                     "installation is damaged; reinstall vkinfer") from e
        got = hashlib.sha256(data).hexdigest()
        if got != want or len(data) != size:
            raise ShaderCompileError(
                f"packaged SPIR-V {path} for {what} fails its checksum (sha256 {got[:16]}..., {len(data)} bytes; "
                f"the manifest says {want[:16]}..., {size} bytes): refused, never dispatched. The installation "
                "is damaged or was modified; reinstall vkinfer")
        return data


@functools.cache
def _load_packaged(root: str) -> Packaged:
    return Packaged(Path(root))


def packaged() -> Packaged | None:
    """The packaged SPIR-V in use, or None on the development path (compile with glslang): None when
    $VKINFER_COMPILE_SHADERS is 1/on/yes/true or $VKINFER_SHADER_DIR is set; else $VKINFER_SPIRV_DIR (which must
    hold a manifest) or vkinfer/_spirv when it holds one."""
    if _truthy(os.environ.get("VKINFER_COMPILE_SHADERS")) or os.environ.get("VKINFER_SHADER_DIR"):
        return None
    env = os.environ.get("VKINFER_SPIRV_DIR")
    if env:
        if not (Path(env) / MANIFEST).is_file():
            raise ShaderCompileError(f"$VKINFER_SPIRV_DIR={env} holds no {MANIFEST} (a build's spirv/ folder)")
        return _load_packaged(str(Path(env).resolve()))
    if (PACKAGED_DIR / MANIFEST).is_file():
        return _load_packaged(str(PACKAGED_DIR))
    return None
