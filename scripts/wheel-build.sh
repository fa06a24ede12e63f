#!/usr/bin/env bash
# vkinfer's wheel (`make wheel`): sdist -> wheel built from that sdist -> retagged -> auditwheel -> dist/.
#   PY              the Python that builds (a venv with requirements.txt: scikit-build-core, pybind11, build,
#                   auditwheel, wheel); its CPython is always served
#   WHEEL_PYTHONS   more CPythons to build _vkcore/_planrun for, space-separated: interpreters, or X.Y=DIR (a
#                   folder holding Python.h) or X.Y=FILE.tar.xz (an archive of one). Default: each python3.12 ..
#                   python3.14 on PATH that runs and has its headers.
#   VKINFER_KP_SDIST  where kp-0.9.0.tar.gz is (offline build); unset: CMake downloads it with pip
#   DIST (dist), JOBS (nproc)
# pybind11 has no stable-ABI build, so the wheel carries one _vkcore (and _planrun) per CPython and is tagged for
# exactly those (e.g. cp311.cp312-cp311.cp312): pip elsewhere takes the sdist and builds it. The C library and the
# SPIR-V are shared. libvulkan.so.1 is left to the system (auditwheel --exclude); nothing else is bundled: fmt is
# header-only and libstdc++ static in _vkcore (vkinfer/_native/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD PY=${PY:-.venv/bin/python} DIST=${DIST:-dist} JOBS=${JOBS:-$(nproc)}
W=build/wheel
rm -rf "$W" && mkdir -p "$W/sdist" "$W/raw" "$W/retag" "$DIST"
t0=$(date +%s.%N)
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(date +%s.%N)"; }

extra=()
if [ -n "${WHEEL_PYTHONS+x}" ]; then read -r -a cand <<<"$WHEEL_PYTHONS"
else cand=(); for v in 12 13 14; do p=$(command -v "python3.$v" || true)
  [ -n "$p" ] && "$p" -c 'import os, sys, sysconfig; sys.exit(not os.path.isfile(sysconfig.get_paths()["include"] + "/Python.h"))' \
    2>/dev/null && cand+=("$p"); done; fi
for c in "${cand[@]}"; do
  if [[ $c =~ ^([0-9]+\.[0-9]+)=(.+\.tar\.(xz|gz))$ ]]; then       # headers as an archive (.gpu/py312-include.tar.xz)
    d=$ROOT/$W/pyinc-${BASH_REMATCH[1]}; mkdir -p "$d"; tar -xf "${BASH_REMATCH[2]}" -C "$d"
    h=$(dirname "$(find "$d" -name Python.h | head -1)"); extra+=("${BASH_REMATCH[1]}=$h")
  else extra+=("$c"); fi
done
export VKINFER_EXTRA_PYTHONS=$(IFS=';'; echo "${extra[*]}")
echo "wheel: CPython $($PY -c 'import sys; print("%d.%d" % sys.version_info[:2])') + [${VKINFER_EXTRA_PYTHONS}]"

# The sdist, and what CMakeLists.txt needs from it.
$PY -m build --sdist --no-isolation -o "$W/sdist" . >"$W/sdist.log" 2>&1 || { tail -30 "$W/sdist.log"; exit 1; }
SDIST=$(ls "$W"/sdist/vkinfer-*.tar.gz)
tar -tzf "$SDIST" >"$W/sdist.files"
for need in CMakeLists.txt pyproject.toml cmake/replace.cmake cpu_fallback/Makefile cpu_fallback/src/graph.c \
            shaders/qlinear_conv.comp shaders/qcommon.glsl vkinfer/_native/planrun.c vkinfer/_native/vk_api.h \
            vkinfer/_native/vk_core.hpp vkinfer/_native/vk_module.cpp vkinfer/_native/CMakeLists.txt \
            vkinfer/_native/build_spirv.py vkinfer/_glsl.py; do
  grep -q "^vkinfer-[^/]*/$need$" "$W/sdist.files" || { echo "the sdist lacks $need"; exit 1; }
done
echo "sdist: $SDIST ($(du -k "$SDIST" | cut -f1) KiB, $(grep -vc '/$' "$W/sdist.files") files)"

# The wheel from the sdist, with this venv's pinned build tools (no download of build requirements).
CMAKE_BUILD_PARALLEL_LEVEL=$JOBS $PY -m pip wheel -q --no-build-isolation --no-deps "$SDIST" -w "$W/raw" \
  >"$W/build.log" 2>&1 || { tail -60 "$W/build.log"; exit 1; }
RAW=$(ls "$W"/raw/vkinfer-*.whl)

# Tag the interpreters whose _vkcore it carries.
tags=$($PY -c 'import re, sys, zipfile
vs = sorted({m.group(1) for n in zipfile.ZipFile(sys.argv[1]).namelist()
             if (m := re.match(r"vkinfer/_vkcore\.cpython-(3\d+)-", n))}, key=int)
print(".".join("cp" + v for v in vs))' "$RAW")
[ -n "$tags" ] || { echo "the wheel carries no _vkcore"; exit 1; }
$PY -m wheel tags --python-tag "$tags" --abi-tag "$tags" --remove "$RAW" >/dev/null
RAW=$(ls "$W"/raw/vkinfer-*.whl)

PATH=$(dirname "$PY"):$PATH $PY -m auditwheel repair --exclude libvulkan.so.1 -w "$W/retag" "$RAW" >"$W/auditwheel.log" 2>&1 \
  || { cat "$W/auditwheel.log"; exit 1; }
OUTW=$(ls "$W"/retag/vkinfer-*.whl)
rm -f "$DIST"/vkinfer-*.whl "$DIST"/vkinfer-*.tar.gz
cp "$OUTW" "$SDIST" "$DIST/"
echo "wheel: $DIST/$(basename "$OUTW") ($(du -k "$OUTW" | cut -f1) KiB) in $(secs "$t0") s"
