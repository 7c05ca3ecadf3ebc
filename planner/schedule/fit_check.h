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

// FitOptions and FitResult are in plan.h. INVALID_ARGUMENT for a negative
// ratio or reserve, or bad op costs.
absl::StatusOr<FitResult> CheckFit(const Graph& graph,
                                   const std::vector<double>& op_costs,
                                   const FitOptions& options);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_SCHEDULE_FIT_CHECK_H_
