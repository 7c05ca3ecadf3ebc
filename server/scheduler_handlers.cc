// The scheduler RPCs of PlannerService: FindMaxBatchSize and
// GetMemoryFrontier. Thin: the searches are in
// planner/schedule/batch_search.h, the conversions in
// adapter/schedule_convert.h.
#include <chrono>

#include "absl/strings/str_cat.h"
#include "adapter/call_convert.h"
#include "adapter/schedule_convert.h"
#include "planner/engine/engine.h"
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

absl::Status PlannerService::DoFindMaxBatchSize(
    grpc::CallbackServerContext* context,
    const v1::FindMaxBatchSizeRequest& request,
    v1::FindMaxBatchSizeResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  if (!adapter::NamesDevice(request.device())) {
    return absl::InvalidArgumentError(
        "FindMaxBatchSize needs a device (a catalog name or a full "
        "spec)");
  }
  ASSIGN_OR_RETURN(const GraphRef ref,
                   ResolveGraph("FindMaxBatchSize", request));
  ASSIGN_OR_RETURN(const engine::PricedGraph priced,
                   PriceOn(ref.graph, request.device()));
  const planner::DeviceSpec& spec = *priced.device;  // named, so resolved
  ASSIGN_OR_RETURN(planner::MaxBatchOptions options,
                   adapter::BatchSearchOptionsFromProto(request, spec));
  RETURN_IF_ERROR(RunPlanning(
      "FindMaxBatchSize", context, request, request.graph(), ref, response,
      &options.interrupted, [&]() -> absl::Status {
        ASSIGN_OR_RETURN(const planner::MaxBatchResult result,
                         engine::MaxBatch(priced, options, ProfiledTimes()));
        adapter::FillBatchSearchResponse(result, spec.memory_bytes, response);
        response->set_iteration(priced.iteration);
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
  ASSIGN_OR_RETURN(const GraphRef ref,
                   ResolveGraph("GetMemoryFrontier", request));
  RETURN_IF_ERROR(CheckFrontierSize(ref.graph->num_ops(), options));
  ASSIGN_OR_RETURN(const engine::PricedGraph priced,
                   PriceOn(ref.graph, request.device()));
  RETURN_IF_ERROR(RunPlanning(
      "GetMemoryFrontier", context, request, request.graph(), ref, response,
      &options.interrupted, [&]() -> absl::Status {
        ASSIGN_OR_RETURN(const planner::MemoryFrontier frontier,
                         engine::Frontier(priced, options));
        adapter::FillFrontierResponse(frontier, priced.costs.unit, response);
        response->set_iteration(priced.iteration);
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
