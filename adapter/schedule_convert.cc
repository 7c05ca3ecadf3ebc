#include "adapter/schedule_convert.h"

#include "adapter/graph_convert.h"
#include "adapter/plan_convert.h"
#include "planner/status_macros.h"

namespace echo::adapter {
namespace {

void BatchFitToProto(const planner::BatchFit& fit, v1::BatchSizeFit* out) {
  out->set_found(fit.found);
  out->set_batch_size(fit.batch);
  out->set_peak_bytes(fit.peak_bytes);
  out->set_recompute_overhead_ratio(fit.recompute_overhead_ratio);
  out->set_next_batch_peak_bytes(fit.next_batch_peak_bytes);
  out->set_next_batch_overhead_ratio(fit.next_batch_overhead_ratio);
}

void FrontierPointToProto(const planner::FrontierPoint& point,
                          v1::FrontierPoint* out) {
  out->set_peak_bytes(point.peak_bytes);
  out->set_recompute_cost(point.recompute_cost);
  out->set_recompute_overhead_ratio(point.recompute_overhead_ratio);
  out->set_memory_limit_bytes(point.memory_limit_bytes);
  out->set_plan_fingerprint(point.plan_fingerprint);
  out->set_recompute_count(point.recompute_count);
}

}  // namespace

absl::StatusOr<planner::MaxBatchOptions> BatchSearchOptionsFromProto(
    const v1::FindMaxBatchSizeRequest& request,
    const planner::DeviceSpec& device) {
  planner::MaxBatchOptions options;
  ASSIGN_OR_RETURN(options.memory, MemoryModelFromProto(request.allocator()));
  ASSIGN_OR_RETURN(options.chunking.enabled,
                   ChunkingFromProto(request.chunking()));
  if (request.has_max_overhead_ratio()) {
    options.max_overhead_ratio = request.max_overhead_ratio();
  }
  if (request.min_batch_size() != 0)
    options.min_batch = request.min_batch_size();
  options.max_batch = request.max_batch_size();
  if (request.multiple_of() != 0) options.multiple_of = request.multiple_of();
  options.device_memory_bytes = device.memory_bytes;
  options.reserved_bytes =
      request.has_reserved_bytes()
          ? request.reserved_bytes()
          : planner::DefaultReservedBytes(device.memory_bytes);
  return options;
}

void FillBatchSearchResponse(const planner::MaxBatchResult& result,
                             int64_t device_memory_bytes,
                             v1::FindMaxBatchSizeResponse* response) {
  BatchFitToProto(result.without_recompute,
                  response->mutable_without_recompute());
  BatchFitToProto(result.with_recompute, response->mutable_with_recompute());
  response->set_graph_batch_size(result.graph_batch);
  response->set_device_memory_bytes(device_memory_bytes);
  response->set_usable_bytes(result.usable_bytes);
  response->set_plans_evaluated(result.plans_evaluated);
  response->set_message(result.message);
}

absl::StatusOr<planner::FrontierOptions> FrontierOptionsFromProto(
    const v1::GetMemoryFrontierRequest& request) {
  planner::FrontierOptions options;
  ASSIGN_OR_RETURN(options.memory, MemoryModelFromProto(request.allocator()));
  ASSIGN_OR_RETURN(options.chunking.enabled,
                   ChunkingFromProto(request.chunking()));
  if (request.max_points() != 0) options.max_points = request.max_points();
  options.max_recompute_depth = request.max_recompute_depth();
  if (request.time_budget_seconds() != 0) {
    options.time_budget_seconds = request.time_budget_seconds();
  }
  return options;
}

void FillFrontierResponse(const planner::MemoryFrontier& frontier,
                          const std::string& cost_unit,
                          v1::GetMemoryFrontierResponse* response) {
  response->set_baseline_peak_bytes(frontier.baseline_peak_bytes);
  response->set_peak_lower_bound_bytes(frontier.peak_lower_bound_bytes);
  response->set_baseline_compute_cost(frontier.baseline_compute_cost);
  response->set_cost_unit(cost_unit);
  for (const planner::FrontierPoint& point : frontier.points) {
    FrontierPointToProto(point, response->add_points());
  }
  response->set_plans_evaluated(frontier.plans_evaluated);
  response->set_truncated(frontier.truncated);
}

}  // namespace echo::adapter
