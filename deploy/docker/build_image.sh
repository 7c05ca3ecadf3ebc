#!/usr/bin/env bash
# Builds the echod image with no Docker Hub access.
#
#   deploy/docker/build_image.sh [TAG]        (ECHO_WITH_CUDA=OFF|ON, default OFF;
#                                              CUDA_SOURCE=auto|apt|wheels, default auto)
#
# The base image (BASE_IMAGE, default debian:bookworm, and its -slim tag for
# the runtime stage) is used when the engine has it or can pull it; otherwise
# (the default base only) Debian DEBIAN_SUITE (bookworm) is bootstrapped
# from DEBIAN_MIRROR with debootstrap, with its -updates and -security
# sources, and imported as echo-base/debian:bookworm (and -slim), so that a
# machine that reaches only Debian's mirrors can build the image.
# Needs a running Docker engine with BuildKit (docker.io 20.10 or later), and
# root or sudo for debootstrap.
set -euo pipefail

tag="${1:-echod:cpu}"
with_cuda="${ECHO_WITH_CUDA:-OFF}"
base="${BASE_IMAGE:-debian:bookworm}"
suite="${DEBIAN_SUITE:-bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# A bootstrapped base gets a name of its own, so that it never stands in for
# the registry's image under that image's name.
bootstrapped="echo-base/debian:${suite}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo

# The Debian package's client, when both are installed: the engine speaks
# its API version for sure.
docker_bin="$(command -v /usr/bin/docker || command -v docker || true)"
[ -n "${docker_bin}" ] || { echo "build_image: no docker client (apt-get install docker.io)" >&2; exit 1; }
"${docker_bin}" info >/dev/null 2>&1 ||
  { echo "build_image: no Docker engine answers (start dockerd)" >&2; exit 1; }

have_image() { "${docker_bin}" image inspect "$1" >/dev/null 2>&1; }

if have_image "${base}" && have_image "${base}-slim"; then
  :
elif timeout 60 "${docker_bin}" pull -q "${base}" >/dev/null 2>&1 &&
     timeout 60 "${docker_bin}" pull -q "${base}-slim" >/dev/null 2>&1; then
  echo "build_image: pulled ${base} and ${base}-slim"
elif [ -z "${BASE_IMAGE:-}" ]; then
  base="${bootstrapped}"
  if ! have_image "${base}" || ! have_image "${base}-slim"; then
    command -v debootstrap >/dev/null ||
      { echo "build_image: debian:${suite} cannot be pulled and debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
    rootfs="$(mktemp -d "${TMPDIR:-/tmp}/echo-rootfs.XXXXXX")"
    trap '${sudo} rm -rf "${rootfs}" "${rootfs}.log"' EXIT
    echo "build_image: debian:${suite} cannot be pulled; bootstrapping ${suite} from ${mirror} as ${base}"
    ${sudo} debootstrap --variant=minbase "${suite}" "${rootfs}" "${mirror}" >"${rootfs}.log" 2>&1 ||
      { tail -20 "${rootfs}.log" >&2; exit 1; }
    # debootstrap writes the release alone: the image's apt-get also takes
    # the point-release updates and the security updates, as Docker Hub's
    # debian images do.
    security="${DEBIAN_SECURITY_MIRROR:-${mirror%/debian}/debian-security}"
    printf 'deb %s %s main\ndeb %s %s-updates main\ndeb %s %s-security main\n' \
      "${mirror}" "${suite}" "${mirror}" "${suite}" "${security}" "${suite}" |
      ${sudo} tee "${rootfs}/etc/apt/sources.list" >/dev/null
    # One minimal rootfs serves as both tags: the slim image differs only in
    # docs and locales, which minbase leaves out as well.
    ${sudo} tar -C "${rootfs}" -c . | "${docker_bin}" import - "${base}" >/dev/null
    "${docker_bin}" tag "${base}" "${base}-slim"
  fi
else
  echo "build_image: ${base} or ${base}-slim cannot be pulled (BASE_IMAGE is set: nothing is bootstrapped)" >&2
  exit 1
fi

# The CUDA variant may download from PyPI and NVIDIA in the build stage:
# it trusts what this host trusts (CA_BUNDLE), which matters behind a
# TLS-intercepting proxy. Passed as a secret, so it stays out of the layers.
ca_bundle="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
secret_args=()
[ -s "${ca_bundle}" ] && secret_args=(--secret "id=ca_bundle,src=${ca_bundle}")

DOCKER_BUILDKIT=1 "${docker_bin}" build -f "${root}/deploy/docker/Dockerfile" \
  "${secret_args[@]}" \
  --build-arg BASE_IMAGE="${base}" --build-arg ECHO_WITH_CUDA="${with_cuda}" \
  --build-arg CUDA_SOURCE="${CUDA_SOURCE:-auto}" \
  -t "${tag}" "${root}"
echo "build_image: built ${tag} (ECHO_WITH_CUDA=${with_cuda}, base ${base})"
