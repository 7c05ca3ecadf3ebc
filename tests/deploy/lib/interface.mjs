// What echod promises to the deployment: its flags, ports, health service,
// RPCs and Prometheus metrics. The manifests, alerts and dashboard are checked
// against this; it mirrors the server's interface (issue 6) and the proto.
import fs from "node:fs";
import path from "node:path";
import { repoRoot } from "./render.mjs";

// Every echod flag, as the environment variable that also sets it.
export const FLAG_ENV = new Set([
  "ECHO_GRPC_ADDRESS",
  "ECHO_UNIX_SOCKET",
  "ECHO_METRICS_ADDRESS",
  "ECHO_MAX_REQUEST_BYTES",
  "ECHO_MAX_CONCURRENT_REQUESTS",
  "ECHO_ENABLE_PROFILING",
  "ECHO_PROFILE_CACHE_DIR",
  "ECHO_PROFILE_MEMORY_FRACTION",
  "ECHO_TLS_CERT_FILE",
  "ECHO_TLS_KEY_FILE",
  "ECHO_TLS_CLIENT_CA_FILE",
  "ECHO_UNIX_SOCKET_GROUP",
  "ECHO_AUTH_TOKEN_FILE",
  "ECHO_PROFILE_ALLOWED_IDENTITIES",
  "ECHO_DRAIN_TIMEOUT_SECONDS",
  "ECHO_LOG_LEVEL",
  "ECHO_OPTIMAL_WORKER_PATH",
  "ECHO_OPTIMAL_MEMORY_LIMIT_BYTES",
]);

export const LOG_LEVELS = new Set(["debug", "info", "warn", "error"]);
export const GRPC_PORT = 50051;
export const METRICS_PORT = 9464;
export const HEALTH_SERVICES = new Set(["", "echo.v1.MemoryPlanner"]);

// gRPC status code names (the `code` label of echo_requests_total).
export const GRPC_CODES = new Set([
  "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
  "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
  "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL",
  "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
]);

// RPC names of echo.v1.MemoryPlanner, read from the proto.
export function rpcNames() {
  const dir = path.join(repoRoot, "proto/echo/v1");
  const names = new Set();
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith(".proto"))) {
    const text = fs.readFileSync(path.join(dir, file), "utf8");
    for (const m of text.matchAll(/^\s*rpc\s+(\w+)\s*\(/gm)) names.add(m[1]);
  }
  return names;
}

// Labels Prometheus attaches to every series scraped through the PodMonitor
// (target labels, plus `node` from its relabeling).
export const TARGET_LABELS = new Set([
  "job", "instance", "namespace", "pod", "container", "endpoint", "node",
]);

// name -> { type, labels, values: { label: Set of allowed values } }
const POLICIES = new Set(["auto", "none", "echo", "chen_sqrt", "optimal"]);
const CACHES = new Set(["graph", "answer"]);
export const METRICS = {
  echo_requests_total: { type: "counter", labels: ["method", "code"], values: { code: GRPC_CODES } },
  echo_request_duration_seconds: { type: "histogram", labels: ["method"] },
  echo_graph_ops: { type: "histogram", labels: ["method"] },
  echo_estimated_peak_bytes: { type: "histogram", labels: [] },
  echo_plans_total: {
    type: "counter",
    labels: ["policy", "outcome"],
    values: { policy: POLICIES, outcome: new Set(["feasible", "infeasible", "error"]) },
  },
  echo_plan_bytes_saved: { type: "histogram", labels: ["policy"], values: { policy: POLICIES } },
  echo_bytes_saved_total: { type: "counter", labels: ["policy"], values: { policy: POLICIES } },
  echo_plan_overhead_ratio: { type: "histogram", labels: ["policy"], values: { policy: POLICIES } },
  echo_plan_solve_duration_seconds: { type: "histogram", labels: ["policy"], values: { policy: POLICIES } },
  echo_profile_runs_total: {
    type: "counter",
    labels: ["op_class", "result"],
    values: { result: new Set(["ok", "error", "skipped"]) },
  },
  echo_profile_duration_seconds: { type: "histogram", labels: [] },
  echo_profile_cache_hits_total: { type: "counter", labels: [] },
  echo_profile_cache_misses_total: { type: "counter", labels: [] },
  echo_profile_cache_entries: { type: "gauge", labels: [] },
  // The graph registry and the cache of answers (README "For cluster schedulers").
  echo_cache_entries: { type: "gauge", labels: ["cache"], values: { cache: CACHES } },
  echo_cache_bytes: { type: "gauge", labels: ["cache"], values: { cache: CACHES } },
  echo_cache_hits_total: { type: "counter", labels: ["cache"], values: { cache: CACHES } },
  echo_cache_misses_total: { type: "counter", labels: ["cache"], values: { cache: CACHES } },
  echo_cache_evictions_total: { type: "counter", labels: ["cache"], values: { cache: CACHES } },
  // FindMaxBatchSize and GetMemoryFrontier (README "Scheduler questions").
  echo_max_batch_size: { type: "histogram", labels: ["recompute"],
                         values: { recompute: ["none", "auto"] } },
  echo_scheduler_plans_evaluated: { type: "histogram", labels: ["method"] },
  echo_frontier_points: { type: "histogram", labels: [] },
  // The requests' memory (docs/operations.md "Memory per request").
  echo_request_memory_bytes: { type: "gauge", labels: [] },
  echo_requests_waiting_for_memory: { type: "gauge", labels: [] },
};

// Series from outside echod that the alerts may use.
export const EXTERNAL_METRICS = {
  up: { type: "gauge", labels: [] },
  kube_daemonset_status_number_unavailable: { type: "gauge", labels: ["daemonset"], external: true },
  kube_daemonset_status_updated_number_scheduled: { type: "gauge", labels: ["daemonset"], external: true },
  kube_daemonset_status_desired_number_scheduled: { type: "gauge", labels: ["daemonset"], external: true },
  kube_daemonset_status_current_number_scheduled: { type: "gauge", labels: ["daemonset"], external: true },
  kube_daemonset_status_number_available: { type: "gauge", labels: ["daemonset"], external: true },
};
