#!/usr/bin/env bash
# Runs the echod image as the DaemonSet runs it and checks it from outside:
# health over TCP and over the Unix socket in a shared volume, an estimate,
# the metrics, a non-root user, a read-only root filesystem, and a SIGTERM
# drain that exits 0. In a CUDA image, that echod loaded the CUDA plugin and
# its libraries (with no GPU, the CUDA runtime's own answer, not a load error).
#
#   deploy/docker/image_test.sh [TAG] [ECHOCTL]   (default echod:cpu, build/bin/echoctl)
set -euo pipefail

tag="${1:-echod:cpu}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
echoctl="${2:-${root}/build/bin/echoctl}"
docker_bin="$(command -v /usr/bin/docker || command -v docker)"
name="echo-image-test-$$"
shared="$(mktemp -d "${TMPDIR:-/tmp}/echo-image-test.XXXXXX")"
cleanup() { "${docker_bin}" rm -f "${name}" >/dev/null 2>&1 || true; rm -rf "${shared}"; }
trap cleanup EXIT
fail() { echo "image_test: FAIL: $*" >&2; "${docker_bin}" logs "${name}" 2>&1 | tail -20 >&2; exit 1; }

# The socket directory is a host directory, as the DaemonSet's hostPath is:
# owned by the image's uid, as its init container leaves it. echod makes the
# socket 0660 for uid 10001, so only root on the host can use it.
[ "$(id -u)" = 0 ] ||
  { echo "image_test: run as root (the socket check connects to a 0660 socket of uid 10001)" >&2; exit 2; }
chown 10001:10001 "${shared}"

"${docker_bin}" run -d --name "${name}" --read-only \
  --tmpfs /tmp --tmpfs /var/cache/echo:uid=10001,gid=10001 \
  -v "${shared}:/run/echo" -e ECHO_UNIX_SOCKET=/run/echo/echod.sock \
  -p 127.0.0.1::50051 -p 127.0.0.1::9464 "${tag}" >/dev/null
grpc="$("${docker_bin}" port "${name}" 50051/tcp | head -1)"
metrics="$("${docker_bin}" port "${name}" 9464/tcp | head -1)"

for _ in $(seq 1 60); do
  "${echoctl}" --server "${grpc}" --timeout_seconds 2 health >/dev/null 2>&1 && break
  [ "$("${docker_bin}" inspect -f '{{.State.Running}}' "${name}")" = true ] || fail "container exited"
  sleep 1
done
"${echoctl}" --server "${grpc}" health >/dev/null || fail "health over TCP ${grpc}"
echo "image_test: health over TCP ${grpc}: SERVING"

[ -S "${shared}/echod.sock" ] || fail "no socket at ${shared}/echod.sock"
"${echoctl}" --server "unix://${shared}/echod.sock" health >/dev/null || fail "health over the shared socket"
echo "image_test: health over the Unix socket in the shared volume: SERVING"

gpu_line="$("${docker_bin}" logs "${name}" 2>&1 | grep -m1 "echod: GPU: " || true)"
[ -n "${gpu_line}" ] || fail "echod logged no GPU line"
if "${docker_bin}" exec "${name}" test -f /usr/local/lib/echo/libecho_cuda_plugin.so; then
  grep -q "CUDA plugin:\|built without CUDA" <<<"${gpu_line}" &&
    fail "the CUDA plugin did not load: ${gpu_line#*GPU: }"
  echo "image_test: CUDA plugin loaded: ${gpu_line#*GPU: }"
else
  echo "image_test: no CUDA plugin in the image: ${gpu_line#*GPU: }"
fi

estimate="$("${echoctl}" --server "${grpc}" estimate --graph "${root}/tests/data/graphs/transformer.pb")" ||
  fail "estimate"
grep -qi "peak" <<<"${estimate}" || fail "estimate printed no peak: ${estimate}"
echo "image_test: estimate: $(grep -i -m1 peak <<<"${estimate}")"

metric_lines="$(curl -fsS "http://${metrics}/metrics" | grep -c '^echo_')" || fail "metrics at ${metrics}"
[ "${metric_lines}" -gt 0 ] || fail "no echo_ metric at ${metrics}"
echo "image_test: ${metric_lines} echo_ metric lines at ${metrics}"

uid="$("${docker_bin}" exec "${name}" id -u)"
[ "${uid}" = 10001 ] || fail "echod runs as uid ${uid}, not 10001"
# As root inside the container, so that only the read-only mount can refuse.
"${docker_bin}" exec -u 0 "${name}" touch /usr/local/bin/x 2>/dev/null && fail "the root filesystem is writable"
echo "image_test: uid ${uid}, read-only root filesystem"

"${docker_bin}" stop -t 30 "${name}" >/dev/null
code="$("${docker_bin}" inspect -f '{{.State.ExitCode}}' "${name}")"
[ "${code}" = 0 ] || fail "exit ${code} after SIGTERM, not 0"
log="$("${docker_bin}" logs "${name}" 2>&1)"
grep -q "received SIGTERM" <<<"${log}" && grep -q "stopped" <<<"${log}" ||
  fail "the log does not show SIGTERM received and echod stopped"
echo "image_test: SIGTERM drained, exit 0"
echo "image_test: PASS (${tag})"
