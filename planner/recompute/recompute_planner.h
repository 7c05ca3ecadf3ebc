// Recompute planning (docs/design.md sections 2-3): which forward feature maps
// to stash and which to recompute in the backward pass, as an execution
// schedule whose every number is reproduced by ReplaySchedule. The entry
// point, GenerateRecomputePlan, composes it with chunked loss regions:
// planner/compose/plan_composer.h.
//
// Policies:
//   kNone      the plain schedule: stash everything the backward reads.
//   kEcho      the published Echo algorithm (rule list, regions, frontier
//              greedy); ignores budgets.
//   kChenSqrt  sqrt(n) segment checkpointing (Chen et al. 2016); ignores
//              budgets.
//   kOptimal   the Checkmate MILP solved with CBC; needs memory_limit_bytes.
//   kAuto      ours: peak-aware, cost-aware, budgeted greedy + local search
//              over an interval model of memory, seeded with the Echo and
//              Chen plans; never worse than the plain schedule.
//
// Each policy is a pass behind RecomputePass (recompute_pass.h), found in a
// registry; options, plan types and every default are in plan.h.
//
// Budgets: memory_limit_bytes minimizes the extra compute subject to the peak;
// max_overhead_ratio minimizes the peak subject to extra compute <= ratio *
// baseline compute (0: no extra compute). With neither, AUTO minimizes the
// peak with max_overhead_ratio = kDefaultMaxOverheadRatio (0.05).
#ifndef ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PLANNER_H_
#define ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PLANNER_H_

#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/recompute_pass.h"

namespace echo::planner {

// What GenerateRecomputePlan refuses before planning (bad inputs and
// options: INVALID_ARGUMENT; an OPTIMAL model too big for the solver:
// FAILED_PRECONDITION), without planning, in O(graph). GenerateRecomputePlan
// checks it before each pass runs, so before run_isolated_pass starts a
// process.
absl::Status PrecheckRecomputePlan(const Graph& graph,
                                   const std::vector<double>& op_costs,
                                   const RecomputePlanOptions& options);

// The other end of run_isolated_pass: `options.policy`'s pass alone on
// `graph` (which may be a chunked graph of the request's), with the budget
// the calling GenerateRecomputePlan resolved (PassInput's max_overhead_ratio
// and cost_budget); the same checks first. echo_milp_worker runs it.
absl::StatusOr<PassOutput> RunRecomputePass(const Graph& graph,
                                            const std::vector<double>& op_costs,
                                            const RecomputePlanOptions& options,
                                            double max_overhead_ratio,
                                            double cost_budget);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_RECOMPUTE_PLANNER_H_
