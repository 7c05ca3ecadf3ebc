#!/usr/bin/env bash
# Lays out a CUDA 13 toolkit with cuBLAS and cuDNN from NVIDIA's PyPI wheels
# (cmake/cuda-wheels.txt), for building libecho_cuda_plugin.so where NVIDIA's
# apt repository is unreachable (the image's build stage, ECHO_CUDA_SOURCE).
#
#   cuda_from_wheels.sh PINS PREFIX RUNTIME_LIBDIR
#
# PREFIX/nvidia/cu13 becomes the toolkit (CUDAToolkit_ROOT; cuBLAS inside it)
# and PREFIX/nvidia/cudnn holds cuDNN, the layout cmake/cuda_wheels.cmake
# reads (ECHO_CUDA_WHEELS_DIR=PREFIX). The shared libraries the plugin needs
# at run time (the CUDA runtime, cuBLAS, cuDNN) are copied to RUNTIME_LIBDIR.
# Needs python3 with pip; the wheels are unpacked, not installed.
set -euo pipefail
pins="${1:?usage: cuda_from_wheels.sh PINS PREFIX RUNTIME_LIBDIR}"
prefix="${2:?}"
libdir="${3:?}"
download="$(mktemp -d)"
trap 'rm -rf "${download}"' EXIT

python3 -m pip download -q --no-deps --disable-pip-version-check \
  -d "${download}" -r "${pins}"
mkdir -p "${prefix}"
for wheel in "${download}"/*.whl; do
  python3 -m zipfile -e "${wheel}" "${prefix}"
done
rm -rf "${prefix}"/*.dist-info

# The toolkit's usual shape: targets/<arch> and lib64 point at the wheels'
# include/ and lib/, and the runtime has its unversioned name for the linker.
toolkit="${prefix}/nvidia/cu13"
# zipfile keeps no modes: the tools are executables again.
find "${toolkit}/bin" "${toolkit}/nvvm/bin" -type f -exec chmod 0755 {} +
[ -x "${toolkit}/bin/nvcc" ] || { echo "cuda_from_wheels: no nvcc in ${toolkit}" >&2; exit 1; }
mkdir -p "${toolkit}/targets/x86_64-linux"
ln -sfn ../../include "${toolkit}/targets/x86_64-linux/include"
ln -sfn ../../lib "${toolkit}/targets/x86_64-linux/lib"
ln -sfn lib "${toolkit}/lib64"
ln -sfn libcudart.so.13 "${toolkit}/lib/libcudart.so"

mkdir -p "${libdir}"
cp -a "${toolkit}"/lib/libcudart.so.13* "${toolkit}"/lib/libcublas.so.13* \
  "${toolkit}"/lib/libcublasLt.so.13* "${prefix}"/nvidia/cudnn/lib/libcudnn*.so.9* \
  "${libdir}/"
echo "cuda_from_wheels: toolkit $("${toolkit}/bin/nvcc" --version | tail -1) in ${toolkit};" \
  "$(ls "${libdir}" | wc -l) runtime libraries in ${libdir}"
