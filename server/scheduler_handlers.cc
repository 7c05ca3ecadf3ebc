// The scheduler RPCs of PlannerService: FindMaxBatchSize and
// GetMemoryFrontier. Thin: the searches are in
// planner/schedule/batch_search.h.
#include <chrono>

#include "absl/strings/str_cat.h"
#include "adapter/graph_convert.h"
#include "adapter/plan_convert.h"
#include "planner/device_catalog.h"
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

void BatchFitToProto(const planner::BatchFit& fit, v1::BatchSizeFit* out) {
  out->set_found(fit.found);
  out->set_batch_size(fit.batch);
  out->set_peak_bytes(fit.peak_bytes);
  out->set_recompute_overhead_ratio(fit.recompute_overhead_ratio);
  out->set_next_batch_peak_bytes(fit.next_batch_peak_bytes);
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
  planner::MaxBatchOptions options;
  ASSIGN_OR_RETURN(options.memory,
                   adapter::MemoryModelFromProto(request.allocator()));
  if (request.has_max_overhead_ratio()) {
    options.max_overhead_ratio = request.max_overhead_ratio();
  }
  if (request.min_batch_size() != 0) {
    options.min_batch = request.min_batch_size();
  }
  options.max_batch = request.max_batch_size();
  if (request.multiple_of() != 0) {
    options.multiple_of = request.multiple_of();
  }
  options.interrupted = InterruptFor(context);
  ASSIGN_OR_RETURN(const GraphRef ref, ResolveGraph(request));
  ASSIGN_OR_RETURN(
      CostedGraph costed,
      PrepareGraph("FindMaxBatchSize", ref.graph, &request.device()));
  if (!costed.device.has_value()) {
    return absl::InvalidArgumentError("FindMaxBatchSize needs a device");
  }
  const planner::DeviceSpec& spec = *costed.device;
  // Unset: the device's allowance for the CUDA context, library handles and
  // fragmentation, as in CheckFit.
  options.reserved_bytes =
      request.has_reserved_bytes()
          ? request.reserved_bytes()
          : planner::DefaultReservedBytes(spec.memory_bytes);
  ASSIGN_OR_RETURN(const planner::MaxBatchResult result,
                   MaxBatchOn(*costed.graph, spec, options));
  BatchFitToProto(result.without_recompute,
                  response->mutable_without_recompute());
  BatchFitToProto(result.with_recompute, response->mutable_with_recompute());
  response->set_graph_batch_size(result.graph_batch);
  response->set_device_memory_bytes(spec.memory_bytes);
  response->set_usable_bytes(result.usable_bytes);
  response->set_plans_evaluated(result.plans_evaluated);
  response->set_message(result.message);
  response->set_solve_time_seconds(SecondsSince(start));
  if (metrics_ != nullptr) {
    metrics_->RecordMaxBatch(result.without_recompute.batch,
                             result.with_recompute.batch,
                             result.plans_evaluated);
  }
  return absl::OkStatus();
}

absl::Status PlannerService::DoGetMemoryFrontier(
    grpc::CallbackServerContext* context,
    const v1::GetMemoryFrontierRequest& request,
    v1::GetMemoryFrontierResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  planner::FrontierOptions options;
  ASSIGN_OR_RETURN(options.memory,
                   adapter::MemoryModelFromProto(request.allocator()));
  if (request.max_points() != 0) {
    options.max_points = request.max_points();
  }
  options.max_recompute_depth = request.max_recompute_depth();
  if (request.time_budget_seconds() != 0) {
    options.time_budget_seconds = request.time_budget_seconds();
  }
  options.interrupted = InterruptFor(context);
  // Refuse before converting: a graph over the limit is not planned.
  RETURN_IF_ERROR(CheckFrontierSize(request.graph().ops_size(), options));
  ASSIGN_OR_RETURN(const GraphRef ref, ResolveGraph(request));
  RETURN_IF_ERROR(CheckFrontierSize(ref.graph->num_ops(), options));
  ASSIGN_OR_RETURN(
      CostedGraph costed,
      PrepareGraph("GetMemoryFrontier", ref.graph, &request.device()));
  ASSIGN_OR_RETURN(const planner::MemoryFrontier frontier,
                   planner::ComputeMemoryFrontier(
                       *costed.graph, costed.costs.Costs(), options));
  response->set_baseline_peak_bytes(frontier.baseline_peak_bytes);
  response->set_peak_lower_bound_bytes(frontier.peak_lower_bound_bytes);
  response->set_baseline_compute_cost(frontier.baseline_compute_cost);
  response->set_cost_unit(costed.costs.unit);
  for (const planner::FrontierPoint& point : frontier.points) {
    v1::FrontierPoint* out = response->add_points();
    out->set_peak_bytes(point.peak_bytes);
    out->set_recompute_cost(point.recompute_cost);
    out->set_recompute_overhead_ratio(point.recompute_overhead_ratio);
    out->set_memory_limit_bytes(point.memory_limit_bytes);
    out->set_plan_fingerprint(point.plan_fingerprint);
    out->set_recompute_count(point.recompute_count);
  }
  response->set_plans_evaluated(frontier.plans_evaluated);
  response->set_truncated(frontier.truncated);
  response->set_solve_time_seconds(SecondsSince(start));
  if (metrics_ != nullptr) {
    metrics_->RecordFrontier(static_cast<int>(frontier.points.size()),
                             frontier.plans_evaluated);
  }
  return absl::OkStatus();
}

}  // namespace echo::server
