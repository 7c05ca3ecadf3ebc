#!/usr/bin/env bash
# Packs echod to run on a machine without gRPC's C++ libraries or a
# toolchain: DEST/bin gets echod and echo_milp_worker (policy OPTIMAL's
# child), stripped, plus any extra binaries named after DEST and the CUDA
# profiler plugin when this build has it; DEST/lib gets every shared library
# they load except glibc's own (found at run time with LD_LIBRARY_PATH=DEST/lib,
# as echo_torch's private echod and tests/gpu/run_on_gpu.sh set it). The
# plugin's own libraries (cuBLAS, cuDNN: about 1 GB) are not packed: the GPU
# machine brings them. PACK_CUDA_PLUGIN=0 leaves the plugin out.
#
#   deploy/pack/pack_echod.sh BUILD_DIR DEST [EXTRA_BINARY ...]
set -euo pipefail
build="$1"
dest="$2"
shift 2
mkdir -p "$dest/bin" "$dest/lib"
binaries=("$build/bin/echod" "$build/bin/echo_milp_worker")
for extra in "$@"; do
  [ -x "$build/bin/$extra" ] && binaries+=("$build/bin/$extra")
done
for b in "${binaries[@]}"; do
  [ -x "$b" ] || { echo "pack_echod: $b is not built (cmake --build $build)" >&2; exit 1; }
  strip -o "$dest/bin/$(basename "$b")" "$b"
done
if [ "${PACK_CUDA_PLUGIN:-1}" = 0 ]; then
  :
elif [ -f "$build/bin/libecho_cuda_plugin.so" ]; then
  strip -o "$dest/bin/libecho_cuda_plugin.so" "$build/bin/libecho_cuda_plugin.so"
else
  echo "note: $build has no libecho_cuda_plugin.so (built without CUDA/cuBLAS):" \
       "the pack has no GPU profiler" >&2
fi
# Shared libraries, without glibc's own (every Linux brings those).
for b in "${binaries[@]}"; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libpthread|libdl|librt|ld-linux-x86-64)\.so' |
  while read -r lib; do cp -L "$lib" "$dest/lib/"; done
chmod u+w "$dest"/lib/*.so* 2>/dev/null || true
strip --strip-unneeded "$dest"/lib/*.so* 2>/dev/null || true
