// AUTO's search over recompute choices, on the interval model of
// recompute_state.h: the peak-driven greedy over the moves of search_moves.h,
// the cleanup and the re-insertion local search (auto_recompute.h describes
// the strategy).
#ifndef ECHO_PLANNER_RECOMPUTE_SEARCH_RECOMPUTE_SEARCH_H_
#define ECHO_PLANNER_RECOMPUTE_SEARCH_RECOMPUTE_SEARCH_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "planner/recompute/recompute_problem.h"
#include "planner/recompute/search/recompute_state.h"
#include "planner/recompute/search/search_moves.h"

namespace echo::planner {

class RecomputeSearch {
 public:
  // Chains of recomputed ops stay within `max_depth`. In batch mode, given
  // `copy_classes` (CopyClasses of `problem`, outliving the search), the
  // greedy weighs one copy per class and tries its move on the others.
  RecomputeSearch(const RecomputeProblem& problem, int32_t max_depth,
                  const std::vector<int32_t>* copy_classes = nullptr);
  ~RecomputeSearch();

  RecomputeState& state();
  // Greedy, Cleanup and LocalSearch stop early once `stop` returns true.
  void SetStop(std::function<bool()> stop);
  // Large graphs: several ranked moves per scan, bounded cleanups.
  bool batch() const;

  // Peak-driven greedy: at the peak slot, the move with the best reduction
  // there per unit of cost (in limit mode: min(reduction, excess) / cost),
  // never raising the global peak, until the peak is <= goal.limit (limit
  // mode; returns whether it got there) or no move fits the budget. It logs
  // its steps; RewindToBest goes back to the lowest peak (then cost) seen,
  // or when minimizing the stash, the lowest stash (then peak, then cost),
  // and says whether that differs from the plan the greedy started from.
  bool Greedy(const SearchGoal& goal);
  bool RewindToBest();
  int64_t best_peak() const;
  // Drops recomputed ops and splits, most expensive first, while the peak
  // stays <= limit.
  void Cleanup(int64_t limit);
  // Re-insertion: take out an expensive op, repair to the limit without it,
  // clean up; keep the result when cheaper. At most `max_trials` trials.
  void LocalSearch(int64_t limit, int32_t max_trials);
  // Whether the depth bound turned a move down: a deeper bound could then
  // find another plan.
  bool depth_bound_hit() const;
  // Moves applied on copies of the move weighed (with copy classes), over
  // the search's life.
  int64_t copies_applied() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_SEARCH_RECOMPUTE_SEARCH_H_
