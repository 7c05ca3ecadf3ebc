#!/usr/bin/env bash
# tests/gpu/run_on_gpu.sh --dry on this machine (issue 22): the bundle as
# make_bundle.sh makes it, every stage up to the first device call, and the
# tables the real run writes. Prints each stage's time, the estimate of the
# real run's length comes from them (docs/testing.md).
#
#   dry_run_test.sh BUILD_DIR
set -uo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(cd "$1" && pwd)"
bin="$build/bin"
source "$root/tests/e2e/lib.sh"

"$root/tests/gpu/make_bundle.sh" "$build" "$work/bundle" >"$work/bundle.log" 2>&1
check "make_bundle.sh packs echod and the wheel" \
  bash -c "[ -x '$work/bundle/bin/echod' ] && ls '$work'/bundle/wheels/echo_torch-*.whl >/dev/null"
PYTHON="$build/venv/bin/python" bash "$root/tests/gpu/run_on_gpu.sh" --dry "$work/out" "$work/bundle" \
  >"$work/run.log" 2>&1
rc=$?
cat "$work/out/summary.txt" 2>/dev/null
check "run_on_gpu.sh --dry exits 0" test "$rc" -eq 0
check "every stage ran and exited 0" \
  bash -c "grep -c ': exit 0 in' '$work/out/summary.txt' | grep -qx '[2-9]'"
check "the frontier tables are written" \
  bash -c "[ -s '$work/out/frontier/results.json' ] && [ -s '$work/out/frontier/frontier.md' ]"
check "the timed table is written, with the executor's reference row" \
  grep -q "| gpt | AOT plain (same executor) |" "$work/out/chunked.md"
check "the timed table has the rows priced by the hook's times" \
  grep -q "| gpt | Echo AUTO 5%, chunking auto, client times (" "$work/out/chunked.md"
check "the hook ran on the bundled echod" grep -q "torch 2.13" "$work/out/summary.txt"
[ "$rc" -eq 0 ] || tail -n 30 "$work/run.log"

# The run's budget: a second run in the same OUTDIR (its venv is ready, so
# little is spent before the first stage) with 12 s has none left for the
# stages; they are skipped, say why, and fail the run.
PYTHON="$build/venv/bin/python" RUN_BUDGET_SECONDS=12 bash "$root/tests/gpu/run_on_gpu.sh" --dry \
  "$work/out" "$work/bundle" >"$work/budget.log" 2>&1
check "a spent budget fails the run" test "$?" -ne 0
check "a spent budget skips the frontier stage, saying so" \
  grep -q "^frontier: exit 124 in 0 s (skipped: the run's 12 s budget is spent)" "$work/out/summary.txt"

# STAGES names the stages to run; the others say so and do not fail the run.
PYTHON="$build/venv/bin/python" STAGES="none" bash "$root/tests/gpu/run_on_gpu.sh" --dry \
  "$work/out" "$work/bundle" >"$work/stages.log" 2>&1
check "stages not in STAGES are not run, and the run passes" test "$?" -eq 0
check "a stage not in STAGES says so" \
  grep -q "^chunked: not run (not in STAGES)" "$work/out/summary.txt"
finish
