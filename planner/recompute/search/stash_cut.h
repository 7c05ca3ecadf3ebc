// The stash objective as a minimum cut: which forward ops to run again in the
// backward so that the forward leaves the fewest bytes for it, priced by
// their cost. The formulation of torch's min-cut partitioner (a tensor the
// backward needs is either stashed, paying its bytes, or re-made by its
// producer, whose inputs the backward then needs), with each recomputed op
// paying lambda * cost. For a given lambda the cut is exact; a bisection on
// lambda finds the cheapest-stash set within a cost budget, and every lambda
// gives a Lagrangian bound: no plan within the budget stashes fewer than
// min-cut(lambda) - lambda * budget bytes. Between two cuts the budget falls
// in, the ops the dearer one adds form independent groups, a knapsack of
// which fills the budget.
//
// The model counts what RecomputeState's stash counts (recompute_state.h:
// tensors made in the forward whose original instance is read from the first
// backward op on), each recomputed op running once, so its plans are recompute
// sets that the search can start from; peaks are not modelled (the caller
// replays).
#ifndef ECHO_PLANNER_RECOMPUTE_SEARCH_STASH_CUT_H_
#define ECHO_PLANNER_RECOMPUTE_SEARCH_STASH_CUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/recompute_problem.h"

namespace echo::planner {

// The model the cut solves, and the exact MILP (passes/stash_milp.h) too:
// the forward's ops a plan may re-run (before the first backward op) and
// the tensors they make (not persistent), which the backward needs, and
// which re-run re-makes which. Ops and tensors outside it are -1.
class StashModel {
 public:
  StashModel(const RecomputeProblem& problem,
             const std::vector<uint8_t>& may_recompute,
             OpIndex first_backward_op);

  const RecomputeProblem& problem() const { return problem_; }
  bool modelled(TensorIndex t) const { return tensor_node_[t] >= 0; }
  bool modelled_op(OpIndex o) const { return op_node_[o] >= 0; }
  // Read from the first backward op on.
  bool needed(TensorIndex t) const { return needed_[t] != 0; }
  // t's producer when it is modelled and its re-run re-makes t; else kNoOp.
  OpIndex remaking_op(TensorIndex t) const;
  int64_t plain_stash_bytes() const { return plain_stash_bytes_; }
  double eligible_cost() const { return eligible_cost_; }

  // Per tensor, whether the model stashes it under `recompute`.
  std::vector<uint8_t> Stashed(const RecomputeSet& recompute) const;
  int64_t StashBytesOf(const RecomputeSet& recompute) const;
  // Whether `recompute` re-runs t's producer and that re-makes t in the
  // backward.
  bool ReMadeBy(const RecomputeSet& recompute, TensorIndex t) const;

  // Dense node ids from 2 on (0 and 1 are a network's source and sink):
  // the cut's nodes, and the MILP's columns.
  int32_t op_node(OpIndex o) const { return op_node_[o]; }
  int32_t tensor_node(TensorIndex t) const { return tensor_node_[t]; }
  int32_t num_nodes() const { return num_nodes_; }
  // Bytes to a network's integer capacities (see stash_cut.cc).
  double scale() const { return scale_; }

 private:
  const RecomputeProblem& problem_;
  const Graph& graph_;
  double scale_ = 1;
  int32_t num_nodes_ = 2;
  std::vector<int32_t> op_node_;
  std::vector<int32_t> tensor_node_;
  std::vector<uint8_t> needed_;
  int64_t plain_stash_bytes_ = 0;
  double eligible_cost_ = 0;
};

struct StashCutPlans {
  // The plain plan's stash in the model.
  int64_t plain_stash_bytes = 0;
  // Recompute sets: the cut with the fewest stashed bytes whose cost fits the
  // budget; that cut plus the groups of ops the next dearer cut adds that
  // still fit (a greedy knapsack); the cheapest cut that does not fit.
  // Empty and repeated sets are left out.
  std::vector<RecomputeSet> plans;
  // No plan whose recompute cost is within the budget stashes fewer bytes.
  int64_t lower_bound_bytes = 0;
};

// `first_backward_op`: the graph's first non-forward op (FirstBackwardOp).
// `may_recompute`: per op, whether a plan may run it again (the problem's
// `eligible` for AUTO's plans; `can_clone` for a bound on every recompute
// choice). Bisects lambda (20 max-flows on a graph of the forward's ops and
// tensors); checks `interrupted` between them.
absl::StatusOr<StashCutPlans> StashCutsWithinBudget(
    const RecomputeProblem& problem, const std::vector<uint8_t>& may_recompute,
    OpIndex first_backward_op, double budget, const Interrupt& interrupted);

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_SEARCH_STASH_CUT_H_
