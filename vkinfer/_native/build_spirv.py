"""Build step (CMakeLists.txt): compile every shader variant to SPIR-V with a checksum manifest.

    python vkinfer/_native/build_spirv.py --glslang EXE --shaders DIR --out DIR [--jobs N]

Runs with the standard library only (a build environment has no numpy): vkinfer/_glsl.py, which defines the
variants and the push-shapes rewrite the runtime uses, is imported without running vkinfer/__init__.py.
"""
import argparse
import sys
import time
import types
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--glslang", required=True)
    ap.add_argument("--shaders", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    a = ap.parse_args()
    stub = types.ModuleType("vkinfer")
    stub.__path__ = [str(PKG)]
    sys.modules["vkinfer"] = stub
    from vkinfer import _glsl  # noqa: PLC0415 - after the stub package

    t0 = time.perf_counter()
    m = _glsl.build_package(a.out, a.glslang, a.shaders, a.jobs)
    size = sum(v["bytes"] for v in m["variants"])
    print(f"SPIR-V: {len(m['variants'])} variants of {len(m['shaders'])} shaders, {size / 1024:.0f} KiB, "
          f"{time.perf_counter() - t0:.1f} s ({m['glslang']}) -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
