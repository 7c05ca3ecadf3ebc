// The use cases of echod (docs/design.md §1), one function per question a
// caller asks about a graph: domain types in and out (calls.h). The server
// decodes a request with the adapter, asks the engine, and encodes the
// answer with the adapter; it keeps transport, admission, workers and
// metrics. Pricing, pass selection and the composition of plan actions
// live here, so that what a plan counts (the optimizer, sharding, time)
// is added in one place for every caller.
#ifndef ECHO_PLANNER_ENGINE_ENGINE_H_
#define ECHO_PLANNER_ENGINE_ENGINE_H_

#include <functional>
#include <memory>
#include <optional>

#include "absl/status/statusor.h"
#include "planner/engine/calls.h"
#include "planner/schedule/batch_search.h"
#include "planner/schedule/fit_check.h"

namespace echo::engine {

// This node's profiled op times for a device (nullptr: none); empty: none.
using ProfiledTimesFor =
    std::function<const planner::ProfiledTimes*(const planner::DeviceSpec*)>;

// The iteration `graph` stands for: when its metadata names an optimizer
// and it has no optimizer state of its own, `graph` becomes the graph with
// the optimizer's state and step (planner/optimizer_step.h). Returns what
// the answers cover, in words.
absl::StatusOr<std::string> WithIteration(
    std::shared_ptr<const planner::Graph>& graph);

// Prices WithIteration(`graph`) on `device`: measured or profiled times, else
// the device's roofline, else the graph's relative costs. A graph with no
// device and no costs is priced on planner::kDefaultPricingDevice, and the
// answer says so.
absl::StatusOr<PricedGraph> PriceGraph(
    std::shared_ptr<const planner::Graph> graph,
    std::optional<planner::DeviceSpec> device,
    const ProfiledTimesFor& profiled);

// The chunks' launch cost in the unit of `costs`: the cost model's kernel
// launch when they are seconds, else unknown (chunk_rewrite.h). Plans, fit
// checks, batch searches and frontiers price chunks alike, so that a
// scheduler's answer is the plan's.
double ChunkLaunchCost(const planner::CostTable& costs);

// The call's timeline options (planner::ValidateTimelinePoints): handlers
// check them before any work; Estimate and Plan check them again.
absl::Status CheckTimeline(const TimelineOptions& timeline);

// EstimateMemory: the plain peak, and the timeline on request.
absl::StatusOr<EstimateAnswer> Estimate(const PricedGraph& priced,
                                        const EstimateCall& call);

// GenerateRecomputePlan: the plan under the call's budget (its chunks
// priced by ChunkLaunchCost), replayed for the timeline on request.
absl::StatusOr<PlanAnswer> Plan(const PricedGraph& priced, PlanCall call);

// The plan's step time against the plain step's, minus 1. On a device that
// counts first touches, each step touches its peak anew, so the peak the
// plan saves is time saved: (recompute + k * (planned - baseline peak)) /
// (baseline compute + k * baseline peak), k its seconds per byte, costs in
// seconds. Otherwise the plan's recompute_overhead_ratio.
double StepOverheadRatio(const planner::RecomputePlan& plan,
                         const PricedGraph& priced);

// FindMaxBatchSize on the priced graph's device (its memory is the
// device's; each batch's graph priced again, with `profiled`).
absl::StatusOr<planner::MaxBatchResult> MaxBatch(
    const PricedGraph& priced, planner::MaxBatchOptions options,
    const ProfiledTimesFor& profiled);

// CheckFit on the priced graph's device, and with `max_batch` the largest
// batch under the same budget and reserve (when the graph has a batch
// dimension).
struct FitAnswer {
  planner::FitResult fit;
  std::optional<planner::MaxBatchResult> max_batch;
};
absl::StatusOr<FitAnswer> Fit(const PricedGraph& priced,
                              planner::FitOptions options, bool max_batch,
                              const ProfiledTimesFor& profiled);

// GetMemoryFrontier: AUTO's Pareto set of peak and extra compute.
absl::StatusOr<planner::MemoryFrontier> Frontier(
    const PricedGraph& priced, planner::FrontierOptions options);

}  // namespace echo::engine

#endif  // ECHO_PLANNER_ENGINE_ENGINE_H_
