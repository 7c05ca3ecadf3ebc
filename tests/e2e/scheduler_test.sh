#!/usr/bin/env bash
# End-to-end, as a cluster scheduler would: register the five Checkmate
# graphs (batch dimension from their names) and the hook's fixtures once,
# then ask by fingerprint only: fit on every catalog device with each
# device's largest batch, the largest batch on one device, the frontier;
# and check the answers against plans it replays.
# usage: scheduler_test.sh BIN_DIR DATA_DIR
set -u
bin=${1:?bin dir}
data=${2:?data dir}
source "$(dirname "$0")/lib.sh"

start_echod "$bin/echod" --grpc_address=127.0.0.1:0 --metrics_address=127.0.0.1:0
check "echod starts" test -n "$port"

json() {  # json FILE EXPRESSION: prints EXPRESSION over the parsed file `d`
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"
}

graphs=()
for g in "$data"/checkmate/*_train.json; do graphs+=("$g"); done
for g in "$data"/graphs/*.pb; do graphs+=("$g"); done
check "five Checkmate graphs and the hook's fixtures" test "${#graphs[@]}" -ge 10

for g in "${graphs[@]}"; do
  name=$(basename "$g")
  batch_flag=()
  case "$g" in *.json) batch_flag=(--batch_dim auto) ;; esac
  fp=$(ctl register --graph "$g" "${batch_flag[@]}" 2>/dev/null)
  check "$name: registered (64 hex digits)" grep -Eq '^[0-9a-f]{64}$' <<<"$fp"

  # Fit on every catalog device; graphs with a batch dimension also get
  # each device's largest batch.
  ctl --output json fit --fingerprint "$fp" --devices all --max_batch \
    --max_overhead_ratio 0.1 >"$work/fit.json"
  check "$name: fit answers every catalog device" \
    test "$(json "$work/fit.json" "len(d['devices'])")" -ge 8
  device=$(json "$work/fit.json" \
    "next((x['device_name'] for x in d['devices'] if x.get('fits') and x['planned_peak_bytes'] != x['baseline_peak_bytes']), d['devices'][-1]['device_name'])")

  # Replay: the fit answer is AUTO's plan under the device's usable memory
  # (memory - reserve): the same peak, within the budget when it fits.
  usable=$(json "$work/fit.json" "next(int(x['device_memory_bytes']) - int(x['reserved_bytes']) for x in d['devices'] if x['device_name'] == '$device')")
  ctl --output json plan --fingerprint "$fp" --device "$device" \
    --memory_limit_bytes "$usable" >"$work/plan.json"
  fit_answer=$(json "$work/fit.json" "next(str(x.get('fits', False)) + ' ' + x['planned_peak_bytes'] for x in d['devices'] if x['device_name'] == '$device')")
  replayed=$(json "$work/plan.json" "str(d.get('feasible', False) and d.get('recompute_overhead_ratio', 0) <= 0.1) + ' ' + d['planned_peak_bytes']")
  check "$name: $device's fit answer is the replayed plan's ($replayed)" \
    test "$fit_answer" = "$replayed"

  if [ "${#batch_flag[@]}" -gt 0 ]; then
    fit_batch=$(json "$work/fit.json" "next(x.get('max_batch_size', '-') for x in d['devices'] if x['device_name'] == '$device')")
    ctl --output json max-batch --fingerprint "$fp" --device "$device" \
      --max_overhead_ratio 0.1 >"$work/batch.json"
    batch=$(json "$work/batch.json" "d['with_recompute']['batch_size']")
    check "$name: $device's largest batch is max-batch's ($batch)" \
      test "$fit_batch" = "$batch"
  fi

  # The frontier: every point's memory limit gives back its plan.
  ctl --output json frontier --fingerprint "$fp" --device "$device" \
    --max_points 4 >"$work/frontier.json"
  points=$(json "$work/frontier.json" "len(d['points'])")
  check "$name: frontier has points" test "$points" -ge 1
  last=$((points - 1))
  limit=$(json "$work/frontier.json" "d['points'][$last]['memory_limit_bytes']")
  want=$(json "$work/frontier.json" "d['points'][$last]['plan_fingerprint'] + ' ' + d['points'][$last]['peak_bytes']")
  ctl --output json plan --fingerprint "$fp" --device "$device" \
    --memory_limit_bytes "$limit" >"$work/replay.json"
  got=$(json "$work/replay.json" "d['plan_fingerprint'] + ' ' + d['planned_peak_bytes']")
  check "$name: the lowest frontier point replays ($want)" test "$want" = "$got"
done

# The answers came from the registry: nothing was sent twice.
curl -s "http://$metrics/metrics" >"$work/metrics.txt"
check "the graph registry counted hits" \
  grep -Eq '^echo_cache_hits_total\{cache="graph"\} [1-9]' "$work/metrics.txt"
check "health still SERVING" ctl health
finish
