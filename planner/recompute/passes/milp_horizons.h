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

// Op i has R columns (re-runs in stages up to its horizon) when it can be
// cloned and its re-run makes every output: Checkmate's model re-makes
// every output, so ops that make fewer (Op::recompute_outputs) are not re-run.
bool HasRecomputeColumns(const RecomputeProblem& problem, OpIndex i);

// The first stage that may hold a non-sticky tensor (S columns run from it
// to the tensor's horizon): 0 for graph inputs, else the stage after its
// producer.
int32_t FirstHoldStage(const Tensor& tensor);

// The model's binaries, counted in O(graph) without allocating any.
struct MilpColumns {
  int64_t recompute = 0;  // R[t,i], i < t
  int64_t hold = 0;       // S[t,x]
};
MilpColumns CountColumns(const RecomputeProblem& problem,
                         const Horizons& horizons);

// Refuses a model that is too big before anything of it is allocated. Each R
// column comes with its stage's U column and each S column with its hold
// row, so R + S columns is a lower bound on the nonzeros.
absl::Status CheckModelSize(const RecomputeProblem& problem,
                            const Horizons& horizons, int64_t max_nonzeros);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PASSES_MILP_HORIZONS_H_
