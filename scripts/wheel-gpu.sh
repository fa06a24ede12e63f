#!/usr/bin/env bash
# dist/'s wheel on the bare GPU machine (no network, no Vulkan loader, no glslang, Python 3.12 with numpy, onnx,
# onnxruntime and scipy of its own): installed offline beside them, VulkanUnavailableError while no loader is
# there, then the loader from .gpu's debs and the NVIDIA device against ONNX Runtime with packaged SPIR-V.
#   here:   make wheel WHEEL_PYTHONS=<a python3.12> && make wheel-check && bash scripts/wheel-gpu.sh prep
#   device: bash scripts/wheel-gpu.sh      carry: dist build/gpu-wheel .gpu/deb/root     (log in $OUT)
# Measured 2026-11-27 (Ubuntu 24.04, glibc 2.39, Python 3.12.3, H100 driver 580): installed in 3.5 s beside
# numpy 2.5.2, onnx 1.23.1, onnxruntime 1.30.0, scipy 1.18.1; six zoo models same bits as ORT on cpu and on the
# H100, the TFLite one cpu = H100; no SPIR-V compiled; import 0.09-0.11 s. 15 s of device time after start.
if [ "${1:-}" = prep ]; then
  set -e; cd "$(dirname "$0")/.."; rm -rf build/gpu-wheel; mkdir -p build/gpu-wheel/whl
  cp .gpu/whl/tflite-*.whl .gpu/whl/flatbuffers-*.whl build/gpu-wheel/whl/   # the image lacks these two
  cp -r build/wheel-check/models build/gpu-wheel/                           # made by make wheel-check
  ls dist/vkinfer-*cp312*.whl >/dev/null; exit 0
fi
cd "$(dirname "$0")/.."; ROOT=$PWD; G=$ROOT/build/gpu-wheel; OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee $OUT/log.txt) 2>&1
python3 -VV; ldd --version | head -1; grep PRETTY /etc/os-release; nproc
python3 -m pip list 2>/dev/null | grep -iE '^(numpy|onnx|onnxruntime|scipy|tflite|flatbuffers|protobuf|ml.dtypes) '
echo "glslang: $(command -v glslangValidator)"; ldconfig -p | grep libvulkan || echo "no libvulkan.so.1 on the image"
W=$(ls $ROOT/dist/vkinfer-*.whl); echo "wheel: $W"
python3 -c 'import numpy, sys; print("numpy from", numpy.__file__, sys.flags.no_user_site)'
VP=$(python3 -c 'import sys; print(sys.executable)'); VB=$(dirname "$VP")
PIP=(python3 -m pip)  # into the image's own Python (a disposable machine): "beside what the user has", for real
t0=$(date +%s.%N)
"${PIP[@]}" install -q --no-index --break-system-packages --find-links $G/whl "$W"; echo "install rc=$? in $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
"${PIP[@]}" list 2>/dev/null | grep -iE '^(vkinfer|numpy|onnx|onnxruntime|scipy|tflite|flatbuffers) '
mkdir -p /tmp/run && cp $ROOT/scripts/wheel_check.py /tmp/run && cd /tmp/run
E=(env -i HOME=/tmp PATH=$VB:/usr/bin:/bin VKINFER_CACHE=/tmp/vkcache LANG=C.UTF-8)
if ! ldconfig -p | grep -q 'libvulkan\.so\.1 '; then echo "== novulkan"; "${E[@]}" timeout 60 $VP wheel_check.py novulkan $G/models | tail -1; fi
echo "== time (cpu)"; for i in 1 2 3; do "${E[@]}" timeout 60 $VP wheel_check.py time $G/models | tail -1; done
mkdir -p /tmp/vkroot; for f in $ROOT/.gpu/deb/root/*.deb; do dpkg -x $f /tmp/vkroot; done
NV=$(ls /etc/vulkan/icd.d/*nvidia*.json /usr/share/vulkan/icd.d/*nvidia*.json /usr/local/share/vulkan/icd.d/*nvidia*.json /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json 2>/dev/null | head -1)
[ -n "$NV" ] || NV=$(timeout 20 find / \( -path /proc -o -path /sys \) -prune -o -name 'nvidia_icd*.json' -print 2>/dev/null | head -1)
echo "ICD: $NV"; LDP=/tmp/vkroot/usr/lib/x86_64-linux-gnu
for d in /usr/local/nvidia/lib64 /usr/local/nvidia/lib; do [ -d $d ] && LDP=$LDP:$d; done
echo "== check on the NVIDIA device"
"${E[@]}" LD_LIBRARY_PATH=$LDP VK_DRIVER_FILES=$NV WHEEL_CHECK_DEVICE=vulkan:nvidia timeout 200 $VP wheel_check.py check $G/models 2>&1 | tail -3
