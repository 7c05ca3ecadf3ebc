#include "planner/recompute/passes/milp_horizons.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace echo::planner {

bool IsSticky(const Tensor& tensor) {
  return IsPersistentRole(tensor.role) || tensor.is_output;
}

Horizons ComputeHorizons(const RecomputeProblem& problem) {
  const Graph& graph = problem.graph;
  Horizons horizons{std::vector<int32_t>(graph.num_tensors(), -1),
                    std::vector<int32_t>(graph.num_ops(), -1)};
  std::vector<TensorIndex> order(graph.num_tensors());
  for (TensorIndex x = 0; x < graph.num_tensors(); ++x) order[x] = x;
  // Producers descending (graph inputs last), so readers' outputs come first.
  std::stable_sort(order.begin(), order.end(),
                   [&](TensorIndex a, TensorIndex b) {
                     return graph.tensor(a).producer > graph.tensor(b).producer;
                   });
  for (TensorIndex x : order) {
    const Tensor& tensor = graph.tensor(x);
    if (IsSticky(tensor)) continue;
    int32_t& horizon = horizons.tensor[x];
    for (OpIndex r : tensor.readers) {
      horizon = std::max(horizon, r);
      if (problem.can_clone[r]) horizon = std::max(horizon, horizons.op[r]);
    }
    if (tensor.producer != kNoOp) {
      horizons.op[tensor.producer] =
          std::max(horizons.op[tensor.producer], horizon);
    }
  }
  return horizons;
}

absl::Status MilpTooBigError(int32_t ops, int64_t max_nonzeros) {
  return absl::FailedPreconditionError(
      absl::StrCat("OPTIMAL: the MILP of this ", ops, "-op graph has over ",
                   max_nonzeros, " nonzeros (solver_max_nonzeros); use AUTO"));
}

absl::Status CheckRColumns(const RecomputeProblem& problem,
                           const std::vector<int32_t>& op_horizon,
                           int64_t max_nonzeros) {
  int64_t r_columns = 0;
  for (OpIndex i = 0; i < problem.num_ops(); ++i) {
    if (problem.can_clone[i]) r_columns += std::max(0, op_horizon[i] - i);
  }
  if (r_columns > max_nonzeros) {
    return MilpTooBigError(problem.num_ops(), max_nonzeros);
  }
  return absl::OkStatus();
}

}  // namespace echo::planner
