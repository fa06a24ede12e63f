# Two commands do all set-up on a fresh Debian 12 machine (no GPU needed: lavapipe and SwiftShader are the devices):
#   make demo   - the main job
#   make test   - the test suite
# Each re-checks what is missing and skips finished set-up. Both build the native code through CMakeLists.txt as
# the wheel does (scikit-build-core, here an editable install that writes the libraries into vkinfer/).
#   make wheel        - the manylinux wheel in dist/ (scripts/wheel-build.sh)
#   make wheel-check  - that wheel installed alone in a fresh venv: cpu and lavapipe against ONNX Runtime
SHELL := /bin/bash
PY ?= python3
VENV := .venv
VPY := $(VENV)/bin/python
KP_VERSION := 0.9.0
DEPS := build/deps
KP_SRC := $(DEPS)/kp-$(KP_VERSION)
APT_PKGS := mesa-vulkan-drivers libvulkan-dev glslang-tools spirv-tools vulkan-validationlayers \
            vulkan-tools cmake g++ make libfmt-dev python3-venv python3-dev \
            gcc-aarch64-linux-gnu libc6-dev-arm64-cross gcc-arm-linux-gnueabihf libc6-dev-armhf-cross \
            qemu-user-static
# Installed without recommends: chromium-common brings SwiftShader's Vulkan driver (a second CPU device the
# tests run on) in 2 packages, where its recommends would pull 113.
APT_NORECOMMENDS := chromium-common
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: setup apt native cpu test demo bench lint clean gpu-check gpu-prep wheel wheel-check fuzz

setup: apt $(VENV)/.installed native cpu

# The C CPU fallback (cpu_fallback/): a shared library loaded through ctypes. With the venv it comes from the
# native build below (with vkinfer._planrun); without one (`vkinfer bench ab` building a revision in a worktree)
# from cpu_fallback/Makefile alone, which is also how CMakeLists.txt builds it: the same flags either way.
cpu:
	@if [ -x $(VPY) ]; then $(MAKE) --no-print-directory native; \
	else $(MAKE) --no-print-directory -C cpu_fallback lib; fi

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

$(VENV)/.installed: pyproject.toml requirements.txt requirements-build.txt
	@$(PY) -c 'import sys; assert sys.version_info >= (3, 11), "vkinfer needs Python 3.11+"'
	[ -x $(VPY) ] || $(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip==24.3.1
	$(VPY) -m pip install -q -r requirements.txt -r requirements-build.txt
	touch $@

# Kompute comes from its PyPI sdist (source only, never committed); CMakeLists.txt builds just its C++ library and
# our small module over it. Kept unpacked here for `vkinfer bench ab`, which builds a revision's module from it.
$(KP_SRC)/CMakeLists.txt: | $(VENV)/.installed
	mkdir -p $(DEPS)
	$(VPY) -m pip download -q --no-deps --no-binary :all: kp==$(KP_VERSION) -d $(DEPS)
	tar -xzf $(DEPS)/kp-$(KP_VERSION).tar.gz -C $(DEPS)
	touch $@

# The native build: CMakeLists.txt through scikit-build-core, as for the wheel, as an editable install (the venv
# imports vkinfer from this tree) that writes libvkinfer_cpu.so, _planrun and _vkcore into vkinfer/ (each
# replaced by rename). It builds incrementally in build/dev; re-run when a native source changes. The tree
# compiles shaders at run time (glslang); the SPIR-V the wheel would carry is in build/dev/spirv.
JOBS ?= $(shell nproc)
DEV_BUILD := build/dev
NATIVE_SRCS := CMakeLists.txt cmake/replace.cmake pyproject.toml $(wildcard vkinfer/_native/*) vkinfer/_glsl.py \
               cpu_fallback/Makefile $(wildcard cpu_fallback/src/* cpu_fallback/include/* cpu_fallback/python/*) \
               $(wildcard cpu_fallback/src/ops/*) \
               $(wildcard shaders/*)
$(DEV_BUILD)/.built: $(NATIVE_SRCS) $(VENV)/.installed $(KP_SRC)/CMakeLists.txt
	CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) $(VPY) -m pip install -q --no-build-isolation --no-deps -e . \
	  -Cbuild-dir=$(DEV_BUILD) -Ccmake.define.VKINFER_KP_SDIST=$(abspath $(KP_SRC)) \
	  || { echo "native build failed: the CMake log is in $(DEV_BUILD)"; exit 1; }
	@# scikit-build-core's redirect finder goes first on sys.meta_path and sends `import vkinfer` to this tree even
	@# from another checkout's folder (`vkinfer bench ab`'s base worker imported /work/main/vkinfer, not its
	@# worktree's). The libraries are in the tree, so a plain path entry is all the install needs: a checkout in
	@# the current folder then wins, as it did with setuptools' editable install.
	$(VPY) -c 'import pathlib, site, sys; [p.write_text(sys.argv[1] + "\n") for d in site.getsitepackages() \
	  for p in pathlib.Path(d).glob("_editable_skbc_vkinfer.pth")]' $(abspath .)
	touch $@

native: $(DEV_BUILD)/.built

# One module for another checkout without touching the venv's install (`vkinfer bench ab` runs
# `make VENV=... KP_SRC=... vkinfer/_vkcore<EXT_SUFFIX>` in a worktree): the same CMake project, in place.
vkinfer/_vkcore%: $(wildcard vkinfer/_native/vk_* vkinfer/_native/planrun.c) vkinfer/_native/CMakeLists.txt
	cmake -S . -B build/inplace -DVKINFER_INPLACE=ON -DVKINFER_SPIRV=OFF -DVKINFER_KP_SDIST=$(abspath $(KP_SRC)) \
	  -DPython_EXECUTABLE=$(abspath $(VPY)) -Dpybind11_DIR=$$($(VPY) -m pybind11 --cmakedir) \
	  -DCMAKE_BUILD_TYPE=Release > build/inplace.log 2>&1 || { cat build/inplace.log; exit 1; }
	cmake --build build/inplace -j$(JOBS) >> build/inplace.log 2>&1 || { tail -50 build/inplace.log; exit 1; }

# The wheel: built from the sdist (so the sdist is checked too), retagged for the interpreters it carries
# modules for, made manylinux by auditwheel (libvulkan.so.1 left to the system) -> dist/. WHEEL_PYTHONS: more
# CPythons to build for (interpreters, or X.Y=INCLUDE_DIR); by default every python3.1[2-9] on PATH.
wheel: apt $(VENV)/.installed $(KP_SRC)/CMakeLists.txt
	VKINFER_KP_SDIST=$(abspath $(DEPS)) PY=$(abspath $(VPY)) JOBS=$(JOBS) bash scripts/wheel-build.sh

# The wheel installed alone in a fresh venv, no glslang on PATH, an empty cache, cwd outside the tree:
# cpu and lavapipe sessions on zoo models against ONNX Runtime, bit-exact; import, install and session times.
wheel-check: wheel
	PY=$(abspath $(VPY)) bash scripts/wheel-check.sh

# The suite runs on every CPU the process may use (pytest-xdist, one test file per worker so a file's cached
# models and builds are made once): 134 s in one process on a 2-core Zen 5, 83 s on both. PYTEST_WORKERS=0 runs
# it in one process.
PYTEST_WORKERS ?= auto
test: setup
	$(VPY) -m ruff check vkinfer tests bench
	$(VPY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadfile tests

# Differential fuzzing (vkinfer/testing/fuzz, docs/development.md): the ONNX and TFLite importers and
# InferenceSession.run, seeded from the zoos, every input on the reference, cpu and vulkan devices; a non-clean
# exception, a disagreement, a hang (FUZZ_TIMEOUT s), a crash or a runaway allocation is a finding, kept under
# build/fuzz/findings/<kind>/ (exit 1). FUZZ_RUNS executions or FUZZ_SECONDS in all, whichever ends first;
# FUZZ_ENGINE=plain: the seeded mutation loop (tests/fuzz/test_fuzz_smoke.py runs it 45 s in `make test`).
# FUZZ_JOBS (atheris; default: the cores): targets fuzzed at once, one process each. FUZZ_SESSION_MB: each
# session's cap on activations (max_session_bytes), so that a check's three sessions fit FUZZ_RSS_MB (a child's
# resident memory, its peak under atheris, past which its input is reported).
FUZZ_ENGINE ?= atheris
FUZZ_TARGETS ?= all
FUZZ_RUNS ?= 1000000
FUZZ_SECONDS ?= 3600
FUZZ_SEED ?= 0
FUZZ_TIMEOUT ?= 20
FUZZ_SESSION_MB ?= 256
FUZZ_RSS_MB ?= 4096
FUZZ_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
fuzz: setup
	$(VPY) -m vkinfer.testing.fuzz --engine $(FUZZ_ENGINE) --targets $(FUZZ_TARGETS) --runs $(FUZZ_RUNS) \
	  --seconds $(FUZZ_SECONDS) --seed $(FUZZ_SEED) --timeout $(FUZZ_TIMEOUT) --jobs $(FUZZ_JOBS) \
	  --session-mb $(FUZZ_SESSION_MB) --rss-mb $(FUZZ_RSS_MB) --out build/fuzz

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
	rm -rf build dist $(VENV) vkinfer/_vkcore*.so vkinfer/_planrun*.so vkinfer/_fastrun*.so vkinfer/libvkinfer_cpu.so
