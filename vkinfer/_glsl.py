"""GLSL -> SPIR-V with glslang, cached on disk by source text (with includes), defines and compiler.

SPIR-V is never committed: shaders are compiled on first use for Vulkan 1.1 (SPIR-V 1.3), which
every Vulkan 1.1 driver accepts.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from .errors import ShaderCompileError

SHADER_DIR = Path(os.environ.get("VKINFER_SHADER_DIR", Path(__file__).resolve().parent.parent / "shaders"))
TARGET_ENV = "vulkan1.1"


def cache_dir() -> Path:
    """Where compiled SPIR-V is cached: $VKINFER_CACHE, else $XDG_CACHE_HOME/vkinfer or ~/.cache/vkinfer."""
    base = os.environ.get("VKINFER_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vkinfer")
    return Path(base) / "spirv"


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


@functools.cache
def push_shapes(name: str) -> PushShapes:
    """The push-constant layout of shaders/<name>.comp's push-shapes variant (see `spirv`)."""
    return _push_shapes_source(_shader_path(name).read_text())[1]


def _shader_path(name: str) -> Path:
    src = SHADER_DIR / f"{name}.comp"
    if not src.exists():
        raise ShaderCompileError(f"shader {src} not found (set VKINFER_SHADER_DIR to vkinfer's shaders/)")
    return src


def _cache_file(name: str, defines: tuple[tuple[str, str], ...], shapes_pushed: bool) -> Path:
    src = _shader_path(name)
    _, version = _glslang()
    key = hashlib.sha256(repr((_source_with_includes(src), defines, version, TARGET_ENV, shapes_pushed)).encode())
    return cache_dir() / f"{name}-{key.hexdigest()[:32]}.spv"


@functools.cache
def spirv(name: str, defines: tuple[tuple[str, str], ...] = (), shapes_pushed: bool = False) -> bytes:
    """SPIR-V words (as bytes) for shaders/<name>.comp compiled with the given -D defines.

    `shapes_pushed`: the variant whose int specialization constants are read from push constants
    (layout: `push_shapes(name)`), so that one pipeline serves every shape. For drivers without a
    persistent pipeline cache, where each distinct pipeline costs its compile in every process."""
    src = _shader_path(name)
    exe, _ = _glslang()
    cached = _cache_file(name, defines, shapes_pushed)
    if cached.exists():
        return cached.read_bytes()
    cached.parent.mkdir(parents=True, exist_ok=True)
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
        data = out.read_bytes()
    # Write-then-rename so concurrent processes never read a half-written cache entry.
    tmpfile = cached.with_suffix(f".{os.getpid()}.tmp")
    tmpfile.write_bytes(data)
    os.replace(tmpfile, cached)
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
    key = (name, defines, shapes_pushed)
    with _futures_lock:
        fut = _futures.get(key)
        if fut is not None and not (fut.done() and fut.exception() is not None):
            return fut
        if _cache_file(name, defines, shapes_pushed).exists():
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
