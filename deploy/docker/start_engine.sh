#!/usr/bin/env bash
# Starts a Docker engine when none answers (a CI machine or a fresh host with
# docker.io installed and no init system running it), and waits for it.
set -euo pipefail
docker_bin="$(command -v /usr/bin/docker || command -v docker)"
"${docker_bin}" info >/dev/null 2>&1 && exit 0
# An engine that runs but refuses this user is not a missing one: say so
# rather than start a second.
if pgrep -x dockerd >/dev/null; then
  echo "start_engine: dockerd runs but does not answer this user:" \
    "$("${docker_bin}" info 2>&1 | tail -1)" >&2
  exit 1
fi
command -v dockerd >/dev/null || { echo "start_engine: no dockerd (apt-get install docker.io)" >&2; exit 1; }
sudo=""
[ "$(id -u)" = 0 ] || sudo=sudo
log="${TMPDIR:-/tmp}/echo-dockerd.log"
echo "start_engine: starting dockerd (log ${log})"
${sudo} nohup dockerd >"${log}" 2>&1 &
for _ in $(seq 1 60); do
  "${docker_bin}" info >/dev/null 2>&1 && exit 0
  sleep 1
done
echo "start_engine: dockerd did not answer in 60 s:" >&2
tail -20 "${log}" >&2
exit 1
