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
