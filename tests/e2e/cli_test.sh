#!/usr/bin/env bash
# End-to-end: runs the built echod and echoctl as a user would.
# usage: cli_test.sh BIN_DIR DATA_DIR PYTHON (the test venv's, with grpcio)
set -u
bin=${1:?bin dir}
data=${2:?data dir}
python=${3:?python with grpcio}
source "$(dirname "$0")/lib.sh"

# Flags come from the environment, as in the Kubernetes ConfigMap.
start_echod env ECHO_GRPC_ADDRESS=127.0.0.1:0 ECHO_METRICS_ADDRESS=127.0.0.1:0 \
  ECHO_UNIX_SOCKET="$work/echod.sock" ECHO_LOG_LEVEL=debug "$bin/echod"
check "echod starts from ECHO_* variables" test -n "$port"

check "health is SERVING" ctl health
check "reflection lists the service without tokens" \
  bash -c "'$python' '$(dirname "$0")/reflection_probe.py' 127.0.0.1:$port | grep -q echo.v1.MemoryPlanner"
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

ctl frobnicate >/dev/null 2>"$work/err.txt"
check "unknown command exits 2" test $? -eq 2
check "unknown command: one line naming it" \
  bash -c "grep -q frobnicate '$work/err.txt' && test \$(wc -l <'$work/err.txt') -eq 1"

vgg="$data/checkmate/vgg16_b256_train.json"
ctl plan --graph "$vgg" --policy AUTO --max_overhead_ratio 0.05 --output json >"$work/plan.json"
check "plan --output json is a feasible AUTO plan below the plain peak" python3 - "$work/plan.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
ok = (plan["feasible"] and plan["policy"] == "RECOMPUTE_POLICY_AUTO"
      and int(plan["planned_peak_bytes"]) < int(plan["baseline_peak_bytes"]) == 15825108992
      and plan["recompute_overhead_ratio"] <= 0.05
      and len([e for e in plan["schedule"] if not e["recompute"]]) == 45
      and "stash_tensor_ids" in plan and "peak_lower_bound_bytes" in plan)
sys.exit(0 if ok else 1)
PY
# OPTIMAL's deadline: a given --timeout_seconds holds (without one, echoctl
# waits for the solver's limit plus 30 s). VGG19 at 0.8x runs to its limit.
start_time=$SECONDS
ctl plan --graph "$data/checkmate/vgg19_b256_train.json" --policy optimal \
  --memory_limit_bytes 13646587494 --solver_time_limit_seconds 30 --timeout_seconds 1 \
  >/dev/null 2>"$work/deadline.err"
check "OPTIMAL: a given --timeout_seconds is the deadline" \
  bash -c "grep -q DEADLINE_EXCEEDED '$work/deadline.err' && test $((SECONDS - start_time)) -lt 10"
ctl plan --graph "$vgg" --policy Chen_Sqrt >"$work/plan.txt"
check "policy names are case-insensitive" grep -q "policy: chen_sqrt" "$work/plan.txt"
ctl plan --graph "$vgg" --policy bogus 2>"$work/err.txt" >/dev/null
check "unknown policy is a usage error (exit 2)" test $? -eq 2
check "unknown policy: one line naming it, no gRPC code" \
  bash -c "grep -q \"^echoctl: --policy: unknown policy 'bogus'\" '$work/err.txt' && test \$(wc -l <'$work/err.txt') -eq 1"
ctl plan --graph "$vgg" --memory_limit_bytes lots 2>"$work/err.txt" >/dev/null
check "malformed budget is a usage error (exit 2)" test $? -eq 2
check "malformed budget names the flag" grep -q "^echoctl: --memory_limit_bytes: 'lots' is not a byte size" "$work/err.txt"
ctl plan --graph "$vgg" --memory_limit_bytes 14GiB --output json >"$work/plan_gib.json"
check "sizes accept 14GiB" python3 -c "import json,sys; d=json.load(open('$work/plan_gib.json')); sys.exit(0 if d['feasible'] and int(d['planned_peak_bytes']) <= 14*2**30 < int(d['baseline_peak_bytes']) else 1)"
ctl plan --graph "$vgg" --memory_limit_bytes 1.5e10 --output json >"$work/plan_e10.json"
check "sizes accept 1.5e10" python3 -c "import json,sys; d=json.load(open('$work/plan_e10.json')); sys.exit(0 if d['feasible'] and int(d['planned_peak_bytes']) <= 1.5e10 else 1)"
ctl estimate --graph "$work/missing.pb" 2>"$work/err.txt" >/dev/null
check "missing graph file: exit 1" test $? -eq 1
check "missing graph file: the client's error, not a gRPC code" grep -qx "echoctl: cannot open $work/missing.pb" "$work/err.txt"
ctl plan --help >"$work/help.txt"
check "plan --help exits 0" test $? -eq 0
check "plan --help lists plan's flags" grep -q -- "--memory_limit_bytes" "$work/help.txt"
check "fit without --device is a usage error" bash -c "'$bin/echoctl' fit --graph '$vgg' 2>/dev/null; test \$? -eq 2"
ctl plan --graph "$vgg" --memory_limit_bytes 1000 >"$work/plan.txt"
check "an unreachable limit is an answer: infeasible" grep -q "INFEASIBLE" "$work/plan.txt"
ctl estimate --graph "$vgg" --device tpu-v9 2>"$work/err.txt" >/dev/null
check "unknown device is NOT_FOUND" grep -q "NOT_FOUND: unknown device 'tpu-v9'" "$work/err.txt"
ctl estimate --graph "$vgg" --device h100-80gb >/dev/null
check "estimate on a catalog device" test $? -eq 0
ctl fit --graph "$vgg" --device a100-80gb >"$work/fit.txt"
check "fit on a100-80gb" grep -q "^fits" "$work/fit.txt"
ctl max-batch --graph "$vgg" --batch_dim auto --device a100-80gb \
  --reserved_bytes 0 >"$work/batch.txt"
check "max-batch on a100-80gb: 80 GiB / 61,816,832 bytes per sample = 1389" \
  grep -q "without recomputation: batch 1389," "$work/batch.txt"
ctl fit --graph "$vgg" --batch_dim auto --devices a100-80gb --max_batch \
  >"$work/fit_batch.txt"
check "fit --max_batch ends the device's row with its largest batch" \
  grep -Eq "^a100-80gb .* [0-9]+$" "$work/fit_batch.txt"
ctl fit --graph "$vgg" --batch_dim auto --device a100-80gb --max_batch \
  >"$work/fit_batch_one.txt"
check "fit --device --max_batch prints the largest batch" \
  grep -Eq "^largest batch: [0-9]+$" "$work/fit_batch_one.txt"
for args in register "max-batch --device a100-80gb" frontier \
  "report --html $work/none.html"; do
  command=${args%% *}
  ctl $args >/dev/null 2>"$work/err.txt"
  check "$command without a graph is a usage error (exit 2)" test $? -eq 2
  check "$command without a graph names what is missing" \
    grep -q -- "--graph" "$work/err.txt"
done
ctl --output json max-batch --graph "$vgg" --batch_dim auto --device v100-16gb \
  --reserved_bytes 0 --multiple_of 32 >"$work/batch.json"
check "max-batch JSON, multiples of 32" grep -q '"batch_size": "256"' "$work/batch.json"
ctl max-batch --graph "$vgg" --batch_dim auto --device a100-80gb --min_batch 64 \
  --max_batch 32 2>"$work/err.txt" >/dev/null
check "max-batch min > max is INVALID_ARGUMENT" \
  grep -q "INVALID_ARGUMENT: max_batch (32) is below min_batch (64)" "$work/err.txt"
ctl frontier --graph "$vgg" >"$work/frontier.txt"
check "frontier starts at the plain peak" grep -q "15825108992" "$work/frontier.txt"
ctl node-info >"$work/node.txt"
check "node-info says no GPU" grep -q "GPUs: no GPU" "$work/node.txt"
if [ -f "$bin/libecho_cuda_plugin.so" ]; then
  # The plugin loads beside echod and answers for CUDA: the device count's
  # error, and the libraries' versions.
  check "node-info's no GPU comes from the CUDA plugin" \
    grep -q "GPUs: no GPU (cudaGetDeviceCount: cuda[A-Za-z]* ([0-9]*))" "$work/node.txt"
  check "node-info names the CUDA runtime, cuBLAS and cuDNN" \
    grep -Eq "CUDA runtime [0-9]+\.[0-9]+, cuBLAS [0-9.]+, cuDNN [0-9.]+" "$work/node.txt"
elif [ "${ECHO_REQUIRE_CUDA_PLUGIN:-0}" = 1 ]; then
  check "the CUDA plugin is built (ECHO_REQUIRE_CUDA_PLUGIN=1)" false
else
  check "node-info says echod was built without CUDA" \
    grep -q "GPUs: no GPU (built without CUDA)" "$work/node.txt"
fi
version=$("$bin/echoctl" --version | sed -n 's/^echoctl //p')
check "echoctl --version is the version node-info reports" grep -qx "echod: $version" "$work/node.txt"
ctl profile --graph "$vgg" 2>"$work/err.txt" >/dev/null
check "profile without a GPU is FAILED_PRECONDITION" grep -q "FAILED_PRECONDITION" "$work/err.txt"

curl -s "http://$metrics/metrics" >"$work/metrics.txt"
check "metrics count the rejected request" \
  grep -q 'echo_requests_total{code="INVALID_ARGUMENT",method="EstimateMemory"} 1' "$work/metrics.txt"
check "metrics count served estimates" \
  grep -q 'echo_requests_total{code="OK",method="EstimateMemory"} 3' "$work/metrics.txt"
check "metrics count plans by policy and outcome" \
  grep -q 'echo_plans_total{outcome="infeasible",policy="auto"} 1' "$work/metrics.txt"

# Cluster schedulers: register once, ask by fingerprint, every device.
fp=$(ctl register --graph "$vgg" 2>"$work/register.txt")
check "register prints a SHA-256 fingerprint" bash -c "[[ '$fp' =~ ^[0-9a-f]{64}$ ]]"
check "register says what it stored" grep -q "registered graph 'VGG16.*: 45 ops" "$work/register.txt"
check "the same graph registers to the same fingerprint" \
  test "$(ctl register --graph "$vgg" 2>/dev/null)" = "$fp"
ctl estimate --fingerprint "$fp" >"$work/est_fp.txt"
check "estimate by fingerprint" grep -q "peak: 15825108992 bytes" "$work/est_fp.txt"
ctl fit --fingerprint "$fp" --devices all >"$work/fit_all.txt"
check "fit --devices all: a row per catalog device" \
  test "$(grep -cE '^(rtx-2080-ti|v100-16gb|v100-32gb|a100-40gb|a100-80gb|h100-80gb|h200|l4) ' "$work/fit_all.txt")" -eq 8
check "fit --devices all: a summary" grep -q "^fits on [0-9] of 8 device(s)" "$work/fit_all.txt"
ctl --output json fit --fingerprint "$fp" --devices v100-16gb,a100-80gb >"$work/fit.json"
check "fit --devices json: per-device answers with the default reserve" python3 -c "
import json, sys
d = json.load(open('$work/fit.json'))['devices']
ok = [x['device_name'] for x in d] == ['v100-16gb', 'a100-80gb'] and all(
    int(x['reserved_bytes']) == 512 * 2**20 + int(0.05 * int(x['device_memory_bytes'])) for x in d)
sys.exit(0 if ok else 1)"
ctl fit --fingerprint "$fp" --devices v100-16gb,tpu-v9 2>"$work/err.txt" >/dev/null
check "fit with an unknown device is NOT_FOUND naming it" grep -q "NOT_FOUND: unknown device 'tpu-v9'" "$work/err.txt"
ctl plan --fingerprint "$fp" --memory_limit_bytes 10GiB >"$work/plan_fp.txt"
check "plan by fingerprint prints costs in percent" grep -qE "^extra compute: .* \([0-9.]+%\)" "$work/plan_fp.txt"
ctl estimate --fingerprint 0000 2>"$work/err.txt" >/dev/null
check "unknown fingerprint is NOT_FOUND naming it" grep -q "NOT_FOUND: graph fingerprint '0000'" "$work/err.txt"
check "--graph and --fingerprint together is a usage error" \
  bash -c "'$bin/echoctl' estimate --graph '$vgg' --fingerprint '$fp' 2>/dev/null; test \$? -eq 2"

# Measured op times price only the device they were measured on.
cat >"$work/cpu_measured.graph" <<'G'
tensor x f32[1024,1024] input
op mm fwd gemm x x -> y:f32[1024,1024] time=0.25 on=cpu:x86_64
op relu fwd elementwise y -> z:f32[1024,1024] time=0.125 on=cpu:x86_64
G
sed 's/on=cpu:x86_64/on=H100-80GB/' "$work/cpu_measured.graph" >"$work/h100_measured.graph"
sources() {  # sources GRAPH [FLAGS...]: "measured analytic compute_time"
  ctl estimate --graph "$@" --output json | python3 -c "
import json, sys
d = json.load(sys.stdin); c = d['cost_sources']
print(c['measured_ops'], c['analytic_ops'], d['compute_time_seconds'])"
}
check "no device: the measured times are used" \
  test "$(sources "$work/cpu_measured.graph")" = "2 0 0"
cpu_on_h100=$(sources "$work/cpu_measured.graph" --device h100-80gb)
check "CPU-measured times do not price h100-80gb (analytic instead)" \
  python3 -c "import sys; m, a, t = '$cpu_on_h100'.split(); sys.exit(not (m == '0' and a == '2' and 0 < float(t) < 0.01))"
check "times measured on h100-80gb price h100-80gb as measured" \
  test "$(sources "$work/h100_measured.graph" --device h100-80gb)" = "2 0 0.375"
ds2="$data/graphs/deepspeech2.pb"
ctl estimate --graph "$ds2" --device h100-80gb >"$work/ds2_h100.txt"
ctl estimate --graph "$ds2" --device rtx-2080-ti >"$work/ds2_rtx.txt"
h100_time=$(sed -n 's/^compute time on h100-80gb: \([0-9.]*\) s$/\1/p' "$work/ds2_h100.txt")
rtx_time=$(sed -n 's/^compute time on rtx-2080-ti: \([0-9.]*\) s$/\1/p' "$work/ds2_rtx.txt")
check "deepspeech2: h100-80gb computes faster than rtx-2080-ti" \
  python3 -c "import sys; h, r = float('$h100_time' or 0), float('$rtx_time' or 0); sys.exit(0 if 0 < h < r else 1)"

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

"$bin/echod" --grpc_address=127.0.0.1:0 --metrics_address= --memory_budget_bytes=100000000 >"$work/budget.log" 2>&1
check "a --memory_budget_bytes below the caches is refused at start" \
  grep -q "memory_budget_bytes: the memory budget leaves -545 MiB for requests" "$work/budget.log"

# Bearer tokens and ProfileOps for listed identities (echoctl's side; the
# server's is in tests/integration/security_test.cc).
printf 'ops-bot %s\n%s\n' ops-token-0123456789abcdef bare-token-0123456789abcdef >"$work/tokens"
chmod 600 "$work/tokens"
echo ops-token-0123456789abcdef >"$work/ops.token"
echo bare-token-0123456789abcdef >"$work/bare.token"
start_echod "$bin/echod" --grpc_address=127.0.0.1:0 --metrics_address= \
  --unix_socket="$work/echod.sock" --auth_token_file="$work/tokens" \
  --profile_allowed_identities=ops-bot
check "echod starts with --auth_token_file" test -n "$port"
check "socket is 0660" test "$(stat -c %a "$work/echod.sock")" = 660
check "health needs no token" ctl health
# Reflection would describe the API to callers without a token: off by
# default with tokens on, on without (issue 23).
reflect() { "$python" "$(dirname "$0")/reflection_probe.py" "$@"; }
check "reflection is off with tokens on" \
  test "$(reflect "127.0.0.1:$port")" = "error: UNIMPLEMENTED"
ctl estimate --graph "$vgg" >/dev/null 2>"$work/err.txt"
check "no token: UNAUTHENTICATED" grep -q "^echoctl: UNAUTHENTICATED: EstimateMemory: no bearer token" "$work/err.txt"
check "--auth_token_file authenticates" ctl estimate --graph "$vgg" --auth_token_file "$work/bare.token"
check "ECHOCTL_AUTH_TOKEN_FILE authenticates" env ECHOCTL_AUTH_TOKEN_FILE="$work/bare.token" \
  "$bin/echoctl" --server "unix://$work/echod.sock" node-info
ctl profile --graph "$vgg" --auth_token_file "$work/bare.token" >/dev/null 2>"$work/err.txt"
check "a token without a listed identity may not profile" grep -q "PERMISSION_DENIED: ProfileOps" "$work/err.txt"
ctl profile --graph "$vgg" --auth_token_file "$work/ops.token" >/dev/null 2>"$work/err.txt"
check "a listed identity gets past authorization (no GPU here)" grep -q "FAILED_PRECONDITION" "$work/err.txt"
ctl health --tls_cert_file "$work/ops.token" >/dev/null 2>"$work/err.txt"
check "client certificate without its key is refused" grep -q "must be given together" "$work/err.txt"
kill -TERM "$echod_pid"
wait "$echod_pid"
echod_pid=""

# Issue 23, item 2: under a hard address-space limit below
# --optimal_memory_limit_bytes the solver's limits cannot be set. echod says
# so at start and in node-info, and OPTIMAL is FAILED_PRECONDITION naming
# the flag (it was INTERNAL "cannot set its limits" from every child).
start_echod prlimit --as=3000000000 "$bin/echod" --grpc_address=127.0.0.1:0 --metrics_address=
check "echod starts under prlimit --as" test -n "$port"
check "the start log says OPTIMAL's limit cannot be set" \
  grep -q "cannot limit its solver process to --optimal_memory_limit_bytes=4294967296: echod itself runs under a hard address-space limit of 3000000000" "$work/echod.log"
ctl node-info >"$work/node.txt"
check "node-info says why OPTIMAL is unavailable" \
  grep -q "^policy OPTIMAL: unavailable: .*address-space limit of 3000000000" "$work/node.txt"
check "node-info shows the workers" grep -q "^workers: [1-9]" "$work/node.txt"
# The default budget follows the address-space limit: (3e9 - 1 GiB) x 3/4,
# less the caches (576 MiB) and echod's 64 MiB = 737.77 MiB for requests.
check "node-info shows the memory for requests under it" \
  grep -q "for requests: 737.77 MiB" "$work/node.txt"
ctl plan --graph "$vgg" --policy optimal --memory_limit_bytes 13000000000 \
  --solver_time_limit_seconds 2 >/dev/null 2>"$work/err.txt"
check "OPTIMAL under it: FAILED_PRECONDITION naming the flag" \
  grep -q "^echoctl: FAILED_PRECONDITION: policy OPTIMAL cannot limit its solver process to --optimal_memory_limit_bytes" "$work/err.txt"
check "AUTO still plans under it" ctl plan --graph "$vgg" --policy AUTO --max_overhead_ratio 0.05
# Issue 23, item 3: six concurrent estimates of a 1M-op graph under this
# address-space limit took echod into its out-of-memory paths (once a
# segfault inside gRPC). Each is now refused before it is parsed: its
# estimate is more than the whole budget. echod keeps serving.
"$python" "$(dirname "$0")/big_graph.py" 1000000 "$work/big.pb"
estimates=()
for i in 1 2 3 4 5 6; do
  ctl --timeout_seconds 120 estimate --graph "$work/big.pb" >/dev/null 2>"$work/big$i.err" &
  estimates+=($!)
done
wait "${estimates[@]}"  # not echod
check "six 1M-op estimates under the limit: each RESOURCE_EXHAUSTED, never fitting" \
  test "$(cat "$work"/big?.err | grep -c "RESOURCE_EXHAUSTED: this request would take about .* more than echod's whole budget")" -eq 6
check "echod serves after them" ctl health
kill -TERM "$echod_pid"
wait "$echod_pid"
echod_pid=""

finish
