#!/usr/bin/env bash
# Packs what tests/gpu/run_on_gpu.sh needs on a GPU machine whose image has
# torch, grpcio and protobuf but no gRPC C++ libraries and no network:
# echod (stripped) and its shared libraries except glibc's, the CUDA
# profiler plugin and the profiler test binaries when this build has them,
# and the echo-torch wheel.
#
#   tests/gpu/make_bundle.sh [build dir] [bundle dir]   (default: build, build/gpu-bundle)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build}"
bundle="${2:-$build/gpu-bundle}"
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/wheels"

binaries=("$build/bin/echod")
for extra in profiler_tests gpu_profiler_tests echo_calibrate; do
  [ -x "$build/bin/$extra" ] && binaries+=("$build/bin/$extra")
done
for b in "${binaries[@]}"; do
  strip -o "$bundle/bin/$(basename "$b")" "$b"
done
if [ -f "$build/bin/libecho_cuda_plugin.so" ]; then
  strip -o "$bundle/bin/libecho_cuda_plugin.so" "$build/bin/libecho_cuda_plugin.so"
else
  echo "note: $build has no libecho_cuda_plugin.so (built without CUDA/cuBLAS):" \
       "the bundle has no GPU profiler" >&2
fi
# Shared libraries, without glibc's own (the GPU image brings those).
for b in "${binaries[@]}"; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64)\.so' |
  while read -r lib; do cp -L "$lib" "$bundle/lib/"; done
strip --strip-unneeded "$bundle"/lib/*.so* 2>/dev/null || true

python="${PYTHON:-$build/venv/bin/python}"
"$python" -m pip wheel -q --no-deps -w "$bundle/wheels" "$root/client/python"
du -sh "$bundle"
