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
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libssl-dev
# openssl: the security tests make a throwaway CA at test time; chromium:
# echoctl report's page is loaded headless (tests/e2e/report_test.sh).
TEST_PACKAGES := $(RUN_PACKAGES) python3 python3-venv python3-pip python3-dev curl \
  clang-format openssl chromium
# The PyTorch hook's tests: a venv with torch (CPU build) and echo-torch
# (python3-dev: TorchInductor compiles C++ against Python.h),
# installed the way README tells users to.
VENV := $(BUILD_DIR)/venv
TORCH_VERSION ?= 2.13.0

SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: all deps test-deps configure build run test bench python-venv clean

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
	$(VENV)/bin/pip install -q ./client/python[bench] networkx
	$(VENV)/bin/python -c 'import echo_torch, torch; print("echo-torch", echo_torch.__version__, "on torch", torch.__version__)'

test: test-deps configure python-venv
	cmake --build $(BUILD_DIR) -j $(JOBS)
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 1800

bench: build
	$(BUILD_DIR)/bin/echo_plan_bench quality --milp_seconds=120
	$(BUILD_DIR)/bin/echo_plan_bench speed --max_ops=1200000
	$(BUILD_DIR)/bin/echo_server_load_bench --mix estimate --seconds 10
	$(BUILD_DIR)/bin/echo_server_load_bench --mix plan --seconds 10
	$(BUILD_DIR)/bin/echo_server_load_bench --seconds 60

clean:
	rm -rf $(BUILD_DIR)
