# Shared by the e2e scripts: a work dir, echod's lifetime, named checks.
# Source after setting `bin`; ends each script with `finish`.
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

ctl() { "$bin/echoctl" --server "127.0.0.1:$port" "$@"; }

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
}
