// OPTIMAL: the Checkmate MILP (Jain et al., MLSys 2020, docs/design.md section
// 3) solved with CBC. Stage t runs original op t, preceded by any recomputed
// ops; binaries R[t,i] (op i runs in stage t), S[t,x] (tensor x is held at the
// start of stage t) and FREE[t,x,k] (x is freed after op k of stage t);
// continuous U[t,k] (memory while op k of stage t runs); minimize the total
// cost of the recomputations subject to U + workspace <= the memory limit.
// Its memory accounting is ours (docs/design.md section 4): outputs allocated
// before an op runs, inputs freed after their last reader, persistent tensors
// and graph outputs never freed, graph inputs present from the start, so the
// converted schedule replays to at most the MILP's memory.
#ifndef ECHO_PLANNER_RECOMPUTE_PASSES_CHECKMATE_MILP_H_
#define ECHO_PLANNER_RECOMPUTE_PASSES_CHECKMATE_MILP_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "planner/memory_simulator.h"
#include "planner/recompute/plan.h"
#include "planner/recompute/recompute_problem.h"

namespace echo::planner {

class OptimalRecompute {
 public:
  struct Options {
    int64_t memory_limit_bytes = 0;
    double time_limit_seconds = kDefaultSolverTimeLimitSeconds;
    int64_t max_nonzeros = kDefaultSolverMaxNonzeros;
    // A known valid schedule under the limit, given to CBC as a start.
    Schedule warm_start;
  };
  struct Result {
    // Empty when no solution was found.
    Schedule schedule;
    // "optimal" | "time_limit_feasible" | "time_limit_no_solution" |
    // "infeasible".
    std::string status;
    double bound_cost = 0;
  };

  explicit OptimalRecompute(Options options) : options_(std::move(options)) {}
  // FAILED_PRECONDITION when the model would have over max_nonzeros
  // nonzeros, from a count in O(graph) that allocates nothing of the model;
  // Run checks it first.
  absl::Status CheckModelSize(const RecomputeProblem& problem) const;
  absl::StatusOr<Result> Run(const RecomputeProblem& problem);

 private:
  Options options_;
};

}  // namespace echo::planner

#endif  // ECHO_PLANNER_RECOMPUTE_PASSES_CHECKMATE_MILP_H_
