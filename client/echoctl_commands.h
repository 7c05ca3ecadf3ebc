// echoctl's commands: each builds its request from the parsed flags, calls
// echod and prints the answer (text, or proto3 JSON with --output json).
// Exit codes: 0 done, 1 an error (the server's, printed with its gRPC code,
// or the client's, printed without one), 3 `fit`: does not fit (on any
// of the devices asked). Usage
// errors (exit 2) never get here: echoctl_main.cc's parser reports them.
#ifndef ECHO_CLIENT_ECHOCTL_COMMANDS_H_
#define ECHO_CLIENT_ECHOCTL_COMMANDS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "client/planner_client.h"
#include "echo/v1/planner.pb.h"

namespace echo::client {

// Every flag of every command, parsed and checked.
struct EchoctlFlags {
  bool json_output = false;
  std::string graph;
  // Instead of graph: a fingerprint from `echoctl register`.
  std::string fingerprint;
  std::string format = "auto";
  std::string device;
  // fit: comma-separated catalog names or "all" (instead of device).
  std::string devices;
  // fit, max-batch: unset, the device's default allowance.
  std::optional<int64_t> reserved_bytes;
  v1::RecomputePolicy policy = v1::RECOMPUTE_POLICY_AUTO;
  v1::RecomputeObjective objective = v1::RECOMPUTE_OBJECTIVE_UNSPECIFIED;
  std::optional<int64_t> memory_limit_bytes;
  std::optional<double> max_overhead_ratio;
  double solver_time_limit_seconds = 0;
  // plan, report, fit, max-batch, frontier: whether AUTO may run loss
  // regions in chunks ("auto", the default, or "off").
  std::string chunking = "auto";
  int64_t allocator_rounding_bytes = 0;
  int32_t live_tensors = 10;
  bool force = false;
  // fit: also each device's largest batch (graphs with a batch dimension).
  bool include_max_batch = false;
  // Checkmate files: the batch dimension (adapter/graph_file.h).
  int64_t checkmate_batch_size = 0;
  // The optimizer the iteration runs (Graph.optimizer; empty: the file's).
  std::string optimizer;
  std::string optimizer_state_dtype;
  std::string optimizer_implementation;
  // Micro-batches per optimizer step: from 2 on, gradients are held across
  // them (OptimizerSpec.holds_gradients).
  int32_t accumulation_steps = 1;
  // OptimizerSpec.update_in_backward.
  bool update_in_backward = false;
  // max-batch
  int64_t min_batch = 0;
  int64_t max_batch = 0;
  int64_t multiple_of = 0;
  // frontier
  int32_t max_points = 0;
  // report
  std::string html_path;
  int32_t timeline_points = 0;
};

// Shared by the commands. Prints the server's error (or the channel's) with
// its gRPC code name and returns 1.
int RpcError(const absl::Status& status);
// Reads --graph into `graph`; on failure prints the client's error (no gRPC
// code: nothing was sent) and returns false.
bool LoadGraph(const EchoctlFlags& flags, v1::Graph* graph);
// A request's fields from the flags, all but the graph.
void FillEstimateRequest(const EchoctlFlags& flags,
                         v1::EstimateMemoryRequest* request);
// --chunking as the requests' ChunkingMode.
v1::ChunkingMode ChunkingModeOf(const EchoctlFlags& flags);
void FillPlanRequest(const EchoctlFlags& flags,
                     v1::GenerateRecomputePlanRequest* request);
void FillFrontierRequest(const EchoctlFlags& flags,
                         v1::GetMemoryFrontierRequest* request);

int RunHealth(PlannerClient& client);
int RunRegister(PlannerClient& client, const EchoctlFlags& flags);
int RunEstimate(PlannerClient& client, const EchoctlFlags& flags);
int RunPlan(PlannerClient& client, const EchoctlFlags& flags);
int RunFit(PlannerClient& client, const EchoctlFlags& flags);
int RunProfile(PlannerClient& client, const EchoctlFlags& flags);
// Exit 3 when no batch fits even with recomputation.
int RunMaxBatch(PlannerClient& client, const EchoctlFlags& flags);
int RunFrontier(PlannerClient& client, const EchoctlFlags& flags);
int RunNodeInfo(PlannerClient& client, const EchoctlFlags& flags);
// The estimate, the plan and the frontier as one HTML page (client/
// html_report.h) written to flags.html_path (report_command.cc).
int RunReport(PlannerClient& client, const EchoctlFlags& flags);

}  // namespace echo::client

#endif  // ECHO_CLIENT_ECHOCTL_COMMANDS_H_
