#!/usr/bin/env bash
# Packs what tests/gpu/run_on_gpu.sh needs on a GPU machine whose image has
# torch, grpcio and protobuf but no gRPC C++ libraries and no network:
# echod (deploy/pack/pack_echod.sh: stripped, with its shared libraries
# except glibc's and the CUDA profiler plugin when this build has it), the
# profiler test binaries, and the echo-torch wheel.
#
#   tests/gpu/make_bundle.sh [build dir] [bundle dir]   (default: build, build/gpu-bundle)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
bundle="${2:-$build/gpu-bundle}"
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/wheels"

"$root/deploy/pack/pack_echod.sh" "$build" "$bundle" profiler_tests gpu_profiler_tests \
  echo_calibrate

python="${PYTHON:-$build/venv/bin/python}"
"$python" -m pip wheel -q --no-deps -w "$bundle/wheels" "$root/client/python"
du -sh "$bundle"
