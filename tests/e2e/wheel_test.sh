#!/usr/bin/env bash
# The wheel a user installs (issue 22): `make wheel`'s steps (pack echod with
# its libraries, build echo-torch around it), installed into a fresh venv
# with torch 2.13 and nothing else; then a training script that calls
# echo_torch.optimize(model) with no other argument, with no echod running,
# no echod on PATH and no toolchain on PATH. It must plan on a private echod
# and leave no echod behind.
#
#   wheel_test.sh BUILD_DIR [PYTHON_FOR_PIP_WHEEL]
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$1" && pwd)"
pip_python="${2:-$build/venv/bin/python}"
bin="$build/bin"
source "$root/tests/e2e/lib.sh"

PACK_CUDA_PLUGIN=0 "$root/deploy/pack/pack_echod.sh" "$build" "$work/pack"
ECHO_BUNDLE_DIR="$work/pack" "$pip_python" -m pip wheel -q --no-deps -w "$work/wheels" \
  "$root/client/python" 2>&1 | grep -v "^WARNING: Location" 
wheel=$(ls "$work"/wheels/echo_torch-*-py3-none-linux_*.whl 2>/dev/null)
check "the wheel is tagged for this platform" test -n "$wheel"
/usr/bin/python3 -m zipfile -l "$wheel" >"$work/wheel.list" 2>/dev/null
for part in _echod/bin/echod _echod/bin/echo_milp_worker "_echod/lib/libgrpc++"; do
  check "the wheel carries $part" grep -q "echo_torch/$part" "$work/wheel.list"
done

/usr/bin/python3 -m venv "$work/venv"
"$work/venv/bin/pip" install -q torch==2.13.0 "$wheel" 2>&1 | grep -v "^WARNING: Location"
check "the wheel installs beside torch 2.13" "$work/venv/bin/python" -c "import echo_torch"

cat >"$work/train.py" <<'PY'
import torch
import echo_torch

torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                                  torch.nn.Linear(1024, 256))
                              for _ in range(4)])
model = echo_torch.optimize(model)
x = torch.randn(64, 256)
for _ in range(2):
    model(x).square().mean().backward()
print("SOURCE", echo_torch.report(model).source)
print("FALLBACK", model.fallback_reason)
PY
# No echod anywhere a user would not have put one: PATH without the build,
# the default address unused (checked), HOME of its own (no plan cache).
if (exec 3<>/dev/tcp/127.0.0.1/50051) 2>/dev/null; then
  echo "something listens on 127.0.0.1:50051: this test needs the default address free"
  failed=$((failed + 1))
else
  env -i PATH=/usr/bin:/bin HOME="$work/home" TMPDIR="$work" \
    "$work/venv/bin/python" "$work/train.py" >"$work/train.log" 2>&1
  check "the script exits 0" test $? -eq 0
  check "it says a private echod was started" \
    grep -q "started a private one (.*_echod/bin/echod) on unix://" "$work/train.log"
  check "the plan came from echod (policy AUTO)" \
    grep -q "^SOURCE echod:RECOMPUTE_POLICY_AUTO" "$work/train.log"
  check "the model did not fall back to eager" grep -q "^FALLBACK None" "$work/train.log"
  check "no echod is left running" \
    bash -c "! pgrep -f '$work/venv/.*/[_]echod/bin/echod' >/dev/null"
  check "its private directory is gone" \
    bash -c "! ls -d '$work'/echo-torch-* >/dev/null 2>&1"
  grep -E "echo_torch: (no echod|planned)" "$work/train.log"
fi
finish
