# Thin wrapper: the real build is CMake. `make run` and `make test` work on a
# fresh Debian 12 machine: they install the packages they need first.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
GRPC_ADDRESS ?= 127.0.0.1:50051
METRICS_ADDRESS ?= 127.0.0.1:9464

# Debian packages: to build and run echod, and in addition to run the tests.
RUN_PACKAGES := build-essential cmake pkg-config libgrpc++-dev \
  protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev \
  prometheus-cpp-dev libspdlog-dev nlohmann-json3-dev coinor-libcbc-dev \
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libssl-dev \
  libsqlite3-dev
# openssl: the security tests make a throwaway CA at test time; chromium:
# echoctl report's page is loaded headless (tests/e2e/report_test.sh);
# sqlite3: the profile cache test reads the database as a user would.
TEST_PACKAGES := $(RUN_PACKAGES) python3 python3-venv python3-pip python3-dev curl \
  clang-format openssl chromium sqlite3
# The PyTorch hook's tests: a venv with torch (CPU build) and echo-torch
# (python3-dev: TorchInductor compiles C++ against Python.h),
# installed the way README tells users to.
VENV := $(BUILD_DIR)/venv
TORCH_VERSION ?= 2.13.0
# tests/python/test_third_party.py's models (built from configs, no
# downloads); pinned on the same pip line as torch, so that pip keeps the
# CPU build. timm is not installed: it imports torchvision, and PyPI's
# torchvision wheels need CUDA torch (its tests skip, naming the error).
TRANSFORMERS_VERSION ?= 5.23.0
# tests/python/test_loops.py's training loops (the Trainer needs accelerate).
ACCELERATE_VERSION ?= 1.16.0
LIGHTNING_VERSION ?= 2.6.6

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps test-deps configure build run test bench python-venv \
  python-vision-venv wheel wheel-venv cuda-libs clean \
  sanitizer-deps fuzz fuzz-run hardening asan tsan image-deps image image-test image-clean

all: build

# Installs only what is missing, non-interactively.
define install_missing
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
	  | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
	    --no-install-recommends $$missing; \
	fi
endef

deps:
	$(call install_missing,$(RUN_PACKAGES))

# Node.js (for the deployment tests) may come from another source than
# Debian, whose npm package conflicts with it: install only when absent.
test-deps:
	$(call install_missing,$(TEST_PACKAGES))
	@command -v npm >/dev/null || { $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
	    --no-install-recommends nodejs npm; }

configure:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: deps configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	$(BUILD_DIR)/bin/echod --grpc_address=$(GRPC_ADDRESS) \
	  --metrics_address=$(METRICS_ADDRESS)

python-venv:
	@[ -x $(VENV)/bin/python ] || /usr/bin/python3 -m venv $(VENV)
	@$(VENV)/bin/python -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "$(TORCH_VERSION)")' 2>/dev/null \
	  || $(VENV)/bin/pip install -q torch==$(TORCH_VERSION)
	$(VENV)/bin/pip install -q torch==$(TORCH_VERSION) transformers==$(TRANSFORMERS_VERSION) \
	  accelerate==$(ACCELERATE_VERSION) lightning==$(LIGHTNING_VERSION) \
	  ./client/python[bench] networkx
	$(VENV)/bin/python -c 'import echo_torch, torch; print("echo-torch", echo_torch.__version__, "on torch", torch.__version__)'

# timm needs torchvision, and PyPI's torchvision does not import beside the
# CPU torch above: the timm models are tested in a venv of their own, with
# the torch/torchvision pair that does (a CUDA build of 5.5 GB that runs on
# the CPU; pip takes both from this machine's disk on Python 3.11).
VISION_VENV := $(BUILD_DIR)/venv-vision
VISION_TORCH_VERSION ?= 2.14.1
TORCHVISION_VERSION ?= 0.29.1
TIMM_VERSION ?= 1.0.31

python-vision-venv:
	@[ -x $(VISION_VENV)/bin/python ] || /usr/bin/python3 -m venv $(VISION_VENV)
	$(VISION_VENV)/bin/pip install -q torch==$(VISION_TORCH_VERSION) \
	  torchvision==$(TORCHVISION_VERSION) timm==$(TIMM_VERSION) \
	  transformers==$(TRANSFORMERS_VERSION) ./client/python networkx
	$(VISION_VENV)/bin/python -c 'import timm, torchvision, echo_torch; print("timm", timm.__version__, "torchvision", torchvision.__version__)'

# A venv of its own for pip (wheels, downloads), so no system pip is touched.
WHEEL_VENV := $(BUILD_DIR)/wheel-venv
wheel-venv:
	$(call install_missing,python3-venv python3-pip)
	@[ -x $(WHEEL_VENV)/bin/pip ] || /usr/bin/python3 -m venv $(WHEEL_VENV)

# cuBLAS and cuDNN for the CUDA profiler plugin, from NVIDIA's PyPI wheels,
# when the CUDA toolkit at $(CUDA_HOME) has no cuBLAS of its own
# (cmake/cuda_wheels.cmake finds them under $(CUDA_WHEELS_DIR)). Nothing
# without a toolkit. Versions for the toolkit's CUDA 13.0.
CUDA_HOME ?= /usr/local/cuda
CUDA_WHEELS_DIR := $(BUILD_DIR)/cuda-wheels
CUBLAS_WHEEL ?= $(shell grep -m1 '^nvidia-cublas==' cmake/cuda-wheels.txt)
CUDNN_WHEEL ?= $(shell grep -m1 '^nvidia-cudnn-cu13==' cmake/cuda-wheels.txt)
cuda-libs:
	@if [ ! -x $(CUDA_HOME)/bin/nvcc ]; then echo "cuda-libs: no CUDA toolkit at $(CUDA_HOME)"; \
	elif ls $(CUDA_HOME)/lib64/libcublas.so* >/dev/null 2>&1; then echo "cuda-libs: the toolkit has cuBLAS"; \
	elif [ -f $(CUDA_WHEELS_DIR)/.done ]; then echo "cuda-libs: $(CUDA_WHEELS_DIR) is ready"; \
	else \
	  $(MAKE) --no-print-directory wheel-venv && \
	  rm -rf $(CUDA_WHEELS_DIR) && mkdir -p $(CUDA_WHEELS_DIR)/download && \
	  $(WHEEL_VENV)/bin/pip download -q --no-deps -d $(CUDA_WHEELS_DIR)/download \
	    $(CUBLAS_WHEEL) $(CUDNN_WHEEL) && \
	  for w in $(CUDA_WHEELS_DIR)/download/*.whl; do \
	    $(WHEEL_VENV)/bin/python -m zipfile -e $$w $(CUDA_WHEELS_DIR); done && \
	  rm -rf $(CUDA_WHEELS_DIR)/download && touch $(CUDA_WHEELS_DIR)/.done && \
	  echo "cuda-libs: cuBLAS and cuDNN unpacked under $(CUDA_WHEELS_DIR)"; \
	fi

# echo-torch with echod and its libraries inside (deploy/pack/pack_echod.sh;
# without the CUDA plugin, as the private echod does not profile):
# `pip install` it where there is no echod and no toolchain, and the hook
# starts a private echod (docs/pytorch.md).
WHEEL_DIR ?= $(BUILD_DIR)/wheels
wheel: build wheel-venv
	rm -rf $(BUILD_DIR)/wheel-pack $(WHEEL_DIR)
	PACK_CUDA_PLUGIN=0 deploy/pack/pack_echod.sh $(BUILD_DIR) $(BUILD_DIR)/wheel-pack
	ECHO_BUNDLE_DIR=$(abspath $(BUILD_DIR))/wheel-pack $(WHEEL_VENV)/bin/pip wheel -q \
	  --no-deps -w $(WHEEL_DIR) ./client/python
	@ls $(WHEEL_DIR)/*.whl

# The two venvs install (mostly unpacking wheels from disk) while the C++
# build compiles: a clean run's setup is shorter by their time.
test: test-deps cuda-libs configure
	@mkdir -p $(BUILD_DIR)
	@$(MAKE) --no-print-directory python-venv python-vision-venv \
	  >$(BUILD_DIR)/venvs.log 2>&1 & venvs=$$!; \
	  cmake --build $(BUILD_DIR) -j $(JOBS); built=$$?; \
	  wait $$venvs; installed=$$?; cat $(BUILD_DIR)/venvs.log; \
	  [ $$installed -eq 0 ] || echo "test: the venvs failed to install (above)" >&2; \
	  [ $$built -eq 0 ] && [ $$installed -eq 0 ]
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 1800

# The container image, built with no Docker Hub access: the base is
# bootstrapped from Debian's packages when it cannot be pulled
# (deploy/README.md). IMAGE_CUDA=ON builds the CUDA plugin in, with CUDA from
# NVIDIA's apt repository or, where it is unreachable, from PyPI's wheels.
IMAGE_TAG ?= echod:cpu
IMAGE_CUDA ?= OFF
# docker.io only where no Docker is installed (it would replace Docker CE's
# containerd.io).
image-deps:
	$(call install_missing,debootstrap curl)
	@command -v dockerd >/dev/null || { $(SUDO) apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -q \
	    --no-install-recommends docker.io; }
	deploy/docker/start_engine.sh

image: image-deps
	ECHO_WITH_CUDA=$(IMAGE_CUDA) deploy/docker/build_image.sh $(IMAGE_TAG)

# Runs the image as the DaemonSet does and checks it from outside, with the
# host's echoctl.
image-test: image build
	deploy/docker/image_test.sh $(IMAGE_TAG) $(BUILD_DIR)/bin/echoctl

# Drops the image and the engine's whole build cache (about 1 GB; other
# builds on the engine lose theirs too); keeps the base.
DOCKER ?= $(shell command -v /usr/bin/docker || command -v docker)
image-clean:
	$(DOCKER) image rm -f $(IMAGE_TAG) >/dev/null
	$(DOCKER) builder prune -af >/dev/null

bench: build
	$(BUILD_DIR)/bin/echo_plan_bench quality --milp_seconds=120
	$(BUILD_DIR)/bin/echo_plan_bench speed --max_ops=1200000
	$(BUILD_DIR)/bin/echo_plan_bench stash
	$(BUILD_DIR)/bin/echo_server_load_bench --mix estimate --seconds 10
	$(BUILD_DIR)/bin/echo_server_load_bench --mix plan --seconds 10
	$(BUILD_DIR)/bin/echo_scheduler_bench --repeat=10
	$(BUILD_DIR)/bin/echo_scheduler_rpc_bench --repeat 20
	$(BUILD_DIR)/bin/echo_server_load_bench --seconds 60

# Sanitizers and fuzzing (README "Fuzzing and sanitizers"): clang, each in
# its own build directory, so that none disturbs $(BUILD_DIR).
SANITIZER_PACKAGES := clang libclang-rt-14-dev
CLANG_CMAKE_FLAGS := -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER=clang++ -DECHO_WITH_CUDA=OFF
FUZZ_DIR ?= build-fuzz
ASAN_DIR ?= build-asan
TSAN_DIR ?= build-tsan
FUZZ_SECONDS ?= 60
FUZZERS := graph_plan checkmate text_graph profile_cache
# The unit and integration tests (not the CLI, Python, deployment, GPU and
# format tests); SANITIZER_TESTS, a ctest -R regex, runs a subset.
SANITIZER_TARGETS := planner_unit_tests cost_model_tests adapter_tests \
  profiler_tests recompute_plan_tests server_integration_tests
SANITIZER_TESTS ?= .
# Left out under the sanitizers: the chunked batch search over a GPT (116 s
# of CI's 241 s there); the chunked frontier and the batch searches run.
SANITIZER_SKIP = _NOT_BUILT$$|^ChunkedSchedulerTest\.MaxBatchAndFitTakeTheChunking$$
SANITIZER_CTEST = ctest -R '$(SANITIZER_TESTS)' -E '$(SANITIZER_SKIP)' \
  -LE '^(python|e2e|format|deploy|gpu)$$' --output-on-failure --timeout 1800
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS ?= detect_leaks=1
export TSAN_OPTIONS ?= halt_on_error=1:second_deadlock_stack=1 \
  suppressions=$(CURDIR)/tests/sanitizers/tsan.supp

sanitizer-deps: deps
	$(call install_missing,$(SANITIZER_PACKAGES) $(TEST_PACKAGES))

# $(1): build directory, $(2): ECHO_SANITIZE.
define sanitizer_tests
	cmake -S . -B $(1) $(CLANG_CMAKE_FLAGS) -DECHO_SANITIZE=$(2) $(CMAKE_FLAGS)
	cmake --build $(1) -j $(JOBS) --target $(SANITIZER_TARGETS)
	cd $(1) && $(SANITIZER_CTEST)
endef

asan: sanitizer-deps
	$(call sanitizer_tests,$(ASAN_DIR),address)

tsan: sanitizer-deps
	$(call sanitizer_tests,$(TSAN_DIR),thread)

# Each fuzzer for FUZZ_SECONDS from its seeds (built from tests/data) and
# the corpus it grew before; a crash stops and leaves its input in
# $(FUZZ_DIR)/crashes. The last lines say how many inputs each ran. The
# fuzz build is ASan + UBSan throughout, with the tests configured, so that
# `make hardening` builds the sanitizer tests there too.
FUZZ_CMAKE = cmake -S . -B $(FUZZ_DIR) $(CLANG_CMAKE_FLAGS) -DECHO_FUZZ=ON \
  -DECHO_BUILD_TESTS=ON $(CMAKE_FLAGS)
fuzz: sanitizer-deps
	$(FUZZ_CMAKE)
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target echo_fuzzers
	$(MAKE) --no-print-directory fuzz-run

fuzz-run:
	@mkdir -p $(FUZZ_DIR)/crashes
	@for f in $(FUZZERS); do \
	  mkdir -p $(FUZZ_DIR)/corpus/$$f; \
	  echo "fuzzing $$f for $(FUZZ_SECONDS) s"; \
	  $(FUZZ_DIR)/bin/$${f}_fuzzer -max_total_time=$(FUZZ_SECONDS) \
	    -timeout=30 -max_len=65536 -print_final_stats=1 \
	    -artifact_prefix=$(FUZZ_DIR)/crashes/$$f- \
	    $(FUZZ_DIR)/corpus/$$f $(FUZZ_DIR)/fuzz_seeds/$$f \
	    2> $(FUZZ_DIR)/$$f.log || { tail -50 $(FUZZ_DIR)/$$f.log; exit 1; }; \
	  echo "$$f: $$(grep -o 'number_of_executed_units: [0-9]*' \
	    $(FUZZ_DIR)/$$f.log) in $(FUZZ_SECONDS) s, no crash"; \
	done

# CI's hardening stage: `make fuzz` and `make asan` from one clang build
# (the fuzz build's ASan + UBSan), not two: the fuzzers' smoke run, then the
# unit and integration tests under ASan + UBSan.
hardening: sanitizer-deps
	$(FUZZ_CMAKE)
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target echo_fuzzers $(SANITIZER_TARGETS)
	$(MAKE) --no-print-directory fuzz-run
	cd $(FUZZ_DIR) && $(SANITIZER_CTEST)

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_DIR) $(ASAN_DIR) $(TSAN_DIR)
