// AUTO, our recompute policy: a budgeted search over recompute choices
// (recompute_problem.h: which ops run again, and where) judged by the simulated
// peak with liveness (recompute_state.h's interval model: sources shared by
// several clones count once), by the op costs, with a bounded chain depth.
//
// Moves (recompute_search.h), at the current peak slot:
//  - recompute an op whose stashed output is live there, alone or with the
//    producers its clone would otherwise keep alive (a chain, up to the depth
//    bound);
//  - split: keep an instance live there only up to its last use before the
//    slot and run its op again at the next use after it (an op may run
//    several times, and a stashed tensor may be re-made for late uses only).
// The greedy takes the move with the best reduction of the peak slot per
// unit of cost (in limit mode: min(reduction, excess) / cost), never raising
// the global peak. Graphs over 600 ops rank candidates by bytes per cost,
// evaluate the top 48 exactly and apply several moves per scan.
//
// Memory-limit mode (minimize cost s.t. peak <= limit): greedy down to the
// limit, then cleanup (drop ops and splits, most expensive first, while the
// peak stays under it), then (graphs up to 600 ops) re-insertion local
// search: take out an expensive op, repair with the greedy, keep if cheaper.
// Overhead mode (minimize peak s.t. cost <= ratio * baseline): the greedy
// within the budget back to its lowest peak, cleanup at that peak to free
// budget, repeated while the peak improves (the peak is not monotonic in
// the budget: the lowest one seen is kept).
// Stash objective (overhead mode): the greedy lowers the stash instead of
// the peak slot, from the start and again after the peak descent with the
// budget it left; the AUTO pass adds the minimum cuts within the budget
// (stash_cut.h) to the seeds, so the greedy also spends what they leave.
// A start above the plain peak (which the selection rejects; a cut's clones
// can raise it) is also repaired under it first (recompute_repair.h), then the
// stash greedy spends the budget the repair freed.
// Each mode runs from the empty plan and from the seeds (the ECHO and
// CHEN_SQRT plans, cut to the budget) and returns every candidate: the
// caller replays them and keeps the best, so AUTO is never worse than the
// plain schedule or the seeds.
#ifndef ECHO_PLANNER_RECOMPUTE_SEARCH_AUTO_RECOMPUTE_H_
#define ECHO_PLANNER_RECOMPUTE_SEARCH_AUTO_RECOMPUTE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/recompute_problem.h"

namespace echo::planner {

class AutoRecompute {
 public:
  // Resolved by the AUTO pass (recompute_passes.cc) from
  // RecomputePlanOptions, whose defaults these are.
  struct Options {
    // Exactly one mode: a memory limit, or an overhead budget.
    std::optional<int64_t> memory_limit_bytes;
    double max_overhead_ratio = kDefaultMaxOverheadRatio;
    int32_t max_depth = kDefaultMaxRecomputeDepth;
    // 0: greedy + cleanup; 1: + local search (bounded work); 2: more.
    int effort = 1;
    // Overhead mode, the stash objective: the graph's first backward op
    // (kNoOp: off). The search then also lowers the stash, never raising
    // the peak; RunAuto's selection ranks by stash.
    OpIndex first_backward_op = kNoOp;
    // Plans to start from as well (e.g. ECHO's and CHEN_SQRT's).
    std::vector<RecomputeChoice> seeds;
    // The caller gave up: the search stops and Run returns this status.
    Interrupt interrupted;
    // CopyClasses of the problem for the batch greedy (null: none), shared
    // by the searches of one problem.
    const std::vector<int32_t>* copy_classes = nullptr;
  };

  explicit AutoRecompute(Options options) : options_(std::move(options)) {}
  // Candidate recompute choices, in the order they were found (the seeds
  // first); the caller replays them all and keeps the best.
  absl::StatusOr<std::vector<RecomputeChoice>> Run(
      const RecomputeProblem& problem);
  // After Run: whether the depth bound turned a move down.
  bool depth_bound_hit() const { return depth_bound_hit_; }
  // After Run, one per candidate: its replayed peak where the search's
  // state proved it (RecomputeState::ReplayPeak), so that the caller need
  // not replay it to rank it; -1 where it did not (a peak in a pre slot, a
  // seed the search never held as given: trimmed to the budget).
  const std::vector<int64_t>& replay_peaks() const { return replay_peaks_; }
  // After Run, one per candidate: a lower bound of its replayed peak (its
  // highest main slot), equal to the proven peak where there is one; 0 for
  // a seed the search never held as given. The selection need not replay
  // (or even schedule) a candidate this bound shows cannot win.
  const std::vector<int64_t>& replay_lower_bounds() const {
    return replay_lower_bounds_;
  }
  // After Run, one per candidate: its clone cost as the search summed it
  // (within rounding of the schedule's RecomputeCost), so that the
  // selection can leave out a plan clearly over the budget unscheduled.
  const std::vector<double>& candidate_costs() const {
    return candidate_costs_;
  }
  // After Run: the plain schedule's peak, likewise (-1 where unproven).
  int64_t plain_replay_peak() const { return plain_replay_peak_; }

 private:
  Options options_;
  bool depth_bound_hit_ = false;
  std::vector<int64_t> replay_peaks_;
  std::vector<int64_t> replay_lower_bounds_;
  std::vector<double> candidate_costs_;
  int64_t plain_replay_peak_ = -1;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_SEARCH_AUTO_RECOMPUTE_H_
