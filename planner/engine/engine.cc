#include "planner/engine/engine.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "planner/batch.h"
#include "planner/byte_size.h"
#include "planner/compose/plan_composer.h"
#include "planner/optimizer_step.h"
#include "planner/status_macros.h"

namespace echo::engine {
namespace {

// The timeline of `schedule` over `graph`, when asked for.
absl::Status AddTimeline(const planner::Graph& graph,
                         const planner::Schedule& schedule,
                         const planner::MemoryModelOptions& memory,
                         const TimelineOptions& timeline,
                         std::optional<planner::MemoryTimeline>* out) {
  if (!timeline.include) return absl::OkStatus();
  ASSIGN_OR_RETURN(*out, planner::SimulateTimeline(graph, schedule, memory,
                                                   timeline.max_points));
  return absl::OkStatus();
}

// What update_in_backward did, for the iteration's words.
std::string InBackwardWords(const planner::OptimizerStepSummary& added) {
  if (added.updated_in_backward > 0) {
    return absl::StrCat(", updates in the backward for ",
                        added.updated_in_backward, " of ", added.gradients,
                        " gradients (plain peak ",
                        planner::HumanBytes(added.in_backward_peak_bytes), ", ",
                        planner::HumanBytes(added.at_end_peak_bytes),
                        " with the step at the end)");
  }
  if (added.in_backward_peak_bytes == 0) {
    return ", no update in the backward: no gradient names its parameter "
           "(Tensor.gradient_of)";
  }
  return absl::StrCat(
      ", no update in the backward: it would raise the plain "
      "peak from ",
      planner::HumanBytes(added.at_end_peak_bytes), " to ",
      planner::HumanBytes(added.in_backward_peak_bytes));
}

}  // namespace

absl::StatusOr<std::string> WithIteration(
    std::shared_ptr<const planner::Graph>& graph) {
  ASSIGN_OR_RETURN(const std::optional<planner::OptimizerSpec> optimizer,
                   planner::OptimizerOf(*graph));
  const bool captured = planner::HasOptimizerStep(*graph);
  if (!optimizer.has_value()) {
    return std::string(
        captured ? "the iteration as the graph has it (its optimizer state "
                   "and step included)"
                 : "forward+backward only: the graph names no optimizer "
                   "(Graph.optimizer), so no optimizer state or step is "
                   "counted");
  }
  if (captured) {
    return absl::StrCat("the iteration as the graph has it (",
                        planner::OptimizerKindName(optimizer->kind),
                        "'s state and step included)");
  }
  planner::OptimizerStepSummary added;
  ASSIGN_OR_RETURN(planner::Graph iteration,
                   planner::AddOptimizerStep(*graph, *optimizer, &added));
  graph = std::make_shared<const planner::Graph>(std::move(iteration));
  return absl::StrCat(
      "forward+backward+", planner::OptimizerKindName(optimizer->kind),
      " step (",
      planner::OptimizerImplementationName(optimizer->implementation),
      "): optimizer state ", planner::HumanBytes(added.state_bytes), " in ",
      added.state_tensors, " tensors, step temporaries ",
      planner::HumanBytes(added.temporary_bytes),
      optimizer->holds_gradients
          ? absl::StrCat(", gradients held across micro-batches ",
                         planner::HumanBytes(added.held_gradient_bytes))
          : std::string(),
      optimizer->update_in_backward ? InBackwardWords(added) : std::string());
}

absl::StatusOr<PricedGraph> PriceGraph(
    std::shared_ptr<const planner::Graph> graph,
    std::optional<planner::DeviceSpec> device,
    const ProfiledTimesFor& profiled) {
  ASSIGN_OR_RETURN(std::string iteration, WithIteration(graph));
  auto times_for = [&](const planner::DeviceSpec* spec) {
    return profiled ? profiled(spec) : nullptr;
  };
  const planner::DeviceSpec* spec = device ? &*device : nullptr;
  ASSIGN_OR_RETURN(planner::CostTable costs,
                   planner::EstimateOpCosts(*graph, spec, times_for(spec)));
  std::string note;
  if (spec == nullptr && costs.unit == planner::kRelativeUnit &&
      costs.TotalCost() == 0 && graph->num_ops() > 0) {
    ASSIGN_OR_RETURN(
        const planner::DeviceSpec fallback,
        planner::FindCatalogDevice(planner::kDefaultPricingDevice));
    ASSIGN_OR_RETURN(costs, planner::EstimateOpCosts(*graph, &fallback,
                                                     times_for(&fallback)));
    note = absl::StrCat("priced on ", planner::kDefaultPricingDevice,
                        ": no device was named and the graph has no op costs");
  }
  return PricedGraph{std::move(graph), std::move(device), std::move(costs),
                     std::move(note), std::move(iteration)};
}

double ChunkLaunchCost(const planner::CostTable& costs) {
  return costs.unit == planner::kSecondsUnit
             ? planner::CostModelOptions().launch_overhead_seconds
             : planner::ChunkingOptions().launch_cost;
}

absl::Status CheckTimeline(const TimelineOptions& timeline) {
  return planner::ValidateTimelinePoints(timeline.max_points);
}

absl::StatusOr<EstimateAnswer> Estimate(const PricedGraph& priced,
                                        const EstimateCall& call) {
  RETURN_IF_ERROR(CheckTimeline(call.timeline));
  EstimateAnswer answer;
  answer.result = planner::SimulatePlain(*priced.graph, call.memory);
  RETURN_IF_ERROR(AddTimeline(*priced.graph,
                              planner::PlainSchedule(*priced.graph),
                              call.memory, call.timeline, &answer.timeline));
  return answer;
}

absl::StatusOr<PlanAnswer> Plan(const PricedGraph& priced, PlanCall call) {
  RETURN_IF_ERROR(CheckTimeline(call.timeline));
  call.options.chunking.launch_cost = ChunkLaunchCost(priced.costs);
  PlanAnswer answer;
  ASSIGN_OR_RETURN(answer.plan,
                   planner::GenerateRecomputePlan(
                       *priced.graph, priced.costs.Costs(), call.options));
  answer.plan.step_overhead_ratio = StepOverheadRatio(answer.plan, priced);
  if (!call.timeline.include) return answer;
  const planner::Graph& plan_graph =
      planner::PlanGraph(*priced.graph, answer.plan);
  ASSIGN_OR_RETURN(answer.replay,
                   planner::ReplaySchedule(plan_graph, answer.plan.schedule,
                                           call.options.memory));
  RETURN_IF_ERROR(AddTimeline(plan_graph, answer.plan.schedule,
                              call.options.memory, call.timeline,
                              &answer.timeline));
  return answer;
}

double StepOverheadRatio(const planner::RecomputePlan& plan,
                         const PricedGraph& priced) {
  const double per_byte = priced.device.has_value()
                              ? priced.device->first_touch_seconds_per_byte
                              : 0;
  if (per_byte <= 0 || priced.costs.unit != planner::kSecondsUnit) {
    return plan.recompute_overhead_ratio;
  }
  const double plain_step =
      plan.baseline_compute_cost +
      per_byte * static_cast<double>(plan.baseline_peak_bytes);
  if (plain_step <= 0) return plan.recompute_overhead_ratio;
  const double saved_peak =
      static_cast<double>(plan.baseline_peak_bytes - plan.planned_peak_bytes);
  return (plan.recompute_cost - per_byte * saved_peak) / plain_step;
}

absl::StatusOr<planner::MaxBatchResult> MaxBatch(
    const PricedGraph& priced, planner::MaxBatchOptions options,
    const ProfiledTimesFor& profiled) {
  if (!priced.device.has_value()) {
    return absl::InvalidArgumentError("a batch search needs a device");
  }
  const planner::DeviceSpec* spec = &*priced.device;
  options.device_memory_bytes = spec->memory_bytes;
  options.chunking.launch_cost = ChunkLaunchCost(priced.costs);
  const planner::ProfiledTimes* times = profiled ? profiled(spec) : nullptr;
  // The search prices each batch's graph again: sizes and FLOPs scale.
  const planner::OpCostFn costs =
      [spec, times](
          const planner::Graph& scaled) -> absl::StatusOr<std::vector<double>> {
    ASSIGN_OR_RETURN(planner::CostTable table,
                     planner::EstimateOpCosts(scaled, spec, times));
    return table.Costs();
  };
  return planner::FindMaxBatchSize(*priced.graph, costs, options);
}

absl::StatusOr<FitAnswer> Fit(const PricedGraph& priced,
                              planner::FitOptions options, bool max_batch,
                              const ProfiledTimesFor& profiled) {
  if (!priced.device.has_value()) {
    return absl::InvalidArgumentError("CheckFit needs a device");
  }
  options.device_memory_bytes = priced.device->memory_bytes;
  options.chunking.launch_cost = ChunkLaunchCost(priced.costs);
  FitAnswer answer;
  ASSIGN_OR_RETURN(
      answer.fit,
      planner::CheckFit(*priced.graph, priced.costs.Costs(), options));
  if (max_batch && planner::HasBatchDimension(*priced.graph)) {
    // The largest batch under the same budget and reserve.
    planner::MaxBatchOptions batch;
    batch.memory = options.memory;
    batch.reserved_bytes = answer.fit.reserved_bytes;
    batch.max_overhead_ratio = options.max_overhead_ratio;
    batch.chunking = options.chunking;
    batch.interrupted = options.interrupted;
    ASSIGN_OR_RETURN(answer.max_batch, MaxBatch(priced, batch, profiled));
  }
  return answer;
}

absl::StatusOr<planner::MemoryFrontier> Frontier(
    const PricedGraph& priced, planner::FrontierOptions options) {
  options.chunking.launch_cost = ChunkLaunchCost(priced.costs);
  return planner::ComputeMemoryFrontier(*priced.graph, priced.costs.Costs(),
                                        options);
}

}  // namespace echo::engine
