#!/usr/bin/env bash
# `make wheel-check`: dist/'s wheel installed alone into a brand-new venv and used the way a user would.
#   - the venv gets only the wheel, its declared dependencies and onnxruntime (the oracle), installed offline
#     (--no-index) from a wheelhouse that pip fills first at requirements.txt's pins (timed: the install)
#   - PATH holds the venv's bin/ only (no glslangValidator), VKINFER_CACHE is a new empty folder, cwd is outside
#     the source tree, no PYTHONPATH
#   - cpu and lavapipe sessions on the zoo models against ONNX Runtime, bit-exact; no SPIR-V compiled
#   - a packaged SPIR-V file altered: refused; no usable libvulkan.so.1 (unshare, where allowed): import and cpu
#     work, vulkan raises VulkanUnavailableError
#   - wheel size, install time, `import vkinfer` time, MobileNetV2 cpu creation and run: the wheel against the
#     development tree, alternated, in fresh processes
# Env: PY (the dev venv's python: the tree it imports is the comparison), WHEEL_CHECK_PY (the CPython that makes
# the fresh venv; default PY's), WHEEL (default: the newest dist/vkinfer-*.whl), WORK (build/wheel-check).
# Exit status 1 when a check fails.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD PY=${PY:-$PWD/.venv/bin/python} WORK=${WORK:-$PWD/build/wheel-check}
WHEEL=${WHEEL:-$(ls -t dist/vkinfer-*.whl 2>/dev/null | head -1)}
[ -f "$WHEEL" ] || { echo "no wheel: run make wheel"; exit 1; }
WHEEL=$(realpath "$WHEEL")
BASE=${WHEEL_CHECK_PY:-$($PY -c 'import sys; print(sys._base_executable)')}
PYVER=$("$BASE" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
T0=$SECONDS
fail=0
bad() { echo "FAIL: $*"; fail=1; }
now() { date +%s.%N; }
dt() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

rm -rf "$WORK/venv" "$WORK/cache" "$WORK/run"; mkdir -p "$WORK/wheelhouse" "$WORK/cache" "$WORK/run" "$WORK/models"
echo "wheel: $WHEEL ($(du -k "$WHEEL" | cut -f1) KiB), checked on CPython $PYVER ($BASE)"

# The wheelhouse: the wheel's dependencies and onnxruntime at the tested pins (pip's cache makes this quick).
ORT=$(grep -E '^onnxruntime==' requirements.txt)
$PY -m pip download -q --only-binary :all: --python-version "$PYVER" --dest "$WORK/wheelhouse" -c requirements.txt \
  "$WHEEL" "$ORT" \
  >"$WORK/download.log" 2>&1 || { tail -20 "$WORK/download.log"; exit 1; }
rm -f "$WORK"/wheelhouse/vkinfer-*.whl

# The fresh venv and the timed offline install: the wheel with its dependencies, then the oracle.
"$BASE" -m venv "$WORK/venv"
V=$WORK/venv/bin/python
t=$(now)
$V -m pip install -q --no-index --find-links "$WORK/wheelhouse" "$WHEEL" >"$WORK/install.log" 2>&1 \
  || { cat "$WORK/install.log"; exit 1; }
INSTALL_S=$(dt "$t")
echo "installed with its dependencies, offline, in ${INSTALL_S} s: $($V -m pip list 2>/dev/null | tail -n +3 | awk '{printf "%s %s, ", $1, $2}')"
$V -m pip install -q --no-index --find-links "$WORK/wheelhouse" "$ORT" >>"$WORK/install.log" 2>&1 \
  || { cat "$WORK/install.log"; exit 1; }

# Everything below runs as a user would: cwd outside the tree, PATH without glslang, an empty cache.
run() { (cd "$WORK/run" && env -i HOME="$HOME" PATH="$WORK/venv/bin" VKINFER_CACHE="$WORK/cache" \
  LANG=C.UTF-8 "$@"); }
cp scripts/wheel_check.py "$WORK/run/"
run "$V" wheel_check.py models "$WORK/models" >"$WORK/models.log" 2>&1 || { tail -20 "$WORK/models.log"; exit 1; }
t=$(now)
run "$V" wheel_check.py check "$WORK/models" >"$WORK/check.log" 2>&1; rc=$?
CHECK=$(tail -1 "$WORK/check.log")
echo "check (${rc}, $(dt "$t") s): $CHECK"
[ $rc = 0 ] && $V -c 'import json, sys; sys.exit(not json.loads(sys.argv[1])["ok"])' "$CHECK" || { bad "cpu/lavapipe check"; tail -30 "$WORK/check.log"; }

D=$(run "$WORK/venv/bin/vkinfer" devices 2>&1); echo "vkinfer devices: $(echo "$D" | grep -c '^vulkan:') Vulkan devices"
echo "$D" | grep -q llvmpipe || { bad "the vkinfer command does not list lavapipe"; echo "$D" | tail -5; }

SPIRV=$(run "$V" -c 'import vkinfer._glsl as g; print(g.PACKAGED_DIR)')
R=$(run "$V" wheel_check.py corrupt "$SPIRV" 2>"$WORK/corrupt.log" | tail -1)
echo "altered SPIR-V: $R"
echo "$R" | grep -q '"refused": true' || bad "an altered SPIR-V file was not refused"

# No usable Vulkan loader: a private mount namespace hides libvulkan.so.1 (root and unshare needed).
LIBVK=$(ldconfig -p | awk '$1 == "libvulkan.so.1" {print $NF; exit}')
if [ -n "$LIBVK" ] && [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
  R=$(cd "$WORK/run" && env -i HOME="$HOME" PATH="$WORK/venv/bin" VKINFER_CACHE="$WORK/cache" \
      "$(command -v unshare)" -m /bin/sh -c \
      "$(command -v mount) --bind /dev/null $(realpath "$LIBVK") && exec $V wheel_check.py novulkan $WORK/models" \
      2>"$WORK/novulkan.log" | tail -1)
  echo "no libvulkan.so.1: $R"
  echo "$R" | grep -q '"ok": true' || bad "without libvulkan.so.1"
else echo "no libvulkan.so.1: skipped (needs root, unshare and a loader to hide)"; fi

# Times: the wheel's venv against the development tree, alternated, each in a fresh process.
for i in 1 2 3; do
  run "$V" wheel_check.py time "$WORK/models" 2>/dev/null | tail -1 >>"$WORK/time-wheel.jsonl"
  (cd "$ROOT" && $PY scripts/wheel_check.py time "$WORK/models" 2>/dev/null | tail -1) >>"$WORK/time-tree.jsonl"
done
$PY - "$WORK" "$INSTALL_S" "$WHEEL" <<'EOF'
import json, os, statistics, sys
work, install_s, wheel = sys.argv[1], float(sys.argv[2]), sys.argv[3]
rows = {}
for side in ("wheel", "tree"):
    recs = [json.loads(l) for l in open(f"{work}/time-{side}.jsonl") if l.strip()]
    os.remove(f"{work}/time-{side}.jsonl")
    rows[side] = {k: statistics.median(r[k] for r in recs) for k in ("import_s", "create_s", "first_run_ms", "run_ms")}
    rows[side]["threads"] = recs[0]["threads"]
size = os.path.getsize(wheel) / 1e6
print(f"wheel size {size:.2f} MB (target <= 10), install {install_s:.1f} s (target <= 60), "
      f"import vkinfer {rows['wheel']['import_s']:.3f} s (target <= 0.3; tree {rows['tree']['import_s']:.3f} s)")
print(f"MobileNetV2 1.0/224 cpu ({rows['wheel']['threads']} threads), medians of 3 processes:")
for side, r in rows.items():
    print(f"  {side:<6} create {r['create_s']:.3f} s, first run {r['first_run_ms']:.2f} ms, run {r['run_ms']:.3f} ms")
json.dump({"wheel_mb": round(size, 3), "install_s": install_s, **{f"{s}_{k}": v for s, r in rows.items()
           for k, v in r.items()}}, open(f"{work}/summary.json", "w"), indent=1)
EOF
echo "wheel-check: $((SECONDS - T0)) s, $([ $fail = 0 ] && echo passed || echo FAILED)"
exit $fail
