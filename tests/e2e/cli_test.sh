#!/usr/bin/env bash
# End-to-end: runs the built echod and echoctl as a user would.
# usage: cli_test.sh BIN_DIR DATA_DIR
set -u
bin=${1:?bin dir}
data=${2:?data dir}
work=$(mktemp -d)
passed=0
failed=0
echod_pid=""
cleanup() {
  [ -n "$echod_pid" ] && kill -9 "$echod_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

check() {  # check NAME COMMAND...: passes when COMMAND succeeds
  local name=$1
  shift
  if "$@"; then
    passed=$((passed + 1))
    echo "ok   - $name"
  else
    failed=$((failed + 1))
    echo "FAIL - $name"
  fi
}

# Starts echod with the given env/flags; sets echod_pid, port, metrics.
start_echod() {
  "$@" >"$work/echod.log" 2>&1 &
  echod_pid=$!
  for _ in $(seq 1 100); do
    if grep -q "serving echo.v1.MemoryPlanner" "$work/echod.log"; then break; fi
    sleep 0.1
  done
  port=$(sed -n 's/.*serving echo.v1.MemoryPlanner on 127.0.0.1:\([0-9]*\).*/\1/p' "$work/echod.log")
  metrics=$(sed -n 's#.*metrics http://\([0-9.:]*\)/metrics.*#\1#p' "$work/echod.log")
}

# Flags come from the environment, as in the Kubernetes ConfigMap.
start_echod env ECHO_GRPC_ADDRESS=127.0.0.1:0 ECHO_METRICS_ADDRESS=127.0.0.1:0 \
  ECHO_UNIX_SOCKET="$work/echod.sock" ECHO_LOG_LEVEL=debug "$bin/echod"
check "echod starts from ECHO_* variables" test -n "$port"
ctl() { "$bin/echoctl" --server "127.0.0.1:$port" "$@"; }

check "health is SERVING" ctl health
check "health over the unix socket" "$bin/echoctl" --server "unix://$work/echod.sock" health

ctl estimate --graph "$data/checkmate/vgg16_b256_train.json" >"$work/est.txt"
check "estimate prints the VGG16 plain peak" grep -q "peak: 15825108992 bytes" "$work/est.txt"
check "estimate prints a breakdown" grep -q "stashed activations" "$work/est.txt"

ctl estimate --graph "$data/checkmate/vgg16_b256_train.json" --output json >"$work/est.json"
check "estimate --output json has peak_bytes" grep -q '"peak_bytes": "15825108992"' "$work/est.json"
check "json output parses" python3 -c "import json,sys; d=json.load(open('$work/est.json')); sys.exit(int(d['peak_bytes']) != 15825108992)"

cat >"$work/bad.pbtxt" <<'PB'
name: "bad"
tensors { id: "x" size_bytes: 16 }
ops { id: "matmul_7" input_ids: "x" input_ids: "ghost" output_ids: "y" }
tensors { id: "y" size_bytes: 16 }
PB
ctl estimate --graph "$work/bad.pbtxt" >"$work/bad.out" 2>"$work/bad.err"
rc=$?
check "malformed graph: echoctl exits non-zero" test "$rc" -ne 0
check "malformed graph: server's INVALID_ARGUMENT naming the op" \
  grep -q "INVALID_ARGUMENT: op 'matmul_7': reads unknown tensor 'ghost'" "$work/bad.err"
check "still serving after bad input" ctl health

ctl frobnicate >/dev/null 2>&1
check "unknown command exits 2" test $? -eq 2

curl -s "http://$metrics/metrics" >"$work/metrics.txt"
check "metrics count the rejected request" \
  grep -q 'echo_requests_total{code="INVALID_ARGUMENT",method="EstimateMemory"} 1' "$work/metrics.txt"
check "metrics count served estimates" \
  grep -q 'echo_requests_total{code="OK",method="EstimateMemory"} 2' "$work/metrics.txt"

kill -TERM "$echod_pid"
for _ in $(seq 1 100); do kill -0 "$echod_pid" 2>/dev/null || break; sleep 0.1; done
wait "$echod_pid"
rc=$?
echod_pid=""
check "SIGTERM drains and exits 0" test "$rc" -eq 0
check "drain is logged" grep -q "draining" "$work/echod.log"
check "unix socket removed on exit" test ! -e "$work/echod.sock"
ctl health >/dev/null 2>&1
check "health fails when echod is down" test $? -ne 0

"$bin/echod" --grpc_address=127.0.0.1:0 --metrics_address= --log_level=loud >"$work/bad_flag.log" 2>&1
check "bad flag value is refused with a message" grep -q "bad --log_level 'loud'" "$work/bad_flag.log"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
