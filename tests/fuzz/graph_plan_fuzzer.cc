// A GenerateRecomputePlanRequest as echod decodes it: graph proto ->
// adapter (validation) -> costs -> memory simulation -> every recompute
// policy under the request's budget, each plan checked against a replay.
//
// OPTIMAL runs only with ECHO_FUZZ_OPTIMAL=1 in the environment, on graphs
// of at most kMaxOptimalOps ops with a 50 ms solver limit: CBC runs in this
// process and has aborted on its own assertions before (issue 11, finding 4;
// being moved into a child process), so by default it would only rediscover
// that, and its solves are orders of magnitude slower than the other passes.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <vector>

#include "adapter/device_convert.h"
#include "adapter/graph_convert.h"
#include "adapter/plan_convert.h"
#include "echo/v1/planner.pb.h"
#include "fuzz_util.h"
#include "google/protobuf/stubs/logging.h"
#include "planner/compose/plan_composer.h"
#include "planner/cost_model.h"
#include "planner/memory_simulator.h"

namespace {

using echo::planner::RecomputePolicy;

// Planning is superlinear; larger graphs are decoded, validated and
// simulated but not planned, to keep executions fast (VGG16's 45 ops take
// ~5 ms for the four policies under ASan).
constexpr int kMaxPlanOps = 64;
// With chunking on, AUTO plans graphs as large as the hook's captures of
// small language models (its region search reads their layouts: issue 49).
constexpr int kMaxChunkedPlanOps = 512;
constexpr int kMaxOptimalOps = 24;

bool FuzzOptimal() {
  static const bool enabled = [] {
    const char* env = std::getenv("ECHO_FUZZ_OPTIMAL");
    return env != nullptr && env[0] == '1';
  }();
  return enabled;
}

void CheckPlan(const echo::planner::Graph& graph,
               const echo::planner::RecomputePlan& plan,
               const echo::planner::RecomputePlanOptions& options,
               int64_t baseline_peak) {
  absl::StatusOr<echo::planner::SimulationResult> replay =
      echo::planner::ReplaySchedule(graph, plan.schedule, options.memory);
  ECHO_FUZZ_CHECK(replay.ok());
  ECHO_FUZZ_CHECK(replay->peak_bytes == plan.planned_peak_bytes);
  ECHO_FUZZ_CHECK(plan.baseline_peak_bytes == baseline_peak);
  ECHO_FUZZ_CHECK(plan.peak_lower_bound_bytes <= plan.planned_peak_bytes);
  if (options.memory_limit_bytes && plan.feasible) {
    ECHO_FUZZ_CHECK(plan.planned_peak_bytes <= *options.memory_limit_bytes);
  }
}

}  // namespace

// Mutated strings are often not UTF-8: protobuf logs each, which would
// dominate the run time.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  echo::v1::GenerateRecomputePlanRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<echo::planner::Graph> graph =
      echo::adapter::GraphFromProto(request.graph());
  if (!graph.ok()) return 0;

  std::optional<echo::planner::DeviceSpec> device;
  if (request.has_device()) {
    absl::StatusOr<echo::planner::DeviceSpec> resolved =
        echo::adapter::ResolveDevice(request.device());
    if (resolved.ok()) device = *resolved;
  }
  absl::StatusOr<echo::planner::CostTable> costs =
      echo::planner::EstimateOpCosts(*graph, device ? &*device : nullptr,
                                     nullptr);
  if (!costs.ok()) return 0;

  absl::StatusOr<echo::planner::RecomputePlanOptions> options =
      echo::adapter::PlanOptionsFromProto(request);
  if (!options.ok()) return 0;
  const echo::planner::SimulationResult plain =
      echo::planner::SimulatePlain(*graph, options->memory);
  echo::v1::EstimateMemoryResponse estimate;
  echo::adapter::FillEstimate(*graph, plain, 20, &estimate);
  if (options->chunking.enabled && graph->num_ops() <= kMaxChunkedPlanOps) {
    echo::planner::RecomputePlanOptions run = *options;
    run.policy = RecomputePolicy::kAuto;
    absl::StatusOr<echo::planner::RecomputePlan> plan =
        echo::planner::GenerateRecomputePlan(*graph, costs->Costs(), run);
    if (plan.ok()) {
      CheckPlan(echo::planner::PlanGraph(*graph, *plan), *plan, run,
                plain.peak_bytes);
      echo::v1::GenerateRecomputePlanResponse response;
      echo::adapter::FillPlanResponse(*graph, *plan, RecomputePolicy::kAuto,
                                      &response);
    }
  }
  if (graph->num_ops() > kMaxPlanOps) return 0;

  std::vector<RecomputePolicy> policies = {
      RecomputePolicy::kNone, RecomputePolicy::kEcho,
      RecomputePolicy::kChenSqrt, RecomputePolicy::kAuto};
  if (FuzzOptimal() && graph->num_ops() <= kMaxOptimalOps) {
    policies.push_back(RecomputePolicy::kOptimal);
  }
  for (RecomputePolicy policy : policies) {
    echo::planner::RecomputePlanOptions run = *options;
    run.policy = policy;
    run.solver_time_limit_seconds = 0.05;
    absl::StatusOr<echo::planner::RecomputePlan> plan =
        echo::planner::GenerateRecomputePlan(*graph, costs->Costs(), run);
    if (!plan.ok()) continue;
    CheckPlan(*graph, *plan, run, plain.peak_bytes);
    echo::v1::GenerateRecomputePlanResponse response;
    echo::adapter::FillPlanResponse(*graph, *plan, policy, &response);
  }
  return 0;
}
