// Turns a schedule into a RecomputePlan whose numbers are the replay's:
// peak, costs, stash, recompute regions and their explanations; and the peak
// lower bound that no valid schedule can beat.
#ifndef ECHO_PLANNER_RECOMPUTE_PLAN_REPORT_H_
#define ECHO_PLANNER_RECOMPUTE_PLAN_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/recompute_problem.h"

namespace echo::planner {

// Replays `schedule` (an error if it is invalid) and fills schedule, stash,
// regions, baseline/planned peaks and costs. Leaves feasible, solver fields,
// lower bound and message to the caller. `replay`: the schedule's replay
// under `memory` where the caller already has it (AUTO's selection), so
// that a 100k-op plan is not replayed twice.
absl::StatusOr<RecomputePlan> BuildPlanFromSchedule(
    const Graph& graph, const std::vector<double>& op_costs,
    const MemoryModelOptions& memory, int64_t baseline_peak_bytes,
    Schedule schedule, std::optional<SimulationResult> replay = std::nullopt);

// Forward-produced tensors whose original instance the backward reads (the
// stash), ascending; and their allocated bytes.
std::vector<TensorIndex> StashedTensors(const Graph& graph,
                                        const Schedule& schedule);
int64_t StashBytes(const Graph& graph, const Schedule& schedule,
                   const MemoryModelOptions& memory);

// A stash no plan whose recompute cost is within `cost_budget` can beat:
// taking a tensor out of the stash re-runs its producer at least once, so
// the plain stash minus a fractional knapsack of producers (bytes of their
// stashed outputs, weight their cost) bounds it from below. With
// `with_cut`, also the minimum cut's Lagrangian bound (stash_cut.h), which
// knows that a re-run op needs its inputs; the higher of the two. The cut
// bound holds for plans whose clones all run in the backward (every policy
// but OPTIMAL, whose clones may run inside the forward).
absl::StatusOr<int64_t> StashLowerBound(const RecomputeProblem& problem,
                                        double cost_budget, bool with_cut,
                                        const Interrupt& interrupted);

// Readable plans: drops the regions that save nothing at the peak (their
// clones leave the schedule, so their readers use the original instances)
// as long as the replayed peak does not rise: all at once, else one at a
// time, costliest first, within options.prune's replay budget. A region that
// saves nothing at the peak step yet stays keeps another step below the
// peak: its peak_rise_if_dropped_bytes says by how much (AUTO only, within
// the same budget). The result's numbers are its replay's; the caller sets
// feasible, solver fields, lower bound and message.
RecomputePlan PruneIdleRegions(const Graph& graph,
                               const std::vector<double>& op_costs,
                               const RecomputePlanOptions& options,
                               RecomputePlan plan);

// Regions by bytes saved at the peak, largest first, then by the peak's
// rise without them (stable: ties keep schedule order). The schedule is
// unchanged.
void SortRegionsBySaving(RecomputePlan& plan);

// A peak no valid schedule can beat: the max over ops of what must be live
// while it runs: persistent graph inputs; persistent tensors and graph
// outputs made before it; its distinct inputs, outputs and workspace; every
// tensor that can never be recomputed (graph inputs, outputs of ops that may
// not re-run) between its creation and its last reader.
int64_t PeakLowerBound(const Graph& graph, const MemoryModelOptions& memory);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PLAN_REPORT_H_
