#!/usr/bin/env bash
# Offline checks of deploy/: renders every kustomize overlay with
# `kubectl kustomize`, validates the objects against the Kubernetes and
# Prometheus Operator schemas (npm kubernetes-models), asserts the deployment's
# properties, checks the Dockerfile, and -- when echod is built in build/bin
# (or $ECHO_BIN_DIR) -- runs echod with the manifests' configuration.
#
# Usage: bash tests/deploy/run.sh   (from anywhere; ctest runs it as deploy_manifests)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "${here}"

if ! command -v kubectl >/dev/null 2>&1; then
  echo "SKIPPED: kubectl not found"
  exit 0
fi
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "SKIPPED: node not found"
  exit 0
fi
node_major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "${node_major}" -lt 20 ]; then
  echo "SKIPPED: node ${node_major} found, these checks need node >= 20"
  exit 0
fi

# Install the pinned dependencies when they are missing or older than the lock.
if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi

tap="$(mktemp)"
trap 'rm -f "${tap}"' EXIT

status=0
node --test --test-timeout=300000 \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="${tap}" \
  test/*.test.mjs || status=$?

count() { sed -n "s/^# $1 \([0-9]*\)$/\1/p" "${tap}" | tail -n 1; }
echo "deploy: $(count pass) passed, $(count fail) failed, $(count skipped) skipped"
exit "${status}"
