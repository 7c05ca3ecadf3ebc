// Does a training iteration fit on a device, with recomputation within an
// overhead budget? The scheduler's question (CheckFit), answered by the
// plain peak and, when that is over, an AUTO plan under the device's memory.
// "Does not fit even with maximal recompute" is an answer, not an error.
#ifndef ECHO_PLANNER_SCHEDULE_FIT_CHECK_H_
#define ECHO_PLANNER_SCHEDULE_FIT_CHECK_H_

#include <vector>

#include "absl/status/statusor.h"
#include "planner/graph.h"
#include "planner/recompute/plan.h"

namespace echo::planner {

// "Fits with recomputation" under `usable_bytes` within `ratio`, as
// CheckFit and FindMaxBatchSize answer it.
struct RecomputeFit {
  // False when no plan was made: none can fit (the peak lower bound is
  // above the usable memory) or none within the ratio can (the stash
  // bound, stash_lower_bound_bytes).
  bool planned = false;
  bool fits = false;
  // The plan meets the memory (at any extra compute).
  bool meets_memory = false;
  // The plan's peak, or when none was made the bound that ruled it out.
  int64_t peak_bytes = 0;
  int64_t peak_lower_bound_bytes = 0;
  // Set when no plan was made because every plan within the ratio stashes
  // more than the usable memory (PlanStashLowerBound).
  int64_t stash_lower_bound_bytes = 0;
  double recompute_overhead_ratio = 0;
};

// `options` without budgets (AUTO's, e.g. its chunking): the peak lower
// bound first, then the least stash within `ratio` (PlanStashLowerBound),
// then AUTO under the usable memory, which stops at the first plan within
// `ratio`.
absl::StatusOr<RecomputeFit> FitWithRecompute(
    const Graph& graph, const std::vector<double>& op_costs,
    const RecomputePlanOptions& options, int64_t usable_bytes, double ratio);

// FitOptions and FitResult are in plan.h. INVALID_ARGUMENT for a negative
// ratio or reserve, or bad op costs.
absl::StatusOr<FitResult> CheckFit(const Graph& graph,
                                   const std::vector<double>& op_costs,
                                   const FitOptions& options);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_SCHEDULE_FIT_CHECK_H_
