#!/usr/bin/env bash
# Prepares .gpu/ (git-ignored): what scripts/gpu-check.sh needs on a bare GPU machine with no network and no
# Debian packages (Python 3.12 there). Run here, with network to the package registries:  make gpu-prep
#   deb/root/  the Vulkan loader and glvnd (dpkg -x into / there when the image has no libvulkan.so.1)
#   deb/opt/   headers and tools unpacked into a private prefix there: libvulkan-dev, libfmt-dev, glslang-tools,
#              vulkan-validationlayers, vulkan-tools (vulkaninfo and its X11/wayland libraries), make
#   whl/       Python 3.12 wheels of the pinned peers (requirements.txt): onnxruntime (the image's 1.30 fails
#              bit-exact ORT tests), ai-edge-litert (WebGPU accelerator, AOT tool and compiler plugins cut
#              out: 22 -> 9.5 MB, so that the tree fits the 64 MiB the device call carries), tflite,
#              flatbuffers, pybind11, ncnn (the int8 Vulkan peer)
#   py312-include.tar.xz  CPython 3.12 headers, used there only if the image has no Python.h (when a local
#              python3.12 exists)
# Then:  OUT=... bash scripts/gpu-check.sh   there, carrying .gpu and build/deps/kp-0.9.0.
set -euo pipefail
cd "$(dirname "$0")/.."
G=.gpu
mkdir -p $G/deb/root $G/deb/opt $G/whl /tmp/gpu-prep-apt/partial
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo /.gpu/ >>.git/info/exclude
A=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/gpu-prep-apt)
apt-get "${A[@]}" update -qq
(cd $G/deb/root && apt-get "${A[@]}" download -qq libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
(cd $G/deb/opt && apt-get "${A[@]}" download -qq glslang-tools libbsd0 libfmt-dev libfmt9 libmd0 libvulkan-dev \
  libwayland-client0 libx11-6 libxau6 libxcb1 libxdmcp6 libxext6 make vulkan-tools vulkan-validationlayers)
pin() { grep -E "^$1==" requirements.txt | head -1; }
PIP=(python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp
     --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64
     --platform manylinux2014_x86_64 -d $G/whl)
for p in onnxruntime tflite ai-edge-litert flatbuffers ncnn; do "${PIP[@]}" "$(pin $p)"; done
"${PIP[@]}" "pybind11==$(python3 -c 'import pybind11; print(pybind11.__version__)' 2>/dev/null || echo 3.1.0)"
# Cut what vkinfer's tests never load out of litert's wheel (its RECORD lists them; pip --no-deps installs the
# rest without checking it).
W=$(ls $G/whl/ai_edge_litert-*.whl)
zip -q -d "$W" 'ai_edge_litert/libLiteRtWebGpuAccelerator.so' 'ai_edge_litert/tools/apply_plugin_main' \
  'ai_edge_litert/vendors/*/compiler/*' || true
if command -v python3.12 >/dev/null; then
  inc=$(python3.12 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
  tar -cJf $G/py312-include.tar.xz -C "${inc%/*}" --transform "s#^${inc##*/}#py312-include#" "${inc##*/}"
fi
du -sh $G $G/*
