// The composer of plan actions: a request's plan is recomputation (planner/
// recompute/) and, where AUTO may chunk, loss regions run in chunks
// (planner/chunk/), weighed together (plan_with_chunks.h). It sits above
// both, so that neither action depends on the other, and the actions to
// come (the optimizer's, sharding's) join here.
#ifndef ECHO_PLANNER_COMPOSE_PLAN_COMPOSER_H_
#define ECHO_PLANNER_COMPOSE_PLAN_COMPOSER_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/recompute_planner.h"

namespace echo::planner {

// The plan of `graph`: `options.policy`'s recompute plan, and, where AUTO
// may chunk (options.chunking), weighed against plans of the graph with its
// loss regions chunked. op_costs: one non-negative cost per op (seconds or
// relative units).
absl::StatusOr<RecomputePlan> GenerateRecomputePlan(
    const Graph& graph, const std::vector<double>& op_costs,
    const RecomputePlanOptions& options);

// No plan GenerateRecomputePlan returns for `graph` with `options` peaks
// lower: the least of PeakLowerBound of the graph and, where AUTO may chunk
// (options.chunking), of the graph chunked in the most chunks AUTO may try
// (which bounds the fewer). For searches that skip planning where nothing
// can fit (schedule/).
absl::StatusOr<int64_t> PlanPeakLowerBound(const Graph& graph,
                                           const RecomputePlanOptions& options);

// No AUTO plan GenerateRecomputePlan returns for `graph` with `options`
// whose extra compute is within `cost_budget` (in op_costs' unit) stashes
// less, and so none peaks lower (the stash is live at once where the
// backward starts): StashLowerBound's knapsack bound (no cut: ~5 ms at
// 100k ops), less what chunks can take off any step where AUTO may chunk.
// For fit checks that skip planning where nothing within the budget fits.
absl::StatusOr<int64_t> PlanStashLowerBound(const Graph& graph,
                                            const std::vector<double>& op_costs,
                                            const RecomputePlanOptions& options,
                                            double cost_budget);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_COMPOSE_PLAN_COMPOSER_H_
