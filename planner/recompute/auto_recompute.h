// AUTO, our recompute policy: a budgeted search over remat plans
// (remat_problem.h: which ops run again, and where) judged by the simulated
// peak with liveness (remat_state.h's interval model: sources shared by
// several clones count once), by the op costs, with a bounded chain depth.
//
// Moves (remat_search.h), at the current peak slot:
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
// Each mode runs from the empty plan and from the seeds (the ECHO and
// CHEN_SQRT plans, cut to the budget) and returns every candidate: the
// caller replays them and keeps the best, so AUTO is never worse than the
// plain schedule or the seeds.
#ifndef ECHO_PLANNER_RECOMPUTE_AUTO_RECOMPUTE_H_
#define ECHO_PLANNER_RECOMPUTE_AUTO_RECOMPUTE_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "planner/recompute/remat_problem.h"

namespace echo::planner {

class AutoRecompute {
 public:
  struct Options {
    // Exactly one mode: a memory limit, or an overhead budget.
    std::optional<int64_t> memory_limit_bytes;
    double max_overhead_ratio = 0.05;
    int32_t max_depth = 16;
    // 0: greedy + cleanup; 1: + local search (bounded work); 2: more.
    int effort = 1;
    // Plans to start from as well (e.g. ECHO's and CHEN_SQRT's).
    std::vector<RematPlan> seeds;
  };
  struct Report {
    int64_t baseline_peak_bytes = 0;  // model peaks
    int64_t best_peak_bytes = 0;
    double best_cost = 0;
    int32_t scans = 0;
    int32_t greedy_moves = 0;
    int32_t evaluations = 0;
    int32_t local_search_improvements = 0;
    int32_t candidates = 0;
  };

  explicit AutoRecompute(Options options) : options_(std::move(options)) {}
  // Candidate remat sets, best first by the model; the caller replays them.
  absl::StatusOr<std::vector<RematPlan>> Run(const RematProblem& problem);
  const Report& report() const { return report_; }

 private:
  Options options_;
  Report report_;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_AUTO_RECOMPUTE_H_
