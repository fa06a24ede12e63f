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


@functools.cache
def spirv(name: str, defines: tuple[tuple[str, str], ...] = ()) -> bytes:
    """SPIR-V words (as bytes) for shaders/<name>.comp compiled with the given -D defines."""
    src = SHADER_DIR / f"{name}.comp"
    if not src.exists():
        raise ShaderCompileError(f"shader {src} not found (set VKINFER_SHADER_DIR to vkinfer's shaders/)")
    exe, version = _glslang()
    key = hashlib.sha256(repr((_source_with_includes(src), defines, version, TARGET_ENV)).encode()).hexdigest()
    cached = cache_dir() / f"{name}-{key[:32]}.spv"
    if cached.exists():
        return cached.read_bytes()
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.spv"
        cmd = [exe, "-V", "--target-env", TARGET_ENV, *[f"-D{k}={v}" for k, v in defines], "-o", str(out), str(src)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise ShaderCompileError(f"glslang failed on {src.name}:\n{r.stdout}{r.stderr}")
        data = out.read_bytes()
    # Write-then-rename so concurrent processes never read a half-written cache entry.
    tmpfile = cached.with_suffix(f".{os.getpid()}.tmp")
    tmpfile.write_bytes(data)
    os.replace(tmpfile, cached)
    return data
