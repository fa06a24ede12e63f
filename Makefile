# Two commands do all set-up on a fresh Debian 12 machine (no GPU needed: lavapipe and SwiftShader are the devices):
#   make demo   - the main job
#   make test   - the test suite
# Each re-checks what is missing and skips finished set-up.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
KP_VERSION := 0.9.0
DEPS := build/deps
KP_SRC := $(DEPS)/kp-$(KP_VERSION)
NATIVE_BUILD := build/native
EXT_SUFFIX = $(shell $(VPY) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
APT_PKGS := mesa-vulkan-drivers libvulkan-dev glslang-tools spirv-tools vulkan-validationlayers \
            vulkan-tools cmake g++ make libfmt-dev pybind11-dev python3-venv python3-dev \
            gcc-aarch64-linux-gnu libc6-dev-arm64-cross gcc-arm-linux-gnueabihf libc6-dev-armhf-cross \
            qemu-user-static
# Installed without recommends: chromium-common brings SwiftShader's Vulkan driver (a second CPU device the
# tests run on) in 2 packages, where its recommends would pull 113.
APT_NORECOMMENDS := chromium-common
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup apt native cpu test demo bench lint clean gpu-check gpu-prep

setup: apt $(VENV)/.installed native cpu

# The C CPU fallback (cpu_fallback/): a shared library loaded through ctypes, rebuilt when a source changes,
# and once the venv exists the small extension that runs a native graph without ctypes (vkinfer._fastrun).
PY_INCLUDE = $(shell $(VPY) -c 'import sysconfig; print(sysconfig.get_paths()["include"])' 2>/dev/null)
cpu:
	@$(MAKE) --no-print-directory -C cpu_fallback lib
	@if [ -x $(VPY) ]; then $(MAKE) --no-print-directory -C cpu_fallback pyext PYINC=$(PY_INCLUDE) PYEXT=$(EXT_SUFFIX); fi

# Debian packages: installed only when dpkg says one is missing (a second run takes well under a second).
apt:
	@installed() { dpkg -s $$1 2>/dev/null | grep -q '^Status: install ok installed'; }; \
	missing=$$(for p in $(APT_PKGS); do installed $$p || echo $$p; done); \
	norec=$$(for p in $(APT_NORECOMMENDS); do installed $$p || echo $$p; done); \
	if [ -n "$$missing$$norec" ]; then \
	  echo "installing Debian packages:" $$missing $$norec; \
	  $(SUDO) apt-get update -qq || exit 1; \
	  if [ -n "$$missing" ]; then DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing || exit 1; fi; \
	  if [ -n "$$norec" ]; then \
	    DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$norec || exit 1; fi; \
	fi

$(VENV)/.installed: pyproject.toml requirements.txt
	@$(PY) -c 'import sys; assert sys.version_info >= (3, 11), "vkinfer needs Python 3.11+"'
	[ -x $(VPY) ] || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip==24.3.1
	$(VPY) -m pip install -q -r requirements.txt
	$(VPY) -m pip install -q --no-build-isolation --no-deps -e .
	touch $@

# Kompute comes from its PyPI sdist (source only, never committed); we build just its C++ library
# inside our own CMake project and link our small module over it.
$(KP_SRC)/CMakeLists.txt: | $(VENV)/.installed
	mkdir -p $(DEPS)
	$(VPY) -m pip download -q --no-deps --no-binary :all: kp==$(KP_VERSION) -d $(DEPS)
	tar -xzf $(DEPS)/kp-$(KP_VERSION).tar.gz -C $(DEPS)
	touch $@

native: $(VENV)/.installed $(KP_SRC)/CMakeLists.txt
	@$(MAKE) --no-print-directory vkinfer/_vkcore$(EXT_SUFFIX)

vkinfer/_vkcore%: vkinfer/_native/vkcore.cpp vkinfer/_native/CMakeLists.txt
	cmake -S vkinfer/_native -B $(NATIVE_BUILD) -DKOMPUTE_SRC=$(abspath $(KP_SRC)) \
	  -DPython_EXECUTABLE=$(abspath $(VPY)) -DCMAKE_BUILD_TYPE=Release > $(NATIVE_BUILD).log 2>&1 \
	  || { cat $(NATIVE_BUILD).log; exit 1; }
	cmake --build $(NATIVE_BUILD) -j$$(nproc) >> $(NATIVE_BUILD).log 2>&1 || { tail -50 $(NATIVE_BUILD).log; exit 1; }
	cp $(NATIVE_BUILD)/_vkcore$(EXT_SUFFIX) $@

# The suite runs on every CPU the process may use (pytest-xdist, one test file per worker so a file's cached
# models and builds are made once): 134 s in one process on a 2-core Zen 5, 83 s on both. PYTEST_WORKERS=0 runs
# it in one process.
PYTEST_WORKERS ?= auto
test: setup
	$(VPY) -m ruff check vkinfer tests bench
	$(VPY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile tests

demo: setup
	$(VPY) -m vkinfer.demo

bench: setup
	$(VPY) bench/ops.py
	$(VPY) bench/models.py

# The one-command GPU check on whatever Vulkan device is present: the Vulkan test subset, MobileNetV2 and the
# field models with Vulkan timestamps beside ncnn's int8 Vulkan and ONNX Runtime/litert on the CPU, auto's
# placement and a calibration profile -> $OUT/gpu_check.json, gpu_check.md, profile.json (scripts/gpu-check.sh).
# On a bare GPU machine (no Debian packages, no network): `make gpu-prep` here fills .gpu/, then run
# `bash scripts/gpu-check.sh` there carrying .gpu and build/deps/kp-0.9.0 (it builds what it needs).
OUT ?= build/gpu-check
gpu-check: setup
	OUT=$(abspath $(OUT)) GPU_CHECK_PREPARED=1 GPU_CHECK_PY=$(abspath $(VPY)) bash scripts/gpu-check.sh

gpu-prep:
	bash scripts/gpu-prep.sh

lint: setup
	$(VPY) -m ruff check vkinfer tests bench

clean:
	rm -rf build $(VENV) vkinfer/_vkcore*.so vkinfer/libvkinfer_cpu.so
