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

bool HasRecomputeColumns(const RecomputeProblem& problem, OpIndex i) {
  const Op& op = problem.graph.op(i);
  return problem.can_clone[i] &&
         op.recompute_outputs == static_cast<int32_t>(op.outputs.size());
}

int32_t FirstHoldStage(const Tensor& tensor) {
  return tensor.producer == kNoOp ? 0 : tensor.producer + 1;
}

MilpColumns CountColumns(const RecomputeProblem& problem,
                         const Horizons& horizons) {
  const Graph& graph = problem.graph;
  MilpColumns columns;
  for (OpIndex i = 0; i < graph.num_ops(); ++i) {
    if (HasRecomputeColumns(problem, i)) {
      columns.recompute += std::max(0, horizons.op[i] - i);
    }
  }
  for (TensorIndex x = 0; x < graph.num_tensors(); ++x) {
    const Tensor& tensor = graph.tensor(x);
    if (IsSticky(tensor) || horizons.tensor[x] < 0) continue;
    // A graph input is held at stage 0 as a constant, not a column.
    const int32_t first_column =
        FirstHoldStage(tensor) + (tensor.producer == kNoOp ? 1 : 0);
    columns.hold += std::max(0, horizons.tensor[x] - first_column + 1);
  }
  return columns;
}

absl::Status CheckModelSize(const RecomputeProblem& problem,
                            const Horizons& horizons, int64_t max_nonzeros) {
  const MilpColumns columns = CountColumns(problem, horizons);
  if (columns.recompute + columns.hold > max_nonzeros) {
    return MilpTooBigError(problem.num_ops(), max_nonzeros);
  }
  return absl::OkStatus();
}

}  // namespace echo::planner
