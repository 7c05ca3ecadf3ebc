// The part of the Checkmate MILP (checkmate_milp.h) that decides its size
// before it is built: which tensors are constants of the model, how long
// each other tensor may be held, and the refusal of a model too big for the
// solver, all in O(graph).
#ifndef ECHO_PLANNER_RECOMPUTE_PASSES_MILP_HORIZONS_H_
#define ECHO_PLANNER_RECOMPUTE_PASSES_MILP_HORIZONS_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "planner/graph.h"
#include "planner/recompute/recompute_problem.h"

namespace echo::planner {

// Sticky tensors (persistent, graph outputs) are never freed: constants of
// the model, without S variables.
bool IsSticky(const Tensor& tensor);

// The last stage that may read each non-sticky tensor (its last reader, or a
// later stage that recomputes a reader; -1 for sticky or unread ones), and
// per op the largest horizon of its outputs.
struct Horizons {
  std::vector<int32_t> tensor;
  std::vector<int32_t> op;
};
Horizons ComputeHorizons(const RecomputeProblem& problem);

// A model too big for the method: FAILED_PRECONDITION (docs/design.md section
// 6), not the overload code.
absl::Status MilpTooBigError(int32_t ops, int64_t max_nonzeros);

// Every R column is a nonzero of some row: refuses a model that is too big
// from that count, in O(n), before O(n^2) columns are allocated.
absl::Status CheckRColumns(const RecomputeProblem& problem,
                           const std::vector<int32_t>& op_horizon,
                           int64_t max_nonzeros);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PASSES_MILP_HORIZONS_H_
