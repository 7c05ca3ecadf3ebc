// One graph planned with one recompute policy (recompute_planner.cc): what
// the composer of plan actions (planner/compose/) builds on.
#ifndef ECHO_PLANNER_RECOMPUTE_PLAN_ONE_GRAPH_H_
#define ECHO_PLANNER_RECOMPUTE_PLAN_ONE_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/recompute_pass.h"

namespace echo::planner {

// The policy's pass, once the inputs and its options are valid.
absl::StatusOr<const RecomputePass*> CheckedPass(
    const Graph& graph, const std::vector<double>& op_costs,
    const RecomputePlanOptions& options);

// The plan in one line for people.
std::string PlanMessage(const Graph& graph, const RecomputePlan& plan,
                        const RecomputePlanOptions& options);

// One graph's plan. `budget` carries what chunking changes: the request's
// baseline (cost and peak) against which a chunked graph's plan is judged,
// and the chunks' own extra cost, which the recompute budget pays first.
struct PlanBudget {
  double baseline_cost = 0;
  int64_t baseline_peak = 0;
  double extra_cost = 0;
};

absl::StatusOr<RecomputePlan> PlanOneGraph(const Graph& graph,
                                           const std::vector<double>& op_costs,
                                           const RecomputePlanOptions& options,
                                           const RecomputePass& pass,
                                           const PlanBudget& budget);

// Whether plan `a` beats `b` for the request (recompute_planner.cc).
bool BetterPlan(const RecomputePlan& a, const RecomputePlan& b,
                const RecomputePlanOptions& options, double cost_budget);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PLAN_ONE_GRAPH_H_
