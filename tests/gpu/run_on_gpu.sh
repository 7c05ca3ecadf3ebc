#!/usr/bin/env bash
# Builds Echo with the CUDA profiler and runs, on a machine with a GPU: the
# profiler unit tests, the GPU tests (CTest label `gpu`) and the calibration
# (profiled vs analytic times, fitted efficiencies).
#
#   tests/gpu/run_on_gpu.sh [build dir]      (default: build-gpu)
#
# Results go to $OUT when set (the device runner's output folder), else to
# the build dir: gpu_tests.txt, calibration.txt, calibration.csv.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build-gpu}"
out="${OUT:-$build}"
mkdir -p "$out"

command -v nvidia-smi >/dev/null && nvidia-smi | tee "$out/nvidia_smi.txt" || true
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DECHO_WITH_CUDA=ON
cmake --build "$build" -j"$(nproc)" \
  --target profiler_tests gpu_profiler_tests echo_calibrate

status=0
"$build/bin/profiler_tests" --gtest_brief=1 || status=1
(cd "$build" && ctest -L gpu --output-on-failure) 2>&1 | tee "$out/gpu_tests.txt" || status=1
"$build/bin/gpu_profiler_tests" 2>&1 | tee -a "$out/gpu_tests.txt" || status=1
"$build/bin/echo_calibrate" --csv="$out/calibration.csv" 2>&1 \
  | tee "$out/calibration.txt" || status=1
exit "$status"
