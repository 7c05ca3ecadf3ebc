#include "adapter/call_convert.h"

#include "absl/strings/str_cat.h"
#include "adapter/device_convert.h"
#include "adapter/graph_convert.h"
#include "adapter/plan_convert.h"
#include "planner/status_macros.h"

namespace echo::adapter {
namespace {

// The timeline fields of EstimateMemory and GenerateRecomputePlan requests
// (the engine checks max_points, whether or not a timeline is asked for).
template <typename Request>
absl::StatusOr<engine::TimelineOptions> TimelineOf(const Request& request) {
  if (request.max_live_tensors() < -1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max_live_tensors must be >= -1, got ", request.max_live_tensors()));
  }
  engine::TimelineOptions timeline;
  timeline.include = request.include_timeline();
  timeline.max_points = request.timeline_max_points();
  if (request.max_live_tensors() != 0) {
    timeline.max_live_tensors = request.max_live_tensors();
  }
  return timeline;
}

}  // namespace

bool NamesDevice(const v1::DeviceSpec& device) {
  return !device.name().empty() || device.memory_bytes() != 0 ||
         device.peak_flops_size() > 0 ||
         device.memory_bandwidth_bytes_per_second() != 0 ||
         device.first_touch_seconds_per_byte() != 0;
}

absl::StatusOr<std::optional<planner::DeviceSpec>> DeviceOf(
    const v1::DeviceSpec& device) {
  if (!NamesDevice(device)) return std::optional<planner::DeviceSpec>();
  absl::StatusOr<planner::DeviceSpec> spec = ResolveDevice(device);
  if (!spec.ok()) return spec.status();
  return std::optional<planner::DeviceSpec>(*std::move(spec));
}

absl::StatusOr<engine::EstimateCall> EstimateCallFromProto(
    const v1::EstimateMemoryRequest& request) {
  engine::EstimateCall call;
  ASSIGN_OR_RETURN(call.memory, MemoryModelFromProto(request.allocator()));
  ASSIGN_OR_RETURN(call.timeline, TimelineOf(request));
  ASSIGN_OR_RETURN(call.device, DeviceOf(request.device()));
  return call;
}

absl::StatusOr<engine::PlanCall> PlanCallFromProto(
    const v1::GenerateRecomputePlanRequest& request) {
  // No status macros here: the request's way through the layers
  // (server/planner_service.cc) visits the adapter once.
  absl::StatusOr<planner::RecomputePlanOptions> options =
      PlanOptionsFromProto(request);
  if (!options.ok()) return options.status();
  absl::StatusOr<engine::TimelineOptions> timeline = TimelineOf(request);
  if (!timeline.ok()) return timeline.status();
  absl::StatusOr<std::optional<planner::DeviceSpec>> device =
      DeviceOf(request.device());
  if (!device.ok()) return device.status();
  engine::PlanCall call;
  call.options = *std::move(options);
  call.timeline = *timeline;
  call.device = *std::move(device);
  return call;
}

void FillEstimateAnswer(const engine::PricedGraph& priced,
                        const engine::EstimateCall& call,
                        const engine::EstimateAnswer& answer,
                        v1::EstimateMemoryResponse* response) {
  const planner::Graph& graph = *priced.graph;
  FillEstimate(graph, answer.result, call.timeline.max_live_tensors, response);
  if (answer.timeline.has_value()) {
    FillTimeline(graph, planner::PlainSchedule(graph), *answer.timeline,
                 response->mutable_timeline());
  }
  if (priced.device && priced.costs.unit == planner::kSecondsUnit) {
    response->set_compute_time_seconds(priced.costs.TotalCost());
  }
  CostSourceSummaryToProto(priced.costs.Summary(),
                           response->mutable_cost_sources());
  response->set_iteration(priced.iteration);
}

void FillPlanAnswer(const engine::PricedGraph& priced,
                    const engine::PlanCall& call,
                    const engine::PlanAnswer& answer,
                    v1::GenerateRecomputePlanResponse* response) {
  FillPlanResponse(*priced.graph, answer.plan, call.options.policy, response);
  response->set_cost_unit(priced.costs.unit);
  response->set_iteration(priced.iteration);
  CostSourceSummaryToProto(priced.costs.Summary(),
                           response->mutable_cost_sources());
  if (!priced.pricing_note.empty()) {
    response->set_message(
        absl::StrCat(response->message(), "; ", priced.pricing_note));
  }
  const planner::Graph& plan_graph =
      planner::PlanGraph(*priced.graph, answer.plan);
  if (answer.replay.has_value()) {
    FillLiveTensors(plan_graph, answer.replay->live_at_peak,
                    call.timeline.max_live_tensors,
                    response->mutable_live_at_peak());
  }
  if (answer.timeline.has_value()) {
    FillTimeline(plan_graph, answer.plan.schedule, *answer.timeline,
                 response->mutable_timeline());
  }
}

}  // namespace echo::adapter
