// The scheduler RPCs of PlannerService: FindMaxBatchSize and
// GetMemoryFrontier. Thin: the searches are in
// planner/schedule/batch_search.h, the conversions in
// adapter/schedule_convert.h.
#include <chrono>

#include "absl/strings/str_cat.h"
#include "adapter/schedule_convert.h"
#include "planner/schedule/batch_search.h"
#include "planner/status_macros.h"
#include "server/planner_service.h"

namespace echo::server {
namespace {

absl::Status CheckFrontierSize(int64_t ops,
                               const planner::FrontierOptions& options) {
  if (ops <= options.max_ops) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "graph has ", ops, " ops; GetMemoryFrontier plans at most ",
      options.max_ops, " (ask GenerateRecomputePlan for single budgets)"));
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

}  // namespace

absl::StatusOr<planner::MaxBatchResult> PlannerService::MaxBatchOn(
    const planner::Graph& graph, const planner::DeviceSpec& device,
    planner::MaxBatchOptions options) const {
  options.device_memory_bytes = device.memory_bytes;
  const planner::DeviceSpec* spec = &device;
  const planner::ProfiledTimes* profiled =
      profiler_ != nullptr ? profiler_->TimesFor(spec) : nullptr;
  // The search prices each batch's graph again: sizes and FLOPs scale.
  const planner::OpCostFn costs =
      [spec, profiled](
          const planner::Graph& scaled) -> absl::StatusOr<std::vector<double>> {
    ASSIGN_OR_RETURN(planner::CostTable table,
                     planner::EstimateOpCosts(scaled, spec, profiled));
    return table.Costs();
  };
  return planner::FindMaxBatchSize(graph, costs, options);
}

absl::Status PlannerService::DoFindMaxBatchSize(
    grpc::CallbackServerContext* context,
    const v1::FindMaxBatchSizeRequest& request,
    v1::FindMaxBatchSizeResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  if (!NamesDevice(request.device())) {
    return absl::InvalidArgumentError(
        "FindMaxBatchSize needs a device (a catalog name or a full "
        "spec)");
  }
  ASSIGN_OR_RETURN(const GraphRef ref, ResolveGraph(request));
  ASSIGN_OR_RETURN(
      CostedGraph costed,
      PrepareGraph("FindMaxBatchSize", ref.graph, &request.device()));
  if (!costed.device.has_value()) {
    return absl::InvalidArgumentError("FindMaxBatchSize needs a device");
  }
  const planner::DeviceSpec& spec = *costed.device;
  ASSIGN_OR_RETURN(planner::MaxBatchOptions options,
                   adapter::BatchSearchOptionsFromProto(request, spec));
  PriceChunkLaunches(costed.costs, &options.chunking);
  RETURN_IF_ERROR(RunPlanning(
      "FindMaxBatchSize", context, request, request.graph(), ref, response,
      &options.interrupted, [&]() -> absl::Status {
        ASSIGN_OR_RETURN(const planner::MaxBatchResult result,
                         MaxBatchOn(*costed.graph, spec, options));
        adapter::FillBatchSearchResponse(result, spec.memory_bytes, response);
        return absl::OkStatus();
      }));
  response->set_solve_time_seconds(SecondsSince(start));
  if (metrics_ != nullptr) {
    metrics_->RecordMaxBatch(response->without_recompute().batch_size(),
                             response->with_recompute().batch_size(),
                             response->plans_evaluated());
  }
  return absl::OkStatus();
}

absl::Status PlannerService::DoGetMemoryFrontier(
    grpc::CallbackServerContext* context,
    const v1::GetMemoryFrontierRequest& request,
    v1::GetMemoryFrontierResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(planner::FrontierOptions options,
                   adapter::FrontierOptionsFromProto(request));
  // Refuse before converting: a graph over the limit is not planned.
  RETURN_IF_ERROR(CheckFrontierSize(request.graph().ops_size(), options));
  ASSIGN_OR_RETURN(const GraphRef ref, ResolveGraph(request));
  RETURN_IF_ERROR(CheckFrontierSize(ref.graph->num_ops(), options));
  ASSIGN_OR_RETURN(
      CostedGraph costed,
      PrepareGraph("GetMemoryFrontier", ref.graph, &request.device()));
  PriceChunkLaunches(costed.costs, &options.chunking);
  RETURN_IF_ERROR(RunPlanning(
      "GetMemoryFrontier", context, request, request.graph(), ref, response,
      &options.interrupted, [&]() -> absl::Status {
        ASSIGN_OR_RETURN(const planner::MemoryFrontier frontier,
                         planner::ComputeMemoryFrontier(
                             *costed.graph, costed.costs.Costs(), options));
        adapter::FillFrontierResponse(frontier, costed.costs.unit, response);
        return absl::OkStatus();
      }));
  response->set_solve_time_seconds(SecondsSince(start));
  if (metrics_ != nullptr) {
    metrics_->RecordFrontier(response->points_size(),
                             response->plans_evaluated());
  }
  return absl::OkStatus();
}

}  // namespace echo::server
