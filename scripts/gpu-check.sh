#!/usr/bin/env bash
# One device call: vkinfer's Vulkan path on a bare NVIDIA machine (no network, Python 3.12 as python3).
#   device:    bash scripts/gpu-check.sh            (carry: .gpu build/deps/kp-0.9.0; results in $OUT)
#   rehearsal: GPU_CHECK_LOCAL=1 GPU_CHECK_PY=/tmp/py312/bin/python bash scripts/gpu-check.sh   (in a copy of
#              the repo: it writes vkinfer/_vkcore*.so; debs go to a scratch root, lavapipe is the device)
# Carried (.gpu/, git-ignored): deb/root/ Vulkan loader + glvnd (dpkg -x into / when the image lacks
# libvulkan.so.1, as the device README says); deb/opt/ headers and tools unpacked into a private prefix
# (libvulkan-dev, libfmt-dev, glslang-tools, vulkan-validationlayers, vulkan-tools, make, X11/wayland libs for
# vulkaninfo); whl/ the pinned onnxruntime 1.31.1 (the image's 1.30 fails 8 bit-exact ORT tests), tflite,
# ai-edge-litert (WebGPU accelerator, AOT tool and compiler plugins cut out: 22 -> 9.5 MB), flatbuffers,
# pybind11 3.1.0 (pip --target, no network); py312-include.tar.xz: CPython 3.12.1 headers, used only if the
# image has no Python.h. Every step is time-bounded; a failing step is reported and the script goes on.
# Env: GPU_CHECK_BUDGET (s, default 300; the worst case ends by BUDGET+105 s), GPU_CHECK_TESTS (pytest args),
# GPU_CHECK_WORKERS (8), GPU_CHECK_DEVICE ($VKINFER_DEVICE; nvidia, llvmpipe in local mode), GPU_CHECK_DEMO=0,
# GPU_CHECK_PYINC (Python include dir; a wrong one rehearses the missing-Python.h path).
# Files in $OUT: gpu-check.log (everything), build-native.log, pytest.log, junit.xml, gpu_check.json and
# gpu_check.md (bench/gpu_check.py: models, timings, exactness, tests), profile.json (vkinfer calibrate --quick).
# GPU_CHECK_PREPARED=1 (make gpu-check on a machine `make setup` made): no set-up, build or wheels; $PY is the venv's.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
ROOT=$PWD LOCAL=${GPU_CHECK_LOCAL:-0} BUDGET=${GPU_CHECK_BUDGET:-300} PY=${GPU_CHECK_PY:-python3}
OUT=${OUT:-/tmp/gpu-check-out}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
if [ "$LOCAL" = 1 ]; then S=/tmp/gpu-check-scratch; SYSROOT=$S/root PFX=$S/vkx SITE=$S/site BUILD=$S/native
  DEV=${GPU_CHECK_DEVICE:-llvmpipe}; export VK_DRIVER_FILES=/usr/share/vulkan/icd.d/lvp_icd.x86_64.json  # one device
else SYSROOT=/ PFX=/opt/vkx SITE=/tmp/site BUILD=/tmp/vkbuild DEV=${GPU_CHECK_DEVICE:-nvidia}; fi
PREPARED=${GPU_CHECK_PREPARED:-0}; [ "$PREPARED" = 1 ] && DEV=${GPU_CHECK_DEVICE:-${VKINFER_DEVICE:-}}
# The Vulkan-relevant test files (ops, runtime, plans, sessions, whole models vs ORT/LiteRT, placement, auto
# dispatch); left out: CPU-only, bench/ray/ncnn/jax, mutations, README and ASan-driver (.venv) files.
VK_TESTS="conv_vulkan matmul_vulkan requant vk_runtime vulkan_devices devices chain plan moves session models_onnx
 quant_ops conv_transpose onnx_extras onnx_conformance validation memory cache tables placement auto_device dispatch
 calibrate cli tflite tflite_ops tflite_streaming field_onnx field_models demo gemm_variants selftest"
SUMMARY=""
step() { echo; echo "=== [${SECONDS}s] $*"; }
note() { SUMMARY+=$(printf '%-28s %s' "$1" "$2")$'\n'; }     # one line per step for the closing summary
t() { local s=$1; shift; timeout -k 5 "$s" "$@"; local rc=$?; [ $rc = 0 ] || echo "!!! rc=$rc ($([ $rc = 124 ] && echo "timed out after ${s}s")): $*"; return $rc; }

main() {
step "diagnostics"
t 20 nvidia-smi -L; t 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
uname -srm; grep PRETTY /etc/os-release; ldd --version | head -1; nproc; echo "local=$LOCAL OUT=$OUT"
echo "python: $(command -v "$PY")  $($PY -VV)"
PYINC=${GPU_CHECK_PYINC:-$($PY -c 'import sysconfig; print(sysconfig.get_paths()["include"])')}
EXT=$($PY -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
if [ -f "$PYINC/Python.h" ]; then echo "Python.h: found in $PYINC"; note Python.h "found ($PYINC)"
elif $PY -c 'import sys; assert sys.version_info[:2] == (3, 12)' && tar -xJf .gpu/py312-include.tar.xz -C /tmp; then
  echo "!!! PYTHON.H MISSING in $PYINC: building _vkcore/_planrun against the carried CPython 3.12.1 headers"
  PYINC=/tmp/py312-include; note Python.h "MISSING: carried 3.12.1 headers used"
else echo "!!! PYTHON.H MISSING in $PYINC and no usable fallback: _vkcore and _planrun cannot be built"
  PYINC=""; note Python.h "MISSING: no _vkcore/_planrun"; fi
for x in cc gcc g++ make cmake ninja nvcc; do printf '%-6s %s\n' $x "$(command -v $x) $($x --version 2>/dev/null | head -1)"; done
$PY -m pip list 2>/dev/null | grep -iE '^(numpy|scipy|onnx|onnxruntime|pytest|pytest-xdist|pytest-timeout|hypothesis|pybind11|flatbuffers|protobuf|ml.dtypes|tqdm) '
ldconfig -p | grep -E 'libvulkan|libGLX|libGLdispatch|libX11\.|libxcb\.' | sed 's/^\s*//'
ls -l /etc/vulkan/icd.d /usr/share/vulkan/icd.d /usr/local/share/vulkan/icd.d /usr/local/nvidia/share/vulkan/icd.d 2>&1

if [ "$PREPARED" != 1 ]; then  # set-up and build (a machine `make setup` made has them)
step "Vulkan loader, headers, glslang, validation layer, python wheels"
if [ "$LOCAL" = 1 ] || ! ldconfig -p | grep -q 'libvulkan\.so\.1 '; then mkdir -p "$SYSROOT"
  for f in .gpu/deb/root/*.deb; do dpkg -x "$f" "$SYSROOT" || echo "!!! dpkg -x $f failed"; done
  [ "$LOCAL" = 1 ] || ldconfig; echo "loader + glvnd unpacked into $SYSROOT"; note loader "unpacked into $SYSROOT"
else note loader "already on the image"; fi
rm -rf "$PFX"; mkdir -p "$PFX/gap"
for f in .gpu/deb/opt/*.deb; do dpkg -x "$f" "$PFX" || echo "!!! dpkg -x $f failed"; done
L=$PFX/usr/lib/x86_64-linux-gnu
for so in "$L"/*.so.*; do n=${so##*/}      # only sonames the image lacks go on LD_LIBRARY_PATH (via gap/)
  [[ $n =~ \.so\.[0-9]+$ ]] && ! ldconfig -p | grep -q "^\s*$n " && ln -sf "$so" "$PFX/gap/$n"; done
echo "filled from the debs: $(ls "$PFX/gap" | tr '\n' ' ')"
J=$PFX/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json
sed -i "s#\"library_path\": \"libVkLayer#\"library_path\": \"$L/libVkLayer#" "$J"
export VK_LAYER_PATH=${J%/*} PATH=$PATH:$PFX/usr/bin LD_LIBRARY_PATH=$PFX/gap${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
if [ "$LOCAL" != 1 ]; then  # the NVIDIA ICD alone (also when the image keeps it outside the loader's search path)
  NV=$(ls /etc/vulkan/icd.d/*nvidia*.json /usr/share/vulkan/icd.d/*nvidia*.json /usr/local/share/vulkan/icd.d/*nvidia*.json \
       /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json 2>/dev/null | head -1)
  [ -n "$NV" ] || NV=$(timeout 30 find / \( -path /proc -o -path /sys \) -prune -o -name 'nvidia_icd*.json' -print 2>/dev/null | head -1)
  [ -n "$NV" ] && export VK_DRIVER_FILES=$NV || echo "!!! no NVIDIA Vulkan ICD (nvidia_icd.json) found"; fi
echo "VK_DRIVER_FILES=${VK_DRIVER_FILES:-}  VK_LAYER_PATH=$VK_LAYER_PATH"
[ -n "${VK_DRIVER_FILES:-}" ] && { cat "$VK_DRIVER_FILES"; echo; lib=$(grep -o '"library_path"[^,]*' "$VK_DRIVER_FILES" | cut -d'"' -f4)
  ldconfig -p | grep -q "$lib" || for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do  # ICD lib off the cache
    [ -e "$d/$lib" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$d && echo "added $d to LD_LIBRARY_PATH"; done
  ldd "$(ldconfig -p | awk -v l="$lib" '$1 == l {print $NF; exit}' | grep . || echo "$lib")" 2>&1 | grep -E 'not found|GLdispatch|libX11\.' ; }
echo "glslangValidator: $(command -v glslangValidator) $(glslangValidator --version 2>&1 | head -1)"
t 30 vulkaninfo --summary 2>/dev/null | head -45
# what issue 27's paths need: integer dot product (and which packed forms are accelerated), subgroups, 8-bit storage
t 30 vulkaninfo 2>/dev/null | grep -E -i 'integerDotProduct(4x8BitPacked|8Bit)?(Unsigned|Signed|Mixed)?Accelerated|shaderIntegerDotProduct|subgroupSize|maxComputeSharedMemorySize|storageBuffer8BitAccess|shaderInt8|timestampPeriod|cooperativeMatrix' | sort -u | head -40
t 120 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .gpu/whl/*.whl \
  && note wheels ok || note wheels FAIL
export PYTHONPATH=$ROOT:$SITE

step "C CPU fallback (make -C cpu_fallback lib, pyext)"
CC=${CC:-cc}; command -v "$CC" >/dev/null || CC=gcc
t 180 make -s --no-print-directory -C cpu_fallback -j16 lib CC="$CC" && note cpu-lib ok || note cpu-lib FAIL
if [ -n "$PYINC" ]; then t 60 make -s --no-print-directory -C cpu_fallback pyext CC="$CC" PYINC="$PYINC" PYEXT="$EXT" \
  && note cpu-pyext ok || note cpu-pyext FAIL; fi

step "_vkcore (Kompute + pybind11, cmake) -> vkinfer/_vkcore$EXT   (log: build-native.log)"
if [ -n "$PYINC" ]; then rm -rf "$BUILD"; GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
  VKLIB=$(ldconfig -p | awk '$1 == "libvulkan.so.1" {print $NF; exit}')
  if t 90 cmake -S vkinfer/_native -B "$BUILD" "${GEN[@]}" -DKOMPUTE_SRC="$ROOT/build/deps/kp-0.9.0" \
       -DPython_EXECUTABLE="$(command -v "$PY")" -DCMAKE_BUILD_TYPE=Release -DPython_INCLUDE_DIR="$PYINC" \
       -Dpybind11_DIR="$($PY -m pybind11 --cmakedir)" -Dfmt_DIR="$L/cmake/fmt" -DVulkan_INCLUDE_DIR="$PFX/usr/include" \
       -DVulkan_LIBRARY="$VKLIB" -DCMAKE_POLICY_VERSION_MINIMUM=3.5 >"$OUT/build-native.log" 2>&1 \
     && t 240 cmake --build "$BUILD" -j16 >>"$OUT/build-native.log" 2>&1 && cp "$BUILD/_vkcore$EXT" vkinfer/; then
    note _vkcore "ok (${SECONDS}s)"; ldd vkinfer/_vkcore"$EXT" | grep -E 'vulkan|fmt|not found'
  else tail -40 "$OUT/build-native.log"; note _vkcore FAIL; fi
fi

fi
[ -n "$DEV" ] && export VKINFER_DEVICE=$DEV

step "vkinfer devices (VKINFER_DEVICE=$DEV)"
t 60 $PY -m vkinfer.cli devices && note devices ok || note devices FAIL
t 60 $PY -c 'import vkinfer._vk as v; d = v.get_device(); print("default Vulkan device:", d.info,
  "push_shapes:", d.push_shapes, "unified_memory:", d.unified_memory)' || note default-device FAIL

step "models: MobileNetV2 1.0/224 + field models, Vulkan (timestamps) vs cpu/auto vs ORT/litert vs ncnn int8"
# bench/gpu_check.py writes $OUT/gpu_check.json and gpu_check.md; the pytest counts are merged in below.
MB=${GPU_CHECK_MODELS_BUDGET:-$(( BUDGET / 3 ))}
t $(( MB + 60 )) $PY bench/gpu_check.py --out "$OUT" --budget "$MB" --repeat "${GPU_CHECK_REPEAT:-20}" \
  ${GPU_CHECK_QUICK:+--quick} 2>&1 | grep -v '^\[[0-9]' ; note models "rc=${PIPESTATUS[0]}"

step "calibrate (quick): the dispatcher's profile of this machine's devices -> $OUT/profile.json"
DT=$($PY -c 'from vkinfer import cpu; print(cpu.default_threads())' 2>/dev/null || echo 1)  # 1 and the default only:
t 90 $PY -m vkinfer.cli calibrate --quick --threads "$(printf '%s\n' 1 "$DT" | sort -un | paste -sd,)" \
  --out "$OUT/profile.json" && note calibrate "ok (threads 1,$DT)" || note calibrate FAIL

if [ "${GPU_CHECK_DEMO:-0}" = 1 ] && [ $(( BUDGET - SECONDS )) -gt 160 ]; then step "demo"
  t 100 $PY -m vkinfer.demo >"$OUT/demo.log" 2>&1; rc=$?; cat "$OUT/demo.log"; note demo "rc=$rc"; fi

TL=$(( BUDGET - SECONDS - 15 )); [ $TL -ge 60 ] || TL=60
step "pytest (${TL}s at most; log: pytest.log, junit.xml)"
XD=(); $PY -c 'import xdist' 2>/dev/null && XD=(-n "${GPU_CHECK_WORKERS:-8}" --dist loadfile)
TO=(); $PY -c 'import pytest_timeout' 2>/dev/null && TO=(--timeout 150)
DS=(); [ "$LOCAL" = 1 ] || [ "$PREPARED" = 1 ] || { DS=(--deselect tests/dispatcher/test_calibrate.py::test_quick_vulkan_calibration_of_lavapipe)
  echo "deselected (needs Mesa's lavapipe, not carried): ${DS[1]}"; }
read -r -a TESTS <<<"${GPU_CHECK_TESTS:-$(for f in $VK_TESTS; do echo tests/*/test_$f.py; done | tr '\n' ' ')}"
# SIGINT at the limit: pytest (and its xdist workers) still print the summary and write the junit xml
timeout -s INT -k 30 "$TL" $PY -m pytest -q -rfE --tb=short -p no:cacheprovider "${XD[@]}" "${TO[@]}" "${DS[@]}" --durations 15 \
  --junitxml "$OUT/junit.xml" "${TESTS[@]}" >"$OUT/pytest.log" 2>&1; rc=$?; [ $rc = 124 ] && echo "!!! pytest stopped at ${TL}s"
grep -E '^(FAILED|ERROR) ' "$OUT/pytest.log" | cut -c1-220 | head -60; grep -A15 'slowest 15 durations' "$OUT/pytest.log"
tail -1 "$OUT/pytest.log"
note pytest "rc=$rc: $(grep -E '(passed|failed|error|skipped).* in [0-9.]+s' "$OUT/pytest.log" | tail -1 | tr -d =)"

[ -f "$OUT/gpu_check.json" ] && t 60 $PY bench/gpu_check.py --out "$OUT" --junit "$OUT/junit.xml" --merge-junit \
  && note gpu_check.json "written (tests merged)"
step "summary (${SECONDS}s of ${BUDGET}s)"; printf '%s' "$SUMMARY"
}
main 2>&1 | tee "$OUT/gpu-check.log"
